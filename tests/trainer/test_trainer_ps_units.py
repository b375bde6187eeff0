"""The parameter-server runtime's pure parts (no TensorFlow): TF_CONFIG with ps tasks, the
registry's key, the `fit` calls of a resume in mid-epoch, the backup's step, the stop
requests between a SIGTERMed ps and the chief, the chief's gate on reconnecting to a lost
worker."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kerasjob_contract.trainer_config import ConfigError, parse_config
from kerasjob_trainer.core import registry
from kerasjob_trainer.runtimes.tf_ps import recovery, stop
from kerasjob_trainer.runtimes.tf_ps.backup import latest_step
from kerasjob_trainer.runtimes.tf_ps.board import Board, BucketBoard, DirBoard
from kerasjob_trainer.runtimes.tf_ps.callback import save_now
from kerasjob_trainer.runtimes.tf_ps.cluster import parse_ps_tf_config
from kerasjob_trainer.runtimes.tf_ps.session import fit_calls
from kerasjob_trainer.runtimes.tf_ps.workers import _disruption
from kerasjob_trainer.shared.objectstore import Location, open_store

CLUSTER = {
    "chief": ["c:2222"],
    "worker": ["w0:2222", "w1:2222"],
    "ps": ["p0:2222"],
}


def _tf_config(role: str, index: int, cluster: dict[str, list[str]] = CLUSTER) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


def test_tf_config_with_ps_tasks() -> None:
    ps = parse_ps_tf_config(_tf_config("ps", 0))
    assert (ps.role, ps.index, ps.is_chief, ps.multi_process) == ("ps", 0, False, True)
    assert ps.own_address == "p0:2222" and ps.name == "ps0"
    assert ps.addresses("chief", "ps") == ["c:2222"]  # its own left out
    chief = parse_ps_tf_config(_tf_config("chief", 0))
    assert chief.is_chief and chief.workers == 2
    assert chief.addresses("ps", "worker") == ["p0:2222", "w0:2222", "w1:2222"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not valid JSON"),
        (_tf_config("worker", 0, {"chief": ["c:1"], "worker": ["w:1"]}), "needs cluster.ps"),
        (_tf_config("ps", 0, {**CLUSTER, "chief": []}), "needs cluster.chief"),
        (_tf_config("ps", 0, {**CLUSTER, "ps": ["nohost"]}), "list of 'host:port'"),
        (_tf_config("evaluator", 0), "task.type 'evaluator'"),
        (_tf_config("worker", 2), "worker:2 is not in cluster.worker"),
    ],
)
def test_a_tf_config_that_cannot_work_is_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_ps_tf_config(text)


def test_the_strategy_picks_the_runtime() -> None:
    config = parse_config('{"strategy": "parameterServer"}')
    assert config.runtime_key == "tensorflow/parameterServer"
    assert registry.runtime_for(config.runtime_key).backend == "tensorflow"
    assert type(registry.runtime_for(config.runtime_key)).__name__ == "ParameterServers"
    assert parse_config("{}").runtime_key == "tensorflow"
    with pytest.raises(ConfigError, match="needs backend tensorflow"):
        parse_config('{"strategy": "parameterServer", "backend": "jax"}')
    with pytest.raises(ConfigError, match="strategy 'mirrored' is unknown"):
        parse_config('{"strategy": "mirrored"}')


@pytest.mark.parametrize(
    ("start", "calls"),
    [
        (0, [(0, 0, 100)]),
        (200, [(2, 0, 100)]),
        (130, [(1, 30, 70), (2, 0, 100)]),
        (290, [(2, 90, 10)]),
        (300, []),
    ],
)
def test_a_resume_in_mid_epoch_finishes_that_epoch_first(
    start: int, calls: list[tuple[int, int, int]]
) -> None:
    got = fit_calls(start, epochs=3, steps_per_epoch=100)
    assert got == calls
    # Exactly the steps left, whatever the step resumed at: a call in mid-epoch trains
    # one (partial) epoch, the other one every epoch left.
    trained = sum(steps if offset else steps * (3 - epoch) for epoch, offset, steps in got)
    assert trained == 300 - start


def test_the_backup_step_is_read_without_tensorflow(tmp_path: Path) -> None:
    assert latest_step(str(tmp_path)) == 0
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-150"\nall_model_checkpoint_paths: "ckpt-100"\n'
    )
    assert latest_step(str(tmp_path)) == 150


def _board(kind: str, tmp_path: Path, stores: Any) -> Board:
    if kind == "volume":
        return DirBoard(str(tmp_path / "ps-stop"))
    bucket = open_store(
        Location.parse(f"s3://{stores.bucket}"),
        endpoint=stores.s3_endpoint,
        path_style=True,
        env=stores.env,
    )
    return BucketBoard(bucket, f"jobs/{tmp_path.name}/ps-stop", poll=0.05)


def _eventually(read: Callable[[], Any]) -> Any:
    """What a reader sees once the bucket board's poller has listed (at once on a volume)."""
    deadline = time.monotonic() + 5
    while not (value := read()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


@pytest.mark.parametrize("kind", ["volume", "bucket"])
def test_a_sigterm_to_the_ps_is_answered_by_the_chiefs_save(
    kind: str, tmp_path: Path, stores: Any
) -> None:
    board = _board(kind, tmp_path, stores)
    assert stop.requested(board) is None
    since = stop.request(board, "ps0")
    assert _eventually(lambda: stop.requested(board)) == "SIGTERM to ps0"
    assert stop.wait_saved(board, since, deadline=0.1) is None  # no answer yet
    stop.saved(board, 110)
    assert stop.wait_saved(board, since, deadline=1) == 110
    assert stop.requested(board) is None  # answered
    assert stop.wait_saved(board, since + 3600, deadline=0.1) is None  # an older save
    # A request the chief never answered (it died) does not stop the next chief, nor does
    # an earlier chief's done.
    stop.request(board, "ps0")
    stop.finish(board, 300)
    assert _eventually(lambda: stop.requested(board)) and stop.finished(board)
    stop.forget(board)
    assert stop.requested(board) is None and not stop.finished(board)
    assert DirBoard(str(tmp_path / "nothing-here")).names() == []  # no directory yet


def test_a_lost_workers_cost_is_the_speed_lost_while_it_was_gone() -> None:
    # Gone 20 s at 10 steps/s before: 100 steps trained in the gap took 10 s of it.
    d = _disruption("worker1", 1000.0, 300, 10.0, 1020.0, 400)
    assert (d.cause, d.steps_redone, d.downtime_s, d.lost_s) == ("worker-lost:worker1", 0, 0, 10)
    assert (d.last_step, d.resumed_step) == (300, 400)
    # Faster in the gap than before (noise): nothing lost, never negative.
    assert _disruption("worker0", 0.0, 0, 1.0, 5.0, 10).lost_s == 0


def _probe(gone_for: dict[str, int]):  # type: ignore[no-untyped-def]
    """A probe under which each address stays gone for its count of probes, then serves."""

    def probe(addresses: list[str]) -> list[str]:
        missing = [a for a in addresses if gone_for.get(a, 0) > 0]
        for a in missing:
            gone_for[a] -= 1
        return missing

    return probe


def test_the_cluster_update_waits_until_every_worker_serves() -> None:
    calls: list[tuple[object, ...]] = []
    gone = {"w0:2222": 3}
    gated = recovery.gate(
        lambda *a: calls.append(a) or "updated",
        CLUSTER["worker"],
        CLUSTER["ps"],
        probe=_probe(gone),
        poll=0.001,
    )
    assert gated("server_def") == "updated"
    assert calls == [("server_def",)] and gone == {"w0:2222": 0}


def test_a_failed_update_is_tried_again_while_every_ps_serves() -> None:
    attempts: list[int] = []

    def update() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("Connection reset by peer")
        return "updated"

    gated = recovery.gate(update, CLUSTER["worker"], CLUSTER["ps"], probe=_probe({}), poll=0.001)
    assert gated() == "updated" and len(attempts) == 3


def test_a_failed_update_with_a_ps_gone_raises_at_once() -> None:
    attempts: list[int] = []

    def update() -> None:
        attempts.append(1)
        raise RuntimeError("ps unavailable")

    probe = _probe({"p0:2222": 1})
    gated = recovery.gate(update, CLUSTER["worker"], CLUSTER["ps"], probe=probe, poll=0.001)
    with pytest.raises(RuntimeError, match="ps unavailable"):
        gated()
    assert len(attempts) == 1


def test_an_update_that_keeps_failing_gives_up_after_its_attempts() -> None:
    attempts: list[int] = []

    def update() -> None:
        attempts.append(1)
        raise RuntimeError("still failing")

    gated = recovery.gate(update, CLUSTER["worker"], CLUSTER["ps"], probe=_probe({}), poll=0.001)
    with pytest.raises(RuntimeError, match="still failing"):
        gated()
    assert len(attempts) == recovery.UPDATE_ATTEMPTS


def test_all_serving_names_the_addresses_nobody_listens_on() -> None:
    with socket.socket() as server, socket.socket() as closed:
        server.bind(("127.0.0.1", 0))
        server.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
        up = f"127.0.0.1:{server.getsockname()[1]}"
        down = f"127.0.0.1:{closed.getsockname()[1]}"
        assert recovery.all_serving([up, down]) == [down]


def test_the_update_is_pending_from_its_start_to_its_end_failed_or_not() -> None:
    pending = threading.Event()
    seen: list[bool] = []

    def update(fail: bool) -> str:
        seen.append(pending.is_set())
        if fail:
            raise RuntimeError("ps unavailable")
        return "updated"

    probe = _probe({"w0:2222": 2})
    gated = recovery.gate(update, CLUSTER["worker"], [], probe=probe, poll=0.001, pending=pending)
    assert gated(False) == "updated" and seen == [True] and not pending.is_set()
    gated = recovery.gate(
        update, CLUSTER["worker"], CLUSTER["ps"], probe=_probe({"p0:2222": 1}), pending=pending
    )
    with pytest.raises(RuntimeError):
        gated(True)
    assert seen == [True, True] and not pending.is_set()


class _Chief:
    def __init__(self, missing: bool) -> None:
        self.missing = missing

    def worker_missing(self, *, probe: bool = False) -> bool:
        return self.missing


def test_no_periodic_backup_while_a_worker_is_missing_but_a_stop_always_saves() -> None:
    assert save_now(50, 50, None, _Chief(missing=False))
    assert not save_now(49, 50, None, _Chief(missing=False))
    assert not save_now(80, 50, None, _Chief(missing=True))  # deferred, not dropped
    assert save_now(3, 50, "SIGTERM to ps0", _Chief(missing=True))
