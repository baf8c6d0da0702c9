"""checkpoint package."""
