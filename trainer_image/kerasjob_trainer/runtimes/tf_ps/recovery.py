"""The chief reconnects to a lost worker only once that worker serves again.

When a closure fails because its worker is gone, TensorFlow's ClusterCoordinator
(`WorkerPreemptionHandler`) re-connects the cluster with `context.update_server_def`. That
call first waits for every task to answer (its GetStatus RPC blocks), and while it waits the
chief's eager context runs nothing remote: the surviving workers' closures stall with it.
On the real node a lost worker's Pod takes seconds to come back (deleted, evicted or
killed: measured 6-31 s of no steps at all, 2026-12-07), so one lost worker stopped the
whole job, whichever index it had.

`gate_cluster_updates` makes the coordinator's update wait, outside TensorFlow, until every
worker's server accepts a connection again (the address resolved afresh each time); the
surviving workers' threads never take the update's lock, so they train on meanwhile. An
update that fails while every ps still serves (a worker lost again in the middle of it, or
a restarted worker TensorFlow has no context on yet) is tried again, up to
UPDATE_ATTEMPTS times, instead of reaching `fit` as an error that would restart the group
(once seen: the chief exited 43, `Connection reset by peer`, for a worker's eviction). With
a ps gone the error goes on as before: the group restarts from the backup.

While an update is pending the chief also takes no periodic backup (`pending`): a backup
is a new `tf.function` the eager context registers on every worker, the lost one too, and
that registration waited for the lost worker's old address (20.3 s of no steps in a CI run,
2026-12-07, `delete worker0`: the save at the next boundary after the loss).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kerasjob_trainer.shared.faults import listening, say, summary

POLL_SECONDS = 0.25
CONNECT_TIMEOUT_SECONDS = 0.5
UPDATE_ATTEMPTS = 5


def all_serving(addresses: list[str]) -> list[str]:
    """The addresses (host:port) that accept no connection now."""
    missing = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not listening(host, int(port), CONNECT_TIMEOUT_SECONDS):
            missing.append(address)
    return missing


def wait_until_serving(
    addresses: list[str],
    probe: Callable[[list[str]], list[str]] = all_serving,
    poll: float = POLL_SECONDS,
) -> float:
    """Block until `probe` finds every address serving; the seconds it waited."""
    start = time.monotonic()
    while probe(addresses):
        time.sleep(poll)
    return time.monotonic() - start


def gate(
    update: Callable[..., Any],
    workers: list[str],
    ps: list[str],
    probe: Callable[[list[str]], list[str]] = all_serving,
    poll: float = POLL_SECONDS,
    pending: threading.Event | None = None,
) -> Callable[..., Any]:
    """`update` (the context's update_server_def), called only once every worker serves,
    and again when it fails while every ps serves (see the module doc); `pending` is set
    from the call's start to its end."""
    lock = threading.Lock()
    busy = pending if pending is not None else threading.Event()

    def gated(*args: Any, **kwargs: Any) -> Any:
        busy.set()
        try:
            return _attempts(*args, **kwargs)
        finally:
            busy.clear()

    def _attempts(*args: Any, **kwargs: Any) -> Any:
        with lock:
            for attempt in range(1, UPDATE_ATTEMPTS + 1):
                waited = wait_until_serving(workers, probe, poll)
                if waited >= poll:
                    say(f"every worker serves again after {waited:.1f}s; reconnecting")
                try:
                    return update(*args, **kwargs)
                except Exception as e:
                    if attempt == UPDATE_ATTEMPTS or probe(ps):
                        raise
                    say(f"reconnecting failed ({summary(e)}); trying again")
        raise AssertionError("unreachable")  # pragma: no cover

    return gated


def gate_cluster_updates(workers: list[str], ps: list[str]) -> threading.Event:
    """Install the gate on this process's eager context (the chief, after its strategy
    connected to the cluster): the coordinator's only caller of update_server_def. The
    event is set while an update is pending."""
    from tensorflow.python.eager import context

    pending = threading.Event()
    ctx = context.context()
    ctx.update_server_def = gate(  # type: ignore[method-assign]
        ctx.update_server_def, list(workers), list(ps), pending=pending
    )
    return pending
