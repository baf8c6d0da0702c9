"""diskio package."""
