"""The benchmark scripts, each run as `python benchmarks/NAME.py` and written up under docs/results.

A package so that the tests import them as `benchmarks.NAME` (the repository root is on pytest's
path); a script imports its siblings by package when imported and by file name when run.
"""
