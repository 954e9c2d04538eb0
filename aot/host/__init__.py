"""Building and running packages on the host machine (for verify, tests and the Python API)."""
