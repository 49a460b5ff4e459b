"""tcl-master. This folder holds the service (service.py with its agents' side and scheduling
loop, the ports features see, and its helpers); the rooms below hold the rest: core/ (the
sans-IO state core), store/, identity/, usage/, features/ (optional, plugged in), edge/
(gRPC), web/ (the dashboard) and app/ (the composition root: main, server, reload)."""
