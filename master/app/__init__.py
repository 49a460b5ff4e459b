"""The master daemon's composition root: `tcl-master` (main), SIGHUP reload, serving and leading (server), the wiring of service and features (assemble), `tcl-master status`."""
