"""Time and memory of rlvr's own parts (decoding steps, rollouts, the update, the log-prob path) and what a speed
lever costs in precision (bf16 base products, int8 linears)."""
