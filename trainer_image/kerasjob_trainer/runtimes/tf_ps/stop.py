"""Stopping a parameter-server group at a step boundary, with a backup.

The chief owns the backup: a SIGTERM to the chief (after its first step) asks it to save at
the next step boundary and exit 42. A SIGTERM to a ps (whose variables are the state) files
a request in `<checkpoint>/ps-stop/`; the chief, which looks at every step boundary, joins
the steps in flight, saves, writes `saved` and exits 42; the ps waits for that (bounded by
SAVE_WAIT_SECONDS: a chief that cannot answer leaves the periodic backup standing) and
exits 42. The workers hold no state: a SIGTERM to one exits 42 at once, and the chief's
ClusterCoordinator runs its steps on the other workers until it is back.
"""

from __future__ import annotations

import json
import os
import threading
import time

#: How long a SIGTERMed ps waits for the chief's save (well inside Kubernetes' 30 s grace).
SAVE_WAIT_SECONDS = 20.0
STOP_SUBDIR = "ps-stop"

_signalled = threading.Event()


def requested_by_signal() -> None:
    """The chief's SIGTERM after its first step: stop at the next step boundary."""
    _signalled.set()


def _dir(checkpoint_dir: str) -> str:
    return os.path.join(checkpoint_dir, STOP_SUBDIR)


def request(checkpoint_dir: str, name: str) -> float:
    """A ps asks the chief to save now; returns when it asked."""
    os.makedirs(_dir(checkpoint_dir), exist_ok=True)
    at = time.time()
    with open(os.path.join(_dir(checkpoint_dir), f"request-{name}"), "w") as f:
        f.write(str(at))
    return at


def forget(checkpoint_dir: str) -> None:
    """A new chief: requests left by an earlier generation's ps were for a chief that is
    gone (that ps left after SAVE_WAIT_SECONDS at most); they must not stop this one."""
    d = _dir(checkpoint_dir)
    for n in os.listdir(d) if os.path.isdir(d) else []:
        if n.startswith("request-"):
            os.remove(os.path.join(d, n))


def requested(checkpoint_dir: str) -> str | None:
    """Why the chief must save and stop now (a SIGTERM, a ps's request), or None."""
    if _signalled.is_set():
        return "SIGTERM"
    try:
        names = os.listdir(_dir(checkpoint_dir))
    except FileNotFoundError:
        return None
    asked = sorted(n.removeprefix("request-") for n in names if n.startswith("request-"))
    return f"SIGTERM to {', '.join(asked)}" if asked else None


def saved(checkpoint_dir: str, step: int) -> None:
    """The chief saved at `step` for the requests standing: they are answered."""
    d = _dir(checkpoint_dir)
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, ".saved.tmp")
    with open(tmp, "w") as f:
        json.dump({"step": step, "at": time.time()}, f)
    os.replace(tmp, os.path.join(d, "saved"))
    for n in os.listdir(d):
        if n.startswith("request-"):
            os.remove(os.path.join(d, n))


def wait_saved(
    checkpoint_dir: str, since: float, deadline: float = SAVE_WAIT_SECONDS
) -> int | None:
    """The step the chief saved at after `since`, or None when it did not within `deadline`."""
    path = os.path.join(_dir(checkpoint_dir), "saved")
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with open(path) as f:
                raw = json.load(f)
            if float(raw["at"]) >= since:
                return int(raw["step"])
        except (FileNotFoundError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    return None
