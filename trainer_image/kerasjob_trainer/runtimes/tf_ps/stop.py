"""Stopping a parameter-server group at a step boundary, with a backup; and its end.

The chief owns the backup: a SIGTERM to the chief (after its first step) asks it to save at
the next step boundary and exit 42. A SIGTERM to a ps (whose variables are the state) puts
a request on the group's `board` (the volume's `<checkpoint>/ps-stop/`, or the bucket's);
the chief, which looks at every step boundary, joins the steps in flight, saves, answers
`saved` and exits 42; the ps waits for that (bounded by SAVE_WAIT_SECONDS: a chief that
cannot answer leaves the periodic backup standing) and exits 42. The workers hold no state:
a SIGTERM to one exits 42 at once, and the chief's ClusterCoordinator runs its steps on the
other workers until it is back. When training is done and saved the chief puts `done` on
the board: the ps and the workers then exit 0.
"""

from __future__ import annotations

import json
import threading
import time

from kerasjob_trainer.runtimes.tf_ps.board import Board

#: How long a SIGTERMed ps waits for the chief's save (well inside Kubernetes' 30 s grace).
SAVE_WAIT_SECONDS = 20.0
SAVED, DONE, REQUEST = "saved", "done", "request-"

_signalled = threading.Event()


def requested_by_signal() -> None:
    """The chief's SIGTERM after its first step: stop at the next step boundary."""
    _signalled.set()


def request(board: Board, name: str) -> float:
    """A ps asks the chief to save now; returns when it asked."""
    at = time.time()
    board.put(f"{REQUEST}{name}", str(at).encode())
    return at


def forget(board: Board) -> None:
    """A new chief: requests left by an earlier generation's ps were for a chief that is
    gone (that ps left after SAVE_WAIT_SECONDS at most); they must not stop this one. Nor
    is an earlier `done` this chief's."""
    for n in board.names():
        if n.startswith(REQUEST) or n == DONE:
            board.delete(n)


def requested(board: Board) -> str | None:
    """Why the chief must save and stop now (a SIGTERM, a ps's request), or None."""
    if _signalled.is_set():
        return "SIGTERM"
    asked = sorted(n.removeprefix(REQUEST) for n in board.names() if n.startswith(REQUEST))
    return f"SIGTERM to {', '.join(asked)}" if asked else None


def saved(board: Board, step: int) -> None:
    """The chief saved at `step` for the requests standing: they are answered."""
    board.put(SAVED, json.dumps({"step": step, "at": time.time()}).encode())
    for n in board.names():
        if n.startswith(REQUEST):
            board.delete(n)


def wait_saved(board: Board, since: float, deadline: float = SAVE_WAIT_SECONDS) -> int | None:
    """The step the chief saved at after `since`, or None when it did not within `deadline`."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            raw = json.loads(board.get(SAVED) or b"null")
            if raw and float(raw["at"]) >= since:
                return int(raw["step"])
        except Exception:  # half a note, or the store for a moment: ask again
            pass
        time.sleep(0.05)
    return None


def finish(board: Board, step: int) -> None:
    """The chief trained every step and saved the model: the servers may leave."""
    board.put(DONE, json.dumps({"step": step, "at": time.time()}).encode())


def finished(board: Board) -> bool:
    try:
        return board.get(DONE) is not None
    except Exception:  # the store, for a moment: not done yet
        return False
