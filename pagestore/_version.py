"""The package version, one source for pyproject.toml and pagestore.__version__."""

__version__ = "0.2.0"
