"""Inside the jail: `candidate` runs the model's program and answers calls, `tests` runs the tests against it.

Two processes per problem, each started by `code_jail.run_tests` (in bubblewrap where it works) and each
locked down by `sandbox.enter` before it runs anything it was sent. The candidate process holds only the
two pipes to the tests process: it never sees the tests' source, the verdict or the channel to the
parent. The tests process runs only the problem's own tests (trusted data), calls the candidate by
name through the pipes, gets back plain values (`code_values`), compares them itself, and reports one
outcome per test to the parent. Whatever the model's code does to its own interpreter (patching
`builtins`, `sys.exit(0)`, printing fake results, an `__eq__` that is always true) stays in its own
process and decides nothing. Standard library only; run as `python -I -S code_runner.py ROLE ...`.
"""

import builtins
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import code_values  # noqa: E402 - from this folder, by path: the jail holds no rlvr package
import sandbox  # noqa: E402

BUILTIN_ERRORS = {name: value for name, value in vars(builtins).items()
                  if isinstance(value, type) and issubclass(value, Exception)}


def _silence() -> tuple[int, int]:
    """Private copies of fds 0 and 1 for the protocol; 0, 1 and 2 then point at /dev/null."""
    first, second = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    return first, second


def candidate_main(temp_dir: str, memory_mb: int) -> None:
    requests, replies = _silence()
    job = code_values.read_frame(requests)
    sandbox.enter(temp_dir, memory_mb)  # no reference kept: nothing here for the model's code to reach
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    load_error = None
    try:
        exec(compile(job["program"], "<completion>", "exec"), namespace)  # noqa: S102 - the jail is the wall
    except BaseException as exc:  # noqa: BLE001 - sys.exit included: the program did not load
        load_error = f"{type(exc).__name__}: {str(exc)[:200]}"
    while True:
        try:
            _, name, args, kwargs = code_values.read_frame(requests)
        except EOFError:
            return
        if load_error is not None:
            reply = ["raise", "RuntimeError", f"the program did not load: {load_error}"]
        else:
            try:
                result = namespace[name](*code_values.decode(args), **code_values.decode(kwargs))
                reply = ["ok", code_values.encode(result)]
            except BaseException as exc:  # noqa: BLE001 - told to the tests, which decide
                reply = ["raise", type(exc).__name__, str(exc)[:200]]
        try:
            code_values.write_frame(replies, reply)
        except code_values.Unsendable as exc:
            code_values.write_frame(replies, ["raise", "TypeError", str(exc)[:200]])


class CandidateGone(BaseException):
    """The candidate timed out, died or broke the protocol: no `except Exception` in a test swallows it."""


class StepTimeout(BaseException):
    pass


class Candidate:
    """The tests' handle on the candidate process: `call(name, args, kwargs)` returns a plain value."""

    def __init__(self, to_fd: int, from_fd: int) -> None:
        self.to_fd, self.from_fd = to_fd, from_fd
        self.gone = None  # why no further call is made
        self.deadline = 0.0

    def _wait(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or not select.select([self.from_fd], [], [], remaining)[0]:
            self.gone = "timeout"
            raise CandidateGone("timeout")

    def call(self, name, args, kwargs):
        if self.gone:
            raise CandidateGone(self.gone)
        try:
            message = ["call", name, code_values.encode(list(args)), code_values.encode(dict(kwargs))]
        except code_values.Unsendable as exc:
            raise TypeError(f"argument is not plain data: {exc}") from None
        try:
            code_values.write_frame(self.to_fd, message)
            reply = code_values.read_frame(self.from_fd, self._wait)
        except (OSError, EOFError):
            self.gone = "crashed"
        except code_values.Unsendable:
            self.gone = "crashed"  # its stream cannot be trusted any more
        if self.gone:
            raise CandidateGone(self.gone)
        if type(reply) is list and len(reply) == 2 and reply[0] == "ok":
            return code_values.decode(reply[1])
        if type(reply) is list and len(reply) == 3 and reply[0] == "raise":
            raise BUILTIN_ERRORS.get(str(reply[1]), RuntimeError)(str(reply[2])[:200])
        self.gone = "crashed"
        raise CandidateGone("crashed")


def _on_alarm(signum, frame):
    raise StepTimeout("test ran past its limit")


def tests_main(temp_dir: str, memory_mb: int, to_candidate: int, from_candidate: int) -> None:
    jobs, results = _silence()
    job = code_values.read_frame(jobs)
    sandbox.enter(temp_dir, memory_mb)
    candidate = Candidate(to_candidate, from_candidate)
    namespace = {"__name__": "__rlvr_tests__", "__builtins__": builtins}
    outcomes = []
    setup_error = ""
    try:
        exec(compile(job["setup"], "<setup>", "exec"), namespace)  # noqa: S102 - the problem's own code
    except BaseException as exc:  # noqa: BLE001
        setup_error = f"setup: {type(exc).__name__}: {str(exc)[:200]}"

    def proxy(*args, **kwargs):
        return candidate.call(job["entry_point"], args, kwargs)

    namespace["candidate"] = namespace[job["entry_point"]] = proxy
    signal.signal(signal.SIGALRM, _on_alarm)
    seconds = float(job["test_seconds"])
    for source, is_test in job["steps"]:
        candidate.deadline = time.monotonic() + seconds
        signal.setitimer(signal.ITIMER_REAL, seconds + 0.5)
        outcome, detail = "passed", ""
        try:
            exec(compile(source, "<test>", "exec"), namespace)  # noqa: S102
        except CandidateGone as exc:
            outcome, detail = str(exc), ""
        except StepTimeout:
            outcome = "timeout"
        except AssertionError:
            outcome = "failed"
        except BaseException as exc:  # noqa: BLE001
            outcome, detail = "error", f"{type(exc).__name__}: {str(exc)[:200]}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if candidate.gone and outcome == "passed":  # a test that swallowed the candidate's failure
            outcome = candidate.gone
        if is_test:
            outcomes.append([outcome, detail])
    code_values.write_frame(results, {"outcomes": outcomes, "setup_error": setup_error})


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "candidate":
        candidate_main(sys.argv[2], int(sys.argv[3]))
    elif role == "tests":
        tests_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        raise SystemExit(f"unknown role {role!r}; valid roles: candidate, tests")
