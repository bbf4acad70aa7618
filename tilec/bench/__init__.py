"""Benchmarks that run tilec and its baseline side by side in one process."""
