"""The benchmark scripts, grouped by what they measure (benchmarks/README.md), written up under docs/results.

learning/: does training learn (curves, accuracies, and the scripts that read those runs); performance/: time
and memory of rlvr's parts and what a speed lever costs in precision; comparisons/: rlvr beside TRL and vLLM.
Each script runs as `python benchmarks/GROUP/NAME.py` from the repository root; it puts the root on sys.path
first, so it imports its helpers as `benchmarks.GROUP.NAME`, as the tests do (pytest puts the root on the path).
"""
