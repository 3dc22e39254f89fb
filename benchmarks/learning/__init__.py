"""Does training learn: learning curves and accuracies of runs started as a user would, and the scripts that read
finished runs (sweep_summary, contrast_share, spell_steps); bench_runs.py is the helper they share."""
