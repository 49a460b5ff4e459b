"""The master's edge: the gRPC servicers, their codecs to protobuf, and the listeners."""
