"""Load harness: many simulated agents speaking the real agent protocol over loopback,
and the tools to drive and watch a real `tcl-master` under that load (issue 11)."""
