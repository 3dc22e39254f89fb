"""Checkpoints, in one place: what a checkpoint folder holds, how it is written, verified, found and loaded.

A run's `checkpoints/iter_NNNNNN/` holds the trainable weights (`model/`, PPO's value model in `value/`),
the optimizer, and the trainer state (scheduler, counters, RNG), with a manifest of every file's size and
sha256 and a `latest` pointer beside the folders. The modules, lowest first:

- `files.py`: the folder layout, manifests, `verify_checkpoint` (the one check every loader runs), the
  `latest` hint, readers' pins and pruning's removal; no torch.
- `weights.py`: saving and restoring exactly the weights training changes (a LoRA adapter as PEFT lays
  it out, or the full state dict), FSDP-sharded or not.
- `locate.py`: the run or checkpoint folder a path names and its verified checkpoint (`open_checkpoint`),
  found without torch for the start-up checks of `rlvr eval --model RUN` and `model.init_from`.
- `run_policy.py`: a run or checkpoint back to the policy it trained (`load_policy_from_run`, the
  `model.init_from` chain), for `rlvr eval`, `rlvr export` and a run started from another's weights.
- `training_state.py`: the whole checkpoint a run saves and resumes from (weights, optimizer, scheduler,
  counters, RNG), written atomically, restored from the newest intact one.

Why inside `rlvr.models`: loading a run's weights is model loading (`rlvr.models.export`, the value model
and the `rlvr.models` API use `weights.py` and `run_policy.py`), and every module here imports only
`rlvr.models`, `rlvr.parallel` and the foundation, so the whole package sits at the models layer
(tests/test_architecture.py); a package of its own beside `rlvr.models` would import it and be imported by
it. This file imports nothing, so `locate.py` and `files.py` stay free of torch.
"""
