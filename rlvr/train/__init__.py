"""Training loops: `rl.train` (GRPO family and PPO). Each loop is an explicit function."""
