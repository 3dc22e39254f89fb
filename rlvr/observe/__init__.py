"""What a run shows about itself: metric names (`metric_names`, the one list every writer and reader
uses), per-iteration metrics and their sinks (`metrics`, `sinks`), rollout statistics
(`rollout_stats`), health warnings (`health`), logged generations (`generations`), and the console
(`console`).
"""
