"""tcl-gm: a live Global Manager (issue 25) driving tcluster.federation.gm.GlobalManager."""
