"""The planner's elastic steps: shrink on lost capacity, probe, grow after the cool-down."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from kerasjob.api import labels
from kerasjob.manifests import children, validation
from kerasjob.planner import planning
from kerasjob.planner import reconcile as rc
from kerasjob.planner.elastic import GIVE_WAY_SECONDS, PROBE_SETTLE_SECONDS
from kerasjob.planner.podview import PodView, Termination
from kerasjob_contract import trainer_config
from kerasjob_dev.testing.builders import (
    NOW,
    UNSCHEDULABLE,
    creates,
    deletes,
    ejob,
    job,
    pod,
    probe,
    probes,
    stuck,
)


def test_a_shrink_waits_for_shrink_after_seconds_then_restarts_everyone_uncounted() -> None:
    j = ejob()
    running = [pod(0), pod(1)]
    s = rc.plan(
        j, {}, [*running, stuck(2, timedelta(seconds=0))], NOW - timedelta(seconds=5)
    ).status
    assert s["elastic"] == {"workers": 3, "resizes": 0}

    early = rc.plan(j, s, [*running, stuck(2, timedelta(seconds=30))], NOW)
    assert not deletes(early) and early.requeue_after == 30
    assert early.status["conditions"][-1]["message"].startswith("Pod j-worker-2 cannot start")

    p = rc.plan(j, early.status, [*running, stuck(2, timedelta(seconds=61))], NOW)
    assert sorted(deletes(p)) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    # A group short of a worker trains nothing: its Pods go at once (1 s, not their 60 s).
    assert {a.grace_seconds for a in p.actions if isinstance(a, planning.DeletePod)} == {1}
    elastic = p.status["elastic"]
    assert elastic["workers"] == 2 and elastic["resizes"] == 1
    (resize,) = elastic["history"]
    assert (resize["fromWorkers"], resize["toWorkers"], resize["reason"]) == (3, 2, "CapacityLost")
    assert "4 Insufficient example.com/slot" in resize["message"]
    assert [e.reason for e in p.events] == ["Resized", "Restarting"]
    assert p.status["restarts"] == {"disruptions": 0, "failures": 0}
    assert p.status["phase"] == "Restarting"
    restarting = next(c for c in p.status["conditions"] if c["type"] == "Restarting")
    assert restarting["reason"] == "Resizing"
    assert set(p.status["trackedPods"]) == {"j-worker-0", "j-worker-1"}

    # The old Pods end (42 after SIGTERM) and go: nothing counted; 2 workers come back.
    ended = [pod(i, phase="Failed", ready=False, termination=Termination(42)) for i in (0, 1)]
    after = rc.plan(j, p.status, ended, NOW + timedelta(seconds=5))
    assert after.status["restarts"] == {"disruptions": 0, "failures": 0}
    fresh = rc.plan(j, after.status, [], NOW + timedelta(seconds=6))
    assert creates(fresh) == ["j-worker-0", "j-worker-1"]
    assert {a.workers for a in fresh.actions if isinstance(a, planning.CreatePod)} == {2}
    assert fresh.status["restarts"] == {"disruptions": 0, "failures": 0}


def test_never_below_min_workers() -> None:
    j = ejob()
    s = {"elastic": {"workers": 2, "resizes": 1}}
    p = rc.plan(j, s, [pod(0), stuck(1, timedelta(seconds=600))], NOW)
    assert not deletes(p) and p.status["elastic"]["workers"] == 2


def test_probe_while_short_grow_after_the_cool_down() -> None:
    j = ejob()
    shrunk_at = NOW - timedelta(seconds=100)
    s = {
        "elastic": {
            "workers": 2,
            "resizes": 1,
            "history": [
                {
                    "time": shrunk_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "fromWorkers": 3,
                    "toWorkers": 2,
                    "reason": "CapacityLost",
                    "message": "x",
                }
            ],
        }
    }
    running = [pod(0), pod(1)]
    p = rc.plan(j, s, running, NOW)
    assert p.status["phase"] == "Running" and probes(p) == ["j-probe-0"]
    assert p.status["elastic"]["growth"] == "Probing for a place for 1 more worker"
    # A pending probe: nothing to do; no new probe either. The status says why it waits.
    p = rc.plan(j, p.status, [*running, replace(probe(0), waiting=UNSCHEDULABLE)], NOW)
    assert not probes(p) and not deletes(p)
    assert p.status["elastic"]["growth"] == (
        "Probe Pod j-probe-0 waits for a place: " + UNSCHEDULABLE
    )
    # Bound for a moment only (it may yet give way to a Pod of higher priority): wait.
    p = rc.plan(j, p.status, [*running, probe(0, node="n1", bound_for=1)], NOW)
    assert not deletes(p) and p.requeue_after == 4
    assert p.status["elastic"]["growth"] == (
        "Probe Pod j-probe-0 was scheduled on node n1: counted as a place once it has stayed 5s"
    )
    # Bound, but within the cool-down: wait for it.
    p = rc.plan(j, p.status, [*running, probe(0, node="n1")], NOW)
    assert not deletes(p) and p.requeue_after == 20
    assert p.status["elastic"]["growth"] == (
        "Capacity returned (probe Pod j-probe-0 was scheduled on node n1); growing after "
        "the cool-down (resizeCooldownSeconds), at 2026-01-01T12:00:20Z"
    )
    # After the cool-down: grow; every Pod and the probe go.
    later = NOW + timedelta(seconds=21)
    g = rc.plan(j, p.status, [*running, probe(0, node="n1")], later)
    assert sorted(deletes(g)) == ["j-probe-0", "j-worker-0", "j-worker-1"]
    # A grow lets the training group save at one step: the Pods' own grace period.
    assert {a.grace_seconds for a in g.actions if isinstance(a, planning.DeletePod)} == {None}
    assert g.status["elastic"]["workers"] == 3 and g.status["elastic"]["resizes"] == 2
    assert g.status["elastic"]["history"][-1]["reason"] == "CapacityReturned"
    assert "j-probe-0 was scheduled on node n1" in g.events[0].message
    assert g.status["phase"] == "Restarting"
    assert "growth" not in g.status["elastic"]  # at the preferred size: nothing to say
    fresh = rc.plan(j, g.status, [], later + timedelta(seconds=3))
    assert creates(fresh) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert not probes(fresh)


def test_a_probe_the_kubelet_refused_is_no_capacity_and_is_made_again() -> None:
    # Bound by the scheduler, then refused by the kubelet (its view of the node behind):
    # Failed with its node set. No grow on it; it goes, and a new one looks again.
    j = ejob()
    s = {"elastic": {"workers": 2, "resizes": 1}}
    refused = replace(
        probe(0, node="n1", bound_for=600), phase="Failed", status_reason="OutOfexample.com/slot"
    )
    p = rc.plan(j, s, [pod(0), pod(1), refused], NOW)
    assert deletes(p) == ["j-probe-0"] and p.status["elastic"]["workers"] == 2
    assert not probes(p)  # the name is still taken: made again once it is gone
    again = rc.plan(j, p.status, [pod(0), pod(1)], NOW)
    assert probes(again) == ["j-probe-0"]


def test_probes_go_when_the_job_is_not_running_or_finished() -> None:
    j = ejob(clean_pod_policy="None")
    s = {"elastic": {"workers": 2, "resizes": 1}, "phase": "Running"}
    p = rc.plan(j, s, [pod(0), pod(1, ready=False), probe(0)], NOW)
    assert deletes(p) == ["j-probe-0"] and not probes(p)
    done = [
        pod(0, phase="Succeeded", ready=False, termination=Termination(0)),
        pod(1),
        probe(0, node="n1"),
    ]
    f = rc.plan(j, s, done, NOW)
    assert f.status["phase"] == "Succeeded" and "j-probe-0" in deletes(f)


def test_a_worker_that_exited_0_is_finishing_not_restarting_and_the_job_does_not_grow() -> None:
    # The kubelet reports the trainer terminated (exit 0) and Ready False a moment before
    # the Pod is Succeeded: the job is neither restarting nor a job to grow.
    j = ejob()
    s = rc.plan(j, {"elastic": {"workers": 2, "resizes": 1}}, [pod(0), pod(1)], NOW).status
    assert s["phase"] == "Running"
    exiting = pod(1, ready=False, termination=Termination(0))
    p = rc.plan(j, s, [pod(0), exiting, probe(0, node="n1", bound_for=600)], NOW)
    assert p.status["phase"] == "Running" and not p.events
    assert deletes(p) == ["j-probe-0"] and not probes(p)
    assert p.status["elastic"]["workers"] == 2
    # An exit that is not 0 is no finish: the job restarts.
    failing = pod(1, ready=False, termination=Termination(1))
    assert rc.plan(j, s, [pod(0), failing], NOW).status["phase"] == "Restarting"


def test_workers_above_the_size_are_deleted() -> None:
    j = ejob()
    s = {"elastic": {"workers": 2, "resizes": 1}}
    p = rc.plan(j, s, [pod(0), pod(1), pod(2)], NOW)
    assert "j-worker-2" in deletes(p)
    assert p.status["replicaStatuses"]["worker"]["active"] == 2


def test_a_job_that_is_not_elastic_has_no_elastic_status() -> None:
    p = rc.plan(job(3), {}, [pod(i) for i in range(3)], NOW)
    assert "elastic" not in p.status and not probes(p)


# -- the Pods, the trainer's configuration and validation of an elastic job ----------------

ELASTIC_SPEC = {
    "workers": 3,
    "elastic": {"minWorkers": 1},
    "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}},
    "template": {
        "spec": {
            "nodeSelector": {"pool": "spot"},
            "containers": [{"name": "trainer", "resources": {"limits": {"example.com/slot": 1}}}],
        }
    },
}


def elastic_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": "e", "namespace": "ml", "uid": "u", "generation": 1},
        "spec": {**ELASTIC_SPEC, **spec},
    }


def test_pods_at_the_current_size_and_the_trainer_knows_the_preferred_one() -> None:
    pod0 = children.build_pod(elastic_job(), "worker", 1, default_image="img", workers=2)
    env = {e["name"]: e.get("value") for e in pod0["spec"]["containers"][0]["env"]}
    assert len(json.loads(env["TF_CONFIG"])["cluster"]["worker"]) == 2
    config = trainer_config.parse_config(env["KERASJOB_TRAINER_CONFIG"])
    assert config.elastic == trainer_config.ElasticConfig(3, "KeepGlobalBatch")
    full = children.build_pod(elastic_job(), "worker", 1, default_image="img")
    assert (
        len(
            json.loads(
                next(
                    e["value"]
                    for e in full["spec"]["containers"][0]["env"]
                    if e["name"] == "TF_CONFIG"
                )
            )["cluster"]["worker"]
        )
        == 3
    )


def test_a_probe_pod_has_the_workers_constraints_and_no_role_in_the_job() -> None:
    worker = children.build_pod(elastic_job(), "worker", 0, default_image="img")
    probe_pod = children.build_probe_pod(elastic_job(), 1, default_image="img")
    assert probe_pod["metadata"]["name"] == "e-probe-1"
    assert probe_pod["metadata"]["labels"][labels.REPLICA_TYPE] == "probe"
    assert labels.CHIEF not in probe_pod["metadata"]["labels"]
    assert probe_pod["metadata"]["ownerReferences"] == worker["metadata"]["ownerReferences"]
    spec = probe_pod["spec"]
    for key in ("nodeSelector", "volumes", "restartPolicy"):
        assert spec[key] == worker["spec"][key], key
    (container,) = spec["containers"]
    assert container["resources"] == worker["spec"]["containers"][0]["resources"]
    assert container["command"][0] == "python" and not container["env"]
    assert "priorityClassName" not in spec
    low = children.build_probe_pod(
        elastic_job(
            template={"spec": {"priorityClassName": "high", "containers": [{"name": "trainer"}]}}
        ),
        0,
        default_image="img",
        priority_class="kerasjob-elastic-probe",
    )
    assert low["spec"]["priorityClassName"] == "kerasjob-elastic-probe"
    assert "hostname" not in spec and "subdomain" not in spec


def test_validation_of_an_elastic_job() -> None:
    assert validation.validate_job(elastic_job()) == []
    # 64 x 3 = 192 splits over 1, 2 and 3 workers; 50 x 3 = 150 not over 2 (75 each: yes),
    # 10 x 3 = 30 over 1, 2, 3: yes; 7 x 3 = 21 over 2: no.
    (problem,) = validation.validate_job(elastic_job(trainer={"batchSizePerReplica": 7}))
    assert "cannot be split evenly across 2 worker(s)" in problem
    (problem,) = validation.validate_job(elastic_job(elastic={"minWorkers": 4}))
    assert "minWorkers (4) must be at most spec.workers (3)" in problem
    # A user's own program picks its own batch.
    assert (
        validation.validate_job(
            elastic_job(trainer={"batchSizePerReplica": 7, "command": ["python", "x.py"]})
        )
        == []
    )


#: A worker of the growing job: bound, asking for cpu and a slot on the kwok pool.
SLOT = "example.com/slot"
SHAPED: dict[str, Any] = dict(
    node_name="n1", requests=frozenset({"cpu", SLOT}), node_selector=(("type", "kwok"),)
)


def _waiter(message: str, *, since: float = 30.0, **kw: Any) -> PodView:
    """A Pod of job other/big that the scheduler could not place ``since`` seconds ago."""
    base: dict[str, Any] = dict(
        name="big-worker-0",
        namespace="other",
        job_name="big",
        owner_uid="big-uid",
        phase="Pending",
        ready=False,
        unschedulable_since=NOW - timedelta(seconds=since),
        waiting="Unschedulable: " + message,
    )
    base.update(kw)
    return pod(0, "big0", **base)


def _short(waiters: tuple[PodView, ...], now: Any = NOW) -> planning.Plan:
    """A job at 2 of 3 workers, running, its probe 0 bound, 1 pending; ``waiters`` wait."""
    j = replace(ejob(), others_waiting=waiters)
    s = {"elastic": {"workers": 2, "resizes": 1}}
    running = [replace(pod(i), **SHAPED) for i in (0, 1)]
    return rc.plan(j, s, [*running, probe(0, node="n1"), probe(1)], now)


SAME_PLACE = (
    f"0/4 nodes are available: 4 Insufficient {SLOT}. preemption: 0/4 nodes are "
    "available: 4 No preemption victims found for incoming pod."
)


def test_a_job_that_needs_the_same_place_holds_growth_back_then_growth_proceeds() -> None:
    waiter = _waiter(SAME_PLACE, node_selector=(("type", "kwok"),))
    p = _short((waiter,))
    assert sorted(deletes(p)) == ["j-probe-0", "j-probe-1"] and not probes(p)
    assert p.status["elastic"]["workers"] == 2  # no grow
    assert p.status["elastic"]["growth"] == (
        "Not probing: other/big waits for a place that growth would take "
        f"({SLOT} on nodes type=kwok) since 2026-01-01T11:59:30Z; probing from "
        "2026-01-01T12:04:30Z at the latest"
    )
    # It is looked at again: the settling look (5 s), or the bound, whichever first.
    assert p.requeue_after == PROBE_SETTLE_SECONDS
    # The bound passed and the Pod still waits: growth no longer gives way.
    later = NOW + timedelta(seconds=GIVE_WAY_SECONDS - 30)
    g = _short((waiter,), later)
    assert g.status["elastic"]["workers"] == 3 and "growth" not in g.status["elastic"]
    assert g.status["elastic"]["history"][-1]["reason"] == "CapacityReturned"
    # Just before the bound it still gives way.
    assert (
        "Not probing" in _short((waiter,), later - timedelta(seconds=1)).status["elastic"]["growth"]
    )


def test_an_impossible_job_elsewhere_does_not_hold_growth_back() -> None:
    for why in (
        # Its checkpoint claim does not exist.
        '0/4 nodes are available: persistentvolumeclaim "ckpt" not found. preemption: '
        "0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        # A node selector no node has.
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        # More of the slot than any node has: no eviction would make it fit.
        f"0/4 nodes are available: 4 Insufficient {SLOT}. preemption: 0/4 nodes are "
        "available: 4 Preemption is not helpful for scheduling.",
        # More devices than the class has, and the growing job asks for none.
        "0/4 nodes are available: 4 cannot allocate all claims. preemption: 0/4 nodes are "
        "available: 4 No preemption victims found for incoming pod.",
    ):
        p = _short((_waiter(why),))
        assert (
            "growth" not in p.status["elastic"]
            or "Not probing" not in (p.status["elastic"]["growth"])
        ), why
        assert p.status["elastic"]["history"][-1]["reason"] == "CapacityReturned", why


def test_a_job_in_another_namespace_needing_other_resources_does_not_hold_growth_back() -> None:
    gpu = (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes "
        "are available: 4 No preemption victims found for incoming pod."
    )
    assert _short((_waiter(gpu),)).status["elastic"]["history"][-1]["reason"] == (
        "CapacityReturned"
    )
    # Another node pool (a label both select with different values): not the same place.
    pool = _waiter(SAME_PLACE, node_selector=(("type", "gpu"),))
    assert _short((pool,)).status["elastic"]["history"][-1]["reason"] == "CapacityReturned"
    # A lower priority than the growing job's workers: it would not get the place anyway.
    low = _waiter(SAME_PLACE, priority=-5)
    assert _short((low,)).status["elastic"]["history"][-1]["reason"] == "CapacityReturned"
    # The same, at the same priority and any node: it holds growth back.
    assert "Not probing" in _short((_waiter(SAME_PLACE),)).status["elastic"]["growth"]


def test_the_scheduler_verdict_is_read_as_data() -> None:
    from kerasjob.planner.contention import DEVICES, shortage

    s = shortage(
        "Unschedulable: 0/5 nodes are available: 2 Insufficient cpu, 1 Insufficient "
        "memory, 1 Too many pods, 1 node(s) had untolerated taint {a: b}. preemption: "
        "0/5 nodes are available: 1 Preemption is not helpful for scheduling, 4 No "
        "preemption victims found for incoming pod."
    )
    assert s.resources == {"cpu", "memory", "pods"} and not s.hopeless
    assert shortage("Unschedulable: 0/1 nodes are available: 1 cannot allocate all claims.") == (
        replace(s, resources=frozenset({DEVICES}), hopeless=False)
    )
    assert shortage("Unschedulable: no nodes available to schedule pods").resources == set()


def test_which_jobs_wait_and_a_job_that_waited_a_moment_ago_still_counts() -> None:
    from kerasjob.planner.elastic import WaitingJobs, waiting_jobs

    # Which jobs wait: a Pod (not a probe, not going) that no node fits.
    a1 = stuck(1, timedelta(0))
    index = {
        ("ns", "a"): [pod(0), a1],
        ("ns", "b"): [pod(0), probe(0)],
        ("ns", "c"): [replace(stuck(0, timedelta(0)), deletion_timestamp=NOW)],
        ("ns", "d"): [replace(probe(0), unschedulable_since=NOW)],
    }
    assert waiting_jobs(index) == {("ns", "a"): (a1,)}
    tracker = WaitingJobs()
    waiting = {("ns", "a"): [a1]}
    assert tracker.others(waiting, 100.0, ("ns", "x")) == (a1,)
    assert tracker.others(waiting, 100.0, ("ns", "a")) == ()  # its own Pods are not others'
    # Between the two Pods of its restart, a moment later: still waiting.
    assert tracker.get({("ns", "a"): []}, 101.0) == {("ns", "a"): (a1,)}
    assert tracker.get({("ns", "a"): []}, 100.0 + PROBE_SETTLE_SECONDS + 1) == {}


def test_a_pods_view_keeps_where_it_can_go_and_what_it_takes() -> None:
    from kerasjob.planner.podview import pod_view

    view = pod_view(
        {
            "metadata": {
                "name": "j-worker-0",
                "labels": {labels.JOB_NAME: "j", labels.REPLICA_TYPE: "worker"},
            },
            "spec": {
                "priority": 100,
                "nodeSelector": {"type": "kwok", "a": "b"},
                "resourceClaims": [{"name": "gpu"}],
                "containers": [
                    {"resources": {"requests": {"cpu": "1", "memory": "0"}}},
                    {"resources": {"limits": {SLOT: "1"}}},
                ],
            },
        }
    )
    assert view is not None
    assert (view.priority, view.requests, view.node_selector, view.claims) == (
        100,
        {"cpu", SLOT},
        (("a", "b"), ("type", "kwok")),
        True,
    )
