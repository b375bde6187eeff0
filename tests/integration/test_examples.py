"""examples/: every manifest is explained, matches the API models, and is accepted by a real
API server (`kubectl apply --dry-run=server`, CRD schema and CEL rules included); the CRD's
field docs reach `kubectl explain`; the user-code example's module really builds a model.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob_dev.cluster import Cluster, wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CRD = ROOT / "crds" / "kerasjob.dev_kerasjobs.yaml"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kerasjobs(path: Path) -> list[dict[str, Any]]:
    return [d for d in docs(path) if d["kind"] == "KerasJob"]


def trainer_container(job: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"]
    return c


def test_the_expected_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "mnist.yaml",
        "cifar10-gpu.yaml",
        "user-code-configmap.yaml",
        "checkpoint-pvc.yaml",
        "own-script.yaml",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_explained_and_valid(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("#"), f"{path.name} must start with a comment saying what it is"
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert len(comments) >= 5, f"{path.name} is not explained"
    from kerasjob.api import KerasJob

    for job in kerasjobs(path):
        KerasJob.from_body(job)  # the operator's own validation (extra fields forbidden)


def test_mnist_is_the_two_worker_mnist_job() -> None:
    (job,) = kerasjobs(ROOT / "examples" / "mnist.yaml")
    spec = job["spec"]
    assert spec["workers"] == 2
    assert spec["trainer"]["model"] == "mnist-mlp"
    assert spec["trainer"]["dataset"]["source"] == "mnist-sample"
    total = spec["trainer"]["epochs"] * spec["trainer"]["stepsPerEpoch"]
    assert 100 <= total <= 1000, "a few hundred steps in total"
    assert spec["checkpoint"]["volume"] == {"persistentVolumeClaim": {"claimName": "kerasjob-ckpt"}}
    assert spec["checkpoint"]["saveFreq"] < total


def test_checkpoint_pvc_is_read_write_many() -> None:
    (pvc,) = docs(ROOT / "examples" / "checkpoint-pvc.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert pvc["metadata"]["name"] == "kerasjob-ckpt"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_cifar10_uses_one_gpu_per_worker() -> None:
    (job,) = kerasjobs(ROOT / "examples" / "cifar10-gpu.yaml")
    spec = job["spec"]
    assert spec["trainer"]["model"] == "cifar10-cnn"
    assert spec["image"].endswith("-gpu")
    c = trainer_container(job)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    tolerations = spec["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    # The dataset path must be on a volume the template mounts.
    mounts = [m["mountPath"] for m in c["volumeMounts"]]
    assert any(spec["trainer"]["dataset"]["path"].startswith(m + "/") for m in mounts)


@pytest.mark.parametrize("path", [p for p in EXAMPLES if kerasjobs(p)], ids=lambda p: p.name)
def test_operator_renders_pods_the_trainer_accepts(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Operator and trainer agree on each example: the Pods the operator would create run the
    trainer container with a KERASJOB_TRAINER_CONFIG the trainer parses without complaint."""
    from kerasjob.manifests import children
    from kerasjob_contract.trainer_config import parse_config

    for job in kerasjobs(path):
        job = {**job, "metadata": {**job["metadata"], "namespace": "ns", "uid": "u"}}
        for role_index in [("worker", i) for i in range(job["spec"]["workers"])]:
            pod = children.build_pod(job, *role_index, default_image="img", restart_attempt=0)
            (trainer,) = [c for c in pod["spec"]["containers"] if c["name"] == "trainer"]
            env = {e["name"]: e.get("value") for e in trainer["env"]}
            config = parse_config(env["KERASJOB_TRAINER_CONFIG"])
            trainer_spec = job["spec"]["trainer"]
            assert config.model == trainer_spec.get("model", "mnist-mlp")
            assert config.command == tuple(trainer_spec.get("command") or ())
            assert "warning" not in capsys.readouterr().err
            if "image" in job["spec"]:
                assert trainer["image"] == job["spec"]["image"]
            # What the example's template asks for survives the merge with the defaults.
            wanted_pod = (job["spec"].get("template") or {}).get("spec") or {}
            wanted = next(c for c in wanted_pod.get("containers", []) if c["name"] == "trainer")
            for var in wanted.get("env", []):
                assert env[var["name"]] == var["value"]
            for mount in wanted.get("volumeMounts", []):
                assert mount in trainer["volumeMounts"]
            for kind, amounts in wanted.get("resources", {}).items():
                if isinstance(amounts, list):  # claims: DRA claims the container uses
                    assert all(c in trainer["resources"][kind] for c in amounts), kind
                else:  # requests, limits
                    assert amounts.items() <= trainer["resources"][kind].items()
            for volume in wanted_pod.get("volumes", []):
                assert volume in pod["spec"]["volumes"]
            for toleration in wanted_pod.get("tolerations", []):
                assert toleration in pod["spec"]["tolerations"]


def user_code() -> tuple[dict[str, Any], dict[str, Any]]:
    path = ROOT / "examples" / "user-code-configmap.yaml"
    (cm,) = [d for d in docs(path) if d["kind"] == "ConfigMap"]
    (job,) = kerasjobs(path)
    return cm, job


def test_user_code_is_mounted_and_importable_by_name() -> None:
    cm, job = user_code()
    module, _, func = job["spec"]["trainer"]["model"].partition(":")
    assert f"{module}.py" in cm["data"]
    tree = ast.parse(cm["data"][f"{module}.py"])
    assert func in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    c = trainer_container(job)
    (mount,) = c["volumeMounts"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PYTHONPATH"] == mount["mountPath"]
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mount["name"]]["configMap"]["name"] == cm["metadata"]["name"]


def run_single_trainer(
    config: dict[str, Any], checkpoint_dir: Path, extra_env: dict[str, str]
) -> str:
    """Run `python -m kerasjob_trainer` as one worker (no TF_CONFIG) the way a Pod would;
    assert it exits 0 and return its output."""
    env = {
        **os.environ,
        "KERASJOB_TRAINER_CONFIG": json.dumps(config),
        "KERASJOB_CHECKPOINT_DIR": str(checkpoint_dir),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        **extra_env,
    }
    env.pop("TF_CONFIG", None)
    env.pop("KERASJOB_METRICS_PORT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "kerasjob_trainer"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.mark.slow
def test_user_code_example_trains_with_the_bundled_trainer(tmp_path: Path) -> None:
    """The ConfigMap's module, on PYTHONPATH as the example mounts it, trained by the real
    trainer with the example's spec.trainer (one worker, CPU): it must build, train and
    evaluate. About 10 s plus TensorFlow's import."""
    pytest.importorskip("tf_keras", reason="the trainer extra (TensorFlow) is not installed")
    cm, job = user_code()
    code = tmp_path / "code"
    code.mkdir()
    for name, source in cm["data"].items():
        (code / name).write_text(source)
    # What the operator passes: spec.trainer plus checkpoint.saveFreq (see contract.py).
    config = {**job["spec"]["trainer"], "saveFreq": job["spec"]["checkpoint"]["saveFreq"]}
    out = run_single_trainer(config, tmp_path / "checkpoint", {"PYTHONPATH": str(code)})
    total = config["epochs"] * config["stepsPerEpoch"]
    assert f"step {total}/{total}" in out, out[-3000:]
    match = re.search(r"final test_accuracy=([0-9.]+)", out)
    assert match, out[-3000:]
    assert float(match.group(1)) > 0.5, out[
        -3000:
    ]  # a CNN on MNIST after a few hundred steps: ~0.9


@pytest.mark.slow
def test_cifar10_example_data_layout_trains(tmp_path: Path) -> None:
    """The .npz layout the CIFAR-10 example tells users to write (fake pixels here, no
    download) trains cifar10-cnn with the example's dataset settings, a few steps on CPU."""
    pytest.importorskip("tf_keras", reason="the trainer extra (TensorFlow) is not installed")
    import numpy as np

    (job,) = kerasjobs(ROOT / "examples" / "cifar10-gpu.yaml")
    trainer = job["spec"]["trainer"]
    rng = np.random.default_rng(0)

    def images(n: int) -> Any:  # what the example's conversion one-liner produces
        return (rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8) / 255.0).astype("float32")

    data = tmp_path / "cifar10.npz"
    labels = rng.integers(0, 10, 512)  # keras' load_data gives (n, 1); the example ravels it
    np.savez(data, x_train=images(512), y_train=labels, x_test=images(64), y_test=labels[:64])
    config = {
        **trainer,
        "dataset": {**trainer["dataset"], "path": str(data)},
        "epochs": 1,
        "stepsPerEpoch": 3,
        "batchSizePerReplica": 16,
        "saveFreq": 2,
    }
    out = run_single_trainer(config, tmp_path / "checkpoint", {"CUDA_VISIBLE_DEVICES": ""})
    assert "step 3/3" in out and "final test_accuracy=" in out, out[-3000:]


# --- against the API server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def crd_installed(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/kerasjobs.kerasjob.dev", "--timeout=60s"
    )


@pytest.mark.cluster
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_api_server_accepts_example(
    cluster: Cluster, crd_installed: None, namespace: str, path: Path
) -> None:
    # Right after a CRD is (re)applied the discovery cache may lag: retry briefly.
    def accepted() -> str:
        proc = cluster.kubectl(
            "apply", "--dry-run=server", "--namespace", namespace, "-f", str(path), check=False
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = wait_for(accepted, timeout=30, interval=1, what=f"dry-run of {path.name}")
    for doc in docs(path):
        assert f"{doc['kind'].lower()}" in out.lower() and "(server dry run)" in out


@pytest.mark.cluster
def test_api_server_rejects_a_broken_example(
    cluster: Cluster, crd_installed: None, namespace: str
) -> None:
    """The dry-run is a real check: the CRD's schema/CEL refuses what the models refuse."""
    (job,) = kerasjobs(ROOT / "examples" / "mnist.yaml")
    job["spec"]["checkpoint"]["volume"] = {"emptyDir": {}}  # shared state on a per-Pod volume
    proc = cluster.kubectl(
        "apply",
        "--dry-run=server",
        "--namespace",
        namespace,
        "-f",
        "-",
        input=yaml.safe_dump(job),
        check=False,
    )
    assert proc.returncode != 0
    assert "shared checkpoint.volume" in proc.stderr


@pytest.mark.cluster
def test_kubectl_explain_prints_the_field_docs(cluster: Cluster, crd_installed: None) -> None:
    from kerasjob.api import KerasJobSpec

    def explained() -> str:
        proc = cluster.kubectl("explain", "kerasjob.spec", check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = wait_for(explained, timeout=60, interval=1, what="kubectl explain kerasjob.spec")
    flat = " ".join(out.split())
    for field in ("workers", "trainer", "checkpoint", "restartPolicy", "backoffLimit"):
        assert field in out
    description = KerasJobSpec.model_fields["workers"].description or ""
    assert " ".join(description.split())[:60] in flat

    out = cluster.kubectl("explain", "kerasjob.spec.checkpoint.saveFreq").stdout
    assert "BackupAndRestore" in out


@pytest.mark.cluster
def test_kind_storage_binds_the_example_claim(cluster: Cluster, namespace: str) -> None:
    """hack/kind/shared-storage.yaml + examples/checkpoint-pvc.yaml as hack/kind/e2e.sh patches
    it: the ReadWriteMany claim binds one of the hostPath PersistentVolumes. Applied under
    unique names (they are cluster-scoped) and removed afterwards."""
    suffix = namespace
    storage = [
        d for d in yaml.safe_load_all((ROOT / "hack/kind/shared-storage.yaml").read_text()) if d
    ]
    script = (ROOT / "hack/kind/e2e.sh").read_text()
    ((old, new),) = re.findall(r"sed 's\|([^|]+)\|([^|]+)\|'", script)
    (pvc,) = docs_from_text((ROOT / "examples/checkpoint-pvc.yaml").read_text().replace(old, new))
    cls = f"kerasjob-shared-{suffix}"
    for doc in storage:
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{suffix}"
        if doc["kind"] == "PersistentVolume":
            doc["spec"]["storageClassName"] = cls
    assert pvc["spec"]["storageClassName"] == "kerasjob-shared"
    pvc["spec"]["storageClassName"] = cls
    text = yaml.safe_dump_all(storage)
    try:
        cluster.kubectl("apply", "-f", "-", input=text)
        cluster.kubectl("apply", "--namespace", namespace, "-f", "-", input=yaml.safe_dump(pvc))

        def bound() -> str:
            out = cluster.kubectl(
                "get",
                "pvc",
                "kerasjob-ckpt",
                "--namespace",
                namespace,
                "-o",
                "jsonpath={.status.phase} {.spec.volumeName}",
            ).stdout
            return out if out.startswith("Bound ") else ""

        volume = wait_for(bound, timeout=60, interval=1, what="the claim to bind").split()[1]
        assert volume.startswith("kerasjob-shared-")
    finally:
        cluster.kubectl(
            "delete", "--namespace", namespace, "pvc", "kerasjob-ckpt", "--wait=false", check=False
        )
        cluster.kubectl("delete", "--wait=false", "-f", "-", input=text, check=False)


def docs_from_text(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]
