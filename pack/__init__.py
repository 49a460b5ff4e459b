"""tcl pack: packing studies (Verma et al.) over a scenario or the live cluster."""
