"""An elastic job under Kueue (Kueue's workload slices), pure part: slice naming and
annotations, which slice is current, the shrink and reclaimable writes; and the planner
growing only as far as Kueue admitted."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

from kerasjob.config import OperatorConfig
from kerasjob.control.jobview import ParsedJob
from kerasjob.integrations import kueue
from kerasjob.integrations.kueue.decisions import (
    CreateWorkload,
    DeleteWorkload,
    JobFacts,
    PatchWorkloadStatus,
    ResizeWorkload,
    decide,
)
from kerasjob.integrations.kueue.sync import KueueJob, WorkloadWriter
from kerasjob.k8s.kube import ApiError
from kerasjob.planner import planning, scheduling
from kerasjob.planner import reconcile as rc
from kerasjob_dev.testing.builders import NOW, POLICY, deletes, job, pod, probe

T = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
JOB = {
    "metadata": {
        "name": "j",
        "namespace": "ns",
        "uid": "0123456789abcdef",
        "labels": {kueue.QUEUE_LABEL: "q"},
    }
}
POD = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "trainer"}]}}


def wl(
    count: int,
    *,
    replaces: dict[str, Any] | None = None,
    reserved: bool = False,
    finished: bool = False,
    reclaimable: int = 0,
) -> dict[str, Any]:
    w = kueue.build_workload(JOB, {"worker": (count, POD)}, elastic=True, replaces=replaces)
    w["metadata"]["resourceVersion"] = "1"
    conds = []
    if reserved:
        conds += [
            {"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"},
        ]
    if finished:
        conds.append({"type": "Finished", "status": "True"})
    w["status"] = {"conditions": conds}
    if reserved:
        w["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": []}
    if reclaimable:
        w["status"]["reclaimablePods"] = [{"name": "worker", "count": reclaimable}]
    return w


def test_slices_are_named_deterministically_and_annotated_as_kueue_expects() -> None:
    first = wl(3)
    assert first["metadata"]["name"] == "kerasjob-j-01234567"  # as a non-elastic job's
    ann = first["metadata"]["annotations"]
    assert ann[kueue.ELASTIC_ANNOTATION] == "true"
    assert kueue.REPLACEMENT_FOR_ANNOTATION not in ann
    grow = wl(3, replaces=first)
    assert grow["metadata"]["name"] == "kerasjob-j-01234567-s1"
    assert grow["metadata"]["annotations"][kueue.REPLACEMENT_FOR_ANNOTATION] == (
        "ns/kerasjob-j-01234567"
    )  # Kueue's workload.Key
    assert grow["metadata"]["annotations"][kueue.SLICE_NAME_ANNOTATION] == "kerasjob-j-01234567"
    assert wl(3, replaces=grow)["metadata"]["name"] == "kerasjob-j-01234567-s2"
    # A job that is not elastic: no slice annotations.
    plain = kueue.build_workload(JOB, {"worker": (3, POD)})
    assert "annotations" not in plain["metadata"]


def test_the_current_slice_the_pending_grow_and_a_replaced_one() -> None:
    s0 = wl(2, reserved=True)
    assert kueue.slices([], "0123456789abcdef") == kueue.Slices(None)
    found = kueue.slices([s0], "0123456789abcdef")
    assert found.current is s0 and found.pending is None
    s1 = wl(3, replaces=s0)
    found = kueue.slices([s1, s0], "0123456789abcdef")
    assert found.current is s0 and found.pending is s1 and not found.replaced
    # Admitted with the gate on: the scheduler finished the old slice.
    s1_in = wl(3, replaces=s0, reserved=True)
    found = kueue.slices([wl(2, reserved=True, finished=True), s1_in], "0123456789abcdef")
    assert found.current is s1_in and found.pending is None and not found.replaced
    # Admitted but the old one still holds quota (the gate off): it is to be finished.
    found = kueue.slices([s0, s1_in], "0123456789abcdef")
    assert found.current is s1_in and found.replaced == (s0,)
    patch = kueue.replaced_status(s0, s1_in, T)
    assert patch is not None
    (fin,) = [c for c in patch["conditions"] if c["type"] == "Finished"]
    assert fin["status"] == "True" and fin["reason"] == "WorkloadSliceReplaced"
    # Neither holds quota (evicted and released): the oldest is current.
    found = kueue.slices([s1, wl(2)], "0123456789abcdef")
    assert found.current is not None and kueue.slice_serial(found.current) == 0
    # Another job's Workloads are not this one's.
    assert kueue.slices([s0], "other").current is None
    # All finished (the job ended): the newest.
    done = wl(3, replaces=s0, finished=True)
    assert kueue.slices([wl(2, finished=True), done], "0123456789abcdef").current is done


def test_the_gate_says_how_many_workers_kueue_admitted() -> None:
    assert kueue.gate("q", wl(3, reserved=True), elastic=True).workers == 3
    assert kueue.gate("q", wl(3, reserved=True, reclaimable=1), elastic=True).workers == 2
    assert kueue.gate("q", wl(3, reserved=True)).workers is None  # not elastic
    assert kueue.gate("q", wl(3), elastic=True).workers is None  # not admitted


def test_shrink_in_place_changes_only_the_worker_count() -> None:
    w = wl(3, reserved=True)
    w["spec"]["podSets"].append({"name": "evaluator", "count": 1, "template": POD})
    shrunk = kueue.shrunk_pod_sets(w, 2)
    assert [(p["name"], p["count"]) for p in shrunk] == [("worker", 2), ("evaluator", 1)]
    assert shrunk[0]["template"] == w["spec"]["podSets"][0]["template"]
    assert w["spec"]["podSets"][0]["count"] == 3  # not changed in place
    assert kueue.same_shape(w, {"worker": 2, "evaluator": 1})
    assert not kueue.same_shape(w, {"worker": 2, "evaluator": 2})
    assert not kueue.same_shape(w, {"worker": 2})


def test_reclaimable_pods_only_grow() -> None:
    w = wl(3, reserved=True)
    assert kueue.reclaimable_status(w, 2) == {"reclaimablePods": [{"name": "worker", "count": 1}]}
    w["status"]["reclaimablePods"] = [{"name": "worker", "count": 1}]
    assert kueue.reclaimable_status(w, 2) is None
    assert kueue.reclaimable_status(w, 3) is None  # never given back while admitted
    assert kueue.reclaimable_status(w, 1) == {"reclaimablePods": [{"name": "worker", "count": 2}]}


def _short(since: float = 200) -> dict[str, Any]:
    at = (NOW - timedelta(seconds=since)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "elastic": {
            "workers": 2,
            "resizes": 1,
            "history": [
                {
                    "time": at,
                    "fromWorkers": 3,
                    "toWorkers": 2,
                    "reason": "CapacityLost",
                    "message": "x",
                }
            ],
        }
    }


def _gate(workers: int) -> scheduling.Gate:
    return scheduling.Gate(True, "Admitted", "admitted", workers, by="Kueue")


def test_a_grow_waits_for_kueue_to_admit_the_bigger_slice() -> None:
    running = [pod(0), pod(1), probe(0, node="n1")]
    # Capacity back, but Kueue admitted 2 workers: ask for a slice of 3, do not grow.
    p = rc.plan(job(3, elastic=POLICY, gate=_gate(2)), _short(), running, NOW)
    assert p.grow_to == 3 and p.status["elastic"]["workers"] == 2 and not deletes(p)
    assert p.status["phase"] == "Running"
    # Kueue admitted the slice of 3: grow.
    g = rc.plan(job(3, elastic=POLICY, gate=_gate(3)), _short(), running, NOW)
    assert g.grow_to is None and g.status["elastic"]["workers"] == 3
    assert "Kueue admitted 3 workers" in g.events[0].message
    # No probe bound: nothing asked of Kueue.
    idle = rc.plan(job(3, elastic=POLICY, gate=_gate(2)), _short(), running[:2], NOW)
    assert idle.grow_to is None
    # Not under Kueue: grows at once, as before.
    free = rc.plan(job(3, elastic=POLICY), _short(), running, NOW)
    assert free.grow_to is None and free.status["elastic"]["workers"] == 3


def test_a_job_never_runs_more_workers_than_kueue_admitted() -> None:
    s = {"elastic": {"workers": 3, "resizes": 0}}
    p = rc.plan(job(3, elastic=POLICY, gate=_gate(2)), s, [pod(0), pod(1), pod(2)], NOW)
    assert p.status["elastic"]["workers"] == 2
    assert "Kueue admitted 2" in p.status["elastic"]["history"][-1]["message"]
    assert sorted(deletes(p)) == ["j-worker-0", "j-worker-1", "j-worker-2"]


def test_while_kueue_admits_a_slice_the_job_runs_on_its_predecessor() -> None:
    """Kueue's scheduler finishes the replaced slice, then writes the new one's admission:
    between the two writes the job must not be stopped."""
    s0 = wl(2, reserved=True)
    s0["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "WorkloadSliceReplaced",
            "lastTransitionTime": T.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    s1 = wl(3, replaces=s0)
    found = kueue.slices([s0, s1], "0123456789abcdef")
    assert found.current is s1 and found.replacing is s0
    g = kueue.gate_of("q", found, T + timedelta(seconds=1))
    assert g.admitted and g.workers == 2 and g.recheck_after == 9.0
    assert "Kueue is admitting Workload slice kerasjob-j-01234567-s1" in g.message
    # Admission never came: the job waits for it.
    late = kueue.gate_of("q", found, T + timedelta(seconds=11))
    assert not late.admitted and late.recheck_after is None
    # Admitted: the new slice is current, nothing replacing.
    done = kueue.slices([s0, wl(3, replaces=s0, reserved=True)], "0123456789abcdef")
    assert done.replacing is None
    assert kueue.gate_of("q", done, T).workers == 3


# -- the Workload writes (`kueue.sync`), against a recording fake of the API ----------------


class _Api:
    """Records the calls; ``refuse``: the status code a Workload spec patch is refused with
    (Kueue's webhook with its gate off)."""

    def __init__(self, refuse: int | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.refuse = refuse

    async def create(self, path: str, body: Any, what: str) -> bool:
        self.calls.append(("create", path, body))
        return True

    async def delete(self, path: str, what: str, uid: str | None = None) -> None:
        self.calls.append(("delete", path, uid))

    async def merge_patch(self, path: str, body: Any, what: str) -> Any:
        if self.refuse and not path.endswith("/status"):
            raise ApiError(self.refuse, "PATCH", path, {"message": "field is immutable"})
        self.calls.append(("patch", path, body))
        return body

    async def request(self, *a: Any, **kw: Any) -> Any:
        raise AssertionError("no priority class named")


EJOB = {
    "apiVersion": "kerasjob.dev/v1alpha1",
    "kind": "KerasJob",
    "metadata": {
        "name": "j",
        "namespace": "ns",
        "uid": "0123456789abcdef",
        "generation": 1,
        "labels": {kueue.QUEUE_LABEL: "q"},
    },
    "spec": {
        "workers": 3,
        "elastic": {"minWorkers": 2},
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}},
    },
}


def _part(api: _Api, found: kueue.Slices) -> KueueJob:
    writer = WorkloadWriter(api, OperatorConfig())  # type: ignore[arg-type]
    gate = kueue.gate_of("q", found, T)
    return KueueJob(writer, EJOB, ParsedJob(EJOB).model, "q", gate, found.current, found)


def _sync(
    api: _Api,
    found: kueue.Slices,
    workers: int,
    grow_to: int | None = None,
) -> list[tuple[str, str, str]]:
    plan = planning.Plan(
        status={"phase": "Running", "elastic": {"workers": workers}}, grow_to=grow_to
    )
    events = asyncio.run(_part(api, found).after_plan(plan, workers, T))
    return [(e.type, e.reason, e.message) for e in events]


def _decide(found: kueue.Slices, workers: int, grow_to: int | None = None) -> list[Any]:
    """The pure decisions: which Workload writes are due."""
    facts = JobFacts(
        name="j",
        uid="0123456789abcdef",
        queue="q",
        phase="Running",
        message="",
        counts={"worker": workers},
        size=workers,
        grow_to=grow_to,
        pods_left=workers,
    )
    return decide(facts, found.current, found, T)


def test_slice_decisions_are_actions() -> None:
    """Shrink in place with reclaimablePods as the fallback; a grow asks for a slice."""
    current = wl(3, reserved=True)
    ((resize,),) = [_decide(kueue.Slices(current), 2)]
    assert isinstance(resize, ResizeWorkload) and (resize.workers, resize.have) == (2, 3)
    assert resize.event.reason == "WorkloadResized"
    (fallback,) = resize.refused
    assert isinstance(fallback, PatchWorkloadStatus)
    assert fallback.patch == {"reclaimablePods": [{"name": "worker", "count": 1}]}
    assert fallback.event is not None and fallback.event.type == "Warning"
    # Given back already (Kueue charges 2): no resize, no more reclaimable; PodsReady only.
    (ready,) = _decide(kueue.Slices(wl(3, reserved=True, reclaimable=1)), 2)
    assert isinstance(ready, PatchWorkloadStatus) and set(ready.patch) == {"conditions"}
    # A grow: a slice replacing the current one; the current one keeps its PodsReady.
    s0 = wl(2, reserved=True)
    create, kept = _decide(kueue.Slices(s0), 2, grow_to=3)
    assert isinstance(kept, PatchWorkloadStatus) and kept.workload is s0
    assert isinstance(create, CreateWorkload)
    assert (create.name, create.size, create.replaces) == ("kerasjob-j-01234567-s1", 3, s0)
    assert not create.need_priority
    # The grow no longer wanted: the pending slice is withdrawn, then PodsReady kept.
    found = kueue.slices([s0, wl(3, replaces=s0)], "0123456789abcdef")
    withdraw, ready = _decide(found, 2)
    assert isinstance(withdraw, DeleteWorkload) and withdraw.workload is found.pending
    assert isinstance(ready, PatchWorkloadStatus) and ready.workload is s0
    # An older slice still holding quota once a newer one is admitted: finished.
    s1 = wl(3, replaces=s0, reserved=True)
    finish = _decide(kueue.slices([s0, s1], "0123456789abcdef"), 3)[0]
    assert isinstance(finish, PatchWorkloadStatus) and finish.workload is s0
    assert finish.patch["conditions"][-1]["reason"] == "WorkloadSliceReplaced"


def test_the_admitted_workload_follows_a_shrink_in_place() -> None:
    api = _Api()
    events = _sync(api, kueue.Slices(wl(3, reserved=True)), 2)
    ((verb, path, body),) = api.calls
    assert verb == "patch" and path.endswith("/workloads/kerasjob-j-01234567")
    assert [p["count"] for p in body["spec"]["podSets"]] == [2]
    assert body["metadata"]["resourceVersion"] == "1"
    assert [e[1] for e in events] == ["WorkloadResized"]
    # At its size: nothing to write but PodsReady.
    api = _Api()
    _sync(api, kueue.Slices(wl(2, reserved=True)), 2)
    assert [(v, p.rsplit("/", 1)[-1]) for v, p, _ in api.calls] == [("patch", "status")]


def test_refused_by_kueue_the_workers_go_back_as_reclaimable_pods_once() -> None:
    api = _Api(refuse=403)
    events = _sync(api, kueue.Slices(wl(3, reserved=True)), 2)
    ((verb, path, body),) = api.calls
    assert verb == "patch" and path.endswith("/status")
    assert body["status"] == {"reclaimablePods": [{"name": "worker", "count": 1}]}
    assert [e[1] for e in events] == ["WorkloadShrinkRefused"]
    # Given back already: no new attempt, no new Event.
    api = _Api(refuse=403)
    events = _sync(api, kueue.Slices(wl(3, reserved=True, reclaimable=1)), 2)
    assert not [e for e in events if e[1] == "WorkloadShrinkRefused"]
    assert all(
        p.endswith("/status") and "reclaimablePods" not in b["status"] for _, p, b in api.calls
    )


def test_a_grow_slice_is_asked_for_once_and_withdrawn_when_not_wanted() -> None:
    s0 = wl(2, reserved=True)
    api = _Api()
    events = _sync(api, kueue.Slices(s0), 2, grow_to=3)
    created = [b for v, _, b in api.calls if v == "create"]
    assert [c["metadata"]["name"] for c in created] == ["kerasjob-j-01234567-s1"]
    assert created[0]["metadata"]["annotations"][kueue.REPLACEMENT_FOR_ANNOTATION] == (
        "ns/kerasjob-j-01234567"
    )
    assert [p["count"] for p in created[0]["spec"]["podSets"]] == [3]
    assert "GrowWaitingForKueue" in [e[1] for e in events]
    # Pending already: nothing more.
    s1 = wl(3, replaces=s0)
    api = _Api()
    _sync(api, kueue.slices([s0, s1], "0123456789abcdef"), 2, grow_to=3)
    assert not [c for c in api.calls if c[0] in ("create", "delete")]
    # No longer wanted: withdrawn.
    api = _Api()
    events = _sync(api, kueue.slices([s0, s1], "0123456789abcdef"), 2)
    assert [(v, p.rsplit("/", 1)[-1]) for v, p, _ in api.calls if v == "delete"] == [
        ("delete", "kerasjob-j-01234567-s1")
    ]
    assert "WorkloadSliceWithdrawn" in [e[1] for e in events]
    # Kueue admitted that many already (a plan on an older view): no second slice.
    api = _Api()
    _sync(api, kueue.Slices(wl(3, replaces=s0, reserved=True)), 2, grow_to=3)
    assert not [c for c in api.calls if c[0] == "create"]


def test_nothing_is_written_while_kueue_admits_a_slice() -> None:
    s0 = wl(2, reserved=True)
    s0["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "WorkloadSliceReplaced",
            "lastTransitionTime": T.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    api = _Api()
    _sync(api, kueue.slices([s0, wl(3, replaces=s0)], "0123456789abcdef"), 2, grow_to=3)
    assert api.calls == []


def test_a_conflict_is_no_resize_and_an_unadmitted_workload_follows_both_ways() -> None:
    class _Conflict(_Api):
        async def merge_patch(self, path: str, body: Any, what: str) -> Any:
            raise ApiError(409, "PATCH", path, {"message": "conflict"})

    assert _sync(_Conflict(), kueue.Slices(wl(3, reserved=True)), 2) == []
    # Queued (no quota held): its count follows the job's size, up or down.
    api = _Api()
    events = _sync(api, kueue.Slices(wl(2)), 3)
    ((verb, _, body),) = api.calls
    assert verb == "patch" and [p["count"] for p in body["spec"]["podSets"]] == [3]
    assert [e[1] for e in events] == ["WorkloadResized"]
