"""The start-up checks that need no torch (rlvr/run/preflight.py): a bad model name, data file or pairs file
stops every command before torch or transformers is imported, and a good one passes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]

# Runs main() in a fresh interpreter and reports, after the error, which heavy modules had been imported.
CHILD = """
import contextlib, io, json, sys
from rlvr.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "heavy": sorted(m for m in ("torch", "transformers", "peft") if m in sys.modules),
                  "err": err.getvalue()}))
"""


def _run_child(argv: list[str], cwd: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", CHILD, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def data_dir(tmp_path) -> Path:
    (tmp_path / "rows.jsonl").write_text(json.dumps({"question": "say 1", "answer": "1"}) + "\n")
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    (tmp_path / "folder").mkdir()
    return tmp_path


# (command line, a piece of the message that names the problem)
BAD_STARTS = [
    (["train", "model.name=nosuch"], "model.name: model 'nosuch' is not an embedded name"),
    (["train", "model.name=./no/such/folder"], "model.name: model spec './no/such/folder' looks like a path"),
    (["train", "task.name=dataset", "task.options.path=missing.jsonl"],
     "task.options.path: data file 'missing.jsonl' does not exist"),
    (["train", "task.name=gsm8k", "task.options.eval_path=folder", "task.options.train_path=rows.jsonl"],
     "task.options.eval_path: data file 'folder' is a folder"),
    (["train", "task.name=math", "task.options.path=rows.txt"], "task.options.path: data file 'rows.txt' does not"),
    (["sft", "sft.data_path=nope.jsonl"], "sft.data_path 'nope.jsonl' does not exist"),
    (["expert-iter", "model.name=nosuch"], "model.name: model 'nosuch'"),
    (["eval", "--model", "nosuch", "--task", "format_copy"], "model.name: model 'nosuch'"),
    (["eval", "--task", "dataset", "--task-option", "eval_path=gone.csv"], "task.options.eval_path: data file"),
    (["check", "model.name=nosuch"], "model.name: model 'nosuch'"),
    (["sweep", "model.name=nosuch", "--grid", "optim.lr=1e-3,1e-4"], "model.name: model 'nosuch'"),
    (["train", "--resume", "no_such_run"], "no_such_run is not a run folder"),
]


@pytest.mark.parametrize("argv, named", BAD_STARTS, ids=[" ".join(argv) for argv, _ in BAD_STARTS])
def test_a_bad_source_fails_before_torch_or_transformers_is_imported(data_dir, argv, named):
    found = _run_child(argv, data_dir)
    assert found["rc"] == 2 and named in found["err"], found["err"]
    assert found["err"].startswith(f"rlvr {argv[0]}: error:")
    assert found["heavy"] == [], f"{argv} imported {found['heavy']} before the error"


def test_the_child_sees_torch_when_a_command_does_import_it(data_dir, tiny_model_dir):
    """The probe can fail: a config whose sources pass, stopped by an invariant of the full check, has
    imported torch by then."""
    found = _run_child(["train", f"model.name={tiny_model_dir}", "train.eval_top_p=0.5"], data_dir)
    assert found["rc"] == 2 and "train.eval_top_p=0.5 does nothing" in found["err"], found["err"]
    assert "torch" in found["heavy"]


def test_good_sources_pass_the_checks(data_dir, tiny_model_dir, monkeypatch):
    from rlvr.run.preflight import check_sources

    monkeypatch.chdir(data_dir)
    config = load_config(None, [f"model.name={tiny_model_dir}", "task.name=dataset", "task.options.path=rows.jsonl",
                                "sft.data_path=pairs.jsonl"], check=False)
    check_sources(config, sft=True)
    check_sources(config, inference=True)


def test_an_unreadable_data_file_is_named_with_the_reason(data_dir, monkeypatch):
    from rlvr.tasks import check_data_files

    real_open = Path.open

    def refuse(self, *args, **kwargs):
        if self.name == "rows.jsonl":
            raise PermissionError(13, "Permission denied")
        return real_open(self, *args, **kwargs)

    monkeypatch.chdir(data_dir)
    check_data_files("dataset", {"path": "rows.jsonl"})  # readable: no error
    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(ValueError, match=r"task.options.path: data file 'rows.jsonl' cannot be read: Permission "
                                         r"denied"):
        check_data_files("dataset", {"path": "rows.jsonl"})
    check_data_files("format_copy", {"path": "rows.jsonl"})  # format_copy reads no data file: nothing to check


def test_the_unchecked_config_still_refuses_bad_keys_and_types():
    with pytest.raises(ConfigError, match="'lrr' is not in optim"):
        load_config(None, ["optim.lrr=1"], check=False)
    with pytest.raises(ConfigError, match="expected an integer"):
        load_config(None, ["train.iterations=many"], check=False)


@pytest.mark.parametrize("key", ["path", "train_path", "eval_path"])
def test_every_data_file_option_of_the_question_tasks_is_checked(data_dir, monkeypatch, key):
    from rlvr.tasks import check_data_files

    monkeypatch.chdir(data_dir)
    for family in ("gsm8k", "math", "dataset"):
        with pytest.raises(FileNotFoundError, match=f"task.options.{key}: data file 'gone.jsonl' does not exist"):
            check_data_files(family, {key: "gone.jsonl"})
    (data_dir / "rows.txt").write_text("a\n")
    with pytest.raises(ValueError, match=f"task.options.{key}: data file 'rows.txt': unknown format '.txt'"):
        check_data_files("gsm8k", {key: "rows.txt"})


def test_check_sources_names_the_model_and_the_run_it_starts_from(data_dir, tiny_model_dir, monkeypatch):
    from rlvr.run.preflight import check_sources

    monkeypatch.chdir(data_dir)
    with pytest.raises(ConfigError, match="model.name: model 'nosuch' is not an embedded name"):
        check_sources(load_config(None, ["model.name=nosuch"], check=False))
    with pytest.raises(ConfigError, match="model.name: model folder .*folder has no config.json"):
        check_sources(load_config(None, ["model.name=folder"], check=False))
    with pytest.raises(ConfigError, match="model.init_from: .*no-run is neither a run folder"):
        check_sources(load_config(None, [f"model.name={tiny_model_dir}", "model.init_from=no-run"], check=False))
    check_sources(load_config(None, [f"model.name={tiny_model_dir}"], check=False))  # the control: no error
