"""Training loops: `rl.train` (GRPO family). Each loop is an explicit function."""
