"""GPUs through DRA (issue 24), with a real DRA driver on the real node: Kubernetes' own DRA
test driver (hack/cluster/dra.sh) runs as the node's kubelet plugin and publishes 4 fake
devices; DeviceClass `fake-gpu.kerasjob.dev` selects them. examples/gpu-dra.yaml, its
ResourceClaimTemplate pointed at that class and its job at the CPU trainer, trains under the
Helm-installed operator:

- each worker Pod gets a ResourceClaim of its own (made by kube-controller-manager from the
  template, owned by the Pod), allocated a distinct device by the scheduler, reserved for it;
- the device reaches the container: the driver's CDI spec sets
  `claim_<claim name>_<request>=true` in it (read with `kubectl exec printenv`);
- a worker Pod deleted mid-training (a disruption) is re-created with a fresh claim and its
  old claim is released and deleted; the job ends Succeeded;
- a job asking for more devices than exist stays Pending, and its Running condition carries
  the scheduler's reason;
- with gang scheduling (a second operator, the chart's gangScheduling.enabled), a gang whose
  claims do not all fit has no Pod bound and no device held (GangUnschedulable); one that
  fits is bound as a whole, each Pod with its devices;
- with Kueue (its DynamicResourceAllocation gate and a deviceClassMapping, a third operator
  with the chart's kueue.enabled), a job's claimed devices count against the ClusterQueue's
  quota: with quota for 2, a second 2-device job waits with Kueue's reason until the first
  is deleted, then gets its claims.

Local cluster only (it starts the driver on this machine's real node). Measured here
(2 cores, 2026-11-26, cluster up and images loaded): the 4 tests in 88 s; the driver ready
in 1.2-1.4 s, a worker's claim allocated and in its container 1.4-1.6 s after the job is
applied, a deleted worker re-created with a fresh claim in 2.3-2.9 s, Kueue (v0.16.1) 9 s
to start.
"""

from __future__ import annotations

import contextlib
import copy
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT, Cluster, wait_for
from kerasjob_dev.synckube import ApiError, Kube, pod_path
from kerasjob_dev.testing.training_run import JOBS, Run, last_step, mnist_job

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

DRA = REPO_ROOT / "hack" / "cluster" / "dra.sh"
DRIVER = "fake-gpu.kerasjob.dev"  # dra.sh's defaults
DEVICE_CLASS = "fake-gpu.kerasjob.dev"
DEVICES = 4
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def dra(cluster: Cluster, images: object) -> Iterator[None]:
    """The DRA test driver on the real node for this module; stopped afterwards."""
    if not cluster.local:
        pytest.skip("starts a DRA driver on the local cluster's real node")
    t0 = time.monotonic()
    up = subprocess.run(
        [str(DRA), "up"], env=cluster.env(), capture_output=True, text=True, timeout=900
    )
    assert up.returncode == 0, f"dra.sh up failed:\n{up.stderr[-4000:]}"
    print(f"\nDRA driver up in {time.monotonic() - t0:.1f} s: {up.stderr.strip()[-300:]}")
    try:
        yield
    finally:
        subprocess.run([str(DRA), "down"], env=cluster.env(), timeout=120, check=False)


def example() -> tuple[dict[str, Any], dict[str, Any]]:
    """examples/gpu-dra.yaml: its ResourceClaimTemplate and its KerasJob."""
    docs = list(yaml.safe_load_all((REPO_ROOT / "examples" / "gpu-dra.yaml").read_text()))
    (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    (job,) = [d for d in docs if d["kind"] == "KerasJob"]
    return template, job


def claim_template(name: str, count: int = 1) -> dict[str, Any]:
    """The example's ResourceClaimTemplate for the fake devices, `count` of them."""
    template, _ = example()
    template = copy.deepcopy(template)
    template["metadata"] = {"name": name}
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    request["exactly"].update(deviceClassName=DEVICE_CLASS, count=count)
    return template


def dra_job(
    name: str, claim: str, template_name: str, workers: int = 2, **trainer: Any
) -> dict[str, Any]:
    """The example's job, trained with the CPU trainer: examples/mnist.yaml with the
    example's resourceClaims and the trainer container's claims."""
    _, example_job = example()
    job = mnist_job(name, claim, **trainer)
    job["spec"]["workers"] = workers
    pod_spec = copy.deepcopy(example_job["spec"]["template"]["spec"])
    (pod_claim,) = pod_spec["resourceClaims"]
    pod_claim["resourceClaimTemplateName"] = template_name
    (example_trainer,) = pod_spec["containers"]
    trainer_container = job["spec"]["template"]["spec"]["containers"][0]
    trainer_container["resources"]["claims"] = example_trainer["resources"]["claims"]
    job["spec"]["template"]["spec"]["resourceClaims"] = pod_spec["resourceClaims"]
    return job


def claim_of(pod: dict[str, Any]) -> str | None:
    """The name of the claim made for the Pod's `gpu` resource claim (its status says)."""
    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if s.get("name") == "gpu" and s.get("resourceClaimName"):
            return str(s["resourceClaimName"])
    return None


def env_name(claim: str) -> str:
    """The variable the test driver's CDI spec sets for the claim's request `gpu`."""
    return re.sub(r"[^a-zA-Z0-9]", "_", f"claim_{claim}_gpu")


def running_with_claim(kj: Kube, ns: str, pod: str, not_uid: str = "") -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        p = kj.get(pod_path(ns, pod)) or {}
        if (p.get("metadata") or {}).get("uid") in (None, not_uid):
            return None
        ok = (p.get("status") or {}).get("phase") == "Running" and claim_of(p)
        return p if ok else None

    return wait_for(done, timeout=180, interval=0.5, what=f"{pod} Running with its claim")


def check_claim(kj: Kube, ns: str, pod: dict[str, Any]) -> tuple[str, str]:
    """The Pod's claim is its own, allocated by our driver and reserved for it; the device
    is in the container's environment. Returns (claim name, device)."""
    name = claim_of(pod)
    assert name
    claim = kj.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}")
    assert claim, f"claim {name} of {pod['metadata']['name']} not found"
    uid = pod["metadata"]["uid"]
    assert [o["uid"] for o in claim["metadata"].get("ownerReferences") or []] == [uid]
    status = claim.get("status") or {}
    (result,) = status["allocation"]["devices"]["results"]
    assert result["driver"] == DRIVER and result["request"] == "gpu", result
    assert [r["uid"] for r in status.get("reservedFor") or []] == [uid]
    return name, result["device"]


def container_env(cluster: Cluster, ns: str, pod: str) -> str:
    return cluster.kubectl(
        "exec", "-n", ns, pod, "-c", "trainer", "--", "printenv", timeout=60
    ).stdout


def test_each_worker_gets_its_own_claim_and_a_recreated_pod_a_fresh_one(
    dra: None, deployment: Any, tmp_path: Path
) -> None:
    kj, ns, cluster = deployment.kube, deployment.namespace, deployment.cluster
    t0 = time.monotonic()
    run = Run(deployment, "dra", tmp_path)
    kj.request(
        "POST",
        f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
        body=claim_template("fake-gpu"),
    )
    try:
        run.make_claim()
        kj.request(
            "POST", JOBS.format(ns=ns), body=dra_job(run.name, run.claim, "fake-gpu", epochs=2)
        )
        workers = [f"{run.name}-worker-0", f"{run.name}-worker-1"]
        pods = {w: running_with_claim(kj, ns, w) for w in workers}
        claims = {w: check_claim(kj, ns, p) for w, p in pods.items()}
        assert len({c for c, _ in claims.values()}) == 2, claims  # a claim per Pod
        assert len({d for _, d in claims.values()}) == 2, claims  # a device per claim
        for w, (claim, _) in claims.items():
            env = container_env(cluster, ns, w)
            assert f"{env_name(claim)}=true" in env.splitlines(), env
        print(
            f"claims {claims} allocated and in the containers after {time.monotonic() - t0:.1f} s"
        )

        # A disruption mid-training: worker-1's Pod deleted; the operator re-creates it.
        wait_for(
            lambda: last_step(run.log(workers[0])) >= 20,
            timeout=180,
            interval=0.5,
            what="the chief to pass step 20",
        )
        victim = workers[1]
        old_uid, (old_claim, _) = pods[victim]["metadata"]["uid"], claims[victim]
        t1 = time.monotonic()
        kj.request("DELETE", pod_path(ns, victim))
        new = running_with_claim(kj, ns, victim, not_uid=old_uid)
        new_claim, _ = check_claim(kj, ns, new)
        assert new_claim != old_claim
        assert f"{env_name(new_claim)}=true" in container_env(cluster, ns, victim).splitlines()
        wait_for(
            lambda: kj.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{old_claim}") is None,
            timeout=90,
            interval=0.5,
            what=f"the old claim {old_claim} to go",
        )
        print(
            f"re-created {victim} with claim {new_claim} in {time.monotonic() - t1:.1f} s; "
            f"{old_claim} deleted"
        )

        def finished() -> dict[str, Any] | None:
            status = run.status()
            assert status.get("phase") != "Failed", status
            return status if status.get("phase") == "Succeeded" else None

        try:
            status = wait_for(finished, timeout=300, interval=1, what="Succeeded")
        except (TimeoutError, AssertionError):
            print(run.status(), deployment.operator_logs(), sep="\n")
            raise
        restarts = status.get("restarts") or {}
        assert restarts.get("disruptions", 0) >= 1 and restarts.get("failures", 0) == 0, status
        print(f"Succeeded in {time.monotonic() - t0:.1f} s; restarts {restarts}")
    finally:
        run.cleanup()
        with contextlib.suppress(ApiError):
            kj.request("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/fake-gpu")


def test_a_job_asking_more_devices_than_exist_waits_with_the_schedulers_reason(
    dra: None, deployment: Any, tmp_path: Path
) -> None:
    kj, ns = deployment.kube, deployment.namespace
    run = Run(deployment, "dra-big", tmp_path)
    kj.request(
        "POST",
        f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
        body=claim_template("too-many", count=DEVICES + 1),
    )
    try:
        run.make_claim()
        kj.request(
            "POST", JOBS.format(ns=ns), body=dra_job(run.name, run.claim, "too-many", workers=1)
        )

        def waiting() -> dict[str, Any] | None:
            status = run.status()
            for c in status.get("conditions") or []:
                if (
                    c.get("type") == "Running"
                    and c.get("status") == "False"
                    and "cannot allocate all claims" in (c.get("message") or "")
                ):
                    return {"phase": status.get("phase"), **c}
            return None

        try:
            cond = wait_for(
                waiting,
                timeout=120,
                interval=0.5,
                what="the job to say its claim cannot be allocated",
            )
        except TimeoutError:
            print(run.status(), kj.get(pod_path(ns, f"{run.name}-worker-0")), sep="\n")
            raise
        print(f"waiting: {cond}")
        assert cond["phase"] == "Pending" and cond["reason"] == "Unschedulable", cond
        pod = kj.get(pod_path(ns, f"{run.name}-worker-0")) or {}
        assert not (pod.get("spec") or {}).get("nodeName")
    finally:
        run.cleanup()
        with contextlib.suppress(ApiError):
            kj.request("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/too-many")


@pytest.fixture(scope="module")
def gang_operator(dra: None, deployment: Any) -> Iterator[tuple[Kube, str]]:
    """A second operator (the chart, gangScheduling.enabled) watching a namespace of its own."""
    cluster, kj = deployment.cluster, deployment.kube
    suffix = deployment.namespace.removeprefix("e2e-")
    ns, op_ns, release = f"e2e-gang-{suffix}", f"kerasjob-gang-{suffix}", f"gang-{suffix}"
    kj.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    try:
        localdeploy.install_operator(
            cluster.tool("helm"),
            str(cluster.kubeconfig),
            release=release,
            namespace=op_ns,
            watch_namespaces=[ns],
            extra={"gangScheduling": {"enabled": True}},
        )
        yield kj, ns
    finally:
        localdeploy.uninstall_operator(
            cluster.tool("helm"), str(cluster.kubeconfig), release=release, namespace=op_ns
        )
        for gone in (ns, op_ns):
            with contextlib.suppress(ApiError):
                kj.request("DELETE", f"/api/v1/namespaces/{gone}")


def test_a_gang_is_bound_with_its_claims_all_together_or_not_at_all(
    gang_operator: tuple[Kube, str], deployment: Any, tmp_path: Path
) -> None:
    kj, ns = gang_operator
    workers = 2

    def pods_of(name: str) -> list[dict[str, Any]]:
        return [kj.get(pod_path(ns, f"{name}-worker-{i}")) or {} for i in range(workers)]

    def claims_of(name: str) -> list[dict[str, Any]]:
        out = []
        for p in pods_of(name):
            c = claim_of(p)
            got = kj.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{c}") if c else None
            out.append(got or {})
        return out

    def run_job(name: str, per_worker: int) -> None:
        kj.request(
            "POST",
            f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
            body=claim_template(name, count=per_worker),
        )
        kj.request(
            "POST", JOBS.format(ns=ns), body=dra_job(name, "gang-ckpt", name, workers=workers)
        )

    def cleanup(name: str) -> None:
        for path in (
            f"{JOBS.format(ns=ns)}/{name}",
            f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/{name}",
        ):
            with contextlib.suppress(ApiError):
                kj.request("DELETE", path)
        # The kubelet unprepares the claims through the driver as the Pods go.
        wait_for(
            lambda: not any(pods_of(name)), timeout=120, interval=0.5, what=f"{name}'s Pods to go"
        )

    t0 = time.monotonic()
    pv = localdeploy.shared_claim(kj, ns, "gang-ckpt", tmp_path / "ckpt")
    try:
        both_gangs(kj, ns, run_job, cleanup, pods_of, claims_of)
    finally:
        with contextlib.suppress(ApiError):
            kj.request("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/gang-ckpt")
        localdeploy.delete_volume(kj, pv)
    print(f"both gangs in {time.monotonic() - t0:.1f} s")


def both_gangs(kj: Kube, ns: str, run_job: Any, cleanup: Any, pods_of: Any, claims_of: Any) -> None:
    # 2 workers x 3 devices, 4 devices: no worker is bound, no device held.
    try:
        run_job("gang-big", 3)

        def waits() -> dict[str, Any] | None:
            status = (kj.get(f"{JOBS.format(ns=ns)}/gang-big") or {}).get("status") or {}
            for c in status.get("conditions") or []:
                if c.get("type") == "Running" and c.get("reason") == "GangUnschedulable":
                    return c
            return None

        try:
            cond = wait_for(waits, timeout=120, interval=0.5, what="GangUnschedulable")
        except TimeoutError:
            print(kj.get(f"{JOBS.format(ns=ns)}/gang-big"), pods_of("gang-big"), sep="\n")
            raise
        print(f"gang of 2 x 3 devices: {cond['message']}")
        assert not any((p.get("spec") or {}).get("nodeName") for p in pods_of("gang-big"))
        assert not any((c.get("status") or {}).get("allocation") for c in claims_of("gang-big"))
    finally:
        cleanup("gang-big")
    # 2 workers x 2 devices: bound together, the 4 devices between them.
    try:
        run_job("gang-fit", 2)

        def bound() -> list[dict[str, Any]] | None:
            claims = claims_of("gang-fit")
            ok = all((c.get("status") or {}).get("allocation") for c in claims) and all(
                (p.get("status") or {}).get("phase") == "Running" for p in pods_of("gang-fit")
            )
            return claims if ok else None

        claims = wait_for(bound, timeout=180, interval=0.5, what="the gang Running with claims")
        devices = [
            r["device"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]
        ]
        assert len(devices) == 4 and len(set(devices)) == 4, devices
        groups = {
            (p["spec"].get("schedulingGroup") or {}).get("podGroupName")
            for p in pods_of("gang-fit")
        }
        assert len(groups) == 1 and None not in groups, groups
        print(f"gang of 2 x 2 devices bound with {sorted(devices)}")
    finally:
        cleanup("gang-fit")


#: Kueue's name for the fake devices in quotas (kueue.sh's KUEUE_DEVICE_CLASS_MAPPINGS).
KUEUE_DEVICES = "kerasjob.dev/fake-gpu"


@pytest.fixture(scope="module")
def kueue_operator(dra: None, deployment: Any) -> Iterator[tuple[Kube, str]]:
    """Kueue counting the fake devices (its DynamicResourceAllocation gate, a deviceClassMapping)
    and an operator (the chart, kueue.enabled) watching a namespace of its own."""
    from kerasjob_dev.kueue import ensure_kueue

    cluster, kj = deployment.cluster, deployment.kube
    ensure_kueue(
        cluster,
        pods_ready_timeout=None,
        feature_gates="VisibilityOnDemand=false,ElasticJobsViaWorkloadSlices=true,"
        "DynamicResourceAllocation=true",
        device_class_mappings=f"{KUEUE_DEVICES}={DEVICE_CLASS}",
    )
    suffix = deployment.namespace.removeprefix("e2e-")
    ns, op_ns, release = f"e2e-kq-dra-{suffix}", f"kerasjob-kq-dra-{suffix}", f"kqd-{suffix}"
    kj.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    try:
        localdeploy.install_operator(
            cluster.tool("helm"),
            str(cluster.kubeconfig),
            release=release,
            namespace=op_ns,
            watch_namespaces=[ns],
            extra={"kueue": {"enabled": True}},
        )
        yield kj, ns
    finally:
        localdeploy.uninstall_operator(
            cluster.tool("helm"), str(cluster.kubeconfig), release=release, namespace=op_ns
        )
        for gone in (ns, op_ns):
            with contextlib.suppress(ApiError):
                kj.request("DELETE", f"/api/v1/namespaces/{gone}")


def test_kueue_counts_a_jobs_claimed_devices_against_its_quota(
    kueue_operator: tuple[Kube, str], deployment: Any, tmp_path: Path
) -> None:
    """Quota for 2 fake devices: the first 2-worker job (a device each) is admitted and its
    Pods get their claims; the second waits with Kueue's reason, and is admitted (and gets
    its claims) once the first is deleted."""
    from kerasjob_dev.kueue import QUEUE_LABEL, cluster_queue, workload_of

    kj, ns = kueue_operator
    cluster = deployment.cluster
    t0 = time.monotonic()
    pv = localdeploy.shared_claim(kj, ns, "kq-ckpt", tmp_path / "ckpt")
    kj.request(
        "POST",
        f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
        body=claim_template("fake-gpu"),
    )

    def submit(name: str, queue: str) -> None:
        job = dra_job(name, "kq-ckpt", "fake-gpu")
        job["metadata"]["labels"] = {QUEUE_LABEL: queue}
        kj.request("POST", JOBS.format(ns=ns), body=job)

    def running_with_claims(name: str) -> list[str]:
        pods = [running_with_claim(kj, ns, f"{name}-worker-{i}") for i in range(2)]
        return [check_claim(kj, ns, p)[1] for p in pods]

    def status(name: str) -> dict[str, Any]:
        return (kj.get(f"{JOBS.format(ns=ns)}/{name}") or {}).get("status") or {}

    try:
        with cluster_queue(
            cluster.api_client(), ns, cpu="8", memory="64Gi", extra_quota={KUEUE_DEVICES: "2"}
        ) as queue:
            submit("kq-first", queue)
            devices = running_with_claims("kq-first")
            wl = workload_of(cluster.api_client(), ns, "kq-first") or {}
            usage = [
                a.get("resourceUsage")
                for a in ((wl.get("status") or {}).get("admission") or {}).get(
                    "podSetAssignments", []
                )
            ]
            print(f"kq-first admitted, devices {devices}; quota used {usage}")
            submit("kq-second", queue)

            def queued() -> str | None:
                for c in status("kq-second").get("conditions") or []:
                    if KUEUE_DEVICES in (c.get("message") or ""):
                        return str(c["message"])
                return None

            message = wait_for(
                queued, timeout=90, interval=0.5, what="kq-second queued for want of devices"
            )
            print(f"kq-second waits: {message}")
            assert not any(kj.get(pod_path(ns, f"kq-second-worker-{i}")) for i in range(2))
            kj.request("DELETE", f"{JOBS.format(ns=ns)}/kq-first")
            devices = running_with_claims("kq-second")
            print(
                f"kq-second admitted after kq-first went, devices {devices} "
                f"({time.monotonic() - t0:.1f} s)"
            )
            for name in ("kq-first", "kq-second"):
                with contextlib.suppress(ApiError):
                    kj.request("DELETE", f"{JOBS.format(ns=ns)}/{name}")
            wait_for(
                lambda: (
                    not any(
                        kj.get(pod_path(ns, f"{n}-worker-{i}"))
                        for n in ("kq-first", "kq-second")
                        for i in range(2)
                    )
                ),
                timeout=120,
                interval=0.5,
                what="the jobs' Pods to go",
            )
    finally:
        for path in (
            f"{JOBS.format(ns=ns)}/kq-first",
            f"{JOBS.format(ns=ns)}/kq-second",
            f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/fake-gpu",
            f"/api/v1/namespaces/{ns}/persistentvolumeclaims/kq-ckpt",
        ):
            with contextlib.suppress(ApiError):
                kj.request("DELETE", path)
        localdeploy.delete_volume(kj, pv)
