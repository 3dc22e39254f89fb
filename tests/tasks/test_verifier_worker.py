"""The verifier worker's second wall: inside it, writes outside its temporary folder, sockets, new
processes, native calls and raising the limits are refused, while legitimate checks still work; and
a worker killed for a timeout is replaced by its warm spare, outside any check's time limit; a worker
that cannot start is one error, and no worker or spare outlives its owner."""

import os
import socket
import time

import pytest

from rlvr.tasks.verification.worker import VerifierWorker

PROBES = "tests.verifier_probes"


@pytest.fixture(scope="module")
def worker():
    probe_worker = VerifierWorker(extra_functions=PROBES)
    yield probe_worker
    probe_worker.close()


@pytest.fixture
def listener():
    """A listening localhost socket; a connection attempt from the worker would be queued on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    with pytest.raises(BlockingIOError):  # nothing ever connected
        server.accept()
    server.close()


def refused(result, what: str) -> bool:
    return result.status == "error" and "sandbox refused" in result.detail and what in result.detail


@pytest.mark.parametrize("probe", ["write_file", "run_process", "os_system", "raw_fork_exec", "native_call"])
def test_side_effects_are_refused_and_leave_no_file(worker, tmp_path, probe):
    canary = tmp_path / f"{probe}.canary"
    result = worker.call(probe, str(canary), timeout=30)
    assert result.status == "error" and "sandbox refused" in result.detail, (probe, result)
    assert not canary.exists()


def test_each_refusal_names_what_was_refused(worker, tmp_path):
    assert refused(worker.call("write_file", str(tmp_path / "x"), timeout=30), "open for writing")
    assert refused(worker.call("run_process", str(tmp_path / "x"), timeout=30), "subprocess.Popen")
    assert refused(worker.call("os_system", str(tmp_path / "x"), timeout=30), "os.system")
    assert refused(worker.call("raw_fork_exec", str(tmp_path / "x"), timeout=30), "fork_exec")
    assert refused(worker.call("fork", timeout=30), "os.fork")
    assert refused(worker.call("native_call", str(tmp_path / "x"), timeout=30), "ctypes")
    assert refused(worker.call("raise_limits", timeout=30), "resource.setrlimit")


def test_a_swallowed_refusal_is_still_reported(worker, tmp_path):
    """Scorers catch every exception; the worker reports the refusal anyway, so it is never a score."""
    canary = tmp_path / "quiet.canary"
    result = worker.call("write_file_quietly", str(canary), timeout=30)
    assert refused(result, "open for writing") and not canary.exists()


def test_an_existing_file_opened_read_write_is_refused(worker, tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("keep")
    assert refused(worker.call("write_with_os_open", str(victim), timeout=30), "open for writing")
    assert victim.read_text() == "keep"


def test_removing_a_file_outside_is_refused(worker, tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("keep")
    assert refused(worker.call("remove_file", str(victim), timeout=30), "os.remove")
    assert victim.read_text() == "keep"


def test_no_socket_reaches_a_listening_port(worker, listener):
    result = worker.call("connect", listener.getsockname()[1], timeout=30)
    assert refused(result, "socket.")


def test_the_temporary_folder_is_writable_and_limits_are_set(worker):
    """The wall is not "refuse everything": the worker's own folder works, and the limits hold."""
    from rlvr.tasks.verification import sandbox

    result = worker.call("write_in_temp_dir", "scratch.txt", timeout=30)
    assert result.status == "ok" and result.value == "escaped"
    limits = worker.call("limits", timeout=30).value
    assert limits["RLIMIT_CPU"] == sandbox.CPU_SECONDS
    assert limits["RLIMIT_FSIZE"] == sandbox.FILE_BYTES
    assert limits["RLIMIT_NOFILE"] == sandbox.OPEN_FILES
    assert limits["RLIMIT_CORE"] == 0 and limits["RLIMIT_NPROC"] == 0
    assert limits["RLIMIT_AS"] == int(os.environ.get("RLVR_VERIFIER_MEMORY_MB", "4096")) * 1024 * 1024


def test_legitimate_checks_work_inside_the_sandbox(worker):
    """math-verify and a sympy-based reasoning-gym scorer import lazily and parse; none is refused."""
    assert worker.call("math_verify_equal", "$x+1$", "$1+x$", timeout=60).value is True
    assert worker.call("math_verify_equal", "$\\frac{1}{2}$", "$0.5$", timeout=60).value is True
    entry = {"answer": "x**2/2 + C", "metadata": {"source_dataset": "simple_integration", "variable": "x",
                                                   "integrand": "x"}}
    result = worker.call("reasoning_gym_score", "simple_integration", {}, "x**2/2 + C", entry, timeout=60)
    assert result.status == "ok" and result.value["score"] == 1.0, result
    wrong = worker.call("reasoning_gym_score", "simple_integration", {}, "x**2 + C", entry, timeout=60)
    assert wrong.status == "ok" and wrong.value["score"] == 0.0


@pytest.mark.parametrize("event, args, allowed", [
    ("open", ("/etc/x", "w", 0o1101), False),
    ("open", ("/etc/passwd", "r", 0o2000000), True),
    ("open", ("{tmp}/a", "w", 0o1101), True),
    ("open", ("{tmp}/../escape", "w", 0o1101), False),  # resolved before the check
    ("open", (1, "w", 1), False),  # a descriptor: could be the reply pipe
    ("open", ("/etc/x", None, os.O_WRONLY), False),  # os.open
    ("open", ("/etc/x", None, os.O_RDWR), False),
    ("open", ("/etc/x", "r+", os.O_RDWR), False),
    ("os.rename", ("{tmp}/a", "/etc/a", None, None), False),
    ("os.remove", ("{tmp}/a", None), True),
    ("os.remove", ("a", 3), False),  # relative to a directory descriptor
    ("os.remove", ("{tmp}/a", -1), True),  # what CPython's os.remove reports: -1, no descriptor
    ("os.mkdir", ("{tmp}/d", 511, -1), True),
    ("os.rmdir", ("/etc/d", -1), False),
    ("socket.connect", (None, ("127.0.0.1", 80)), False),
    ("os.posix_spawn", ("/bin/sh", [], {}), False),
    ("subprocess.Popen", ("touch", ["touch", "x"], None, None), False),
    ("os.system", (b"touch x",), False),
    ("import", ("ctypes", None, [], [], []), False),
    ("compile", ("1 + 1", "<string>"), True),  # scorers that evaluate canonical text must still work
    ("sys.settrace", (None,), False),  # a tracer would see the hook's own frame and its closure
    ("sys.setprofile", (None,), False),
])
def test_refusal_policy(tmp_path, event, args, allowed):
    from rlvr.tasks.verification import sandbox

    temp_dir = os.path.realpath(tmp_path)
    args = tuple(a.replace("{tmp}", temp_dir) if isinstance(a, str) else a for a in args)
    assert (sandbox.refusal(event, args, temp_dir) is None) is allowed


def test_a_timed_out_worker_is_replaced_in_the_background(monkeypatch):
    """After a timeout the spare takes over and a new one starts, with no call waiting on them; a call's
    limit (1 s) never includes a start, made slower than that limit on purpose (2 s import): the
    second timeout promotes a spare that is still importing, and the call after it waits, untimed."""
    monkeypatch.setenv("RLVR_TEST_WORKER_SLOW_START", "2")
    probe_worker = VerifierWorker(extra_functions=PROBES)
    try:
        probe_worker.warm_up()
        timed_out = probe_worker.call("sleep", 60.0, timeout=0.5)
        assert timed_out.status == "timeout" and probe_worker.restarts == 1
        assert probe_worker.wait_for_restart()  # a live worker, and no call was made to get it
        answered = probe_worker.call("echo", [1, 2], timeout=1.0)
        assert answered.status == "ok" and answered.value == [1, 2]
        probe_worker.call("sleep", 60.0, timeout=0.5)
        slow_start = probe_worker.call("echo", "again", timeout=1.0)  # waits for the restart, untimed
        assert slow_start.status == "ok" and slow_start.value == "again"
    finally:
        probe_worker.close()


def test_a_worker_near_its_cpu_time_limit_is_replaced_before_it_is_killed(monkeypatch):
    import rlvr.tasks.verification.worker as worker_module

    monkeypatch.setattr(worker_module, "CPU_RECYCLE_SECONDS", 0.0)  # every reply counts as "used up"
    probe_worker = VerifierWorker(extra_functions=PROBES)
    try:
        result = probe_worker.call("echo", "x", timeout=30)
        assert result.status == "ok" and result.value == "x"  # this call's answer is kept
        assert probe_worker.restarts == 1 and probe_worker.wait_for_restart()
    finally:
        probe_worker.close()


def test_a_check_past_its_limit_is_cut_off_and_never_answers_a_later_call():
    """The late check's worker is killed: its reply (3.0, after 3 s) must never be taken for the
    answer to the calls that follow, and the limit, not the check, decides when the call returns."""
    probe_worker = VerifierWorker(extra_functions=PROBES)
    try:
        probe_worker.warm_up()
        late = probe_worker.call("sleep", 3.0, timeout=0.5)
        assert late.status == "timeout" and late.value is None and "ran past 0.5 s" in late.detail
        for value in ("first", "second"):
            answered = probe_worker.call("echo", value, timeout=30)
            assert answered.status == "ok" and answered.value == value
    finally:
        probe_worker.close()


def test_the_scorer_sees_the_canonical_text_never_the_answer_as_written(worker):
    """countdown's scorer reads every integer in the text it is given: a comment holding a 1 makes the
    numbers used differ from the ones given (score 0.05). The canonical rendering drops the comment."""
    import reasoning_gym

    entry = reasoning_gym.create_dataset("countdown", size=1, seed=0)[0]
    answer = entry["answer"] + "  # 1"
    assert reasoning_gym.create_dataset("countdown", size=1, seed=0).score_answer(answer, entry) == 0.05
    result = worker.call("reasoning_gym_score", "countdown", {}, answer, entry, timeout=60)
    assert result.status == "ok" and result.value["score"] == 1.0, result
    text = result.value["text"]
    assert "#" not in text and eval(text) == eval(entry["answer"])  # noqa: S307 - the dataset's own arithmetic
    # An entry that a composite dataset forwards to countdown is shaped by countdown, whatever name it came through.
    forwarded = {**entry, "metadata": {**entry["metadata"], "source_dataset": "countdown"}}
    result = worker.call("reasoning_gym_score", "spell_backward", {}, "open('x')", forwarded, timeout=60)
    assert result.status == "ok" and "refused" in result.value, result


def _gone(pid: int) -> bool:
    """True when process `pid` has ended (no such process, or a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _all_gone(pids, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not all(_gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_after_a_timeout_the_next_check_does_not_pay_the_start_up(monkeypatch):
    """Every start takes 3 s (a slow import); the spare pays it in the background, while the batch
    goes on, so the check after a timeout answers at once instead of waiting out a fresh start."""
    probe_worker = VerifierWorker(extra_functions=PROBES)
    monkeypatch.setenv("RLVR_TEST_WORKER_SLOW_START", "3")
    try:
        probe_worker.warm_up()  # 3 s, then the spare starts behind it
        time.sleep(5.0)  # the batch's other work; the spare imports meanwhile
        assert probe_worker.call("sleep", 60.0, timeout=0.5).status == "timeout"
        started = time.monotonic()
        answered = probe_worker.call("echo", "next", timeout=30)
        waited = time.monotonic() - started
        assert answered.status == "ok" and answered.value == "next"
        assert waited < 1.5, f"the check after a timeout waited {waited:.1f} s for a worker to start"
    finally:
        probe_worker.close()


def test_the_spare_takes_over_after_a_timeout_and_a_new_one_starts_behind_it():
    probe_worker = VerifierWorker(extra_functions=PROBES)
    try:
        probe_worker.warm_up()
        active, spare = probe_worker.pids()
        assert probe_worker.call("sleep", 60.0, timeout=0.5).status == "timeout"
        promoted, new_spare = probe_worker.pids()
        assert promoted == spare and new_spare not in (active, spare)
        assert _all_gone([active], 10)  # the timed-out one was killed
        assert probe_worker.call("echo", "x", timeout=30).value == "x" and probe_worker.pids()[0] == spare
    finally:
        probe_worker.close()


def test_a_worker_that_cannot_import_its_library_is_one_clear_error(capfd):
    probe_worker = VerifierWorker(extra_functions=PROBES)
    try:
        first = probe_worker.call("needs_missing_library", timeout=30)
        assert first.status == "error" and first.detail.startswith("verifier worker did not start: ")
        assert "ModuleNotFoundError: No module named 'rlvr_no_such_library'" in first.detail
        started = time.monotonic()
        later = [probe_worker.call("needs_missing_library", timeout=30) for _ in range(5)]
        assert time.monotonic() - started < 0.5  # no new start tried for them
        for result in later:
            assert result.status == "error" and "unavailable: it could not start earlier" in result.detail
            assert "No module named 'rlvr_no_such_library'" in result.detail
        assert probe_worker.pids() == []
        err = capfd.readouterr().err
        assert err.count("did not start") == 1 and "rlvr_no_such_library" in err  # said once
        assert probe_worker.call("echo", "still", timeout=30).value == "still"  # checks needing none of it run
    finally:
        probe_worker.close()


def test_a_worker_that_never_gets_ready_fails_once_then_fast(monkeypatch):
    """A start that hangs (60 s import, 1 s allowance) costs its allowance once, not once per check."""
    import rlvr.tasks.verification.worker as worker_module

    probe_worker = VerifierWorker(extra_functions=PROBES)
    monkeypatch.setenv("RLVR_TEST_WORKER_SLOW_START", "60")
    monkeypatch.setattr(worker_module, "STARTUP_SECONDS", 1.0)
    try:
        first = probe_worker.call("echo", 1, timeout=30)
        assert first.status == "error" and "not ready after 1 s" in first.detail
        started = time.monotonic()
        later = [probe_worker.call("echo", 1, timeout=30) for _ in range(3)]
        assert time.monotonic() - started < 0.5, "each check waited out the start allowance again"
        assert all(result.status == "error" and "unavailable" in result.detail for result in later)
    finally:
        probe_worker.close()


def _with_a_sleeping_spare(probe_worker, monkeypatch) -> list[int]:
    """Warm up, then time out once after making starts slow: the new spare sits in a 30 s import."""
    probe_worker.warm_up()
    monkeypatch.setenv("RLVR_TEST_WORKER_SLOW_START", "30")
    assert probe_worker.call("sleep", 60.0, timeout=0.5).status == "timeout"
    pids = probe_worker.pids()
    assert len(pids) == 2
    return pids


def test_close_stops_the_worker_and_its_spare(monkeypatch):
    probe_worker = VerifierWorker(extra_functions=PROBES)
    try:
        pids = _with_a_sleeping_spare(probe_worker, monkeypatch)
    finally:
        probe_worker.close()
    assert probe_worker.pids() == [] and _all_gone(pids, 2)


def test_no_worker_or_spare_outlives_the_process_that_started_them():
    """A script that never calls close: at its exit the worker and the spare (asleep in its import) end."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    script = (
        "import os\n"
        "from rlvr.tasks.verification.worker import VerifierWorker\n"
        f"worker = VerifierWorker(extra_functions={PROBES!r})\n"
        "worker.warm_up()\n"
        "os.environ['RLVR_TEST_WORKER_SLOW_START'] = '30'\n"
        "assert worker.call('sleep', 60.0, timeout=0.5).status == 'timeout'\n"
        "print(*worker.pids(), flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(repo)}
    env.pop("RLVR_TEST_WORKER_SLOW_START", None)
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2 and _all_gone(pids, 5)


def test_rebinding_the_sandbox_modules_rules_and_helpers_switches_nothing_off(tmp_path):
    """The hook runs on a private copy of its rules: a scorer that rebinds the module's names, os.path.realpath
    and builtins.isinstance (each of which the old hook read at every event) is still refused."""
    probe_worker = VerifierWorker(extra_functions=PROBES)  # its own worker: the probe leaves the module rebound
    try:
        canary = tmp_path / "rebound.canary"
        assert refused(probe_worker.call("rebind_rules_then_write", str(canary), timeout=30), "open for writing")
        assert not canary.exists()
        assert refused(probe_worker.call("rebind_rules_then_run", str(canary), timeout=30), "os.system")
        assert not canary.exists()
    finally:
        probe_worker.close()


def test_tracing_which_would_see_the_hooks_frame_is_refused(worker):
    assert refused(worker.call("trace_the_hook", timeout=30), "sys.settrace")
