"""GPUs through DRA (issue 24): a template's `resourceClaims` (pod.spec) and a container's
`resources.claims` reach every Pod the operator makes -- workers, chief, evaluator, an elastic
job's probe, the Kueue Workload's pod sets, a gang's Pods -- so that Kubernetes'
resourceclaim controller gives each Pod a claim of its own from the ResourceClaimTemplate.

The merge rules are Kubernetes' strategic merge ones: pod.spec.resourceClaims merges by name
(patchMergeKey name); a container's resources.claims has no merge key and is replaced as a
whole; `null` deletes (an evaluator without a GPU)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from kerasjob.api import KerasJob, ReplicaRole
from kerasjob.integrations import gang, kueue
from kerasjob.manifests import children, validation

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "kerasjob/trainer:test"
CLAIMS = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]


def job(template: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    tpl = (
        template
        if template is not None
        else {
            "spec": {
                "resourceClaims": copy.deepcopy(CLAIMS),
                "containers": [
                    {
                        "name": "trainer",
                        "resources": {"claims": [{"name": "gpu"}], "requests": {"cpu": "2"}},
                    }
                ],
            }
        }
    )
    return {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": "dra", "namespace": "ml", "uid": "0123456789abcdef", "generation": 1},
        "spec": {
            "workers": 2,
            "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}},
            "template": tpl,
            **spec,
        },
    }


def trainer(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")


def test_every_worker_pod_carries_the_template_claim_and_the_trainer_uses_it() -> None:
    pods = children.desired_pods(job(), default_image=IMAGE)
    assert [p["metadata"]["name"] for p in pods] == ["dra-worker-0", "dra-worker-1"]
    for pod in pods:
        # By template, never a claim name: each Pod gets its own claim from Kubernetes.
        assert pod["spec"]["resourceClaims"] == CLAIMS
        resources = trainer(pod)["resources"]
        assert resources["claims"] == [{"name": "gpu"}]
        assert resources["requests"] == {"cpu": "2"}
    # A re-created Pod (a later restart attempt) asks the same: a fresh claim.
    again = children.build_pod(job(), ReplicaRole.WORKER, 1, default_image=IMAGE, restart_attempt=3)
    assert again["spec"]["resourceClaims"] == CLAIMS
    assert trainer(again)["resources"]["claims"] == [{"name": "gpu"}]


def test_a_template_without_a_trainer_named_container_keeps_its_claims() -> None:
    tpl = {
        "spec": {
            "resourceClaims": CLAIMS,
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
        }
    }
    pod = children.build_pod(job(tpl), ReplicaRole.WORKER, 0, default_image=IMAGE)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer"]
    assert trainer(pod)["resources"]["claims"] == [{"name": "gpu"}]


def test_a_sidecar_may_share_the_pods_claim() -> None:
    tpl = {
        "spec": {
            "resourceClaims": CLAIMS,
            "containers": [
                {"name": "trainer", "resources": {"claims": [{"name": "gpu"}]}},
                {"name": "monitor", "image": "dcgm", "resources": {"claims": [{"name": "gpu"}]}},
            ],
        }
    }
    pod = children.build_pod(job(tpl), ReplicaRole.WORKER, 0, default_image=IMAGE)
    assert [c.get("resources", {}).get("claims") for c in pod["spec"]["containers"]] == [
        [{"name": "gpu"}],
        [{"name": "gpu"}],
    ]


def test_role_templates_merge_claims_by_name_and_null_removes_them() -> None:
    j = job(
        chief={
            "replicas": 1,
            "template": {
                "spec": {
                    # The chief: a second claim beside the job's (merged by name), and its trainer
                    # uses both (a container's claims list is replaced as a whole).
                    "resourceClaims": [
                        {"name": "nic", "resourceClaimTemplateName": "rdma"},
                        {"name": "gpu", "resourceClaimTemplateName": "big-gpu"},
                    ],
                    "containers": [
                        {
                            "name": "trainer",
                            "resources": {"claims": [{"name": "gpu"}, {"name": "nic"}]},
                        }
                    ],
                }
            },
        },
        evaluator={
            "replicas": 1,
            "template": {
                "spec": {
                    # The evaluator: no GPU.
                    "resourceClaims": None,
                    "containers": [{"name": "trainer", "resources": {"claims": None}}],
                }
            },
        },
    )
    by_name = {p["metadata"]["name"]: p for p in children.desired_pods(j, default_image=IMAGE)}
    chief = by_name["dra-chief-0"]
    assert chief["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "big-gpu"},
        {"name": "nic", "resourceClaimTemplateName": "rdma"},
    ]
    assert trainer(chief)["resources"] == {
        "claims": [{"name": "gpu"}, {"name": "nic"}],
        "requests": {"cpu": "2"},
    }
    evaluator = by_name["dra-evaluator-0"]
    assert "resourceClaims" not in evaluator["spec"]
    assert trainer(evaluator)["resources"] == {"requests": {"cpu": "2"}}
    assert by_name["dra-worker-0"]["spec"]["resourceClaims"] == CLAIMS


def test_an_elastic_jobs_probe_asks_for_a_workers_devices() -> None:
    j = job(elastic={"minWorkers": 1})
    probe = children.build_probe_pod(j, 0, default_image=IMAGE)
    assert probe["spec"]["resourceClaims"] == CLAIMS
    assert trainer(probe)["resources"]["claims"] == [{"name": "gpu"}]


def test_the_kueue_workload_and_the_gang_keep_the_claims() -> None:
    b = job()
    b["metadata"]["labels"] = {kueue.QUEUE_LABEL: "gpus"}
    model = KerasJob.from_body(b)
    pods = {
        role.value: (n, children.build_pod(model, role, 0, default_image=IMAGE))
        for role, n in model.spec.replicas().items()
    }
    (pod_set,) = kueue.build_workload(b, pods)["spec"]["podSets"]
    assert pod_set["count"] == 2
    assert pod_set["template"]["spec"]["resourceClaims"] == CLAIMS
    assert trainer(pod_set["template"])["resources"]["claims"] == [{"name": "gpu"}]
    # Kueue's flavor assignment (nodeSelector etc.) leaves them alone.
    update = kueue.PodSetUpdate(node_selector={"gpu": "a100"})
    pod = kueue.apply_update(children.build_pod(model, "worker", 1, default_image=IMAGE), update)
    assert pod["spec"]["resourceClaims"] == CLAIMS
    # In a gang: the same Pod, in the PodGroup.
    in_gang = gang.apply(
        children.build_pod(model, "worker", 1, default_image=IMAGE),
        gang.gang_for("dra", "0123456789abcdef", 2),
    )
    assert in_gang["spec"]["resourceClaims"] == CLAIMS
    assert in_gang["spec"]["schedulingGroup"]["podGroupName"].startswith("dra-gang-")


def test_the_dra_example_is_valid_and_asks_a_claim_per_worker() -> None:
    docs = list(yaml.safe_load_all((ROOT / "examples" / "gpu-dra.yaml").read_text()))
    (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    (kj,) = [d for d in docs if d["kind"] == "KerasJob"]
    assert template["apiVersion"] == "resource.k8s.io/v1"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    body = {**kj, "metadata": {**kj["metadata"], "namespace": "ml", "uid": "u"}}
    assert validation.validate_job(body) == []
    pods = children.desired_pods(body, default_image=IMAGE)
    assert len(pods) == kj["spec"]["workers"]
    for pod in pods:
        (claim,) = pod["spec"]["resourceClaims"]
        assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
        assert trainer(pod)["resources"]["claims"] == [{"name": claim["name"]}]
        # DRA instead of the device plugin's count, not both.
        assert "nvidia.com/gpu" not in yaml.safe_dump(pod)
