"""The Megha lab: the federation's discrete-event simulation, its baselines and the `tcl sim` federation scenario."""
