"""The codecs: domain values to and from protobuf and the store's plain dicts, gRPC channel options, protocol features."""
