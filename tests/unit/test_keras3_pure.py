"""The pure parts of the Keras 3 / JAX trainer: identity, the step-indexed data order, the
supervisor's exit codes, the error classification. No JAX processes (tests/trainer has them)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core import supervisor
from kerasjob_trainer.core.context import Context
from kerasjob_trainer.runtimes.keras3 import data
from kerasjob_trainer.runtimes.keras3.errors import classify
from kerasjob_trainer.runtimes.keras3.identity import LOCAL, parse_identity
from kerasjob_trainer.runtimes.keras3.runtime import RUNTIME, exit_code

ADDR = "j-worker-0.j.ns.svc:2222"


def _env(**kw: str) -> dict[str, str]:
    return {f"KERAS_DISTRIBUTION_{k}" if not k.startswith("JAX") else k: v for k, v in kw.items()}


def test_identity_from_the_operators_variables() -> None:
    env = {
        **_env(JOB_ADDRESSES=ADDR, NUM_PROCESSES="3", PROCESS_ID="2"),
        "JAX_COORDINATOR_ADDRESS": ADDR,
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": "2",
    }
    ident = parse_identity(env)
    assert (ident.process_id, ident.num_processes, ident.coordinator) == (2, 3, ADDR)
    assert not ident.is_chief and ident.multi_process and ident.name == "worker2"
    assert ident.coordinator_host_port == ("j-worker-0.j.ns.svc", 2222)
    assert parse_identity({}) == LOCAL and LOCAL.is_chief and not LOCAL.multi_process


def test_identity_takes_the_first_of_several_job_addresses() -> None:
    env = _env(JOB_ADDRESSES=f"{ADDR},j-worker-1.j.ns.svc:2222", NUM_PROCESSES="2", PROCESS_ID="0")
    assert parse_identity(env).coordinator == ADDR


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (_env(NUM_PROCESSES="2", PROCESS_ID="2", JOB_ADDRESSES=ADDR), "not in 0..1"),
        (_env(NUM_PROCESSES="2", PROCESS_ID="0"), "coordinator's address"),
        (_env(NUM_PROCESSES="two", PROCESS_ID="0", JOB_ADDRESSES=ADDR), "non-negative integer"),
        (_env(PROCESS_ID="0", JOB_ADDRESSES=ADDR), "number of processes"),
        (_env(NUM_PROCESSES="2", PROCESS_ID="0", JOB_ADDRESSES="nohost"), "host:port"),
        (
            {**_env(NUM_PROCESSES="2", PROCESS_ID="0", JOB_ADDRESSES=ADDR), "JAX_PROCESS_ID": "1"},
            "disagree",
        ),
        (
            {
                **_env(NUM_PROCESSES="2", PROCESS_ID="0", JOB_ADDRESSES=ADDR),
                "JAX_COORDINATOR_ADDRESS": "other:1",
            },
            "different coordinators",
        ),
    ],
)
def test_identity_that_cannot_work_is_a_config_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_identity(env)


def test_every_global_batch_is_one_permutation_slice_whatever_the_processes() -> None:
    perms = data.Permutations(100, seed=7)
    for step in (0, 1, 3, 12):  # step 3 crosses from pass 1 into pass 2 (B=32, N=100)
        whole = data.global_batch_indices(step, 32, 100, 7)
        for processes in (1, 2, 4):
            shares = [data.process_indices(perms, step, p, processes, 32) for p in range(processes)]
            assert np.array_equal(np.concatenate(shares), whole)
    first_pass = np.concatenate([data.global_batch_indices(s, 20, 100, 7) for s in range(5)])
    assert sorted(first_pass.tolist()) == list(range(100))  # each example once per pass
    assert not np.array_equal(data.global_batch_indices(5, 20, 100, 7), first_pass[:20])
    with pytest.raises(ValueError, match="cannot be split evenly"):
        data.process_indices(perms, 0, 0, 3, 32)


def test_supervisor_turns_only_the_jax_runtime_abort_into_43() -> None:
    abort = -int(signal.SIGABRT)
    assert exit_code(abort, lost_peer=True) == ExitCode.PEER_LOST
    assert exit_code(abort, lost_peer=False) == 134
    assert exit_code(-int(signal.SIGKILL), lost_peer=True) == 137
    assert exit_code(42, lost_peer=True) == 42
    assert exit_code(0, lost_peer=False) == 0


def _supervise(argv: list[str], checkpoint_dir: str) -> int:
    """The core's supervisor with the Keras 3 runtime's view of exit codes (as `core.main`)."""
    ctx = Context(None, {}, LOCAL, checkpoint_dir, checkpoint_dir, None)  # type: ignore[arg-type]
    return supervisor.supervise(
        argv,
        translate=lambda code, seen: RUNTIME.exit_code(code, seen, ctx),
        watch=RUNTIME.watch,
    )


def test_supervisor_passes_the_childs_code_and_stderr(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KERASJOB_IN_PLACE_RESTARTS", "0")
    ckpt = str(tmp_path)
    code = _supervise(
        [sys.executable, "-c", "import sys; print('to stderr', file=sys.stderr); sys.exit(78)"],
        ckpt,
    )
    assert code == 78 and "to stderr" in capfd.readouterr().err
    fatal = (
        "import os, sys; sys.stderr.write('F client.h:80] Terminating process because the "
        "JAX distributed service detected fatal errors.\\n'); sys.stderr.flush(); os.abort()"
    )
    assert _supervise([sys.executable, "-c", fatal], ckpt) == ExitCode.PEER_LOST
    assert _supervise([sys.executable, "-c", "import os; os.abort()"], ckpt) == 134


@pytest.mark.parametrize(
    ("message", "multi", "code"),
    [
        ("UNKNOWN: Gloo AllGather failed: Connection closed by peer", True, 43),
        ("Gloo all-reduce failed: Read error: Connection reset by peer", True, 43),
        ("UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats)", True, 43),
        ("Incompatible shapes: (32, 10) vs (32, 3)", True, 1),
        ("Gloo all-reduce failed: Connection reset by peer", False, 1),
    ],
)
def test_lost_peer_errors_are_43_program_errors_1(message: str, multi: bool, code: int) -> None:
    assert classify(ValueError(message), multi) == code
