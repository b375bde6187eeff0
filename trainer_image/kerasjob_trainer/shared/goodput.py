"""Goodput accounting: what each disruption cost, from the trainers' own clocks.

Every worker keeps `<CHECKPOINT_DIR>/goodput/last-<role><index>.json` current: its latest
finished step and when (wall clock), written at most every HEARTBEAT_SECONDS while training
and once more, exactly, on every exit path (with the exit code). A worker that was SIGKILLed
leaves its last heartbeat and no exit code.

A new generation's chief reads those files *before* `fit` (no worker of the new generation
can finish a step before the chief joins the first collective, so nothing is overwritten
yet) and, at its first finished step, records the disruption in `goodput/ledger.json`:

- cause: `resized:<before>-><now>` (an elastic job restarted at another size: the previous
  generation's records name another number of workers), `preempted` (a worker exited 42:
  SIGTERM, state saved), `killed:<workers>`
  (workers that left no exit: SIGKILL, OOM, node lost), `peer-lost` (every worker exited
  43 but none was killed: a network cut, a silent peer, SIGTERM without the override),
  `unknown` (no records, e.g. a new checkpoint volume);
- last_step / at: the latest step any worker finished, and when;
- resumed_step, first_step_at: where and when the new generation finished its first step;
- downtime_s = first_step_at - at; steps_redone = last_step - resumed_step; lost_s =
  downtime_s + steps_redone x the previous generation's mean step time;
- exited_at: the latest exit of a previous worker that exited (saved or not; None when all
  were killed), to split the downtime (see `startup` for the new process's side).

Totals: span = latest step time - the job's first step time; lost = sum of lost_s;
productive = span - lost; goodput = productive / span. The chief serves them as Prometheus
counters (kerasjob_contract.METRIC_*), puts them in progress.json ("goodput") and logs one
`kerasjob: disruption ...` line (kerasjob_contract.LOG_DISRUPTION_RE) per disruption.
Wall clocks of different nodes are compared: their skew (NTP: milliseconds) adds to downtime.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from typing import Any

from kerasjob_contract import GOODPUT_SUBDIR, ExitCode
from kerasjob_trainer.shared.metrics import write_json_atomic

HEARTBEAT_SECONDS = 1.0
LEDGER_FILE = "ledger.json"


@dataclasses.dataclass
class WorkerRecord:
    """One worker's view of its generation."""

    worker: str
    first_step: int  # optimizer steps done after its generation's first finished step
    first_at: float
    step: int  # optimizer steps done after its latest finished step
    at: float
    exit_code: int | None = None  # None: still running, or killed without a word
    exited_at: float | None = None  # when it exited (None: running, or killed)
    workers: int | None = None  # its generation's number of workers (an elastic job's size)

    def mean_step_seconds(self) -> float | None:
        steps = self.step - self.first_step
        return (self.at - self.first_at) / steps if steps > 0 else None


@dataclasses.dataclass
class Disruption:
    cause: str
    last_step: int
    at: float
    resumed_step: int
    first_step_at: float
    steps_redone: int
    downtime_s: float
    lost_s: float
    exited_at: float | None = None  # the last exit of the previous generation (None: killed)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def cause_of(records: list[WorkerRecord], workers: int | None = None) -> str:
    if not records:
        return "unknown"
    # The latest generation's size (a worker left out of it keeps an older, stale record).
    before = max(records, key=lambda r: r.at).workers
    if workers is not None and before is not None and before != workers:
        return f"resized:{before}->{workers}"  # an elastic job restarted at a new size
    if any(r.exit_code == ExitCode.PREEMPTED_SAVED for r in records):
        return "preempted"
    killed = sorted(r.worker for r in records if r.exit_code is None)
    if killed:
        return "killed:" + ",".join(killed)
    return "peer-lost"


def disruption(
    records: list[WorkerRecord], resumed_step: int, first_step_at: float, workers: int | None = None
) -> Disruption:
    """What the gap between the previous generation and this one cost (pure)."""
    if not records:
        return Disruption(
            "unknown", resumed_step, first_step_at, resumed_step, first_step_at, 0, 0.0, 0.0
        )
    last = max(records, key=lambda r: (r.step, r.at))
    at = max(r.at for r in records if r.step == last.step)
    redone = max(last.step - resumed_step, 0)
    means = [m for r in records if (m := r.mean_step_seconds()) is not None]
    step_s = sorted(means)[len(means) // 2] if means else 0.0
    downtime = max(first_step_at - at, 0.0)
    exits = [r.exited_at for r in records if r.exited_at is not None]
    return Disruption(
        cause_of(records, workers),
        last.step,
        at,
        resumed_step,
        first_step_at,
        redone,
        round(downtime, 3),
        round(downtime + redone * step_s, 3),
        round(max(exits), 3) if exits else None,
    )


@dataclasses.dataclass
class Ledger:
    """The chief's account of the job (goodput/ledger.json)."""

    first_step_at: float | None = None
    latest_step_at: float | None = None
    disruptions: list[Disruption] = dataclasses.field(default_factory=list)

    @property
    def lost_s(self) -> float:
        return round(sum(d.lost_s for d in self.disruptions), 3)

    @property
    def span_s(self) -> float:
        if self.first_step_at is None or self.latest_step_at is None:
            return 0.0
        return max(self.latest_step_at - self.first_step_at, 0.0)

    @property
    def productive_s(self) -> float:
        return round(max(self.span_s - self.lost_s, 0.0), 3)

    @property
    def goodput(self) -> float:
        return round(self.productive_s / self.span_s, 4) if self.span_s > 0 else 1.0

    def totals(self) -> dict[str, Any]:
        return {
            "disruptions": len(self.disruptions),
            "lostSeconds": self.lost_s,
            "productiveSeconds": self.productive_s,
            "goodput": self.goodput,
            "stepsRedone": sum(d.steps_redone for d in self.disruptions),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "firstStepAt": self.first_step_at,
            "latestStepAt": self.latest_step_at,
            "events": [d.to_json() for d in self.disruptions],
            "totals": self.totals(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Ledger:
        return cls(
            raw.get("firstStepAt"),
            raw.get("latestStepAt"),
            [Disruption(**d) for d in raw.get("events", [])],
        )


def log_line(number: int, d: Disruption, goodput: float) -> str:
    """The `kerasjob: disruption ...` line without its prefix (LOG_DISRUPTION_RE)."""
    return (
        f"disruption {number} cause={d.cause} last_step={d.last_step} at={d.at:.3f} "
        f"resumed_step={d.resumed_step} first_step_at={d.first_step_at:.3f} "
        f"steps_redone={d.steps_redone} downtime_s={d.downtime_s:.2f} "
        f"lost_s={d.lost_s:.2f} goodput={goodput:.4f}"
    )


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Recorder:
    """One worker's side: heartbeats and exit records; the chief's side: the ledger.

    `clock` is the wall clock (injectable for tests). `previous` holds the records of the
    generation before this process, read at construction (before `fit`).
    """

    def __init__(
        self,
        checkpoint_dir: str,
        name: str,
        is_chief: bool,
        clock: Any = time.time,
        workers: int | None = None,
    ) -> None:
        self.dir = os.path.join(checkpoint_dir, GOODPUT_SUBDIR)
        os.makedirs(self.dir, exist_ok=True)
        self.name = name
        self.is_chief = is_chief
        self.workers = workers
        self._clock = clock
        # Reentrant: hard_exit may run `exiting` from a signal handler in the main thread
        # while `step_done` holds the lock.
        self._lock = threading.RLock()
        self._record: WorkerRecord | None = None
        self._written = 0.0
        self.previous: list[WorkerRecord] = []
        self.ledger = Ledger()
        if is_chief:
            for n in sorted(os.listdir(self.dir)):
                if n.startswith("last-") and n.endswith(".json"):
                    raw = _read(os.path.join(self.dir, n))
                    if raw:
                        self.previous.append(WorkerRecord(**raw))
            raw = _read(os.path.join(self.dir, LEDGER_FILE))
            self.ledger = Ledger.from_json(raw) if raw else Ledger()

    def step_done(self, step: int) -> Disruption | None:
        """After each finished step (`step` = optimizer steps done). On the chief's first
        step after a restart, returns the disruption it recorded."""
        now = self._clock()
        found = None
        with self._lock:
            first = self._record is None
            if first:
                self._record = WorkerRecord(self.name, step, now, step, now, workers=self.workers)
            else:
                assert self._record is not None
                self._record.step, self._record.at = step, now
            if self.is_chief:
                if first and (self.previous or self.ledger.first_step_at is not None):
                    found = disruption(self.previous, step - 1, now, self.workers)
                    self.ledger.disruptions.append(found)
                if self.ledger.first_step_at is None:
                    self.ledger.first_step_at = now
                self.ledger.latest_step_at = now
            due = first or now - self._written >= HEARTBEAT_SECONDS
        if due:
            self._flush()
        return found

    def exiting(self, code: int) -> None:
        """On every exit path: the exact last step, and how this worker left."""
        with self._lock:
            if self._record is None:
                return  # no step in this process: the previous records still stand
            self._record.exit_code = int(code)
            self._record.exited_at = self._clock()
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            if self._record is None:
                return
            record = dataclasses.asdict(self._record)
            ledger = self.ledger.to_json() if self.is_chief else None
            self._written = self._clock()
        write_json_atomic(os.path.join(self.dir, f"last-{self.name}.json"), record)
        if ledger is not None:
            write_json_atomic(os.path.join(self.dir, LEDGER_FILE), ledger)


def record_exit(checkpoint_dir: str, name: str, code: int, at: float | None = None) -> bool:
    """For a process that could not say how it left (the JAX runtime aborted it): set the exit
    code of its last record, as `Recorder.exiting` would have. False when there is no record
    of a step, or it already has an exit."""
    path = os.path.join(checkpoint_dir, GOODPUT_SUBDIR, f"last-{name}.json")
    raw = _read(path)
    if not raw or raw.get("exit_code") is not None:
        return False
    raw["exit_code"], raw["exited_at"] = int(code), time.time() if at is None else at
    write_json_atomic(path, raw)
    return True
