"""wal package."""
