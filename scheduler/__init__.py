"""Pure scheduling policies: values in, decisions out. No I/O, no clocks, no grpc.
The live master and the simulator run this same code."""
