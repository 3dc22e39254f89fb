"""`rlvr check`: the checks a config can be put through before it trains, each in its own module.

- `one_batch.py`: `rlvr check`, one real rollout batch and one update with the intermediate quantities
  (importance ratio, advantages, KL, completion mask, loss, gradient, dtype, truncation) recomputed by an
  independent route; also the pass/fail rows (`CheckRow`) and table every check prints.
- `mechanism.py`: `rlvr check --mechanism`, the update on fixed candidate responses, no sampling noise.
- `mechanism_record.py`: `rlvr check --mechanism --record DIR`, the mechanism check under two candidate
  conditions, one JSON record each.
- `reward.py`: `rlvr check --reward`, the reward audit: which degenerate completions earn reward.

The names below are imported on first use, so reading one of them loads only the module that defines it.
"""

from __future__ import annotations

from rlvr.utils import lazy_attributes

# name -> the module that defines it
_SOURCES = {
    **dict.fromkeys(("CheckRow", "failed", "format_table", "run_check"), "one_batch"),
    "run_mechanism_check": "mechanism",
    **dict.fromkeys(("ACCEPT", "run_mechanism_experiment"), "mechanism_record"),
    **dict.fromkeys(("REWARD_HEADER", "audit_rows", "run_reward_audit", "write_audit_json"), "reward"),
}

__all__ = sorted(_SOURCES)

__getattr__ = lazy_attributes(__name__, _SOURCES, globals())
