"""A run's infrastructure: its set-up from a config (`setup`, with the torch-free `preflight`, the
`memory_check` and the SFT data it sizes, `sft_data`), the run folder and its lock (`folder`, `lock`),
and what a resume may change (`resume_policy`). Above config and observe, below training: the session
every loop runs in, which also evaluates, is `rlvr.training.session`. Checkpoints are written and read by
`rlvr.models.checkpoints`, below this package, since loading a run's weights is a model-loading need too.
"""
