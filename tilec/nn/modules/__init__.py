"""The modules of tilec.nn, one file per family (see tilec/nn/__init__.py)."""
