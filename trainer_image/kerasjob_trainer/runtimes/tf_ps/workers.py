"""The chief's watch over its workers: a lost worker stops nobody, but it costs speed, and
goodput says how much.

A thread probes each worker's server (TCP connect, every PROBE_SECONDS). When one stops
answering, the job trains on with the others; when it answers again (its Pod re-created),
the gap is one disruption in the goodput ledger, `cause=worker-lost:<worker>`, with
`steps_redone` 0 and `downtime_s` 0 (training never stopped) and `lost_s` = the gap minus
the time the steps trained in it take at the speed before the loss: what the job lost
against running at full strength. The thread only notes the moments; the chief's callback
records them, in the thread that counts steps (`note_step`, `settle`).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from kerasjob_trainer.shared import goodput
from kerasjob_trainer.shared.faults import listening, say

PROBE_SECONDS = 0.5
#: The speed before a loss: over the steps of this many seconds before it.
RATE_WINDOW_SECONDS = 10.0


class WorkerWatch:
    def __init__(self, addresses: list[str], names: list[str]) -> None:
        self._workers = dict(zip(addresses, names, strict=True))
        self._steps: collections.deque[tuple[float, int]] = collections.deque(maxlen=1000)
        self._lock = threading.Lock()
        self._gone: dict[str, tuple[float, int, float | None]] = {}
        self._back: list[tuple[str, float, int, float | None, float, int]] = []
        self._armed = threading.Event()
        threading.Thread(target=self._run, name="kerasjob-workers", daemon=True).start()

    def note_step(self, step: int) -> None:
        """The callback, after each execution: the step reached now."""
        with self._lock:
            self._steps.append((time.time(), step))
        self._armed.set()

    def any_gone(self) -> bool:
        """Whether a worker answers no probe now."""
        return bool(self._gone)

    def settle(self, ledger: goodput.Ledger) -> list[goodput.Disruption]:
        """The workers back since the last call, recorded in `ledger`; what was recorded."""
        with self._lock:
            back, self._back = self._back, []
        found = [_disruption(*b) for b in back]
        for d in found:
            ledger.disruptions.append(d)
            say(goodput.log_line(len(ledger.disruptions), d, ledger.goodput))
        return found

    def _now(self) -> tuple[float, int, float | None]:
        with self._lock:
            if not self._steps:
                return time.time(), 0, None
            t, step = self._steps[-1]
            old = [(ts, s) for ts, s in self._steps if ts >= t - RATE_WINDOW_SECONDS]
        rate = (step - old[0][1]) / (t - old[0][0]) if t > old[0][0] else None
        return time.time(), step, rate

    def _run(self) -> None:
        self._armed.wait()
        while True:
            for address, name in self._workers.items():
                host, _, port = address.rpartition(":")
                up = listening(host, int(port), PROBE_SECONDS)
                if not up and address not in self._gone:
                    self._gone[address] = self._now()
                elif up and address in self._gone:
                    t0, step0, rate = self._gone.pop(address)
                    t1, step1, _ = self._now()
                    with self._lock:
                        self._back.append((name, t0, step0, rate, t1, step1))
            time.sleep(PROBE_SECONDS)


def _disruption(
    name: str, t0: float, step0: int, rate: float | None, t1: float, step1: int
) -> goodput.Disruption:
    """A worker gone from t0 (at step0, `rate` steps/s before) to t1 (at step1)."""
    gap = t1 - t0
    lost = max(gap - (step1 - step0) / rate, 0.0) if rate else 0.0
    return goodput.Disruption(f"worker-lost:{name}", step0, t0, step1, t1, 0, 0.0, round(lost, 3))


def watch(cluster: Any) -> WorkerWatch:
    """The watch over `cluster`'s workers (a `PsCluster`)."""
    addresses = cluster.cluster["worker"]
    return WorkerWatch(addresses, [f"worker{i}" for i in range(len(addresses))])
