"""The container's supervisor (kerasjob_trainer.core.supervisor): in-place restarts after 42/43,
their bound, signals, every incarnation's log, and the reason of an exit 78 left in the
termination message. Small Python children, no TensorFlow."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kerasjob_contract import (
    INVALID_CONFIG_REASON_CHARS,
    LOG_INCARNATION_RE,
    TERMINATION_MESSAGE_BYTES,
    ExitCode,
    invalid_config_reason,
)
from kerasjob_trainer.core import supervisor

BANNER = re.compile(LOG_INCARNATION_RE, re.M)


def script(tmp_path: Path, body: str) -> list[str]:
    """A child that knows its incarnation (KERASJOB_INCARNATION) as `n`."""
    path = tmp_path / "child.py"
    path.write_text(
        "import os, sys, time\nn = int(os.environ['KERASJOB_INCARNATION'])\n"
        + textwrap.dedent(body)
    )
    return [sys.executable, str(path)]


def run(tmp_path: Path, body: str, limit: str = "3", **env: str) -> int:
    return supervisor.Supervisor(
        script(tmp_path, body),
        checkpoint_dir=str(tmp_path / "ckpt"),
        env={
            **os.environ,
            "KERASJOB_ROLE": "worker",
            "KERASJOB_INDEX": "1",
            "KERASJOB_IN_PLACE_RESTARTS": limit,
            **env,
        },
    ).run()


def logs(tmp_path: Path) -> list[str]:
    directory = tmp_path / "ckpt" / "logs" / "worker-1"
    return [p.read_text() for p in sorted(directory.iterdir())]


def test_a_disruption_exit_restarts_the_trainer_in_place_with_a_banner_and_a_log_each(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code = run(
        tmp_path,
        """
        print(f"kerasjob: step {n}/9")
        print(f"to stderr {n}", file=sys.stderr)
        sys.exit(43 if n == 1 else 42 if n == 2 else 0)
        """,
    )
    out = capfd.readouterr()
    assert code == 0
    assert [int(m.group(1)) for m in BANNER.finditer(out.out)] == [1, 2, 3]
    assert "restarted in place after exit 43: a peer was lost" in out.out
    assert "restarted in place after exit 42" in out.out
    assert out.out.index("kerasjob: step 1/9") < out.out.index("incarnation 2 of worker-1")
    assert "to stderr 2" in out.err
    files = logs(tmp_path)
    assert len(files) == 3
    for n, text in enumerate(files, 1):
        assert f"kerasjob: incarnation {n} of worker-1 started" in text
        assert f"kerasjob: step {n}/9" in text and f"to stderr {n}" in text


def test_numbering_goes_on_across_containers_of_one_replica(tmp_path: Path) -> None:
    """A re-created Pod (same replica) continues the previous Pod's numbers."""
    assert run(tmp_path, "sys.exit(0)") == 0
    assert run(tmp_path, "print('second', n); sys.exit(1)") == 1
    assert "second 2" in logs(tmp_path)[1]


def test_restarts_without_a_step_are_bounded_then_the_code_ends_the_pod(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code = run(tmp_path, "sys.exit(43)", limit="2")
    out = capfd.readouterr().out
    assert code == ExitCode.PEER_LOST
    assert len(BANNER.findall(out)) == 2
    assert "2 incarnation(s) in a row without a training step" in out


def test_progress_resets_the_bound(tmp_path: Path) -> None:
    # Steps in every other incarnation: never 2 unproductive ones in a row.
    body = """
    if n % 2:
        print("kerasjob: step 5/9")
    sys.exit(43 if n < 6 else 0)
    """
    assert run(tmp_path, body, limit="2") == 0
    assert len(logs(tmp_path)) == 6


def test_zero_means_never_in_place(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, "print('kerasjob: step 1/9'); sys.exit(42)", limit="0") == 42
    assert len(logs(tmp_path)) == 1
    assert "exit 42: in-place restarts are off" in capfd.readouterr().out


@pytest.mark.parametrize("code", [0, 1, 78, 137])
def test_other_codes_end_the_supervisor_at_once(tmp_path: Path, code: int) -> None:
    assert run(tmp_path, f"sys.exit({code})") == code
    assert len(logs(tmp_path)) == 1


def test_a_signal_kills_child_maps_to_128_plus_n(tmp_path: Path) -> None:
    assert run(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)") == 137


def test_sigterm_to_the_container_ends_it_without_another_incarnation(tmp_path: Path) -> None:
    child = script(
        tmp_path,
        """
        import signal
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))
        print("kerasjob: step 1/9", flush=True)
        time.sleep(60)
        """,
    )
    code = (
        "import sys; from kerasjob_trainer.core import supervisor; "
        f"sys.exit(supervisor.supervise({child!r}, checkpoint_dir={str(tmp_path)!r}))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KERASJOB_ROLE": "worker", "KERASJOB_INDEX": "0"},
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("kerasjob: step"):
            break
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == ExitCode.PREEMPTED_SAVED
    assert time.monotonic() - t0 < 5
    assert len(list((tmp_path / "logs" / "worker-0").iterdir())) == 1


def test_old_logs_are_pruned_and_a_log_is_capped(tmp_path: Path) -> None:
    for n in range(1, 6):
        (tmp_path / f"{n:04d}.log").write_text("x")
    (tmp_path / "notes.txt").write_text("kept")
    number, path = supervisor.next_log(str(tmp_path), keep=3)
    assert number == 6 and path == str(tmp_path / "0006.log")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0004.log", "0005.log", "notes.txt"]

    log = supervisor.LogFile(path, limit=10)
    log.write(b"12345\n")
    log.write(b"67890\n")  # over the cap: a note instead, nothing more after it
    log.write(b"more\n")
    log.close()
    assert Path(path).read_bytes().startswith(b"12345\nkerasjob: log file full (10 bytes)")
    assert b"more" not in Path(path).read_bytes()


def test_no_usable_log_directory_still_runs(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert supervisor.next_log(str(blocker / "logs")) == (1, None)
    assert supervisor.next_log(None) == (1, None)


def test_a_bad_bound_is_a_configuration_error() -> None:
    assert supervisor.in_place_limit({}) == 3
    assert supervisor.in_place_limit({"KERASJOB_IN_PLACE_RESTARTS": " 0 "}) == 0
    with pytest.raises(ValueError, match="KERASJOB_IN_PLACE_RESTARTS must be a whole number"):
        supervisor.in_place_limit({"KERASJOB_IN_PLACE_RESTARTS": "-1"})


def _rejected(tmp_path: Path, body: str, *, before: str = "") -> tuple[int, str]:
    """Run `body` supervised with a termination log of its own (holding `before`, as the
    kubelet's empty file or what the chief wrote there): the exit code and the log after."""
    log = tmp_path / "termination-log"
    log.write_text(before)
    code = run(tmp_path, body, KERASJOB_TERMINATION_LOG=str(log))
    return code, log.read_text()


def test_an_exit_78_leaves_the_trainers_reason_after_the_chiefs_metrics(tmp_path: Path) -> None:
    """The child (the chief) writes its last metrics to the termination log and exits 78
    with its one line; the supervisor adds the line after them: the operator reads it."""
    code, message = _rejected(
        tmp_path,
        """
        with open(os.environ["KERASJOB_TERMINATION_LOG"], "w") as f:
            f.write("kerasjob_epoch 0\\nkerasjob_step 0\\n")
        print("kerasjob: invalid configuration: an old line", file=sys.stderr)
        print("kerasjob: step 0/9")
        print("kerasjob: invalid configuration: mesh batch=1 x model=4 needs 4 devices",
              file=sys.stderr)
        print("some noise after it", file=sys.stderr)
        sys.exit(78)
        """,
    )
    assert code == ExitCode.INVALID_CONFIG
    assert message == (
        "kerasjob_epoch 0\nkerasjob_step 0\n"
        "kerasjob: invalid configuration: mesh batch=1 x model=4 needs 4 devices\n"
    )
    assert invalid_config_reason(message) == "mesh batch=1 x model=4 needs 4 devices"


def test_a_program_that_exits_78_without_the_line_leaves_its_last_stderr_line(
    tmp_path: Path,
) -> None:
    code, message = _rejected(
        tmp_path,
        """
        print("Traceback ...", file=sys.stderr)
        print("ValueError: learning rate must be > 0", file=sys.stderr)
        print("", file=sys.stderr)
        print("bye on stdout")
        sys.exit(78)
        """,
    )
    assert code == 78
    assert message == "kerasjob: invalid configuration: ValueError: learning rate must be > 0\n"


def test_nothing_is_left_for_other_codes_or_a_silent_78(tmp_path: Path) -> None:
    said = "print('kerasjob: invalid configuration: no', file=sys.stderr); "
    assert _rejected(tmp_path, said + "sys.exit(1)", before="kerasjob_step 3\n") == (
        1,
        "kerasjob_step 3\n",
    )
    assert _rejected(tmp_path, "print('out only'); sys.exit(78)") == (78, "")


def test_the_reason_stays_within_the_kubelets_limit_and_comes_last(tmp_path: Path) -> None:
    full = "".join(f'kerasjob_metric{{name="m{i}"}} {i}.5\n' for i in range(300))
    assert len(full.encode()) > TERMINATION_MESSAGE_BYTES
    long = "x" * 3000
    code, message = _rejected(
        tmp_path,
        f"print('kerasjob: invalid configuration: {long}', file=sys.stderr); sys.exit(78)",
        before=full[:TERMINATION_MESSAGE_BYTES],
    )
    assert code == 78
    assert len(message.encode()) <= TERMINATION_MESSAGE_BYTES
    lines = message.splitlines()
    assert lines[0] == 'kerasjob_metric{name="m0"} 0.5' and all(
        line in full.splitlines() for line in lines[:-1]
    )
    assert lines[-1] == f"kerasjob: invalid configuration: {'x' * INVALID_CONFIG_REASON_CHARS}"


def test_no_termination_log_nothing_written(tmp_path: Path) -> None:
    """Outside a Pod the file does not exist: nothing is made (as the chief's metrics)."""
    missing = tmp_path / "none" / "termination-log"
    body = "print('kerasjob: invalid configuration: x', file=sys.stderr); sys.exit(78)"
    assert run(tmp_path, body, KERASJOB_TERMINATION_LOG=str(missing)) == 78
    assert not missing.exists() and not missing.parent.exists()


def test_the_replica_name_is_the_pods_else_tf_configs_task() -> None:
    assert supervisor.replica_name({"KERASJOB_ROLE": "chief", "KERASJOB_INDEX": "0"}) == "chief-0"
    tf_config = '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}'
    assert supervisor.replica_name({"TF_CONFIG": tf_config}) == "worker-1"
    host = supervisor.socket.gethostname()
    assert supervisor.replica_name({"TF_CONFIG": "not json"}) == host
    assert supervisor.replica_name({"TF_CONFIG": '{"task": {"type": "../x"}}'}) == host
