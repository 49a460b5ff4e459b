"""Usage history: ingest of heartbeat samples, per-task rings, the history database,
the recorder and the Prometheus metrics."""
