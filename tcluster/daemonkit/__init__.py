"""Plumbing every daemon shares: config files, logging and signals, sd_notify, timeouts, master tours."""
