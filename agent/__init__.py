"""tcl-agent: the node daemon (registration, the stream to the master, the task state machine,
the outbox), the task supervisor shim, GPUs, joining; runtime/ holds the container backends."""
