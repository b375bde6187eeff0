"""Parameter servers (spec.ps): the API's refusals, TF_CONFIG with ps tasks, the ps Pods and
what covers them, and the planner's restart policy for a parameter-server job (a lost
worker is re-created alone; a lost ps or chief restarts the group), through `plan`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kerasjob.api import (
    PS_NEEDS_CHIEF,
    PS_NEEDS_TENSORFLOW,
    PS_NO_EVALUATOR,
    PS_NOT_ELASTIC,
    KerasJob,
    ReplicaRole,
)
from kerasjob.control.jobview import ParsedJob
from kerasjob.manifests import children, validation
from kerasjob.manifests.tf_config import build_tf_config
from kerasjob.planner import planning
from kerasjob.planner.planning import ALL_REDUCE, PARAMETER_SERVER
from kerasjob.planner.podview import PodView, Termination
from kerasjob.tools import crdgen
from kerasjob_contract.trainer_config import parse_config
from kerasjob_dev.testing.builders import NOW, creates, deletes, run, settle
from kerasjob_dev.testing.manifests import IMAGE, PVC, env_of
from kerasjob_dev.testing.manifests import job as job_body

PS_SPEC: dict[str, Any] = {
    "workers": 2,
    "chief": {"replicas": 1},
    "ps": {"replicas": 1, "template": {"metadata": {"labels": {"tier": "ps"}}}},
    "checkpoint": {"volume": PVC},
}
ROLES = (("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0))


def _problems(spec: dict[str, Any]) -> list[str]:
    return validation.validate_job(KerasJob.from_body(job_body(spec)))


# -- the API ----------------------------------------------------------------------------------


def test_a_ps_job_is_valid_and_has_its_ps_pods() -> None:
    model = KerasJob.from_body(job_body(PS_SPEC))
    assert validation.validate_job(model) == []
    assert model.spec.replicas() == {
        ReplicaRole.WORKER: 2,
        ReplicaRole.CHIEF: 1,
        ReplicaRole.PS: 1,
    }
    assert model.spec.chief_task() == (ReplicaRole.CHIEF, 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"chief": None}, PS_NEEDS_CHIEF),
        ({"chief": {"replicas": 0}}, PS_NEEDS_CHIEF),
        ({"trainer": {"backend": "jax"}, "chief": None}, PS_NEEDS_TENSORFLOW),
        ({"elastic": {"minWorkers": 1}}, PS_NOT_ELASTIC),
        ({"evaluator": {"replicas": 1}}, PS_NO_EVALUATOR),
    ],
)
def test_what_a_ps_job_cannot_be_is_refused_in_one_line(
    change: dict[str, Any], message: str
) -> None:
    spec = {k: v for k, v in {**PS_SPEC, **change}.items() if v is not None}
    assert message in _problems(spec)
    assert "\n" not in message


def test_the_crd_refuses_the_same_in_the_same_words() -> None:
    spec = crdgen.render_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    validations = spec["properties"]["spec"]["x-kubernetes-validations"]
    rules = {r.get("message"): r["rule"] for r in validations}
    assert rules[PS_NEEDS_CHIEF] == (
        "!has(self.ps) || (has(self.chief) && self.chief.replicas == 1)"
    )
    assert rules[PS_NEEDS_TENSORFLOW] == "!has(self.ps) || self.trainer.backend == 'tensorflow'"
    assert PS_NOT_ELASTIC in rules and PS_NO_EVALUATOR in rules
    assert "ps cannot be added, removed or resized after creation" in rules
    ps = spec["properties"]["spec"]["properties"]["ps"]["properties"]["replicas"]
    assert (ps["minimum"], ps["maximum"], ps["default"]) == (1, 100, 1)


# -- TF_CONFIG and the Pods -------------------------------------------------------------------


def test_tf_config_lists_the_ps_tasks() -> None:
    counts = {"worker": 2, "chief": 1, "ps": 2}
    tf_config = build_tf_config("j", "ns", counts, 2222, "ps", 1).to_dict()
    assert list(tf_config["cluster"]) == ["chief", "worker", "ps"]
    assert tf_config["cluster"]["ps"] == [
        "j-ps-0.j.ns.svc:2222",
        "j-ps-1.j.ns.svc:2222",
    ]
    assert tf_config["task"] == {"type": "ps", "index": 1}
    with pytest.raises(ValueError, match="ps:2 is not in the job"):
        build_tf_config("j", "ns", counts, 2222, "ps", 2)


def test_every_pod_gets_the_ps_cluster_and_the_ps_strategy() -> None:
    body = job_body(PS_SPEC)
    for role, index in ROLES:
        pod = children.build_pod(body, role, index, default_image=IMAGE)
        assert pod["metadata"]["name"] == f"mnist-{role}-{index}"
        assert pod["metadata"]["labels"]["kerasjob.dev/replica-type"] == role
        env = env_of(pod)
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["task"] == {"type": role, "index": index}
        assert tf_config["cluster"]["ps"] == ["mnist-ps-0.mnist.ml.svc:2222"]
        config = parse_config(env["KERASJOB_TRAINER_CONFIG"])
        assert config.strategy == "parameterServer"
        assert config.runtime_key == "tensorflow/parameterServer"
        # The ps template applies to the ps only.
        assert (pod["metadata"]["labels"].get("tier") == "ps") == (role == "ps")


def test_a_job_without_ps_keeps_its_runtime() -> None:
    pod = children.build_pod(job_body(), "worker", 0, default_image=IMAGE)
    config = parse_config(env_of(pod)["KERASJOB_TRAINER_CONFIG"])
    assert config.strategy is None and config.runtime_key == "tensorflow"


def test_the_service_and_the_network_policy_select_the_ps_pods() -> None:
    body = job_body(PS_SPEC)
    ps = children.build_pod(body, "ps", 0, default_image=IMAGE)
    labels = ps["metadata"]["labels"]
    service = children.build_service(body)
    policy = children.build_network_policy(body)
    assert ps["spec"]["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    (rule,) = [
        r for r in policy["spec"]["ingress"] if {"port": 2222, "protocol": "TCP"} in r["ports"]
    ]
    assert rule["from"][0]["podSelector"]["matchLabels"].items() <= labels.items()


def test_the_job_view_has_the_ps_tasks_and_the_parameter_server_policy() -> None:
    parsed = ParsedJob(job_body(PS_SPEC))
    view = parsed.view(job_body(PS_SPEC))
    assert [t.name for t in view.tasks] == [
        "mnist-worker-0",
        "mnist-worker-1",
        "mnist-chief-0",
        "mnist-ps-0",
    ]
    assert view.chief == "mnist-chief-0" and view.group is PARAMETER_SERVER
    assert ParsedJob(job_body()).view(job_body()).group is ALL_REDUCE


# -- the planner: who restarts with a lost Pod ------------------------------------------------


def test_the_group_policies_are_values() -> None:
    assert ALL_REDUCE.stopped_with("worker") == {"chief", "worker"}
    assert PARAMETER_SERVER.stopped_with("worker") == frozenset()
    assert PARAMETER_SERVER.stopped_with("ps") == {"chief", "worker", "ps"}
    assert PARAMETER_SERVER.stopped_with("chief") == {"chief", "worker", "ps"}


def _ps_job() -> planning.JobView:
    tasks = tuple(planning.Task(f"j-{r}-{i}", r, i) for r, i in ROLES)
    return planning.JobView(
        name="j",
        namespace="ns",
        uid="job-uid",
        generation=1,
        tasks=tasks,
        chief="j-chief-0",
        group=PARAMETER_SERVER,
    )


def _pod(role: str, i: int, uid: str | None = None, **kw: Any) -> PodView:
    base: dict[str, Any] = dict(
        name=f"j-{role}-{i}",
        namespace="ns",
        uid=uid or f"u-{role}{i}",
        job_name="j",
        owner_uid="job-uid",
        role=role,
        index=i,
        phase="Running",
        ready=True,
    )
    base.update(kw)
    return PodView(**base)


def _all(**replace: PodView) -> list[PodView]:
    return [replace.get(f"{r}{i}", _pod(r, i)) for r, i in ROLES]


def _killed(role: str, i: int) -> tuple[planning.JobView, planning.Plan]:
    """A running PS job whose Pod (role, i) was SIGKILLed: the plan, counted once."""
    j = _ps_job()
    s = settle(j, _all(), settle(j, _all()))
    killed = _pod(role, i, phase="Failed", termination=Termination(137, "Error"))
    p = run(j, s, _all(**{f"{role}{i}": killed}))
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    return j, p


def test_a_lost_worker_is_recreated_alone_and_nobody_restarts() -> None:
    j, p = _killed("worker", 1)
    last = p.status["lastRestart"]
    assert last["pod"] == "j-worker-1" and "restartedInPlace" not in last
    event = next(e for e in p.events if e.reason == "PodDisrupted")
    assert "restart in place" not in event.message
    assert deletes(p) == ["j-worker-1"]  # the chief, the ps and worker 0 are left alone
    # The job runs on: phase Running, condition Running True saying without which Pod.
    assert p.status["phase"] == "Running"
    (running,) = [c for c in p.status["conditions"] if c["type"] == "Running"]
    assert running["status"] == "True" and running["message"] == (
        "3 of 4 Pods running and ready: training goes on without j-worker-1 "
        "(re-created, it rejoins)"
    )
    gone = [x for x in _all() if x.name != "j-worker-1"]
    p = run(j, p.status, gone)
    assert creates(p) == ["j-worker-1"] and not deletes(p)
    assert not any(e.reason == "Regrouping" for e in p.events)
    p = run(j, p.status, _all(worker1=_pod("worker", 1, uid="u-worker1b")))
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["phase"] == "Running"


def test_a_lost_ps_restarts_the_group_and_is_counted_once() -> None:
    j = _ps_job()
    s = settle(j, _all(), settle(j, _all()))
    p = run(j, s, _all(ps0=_pod("ps", 0, deletion_timestamp=NOW)))
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert p.status["lastRestart"]["restartedInPlace"] == [
        "j-chief-0",
        "j-worker-0",
        "j-worker-1",
    ]
    # A worker whose in-place restarts ran out leaves with 43 (its ps was lost) in the
    # same round: the consequence of the ps's loss, not counted again.
    left = _pod("worker", 0, phase="Failed", ready=False, termination=Termination(43, "Error"))
    p = run(j, p.status, [x for x in _all(worker0=left) if x.name != "j-ps-0"])
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}
    assert deletes(p) == ["j-worker-0"]  # re-created with the ps once both are gone
    (event,) = [e for e in p.events if e.reason == "PodDisrupted"]
    assert "its group's restart after Pod j-ps-0's PodDeleted" in event.message
    assert "(not counted again)" in event.message
    p = run(j, p.status, [x for x in _all() if x.name not in ("j-ps-0", "j-worker-0")])
    assert sorted(creates(p)) == ["j-ps-0", "j-worker-0"]
    assert p.status["restarts"] == {"disruptions": 1, "failures": 0}


def test_a_lost_chief_restarts_the_group() -> None:
    _, p = _killed("chief", 0)
    assert p.status["phase"] == "Restarting"
    assert p.status["lastRestart"]["restartedInPlace"] == [
        "j-worker-0",
        "j-worker-1",
        "j-ps-0",
    ]


def test_a_ps_job_without_any_worker_is_not_running() -> None:
    j = _ps_job()
    s = settle(j, _all(), settle(j, _all()))
    gone = [x for x in _all() if x.role != "worker"]
    assert run(j, s, gone).status["phase"] == "Restarting"
