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

The same 30 s follow a name that resolves to a Pod's *previous* address: the cluster DNS
answers from its cache (5 s here, 30 s by default) and from an EndpointSlice that lags the
Pod, so a task that starts right after its Pod was re-created can be given its
predecessor's address for its own name, by which the leader's coordination agent reaches
its own service and peers reach it. gRPC connects there, fails, and may resolve again only
30 s later. So every task (the leader too) first waits until the cluster DNS resolves its
own name to one of its own addresses (`wait_for_own_name`; its own addresses are from
/etc/hosts, which the kubelet writes): from then on the DNS's answer, cached or not, is
the current one. Also bounded, with a warning.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable

from kerasjob_trainer.shared.faults import listening, say

__all__ = [
    "before_the_group_forms",
    "leader_address",
    "listening",
    "own_addresses",
    "resolve",
    "wait_for_leader",
    "wait_for_own_name",
]


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


LOOPBACK = frozenset({"127.0.0.1", "::1"})


def resolve(host: str) -> set[str]:
    """The addresses the resolver gives for `host` now (empty: none, or an error)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}


def own_addresses() -> set[str]:
    """This host's addresses under its own host name (/etc/hosts: the Pod's IPs)."""
    with contextlib.suppress(OSError):
        return set(socket.gethostbyname_ex(socket.gethostname())[2]) - LOOPBACK
    return set()


def wait_for_own_name(
    address: str,
    *,
    mine: set[str] | None = None,
    deadline: float = 30.0,
    interval: float = 0.1,
    resolver: Callable[[str], set[str]] = resolve,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, float]:
    """Poll until `address` (this task's host:port) resolves to one of `mine` (default:
    `own_addresses()`) or to a loopback address (a test on one machine): (resolved so,
    seconds). An address literal, or no own address to compare with: (True, 0)."""
    mine = own_addresses() if mine is None else mine
    host = address.rpartition(":")[0].strip("[]")
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return True, 0.0
    if not mine:
        return True, 0.0
    accept = mine | LOOPBACK
    start = clock()
    while not resolver(host) & accept:
        if clock() - start >= deadline:
            return False, round(clock() - start, 2)
        sleep(interval)
    return True, round(clock() - start, 2)


def before_the_group_forms(own: str | None, leader: str | None) -> None:
    """The two waits every runtime makes before it forms its group (TensorFlow's
    coordination service, JAX's distributed runtime: both gRPC with the same 30 s
    re-resolution back-off): its own name at its own address (`own`: this task's host:port
    when it serves one, else None) and, for a task that is not the leader, the leader
    accepting connections (`leader`: its host:port, else None). Each bounded; a line when
    one took a second or more, a warning when it gave up."""
    if own is not None:
        found, waited = wait_for_own_name(own)
        if not found or waited >= 1:
            say(
                f"{'warning: ' if not found else ''}the cluster DNS "
                f"{'did not resolve' if not found else 'resolved'} this task's name {own} to "
                f"its own address {'in' if not found else 'after'} {waited}s"
            )
    if leader is not None:
        up, waited = wait_for_leader(leader)
        if not up:
            say(
                f"warning: the leader {leader} did not accept a connection in {waited}s; "
                "forming the cluster anyway"
            )
