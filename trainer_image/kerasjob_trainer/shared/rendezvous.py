"""Where the group's coordinator is, through the job's shared volume: no DNS on the path.

When worker 0's Pod is re-created it gets a new address, and the cluster DNS goes on
answering its predecessor's for a while: the EndpointSlice lags the Pod, and the DNS caches
its answer (5 s on our node, 30 s in kubeadm's default Corefile). So a group that lost
worker 0 formed only once the DNS had caught up: process 0 waited for its own name
(`leader.wait_for_own_name`: 2.3-3.1 s of every worker-0 loss on the real node, its
cluster phase 3.9-4.7 s against 0.6 s when worker 1 was lost), the others for the name to
reach a listening coordinator.

JAX's coordinator is process 0, and every process of a Keras 3 job already shares the
checkpoint volume (each writes its shards of the Orbax backup there). So process 0
publishes its own address in `<checkpoint dir>/coordinator.json` before its group forms
and touches the file every TOUCH_SECONDS until the group has formed (`Published`); its own
client reaches its service through the loopback interface. The other processes take the
published address when the file was touched in the last FRESH_SECONDS (by a process 0
forming a group now, not a predecessor whose group formed long ago) once the address
accepts a TCP connection (`find_leader`). Once process 0 has published, the name is never
tried again: it may still resolve to the predecessor's address, whose connects only time
out (0.5 s a try slowed every look at the file when worker 0 was lost), and a lookup can
itself stall for the resolver's 5 s retry (a dropped UDP answer: 2 group formations in 10
took 5.6-7.2 s here while the others took 0.5 s). Where process 0 has never published (no
file: the job's first group, or one that cannot publish), the name once it accepts a
connection, as before.
Anything that goes wrong with the file (no shared volume, no own address, a read-only
directory) leaves the name-based path exactly as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable

from kerasjob_trainer.shared.faults import connect_error, say
from kerasjob_trainer.shared.leader import LOOPBACK, own_addresses

__all__ = ["FILE", "Published", "find_leader", "host_port", "publish", "read_fresh"]

FILE = "coordinator.json"
#: How often process 0 touches the file while its group forms.
TOUCH_SECONDS = 1.0
#: A file touched longer ago than this is a predecessor's (tolerates this much clock skew
#: between the nodes too: the reader compares the file's mtime with its own clock).
FRESH_SECONDS = 10.0


def host_port(host: str, port: int) -> str:
    """host:port, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _preferred(addresses: set[str]) -> str | None:
    """An IPv4 address first (the smallest, for a stable choice), else any."""
    usable = sorted(addresses - LOOPBACK, key=lambda a: (":" in a, a))
    return usable[0] if usable else None


class Published:
    """Process 0's address in the file, touched until `done()` (the group formed)."""

    def __init__(self, path: str, address: str) -> None:
        self.path = path
        self.address = address
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._touch, name="kerasjob-rendezvous")
        self._thread.daemon = True
        self._thread.start()

    def _touch(self) -> None:
        while not self._done.wait(TOUCH_SECONDS):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def done(self) -> None:
        self._done.set()


def publish(directory: str, port: int, *, mine: set[str] | None = None) -> Published | None:
    """Write this process's address (an own address, `port`) to `directory`/FILE atomically
    and keep the file fresh; None (nothing published) when there is no own address or the
    directory cannot be written."""
    own = _preferred(own_addresses() if mine is None else mine)
    if own is None:
        return None
    address = host_port(own, port)
    path = os.path.join(directory, FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"address": address}, f)
        os.replace(tmp, path)
    except OSError as e:
        say(f"warning: could not publish the coordinator's address in {path}: {e}")
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return Published(path, address)


def read_fresh(
    directory: str, *, now: Callable[[], float] = time.time, fresh: float = FRESH_SECONDS
) -> str | None:
    """The published address when the file was touched in the last `fresh` seconds."""
    path = os.path.join(directory, FILE)
    try:
        if now() - os.stat(path).st_mtime > fresh:
            return None
        with open(path, encoding="utf-8") as f:
            address = json.load(f)["address"]
        _split(address)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(address)


def _ever_published(directory: str) -> bool:
    """Whether this job's process 0 published (a file there, fresh or not): else it is the
    job's first group, or one whose process 0 cannot publish."""
    return os.path.exists(os.path.join(directory, FILE))


def find_leader(
    directory: str,
    name: str,
    *,
    deadline: float = 60.0,
    interval: float = 0.1,
    connect_timeout: float = 0.2,
    probe: Callable[[str, int, float], str | None] = connect_error,
    read: Callable[[str], str | None] = read_fresh,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The coordinator's address to form the group with: the published one once it accepts
    a connection while the file is fresh; where process 0 has never published (no file),
    `name` once it accepts one; `name` after `deadline` seconds (a warning: the group then
    forms as it can). A connect inside a cluster answers in well under `connect_timeout`; a
    dead address never does. `probe`: None when host:port accepts, else what happened (a
    TCP connect, `faults.connect_error`); the failures are counted and said with a wait of a
    second or more."""
    start = clock()
    failures: Counter[str] = Counter()

    def accepts(address: str) -> bool:
        error = probe(*_split(address), connect_timeout)
        if error is not None:
            failures[f"{address} {error}"] += 1
        return error is None

    while True:
        published = read(directory)
        if published is not None:
            if accepts(published):
                waited = round(clock() - start, 2)
                if waited >= 1:
                    tries = "; ".join(f"{k} x{n}" for k, n in failures.items()) or "none"
                    say(
                        f"the coordinator published at {published} accepted after {waited}s "
                        f"(failed connects before: {tries})"
                    )
                return published
        elif not _ever_published(directory) and accepts(name):
            return name
        if clock() - start >= deadline:
            say(
                f"warning: the coordinator {name} did not accept a connection in "
                f"{round(clock() - start, 2)}s; forming the group anyway"
            )
            return name
        sleep(interval)
