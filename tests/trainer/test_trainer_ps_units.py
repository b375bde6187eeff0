"""The parameter-server runtime's pure parts (no TensorFlow): TF_CONFIG with ps tasks, the
registry's key, the `fit` calls of a resume in mid-epoch, the backup's step, the stop
requests between a SIGTERMed ps and the chief."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kerasjob_contract.trainer_config import ConfigError, parse_config
from kerasjob_trainer.core import registry
from kerasjob_trainer.runtimes.tf_ps import stop
from kerasjob_trainer.runtimes.tf_ps.backup import latest_step
from kerasjob_trainer.runtimes.tf_ps.cluster import parse_ps_tf_config
from kerasjob_trainer.runtimes.tf_ps.session import fit_calls
from kerasjob_trainer.runtimes.tf_ps.workers import _disruption

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


def test_a_sigterm_to_the_ps_is_answered_by_the_chiefs_save(tmp_path: Path) -> None:
    ckpt = str(tmp_path)
    assert stop.requested(ckpt) is None
    since = stop.request(ckpt, "ps0")
    assert stop.requested(ckpt) == "SIGTERM to ps0"
    assert stop.wait_saved(ckpt, since, deadline=0.1) is None  # no answer yet
    stop.saved(ckpt, 110)
    assert stop.wait_saved(ckpt, since, deadline=1) == 110
    assert stop.requested(ckpt) is None  # answered
    assert stop.wait_saved(ckpt, since + 3600, deadline=0.1) is None  # an older save
    # A request the chief never answered (it died) does not stop the next chief.
    stop.request(ckpt, "ps0")
    stop.forget(ckpt)
    assert stop.requested(ckpt) is None
    stop.forget(str(tmp_path / "nothing-here"))  # no directory yet: nothing to forget


def test_a_lost_workers_cost_is_the_speed_lost_while_it_was_gone() -> None:
    # Gone 20 s at 10 steps/s before: 100 steps trained in the gap took 10 s of it.
    d = _disruption("worker1", 1000.0, 300, 10.0, 1020.0, 400)
    assert (d.cause, d.steps_redone, d.downtime_s, d.lost_s) == ("worker-lost:worker1", 0, 0, 10)
    assert (d.last_step, d.resumed_step) == (300, 400)
    # Faster in the gap than before (noise): nothing lost, never negative.
    assert _disruption("worker0", 0.0, 0, 1.0, 5.0, 10).lost_s == 0
