"""Launch trainer processes on 127.0.0.1 and read what they print.

Each process runs `python -m kerasjob_trainer` with the contract's environment variables,
exactly as the operator's Pods do (but KERASJOB_IN_PLACE_RESTARTS=0 unless a test sets it),
with stdout+stderr captured in a file per process and, as the kubelet gives each container,
an empty termination-log file of its own (KERASJOB_TERMINATION_LOG).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kerasjob_contract as contract
from kerasjob_contract import Env
from kerasjob_contract.tf_config import TfConfig

STEP_LINE = re.compile(contract.LOG_STEP_RE)
RESUMED_LINE = re.compile(contract.LOG_RESUMED_RE)
PREEMPTED_LINE = re.compile(contract.LOG_PREEMPTED_RE)
FINAL_LINE = re.compile(contract.LOG_FINAL_RE)


def free_ports(n: int) -> list[int]:
    """Ports free right now (bound together so they are distinct)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def tf_config(cluster: dict[str, list[str]], role: str, index: int) -> str:
    """TF_CONFIG of task role:index (`cluster` as given: the evaluator in it too)."""
    return TfConfig({r: tuple(a) for r, a in cluster.items()}, role, index).to_json()


def jax_identity(coordinator: str, processes: int, process_id: int) -> dict[str, str]:
    """What the operator sets for backend jax (kerasjob.manifests.runtimes.JaxRuntime)."""
    return {
        Env.KERAS_BACKEND.value: "jax",
        Env.KERAS_JOB_ADDRESSES.value: coordinator,
        Env.KERAS_NUM_PROCESSES.value: str(processes),
        Env.KERAS_PROCESS_ID.value: str(process_id),
        Env.JAX_COORDINATOR_ADDRESS.value: coordinator,
        Env.JAX_NUM_PROCESSES.value: str(processes),
        Env.JAX_PROCESS_ID.value: str(process_id),
    }


def own_keras3_script(epochs: int, steps_per_epoch: int, finish: str = "") -> str:
    """A user's own Keras 3 script through the session (a small MLP on 512 random rows, global
    batch 16 per process), as the tests start it: `finish` is job.finish's extra arguments."""
    return f"""
import numpy as np
from kerasjob_trainer.keras3 import session

job = session.start()
import keras

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2)])
model.compile(optimizer="adam", metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x = rng.random((512, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype(np.int64)
job.fit(model, (x, y), epochs={epochs}, steps_per_epoch={steps_per_epoch},
        global_batch_size=job.global_batch_size(16))
job.finish(model{", " + finish if finish else ""})
"""


def keras3_weights(path: Path) -> list[Any]:
    """Every array in a Keras 3 .keras file's weights, in file order (no Keras needed)."""
    import io
    import zipfile

    import h5py

    arrays: list[Any] = []
    with zipfile.ZipFile(path) as z, h5py.File(io.BytesIO(z.read("model.weights.h5"))) as f:
        f.visititems(
            lambda name, obj: arrays.append(obj[()]) if isinstance(obj, h5py.Dataset) else None
        )
    return arrays


class Trainer:
    """One trainer process."""

    def __init__(
        self,
        name: str,
        log_dir: Path,
        env: dict[str, str],
        args: list[str] | None = None,
        prefix: list[str] | None = None,
    ) -> None:
        self.name = name
        self.prefix = list(prefix or [])  # runs the process (e.g. in a namespace of its own)
        self.env = dict(env)  # what a replacement of this process is started with
        self.args = list(args or [])
        self.log = log_dir / f"{name}.log"
        self.termination_log = log_dir / f"{name}.termination-log"
        self.termination_log.write_text("")
        # No in-place restarts unless a test asks for them: the tests here play the
        # operator, which sees each process's exit code (the supervisor still runs).
        full_env = {
            **os.environ,
            Env.IN_PLACE_RESTARTS.value: "0",
            Env.TERMINATION_LOG.value: str(self.termination_log),
            **env,
            "PYTHONUNBUFFERED": "1",
        }
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "kerasjob_trainer", *(args or [])],
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started = time.monotonic()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"{self.name} still running after {timeout}s:\n{self.tail()}"
            ) from None

    def signal(self, sig: int) -> None:
        """SIGKILL ends every process of the trainer, as a container's end does (the first
        process is the supervisor, the trainer its child); SIGSTOP and SIGCONT freeze and thaw
        all of them, as a frozen container; other signals go to the first process only, as
        the kubelet's SIGTERM goes to PID 1."""
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            return
        self.proc.send_signal(sig)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def termination_message(self) -> str:
        """What the process left in its termination log (the Pod's state.terminated.message)."""
        return self.termination_log.read_text(errors="replace")

    def lines(self) -> list[str]:
        return self.text().splitlines()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.lines()[-n:])

    def steps(self) -> list[int]:
        return [int(m.group(1)) for line in self.lines() if (m := STEP_LINE.match(line))]

    def wait_for_step(self, at_least: int, timeout: float) -> int:
        """Block until a logged step >= at_least; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = [s for s in self.steps() if s >= at_least]
            if done:
                return done[0]
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name} never reached step {at_least}:\n{self.tail()}")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the child of a supervisor too
        if self.proc.poll() is None:
            self.proc.wait(10)


class Group:
    """A set of trainers sharing one checkpoint dir: `start()` launches one generation."""

    def __init__(
        self,
        tmp: Path,
        config: dict[str, Any],
        workers: int = 2,
        chief: bool = False,
        evaluator: bool = False,
        env: dict[str, str] | None = None,
        backend: str = "tensorflow",
        ps: int = 0,
    ) -> None:
        self.tmp = tmp
        #: Parameter servers: with them, a ParameterServerStrategy job (needs `chief`).
        self.ps = ps
        #: "jax": Keras 3 processes with the identity env the operator gives backend jax.
        self.backend = backend
        self.ckpt = tmp / "ckpt"
        self.config = config
        self.env = dict(env or {})  # extra environment of every process
        self.chief = chief
        self.workers = workers
        self.evaluator = evaluator
        self.generation = 0
        self.trainers: list[Trainer] = []
        self.metrics_port = 0

    @property
    def output(self) -> Path:
        return self.ckpt / "output"

    @property
    def roles(self) -> list[tuple[str, int]]:
        chief = [("chief", 0)] if self.chief else []
        ps = [("ps", i) for i in range(self.ps)]
        return chief + [("worker", i) for i in range(self.workers)] + ps

    def start(self, workers: int | None = None) -> list[Trainer]:
        """One generation; `workers` changes the group's size from now on (an elastic
        resize: the TF_CONFIG of every process names that many workers)."""
        if workers is not None:
            self.workers = workers
        roles = self.roles + ([("evaluator", 0)] if self.evaluator else [])
        ports = free_ports(len(roles) + 1)
        self.metrics_port = ports[-1]
        cluster: dict[str, list[str]] = {}
        for (role, _), port in zip(roles, ports, strict=False):
            cluster.setdefault(role, []).append(f"127.0.0.1:{port}")
        self.generation += 1
        self.trainers = []
        for role, index in roles:
            identity = (
                jax_identity(cluster["worker"][0], self.workers, index)
                if self.backend == "jax"
                else {Env.TF_CONFIG.value: tf_config(cluster, role, index)}
            )
            env = {
                **identity,
                **self.env,
                Env.TRAINER_CONFIG.value: json.dumps(self.trainer_config()),
                Env.CHECKPOINT_DIR.value: str(self.checkpoint_dir(role, index)),
                Env.METRICS_PORT.value: str(self.metrics_port),
            }
            name = f"g{self.generation}-{role}{index}"
            self.trainers.append(Trainer(name, self.tmp, env, prefix=self.prefix(role, index)))
        return self.trainers

    def prefix(self, role: str, index: int) -> list[str]:
        """What process role:index is started through (none: a subclass may give one)."""
        return []

    def checkpoint_dir(self, role: str, index: int) -> Path:
        """KERASJOB_CHECKPOINT_DIR of process role:index in this generation: the shared one
        (a job with a volume); a subclass gives each its own (backups in a bucket)."""
        return self.ckpt

    def trainer_config(self) -> dict[str, Any]:
        """What the operator passes: the config, the backend and, with ps, the strategy."""
        strategy = {"strategy": "parameterServer"} if self.ps else {}
        return {**self.config, "backend": self.backend, **strategy}

    def wait_all(self, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        return [t.wait(max(deadline - time.monotonic(), 0.1)) for t in self.trainers]

    def stop(self) -> None:
        for t in self.trainers:
            t.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {t.name}\n{t.tail()}" for t in self.trainers)

    # -- what the trainers recorded (KERASJOB_AUDIT_DIR=<tmp>/audit; kerasjob_trainer.shared.audit)

    def audit_records(self, filename: str) -> list[dict[str, Any]]:
        """The JSON lines of one audit file, e.g. ``steps-worker0.jsonl``."""
        text = (self.tmp / "audit" / filename).read_text()
        return [json.loads(line) for line in text.splitlines() if line]

    def audit_steps(self, name: str) -> dict[int, list[dict[str, Any]]]:
        """step -> every record of it by trainer ``name`` (e.g. worker0), one per attempt."""
        out: dict[int, list[dict[str, Any]]] = {}
        for r in self.audit_records(f"steps-{name}.jsonl"):
            out.setdefault(r["step"], []).append(r)
        return out

    def final_weights(self) -> list[Any]:
        """The weights of the model.keras the chief saved."""
        if self.backend == "jax":
            return keras3_weights(self.output / "model.keras")
        import tf_keras

        return tf_keras.models.load_model(self.output / "model.keras", compile=False).get_weights()


@contextlib.contextmanager
def group(tmp: Path, config: dict[str, Any], **kwargs: Any) -> Iterator[Group]:
    g = Group(tmp, config, **kwargs)
    try:
        yield g
    finally:
        g.stop()


def progress(g: Group) -> dict[str, Any]:
    return json.loads((g.output / "progress.json").read_text())


def private_directory(directory: Path) -> list[str]:
    """A `Trainer` prefix: the process runs in a mount namespace of its own where
    `directory` is an empty tmpfs, so it sees none of the other processes' files under it
    (as a Pod sees none of another Pod's emptyDir). Needs root, as the cluster tests do."""
    script = 'mkdir -p "$0" && mount -t tmpfs kerasjob-private "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(directory)]
