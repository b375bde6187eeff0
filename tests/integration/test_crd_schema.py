"""The generated CRD on a real API server: what it accepts, rejects, defaults and documents.

Everything the unit tests can only assert about the YAML (CEL compiles and means what we
think, defaults are applied, immutability holds, status is not pruned, `kubectl explain`
shows the models' descriptions) is checked here against kube-apiserver itself.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kerasjob import API_GROUP, API_VERSION, KIND, PLURAL
from kerasjob.api import KerasJobSpec, KerasJobStatus
from kerasjob.manifests import validation
from kerasjob.tools import crdgen
from kerasjob_dev.cluster import Cluster, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
PVC = {"persistentVolumeClaim": {"claimName": "ckpt"}}


@pytest.fixture(scope="module")
def crd(cluster: Cluster, kube: Any) -> dict[str, Any]:
    """The generated CRD, applied server-side and served.

    Left installed afterwards: other integration tests (the operator's) use the same CRD,
    and deleting a CRD deletes every KerasJob in the cluster.
    """
    manifest = crdgen.render_crd()
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=kerasjob-tests",
        "-f",
        "-",
        input=json.dumps(manifest),
    )
    ext = client.ApiextensionsV1Api(kube)

    def established() -> bool:
        conds = ext.read_custom_resource_definition(crdgen.CRD_NAME).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    wait_for(established, timeout=30, what="the KerasJob CRD to be Established")
    custom = client.CustomObjectsApi(kube)
    wait_for(
        lambda: custom.list_cluster_custom_object(API_GROUP, API_VERSION, PLURAL) or True,
        timeout=30,
        what="kerasjobs to be served",
    )
    return manifest


def body(name: str = "job", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"workers": 1} if spec is None else spec,
    }


def create(kube: Any, namespace: str, obj: dict[str, Any], *, dry_run: bool = False) -> Any:
    return client.CustomObjectsApi(kube).create_namespaced_custom_object(
        API_GROUP, API_VERSION, namespace, PLURAL, obj, dry_run="All" if dry_run else None
    )


def rejection(kube: Any, namespace: str, obj: dict[str, Any]) -> str:
    """The API server's message for an object it must reject (dry run: nothing is stored)."""
    with pytest.raises(ApiException) as err:
        create(kube, namespace, obj, dry_run=True)
    assert err.value.status == 422, err.value.body
    return str(json.loads(err.value.body)["message"])


# --- accepted ----------------------------------------------------------------------------


VALID_SPECS: dict[str, dict[str, Any]] = {
    "minimal": {},
    "single-worker-emptydir": {"workers": 1, "checkpoint": {"volume": {"emptyDir": {}}}},
    "multi-worker-pvc": {"workers": 4, "checkpoint": {"volume": PVC}},
    "chief-evaluator": {
        "workers": 2,
        "chief": {},
        "evaluator": {
            "replicas": 1,
            "template": {
                "spec": {"containers": [{"name": "trainer", "resources": {"limits": {"cpu": "1"}}}]}
            },
        },
        "checkpoint": {"volume": {"nfs": {"server": "nfs", "path": "/ckpt"}}},
    },
    "zero-replica-roles": {"workers": 1, "chief": {"replicas": 0}, "evaluator": {"replicas": 0}},
    "bucket-s3": {
        "workers": 2,
        "chief": {},
        "evaluator": {},
        "checkpoint": {
            "location": "s3://ckpt-bucket/team/runs",
            "endpoint": "http://versitygw.store.svc:7070",
            "region": "us-east-1",
            "pathStyle": True,
            "credentials": {"secretName": "aws-keys"},
        },
    },
    "bucket-gs": {
        "workers": 3,
        "trainer": {"backend": "jax"},
        "checkpoint": {"location": "gs://ckpt.bucket_1", "credentials": {"secretName": "k"}},
    },
    "bucket-identity": {
        "workers": 2,
        "ps": {"replicas": 1},
        "chief": {},
        "checkpoint": {"location": "gs://ckpt-bucket/"},
    },
    "bucket-single-pod": {"workers": 1, "checkpoint": {"location": "s3://abc"}},
    "jax": {"workers": 3, "trainer": {"backend": "jax"}, "checkpoint": {"volume": PVC}},
    "jax-zero-replica-roles": {
        "workers": 1,
        "trainer": {"backend": "jax"},
        "chief": {"replicas": 0},
        "evaluator": {"replicas": 0},
    },
    "everything": {
        "workers": 2,
        "port": 3333,
        "image": "registry.example/trainer:1",
        "trainer": {
            "model": "my_pkg.models:build",
            "epochs": 1,
            "stepsPerEpoch": 10,
            "batchSizePerReplica": 8,
            "learningRate": 0.001,
            "seed": 7,
            "dataset": {"source": "path", "path": "/data/train.npz", "format": "npz"},
        },
        "template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {
                "nodeSelector": {"gpu": "yes"},
                "containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            },
        },
        "checkpoint": {"volume": PVC, "mountPath": "/ckpt", "saveFreq": 10},
        "restartPolicy": "ExitCode",
        "backoffLimit": 0,
        "activeDeadlineSeconds": 3600,
        "ttlSecondsAfterFinished": 0,
        "cleanPodPolicy": "All",
        "suspend": True,
    },
}


@pytest.mark.parametrize("case", sorted(VALID_SPECS))
def test_valid_specs_are_accepted(crd: Any, kube: Any, namespace: str, case: str) -> None:
    create(kube, namespace, body(case, VALID_SPECS[case]), dry_run=True)


def _example_jobs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "examples").glob("**/*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == KIND:
                out.append((f"{path.relative_to(ROOT)}:{doc['metadata']['name']}", doc))
    return out


def test_examples_are_accepted(crd: Any, kube: Any, namespace: str) -> None:
    examples = _example_jobs()
    if not examples:
        pytest.skip("no KerasJob in examples/ yet")
    for where, doc in examples:
        doc = copy.deepcopy(doc)
        doc["metadata"].pop("namespace", None)
        try:
            create(kube, namespace, doc, dry_run=True)
        except ApiException as e:
            pytest.fail(f"{where} rejected: {e.body}")


# --- rejected ----------------------------------------------------------------------------


INVALID: dict[str, tuple[str, dict[str, Any], str]] = {
    # case: (name, spec, expected fragment of the server's message)
    "workers-0": ("job", {"workers": 0}, "should be greater than or equal to 1"),
    "chief-2": (
        "job",
        {"chief": {"replicas": 2}, "checkpoint": {"volume": PVC}},
        "should be less than or equal to 1",
    ),
    "port-range": ("job", {"port": 70000}, "should be less than or equal to 65535"),
    "restart-policy": ("job", {"restartPolicy": "Always"}, "Unsupported value"),
    "learning-rate-0": ("job", {"trainer": {"learningRate": 0}}, "should be greater than 0"),
    "dataset-path-missing": (
        "job",
        {"trainer": {"dataset": {"source": "path"}}},
        "dataset.path is required when dataset.source is 'path'",
    ),
    "dataset-path-unused": (
        "job",
        {"trainer": {"dataset": {"path": "/x.npz"}}},
        "only allowed when dataset.source is 'path'",
    ),
    "model-format": (
        "job",
        {"trainer": {"model": "not a model!"}},
        "trainer.model must be a built-in model name",
    ),
    "model-no-function": (
        "job",
        {"trainer": {"model": "pkg.module:"}},
        "trainer.model must be a built-in model name",
    ),
    "volume-two-sources": (
        "job",
        {"checkpoint": {"volume": {**PVC, "emptyDir": {}}}},
        "exactly one volume source key",
    ),
    "volume-typo": (
        "job",
        {"checkpoint": {"volume": {"persistentVolumeclaim": {}}}},
        "unknown volume source",
    ),
    "mount-path-relative": (
        "job",
        {"checkpoint": {"mountPath": "ckpt"}},
        "checkpoint.mountPath must be an absolute path",
    ),
    "multi-worker-no-volume": ("job", {"workers": 2}, "needs a shared checkpoint.volume"),
    "multi-worker-emptydir": (
        "job",
        {"workers": 2, "checkpoint": {"volume": {"emptyDir": {}}}},
        "needs a shared checkpoint.volume",
    ),
    "evaluator-no-volume": ("job", {"evaluator": {}}, "needs a shared checkpoint.volume"),
    "bucket-and-volume": (
        "job",
        {"workers": 2, "checkpoint": {"volume": PVC, "location": "s3://ckpt-bucket"}},
        "checkpoint.volume and checkpoint.location are exclusive",
    ),
    "bucket-and-emptydir-single-pod": (
        "job",
        {"workers": 1, "checkpoint": {"volume": {"emptyDir": {}}, "location": "gs://bkt"}},
        "checkpoint.volume and checkpoint.location are exclusive",
    ),
    "bucket-bad-scheme": (
        "job",
        {"workers": 2, "checkpoint": {"location": "http://ckpt-bucket/x"}},
        "checkpoint.location must be s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]",
    ),
    "bucket-bad-name": (
        "job",
        {"workers": 2, "checkpoint": {"location": "s3://Ckpt"}},
        "checkpoint.location must be s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]",
    ),
    "bucket-endpoint-not-a-url": (
        "job",
        {"workers": 2, "checkpoint": {"location": "s3://bkt", "endpoint": "store:7070"}},
        "checkpoint.endpoint must be an http:// or https:// URL",
    ),
    "endpoint-without-location": (
        "job",
        {"workers": 2, "checkpoint": {"volume": PVC, "endpoint": "http://store:7070"}},
        "checkpoint.endpoint, region, pathStyle and credentials are for a checkpoint.location",
    ),
    "credentials-without-location": (
        "job",
        {"workers": 1, "checkpoint": {"credentials": {"secretName": "s"}}},
        "are for a checkpoint.location",
    ),
    "credentials-bad-secret-name": (
        "job",
        {
            "workers": 2,
            "checkpoint": {"location": "s3://bkt", "credentials": {"secretName": "A_b"}},
        },
        "spec.checkpoint.credentials.secretName",
    ),
    "backend-unknown": ("job", {"trainer": {"backend": "torch"}}, "Unsupported value"),
    "jax-chief": (
        "job",
        {"workers": 2, "chief": {}, "trainer": {"backend": "jax"}, "checkpoint": {"volume": PVC}},
        "backend jax: process 0 (worker 0) is the chief; spec.chief is for backend tensorflow",
    ),
    "jax-evaluator": (
        "job",
        {
            "workers": 2,
            "evaluator": {},
            "trainer": {"backend": "jax"},
            "checkpoint": {"volume": PVC},
        },
        "spec.evaluator is for backend tensorflow",
    ),
    "managed-by-no-domain": ("job", {"managedBy": "multikueue"}, "spec.managedBy"),
    "managed-by-too-long": ("job", {"managedBy": "example.com/" + "x" * 60}, "spec.managedBy"),
    "name-not-dns-1035": ("job.v1", {}, "must be a DNS-1035 label"),
    "name-too-long": ("j" * 55, {"workers": 1}, "metadata.name is too long"),
    "name-too-long-evaluator": (
        "j" * 52,
        {"evaluator": {}, "checkpoint": {"volume": PVC}},
        "metadata.name is too long",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_specs_are_rejected(crd: Any, kube: Any, namespace: str, case: str) -> None:
    name, spec, expected = INVALID[case]
    message = rejection(kube, namespace, body(name, spec))
    assert expected in message, message


def test_longest_valid_names_are_accepted(crd: Any, kube: Any, namespace: str) -> None:
    create(
        kube,
        namespace,
        body("j" * 54, {"workers": 10, "checkpoint": {"volume": PVC}}),
        dry_run=True,
    )
    create(
        kube,
        namespace,
        body("j" * 51, {"evaluator": {}, "checkpoint": {"volume": PVC}}),
        dry_run=True,
    )


# --- defaults ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, {}], ids=["no-spec", "empty-spec"])
def test_server_defaults_equal_model_defaults(
    crd: Any, kube: Any, namespace: str, spec: dict[str, Any] | None
) -> None:
    obj = body("defaults")
    if spec is None:
        del obj["spec"]
    else:
        obj["spec"] = spec
    got = create(kube, namespace, obj, dry_run=True)
    assert got["spec"] == KerasJobSpec().model_dump(by_alias=True, exclude_none=True, mode="json")


def test_nested_defaults_are_applied(crd: Any, kube: Any, namespace: str) -> None:
    got = create(
        kube,
        namespace,
        body(
            "nested",
            {
                "chief": {},
                "trainer": {"dataset": {"source": "synthetic"}},
                "checkpoint": {"volume": PVC},
            },
        ),
        dry_run=True,
    )
    assert got["spec"]["chief"] == {"replicas": 1}
    assert got["spec"]["trainer"]["epochs"] == 3
    assert got["spec"]["trainer"]["dataset"] == {"source": "synthetic"}
    assert got["spec"]["checkpoint"] == {
        "volume": PVC,
        "mountPath": "/kerasjob/checkpoint",
        "saveFreq": 100,
    }


def test_explicit_nulls_are_dropped(crd: Any, kube: Any, namespace: str) -> None:
    got = create(
        kube, namespace, body("nulls", {"workers": 1, "chief": None, "image": None}), dry_run=True
    )
    assert "chief" not in got["spec"] and "image" not in got["spec"]


def test_unknown_fields_in_templates_are_kept_elsewhere_pruned(
    crd: Any, kube: Any, namespace: str
) -> None:
    template = {"spec": {"containers": [{"name": "trainer", "futureField": {"x": 1}}]}}
    got = create(
        kube,
        namespace,
        body("prune", {"workers": 1, "template": template, "bogus": 1, "trainer": {"bogus": 2}}),
        dry_run=True,
    )
    assert got["spec"]["template"] == template
    assert "bogus" not in got["spec"] and "bogus" not in got["spec"]["trainer"]


# --- immutability ------------------------------------------------------------------------


@pytest.fixture
def stored(crd: Any, kube: Any, namespace: str) -> dict[str, Any]:
    spec = {
        "workers": 2,
        "chief": {},
        "checkpoint": {"volume": PVC},
        "template": {"spec": {"nodeSelector": {"a": "b"}}},
    }
    return create(kube, namespace, body("stored", spec))


def patch(kube: Any, namespace: str, spec: dict[str, Any]) -> Any:
    return client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        API_GROUP, API_VERSION, namespace, PLURAL, "stored", {"spec": spec}
    )


IMMUTABLE: dict[str, tuple[dict[str, Any], str]] = {
    "workers": ({"workers": 3}, "workers is immutable"),
    "port": ({"port": 2223}, "port is immutable"),
    "trainer": ({"trainer": {"epochs": 9}}, "trainer is immutable"),
    "checkpoint-save-freq": ({"checkpoint": {"saveFreq": 5}}, "checkpoint is immutable"),
    "checkpoint-volume": (
        {"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "other"}}}},
        "checkpoint is immutable",
    ),
    "checkpoint-volume-to-bucket": (
        {"checkpoint": {"volume": None, "location": "s3://ckpt-bucket"}},
        "checkpoint is immutable",
    ),
    "chief-removed": ({"chief": None}, "chief cannot be added, removed or resized"),
    "chief-resized": ({"chief": {"replicas": 0}}, "chief cannot be added, removed or resized"),
    "evaluator-added": ({"evaluator": {}}, "evaluator cannot be added, removed or resized"),
    "managed-by-added": ({"managedBy": "kueue.x-k8s.io/multikueue"}, "managedBy is immutable"),
}


@pytest.mark.parametrize("case", sorted(IMMUTABLE))
def test_immutable_fields(stored: Any, kube: Any, namespace: str, case: str) -> None:
    change, expected = IMMUTABLE[case]
    with pytest.raises(ApiException) as err:
        patch(kube, namespace, change)
    assert err.value.status == 422
    assert expected in json.loads(err.value.body)["message"]


def test_managed_by_cannot_change_or_be_removed(crd: Any, kube: Any, namespace: str) -> None:
    create(kube, namespace, body("handed", {"managedBy": "kueue.x-k8s.io/multikueue"}))
    api = client.CustomObjectsApi(kube)
    for change in ({"managedBy": "kerasjob.dev/operator"}, {"managedBy": None}):
        with pytest.raises(ApiException) as err:
            api.patch_namespaced_custom_object(
                API_GROUP, API_VERSION, namespace, PLURAL, "handed", {"spec": change}
            )
        assert err.value.status == 422
        assert "managedBy is immutable" in json.loads(err.value.body)["message"]
    got = api.patch_namespaced_custom_object(  # the rest stays mutable
        API_GROUP, API_VERSION, namespace, PLURAL, "handed", {"spec": {"suspend": True}}
    )
    assert got["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"


def test_mutable_fields(stored: Any, kube: Any, namespace: str) -> None:
    got = patch(
        kube,
        namespace,
        {
            "suspend": True,
            "activeDeadlineSeconds": 60,
            "ttlSecondsAfterFinished": 5,
            "backoffLimit": 1,
            "image": "other:1",
            "template": {"spec": {"nodeSelector": {"a": "c"}}},
            "chief": {"template": {"spec": {"nodeSelector": {"role": "chief"}}}},
            "cleanPodPolicy": "None",
        },
    )
    assert got["spec"]["suspend"] is True and got["spec"]["backoffLimit"] == 1
    assert got["spec"]["chief"]["template"]["spec"]["nodeSelector"] == {"role": "chief"}


# --- status --------------------------------------------------------------------------------


def test_status_subresource_round_trips_the_model(stored: Any, kube: Any, namespace: str) -> None:
    status = KerasJobStatus.model_validate(
        {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Running",
                    "status": "True",
                    "reason": "AllReady",
                    "message": "2/2 workers ready",
                    "observedGeneration": 1,
                    "lastTransitionTime": "2024-05-01T12:00:00Z",
                }
            ],
            "replicaStatuses": {"worker": {"active": 2, "ready": 2}, "chief": {"active": 1}},
            "restarts": {"disruptions": 1, "failures": 2},
            "lastRestart": {
                "time": "2024-05-01T12:00:00Z",
                "reason": "Evicted",
                "pod": "stored-worker-1",
                "exitCode": 137,
                "disruption": True,
            },
            "progress": {
                "epoch": 1,
                "step": 340,
                "totalSteps": 600,
                "loss": 0.125,
                "metrics": {"accuracy": 0.5},
                "samplesPerSecond": 1000.5,
                "updatedAt": "2024-05-01T12:00:00Z",
            },
            "startTime": "2024-05-01T11:00:00Z",
            "observedGeneration": 1,
        }
    )
    wire = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    custom = client.CustomObjectsApi(kube)
    got = custom.patch_namespaced_custom_object_status(
        API_GROUP, API_VERSION, namespace, PLURAL, "stored", {"status": wire}
    )
    assert got["status"] == wire  # nothing pruned, nothing rejected
    # A plain update cannot write status (subresource), and status cannot bump generation.
    assert got["metadata"]["generation"] == stored["metadata"]["generation"]


def test_status_is_validated(stored: Any, kube: Any, namespace: str) -> None:
    custom = client.CustomObjectsApi(kube)
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, namespace, PLURAL, "stored", {"status": {"phase": "Exploded"}}
        )
    assert err.value.status == 422


# --- kubectl ---------------------------------------------------------------------------------


def test_kubectl_explain_shows_the_model_descriptions(crd: Any, cluster: Cluster) -> None:
    # The OpenAPI document is published a moment after the CRD is Established.
    out = wait_for(
        lambda: (
            (r := cluster.kubectl("explain", "kerasjob.spec.trainer", check=False)).returncode == 0
            and r.stdout
        ),
        timeout=60,
        what="kubectl explain kerasjob.spec.trainer",
    )
    flat = " ".join(out.split())
    expected = " ".join(KerasJobSpec.model_fields["trainer"].description.split())
    assert expected[:60] in flat, out
    for field in ("model", "dataset", "epochs", "stepsPerEpoch", "batchSizePerReplica"):
        assert field in out
    spec_out = cluster.kubectl("explain", "kj.spec.checkpoint.mountPath").stdout
    assert "<namespace>/<name>/<uid>" in spec_out


def test_printer_columns(stored: Any, cluster: Cluster, namespace: str) -> None:
    out = cluster.kubectl("get", "kj", "-n", namespace).stdout
    header = out.splitlines()[0].split()
    assert header == [
        "NAME",
        "PHASE",
        "WORKERS",
        "READY",
        "DISRUPTIONS",
        "FAILURES",
        "STEP",
        "AGE",
        "KUEUE",
    ]
    assert out.splitlines()[1].split()[0] == "stored"


# --- the children the API renders are valid Kubernetes objects -------------------------------


def test_rendered_children_pass_api_server_validation(crd: Any, kube: Any, namespace: str) -> None:
    """build_service/desired_pods output, dry-run created: the API server's own validation."""
    from kerasjob.manifests import children

    spec = {
        "workers": 2,
        "chief": {},
        "evaluator": {
            "template": {
                "spec": {"containers": [{"name": "trainer", "resources": {"limits": {"cpu": "1"}}}]}
            }
        },
        "checkpoint": {"volume": PVC},
        "template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "env": [{"name": "EXTRA", "value": "1"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    },
                    {"name": "sidecar", "image": "busybox"},
                ],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
        },
    }
    # Dry-run: the server applies its defaults but persists nothing, so an operator running
    # beside this test (other tests start one) never creates real Pods of the same names.
    job = create(kube, namespace, body("children", spec), dry_run=True)
    job["metadata"].setdefault("uid", "00000000-0000-0000-0000-000000000000")
    assert validation.validate_job(job) == []
    core = client.CoreV1Api(kube)
    core.create_namespaced_service(namespace, children.build_service(job), dry_run="All")
    pods = children.desired_pods(job, default_image="kerasjob/trainer:test", restart_attempt=3)
    assert len(pods) == 4
    for pod in pods:
        got = core.create_namespaced_pod(namespace, pod, dry_run="All")
        assert got.metadata.owner_references[0].uid == job["metadata"]["uid"]
        assert got.spec.hostname == pod["metadata"]["name"]


@pytest.mark.parametrize(
    "checkpoint",
    [
        {"location": "gs://ckpt-bucket/x", "credentials": {"secretName": "gcs-key"}},
        {
            "location": "s3://ckpt-bucket",
            "endpoint": "http://store:7070",
            "pathStyle": True,
            "credentials": {"secretName": "aws-keys"},
        },
    ],
    ids=["gs", "s3"],
)
def test_rendered_bucket_pods_pass_api_server_validation(
    crd: Any, kube: Any, namespace: str, checkpoint: dict[str, Any]
) -> None:
    """A bucket job's Pods (every role), with the credentials Secret's envFrom or read-only
    key mount, dry-run created."""
    from kerasjob.manifests import children

    spec = {"workers": 2, "chief": {}, "evaluator": {}, "checkpoint": checkpoint}
    job = create(kube, namespace, body("bucket", spec), dry_run=True)
    job["metadata"].setdefault("uid", "00000000-0000-0000-0000-000000000000")
    assert validation.validate_job(job) == []
    core = client.CoreV1Api(kube)
    for pod in children.desired_pods(job, default_image="kerasjob/trainer:test"):
        got = core.create_namespaced_pod(namespace, pod, dry_run="All")
        assert {v.name for v in got.spec.volumes} >= {"kerasjob-checkpoint", "kerasjob-tmp"}
