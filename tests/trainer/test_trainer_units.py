"""Pure parts of the trainer: config and TF_CONFIG parsing, Prometheus rendering, /metrics."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import kerasjob_contract as contract
from kerasjob_contract.trainer_config import ConfigError, DatasetConfig, TrainerConfig, parse_config
from kerasjob_trainer.runtimes.tf_keras.cluster import LOCAL, parse_tf_config
from kerasjob_trainer.shared.config import validate_dataset_files
from kerasjob_trainer.shared.metrics import Progress, ProgressReporter, render_prometheus


def test_defaults_and_camel_case() -> None:
    assert parse_config(None) == TrainerConfig()
    cfg = parse_config(
        json.dumps(
            {
                "model": "mnist-cnn",
                "epochs": 2,
                "stepsPerEpoch": 30,
                "batchSizePerReplica": 16,
                "saveFreq": 10,
                "learningRate": 0.01,
                "seed": 7,
                "learningRateUnused": None,
                "dataset": {"source": "synthetic"},
                "collectiveTimeoutSeconds": 5,
            }
        )
    )
    assert (cfg.model, cfg.epochs, cfg.steps_per_epoch, cfg.batch_size_per_replica) == (
        "mnist-cnn",
        2,
        30,
        16,
    )
    assert cfg.total_steps == 60 and cfg.log_interval == 10
    assert cfg.collective_timeout_seconds == 5.0 and cfg.dataset.source == "synthetic"
    # null means "the trainer's default", as the operator omits or nulls unset fields
    assert parse_config('{"learningRate": null}').learning_rate == TrainerConfig().learning_rate
    assert parse_config('{"command": ["python", "/x/train.py"]}').command == (
        "python",
        "/x/train.py",
    )
    assert parse_config('{"command": null}').command == TrainerConfig().command == ()
    assert TrainerConfig().deterministic is False
    assert parse_config('{"deterministic": true}').deterministic is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{bad json", "not valid JSON"),
        ("[1]", "JSON object"),
        ('{"batchSizePerReplica": 0}', "batchSizePerReplica must be > 0"),
        ('{"epochs": true}', "epochs must be a int"),
        ('{"stepsPerEpoch": "10"}', "stepsPerEpoch must be a int"),
        ('{"deterministic": 1}', "deterministic must be a bool"),
        ('{"deterministic": "true"}', "deterministic must be a bool"),
        ('{"model": "resnet"}', "neither a built-in"),
        ('{"model": "pkg.mod"}', "neither a built-in"),
        ('{"dataset": {"source": "s3"}}', "dataset.source 's3' is unknown"),
        ('{"dataset": {"source": "path"}}', "needs dataset.path"),
        ('{"dataset": {"source": "path", "path": "/x", "format": "csv"}}', "dataset.format"),
        ('{"command": []}', "command must be a non-empty list"),
        ('{"command": "python train.py"}', "command must be a non-empty list"),
        ('{"command": ["python", ""]}', "command must be a non-empty list"),
    ],
)
def test_bad_configs(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_dataset_path_format_inference() -> None:
    assert parse_config(
        '{"dataset": {"source": "path", "path": "/d/x.npz"}}'
    ).dataset == DatasetConfig("npz", "/d/x.npz")
    assert parse_config(
        '{"dataset": {"source": "path", "path": "/d/recs"}}'
    ).dataset == DatasetConfig("tfrecord", "/d/recs")
    assert (
        parse_config(
            '{"dataset": {"source": "path", "path": "/d/a.bin", "format": "npz"}}'
        ).dataset.source
        == "npz"
    )


def test_dataset_files_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        validate_dataset_files(DatasetConfig("npz", str(tmp_path / "missing.npz")))
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(3))
    with pytest.raises(ConfigError, match="lacks"):
        validate_dataset_files(DatasetConfig("npz", str(bad)))
    good = tmp_path / "good.npz"
    np.savez(good, x_train=np.zeros((2, 784)), y_train=np.zeros(2))
    validate_dataset_files(DatasetConfig("npz", str(good)))
    with pytest.raises(ConfigError, match=r"no \*\.tfrecord"):
        validate_dataset_files(DatasetConfig("tfrecord", str(tmp_path)))


def _tf(cluster: dict, role: str, index: int = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


def test_tf_config_roles() -> None:
    assert parse_tf_config(None) == LOCAL and parse_tf_config("") == LOCAL
    workers = {"worker": ["a:1", "b:2"]}
    w0, w1 = parse_tf_config(_tf(workers, "worker", 0)), parse_tf_config(_tf(workers, "worker", 1))
    assert w0.is_chief and not w1.is_chief and w1.workers == 2 and w1.multi_worker
    full = {"chief": ["c:1"], "worker": ["a:1"], "evaluator": ["e:1"]}
    chief = parse_tf_config(_tf(full, "chief"))
    assert chief.is_chief and chief.workers == 2
    assert "evaluator" not in chief.training_cluster
    assert not parse_tf_config(_tf(full, "worker", 0)).is_chief
    ev = parse_tf_config(_tf(full, "evaluator"))
    assert ev.is_evaluator and not ev.multi_worker and not ev.is_chief


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"cluster": {"worker": ["a:1"]}}', '"cluster" and "task"'),
        (_tf({"ps": ["a:1"]}, "ps"), "role 'ps'"),
        (_tf({"worker": ["a"]}, "worker"), "host:port"),
        (_tf({"worker": ["a:1"]}, "worker", 1), "not in cluster.worker"),
        (_tf({"worker": ["a:1"]}, "worker", -1), "non-negative"),
        (_tf({"chief": ["a:1", "b:1"]}, "chief"), "at most one chief"),
        (_tf({"evaluator": ["a:1"]}, "evaluator"), "no chief or worker"),
    ],
)
def test_bad_tf_config(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_tf_config(text)


def test_prometheus_rendering() -> None:
    text = render_prometheus(
        Progress(
            epoch=2,
            step=340,
            loss=0.12,
            metrics={"accuracy": 0.93, 'we"ird': 1.0},
            samples_per_second=float("nan"),
        )
    )
    lines = text.splitlines()
    assert f"{contract.METRIC_EPOCH} 2.0" in lines
    assert f"{contract.METRIC_STEP} 340.0" in lines
    assert f"{contract.METRIC_LOSS} 0.12" in lines
    assert f"{contract.METRIC_SAMPLES_PER_SECOND} NaN" in lines
    assert f'{contract.METRIC_TRAINING_METRIC}{{name="accuracy"}} 0.93' in lines
    assert f'{contract.METRIC_TRAINING_METRIC}{{name="we\\"ird"}} 1.0' in lines
    assert f"# TYPE {contract.METRIC_STEP} gauge" in lines
    # no loss yet -> no sample rather than a fake 0
    assert contract.METRIC_LOSS not in render_prometheus(Progress())


def test_reporter_writes_progress_and_serves_metrics(tmp_path: Path) -> None:
    from kerasjob_dev.trainer_procs import free_ports

    (port,) = free_ports(1)
    reporter = ProgressReporter(str(tmp_path), port)
    try:
        reporter.update(step=5, epoch=0, loss=1.5, metrics={"accuracy": 0.5})
        saved = json.loads((tmp_path / contract.PROGRESS_FILE).read_text())
        assert saved["step"] == 5 and saved["loss"] == 1.5 and saved["updatedAt"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = r.read().decode()
        assert f"{contract.METRIC_STEP} 5.0" in body
    finally:
        reporter.close()


def test_termination_message_is_the_operators_progress(tmp_path: Path) -> None:
    """The chief's last progress as the operator reads it from the Pod's status: the same
    parser as a scrape, within the kubelet's 4 KiB, written only where the kubelet mounted
    the file (elsewhere it does not exist)."""
    from kerasjob.planner.goodput import parse_goodput
    from kerasjob.planner.progress import parse_metrics
    from kerasjob_trainer.shared.metrics import termination_message

    reporter = ProgressReporter(None, None)
    goodput = {
        "disruptions": 2,
        "lostSeconds": 21.5,
        "stepsRedone": 7,
        "productiveSeconds": 300.0,
        "goodput": 0.9331,
    }
    reporter.update(step=1200, epoch=2, loss=0.25, metrics={"accuracy": 0.93}, goodput=goodput)
    log = tmp_path / "termination-log"
    assert not reporter.write_termination_message(str(log))  # not mounted: nothing written
    log.touch()
    assert reporter.write_termination_message(str(log))
    text = log.read_text()
    assert "#" not in text
    assert parse_metrics(text) == {
        "epoch": 2,
        "step": 1200,
        "loss": 0.25,
        "metrics": {"accuracy": 0.93},
    }
    assert parse_goodput(text) == goodput
    # Too long (many metrics with long names): the metric lines go first, whole lines only.
    reporter.update(metrics={f"m{i}_{'x' * 60}": 0.5 for i in range(100)})
    long = termination_message(reporter.render())
    assert len(long.encode()) <= contract.TERMINATION_MESSAGE_BYTES
    assert parse_goodput(long) == goodput and parse_metrics(long)["step"] == 1200
    assert "metrics" not in parse_metrics(long)


PEER_SCRIPT = """
import socket, sys, time
from kerasjob_trainer.shared.faults import PeerMonitor
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(16)
monitor = PeerMonitor([f"127.0.0.1:{server.getsockname()[1]}"], interval=0.05)
if sys.argv[1] == "quiet":
    monitor.quiet_when(lambda: True)
monitor.arm(); time.sleep(0.3)
server.close(); gone = time.monotonic()
time.sleep(2.0)
print("still alive", flush=True)
"""


@pytest.mark.parametrize(("mode", "code"), [("loud", 43), ("quiet", 0)])
def test_peer_monitor_exits_43_when_a_peer_port_closes(
    tmp_path: Path, mode: str, code: int
) -> None:
    import subprocess
    import sys
    import time

    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", PEER_SCRIPT, mode], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == code, out.stderr
    if code:
        assert "is gone" in out.stderr and time.monotonic() - started < 2.2
    else:
        assert "still alive" in out.stdout


WATCHDOG_SCRIPT = """
import sys, time
from kerasjob_trainer.shared.faults import Watchdog
dog = Watchdog(timeout=0.3, poll=0.05)
dog.until_first_step(1.0)
if sys.argv[1] == "steps":  # a first step in time, then steps faster than 0.3 s
    time.sleep(0.6)
    for _ in range(10):
        dog.beat(); time.sleep(0.1)
    dog.pause()
time.sleep(1.5)
print("still alive", flush=True)
"""


@pytest.mark.parametrize(("mode", "code"), [("no-first-step", 43), ("steps", 0)])
def test_watchdog_bounds_the_way_to_the_first_step(mode: str, code: int) -> None:
    """Armed before the first step (a tf-keras fit that began), no step for its own
    timeout is a lost peer; once the first step came, the steady-state timeout judges."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", WATCHDOG_SCRIPT, mode], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == code, out.stderr
    if code:
        assert "no first step since fit began for 1s" in out.stderr
    else:
        assert "still alive" in out.stdout
