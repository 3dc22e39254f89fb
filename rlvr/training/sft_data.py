"""`sft.data_path`'s prompt / response pairs, read for `rlvr sft` and for its memory estimate.

Its own module because the memory check (`rlvr.run.memory_check`, which the run setup imports)
sizes an SFT run by the data's longest pair, and `rlvr.training.sft` builds on that run setup.
"""

from __future__ import annotations

from rlvr.config import Config
from rlvr.run.preflight import check_sft_data
from rlvr.utils import read_jsonl_numbered


def read_pairs(config: Config) -> list[dict]:
    """Rows of the jsonl as {'prompt', 'response', 'ground_truth'} (ground truth may be None)."""
    s = config.sft
    path = check_sft_data(config)
    pairs = []
    for number, row in read_jsonl_numbered(path, what="sft.data_path file"):
        for key in (s.prompt_field, s.response_field):
            if key not in row:
                raise ValueError(f"{path} line {number}: no field {key!r} (fields: {', '.join(row)})")
        pairs.append({"prompt": row[s.prompt_field], "response": row[s.response_field],
                      "ground_truth": row.get(s.ground_truth_field)})
    return pairs[: s.max_examples] if s.max_examples else pairs
