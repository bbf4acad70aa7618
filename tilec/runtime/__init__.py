"""Runtime: compiled Functions, their kernel caches, and argument handling."""
