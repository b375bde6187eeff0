"""leader: a worker waits for the coordination leader's server before forming the cluster."""

from __future__ import annotations

import socket

import pytest

from kerasjob_trainer.shared.leader import (
    leader_address,
    listening,
    wait_for_leader,
    wait_for_own_name,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_leader_is_the_chief_else_worker_0() -> None:
    assert leader_address({"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]}) == "c:2222"
    assert leader_address({"worker": ["w0:2222", "w1:2222"]}) == "w0:2222"


def test_polls_until_the_leader_accepts() -> None:
    answers = [False, False, False, True]
    seen: list[tuple[str, int]] = []
    clock = Clock()

    def probe(host: str, port: int, timeout: float) -> bool:
        seen.append((host, port))
        return answers.pop(0)

    assert wait_for_leader(
        "job-worker-0.job.ns.svc:2222", probe=probe, clock=clock, sleep=clock.sleep, interval=0.1
    ) == (True, 0.3)
    assert set(seen) == {("job-worker-0.job.ns.svc", 2222)}


def test_bounded_then_goes_on() -> None:
    clock = Clock()
    assert wait_for_leader(
        "w0:2222",
        probe=lambda h, p, t: False,
        clock=clock,
        sleep=clock.sleep,
        deadline=2.0,
        interval=0.5,
    ) == (False, 2.0)


def test_refused_is_not_listening_accepted_is() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert not listening("127.0.0.1", port, 0.5)  # nobody listens: refused
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert listening("localhost", server.getsockname()[1], 0.5)
        assert wait_for_leader(f"localhost:{server.getsockname()[1]}")[0]


def test_a_task_waits_until_its_own_name_resolves_to_its_own_address() -> None:
    """A re-created Pod's name may still resolve to its predecessor's address (the cluster
    DNS's cache, a lagging EndpointSlice): the task waits for its own."""
    answers = iter([set(), {"10.0.0.9"}, {"10.0.0.9"}, {"10.0.0.5"}])
    now = [0.0]
    found, waited = wait_for_own_name(
        "w1.job.ns.svc:2222",
        mine={"10.0.0.5"},
        resolver=lambda host: next(answers),
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        interval=0.5,
    )
    assert (found, waited) == (True, 1.5)


def test_the_own_name_wait_is_bounded_and_skips_what_it_cannot_judge() -> None:
    now = [0.0]
    stale = wait_for_own_name(
        "w1.job.ns.svc:2222",
        mine={"10.0.0.5"},
        resolver=lambda host: {"10.0.0.9"},
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        deadline=3,
    )
    assert stale == (False, 3.0)
    never = lambda host: pytest.fail("no lookup expected")  # noqa: E731
    assert wait_for_own_name("10.0.0.9:2222", mine={"10.0.0.5"}, resolver=never) == (True, 0.0)
    assert wait_for_own_name("[::1]:2222", mine={"10.0.0.5"}, resolver=never) == (True, 0.0)
    assert wait_for_own_name("w1:2222", mine=set(), resolver=never) == (True, 0.0)
    # One machine (the tests here): the name resolves to loopback.
    assert wait_for_own_name("localhost:2222", mine={"10.0.0.5"})[0]
