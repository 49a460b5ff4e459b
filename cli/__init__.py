"""tcl: the command line (a lazy command registry in main.py, one module per command group),
the client and credentials, and `tcl dev`'s composition root (devmode, devsecure)."""
