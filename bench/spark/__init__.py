"""bench/spark package."""
