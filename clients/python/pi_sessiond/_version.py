"""The package version (also read by pyproject.toml)."""

__version__ = "0.1.0"
