"""Real training under the Helm-installed operator: examples/mnist.yaml (2 workers, 300 steps,
a backup every 50) in the trainer image, on a real kubelet, survives an eviction and a
SIGKILLed worker container, resumes from the backup, and ends with exactly the configured
number of steps.

On the local cluster the checkpoint claim is bound to a hostPath volume of the real node (this
machine, so the chief's progress.json is read back here); with KERASJOB_TEST_CLUSTER=current
(kind) it is a claim of KERASJOB_TEST_STORAGE_CLASS. Logs are read through the API server
(`kubectl logs`), as a user reads them."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kerasjob_contract as contract
from kerasjob.cli import app as cli
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import wait_for
from kerasjob_dev.synckube import pod_path
from kerasjob_dev.testing.training_run import FINAL, JOBS, RESUMED, Run, last_step, mnist_job

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]


def run_and_disrupt(
    run: Run,
    disrupt: Callable[[], None],
    *,
    resumes: bool = True,
    example: str = "mnist.yaml",
    **trainer: Any,
) -> dict[str, Any]:
    """Start the job, call `disrupt()` once the chief is past step 100 (two backups made),
    wait for Succeeded; return what the assertions need.

    Before the disruption no worker has resumed (first runs log "starting at step 0"), so
    every "resumed at step" line is a resume from the disruption. ``resumes=False``: the
    disruption must not restart training (no worker resumes, nothing is counted).
    """
    kj, ns, name = run.kj, run.ns, run.name
    slow = not run.dep.cluster.local  # a remote cluster may schedule and start slowly
    run.make_claim()
    kj.request("POST", JOBS.format(ns=ns), body=mnist_job(name, run.claim, example, **trainer))
    workers = (f"{name}-worker-0", f"{name}-worker-1")
    chief = workers[0]
    try:
        wait_for(
            lambda: last_step(run.log(chief)) >= 100,
            timeout=900 if slow else 300,
            interval=0.2,
            what="the chief to pass step 100",
        )
    except TimeoutError:
        print(run.status(), run.log(chief)[-3000:], run.dep.operator_logs(), sep="\n")
        raise
    step_at_disruption = last_step(run.log(chief))
    t0 = time.monotonic()
    disrupt()

    def resumed() -> float | None:
        any_resumed = any(RESUMED.search(run.log(p)) for p in workers)
        return time.monotonic() - t0 if any_resumed else None

    recovery_s = (
        wait_for(resumed, timeout=600 if slow else 180, interval=0.2, what="a resume")
        if resumes
        else float("nan")
    )

    def finished() -> dict[str, Any] | None:
        status = run.status()
        if status.get("phase") == "Failed":
            raise AssertionError(f"job failed: {status}")
        return status if status.get("phase") == "Succeeded" else None

    try:
        status = wait_for(finished, timeout=900 if slow else 400, interval=0.5, what="Succeeded")
    except (TimeoutError, AssertionError):
        print(run.status(), run.dep.operator_logs(), sep="\n")
        raise
    final = wait_for(lambda: FINAL.findall(run.log(chief)), timeout=30, what="final line")
    # "" is also what a log read that timed out gives (a loaded API server or kubelet): the
    # full suite once read no "resumed" line from either worker that way.
    logs = {
        p: wait_for(lambda p=p: run.log(p), timeout=60, interval=1, what=f"{p}'s log")
        for p in workers
    }
    resumed_at = [int(s) for p in workers for s in RESUMED.findall(logs[p])]
    print(
        f"disrupted at step {step_at_disruption}, resumed at {sorted(set(resumed_at))} "
        f"after {recovery_s:.1f}s; restarts {status.get('restarts')}; final {final}"
    )
    return {
        "status": status,
        "final": final,
        "resumed_at": resumed_at,
        "step_at_disruption": step_at_disruption,
        "progress": run.progress_files(),
        "logs": "\n".join(f"--- {p}\n{text[-3000:]}" for p, text in logs.items()),
        "operator": run.dep.operator_logs(),
    }


def assert_exact_resume(
    result: dict[str, Any],
    save_freq: int = 50,
    total: int = 300,
    *,
    pod_lost: bool = True,
    agreed_stop: bool = False,
) -> None:
    """The job ended exactly, after resuming from a backup. ``pod_lost``: a Pod ended, so
    the operator counted a disruption; else every trainer restarted in place, which only
    the chief's goodput ledger (status.progress.goodput) counts. ``agreed_stop``: the group
    stopped at a step it agreed on after the SIGTERM (JAX's preemption sync point) and saved
    there, so the resume is at or after the disruption, however many steps the agreement
    took (the caller checks that nothing was redone)."""
    assert result["final"], "the chief printed no final line"
    accuracy, steps = result["final"][-1]
    assert int(steps) == total, f"final step count {steps} != {total}"
    assert accuracy and float(accuracy) >= 0.85
    assert result["resumed_at"], (
        f"no worker resumed from the backup\n{result['logs']}\n{result['operator'][-6000:]}"
    )
    for step in result["resumed_at"]:
        if agreed_stop:
            assert result["step_at_disruption"] <= step < total, step
            continue
        # From a BackupAndRestore backup (a multiple of saveFreq) or from the state saved at
        # SIGTERM; never from scratch and never past the disruption.
        assert 0 < step <= result["step_at_disruption"] + save_freq
    if result["progress"] is not None:  # the chief's progress.json on the checkpoint volume
        assert any(p.get("step") == total for p in result["progress"]), result["progress"]
    restarts = result["status"].get("restarts") or {}
    assert restarts.get("failures", 0) == 0, restarts
    if pod_lost:
        assert restarts.get("disruptions", 0) >= 1, restarts
    else:
        assert restarts.get("disruptions", 0) == 0, restarts
        goodput = (result["status"].get("progress") or {}).get("goodput") or {}
        assert goodput.get("disruptions", 0) >= 1, result["status"].get("progress")


@pytest.fixture
def run(request: pytest.FixtureRequest, deployment: Any, tmp_path: Path):
    # The test's first word and a digest of its whole name: two tests that start alike
    # (test_sigkilled_...) once shared a claim name, and the second met the first's claim
    # still being deleted.
    test = request.node.name
    digest = hashlib.sha1(test.encode()).hexdigest()[:5]
    r = Run(deployment, f"mnist-{test.removeprefix('test_').split('_')[0][:12]}-{digest}", tmp_path)
    try:
        yield r
    finally:
        r.cleanup()


def test_eviction_resumes_from_backup(run: Run) -> None:
    """Worker 1 evicted, the job resumes from the backup on its claim. On the local cluster
    the same eviction (and a SIGKILL) runs on a bucket instead (test_bucket_training: the
    same example, resumed at the saved step, exact counts); kind runs this one."""
    if run.dep.cluster.local:
        pytest.skip("the local node's eviction of this example runs on a bucket there")

    def evict() -> None:
        pod = f"{run.name}-worker-1"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": run.ns},
        }
        run.kj.request("POST", pod_path(run.ns, pod, "eviction"), body=body)

    assert_exact_resume(run_and_disrupt(run, evict))


def test_keras3_jax_eviction_resumes_at_the_saved_step(run: Run) -> None:
    """examples/keras3-jax.yaml (Keras 3 on JAX, the Keras 3 image): worker 1 evicted; both
    stop at the step JAX's preemption sync point agreed, the chief saves, both exit 42, and
    the new Pods resume exactly there (600 steps: the agreement takes ~1 s of training)."""

    def evict() -> None:
        pod = f"{run.name}-worker-1"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": run.ns},
        }
        run.kj.request("POST", pod_path(run.ns, pod, "eviction"), body=body)

    result = run_and_disrupt(run, evict, example="keras3-jax.yaml", epochs=6)
    # The agreement took 81 steps once in `make test` (2026-11-26: disrupted at step 100,
    # stopped and saved at 181, nothing redone), past the saveFreq bound of a backup.
    assert_exact_resume(result, total=600, agreed_stop=True)
    # The evicted generation's Pods (and logs) are gone; the new chief's goodput line says
    # where the old one stopped: saved at SIGTERM, so nothing is redone.
    (disruption,) = re.findall(contract.LOG_DISRUPTION_RE, result["logs"], re.M)
    cause, last_step, resumed_step, redone = (
        disruption[1],
        int(disruption[2]),
        int(disruption[4]),
        int(disruption[6]),
    )
    assert (cause, redone) == ("preempted", 0) and last_step == resumed_step, disruption
    assert set(result["resumed_at"]) == {resumed_step}, result["logs"]
    assert "on jax" in result["logs"], result["logs"]


def test_sigkilled_worker_is_recreated_alone_and_its_logs_are_kept(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    """Worker 1's container SIGKILLed: only its Pod is re-created; the chief's trainer
    restarts in place (same Pod UID and IP, a second incarnation in the same container's
    log), one disruption is counted, and `kerasjob logs --previous` shows the lost Pod's
    last incarnation from the checkpoint volume."""
    if not run.dep.cluster.local:
        pytest.skip("SIGKILLs the worker's container through the node's containerd: local only")
    chief, victim = f"{run.name}-worker-0", f"{run.name}-worker-1"
    before: dict[str, Any] = {}

    def sigkill() -> None:
        before.update(chief=run.kj.get(pod_path(run.ns, chief)) or {})
        before.update(victim=run.kj.get(pod_path(run.ns, victim)) or {})
        cid = localdeploy.container_id(before["victim"])
        assert cid, f"worker 1 has no running container: {before['victim'].get('status')}"
        localdeploy.kill_container(cid, "SIGKILL")

    result = run_and_disrupt(run, sigkill)
    assert_exact_resume(result)
    assert result["status"]["restarts"] == {"disruptions": 1, "failures": 0}
    after = {p: run.kj.get(pod_path(run.ns, p)) or {} for p in (chief, victim)}
    uid = {k: p["metadata"]["uid"] for k, p in (("chief", after[chief]), ("victim", after[victim]))}
    assert uid["chief"] == before["chief"]["metadata"]["uid"], "the chief's Pod was re-created"
    assert after[chief]["status"]["podIP"] == before["chief"]["status"]["podIP"]
    assert uid["victim"] != before["victim"]["metadata"]["uid"], "worker 1 was not re-created"
    chief_log = run.log(chief)
    banners = re.findall(contract.LOG_INCARNATION_RE, chief_log, re.M)
    assert [n for n, _ in banners] == ["1", "2"], chief_log[-3000:]
    assert "restarted in place after exit 43" in chief_log

    kubeconfig = str(run.dep.cluster.kubeconfig)
    capsys.readouterr()
    argv = ["--kubeconfig", kubeconfig, "logs", run.name, "-n", run.ns, "--replica", "worker-1"]
    assert cli.main([*argv, "--previous"]) == 0
    previous = capsys.readouterr().out
    # Worker 1's first Pod: its one incarnation, trained past step 100, then SIGKILLed.
    assert re.search(r"^kerasjob: incarnation 1 of worker-1 started", previous, re.M), previous
    assert last_step(previous) >= 100, previous[-2000:]
    assert "kerasjob: final" not in previous
    assert cli.main([*argv, "--all-incarnations"]) == 0
    every = capsys.readouterr().out
    assert [n for n, _ in re.findall(contract.LOG_INCARNATION_RE, every, re.M)] == ["1", "2"]


def test_operator_upgraded_mid_training(run: Run) -> None:
    """`helm upgrade` to a new operator image tag while a job trains: the operator's Pod is
    replaced, the job is not touched (no restart, no resume) and ends exactly."""
    if not run.dep.cluster.local:
        pytest.skip("tags the image in the local node's containerd")
    dep = run.dep
    new_tag = f"{localdeploy.IMAGE_TAG}-upgrade"
    localdeploy.tag_image(localdeploy.OPERATOR_IMAGE, f"kerasjob/operator:{new_tag}")

    def operator_images() -> set[str]:
        pods = dep.kube.get(f"/api/v1/namespaces/{dep.operator_namespace}/pods") or {}
        return {
            c["image"]
            for p in pods.get("items", [])
            if not p["metadata"].get("deletionTimestamp")
            for c in p["spec"]["containers"]
        }

    def upgrade() -> None:
        t0 = time.monotonic()
        localdeploy.install_operator(
            dep.cluster.tool("helm"),
            str(dep.cluster.kubeconfig),
            release=dep.release,
            namespace=dep.operator_namespace,
            watch_namespaces=[dep.namespace],
            extra={"image": {"tag": new_tag, "pullPolicy": "Never"}},
        )
        wait_for(
            lambda: operator_images() == {f"kerasjob/operator:{new_tag}"},
            timeout=120,
            what="only the upgraded operator Pod left",
        )
        print(f"operator upgraded to {new_tag} in {time.monotonic() - t0:.1f} s")

    try:
        result = run_and_disrupt(run, upgrade, resumes=False)
    finally:  # the session's other tests keep the operator they were given
        localdeploy.install_operator(
            dep.cluster.tool("helm"),
            str(dep.cluster.kubeconfig),
            release=dep.release,
            namespace=dep.operator_namespace,
            watch_namespaces=[dep.namespace],
        )
    accuracy, steps = result["final"][-1]
    assert int(steps) == 300 and float(accuracy) >= 0.85
    assert not result["resumed_at"], "training restarted during the operator's upgrade"
    assert result["status"]["restarts"] == {"disruptions": 0, "failures": 0}


def test_worker_network_cut_longer_than_the_collective_timeout(run: Run) -> None:
    """One worker's network is cut (inside its Pod) for longer than the collective timeout,
    then restored: the workers give up on the collective (exit 43) and their trainers
    restart in place, inside their own Pods (no Pod is lost, none re-created, nothing for
    the operator to count); once the network is back they form the cluster again and resume
    from the backup; the job ends exactly, the chief's goodput ledger counting the
    disruption."""
    if not run.dep.cluster.local:
        pytest.skip("cuts a Pod's network through the local node's containerd")
    timeout_s = 10
    names = [f"{run.name}-worker-{i}" for i in (0, 1)]
    uids: dict[str, str] = {}
    cut: dict[str, float] = {}

    def partition() -> None:
        pods = {n: run.kj.get(pod_path(run.ns, n)) or {} for n in names}
        uids.update({n: p["metadata"]["uid"] for n, p in pods.items()})
        cid = localdeploy.container_id(pods[names[1]])
        assert cid, f"worker 1 has no running container: {pods[names[1]].get('status')}"
        localdeploy.netcut(cid, True)
        cut["at"] = time.monotonic()
        try:
            wait_for(
                lambda: "restarted in place after exit 43" in run.log(names[0]),
                timeout=timeout_s + 120,
                interval=0.5,
                what="the chief's trainer to restart in place",
            )
            cut["restarted_after"] = time.monotonic() - cut["at"]
        finally:
            localdeploy.netcut(cid, False)
        print(
            f"network cut; the chief restarted in place {cut['restarted_after']:.1f} s later "
            f"(collective timeout {timeout_s} s)"
        )

    result = run_and_disrupt(run, partition, collectiveTimeoutSeconds=timeout_s)
    assert_exact_resume(result, pod_lost=False)
    assert cut["restarted_after"] < timeout_s + 90
    after = {n: (run.kj.get(pod_path(run.ns, n)) or {})["metadata"]["uid"] for n in names}
    assert after == uids, "a Pod was re-created"


#: How long the node's kubelet stays down: past NotReady (the controller-manager's
#: node-monitor-grace-period, 50 s) and the Pods' eviction (nodeLostTolerationSeconds 5),
#: but not past the force deletion (their 60 s grace + the operator's 30 s after it).
KUBELET_DOWN_S = 80
NODE_LOST_EPOCHS = 60


def test_node_not_ready_evicts_and_the_job_resumes(run: Run) -> None:
    """The real node's kubelet is killed: the node goes NotReady, the Pods (tolerating a lost
    node for 5 s, the chart's nodeLostTolerationSeconds) are evicted and stay Terminating,
    no replacement is made beside them, the containers train on. When the kubelet is back it
    stops them (SIGTERM: they save and exit 42), the operator re-creates the group and the
    job resumes and ends exactly, with disruptions and no failure."""
    if not run.dep.cluster.local:
        pytest.skip("kills the local real node's kubelet")
    dep = run.dep
    workers = (f"{run.name}-worker-0", f"{run.name}-worker-1")

    def operator(extra: dict[str, Any] | None) -> None:
        localdeploy.install_operator(
            dep.cluster.tool("helm"),
            str(dep.cluster.kubeconfig),
            release=dep.release,
            namespace=dep.operator_namespace,
            watch_namespaces=[dep.namespace],
            extra=extra,
        )

    def node_ready(name: str) -> bool:
        node = dep.kube.get(f"/api/v1/nodes/{name}") or {}
        conds = (node.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    seen: dict[str, float] = {}

    def node_lost() -> None:
        pods = {p: run.kj.get(pod_path(run.ns, p)) or {} for p in workers}
        node = pods[workers[0]]["spec"]["nodeName"]
        uids = {p: pod["metadata"]["uid"] for p, pod in pods.items()}
        t0 = time.monotonic()
        killer = threading.Thread(
            target=lambda: seen.setdefault(
                "kubelet_down_s", dep.cluster.restart_component("kubelet", down=KUBELET_DOWN_S)
            )
        )
        killer.start()
        wait_for(
            lambda: not node_ready(node),
            timeout=KUBELET_DOWN_S,
            interval=1,
            what=f"node {node} NotReady",
        )
        seen["not_ready_s"] = time.monotonic() - t0

        def stuck() -> bool:  # evicted, still there, not replaced
            now = {p: run.kj.get(pod_path(run.ns, p)) or {} for p in workers}
            return all(
                pod.get("metadata", {}).get("uid") == uids[p]
                and pod["metadata"].get("deletionTimestamp")
                for p, pod in now.items()
            )

        wait_for(
            stuck,
            timeout=max(KUBELET_DOWN_S - seen["not_ready_s"], 1),
            interval=1,
            what="both Pods evicted and left Terminating",
        )
        seen["evicted_s"] = time.monotonic() - t0
        killer.join(KUBELET_DOWN_S + 150)
        assert not killer.is_alive(), "the kubelet did not come back"
        wait_for(lambda: node_ready(node), timeout=120, interval=1, what=f"node {node} Ready")
        seen["ready_again_s"] = time.monotonic() - t0

    operator({"nodeLostTolerationSeconds": 5})
    try:
        # The containers train on while the kubelet is down (~80 s) and must not finish
        # meanwhile: 2,000 steps took ~40 s once the trainer lost TensorFlow's collective
        # timeout (its per-op threads had slowed every step), and the job then ended with no
        # resume. 6,000 steps outlast the outage at any speed seen here (17-50 steps/s).
        result = run_and_disrupt(run, node_lost, epochs=NODE_LOST_EPOCHS)
    finally:
        operator(None)  # the session's other tests keep the default
    print(
        f"kubelet killed: node NotReady after {seen['not_ready_s']:.0f} s, both Pods "
        f"evicted (Terminating) after {seen['evicted_s']:.0f} s, node Ready again after "
        f"{seen['ready_again_s']:.0f} s"
    )
    accuracy, steps = result["final"][-1]
    total = NODE_LOST_EPOCHS * 100  # examples/mnist.yaml: 100 steps per epoch
    assert int(steps) == total and float(accuracy) >= 0.85
    assert result["resumed_at"] and all(0 < s < total for s in result["resumed_at"]), result
    restarts = result["status"]["restarts"]
    assert restarts["disruptions"] >= 1 and restarts["failures"] == 0, restarts
