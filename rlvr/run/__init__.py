"""A run's infrastructure: the session every loop runs in (`session`), its set-up from a config
(`setup`, with the torch-free `preflight` and the `memory_check`), the run folder and its lock
(`folder`, `lock`), checkpoints (`checkpoint`), what a resume may change (`resume_policy`), and the
final and best numbers of a finished run (`numbers`).
"""
