"""Before the cluster forms: a worker waits until the leader's TensorFlow server listens.

MultiWorkerMirroredStrategy's set-up connects every task's coordination agent to the
coordination service on the leader (the chief, else worker 0). A task that gets there
before the leader's server listens is refused, and its gRPC channel then waits for a new
address list from its resolver, which re-resolves a name no sooner than 30 s after the
last time: measured on the real node, every restart in which worker 1 finished importing
TensorFlow before the chief had started its server formed the cluster 30 s late (both
workers re-created at once; which one is ready first is chance: 1 eviction in 5 here).
So the other tasks first poll the leader's port with plain TCP connects (resolving the
name each time) until one is accepted, and only then build the strategy; the leader never
waits (its server starts in the strategy). Bounded: after `deadline` seconds training
goes on as before, with a warning.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kerasjob_trainer.faults import listening

__all__ = ["leader_address", "listening", "wait_for_leader"]


def leader_address(training_cluster: dict[str, list[str]]) -> str:
    """host:port of the coordination service leader: the chief, else worker 0."""
    return (training_cluster.get("chief") or training_cluster["worker"])[0]


def wait_for_leader(
    address: str,
    *,
    deadline: float = 60.0,
    interval: float = 0.1,
    connect_timeout: float = 0.5,
    probe: Callable[[str, int, float], bool] = listening,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, float]:
    """Poll until the leader at `address` accepts a connection: (accepted, seconds)."""
    host, _, port = address.rpartition(":")
    start = clock()
    while not probe(host, int(port), connect_timeout):
        if clock() - start >= deadline:
            return False, round(clock() - start, 2)
        sleep(interval)
    return True, round(clock() - start, 2)
