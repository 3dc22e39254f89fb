"""What a run shows about itself: metric names (`metric_names`, the one list every writer and reader
uses), per-iteration metrics and their sinks (`metrics`, `sinks`), rollout statistics
(`rollout_stats`), health warnings (`health`), logged generations (`generations`), the numbers a run's
records reduce to (`numbers`), and the console (`console`). Below config, run and training: it imports none
of them (a function here takes explicit values, or reads a config's fields without importing its classes).
"""
