"""Jobs competing for capacity on KWOK nodes, for the gang-scheduling test and benchmark
(tests/integration/test_gang_kwok.py, bench/gang.py).

Capacity is an extended resource, ``kerasjob.dev/gang-slot``, patched into the KWOK nodes'
status (`set_slots`); each worker asks for one (`gang_job`). A job "finishes" as a kubelet
would write it: every one of its Pods exits 0 (`finish`). `run_competing` drives N jobs
to the end: whenever a job is Running it is finished, and every look checks that no job
keeps only part of its Pods bound for long (`NoPartialGang`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from kerasjob_contract.times import parse_time
from kerasjob_dev.harness import (
    GROUP,
    PLURAL,
    VERSION,
    core,
    create_job,
    custom,
    exit_pod,
    job_manifest,
    pods,
)

SLOT = "kerasjob.dev/gang-slot"
JOB_LABEL = f"{GROUP}/job-name"
#: A gang's Pods are bound one API call after another once all have a place: a look may
#: catch some bound and the rest a moment later. Part of a gang bound for longer is a failure.
PARTIAL_SECONDS = 10.0


def kwok_nodes(kube: Any) -> list[str]:
    return sorted(n.metadata.name for n in core(kube).list_node(label_selector="type=kwok").items)


def set_slots(kube: Any, nodes: Iterable[str], n: int | None) -> None:
    """Every node offers ``n`` slots (None: the resource is removed)."""
    value = None if n is None else str(n)
    for name in nodes:
        core(kube).patch_node_status(
            name, {"status": {"capacity": {SLOT: value}, "allocatable": {SLOT: value}}}
        )


def gang_job(name: str, workers: int) -> dict[str, Any]:
    """A KerasJob on KWOK nodes whose every worker asks for one slot."""
    body = job_manifest(name, workers=workers)
    body["spec"]["template"]["spec"]["containers"] = [
        {"name": "trainer", "resources": {"requests": {SLOT: "1"}, "limits": {SLOT: "1"}}}
    ]
    return body


def bound(kube: Any, ns: str, job: str | None = None) -> dict[str, int]:
    """Per job: how many of its Pods that have not ended are bound to a node."""
    out: dict[str, int] = {}
    for p in pods(kube, ns, job).values():
        j = p.metadata.labels[JOB_LABEL]
        out.setdefault(j, 0)
        if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
            out[j] += 1
    return out


def finish(kube: Any, ns: str, job: str) -> None:
    """Every running Pod of the job exits 0 (the workers end with the chief)."""
    for name, p in pods(kube, ns, job).items():
        if p.status.phase == "Running":
            exit_pod(kube, ns, name)


class NoPartialGang:
    """Checks, look after look, that no job keeps only part of its Pods bound."""

    def __init__(self, size: Callable[[str], int]) -> None:
        self.size = size
        self.since: dict[str, float] = {}

    def partial(self, counts: dict[str, int], done: Iterable[str]) -> dict[str, float]:
        """Jobs with part of their Pods bound, and since when (monotonic seconds)."""
        now, finished = time.monotonic(), set(done)
        partial = {j for j, n in counts.items() if 0 < n < self.size(j) and j not in finished}
        self.since = {j: self.since.get(j, now) for j in partial}
        return dict(self.since)

    def look(self, counts: dict[str, int], done: Iterable[str]) -> None:
        now = time.monotonic()
        stuck = {
            j: counts[j] for j, t in self.partial(counts, done).items() if now - t > PARTIAL_SECONDS
        }
        assert not stuck, f"part of a gang bound for over {PARTIAL_SECONDS:g} s: {stuck}"


def bind_times(kube: Any, ns: str) -> dict[str, list[datetime]]:
    """Per job: when each of its Pods was bound (PodScheduled True)."""
    out: dict[str, list[datetime]] = {}
    for p in pods(kube, ns).values():
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "True":
                out.setdefault(p.metadata.labels[JOB_LABEL], []).append(c.last_transition_time)
    return out


def run_competing(
    kube: Any, ns: str, jobs: int, workers: int, *, timeout: float, strict: bool = True
) -> dict[str, Any]:
    """Create ``jobs`` jobs of ``workers`` workers at once (8 client threads); finish each as
    soon as it runs, until all Succeeded or ``timeout`` passed. ``strict``: fail (assert) on
    a gang partly bound for over PARTIAL_SECONDS; else count such jobs (the gang is off).
    Returns the figures: seconds to all Succeeded (None: not within the timeout), per job
    created -> all its Pods bound, places freed -> the next gang bound, one gang's bind
    spread, the most Pods bound at once, the jobs left partly bound at the end."""
    names = [f"g{i:03d}" for i in range(jobs)]
    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        created = dict(
            zip(
                names,
                pool.map(lambda n: create_job(kube, ns, gang_job(n, workers)), names),
                strict=True,
            )
        )
    done: set[str] = set()
    check = NoPartialGang(lambda _: workers)
    most_bound, partial = 0, {}
    finished_at: dict[str, float] = {}  # when its Pods were made to exit (places freed)
    bound_seen: dict[str, float] = {}  # when a look first saw all its Pods bound
    deadline = start + timeout
    while len(done) < jobs and time.monotonic() < deadline:
        counts = bound(kube, ns)
        seen_at = time.monotonic()
        for n, c in counts.items():
            if c == workers:
                bound_seen.setdefault(n, seen_at)
        if strict:
            check.look(counts, done)
        else:
            partial = check.partial(counts, done)
        items = custom(kube).list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
        phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in items}
        most_bound = max(most_bound, sum(counts.values()))
        for n, phase in phases.items():
            if phase == "Running" and n not in done:
                finish(kube, ns, n)
                finished_at.setdefault(n, time.monotonic())
        done |= {n for n, phase in phases.items() if phase == "Succeeded"}
        time.sleep(0.5)
    total = time.monotonic() - start if len(done) == jobs else None
    binds = bind_times(kube, ns)
    waits, spreads = [], []
    for n in names:
        times = binds.get(n, [])
        made = parse_time(created[n]["metadata"]["creationTimestamp"])
        if len(times) == workers and made is not None:
            waits.append((max(times) - made).total_seconds())
            spreads.append((max(times) - min(times)).total_seconds())
    # Places freed -> the next gang bound: for each job seen bound after some job finished,
    # the time since the last finish before it (polled: ~1 s granularity).
    reactions = []
    for n, t in bound_seen.items():
        before = [f for m, f in finished_at.items() if f <= t and m != n]
        if before:
            reactions.append(t - max(before))
    now = time.monotonic()
    return {
        "freed_to_next_bound_seconds": sorted(round(r, 2) for r in reactions),
        "freed_to_next_bound_median_seconds": (
            round(statistics.median(reactions), 2) if reactions else None
        ),
        "jobs": jobs,
        "workers": workers,
        "succeeded": len(done),
        "total_seconds": total,
        "bound_seconds": sorted(waits),
        "bound_median_seconds": statistics.median(waits) if waits else None,
        "bound_max_seconds": max(waits) if waits else None,
        "bind_spread_max_seconds": max(spreads) if spreads else None,
        "most_pods_bound": most_bound,
        "partly_bound_jobs": {j: round(now - t, 1) for j, t in partial.items()},
    }
