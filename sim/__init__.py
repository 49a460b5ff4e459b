"""`tcl sim`: the master's own scheduling round on a simulated cluster, driven by a
discrete-event clock (no sleeping, no threads)."""
