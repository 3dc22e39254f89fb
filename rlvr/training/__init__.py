"""The training loops and their stages, each an explicit function: `rl.train` (the GRPO family and
PPO: `collect`, `advantages`, `values`, `update`, `reference`), `sft.train_sft`,
`expert_iteration.expert_iteration`, and `evaluation.evaluate`; the session every loop runs in
(`session`: folder, model, evaluation, checkpoints). The run infrastructure below them (folder, lock,
checkpoints, resume, set-up) is `rlvr.run`; what they log is `rlvr.observe`; data parallelism is `rlvr.parallel`.
"""
