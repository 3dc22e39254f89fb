"""rlvr beside another implementation: TRL's GRPOTrainer on the same workloads (vs_trl.py defines W1 and W2,
trl_grpo.py TRL's side; gpu.py / gpu.sh and cpu_sides.py run the sides), and vLLM's sampling against decode_loop's."""
