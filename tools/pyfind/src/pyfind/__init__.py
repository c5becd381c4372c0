"""pyfind: small repository search helpers for IDE agents."""

__version__ = "0.1.0"
