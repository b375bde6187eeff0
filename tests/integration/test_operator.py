"""The operator against a real API server: children, status, restarts, cleanup.

The operator runs as a real subprocess (`support.operator.shared_operator`); Pods land on fake
KWOK nodes, which mark them Running and Ready. To make a trainer "exit", a test writes the
Pod status a kubelet would (pods/status subresource).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    condition,
    core,
    create_job,
    delete_job,
    events_for,
    get_job,
    isolated_namespace,
    job_manifest,
    job_status,
    patch_job,
    pods,
    set_container_exit,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A namespace only this session's operator watches (overrides the conftest one)."""
    yield from isolated_namespace(kube)


def running_job(kube: Any, ns: str, name: str = "mnist", workers: int = 3, **spec: Any) -> dict:
    create_job(kube, ns, job_manifest(name, workers=workers, **spec))
    return wait_phase(kube, ns, name, "Running")


def env_of(pod: Any) -> dict[str, str]:
    trainer = next(c for c in pod.spec.containers if c.name == "trainer")
    return {e.name: e.value for e in trainer.env or []}


def pod_uid(kube: Any, ns: str, name: str) -> str | None:
    try:
        return core(kube).read_namespaced_pod(name, ns).metadata.uid
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def replaced(kube: Any, ns: str, name: str, old_uid: str) -> str:
    """Wait until Pod ``name`` exists again with a new UID (and is not terminating)."""

    def check() -> str | None:
        pod = core(kube).read_namespaced_pod(name, ns)
        if pod.metadata.uid != old_uid and pod.metadata.deletion_timestamp is None:
            return pod.metadata.uid
        return None

    return wait_for(check, timeout=30, what=f"Pod {name} re-created")


def restarts(kube: Any, ns: str, name: str) -> dict[str, int]:
    return job_status(kube, ns, name).get("restarts") or {}


def test_three_workers_get_a_service_pods_tf_config_and_run(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    created = create_job(kube, namespace, job_manifest("mnist", workers=3))
    got = wait_for(
        lambda: len(p := pods(kube, namespace, "mnist")) == 3 and p, timeout=30, what="3 Pods"
    )
    assert sorted(got) == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
    services = core(kube).list_namespaced_service(namespace).items
    assert [s.metadata.name for s in services] == ["mnist"]
    assert services[0].spec.cluster_ip == "None"
    for i in range(3):
        pod = got[f"mnist-worker-{i}"]
        tf_config = json.loads(env_of(pod)["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": i}
        assert len(tf_config["cluster"]["worker"]) == 3
        assert tf_config["cluster"]["worker"][i].startswith(f"mnist-worker-{i}.mnist.{namespace}")
        (owner,) = pod.metadata.owner_references
        assert owner.uid == created["metadata"]["uid"] and owner.controller
    status = wait_phase(kube, namespace, "mnist", "Running")
    assert status["replicaStatuses"]["worker"]["ready"] == 3
    assert condition(status, "Created")["status"] == "True"
    assert condition(status, "Running")["status"] == "True"
    assert status["restarts"] == {"disruptions": 0, "failures": 0}
    assert status["startTime"]
    # Idempotent: still exactly 3 Pods and 1 Service after a while of events.
    assert len(pods(kube, namespace, "mnist")) == 3


def test_a_job_managed_by_another_controller_is_left_alone(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    """spec.managedBy names MultiKueue: no Pod, no Service, no status from this operator
    (the manager copies the worker cluster's status); a status written by that manager is
    kept as written. A job created after it (and one naming this operator) runs, so the
    operator did see them."""
    handed = job_manifest("handed", workers=2, managedBy="kueue.x-k8s.io/multikueue")
    create_job(kube, namespace, handed)
    ours = job_manifest("ours", workers=1, managedBy="kerasjob.dev/operator")
    create_job(kube, namespace, ours)
    wait_phase(kube, namespace, "ours", "Running")
    running_job(kube, namespace, "after", workers=1)
    time.sleep(2)
    assert not pods(kube, namespace, "handed")
    assert [
        s.metadata.name
        for s in core(kube).list_namespaced_service(namespace).items
        if s.metadata.name == "handed"
    ] == []
    assert get_job(kube, namespace, "handed").get("status") in (None, {})
    # What the manager writes (here, by hand) stays, and still no Pod comes.
    copied = {"phase": "Running", "restarts": {"disruptions": 0, "failures": 0}}
    client.CustomObjectsApi(kube).patch_namespaced_custom_object_status(
        "kerasjob.dev", "v1alpha1", namespace, "kerasjobs", "handed", {"status": copied}
    )
    time.sleep(2)
    assert job_status(kube, namespace, "handed") == copied
    assert not pods(kube, namespace, "handed")
    assert not events_for(kube, namespace, "handed")


def test_deleted_and_evicted_pods_come_back_as_disruptions(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace)
    uid = pod_uid(kube, namespace, "mnist-worker-1")
    core(kube).delete_namespaced_pod("mnist-worker-1", namespace)
    replaced(kube, namespace, "mnist-worker-1", uid)
    wait_for(
        lambda: restarts(kube, namespace, "mnist") == {"disruptions": 1, "failures": 0},
        timeout=20,
        what="one disruption counted",
    )

    uid = pod_uid(kube, namespace, "mnist-worker-2")
    eviction = client.V1Eviction(
        metadata=client.V1ObjectMeta(name="mnist-worker-2", namespace=namespace)
    )
    core(kube).create_namespaced_pod_eviction("mnist-worker-2", namespace, eviction)
    replaced(kube, namespace, "mnist-worker-2", uid)
    status = wait_phase(kube, namespace, "mnist", "Running")
    assert status["restarts"] == {"disruptions": 2, "failures": 0}
    assert status["lastRestart"]["pod"] == "mnist-worker-2"
    assert status["lastRestart"]["disruption"] is True
    assert len(pods(kube, namespace, "mnist")) == 3
    wait_for(
        lambda: any(e.reason == "PodDisrupted" for e in events_for(kube, namespace, "mnist")),
        timeout=10,
        what="a PodDisrupted event",
    )


def test_error_exits_count_failures_until_backoff_limit(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace, backoffLimit=2)
    # An in-place restart by the kubelet (Pod restartPolicy OnFailure) after exit 1.
    set_container_exit(cluster, namespace, "mnist-worker-1", 1, in_place=True, restart_count=1)
    wait_for(
        lambda: restarts(kube, namespace, "mnist").get("failures") == 1,
        timeout=20,
        what="one failure",
    )
    # A Pod that ended Failed: counted once, re-created under the same name.
    uid = pod_uid(kube, namespace, "mnist-worker-2")
    set_container_exit(cluster, namespace, "mnist-worker-2", 1, in_place=False)
    replaced(kube, namespace, "mnist-worker-2", uid)
    status = wait_phase(kube, namespace, "mnist", "Running")
    assert status["restarts"] == {"disruptions": 0, "failures": 2}
    # Peer-lost exits (43) are disruptions, whatever the count of failures.
    set_container_exit(cluster, namespace, "mnist-worker-0", 43, in_place=True, restart_count=1)
    wait_for(
        lambda: restarts(kube, namespace, "mnist") == {"disruptions": 1, "failures": 2},
        timeout=20,
        what="peer-lost counted as a disruption",
    )
    assert job_status(kube, namespace, "mnist")["phase"] != "Failed"
    # The third failure exceeds backoffLimit 2.
    set_container_exit(cluster, namespace, "mnist-worker-1", 1, in_place=True, restart_count=2)
    status = wait_phase(kube, namespace, "mnist", "Failed")
    assert condition(status, "Failed")["reason"] == "BackoffLimitExceeded"
    assert status["restarts"] == {"disruptions": 1, "failures": 3}
    assert status["completionTime"]
    wait_for(  # events are posted right after the status write
        lambda: any(
            e.type == "Warning" and e.reason == "BackoffLimitExceeded"
            for e in events_for(kube, namespace, "mnist")
        ),
        timeout=10,
        what="a Warning event BackoffLimitExceeded",
    )
    # cleanPodPolicy Running: the running Pods are deleted.
    wait_for(lambda: not pods(kube, namespace, "mnist"), timeout=20, what="Pods cleaned up")


def test_exit_78_fails_the_job_at_once(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace, workers=2, backoffLimit=6)
    set_container_exit(cluster, namespace, "mnist-worker-1", 78, in_place=True)
    status = wait_phase(kube, namespace, "mnist", "Failed")
    assert condition(status, "Failed")["reason"] == "InvalidConfig"
    assert status["lastRestart"]["exitCode"] == 78


def test_chief_success_succeeds_the_job_and_cleans_running_pods(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace)
    set_container_exit(cluster, namespace, "mnist-worker-2", 0, in_place=False)
    wait_for(
        lambda: job_status(kube, namespace, "mnist")["replicaStatuses"]["worker"]["succeeded"] == 1,
        timeout=20,
        what="worker 2 succeeded",
    )
    set_container_exit(cluster, namespace, "mnist-worker-0", 0, in_place=False)
    status = wait_phase(kube, namespace, "mnist", "Succeeded")
    assert condition(status, "Succeeded")["status"] == "True"
    assert status["completionTime"]
    # cleanPodPolicy Running: worker 1 (running) goes, the finished Pods stay for their logs.
    wait_for(
        lambda: "mnist-worker-1" not in pods(kube, namespace, "mnist"),
        timeout=20,
        what="running worker deleted",
    )
    left = pods(kube, namespace, "mnist")
    assert sorted(left) == ["mnist-worker-0", "mnist-worker-2"]
    # Succeeded workers are never re-created, even when their Pod goes away.
    core(kube).delete_namespaced_pod("mnist-worker-2", namespace)
    wait_for(
        lambda: "mnist-worker-2" not in pods(kube, namespace, "mnist"),
        timeout=20,
        what="worker 2 gone",
    )
    assert job_status(kube, namespace, "mnist")["phase"] == "Succeeded"
    assert "mnist-worker-2" not in pods(kube, namespace, "mnist")


@pytest.mark.parametrize(("policy", "left"), [("All", []), ("None", ["w-worker-0", "w-worker-1"])])
def test_clean_pod_policy(
    operator: OperatorProcess,
    cluster: Cluster,
    kube: Any,
    namespace: str,
    policy: str,
    left: list[str],
) -> None:
    running_job(kube, namespace, name="w", workers=2, cleanPodPolicy=policy)
    set_container_exit(cluster, namespace, "w-worker-0", 0, in_place=False)
    wait_phase(kube, namespace, "w", "Succeeded")
    wait_for(
        lambda: sorted(pods(kube, namespace, "w")) == left,
        timeout=20,
        what=f"Pods left by cleanPodPolicy {policy}",
    )


def test_deleting_the_job_garbage_collects_its_children(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace, workers=2)
    delete_job(kube, namespace, "mnist")
    wait_for(
        lambda: (
            not pods(kube, namespace, "mnist")
            and not core(kube).list_namespaced_service(namespace).items
        ),
        timeout=60,
        what="Pods and Service garbage-collected",
    )


def test_suspend_deletes_pods_and_resume_recreates_them(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace, workers=2)
    patch_job(kube, namespace, "mnist", {"spec": {"suspend": True}})
    status = wait_phase(kube, namespace, "mnist", "Suspended")
    assert condition(status, "Suspended")["status"] == "True"
    wait_for(lambda: not pods(kube, namespace, "mnist"), timeout=20, what="Pods deleted")
    patch_job(kube, namespace, "mnist", {"spec": {"suspend": False}})
    status = wait_phase(kube, namespace, "mnist", "Running")
    assert condition(status, "Suspended")["status"] == "False"
    assert status["restarts"] == {"disruptions": 0, "failures": 0}
    assert len(pods(kube, namespace, "mnist")) == 2


def test_active_deadline_fails_the_job(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace, workers=1, checkpoint={}, activeDeadlineSeconds=3)
    status = wait_phase(kube, namespace, "mnist", "Failed", timeout=20)
    assert condition(status, "Failed")["reason"] == "DeadlineExceeded"
    wait_for(lambda: not pods(kube, namespace, "mnist"), timeout=20, what="Pods stopped")


def test_ttl_after_finished_deletes_the_job(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace, workers=1, checkpoint={}, ttlSecondsAfterFinished=1)
    set_container_exit(cluster, namespace, "mnist-worker-0", 0, in_place=False)

    def gone() -> bool:
        try:
            get_job(kube, namespace, "mnist")
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(gone, timeout=30, what="KerasJob deleted after its TTL")


class _Metrics(http.server.BaseHTTPRequestHandler):
    text = ""

    def do_GET(self) -> None:
        body = type(self).text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_progress_is_scraped_from_the_chief(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    """The chief's Prometheus metrics end up in status.progress (chief "runs" on 127.0.0.1)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _Metrics.text = (
            "# TYPE kerasjob_step gauge\nkerasjob_epoch 1\nkerasjob_step 120\n"
            "kerasjob_loss 0.25\nkerasjob_samples_per_second 512.5\n"
            'kerasjob_metric{name="accuracy"} 0.9\n'
        )
        env = [{"name": "KERASJOB_METRICS_PORT", "value": str(port)}]
        template = job_manifest("p")["spec"]["template"]
        template["spec"]["containers"] = [{"name": "trainer", "env": env}]
        running_job(
            kube,
            namespace,
            name="p",
            workers=1,
            checkpoint={},
            template=template,
            trainer={"epochs": 2, "stepsPerEpoch": 100},
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        }
        cluster.kubectl(
            "patch",
            "pod",
            "p-worker-0",
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )
        progress = wait_for(
            lambda: (
                (p := job_status(kube, namespace, "p").get("progress") or {}).get("step") == 120
                and p
            ),
            timeout=20,
            what="status.progress from the chief's metrics",
        )
        assert progress["epoch"] == 1 and progress["totalSteps"] == 200
        assert progress["loss"] == 0.25 and progress["samplesPerSecond"] == 512.5
        assert progress["metrics"] == {"accuracy": 0.9} and progress["updatedAt"]
        _Metrics.text = _Metrics.text.replace("kerasjob_step 120", "kerasjob_step 150")
        wait_for(
            lambda: job_status(kube, namespace, "p")["progress"]["step"] == 150,
            timeout=20,
            what="progress updated",
        )
    finally:
        server.shutdown()


def test_restart_policy_never_fails_on_the_first_failure_but_survives_disruptions(
    operator: OperatorProcess, cluster: Cluster, kube: Any, namespace: str
) -> None:
    running_job(kube, namespace, workers=2, restartPolicy="Never")
    assert all(p.spec.restart_policy == "Never" for p in pods(kube, namespace, "mnist").values())
    # A peer-lost exit (43) ends the Pod (no in-place restart): a disruption, re-created.
    uid = pod_uid(kube, namespace, "mnist-worker-1")
    set_container_exit(cluster, namespace, "mnist-worker-1", 43, in_place=False)
    replaced(kube, namespace, "mnist-worker-1", uid)
    wait_phase(kube, namespace, "mnist", "Running")
    # An error exit fails the job at once.
    set_container_exit(cluster, namespace, "mnist-worker-0", 1, in_place=False)
    status = wait_phase(kube, namespace, "mnist", "Failed")
    assert condition(status, "Failed")["reason"] == "PodFailed"
    assert status["restarts"] == {"disruptions": 1, "failures": 1}


@pytest.fixture
def lost_node(kube: Any, namespace: str) -> Iterator[str]:
    """A Node object with no kubelet behind it (nor KWOK: not annotated as a fake node):
    it exists, so the Pod garbage collector leaves its Pods alone, but nothing ever runs
    or finishes them. Tainted so that no other test's Pod is scheduled there."""
    name = f"lost-{namespace}"[:63]
    body = {
        "metadata": {"name": name, "labels": {"kerasjob.dev/test": "lost-node"}},
        "spec": {"taints": [{"key": "kerasjob.dev/lost", "effect": "NoSchedule"}]},
    }
    core(kube).create_node(body)
    try:
        yield name
    finally:
        core(kube).delete_node(name)


def test_pod_stuck_terminating_on_a_lost_node_is_force_deleted_and_replaced(
    operator: OperatorProcess, kube: Any, namespace: str, lost_node: str
) -> None:
    """A Pod bound to a node whose kubelet is gone never finishes terminating; the operator
    force-deletes it once its deletionTimestamp (grace included) is past by the margin
    (3 s for the tests' operators) and re-creates it. (A node that never existed is another
    case: the Pod garbage collector deletes such Pods and the job fails NodeNotFound.)"""
    template = {"spec": {"nodeName": lost_node, "terminationGracePeriodSeconds": 1}}
    create_job(kube, namespace, job_manifest("lost", workers=1, checkpoint={}, template=template))
    uid = wait_for(
        lambda: pod_uid(kube, namespace, "lost-worker-0"),
        timeout=30,
        what="the Pod on the lost node",
    )
    core(kube).delete_namespaced_pod("lost-worker-0", namespace)
    pod = core(kube).read_namespaced_pod("lost-worker-0", namespace)
    assert pod.metadata.deletion_timestamp is not None  # stuck: no kubelet confirms it
    new_uid = wait_for(
        lambda: (u := pod_uid(kube, namespace, "lost-worker-0")) != uid and u,
        timeout=30,
        what="the stuck Pod force-deleted and re-created",
    )
    assert new_uid
    status = job_status(kube, namespace, "lost")
    assert status["restarts"] == {"disruptions": 1, "failures": 0}


def test_trainer_pods_pass_restricted_pod_security(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    """The trainer Pods' defaults meet Pod Security "restricted": the API server admits them
    in a namespace that enforces it (with a claim, not a hostPath checkpoint volume)."""
    core(kube).patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    volume = {"persistentVolumeClaim": {"claimName": "ckpt"}}
    manifest = job_manifest("secure", workers=2)
    manifest["spec"]["checkpoint"]["volume"] = volume
    create_job(kube, namespace, manifest)
    got = wait_for(
        lambda: len(p := pods(kube, namespace, "secure")) == 2 and p, timeout=30, what="2 Pods"
    )
    for pod in got.values():
        trainer = next(c for c in pod.spec.containers if c.name == "trainer")
        assert trainer.security_context.read_only_root_filesystem is True
        assert pod.spec.security_context.run_as_non_root is True
    events = core(kube).list_namespaced_event(namespace).items
    assert not [e.message for e in events if "violates PodSecurity" in (e.message or "")]


def test_a_missing_checkpoint_secret_holds_the_pods_until_it_has_its_keys(
    operator: OperatorProcess, kube: Any, namespace: str
) -> None:
    """A bucket job whose credentials Secret does not exist (then lacks a key) makes no Pod:
    condition Created False (CheckpointSecretMissing) and a Warning name the Secret and what
    it lacks; another job of the namespace runs meanwhile; once the Secret is complete the
    Pods are made with its keys as env and the job's own prefix in the bucket."""
    checkpoint = {"location": "s3://ckpt-bucket/team", "credentials": {"secretName": "aws-keys"}}
    created = create_job(kube, namespace, job_manifest("bkt", workers=2, checkpoint=checkpoint))
    where = f"Secret {namespace}/aws-keys (spec.checkpoint.credentials of s3://ckpt-bucket/team)"

    def waiting(message: str) -> dict[str, Any] | None:
        got = condition(job_status(kube, namespace, "bkt"), "Created")
        if got and got["status"] == "False" and got["message"] == message:
            return dict(got)
        return None

    missing = (
        f"{where} not found: it must hold AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; "
        "no Pods are created until it exists"
    )
    got = wait_for(lambda: waiting(missing), timeout=30, what="condition CheckpointSecretMissing")
    assert got["reason"] == "CheckpointSecretMissing"
    assert job_status(kube, namespace, "bkt")["phase"] == "Pending"
    warnings = wait_for(
        lambda: [e for e in events_for(kube, namespace, "bkt") if e.reason == got["reason"]],
        timeout=30,
        what="the Warning",
    )
    assert [(e.type, e.message) for e in warnings] == [("Warning", missing)]
    running_job(kube, namespace, "other", workers=1)  # the operator goes on with the others
    assert not pods(kube, namespace, "bkt")

    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name="aws-keys"), string_data={"AWS_ACCESS_KEY_ID": "id"}
    )
    core(kube).create_namespaced_secret(namespace, secret)
    lacks = f"{where} lacks AWS_SECRET_ACCESS_KEY; no Pods are created until it has it"
    wait_for(lambda: waiting(lacks), timeout=60, what="the Secret's missing key named")
    assert not pods(kube, namespace, "bkt")

    core(kube).patch_namespaced_secret(
        "aws-keys", namespace, {"stringData": {"AWS_SECRET_ACCESS_KEY": "key"}}
    )
    got_pods = wait_for(
        lambda: len(p := pods(kube, namespace, "bkt")) == 2 and p, timeout=90, what="2 Pods"
    )
    uid = created["metadata"]["uid"]
    for pod in got_pods.values():
        trainer = next(c for c in pod.spec.containers if c.name == "trainer")
        assert [e.secret_ref.name for e in trainer.env_from or []] == ["aws-keys"]
        assert env_of(pod)["KERASJOB_CHECKPOINT_LOCATION"] == (
            f"s3://ckpt-bucket/team/{namespace}/bkt/{uid}"
        )
        volume = next(v for v in pod.spec.volumes if v.name == "kerasjob-checkpoint")
        assert volume.empty_dir is not None and volume.host_path is None
    status = wait_phase(kube, namespace, "bkt", "Running")
    assert condition(status, "Created")["status"] == "True"
