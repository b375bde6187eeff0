"""The Helm chart against a real API server, and the operator with exactly its permissions.

1. ``helm install`` of the chart succeeds (CRD from crds/, RBAC, Deployment, the peering CRDs
   and the post-install peering hook). The operator Pod itself never runs here (there is no
   operator image on this machine): a nodeSelector no node has keeps it Pending, and the
   test runs the *same command line and environment* the Deployment renders as a local
   subprocess instead.
2. That subprocess authenticates as the chart's ServiceAccount: a kubeconfig with a
   TokenRequest token (``kubectl create token``), no other credentials. So the operator
   has the chart's RBAC and nothing else; if the chart forgot a permission, the job below
   would not get far.
3. With those permissions it takes a 2-worker KerasJob (Pods on fake KWOK nodes) to
   Running and through a disruption (a worker Pod deleted: re-created, counted as one
   disruption), and every API call the controller made is one the chart grants.
4. The same token is refused (403) anything outside the operator's needs: listing Secrets
   (it may only get one by name: a job's bucket credentials), ConfigMaps, Nodes, RBAC
   objects, other namespaces.
5. A cluster-wide install's ClusterRole grants the same, cluster-wide, and no more.
"""

from __future__ import annotations

import contextlib
import copy
import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kerasjob_dev import cluster as support
from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.testing.chart_operator import (
    CHART,
    GROUP,
    NEVER_SCHEDULE,
    PLURAL,
    VERSION,
    OperatorRun,
    Release,
    api_requests,
    as_sa,
    forbidden,
    granted,
    helm_install,
    operator_process,
    probe,
    token_kubeconfig,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def namespaced_release(cluster: Cluster, kube: Any) -> Iterator[Release]:
    """The chart installed for one jobs namespace, with 2 replicas (so peering is on)."""
    op_ns = support.create_namespace(kube, "op")
    jobs_ns = support.create_namespace(kube, "jobs")
    name = f"kj-{uuid.uuid4().hex[:6]}"
    try:
        yield helm_install(
            cluster,
            name,
            op_ns,
            {
                "watchNamespaces": [jobs_ns],
                "replicaCount": 2,
                "image.tag": "dev",
                "trainerImage.tag": "dev",
                "nodeSelector": NEVER_SCHEDULE,
            },
        )
    finally:
        cluster.helm("uninstall", name, "--namespace", op_ns, check=False)
        support.delete_namespace(kube, jobs_ns)
        support.delete_namespace(kube, op_ns)


@pytest.fixture(scope="module")
def sa_kubeconfig(
    cluster: Cluster, namespaced_release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    rel = namespaced_release
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    return token_kubeconfig(cluster, rel.namespace, rel.service_account, path)


# --- tests ----------------------------------------------------------------------------------


def test_install_creates_everything(cluster: Cluster, namespaced_release: Release) -> None:
    rel = namespaced_release
    kinds = {o["kind"] for o in rel.manifest}
    assert {"ServiceAccount", "Role", "RoleBinding", "Deployment", "PodDisruptionBudget"} <= kinds
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    status = json.loads(
        cluster.helm("status", rel.name, "--namespace", rel.namespace, "-o", "json").stdout
    )
    assert status["info"]["status"] == "deployed"
    # crds/ installed the KerasJob CRD (or found it), and it is served.
    crd = cluster.kubectl("get", "crd", "kerasjobs.kerasjob.dev", "-o", "json").stdout
    assert json.loads(crd)["spec"]["group"] == GROUP
    # The namespaced peering object (its CRD came from crds/); both it and the Deployment are
    # named after the release's full name.
    fullname = rel.deployment["metadata"]["name"]
    assert [p["metadata"]["namespace"] for p in rel.of_kind("KopfPeering")] == [rel.jobs_namespace]
    cluster.kubectl("--namespace", rel.jobs_namespace, "get", "kopfpeerings.kopf.dev", fullname)
    deployed = cluster.kubectl(
        "--namespace", rel.namespace, "get", "deployment", fullname, "-o", "json"
    ).stdout
    assert json.loads(deployed)["spec"]["replicas"] == 2
    notes = cluster.helm("get", "notes", rel.name, "--namespace", rel.namespace).stdout
    assert f"these namespaces only: {rel.jobs_namespace}" in notes
    assert "2 replicas coordinate through kopf peering" in notes


def test_plain_kubectl_install_path_is_accepted(cluster: Cluster, kube: Any) -> None:
    """README's no-Helm path: `helm template | kubectl apply` (dry-run on the server)."""
    ns = support.create_namespace(kube, "plain")
    try:
        rendered = cluster.helm("template", "kerasjob-operator", str(CHART), "--namespace", ns)
        proc = cluster.kubectl(
            "apply",
            "--dry-run=server",
            "--namespace",
            ns,
            "-f",
            "-",
            input=rendered.stdout,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "deployment.apps/kerasjob-operator created (server dry run)" in proc.stdout
    finally:
        support.delete_namespace(kube, ns)


def test_operator_with_sa_permissions_runs_a_job_through_a_disruption(
    cluster: Cluster,
    kube: Any,
    namespaced_release: Release,
    sa_kubeconfig: Path,
    kwok_placement: dict[str, Any],
    tmp_path: Path,
) -> None:
    rel = namespaced_release
    ns = rel.jobs_namespace
    custom = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    log_path = tmp_path / "operator.log"

    with operator_process(rel, sa_kubeconfig, log_path) as run:
        proc, url = run.proc, run.probe_url

        def ready() -> bool:
            assert proc.poll() is None, f"operator exited:\n{log_path.read_text()[-4000:]}"
            return bool(probe(url) is not None)

        wait_for(ready, timeout=60, interval=0.5, what="the operator's liveness endpoint")

        job = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "KerasJob",
            "metadata": {"name": "rbac", "namespace": ns},
            "spec": {
                "workers": 2,
                "trainer": {"epochs": 1, "stepsPerEpoch": 10},
                "checkpoint": {"volume": {"hostPath": {"path": "/tmp/kerasjob-rbac-test"}}},
                "template": {"spec": kwok_placement},
            },
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job)

        def get_job() -> dict[str, Any]:
            return custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "rbac")

        def running_pods() -> dict[str, str] | None:
            pods = core.list_namespaced_pod(ns).items
            live = {
                p.metadata.name: p.metadata.uid
                for p in pods
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
            }
            return live if len(live) == 2 else None

        def diagnose() -> str:
            return f"\njob: {get_job().get('status')}\nlog:\n{log_path.read_text()[-4000:]}"

        try:
            before = wait_for(running_pods, timeout=90, interval=0.5, what="2 Running workers")
            wait_for(
                lambda: (get_job().get("status") or {}).get("phase") == "Running",
                timeout=60,
                interval=0.5,
                what="phase Running",
            )
            assert set(before) == {"rbac-worker-0", "rbac-worker-1"}

            # A disruption: someone deletes a worker Pod.
            core.delete_namespaced_pod("rbac-worker-1", ns)

            def recreated() -> bool:
                pods = running_pods() or {}
                return pods.get("rbac-worker-1") not in (None, before["rbac-worker-1"])

            wait_for(recreated, timeout=90, interval=0.5, what="rbac-worker-1 re-created")
            restarts = wait_for(
                lambda: (
                    (get_job().get("status") or {}).get("restarts", {}).get("disruptions")
                    and get_job()["status"]["restarts"]
                ),
                timeout=60,
                interval=0.5,
                what="status.restarts.disruptions",
            )
            assert restarts == {"disruptions": 1, "failures": 0}
            assert get_job()["status"]["phase"] in ("Running", "Restarting")

            # A bucket job naming a Secret that does not exist: the chart lets the operator
            # read it (a 404, not a 403 that would skip the check), so it waits, no Pod.
            bucket = copy.deepcopy(job)
            bucket["metadata"]["name"] = "rbac-bucket"
            bucket["spec"]["checkpoint"] = {
                "location": "s3://ckpt-bucket",
                "credentials": {"secretName": "absent"},
            }
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, bucket)

            def secret_missing() -> bool:
                got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "rbac-bucket")
                conditions = (got.get("status") or {}).get("conditions") or []
                return any(c.get("reason") == "CheckpointSecretMissing" for c in conditions)

            wait_for(secret_missing, timeout=30, interval=0.5, what="CheckpointSecretMissing")
            names = [p.metadata.name for p in core.list_namespaced_pod(ns).items]
            assert not [n for n in names if n.startswith("rbac-bucket-")], names
        except (TimeoutError, AssertionError) as exc:
            raise AssertionError(f"{exc}{diagnose()}") from exc

        # kopf peering works with the Role's peering rules: this operator's heartbeat is in
        # the release's KopfPeering object.
        fullname = rel.deployment["metadata"]["name"]
        peering = custom.get_namespaced_custom_object(
            "kopf.dev", "v1", ns, "kopfpeerings", fullname
        )
        assert peering.get("status"), f"no heartbeat in the peering object: {peering}"

        # Every request the controller made (counted on the chart's metrics port, the
        # metrics Service's target) is covered by the chart's RBAC.
        requests = api_requests(run)
        assert requests.get("create pods", 0) >= 3, requests
        allowed = granted(rel, ns)
        for call in requests:
            verb, resource = call.split(" ", 1)
            assert verb in allowed.get(resource, set()), f"{call!r} not granted by the chart"

    refused = forbidden(log_path)
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize(
    "args",
    [
        ("get", "secrets"),
        ("get", "configmaps"),
        ("delete", "node", "any-node"),
        ("create", "clusterrole", "evil", "--verb=*", "--resource=*"),
        ("create", "rolebinding", "evil", "--clusterrole=cluster-admin", "--user=me"),
        ("get", "pods", "--all-namespaces"),
        ("create", "deployment", "evil", "--image=busybox"),
        ("patch", "kerasjob", "x", "--type=merge", "-p", '{"spec":{"workers":9}}'),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_sa_is_refused_everything_else(
    cluster: Cluster, namespaced_release: Release, sa_kubeconfig: Path, args: tuple[str, ...]
) -> None:
    ns = namespaced_release.jobs_namespace
    proc = as_sa(cluster, sa_kubeconfig, "--namespace", ns, *args)
    assert proc.returncode != 0
    assert "forbidden" in proc.stderr.lower(), proc.stderr


def test_sa_is_refused_outside_its_namespace(
    cluster: Cluster, namespaced_release: Release, sa_kubeconfig: Path
) -> None:
    for verb in ("list", "create", "delete"):
        proc = as_sa(
            cluster, sa_kubeconfig, "auth", "can-i", verb, "pods", "--namespace", "default"
        )
        assert proc.stdout.strip() == "no", f"{verb} pods in default: {proc.stdout}"
    proc = as_sa(
        cluster,
        sa_kubeconfig,
        "auth",
        "can-i",
        "create",
        "pods",
        "--namespace",
        namespaced_release.jobs_namespace,
    )
    assert proc.stdout.strip() == "yes"


def test_cluster_wide_install_grants_the_same_everywhere_and_no_more(
    cluster: Cluster, kube: Any, namespaced_release: Release
) -> None:
    # One replica: standalone, no peering object to share with the namespaced release.
    op_ns = support.create_namespace(kube, "opcw")
    name = f"kjcw-{uuid.uuid4().hex[:6]}"
    try:
        rel = helm_install(
            cluster,
            name,
            op_ns,
            {"image.tag": "dev", "nodeSelector": NEVER_SCHEDULE},
        )
        assert rel.of_kind("ClusterRole") and not rel.of_kind("Role")
        who = f"system:serviceaccount:{op_ns}:{rel.service_account}"

        def can(*args: str) -> bool:
            out = cluster.kubectl("auth", "can-i", "--as", who, *args, check=False).stdout
            return out.strip() == "yes"

        for ns in ("default", namespaced_release.jobs_namespace):
            assert can("create", "pods", "-n", ns)
            assert can("watch", "kerasjobs.kerasjob.dev", "-n", ns)
            assert can("patch", "kerasjobs.kerasjob.dev", "--subresource=status", "-n", ns)
            # A job's bucket credentials, by name (checkpointSecrets.check), nothing more.
            assert can("get", "secrets", "-n", ns)
            assert not can("list", "secrets", "-n", ns)
            assert not can("watch", "secrets", "-n", ns)
            assert not can("patch", "pods", "-n", ns)
            assert not can("update", "kerasjobs.kerasjob.dev", "-n", ns)
        assert can("watch", "customresourcedefinitions.apiextensions.k8s.io")
        assert not can("create", "customresourcedefinitions.apiextensions.k8s.io")
        assert not can("delete", "nodes")
        assert not can("create", "clusterroles.rbac.authorization.k8s.io")
        assert not can("list", "namespaces")
        assert not can("impersonate", "serviceaccounts")
    finally:
        cluster.helm("uninstall", name, "--namespace", op_ns, check=False)
        support.delete_namespace(kube, op_ns)


def test_operator_pod_meets_restricted_pod_security(
    cluster: Cluster, kube: Any, namespaced_release: Release
) -> None:
    """The rendered Pod is admitted where the `restricted` Pod Security Standard is enforced."""
    ns = support.create_namespace(kube, "psa")
    try:
        cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
        template = namespaced_release.deployment["spec"]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "operator", "namespace": ns},
            "spec": {**template["spec"], "serviceAccountName": "default"},
        }
        proc = cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
        )
        assert proc.returncode == 0, proc.stderr
        assert "violate" not in proc.stderr, proc.stderr
    finally:
        support.delete_namespace(kube, ns)


def test_uninstall_removes_rbac(cluster: Cluster, kube: Any) -> None:
    op_ns = support.create_namespace(kube, "opun")
    jobs_ns = support.create_namespace(kube, "jobsun")
    name = f"kjun-{uuid.uuid4().hex[:6]}"
    try:
        rel = helm_install(
            cluster,
            name,
            op_ns,
            {"watchNamespaces": [jobs_ns], "nodeSelector": NEVER_SCHEDULE},
        )
        (role,) = rel.of_kind("Role")
        role_name = role["metadata"]["name"]
        cluster.kubectl("--namespace", jobs_ns, "get", "role", role_name)

        # Scaling to 2 replicas by upgrade turns peering on: the peering object appears.
        cluster.helm(
            "upgrade",
            name,
            str(CHART),
            "--namespace",
            op_ns,
            "--reuse-values",
            "--set",
            "replicaCount=2",
        )
        cluster.kubectl("--namespace", jobs_ns, "get", "kopfpeerings.kopf.dev", role_name)
        cluster.helm("uninstall", name, "--namespace", op_ns)

        def gone() -> bool:
            proc = cluster.kubectl("--namespace", jobs_ns, "get", "role", role_name, check=False)
            return proc.returncode != 0 and "NotFound" in proc.stderr

        wait_for(gone, timeout=30, what="Role removed by helm uninstall")
        # Helm never deletes CRDs: jobs survive an operator uninstall.
        cluster.kubectl("get", "crd", "kerasjobs.kerasjob.dev")
    finally:
        support.delete_namespace(kube, jobs_ns)
        support.delete_namespace(kube, op_ns)


def test_two_replicas_one_active_and_the_standby_takes_over(
    cluster: Cluster,
    kube: Any,
    namespaced_release: Release,
    sa_kubeconfig: Path,
    kwok_placement: dict[str, Any],
    tmp_path: Path,
) -> None:
    """replicaCount: 2 as the chart runs it: each replica draws a random kopf priority, only
    the highest works; when it stops, the other resumes and handles the jobs."""
    ns = namespaced_release.jobs_namespace
    custom = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)

    def created_pods(run: OperatorRun) -> int:
        return api_requests(run).get("create pods", 0)

    with contextlib.ExitStack() as stack:
        runs = []
        for i in range(2):
            run = stack.enter_context(
                operator_process(namespaced_release, sa_kubeconfig, tmp_path / f"op{i}.log")
            )
            wait_for(
                lambda r=run: probe(r.probe_url) is not None,
                timeout=60,
                interval=0.5,
                what=f"operator {i} liveness",
            )
            runs.append(run)
        before = {id(r): created_pods(r) for r in runs}

        job = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "KerasJob",
            "metadata": {"name": "ha", "namespace": ns},
            "spec": {
                "workers": 2,
                "checkpoint": {"volume": {"hostPath": {"path": "/tmp/kerasjob-ha-test"}}},
                "template": {"spec": kwok_placement},
            },
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job)

        def pod_uid(name: str) -> str | None:
            pod = core.read_namespaced_pod(name, ns)
            running = pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
            return pod.metadata.uid if running else None

        wait_for(
            lambda: pod_uid("ha-worker-0") and pod_uid("ha-worker-1"),
            timeout=90,
            interval=0.5,
            what="ha workers Running",
        )
        made = [created_pods(r) - before[id(r)] for r in runs]
        logs = "\n".join(
            f"--- op{i}.log\n" + (tmp_path / f"op{i}.log").read_text()[-3000:] for i in range(2)
        )
        assert min(made) == 0 and max(made) >= 2, f"one replica should work: {made}\n{logs}"
        active, standby = (runs[0], runs[1]) if made[0] else (runs[1], runs[0])

        # The active replica stops (a rollout, a lost node): kopf deregisters it from the
        # peering object on the way out, and the standby resumes.
        active.proc.send_signal(signal.SIGTERM)
        active.proc.wait(timeout=30)
        old = pod_uid("ha-worker-1")
        core.delete_namespaced_pod("ha-worker-1", ns)
        wait_for(
            lambda: pod_uid("ha-worker-1") not in (None, old),
            timeout=120,
            interval=0.5,
            what="ha-worker-1 re-created by the standby",
        )
        assert created_pods(standby) >= 1


def test_operator_access_revoked_and_restored_converges(
    cluster: Cluster,
    kube: Any,
    namespaced_release: Release,
    sa_kubeconfig: Path,
    kwok_placement: dict[str, Any],
    tmp_path: Path,
) -> None:
    """The operator's RoleBinding in the jobs namespace is deleted while a job runs (an
    administrator's mistake, a GitOps sync gone wrong) and a worker is deleted meanwhile;
    then the binding comes back. The operator stays up without hot-looping, and afterwards
    the job converges with that one disruption counted once."""
    rel = namespaced_release
    ns = rel.jobs_namespace
    custom = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    rbac = client.RbacAuthorizationV1Api(kube)
    (binding,) = [b for b in rel.of_kind("RoleBinding") if b["metadata"]["namespace"] == ns]
    log_path = tmp_path / "operator.log"
    name = "revoked"
    selector = f"kerasjob.dev/job-name={name}"
    worker = f"{name}-worker-1"

    def status() -> dict[str, Any]:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        return job.get("status") or {}

    def live_pods() -> dict[str, str]:
        return {
            p.metadata.name: p.metadata.uid
            for p in core.list_namespaced_pod(ns, label_selector=selector).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }

    with operator_process(rel, sa_kubeconfig, log_path) as run:
        wait_for(
            lambda: probe(run.probe_url) is not None,
            timeout=60,
            interval=0.5,
            what="the operator's liveness endpoint",
        )
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "KerasJob",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "workers": 2,
                    "checkpoint": {"volume": {"hostPath": {"path": "/tmp/kerasjob-revoked-test"}}},
                    "template": {"spec": kwok_placement},
                },
            },
        )
        try:
            wait_for(
                lambda: status().get("phase") == "Running" and len(live_pods()) == 2,
                timeout=90,
                interval=0.5,
                what="the job Running",
            )
            before = live_pods()

            rbac.delete_namespaced_role_binding(binding["metadata"]["name"], ns)
            revoked = time.monotonic()
            core.delete_namespaced_pod(f"{name}-worker-1", ns)
            wait_for(
                lambda: f"{name}-worker-1" not in live_pods(),
                timeout=30,
                what="the worker gone while access is revoked",
            )
            requests_then = sum(api_requests(run).values())
            time.sleep(15)
            during = sum(api_requests(run).values()) - requests_then
            assert run.proc.poll() is None, "the operator exited while access was revoked"
            # Each job's retries back off; a hot loop would make hundreds.
            assert during <= 30, f"{during} API requests in 15 s without access"

            restore = {k: v for k, v in binding.items() if k != "status"}
            restore["metadata"] = {
                "name": binding["metadata"]["name"],
                "namespace": ns,
                "labels": binding["metadata"].get("labels", {}),
            }
            rbac.create_namespaced_role_binding(ns, restore)
            restored = time.monotonic()
            wait_for(
                lambda: (
                    status().get("phase") == "Running"
                    and status().get("restarts") == {"disruptions": 1, "failures": 0}
                    and live_pods().get(worker) not in (None, before[worker])
                ),
                timeout=120,
                interval=0.5,
                what="the job Running again, one disruption counted",
            )
            print(
                f"\naccess revoked {restored - revoked:.0f} s ({during} API requests in 15 s of "
                f"it); job Running again {time.monotonic() - restored:.1f} s after restoring it"
            )
        except (TimeoutError, AssertionError) as exc:
            raise AssertionError(
                f"{exc}\njob: {status()}\nlog:\n{log_path.read_text()[-5000:]}"
            ) from exc
        assert len(live_pods()) == 2
