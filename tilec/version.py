"""The compiler version: part of every cache key, so a new tilec never loads stale code."""

__version__ = "0.1.0"
