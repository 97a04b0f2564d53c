"""The package version (a leaf module: what records it need not import the package)."""

__version__ = "0.1.0"
