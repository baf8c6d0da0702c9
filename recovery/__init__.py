"""recovery package."""
