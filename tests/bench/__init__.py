"""Every bench/ script, run once at toy size (--quick): benches that cannot rot."""
