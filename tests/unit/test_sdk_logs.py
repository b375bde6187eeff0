"""`kerasjob.sdk.logs.follow`: every replica's lines, a re-created Pod followed again, and
the end once the job is finished (a scripted transport stands in for the API server)."""

from __future__ import annotations

import threading
from typing import Any

from kerasjob.sdk import logs


class ScriptedTransport:
    """Pods whose incarnations (UIDs) change on a script; each incarnation logs some lines."""

    def __init__(self, incarnations: dict[str, list[tuple[str, list[str]]]]) -> None:
        self.incarnations = {pod: list(v) for pod, v in incarnations.items()}
        self.current: dict[str, tuple[str, list[str]] | None] = {
            pod: v.pop(0) if v else None for pod, v in self.incarnations.items()
        }
        self.lock = threading.Lock()
        self.streams: list[tuple[str, str]] = []

    def get(self, path: str) -> dict[str, Any] | None:
        pod = path.rsplit("/", 1)[-1]
        with self.lock:
            inc = self.current.get(pod)
        if inc is None:
            return None
        return {
            "metadata": {"uid": inc[0]},
            "status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": {}}}]},
        }

    def lines(self, path: str, *, query: Any = None, read_timeout: Any = None):
        pod = path.split("/")[-2]
        with self.lock:
            uid, text = self.current[pod]
            self.streams.append((pod, uid))
            # The container ends after its lines: the operator re-creates the Pod.
            rest = self.incarnations[pod]
            self.current[pod] = rest.pop(0) if rest else self.current[pod]
        if (query or {}).get("timestamps") == "true":  # as the API server prefixes them
            text = [f"2026-11-23T01:02:{i:02d}.123456789Z {line}" for i, line in enumerate(text)]
        yield from text

    def finished(self) -> bool:
        with self.lock:
            return all(not v for v in self.incarnations.values()) and len(self.streams) >= 3


def test_follow_reads_every_replica_and_the_recreated_pod(monkeypatch) -> None:
    monkeypatch.setattr(logs, "POLL_SECONDS", 0.01)
    t = ScriptedTransport(
        {
            "j-worker-0": [("a", ["step 1", "step 2"]), ("b", ["resumed at step 2", "done"])],
            "j-worker-1": [("c", ["step 1"])],
        }
    )
    lines = list(
        logs.follow(
            t,
            "ns",
            ["j-worker-0", "j-worker-1"],  # type: ignore[arg-type]
            finished=t.finished,
        )
    )
    got = [str(line) for line in lines]
    # Each followed line carries the time the runtime recorded (goodput is checked with it).
    assert [ln.time for ln in lines if ln.pod == "j-worker-0"] == [
        "2026-11-23T01:02:00.123456789Z",
        "2026-11-23T01:02:01.123456789Z",
        "2026-11-23T01:02:00.123456789Z",
        "2026-11-23T01:02:01.123456789Z",
    ]
    worker0 = [g for g in got if g.startswith("[j-worker-0]")]
    assert worker0 == [
        "[j-worker-0] step 1",
        "[j-worker-0] step 2",
        "[j-worker-0] resumed at step 2",
        "[j-worker-0] done",
    ]
    assert "[j-worker-1] step 1" in got and len(got) == 5
    assert sorted(t.streams) == [("j-worker-0", "a"), ("j-worker-0", "b"), ("j-worker-1", "c")]


def test_pod_log_text_is_empty_until_there_is_a_log() -> None:
    from kerasjob.sdk.errors import ApiError

    class Waiting:
        def lines(self, path: str, **_: Any):
            raise ApiError(400, 'container "trainer" is waiting to start')
            yield  # a generator, as Transport.lines is

    class Talking:
        def lines(self, path: str, **_: Any):
            assert path == "/api/v1/namespaces/ns/pods/p/log"
            yield from ["kerasjob: step 1/2", "kerasjob: step 2/2"]

    assert logs.pod_log_text(Waiting(), "ns", "p") == ""  # type: ignore[arg-type]
    assert logs.pod_log_text(Talking(), "ns", "p") == (  # type: ignore[arg-type]
        "kerasjob: step 1/2\nkerasjob: step 2/2\n"
    )
