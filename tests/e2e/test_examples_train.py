"""Every example in examples/ that fits on CPUs, applied as a user applies it (`kubectl apply
-f`), trains to Succeeded under the Helm-installed operator, in the trainer image, on the real
node. The only thing the test provides is the ReadWriteMany claim the examples name
(examples/checkpoint-pvc.yaml asks the cluster for it; here it is bound to a hostPath volume).
The examples another e2e test already trains to Succeeded from the same file
(TRAINED_ELSEWHERE) are not trained here again."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT, wait_for
from kerasjob_dev.synckube import ApiError

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

JOBS = "/apis/kerasjob.dev/v1alpha1/namespaces/{ns}/kerasjobs"
CLAIM = "kerasjob-ckpt"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _needs_gpu(docs: list[dict[str, Any]]) -> bool:
    """Devices this machine lacks: the device plugin's GPUs, the CUDA trainer image, or
    devices claimed through DRA (a ResourceClaimTemplate, a Pod template's resourceClaims;
    test_dra.py trains examples/gpu-dra.yaml with the DRA test driver's fake devices)."""
    return "nvidia.com/gpu" in yaml.safe_dump(docs) or any(
        (d.get("spec") or {}).get("image", "").endswith("-gpu")
        or d.get("kind") in ("ResourceClaimTemplate", "ResourceClaim")
        or "resourceClaims" in (((d.get("spec") or {}).get("template") or {}).get("spec") or {})
        for d in docs
    )


#: Examples another test in tests/e2e applies from the same file and trains to Succeeded
#: (through a disruption): each with that test's file.
TRAINED_ELSEWHERE = {
    # test_the_sharded_keras_hub_lora_resumes_at_the_saved_step_after_an_eviction
    "keras3-hub-lora.yaml": "test_sharded_training.py",
    # test_keras3_jax_eviction_resumes_at_the_saved_step
    "keras3-jax.yaml": "test_training.py",
    # test_own_script_trains_through_an_eviction_via_the_sdk
    "own-script.yaml": "test_sdk_own_script.py",
    # test_a_worker_and_a_ps_deleted_the_job_trains_to_the_end
    "parameter-server.yaml": "test_ps_training.py",
}

CPU_EXAMPLES = sorted(
    p.name
    for p in (REPO_ROOT / "examples").glob("*.yaml")
    if any(d.get("kind") == "KerasJob" for d in _docs(p))
    and not _needs_gpu(_docs(p))
    and p.name not in TRAINED_ELSEWHERE
)


def test_the_cpu_examples_are_found() -> None:
    assert "mnist.yaml" in CPU_EXAMPLES and "user-code-configmap.yaml" in CPU_EXAMPLES
    assert "cifar10-gpu.yaml" not in CPU_EXAMPLES
    assert "gpu-dra.yaml" not in CPU_EXAMPLES
    # Each example trained elsewhere exists and is named by the test that trains it.
    for example, test in TRAINED_ELSEWHERE.items():
        assert (REPO_ROOT / "examples" / example).exists(), example
        assert f'"{example}"' in (Path(__file__).parent / test).read_text(), (example, test)
        assert example not in CPU_EXAMPLES
    # By its DRA claims, not its image name alone.
    (dra_job,) = [
        d for d in _docs(REPO_ROOT / "examples" / "gpu-dra.yaml") if d.get("kind") == "KerasJob"
    ]
    assert _needs_gpu([{**dra_job, "spec": {**dra_job["spec"], "image": "kerasjob/trainer:x"}}])


@pytest.mark.parametrize("example", CPU_EXAMPLES)
def test_example_trains_to_succeeded(example: str, deployment: Any, tmp_path: Path) -> None:
    if not deployment.cluster.local:
        pytest.skip("hack/kind/e2e.sh runs the examples on kind itself")
    kj, ns = deployment.kube, deployment.namespace
    pv = localdeploy.shared_claim(kj, ns, CLAIM, tmp_path / "ckpt")
    docs = _docs(REPO_ROOT / "examples" / example)
    jobs = [d["metadata"]["name"] for d in docs if d["kind"] == "KerasJob"]
    t0 = time.monotonic()
    try:
        deployment.cluster.kubectl("apply", "-n", ns, "-f", str(REPO_ROOT / "examples" / example))

        def done() -> list[dict[str, Any]] | None:
            statuses = [
                (kj.get(f"{JOBS.format(ns=ns)}/{j}") or {}).get("status") or {} for j in jobs
            ]
            failed = [s for s in statuses if s.get("phase") == "Failed"]
            assert not failed, f"{example}: {failed}"
            return statuses if all(s.get("phase") == "Succeeded" for s in statuses) else None

        try:
            statuses = wait_for(done, timeout=600, interval=1, what=f"{example} to succeed")
        except TimeoutError:
            print(
                deployment.cluster.kubectl(
                    "get", "kerasjobs,pods", "-n", ns, "-o", "wide", check=False
                ).stdout
            )
            print(deployment.operator_logs())
            raise
        restarts = [s.get("restarts") for s in statuses]
        print(f"{example}: Succeeded in {time.monotonic() - t0:.0f} s; restarts {restarts}")
        for s in statuses:
            restarts = s.get("restarts") or {}
            assert restarts.get("failures", 0) == 0, s
    finally:
        deployment.cluster.kubectl(
            "delete",
            "-n",
            ns,
            "-f",
            str(REPO_ROOT / "examples" / example),
            "--wait=true",
            check=False,
            timeout=180,
        )
        with contextlib.suppress(ApiError):
            kj.request("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}")
        wait_for(
            lambda: kj.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}") is None,
            timeout=60,
            what="the claim to go",
        )
        localdeploy.delete_volume(kj, pv)
