"""Whether another job's waiting Pod could use the place an elastic job's growth would take.

An elastic job below its preferred size probes for capacity (`elastic`); while another job
has a Pod that no node fits, and that Pod could use what a probe would take, the probes give
their places back. Which Pods can is read from the scheduler's own verdict, the Pod's
PodScheduled condition (False, reason Unschedulable), whose message names why each node was
passed over, e.g.::

    0/4 nodes are available: 3 Insufficient cpu, 1 node(s) had untolerated taint {t: x}.
    preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.

Only a shortage of something the growing job's worker asks for too ("Insufficient <name>",
"Too many pods", devices of a resource claim) is a place growth would take. A Pod that no
freed capacity would help waits for its own reasons (a missing PersistentVolumeClaim, a node
selector no node has: no shortage named; or the scheduler says preemption cannot help on any
node, as for a request no node's allocatable holds) and holds no one back. Nor does a Pod of
lower priority than the growing job's workers, or one whose node selector and the worker's
name different values of one label (different node pools, e.g. Kueue's flavors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kerasjob.planner.podview import PodView

#: What the message calls the shortage of Pod slots on a node (resource "pods").
TOO_MANY_PODS = "Too many pods"
#: DRA: no node has devices free for every claim of the Pod.
CLAIMS_UNALLOCATABLE = "cannot allocate all claims"
#: The preemption verdict of a node where no victim would help (UnschedulableAndUnresolvable).
NOT_HELPFUL = "Preemption is not helpful for scheduling"
#: The name this module gives a shortage of devices through resource claims.
DEVICES = "devices (resource claims)"
_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9./_-]+)")
_TERM = re.compile(r"^\s*\d+\s+(.*)$")


@dataclass(frozen=True)
class Shortage:
    """What the scheduler says a waiting Pod lacks."""

    resources: frozenset[str]
    """Resources some node has too little of: "cpu", "example.com/gpu", "pods", `DEVICES`."""
    hopeless: bool
    """Preemption would help on no node: freeing capacity does not make it fit."""


def shortage(waiting: str) -> Shortage:
    """Read a PodView's ``waiting`` ("Unschedulable: 0/4 nodes are available: ...")."""
    fit, _, preemption = waiting.partition("preemption:")
    names = {name.rstrip(".") for name in _INSUFFICIENT.findall(fit)}
    if TOO_MANY_PODS in fit:
        names.add("pods")
    if CLAIMS_UNALLOCATABLE in fit:
        names.add(DEVICES)
    return Shortage(frozenset(names), _hopeless(preemption))


def _hopeless(preemption: str) -> bool:
    """Every node of the preemption verdict says preemption is not helpful."""
    _, _, verdicts = preemption.partition("nodes are available:")
    terms = [t for t in verdicts.strip().rstrip(".").split(", ") if t.strip()]
    if not terms:
        return False
    return all(
        (m := _TERM.match(t)) is not None and m.group(1).startswith(NOT_HELPFUL) for t in terms
    )


def wants(pod: PodView) -> frozenset[str]:
    """What a Pod of this shape takes on a node: its resources, a Pod slot, its devices."""
    return pod.requests | {"pods"} | ({DEVICES} if pod.claims else set())


def disjoint_nodes(a: PodView, b: PodView) -> bool:
    """Their node selectors ask one label for different values: no node takes both."""
    mine = dict(a.node_selector)
    return any(key in mine and mine[key] != value for key, value in b.node_selector)


def competes(waiter: PodView, worker: PodView | None) -> str | None:
    """What of the place a Pod shaped like ``worker`` would take the waiting Pod lacks, in
    words ("cpu on nodes type=kwok"); None when it could not use that place (or waits for
    nothing). ``worker`` None: the shape is not known, any shortage counts."""
    if waiter.unschedulable_since is None:
        return None
    short = shortage(waiter.waiting)
    if short.hopeless or not short.resources:
        return None
    lacks = short.resources
    if worker is not None:
        if waiter.priority < worker.priority or disjoint_nodes(waiter, worker):
            return None
        lacks = lacks & wants(worker)
        if not lacks:
            return None
    where = ",".join(f"{k}={v}" for k, v in waiter.node_selector)
    return f"{', '.join(sorted(lacks))} on {'nodes ' + where if where else 'any node'}"
