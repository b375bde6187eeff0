"""`children`: the Service, Pods and NetworkPolicy a KerasJob wants (identity, labels,
ownership, image precedence, the template merged over the defaults, tolerations).
Validation: `test_validation`; what differs per backend: `test_runtimes`."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kerasjob.api import (
    KerasJob,
    ReplicaRole,
    RestartPolicy,
    labels,
)
from kerasjob.manifests import children
from kerasjob_contract import DEFAULT_METRICS_PORT, Env
from kerasjob_contract import trainer_config as trainer_config_parser
from kerasjob_dev.testing.manifests import (
    IMAGE,
    PVC,
    TMP,
    env_of,
    job,
    trainer,
)


def test_service_is_headless_and_selects_the_job() -> None:
    svc = children.build_service(job())
    assert svc["kind"] == "Service"
    assert svc["metadata"]["name"] == "mnist" and svc["metadata"]["namespace"] == "ml"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {labels.JOB_NAME: "mnist"}
    assert svc["spec"]["ports"] == [
        {"name": "tf", "port": 2222, "targetPort": 2222, "protocol": "TCP"}
    ]
    assert svc["metadata"]["ownerReferences"] == [children.owner_reference(job())]
    assert svc["metadata"]["labels"][labels.MANAGED_BY] == "kerasjob"


def test_label_selectors() -> None:
    assert labels.selector("j") == {"kerasjob.dev/job-name": "j"}
    assert labels.selector_string("j") == "kerasjob.dev/job-name=j"


def test_service_port_follows_spec() -> None:
    svc = children.build_service(job({"workers": 1, "port": 3000}))
    assert svc["spec"]["ports"][0]["port"] == 3000


def test_pod_identity_and_dns() -> None:
    pod = children.build_pod(job(), "worker", 1, default_image=IMAGE)
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"]["name"] == "mnist-worker-1"
    assert pod["metadata"]["namespace"] == "ml"
    assert pod["spec"]["hostname"] == "mnist-worker-1"
    assert pod["spec"]["subdomain"] == "mnist"


def test_pod_labels_and_owner() -> None:
    pod = children.build_pod(job(), ReplicaRole.WORKER, 1, default_image=IMAGE)
    lbls = pod["metadata"]["labels"]
    assert lbls[labels.JOB_NAME] == "mnist"
    assert lbls[labels.REPLICA_TYPE] == "worker"
    assert lbls[labels.REPLICA_INDEX] == "1"
    assert lbls[labels.MANAGED_BY] == labels.MANAGED_BY_VALUE
    assert labels.CHIEF not in lbls
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kerasjob.dev/v1alpha1",
            "kind": "KerasJob",
            "name": "mnist",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_chief_label_is_worker_0_or_the_dedicated_chief() -> None:
    plain = children.desired_pods(job(), default_image=IMAGE)
    assert [p["metadata"]["labels"].get(labels.CHIEF) for p in plain] == ["true", None]
    spec = {"workers": 2, "chief": {}, "checkpoint": {"volume": PVC}}
    with_chief = children.desired_pods(job(spec), default_image=IMAGE)
    assert {
        p["metadata"]["name"]: p["metadata"]["labels"].get(labels.CHIEF) for p in with_chief
    } == {"mnist-worker-0": None, "mnist-worker-1": None, "mnist-chief-0": "true"}


def test_annotations() -> None:
    pod = children.build_pod(job(), "worker", 0, default_image=IMAGE, restart_attempt=4)
    ann = pod["metadata"]["annotations"]
    assert ann[labels.RESTART_ATTEMPT] == "4"
    assert ann[labels.JOB_GENERATION] == "1"
    # No spec-hash annotation: it was written and never read (a template change applies to
    # Pods created afterwards; JOB_GENERATION says which spec made a Pod).
    assert set(ann) == {labels.RESTART_ATTEMPT, labels.JOB_GENERATION}


def test_trainer_container_defaults() -> None:
    pod = children.build_pod(job(), "worker", 0, default_image=IMAGE)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer"]
    c = trainer(pod)
    assert c["image"] == IMAGE
    assert c["command"] == ["python", "-m", "kerasjob_trainer"]
    assert c["ports"] == [
        {"name": "tf", "containerPort": 2222, "protocol": "TCP"},
        {"name": "metrics", "containerPort": DEFAULT_METRICS_PORT, "protocol": "TCP"},
    ]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["volumeMounts"] == [
        {"name": children.CHECKPOINT_VOLUME, "mountPath": "/kerasjob/checkpoint"},
        {"name": children.TMP_VOLUME, "mountPath": "/tmp"},
    ]
    assert pod["spec"]["volumes"] == [{"name": children.CHECKPOINT_VOLUME, **PVC}, TMP]
    # Pod Security "restricted" by default.
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_template_may_loosen_the_security_context() -> None:
    spec = {
        "workers": 1,
        "template": {
            "spec": {
                "securityContext": {"runAsNonRoot": False},
                "containers": [
                    {"name": "trainer", "securityContext": {"readOnlyRootFilesystem": False}}
                ],
            }
        },
    }
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": False,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert trainer(pod)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["enableServiceLinks"] is False


def test_env() -> None:
    pod = children.build_pod(job(), "worker", 1, default_image=IMAGE, restart_attempt=2)
    env = env_of(pod)
    assert json.loads(env[Env.TF_CONFIG.value]) == {
        "cluster": {
            "worker": ["mnist-worker-0.mnist.ml.svc:2222", "mnist-worker-1.mnist.ml.svc:2222"]
        },
        "task": {"type": "worker", "index": 1},
    }
    assert env[Env.JOB_NAME.value] == "mnist"
    assert env[Env.NAMESPACE.value] == "ml"
    assert env[Env.ROLE.value] == "worker"
    assert env[Env.INDEX.value] == "1"
    assert env[Env.CHECKPOINT_DIR.value] == "/kerasjob/checkpoint/ml/mnist/uid-1"
    assert env[Env.RESTART_ATTEMPT.value] == "2"
    assert env[Env.METRICS_PORT.value] == str(DEFAULT_METRICS_PORT)
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert json.loads(env[Env.TRAINER_CONFIG.value]) == {
        "model": "mnist-mlp",
        "dataset": {"source": "mnist-sample"},
        "epochs": 3,
        "stepsPerEpoch": 200,
        "batchSizePerReplica": 64,
        "seed": 42,
        "saveFreq": 100,
        "deterministic": False,
        "backend": "tensorflow",
    }
    # every env value is a string, as the API requires
    assert all(isinstance(v, str) for v in env.values())


def test_trainer_config_is_accepted_by_the_trainer() -> None:
    spec = {
        "workers": 1,
        "trainer": {
            "model": "pkg.mod:build",
            "epochs": 2,
            "learningRate": 0.01,
            "dataset": {"source": "path", "path": "/data/train.npz"},
        },
        "checkpoint": {"saveFreq": 7},
    }
    env = env_of(children.build_pod(job(spec), "worker", 0, default_image=IMAGE))
    cfg = trainer_config_parser.parse_config(env[Env.TRAINER_CONFIG.value])
    assert cfg.model == "pkg.mod:build" and cfg.epochs == 2 and cfg.save_freq == 7
    assert cfg.learning_rate == 0.01
    assert cfg.dataset.source == "npz" and cfg.dataset.path == "/data/train.npz"


@pytest.mark.parametrize(
    ("dataset", "source", "path"),
    [
        ({"source": "path", "path": "/d/x.npz"}, "npz", "/d/x.npz"),
        ({"source": "path", "path": "/d/records"}, "tfrecord", "/d/records"),
        ({"source": "path", "path": "/d/x.bin", "format": "npz"}, "npz", "/d/x.bin"),
        ({"source": "synthetic"}, "synthetic", None),
    ],
)
def test_dataset_is_passed_as_spelled_and_understood_by_the_trainer(
    dataset: dict[str, Any], source: str, path: str | None
) -> None:
    cfg = children.trainer_config(job({"workers": 1, "trainer": {"dataset": dataset}}))
    assert cfg["dataset"] == dataset
    parsed = trainer_config_parser.parse_config(json.dumps(cfg))
    assert (parsed.dataset.source, parsed.dataset.path) == (source, path)
    # the operator's own reading of the format agrees with the trainer's
    fmt = KerasJob.from_body(
        job({"workers": 1, "trainer": {"dataset": dataset}})
    ).spec.trainer.dataset.resolved_format()
    assert (fmt.value if fmt else source) == source


@pytest.mark.parametrize(
    ("policy", "pod_policy"),
    [
        (RestartPolicy.ON_FAILURE, "Never"),  # the operator restarts: no CrashLoopBackOff
        (RestartPolicy.NEVER, "Never"),
        (RestartPolicy.EXIT_CODE, "Never"),
    ],
)
def test_pod_restart_policy(policy: RestartPolicy, pod_policy: str) -> None:
    assert children.pod_restart_policy(policy) == pod_policy
    spec = {"workers": 1, "restartPolicy": policy.value}
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert pod["spec"]["restartPolicy"] == pod_policy


def test_single_worker_without_volume_gets_empty_dir() -> None:
    pod = children.build_pod(job({"workers": 1}), "worker", 0, default_image=IMAGE)
    assert pod["spec"]["volumes"] == [{"name": children.CHECKPOINT_VOLUME, "emptyDir": {}}, TMP]


def test_checkpoint_mount_path_and_dir_follow_spec() -> None:
    spec = {"workers": 1, "checkpoint": {"mountPath": "/ckpt/", "volume": PVC}}
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert trainer(pod)["volumeMounts"][0]["mountPath"] == "/ckpt/"
    assert env_of(pod)[Env.CHECKPOINT_DIR.value] == "/ckpt/ml/mnist/uid-1"


def test_image_precedence() -> None:
    assert trainer(children.build_pod(job(), "worker", 0, default_image=IMAGE))["image"] == IMAGE
    j = job()
    j["spec"]["image"] = "spec:image"
    assert trainer(children.build_pod(j, "worker", 0, default_image=IMAGE))["image"] == "spec:image"
    j["spec"]["template"] = {"spec": {"containers": [{"name": "trainer", "image": "tpl:image"}]}}
    assert trainer(children.build_pod(j, "worker", 0, default_image=IMAGE))["image"] == "tpl:image"


def test_template_merges_over_defaults() -> None:
    j = job()
    j["spec"]["template"] = {
        "metadata": {
            "labels": {"team": "ml", labels.JOB_NAME: "hijack"},
            "annotations": {"a": "b"},
        },
        "spec": {
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "trainer",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "env": [
                        {"name": "EXTRA", "value": "1"},
                        {"name": "TF_USE_LEGACY_KERAS", "value": "0"},
                    ],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    pod = children.build_pod(j, "worker", 0, default_image=IMAGE)
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"][labels.JOB_NAME] == "mnist"  # operator's label wins
    assert pod["metadata"]["annotations"]["a"] == "b"
    assert pod["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert pod["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer", "sidecar"]
    t = trainer(pod)
    assert t["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert t["command"] == ["python", "-m", "kerasjob_trainer"]
    env = env_of(pod)
    assert env["EXTRA"] == "1" and env["TF_USE_LEGACY_KERAS"] == "0"
    assert Env.TF_CONFIG.value in env
    assert [m["mountPath"] for m in t["volumeMounts"]] == ["/kerasjob/checkpoint", "/tmp", "/data"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == [
        children.CHECKPOINT_VOLUME,
        children.TMP_VOLUME,
        "data",
    ]


def test_first_container_is_the_trainer_when_none_is_named_trainer() -> None:
    j = job()
    j["spec"]["template"] = {
        "spec": {
            "containers": [
                {"name": "main", "image": "mine", "command": ["python", "train.py"]},
                {"name": "sidecar", "image": "busybox"},
            ]
        }
    }
    pod = children.build_pod(j, "worker", 0, default_image=IMAGE)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer", "sidecar"]
    t = trainer(pod)
    assert t["image"] == "mine" and t["command"] == ["python", "train.py"]
    assert Env.TF_CONFIG.value in env_of(pod)


def test_role_template_merges_over_job_template() -> None:
    spec = {
        "workers": 2,
        "checkpoint": {"volume": PVC},
        "template": {
            "spec": {
                "containers": [
                    {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "4"}}}
                ]
            }
        },
        "evaluator": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": None}}}
                    ]
                }
            }
        },
    }
    pods = {p["metadata"]["name"]: p for p in children.desired_pods(job(spec), default_image=IMAGE)}
    assert trainer(pods["mnist-worker-0"])["resources"] == {
        "limits": {"nvidia.com/gpu": 1, "cpu": "4"}
    }
    assert trainer(pods["mnist-evaluator-0"])["resources"] == {"limits": {"cpu": "4"}}


def test_operator_owned_fields_win_over_the_template() -> None:
    j = job()
    j["spec"]["template"] = {
        "metadata": {"name": "other", "namespace": "other", "generateName": "x-"},
        "spec": {
            "hostname": "h",
            "subdomain": "s",
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "trainer",
                    "env": [{"name": "TF_CONFIG", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                }
            ],
            "volumes": [{"name": children.CHECKPOINT_VOLUME, "hostPath": {"path": "/x"}}],
        },
    }
    pod = children.build_pod(j, "worker", 1, default_image=IMAGE)
    assert pod["metadata"]["name"] == "mnist-worker-1"
    assert pod["metadata"]["namespace"] == "ml"
    assert "generateName" not in pod["metadata"]
    assert pod["spec"]["hostname"] == "mnist-worker-1"
    assert pod["spec"]["subdomain"] == "mnist"
    assert pod["spec"]["restartPolicy"] == "Never"
    tf = next(e for e in trainer(pod)["env"] if e["name"] == "TF_CONFIG")
    assert set(tf) == {"name", "value"}
    assert pod["spec"]["volumes"] == [{"name": children.CHECKPOINT_VOLUME, **PVC}, TMP]


def test_build_does_not_modify_the_job() -> None:
    j = job()
    j["spec"]["template"] = {"spec": {"containers": [{"name": "main"}]}}
    before = copy.deepcopy(j)
    children.desired_pods(j, default_image=IMAGE)
    children.build_service(j)
    assert j == before


def test_desired_pods_all_roles() -> None:
    spec = {"workers": 3, "chief": {}, "evaluator": {"replicas": 1}, "checkpoint": {"volume": PVC}}
    pods = children.desired_pods(
        KerasJob.from_body(job(spec)), default_image=IMAGE, restart_attempt=1
    )
    names = [p["metadata"]["name"] for p in pods]
    assert names == [
        "mnist-worker-0",
        "mnist-worker-1",
        "mnist-worker-2",
        "mnist-chief-0",
        "mnist-evaluator-0",
    ]
    for pod in pods:
        env = env_of(pod)
        cfg = json.loads(env[Env.TF_CONFIG.value])
        assert cfg["task"] == {"type": env[Env.ROLE.value], "index": int(env[Env.INDEX.value])}
        assert set(cfg["cluster"]) == {"chief", "worker"}
        assert env[Env.RESTART_ATTEMPT.value] == "1"


def test_zero_replica_roles_have_no_pods() -> None:
    spec = {"workers": 1, "chief": {"replicas": 0}, "evaluator": {"replicas": 0}}
    assert [
        p["metadata"]["name"] for p in children.desired_pods(job(spec), default_image=IMAGE)
    ] == ["mnist-worker-0"]


def test_network_policy_admits_only_the_jobs_pods_to_the_tf_port() -> None:
    body = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {
            "workers": 2,
            "port": 2345,
            "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}},
        },
    }
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}
    policy = children.build_network_policy(body, metrics_from=[peer])
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["name"] == "j"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "u"
    own = {"matchLabels": {"kerasjob.dev/job-name": "j"}}
    assert policy["spec"]["podSelector"] == own
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    tf, metrics = policy["spec"]["ingress"]
    assert tf == {"from": [{"podSelector": own}], "ports": [{"protocol": "TCP", "port": 2345}]}
    assert metrics == {"from": [peer], "ports": [{"protocol": "TCP", "port": 9464}]}
    # No peers configured: the metrics port takes no connections at all.
    assert len(children.build_network_policy(body)["spec"]["ingress"]) == 1


def test_node_lost_tolerations() -> None:
    """A lost node's taints are tolerated for the operator's seconds (not Kubernetes' 300),
    unless the template says otherwise for a key, or tolerates everything."""
    from kerasjob.manifests.children import NODE_LOST_TAINTS, node_lost_tolerations

    added = node_lost_tolerations(None, 60)
    assert [(t["key"], t["effect"], t["tolerationSeconds"]) for t in added] == [
        (k, "NoExecute", 60) for k in NODE_LOST_TAINTS
    ]
    own = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 900,
    }
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    kept = node_lost_tolerations([gpu, own], 60)
    assert kept[:2] == [gpu, own] and [t["key"] for t in kept[2:]] == [
        "node.kubernetes.io/not-ready"
    ]
    everything = [{"operator": "Exists"}]
    assert node_lost_tolerations(everything, 60) == everything
    # In the Pod, after the template's own tolerations; none without the setting.
    spec = {
        "workers": 2,
        "checkpoint": {"volume": PVC},
        "template": {"spec": {"tolerations": [gpu]}},
    }
    pod = children.build_pod(job(spec), "worker", 0, default_image=IMAGE, node_lost_toleration=5)
    assert pod["spec"]["tolerations"][0] == gpu
    assert {t["key"]: t["tolerationSeconds"] for t in pod["spec"]["tolerations"][1:]} == {
        k: 5 for k in NODE_LOST_TAINTS
    }
    plain = children.build_pod(job(spec), "worker", 0, default_image=IMAGE)
    assert plain["spec"]["tolerations"] == [gpu]


# --- checkpoint.location: a bucket instead of a volume -----------------------------------

BUCKET = {
    "location": "s3://ckpt-bucket/team/",
    "endpoint": "http://versitygw:7070",
    "region": "us-east-1",
    "pathStyle": True,
    "mountPath": "/stage",
}


def _bucket_job(checkpoint: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return job({"workers": 2, "checkpoint": checkpoint, **spec})


def test_a_bucket_job_stages_on_an_empty_dir_and_is_told_its_own_prefix() -> None:
    body = _bucket_job(BUCKET, chief={}, evaluator={})
    for role, index in KerasJob.from_body(body).spec.tasks():
        pod = children.build_pod(body, role, index, default_image=IMAGE)
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes[children.CHECKPOINT_VOLUME] == {
            "name": children.CHECKPOINT_VOLUME,
            "emptyDir": {},
        }
        assert {"name": children.CHECKPOINT_VOLUME, "mountPath": "/stage"} in trainer(pod)[
            "volumeMounts"
        ]
        env = env_of(pod)
        assert env[Env.CHECKPOINT_LOCATION.value] == "s3://ckpt-bucket/team/ml/mnist/uid-1"
        assert env[Env.CHECKPOINT_ENDPOINT.value] == "http://versitygw:7070"
        assert env[Env.CHECKPOINT_REGION.value] == "us-east-1"
        assert env[Env.CHECKPOINT_PATH_STYLE.value] == "true"
        assert env[Env.CHECKPOINT_DIR.value] == "/stage/ml/mnist/uid-1"
        assert "envFrom" not in trainer(pod) and "GOOGLE_APPLICATION_CREDENTIALS" not in env


def test_bucket_env_only_when_set() -> None:
    pod = children.build_pod(
        _bucket_job({"location": "gs://bkt"}), "worker", 0, default_image=IMAGE
    )
    env = env_of(pod)
    assert env[Env.CHECKPOINT_LOCATION.value] == "gs://bkt/ml/mnist/uid-1"
    for name in children.BUCKET_ENV[1:]:
        assert name not in env
    off = _bucket_job({"location": "s3://bkt", "pathStyle": False})
    assert (
        env_of(children.build_pod(off, "worker", 0, default_image=IMAGE))[
            Env.CHECKPOINT_PATH_STYLE.value
        ]
        == "false"
    )
    volume_job = job()
    assert not set(children.BUCKET_ENV) & set(
        env_of(children.build_pod(volume_job, "worker", 0, default_image=IMAGE))
    )


def test_s3_credentials_are_the_secrets_keys_as_env() -> None:
    checkpoint = {"location": "s3://bkt", "credentials": {"secretName": "aws-keys"}}
    tpl = {
        "spec": {"containers": [{"name": "trainer", "envFrom": [{"configMapRef": {"name": "c"}}]}]}
    }
    body = _bucket_job(checkpoint, ps={"replicas": 1}, chief={}, template=tpl)
    for role, index in KerasJob.from_body(body).spec.tasks():
        pod = children.build_pod(body, role, index, default_image=IMAGE)
        assert trainer(pod)["envFrom"] == [
            {"configMapRef": {"name": "c"}},
            {"secretRef": {"name": "aws-keys"}},
        ]
        assert children.GCS_CREDENTIALS_VOLUME not in {v["name"] for v in pod["spec"]["volumes"]}
    probe = children.build_probe_pod(body, 1, default_image=IMAGE)
    assert "envFrom" not in trainer(probe)


def test_gcs_credentials_are_a_read_only_key_file() -> None:
    checkpoint = {"location": "gs://bkt/x", "credentials": {"secretName": "gcs-key"}}
    tpl = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "env": [{"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/mine.json"}],
                }
            ]
        }
    }
    pod = children.build_pod(
        _bucket_job(checkpoint, template=tpl), "worker", 1, default_image=IMAGE
    )
    assert {
        "name": children.GCS_CREDENTIALS_VOLUME,
        "secret": {"secretName": "gcs-key"},
    } in pod["spec"]["volumes"]
    assert {
        "name": children.GCS_CREDENTIALS_VOLUME,
        "mountPath": "/var/run/secrets/kerasjob/gcs",
        "readOnly": True,
    } in trainer(pod)["volumeMounts"]
    env = env_of(pod)
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == "/var/run/secrets/kerasjob/gcs/key.json"
    assert "envFrom" not in trainer(pod)
