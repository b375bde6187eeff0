"""Trainer logs: one Pod's, or every replica's interleaved with a prefix, optionally followed.

The one home of pod-log reading for the SDK, the CLI and the dev tools. Without follow, the
logs of several Pods are read with timestamps and merged in time order; with follow, one
thread per Pod streams its log into a queue, and a Pod the operator re-creates (a restart
keeps the name, not the UID) is picked up again until the job finishes.
"""

from __future__ import annotations

import dataclasses
import heapq
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kerasjob.k8s.paths import pod_path
from kerasjob.sdk.errors import ApiError, KerasJobError
from kerasjob.sdk.transport import Transport
from kerasjob_contract import TRAINER_CONTAINER

#: Seconds between looks at a Pod that has no (new) running container yet.
POLL_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One line of one Pod's log; ``str()`` is "[pod] text", as ``kerasjob logs --all``.
    ``time``: when the container runtime recorded it (RFC 3339, the API's timestamps)."""

    pod: str
    text: str
    time: str = ""

    def __str__(self) -> str:
        return f"[{self.pod}] {self.text}"


def _split_timestamp(line: str) -> tuple[str, str]:
    stamp, sep, text = line.partition(" ")
    return (stamp, text) if sep and stamp[:2].isdigit() and stamp.endswith("Z") else ("", line)


def read_pod_log(
    transport: Transport,
    namespace: str,
    pod: str,
    *,
    container: str = TRAINER_CONTAINER,
    tail_lines: int | None = None,
    previous: bool = False,
) -> list[LogLine]:
    """A Pod's log now (NotFoundError for no such Pod; [] before its container started)."""
    query = {
        "container": container,
        "timestamps": "true",
        "tailLines": tail_lines,
        "previous": "true" if previous else None,
    }
    try:
        lines = list(transport.lines(pod_path(namespace, pod, "log"), query=query, read_timeout=30))
    except ApiError as e:
        if e.status == 400:  # "container ... is waiting to start"
            return []
        raise
    return [LogLine(pod, text, stamp) for stamp, text in map(_split_timestamp, lines)]


def pod_log_text(
    transport: Transport,
    namespace: str,
    pod: str,
    container: str = TRAINER_CONTAINER,
    tail_lines: int | None = None,
) -> str:
    """The current container's log as `kubectl logs` shows it (its last `tail_lines` lines:
    a poller's reads stay small as a long-lived log grows); "" when there is none yet, or
    the API server or kubelet cannot be reached (for pollers: the demo, tests, benches)."""
    query = {"container": container}
    if tail_lines is not None:
        query["tailLines"] = str(tail_lines)
    try:
        return "".join(
            f"{line}\n"
            for line in transport.lines(
                pod_path(namespace, pod, "log"), query=query, read_timeout=10
            )
        )
    except KerasJobError:
        return ""


def interleave(logs: Iterable[list[LogLine]]) -> list[LogLine]:
    """Merge several Pods' lines in time order (each Pod's own order kept)."""
    return list(heapq.merge(*logs, key=lambda ln: ln.time))


def container_started(pod: Mapping[str, Any], container: str = TRAINER_CONTAINER) -> bool:
    """Whether the container has a log to read (it runs, or ran)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    st = next((s for s in statuses if s.get("name") == container), None)
    state = (st or {}).get("state") or {}
    return "running" in state or "terminated" in state


def follow(
    transport: Transport,
    namespace: str,
    pods: list[str],
    *,
    finished: Callable[[], bool],
    container: str = TRAINER_CONTAINER,
    tail_lines: int | None = None,
    stop: threading.Event | None = None,
) -> Iterator[LogLine]:
    """Stream the Pods' logs as lines arrive, until the job is ``finished()`` and every Pod's
    last container ended (or ``stop`` is set). Re-created Pods are followed again."""
    stop = stop or threading.Event()
    lines: queue.Queue[LogLine | KerasJobError] = queue.Queue()
    threads = [
        threading.Thread(
            target=_follow_one,
            args=(transport, namespace, pod, container, tail_lines, finished, stop, lines),
            name=f"kerasjob-logs-{pod}",
            daemon=True,
        )
        for pod in pods
    ]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads) or not lines.empty():
            try:
                item = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(item, KerasJobError):
                raise item
            yield item
    finally:
        stop.set()


def _follow_one(
    transport: Transport,
    namespace: str,
    pod: str,
    container: str,
    tail_lines: int | None,
    finished: Callable[[], bool],
    stop: threading.Event,
    out: queue.Queue[LogLine | KerasJobError],
) -> None:
    # UIDs of the incarnations already streamed to their end (None: a Pod without one).
    streamed: set[str | None] = set()
    try:
        while not stop.is_set():
            obj = transport.get(pod_path(namespace, pod))
            uid = ((obj or {}).get("metadata") or {}).get("uid")
            if obj is None or uid in streamed or not container_started(obj, container):
                if finished():  # nothing (new) will start any more
                    return
                stop.wait(POLL_SECONDS)
                continue
            streamed.add(uid)
            query = {
                "container": container,
                "follow": "true",
                "timestamps": "true",
                "tailLines": tail_lines if len(streamed) == 1 else None,
            }
            try:
                for line in transport.lines(pod_path(namespace, pod, "log"), query=query):
                    stamp, text = _split_timestamp(line)
                    out.put(LogLine(pod, text, stamp))
                    if stop.is_set():
                        return
            except ApiError as e:
                if e.status not in (400, 404):  # not started yet / gone: look again
                    raise
                streamed.discard(uid)
                stop.wait(POLL_SECONDS)
    except KerasJobError as e:
        out.put(e)
