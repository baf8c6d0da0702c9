"""throttling package."""
