"""The sans-IO state core: events in, a Step of state changes and actions out.
It imports only tcluster/ and scheduler/ (tests/unit/test_layers.py checks)."""
