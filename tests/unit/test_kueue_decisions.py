"""Kueue integration, pure part: the Workload, the gate, flavor updates, the status writes;
and the planner holding a job of a LocalQueue until its Workload is admitted."""

from __future__ import annotations

from typing import Any

from kerasjob.api import KerasJob
from kerasjob.integrations import kueue
from kerasjob.manifests import children
from kerasjob.planner import planning, scheduling
from kerasjob.planner import reconcile as rc
from kerasjob.planner.podview import Termination
from kerasjob_dev.testing.builders import NOW, creates, job, pod, run


def deletes(p: planning.Plan) -> list[str]:
    return [a.name for a in p.actions if isinstance(a, planning.DeletePod)]


def body(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {
            "name": "mnist",
            "namespace": "ns",
            "uid": "0123456789abcdef",
            "generation": 1,
            "labels": {kueue.QUEUE_LABEL: "team-a", **labels},
        },
        "spec": {"workers": 3, "chief": {"replicas": 1}},
    }


def cond(type_: str, status: str, reason: str = "R", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def workload(*conds: dict[str, Any], admission: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conds)}
    if admission is not None:
        status["admission"] = admission
    return {
        "metadata": {
            "name": "kerasjob-mnist-01234567",
            "generation": 1,
            "resourceVersion": "7",
            "ownerReferences": [{"uid": "0123456789abcdef"}],
        },
        "status": status,
    }


ADMISSION = {
    "clusterQueue": "cq",
    "podSetAssignments": [
        {"name": "worker", "flavors": {"cpu": "gpu-a", "memory": "gpu-a"}, "count": 3},
        {"name": "chief", "flavors": {"cpu": "default"}, "count": 1},
    ],
}
ADMITTED = workload(cond("QuotaReserved", "True"), cond("Admitted", "True"), admission=ADMISSION)


def test_queue_label_and_names() -> None:
    assert kueue.queue_name({kueue.QUEUE_LABEL: "q"}) == "q"
    assert kueue.queue_name({}) is None and kueue.queue_name(None) is None
    assert kueue.workload_name("mnist", "0123456789abcdef") == "kerasjob-mnist-01234567"


def test_workload_has_one_podset_per_role_owned_by_the_job() -> None:
    b = body(**{kueue.PRIORITY_LABEL: "high"})
    model = KerasJob.from_body(b)
    pods = {
        role.value: (n, children.build_pod(model, role, 0, default_image="img"))
        for role, n in model.spec.replicas().items()
    }
    wl = kueue.build_workload(b, pods, priority=("high", 1000))
    assert wl["kind"] == "Workload" and wl["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert wl["metadata"]["name"] == "kerasjob-mnist-01234567"
    (owner,) = wl["metadata"]["ownerReferences"]
    assert owner["kind"] == "KerasJob" and owner["controller"]
    assert owner["uid"] == "0123456789abcdef"
    assert wl["metadata"]["labels"]["kerasjob.dev/job-name"] == "mnist"
    spec = wl["spec"]
    assert spec["queueName"] == "team-a"
    assert [(p["name"], p["count"]) for p in spec["podSets"]] == [("worker", 3), ("chief", 1)]
    container = spec["podSets"][0]["template"]["spec"]["containers"][0]
    assert container["name"] == "trainer" and container["image"] == "img"
    assert spec["priorityClassRef"]["name"] == "high" and spec["priority"] == 1000


def test_gate_says_why_a_job_waits() -> None:
    g = kueue.gate("team-a", None)
    assert not g.admitted and "team-a" in g.message
    pending = workload(cond("QuotaReserved", "False", "Pending", "insufficient quota for cpu"))
    g = kueue.gate("team-a", pending)
    assert (g.admitted, g.reason) == (False, "Queued")
    assert g.message == "queued in LocalQueue team-a: insufficient quota for cpu"
    g = kueue.gate("team-a", ADMITTED)
    assert g.admitted and g.reason == "Admitted" and "ClusterQueue cq" in g.message
    evicted = workload(
        cond("QuotaReserved", "True"),
        cond("Admitted", "True"),
        cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x)"),
        admission=ADMISSION,
    )
    g = kueue.gate("team-a", evicted)
    assert not g.admitted and g.reason == "Evicted"
    assert "Preempted to accommodate a workload (UID: x)" in g.message
    by_job = workload(
        cond(
            "Evicted",
            "True",
            "Preempted",
            "Preempted to accommodate a workload (UID: 5f0c, JobUID: "
            "0a1b2c3d-0000-4000-8000-000000000001) due to prioritization",
        )
    )
    g = kueue.gate("q", by_job, {"0a1b2c3d-0000-4000-8000-000000000001": "high"}.get)
    assert g.message.startswith("evicted by Kueue (Preempted: by KerasJob high: Preempted to")


def test_flavors_and_admission_checks_update_the_pods() -> None:
    wl = workload(cond("Admitted", "True"), admission=ADMISSION)
    wl["status"]["admissionChecks"] = [
        {
            "name": "prov",
            "podSetUpdates": [{"name": "worker", "labels": {"l": "v"}, "annotations": {"a": "b"}}],
        }
    ]
    flavors = {
        "gpu-a": {
            "spec": {
                "nodeLabels": {"pool": "a100"},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
            }
        },
        "default": {"spec": {}},
    }
    upd = kueue.pod_set_updates(wl, flavors)
    assert upd["worker"].node_selector == {"pool": "a100"}
    assert upd["worker"].labels == {"l": "v"} and upd["worker"].annotations == {"a": "b"}
    assert upd["chief"] == kueue.PodSetUpdate()
    pod_manifest: dict[str, Any] = {
        "metadata": {"labels": {"x": "1"}},
        "spec": {"nodeSelector": {"type": "kwok"}, "tolerations": [{"key": "t"}]},
    }
    kueue.apply_update(pod_manifest, upd["worker"])
    assert pod_manifest["spec"]["nodeSelector"] == {"type": "kwok", "pool": "a100"}
    assert pod_manifest["spec"]["tolerations"] == [
        {"key": "t"},
        {"key": "gpu", "operator": "Exists"},
    ]
    assert pod_manifest["metadata"]["labels"] == {"x": "1", "l": "v"}
    assert kueue.apply_update({"spec": {}}, None) == {"spec": {}}


def test_release_after_eviction_and_finished() -> None:
    assert kueue.release_status(ADMITTED, NOW) is None
    evicted = workload(
        cond("QuotaReserved", "True"),
        cond("Admitted", "True"),
        cond("Evicted", "True", "Preempted", "by wl-2"),
        admission=ADMISSION,
    )
    patch = kueue.release_status(evicted, NOW)
    assert patch is not None and patch["admission"] is None
    by_type = {c["type"]: c for c in patch["conditions"]}
    assert by_type["QuotaReserved"]["status"] == "False"
    assert by_type["QuotaReserved"]["reason"] == "Pending"
    assert by_type["Admitted"]["status"] == "False"
    assert by_type["Requeued"]["status"] == "True" and by_type["Evicted"]["status"] == "True"
    released = workload(*patch["conditions"])
    assert kueue.release_status(released, NOW) is None
    done = kueue.finished_status(ADMITTED, True, "mnist-chief-0 completed", NOW)
    assert done is not None
    fin = {c["type"]: c for c in done["conditions"]}["Finished"]
    assert (fin["status"], fin["reason"]) == ("True", "Succeeded")
    assert kueue.finished_status(workload(*done["conditions"]), True, "", NOW) is None


def test_podsets_must_match_the_job() -> None:
    wl = {"spec": {"podSets": [{"name": "worker", "count": 3}, {"name": "chief", "count": 1}]}}
    assert kueue.matches(wl, {"worker": 3, "chief": 1})
    assert not kueue.matches(wl, {"worker": 4, "chief": 1})
    assert not kueue.matches(wl, {"worker": 3})


def test_pods_ready_follows_the_pods_like_kueues_job_reconciler() -> None:
    def reason(wl: dict[str, Any], ready: bool) -> tuple[str, str] | None:
        patch = kueue.pods_ready_status(wl, ready, NOW)
        if patch is None:
            return None
        c = {c["type"]: c for c in patch["conditions"]}["PodsReady"]
        return c["status"], c["reason"]

    assert reason(ADMITTED, False) == ("False", "WaitForStart")
    assert reason(ADMITTED, True) == ("True", "Started")
    started = workload(
        *ADMITTED["status"]["conditions"], cond("PodsReady", "True", "Started"), admission=ADMISSION
    )
    assert reason(started, True) is None
    assert reason(started, False) == ("False", "WaitForRecovery")
    waiting = workload(
        *ADMITTED["status"]["conditions"],
        cond("PodsReady", "False", "WaitForRecovery"),
        admission=ADMISSION,
    )
    assert reason(waiting, True) == ("True", "Recovered")
    evicted = workload(*started["status"]["conditions"], cond("Evicted", "True", "Preempted"))
    assert reason(evicted, False) == ("False", "WaitForStart")


# -- the planner -----------------------------------------------------------------------------


def queued(
    reason: str = "Queued", message: str = "queued in LocalQueue q: no quota"
) -> scheduling.Gate:
    return scheduling.Gate(False, reason, message, by="Kueue")


def test_queued_job_has_no_pods_and_says_why() -> None:
    j = job(gate=queued())
    p = run(j, {}, [])
    assert not creates(p) and p.status["phase"] == "Queued"
    by_type = {c["type"]: c for c in p.status["conditions"]}
    assert by_type["Admitted"]["status"] == "False"
    assert by_type["Admitted"]["message"] == "queued in LocalQueue q: no quota"
    assert by_type["Suspended"]["reason"] == "Queued"
    assert [(e.reason, e.message) for e in p.events] == [
        ("Queued", "queued in LocalQueue q: no quota")
    ]
    again = run(j, p.status, [])
    assert not again.events and again.status == p.status


def test_admission_creates_pods_and_eviction_is_neither_failure_nor_disruption() -> None:
    admitted = scheduling.Gate(
        True, "Admitted", "admitted by Kueue to ClusterQueue cq (LocalQueue q)", by="Kueue"
    )
    s = run(job(gate=queued()), {}, []).status
    p = run(job(gate=admitted), s, [])
    assert creates(p) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert any(e.reason == "Resumed" for e in p.events)
    s = run(job(gate=admitted), p.status, [pod(i) for i in range(3)]).status
    assert s["phase"] == "Running"
    # Kueue preempts it: Pods deleted, nothing counted, even when they exit 42 on SIGTERM.
    evicted = job(gate=queued("Evicted", "evicted by Kueue (Preempted: by x)"))
    p = run(evicted, s, [pod(i) for i in range(3)])
    assert sorted(deletes(p)) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert p.status["phase"] == "Queued"
    assert [e.reason for e in p.events] == ["Evicted"]
    exited = [
        pod(
            i,
            phase="Failed",
            ready=False,
            deletion_timestamp=NOW,
            termination=Termination(exit_code=42, reason="Error"),
        )
        for i in range(3)
    ]
    s = run(evicted, p.status, exited).status
    s = run(evicted, s, []).status
    assert s["restarts"] == {"disruptions": 0, "failures": 0}
    # Re-admitted: the same Pods again, restart attempt unchanged.
    p = run(job(gate=admitted), s, [])
    assert creates(p) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert p.restart_attempt == 0
    assert {c["type"]: c["status"] for c in p.status["conditions"]}["Admitted"] == "True"


def test_a_job_without_kueue_gets_no_admitted_condition() -> None:
    s = run(job(), {}, [pod(i) for i in range(3)]).status
    assert "Admitted" not in {c["type"] for c in s["conditions"]}
    assert rc.plan(job(suspend=True), s, [], NOW).status["phase"] == "Suspended"
