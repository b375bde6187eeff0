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

Without a shared volume (backups in a bucket, KERASJOB_CHECKPOINT_LOCATION) the address
is an object, `<location>/coordinator.json` (`ObjectBoard`): an object has no mtime to
touch, so process 0 writes `{"address", "touched"}` (its clock, epoch seconds) again every
TOUCH_SECONDS, and a reader takes it when `touched` is within FRESH_SECONDS of its own
clock: the file's semantics, with the writer's clock in the object instead of the file
system's. Where a function takes `where`, it is a directory (the file) or a `Board`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from kerasjob_trainer.shared.faults import connect_error, say
from kerasjob_trainer.shared.leader import LOOPBACK, own_addresses
from kerasjob_trainer.shared.objectstore import ObjectStore

__all__ = [
    "FILE",
    "Board",
    "FileBoard",
    "ObjectBoard",
    "Published",
    "find_leader",
    "host_port",
    "publish",
    "read_fresh",
]

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


class Board(Protocol):
    """Where process 0's address is published: a file on the shared volume or an object."""

    def write(self, address: str) -> None:
        """Publish `address`, touched now (raises when it cannot)."""
        ...

    def touch(self) -> None:
        """Mark the published address as touched now (raises when it cannot)."""
        ...

    def read(self) -> tuple[str, float] | None:
        """(the address as written, when it was last touched: epoch seconds), or None."""
        ...

    def exists(self) -> bool:
        """Whether an address was ever published here (fresh or not)."""
        ...

    def __str__(self) -> str: ...


class FileBoard:
    """`<directory>/coordinator.json` on the shared volume, touched through its mtime."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE)

    def write(self, address: str) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"address": address}, f)
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def touch(self) -> None:
        os.utime(self.path)

    def read(self) -> tuple[str, float] | None:
        try:
            touched = os.stat(self.path).st_mtime
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)["address"], touched
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def __str__(self) -> str:
        return self.path


class ObjectBoard:
    """An object in the job's bucket, `{"address", "touched"}`, written again to touch it."""

    def __init__(self, store: ObjectStore, key: str, where: str) -> None:
        self.store, self.key, self.where = store, key, where
        self._address: str | None = None

    def write(self, address: str) -> None:
        body = json.dumps({"address": address, "touched": time.time()})
        self.store.put(self.key, body.encode())
        self._address = address

    def touch(self) -> None:
        if self._address is not None:
            self.write(self._address)

    def read(self) -> tuple[str, float] | None:
        try:
            raw = self.store.get(self.key)
            if raw is None:
                return None
            found = json.loads(raw)
            return found["address"], float(found["touched"])
        except Exception:  # a store that does not answer now: nothing published, as a file
            return None

    def exists(self) -> bool:
        try:
            return self.store.get(self.key) is not None
        except Exception:
            return False

    def __str__(self) -> str:
        return self.where


Where = str | Board


def _board(where: Where) -> Board:
    return FileBoard(where) if isinstance(where, str) else where


class Published:
    """Process 0's address on its board, touched until `done()` (the group formed)."""

    def __init__(self, board: Board, address: str) -> None:
        self.board = board
        self.address = address
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._touch, name="kerasjob-rendezvous")
        self._thread.daemon = True
        self._thread.start()

    def _touch(self) -> None:
        while not self._done.wait(TOUCH_SECONDS):
            with contextlib.suppress(Exception):  # a later touch may get through
                self.board.touch()

    def done(self) -> None:
        self._done.set()


def publish(where: Where, port: int, *, mine: set[str] | None = None) -> Published | None:
    """Publish this process's address (an own address, `port`) on `where` (a directory:
    its FILE, written atomically; or a Board) and keep it fresh; None (nothing published)
    when there is no own address or it cannot be written."""
    own = _preferred(own_addresses() if mine is None else mine)
    if own is None:
        return None
    address = host_port(own, port)
    board = _board(where)
    try:
        board.write(address)
    except Exception as e:  # a volume's OSError, a store's own errors
        say(f"warning: could not publish the coordinator's address in {board}: {e}")
        return None
    return Published(board, address)


def read_fresh(
    where: Where, *, now: Callable[[], float] = time.time, fresh: float = FRESH_SECONDS
) -> str | None:
    """The published address when it was touched in the last `fresh` seconds."""
    found = _board(where).read()
    if found is None:
        return None
    address, touched = found
    try:
        if now() - touched > fresh:
            return None
        _split(address)
    except (ValueError, TypeError, AttributeError):
        return None
    return str(address)


def _ever_published(where: Where) -> bool:
    """Whether this job's process 0 published (fresh or not): else it is the job's first
    group, or one whose process 0 cannot publish."""
    return _board(where).exists()


def find_leader(
    where: Where,
    name: str,
    *,
    deadline: float = 60.0,
    interval: float = 0.1,
    connect_timeout: float = 0.2,
    probe: Callable[[str, int, float], str | None] = connect_error,
    read: Callable[[Where], str | None] = read_fresh,
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
        published = read(where)
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
        elif not _ever_published(where) and accepts(name):
            return name
        if clock() - start >= deadline:
            say(
                f"warning: the coordinator {name} did not accept a connection in "
                f"{round(clock() - start, 2)}s; forming the group anyway"
            )
            return name
        sleep(interval)
