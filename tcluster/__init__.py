"""tcluster: a lightweight cluster job manager."""
__version__ = "0.1.0"
