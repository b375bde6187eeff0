"""Where a parameter-server group's processes leave each other small notes (`stop`): a ps's
request to save, the chief's answer, the chief's "done". With a volume, files in
`<checkpoint>/ps-stop/` (every Pod mounts it); with spec.checkpoint.location, objects under
`<location>/ps-stop/` (no Pod shares a directory with another).

The chief looks for requests at every step boundary (tens of times a second): a listing of
the bucket each time would cost a round trip a step, so the bucket board lists in a thread
of its own every POLL_SECONDS and `names()` answers from what it saw last (a request
reaches the chief at most POLL_SECONDS later; a ps waits up to 20 s for the answer).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from typing import Protocol

from kerasjob_trainer.shared.faults import say
from kerasjob_trainer.shared.objectstore import ObjectStore

SUBDIR = "ps-stop"
POLL_SECONDS = 0.5


class Board(Protocol):
    def put(self, name: str, data: bytes) -> None: ...

    def get(self, name: str) -> bytes | None: ...

    def names(self) -> list[str]: ...

    def delete(self, name: str) -> None: ...


class DirBoard:
    """Files in a directory of the shared volume; a note is written whole (a rename)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def put(self, name: str, data: bytes) -> None:
        os.makedirs(self.directory, exist_ok=True)
        tmp = os.path.join(self.directory, f".{name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(self.directory, name))

    def get(self, name: str) -> bytes | None:
        try:
            with open(os.path.join(self.directory, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.directory) if not n.startswith(".")]
        except FileNotFoundError:
            return []

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.directory, name))


class BucketBoard:
    """Objects under one prefix of the job's bucket location; `names()` from a poller."""

    def __init__(self, store: ObjectStore, prefix: str, poll: float = POLL_SECONDS) -> None:
        self.store = store
        self.prefix = prefix.rstrip("/") + "/"
        self.poll = poll
        self._seen: list[str] = []
        self._lock = threading.Lock()
        self._poller: threading.Thread | None = None

    def put(self, name: str, data: bytes) -> None:
        self.store.put(self.prefix + name, data)

    def get(self, name: str) -> bytes | None:
        return self.store.get(self.prefix + name)

    def names(self) -> list[str]:
        if self._poller is None:
            self._seen = self._list()
            self._poller = threading.Thread(target=self._poll, name="kerasjob-board", daemon=True)
            self._poller.start()
        with self._lock:
            return list(self._seen)

    def delete(self, name: str) -> None:
        self.store.delete(self.prefix + name)
        with self._lock:
            self._seen = [n for n in self._seen if n != name]

    def _list(self) -> list[str]:
        return [k.removeprefix(self.prefix) for k in self.store.list(self.prefix)]

    def _poll(self) -> None:
        failing = False
        while True:
            time.sleep(self.poll)
            try:
                seen = self._list()
            except Exception as e:  # the store down: the last answer stands
                if not failing:
                    say(f"the stop requests in the bucket cannot be read now: {e}")
                failing = True
                continue
            failing = False
            with self._lock:
                self._seen = seen


def board_for(checkpoint_dir: str, env: Mapping[str, str]) -> Board:
    """The group's board: in the job's bucket when it has a location, else on the volume."""
    from kerasjob_trainer.shared import bucket_sync

    config = bucket_sync.BucketConfig.from_env(env)
    if config is None:
        return DirBoard(os.path.join(checkpoint_dir, SUBDIR))
    store = config.open(bucket_sync.PATIENCE_S, env)
    return BucketBoard(store, config.location.key(SUBDIR))
