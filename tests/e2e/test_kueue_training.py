"""Kueue preemption of real training: the Helm-installed operator with kueue.enabled, Kueue's
real manager (hack/cluster/kueue.sh), the trainer image on the real node.

examples/mnist.yaml (2 workers, 600 steps, a backup every 50) runs at low priority in a
ClusterQueue of 1 cpu (2 x 500m; memory is plentiful); past step 100 a high-priority
2-worker job arrives. Kueue preempts the low one: its trainers save on SIGTERM (exit 42)
and stop, no restart counted; the high one runs to the end; the low one is admitted again
and resumes from the step it saved, ending with exactly 600 steps. Figures printed:
preemption -> victim saved and stopped, re-admission -> first resumed step.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kerasjob_contract as contract
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import wait_for
from kerasjob_dev.kueue import PRIORITY_LABEL, QUEUE_LABEL, cluster_queue, ensure_kueue
from kerasjob_dev.synckube import ApiError, Kube

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

STEP = re.compile(contract.LOG_STEP_RE, re.M)
RESUMED = re.compile(contract.LOG_RESUMED_RE, re.M)
PREEMPTED = re.compile(contract.LOG_PREEMPTED_RE, re.M)
FINAL = re.compile(contract.LOG_FINAL_RE, re.M)
JOBS = "/apis/kerasjob.dev/v1alpha1/namespaces/{ns}/kerasjobs"


@pytest.fixture(scope="module")
def kueue_deployment(cluster: Any, images: Any) -> Iterator[tuple[Kube, str]]:
    if not cluster.local:
        pytest.skip("needs the local cluster's Kueue (hack/cluster/kueue.sh)")
    ensure_kueue(cluster, pods_ready_timeout=None)  # TensorFlow's start-up takes its time
    kube = Kube(str(cluster.kubeconfig))
    suffix = time.strftime("%H%M%S")
    jobs_ns, op_ns, release = f"e2e-kq-{suffix}", f"kerasjob-kq-{suffix}", f"kq-{suffix}"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": jobs_ns}})
    try:
        localdeploy.install_operator(
            cluster.tool("helm"),
            str(cluster.kubeconfig),
            release=release,
            namespace=op_ns,
            watch_namespaces=[jobs_ns],
            extra={"kueue": {"enabled": True}},
        )
        yield kube, jobs_ns
    finally:
        localdeploy.uninstall_operator(
            cluster.tool("helm"), str(cluster.kubeconfig), release=release, namespace=op_ns
        )
        for ns in (jobs_ns, op_ns):
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"/api/v1/namespaces/{ns}")


LOW_STEPS = 600  # ~15 s of training: room for the preemption to land mid-run


def job(name: str, claim: str, queue: str, priority: str, steps: int) -> dict[str, Any]:
    from kerasjob_dev.testing.training_run import mnist_job

    body = mnist_job(name, claim)
    body["metadata"]["labels"] = {QUEUE_LABEL: queue, PRIORITY_LABEL: priority}
    body["spec"]["trainer"]["epochs"] = 1 if steps <= 100 else 3
    body["spec"]["trainer"]["stepsPerEpoch"] = steps if steps <= 100 else steps // 3
    return body


class LogFollower(threading.Thread):
    """Keeps the longest log seen of each Pod incarnation (a deleted Pod's log goes with it)."""

    def __init__(self, kube: Kube, ns: str, pods: list[str]) -> None:
        super().__init__(daemon=True)
        self.kube, self.ns, self.pods = kube, ns, pods
        self.seen: dict[str, list[str]] = {p: [""] for p in pods}
        self.saved_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for pod in self.pods:
                text = self.kube.pod_log(self.ns, pod)
                logs = self.seen[pod]
                if text.startswith(logs[-1][:200]) or not logs[-1]:
                    logs[-1] = text if len(text) >= len(logs[-1]) else logs[-1]
                elif text:
                    logs.append(text)  # a new incarnation
                if self.saved_at is None and PREEMPTED.search(text):
                    self.saved_at = time.monotonic()
            time.sleep(0.2)

    def text(self, pod: str) -> str:
        return "\n".join(self.seen[pod])


def test_preempted_training_saves_stops_and_resumes_exactly(
    cluster: Any, kueue_deployment: tuple[Kube, str], tmp_path: Path
) -> None:
    kube, ns = kueue_deployment
    prio = {f"low-{ns}": 100, f"high-{ns}": 1000}
    pvs = []
    for name in ("low", "high"):
        pvs.append(localdeploy.shared_claim(kube, ns, f"{name}-ckpt", tmp_path / name))
    try:
        with cluster_queue(
            cluster.api_client(), ns, cpu="1", memory="64Gi", priorities=prio
        ) as queue:
            kube.request(
                "POST",
                JOBS.format(ns=ns),
                body=job("low", "low-ckpt", queue, f"low-{ns}", LOW_STEPS),
            )
            workers = ["low-worker-0", "low-worker-1"]
            follow = LogFollower(kube, ns, workers)
            follow.start()
            wait_for(
                lambda: (m := STEP.findall(follow.text("low-worker-0"))) and int(m[-1][0]) >= 100,
                timeout=400,
                interval=0.5,
                what="low past step 100",
            )
            step_at = int(STEP.findall(follow.text("low-worker-0"))[-1][0])
            t0 = time.monotonic()
            kube.request(
                "POST", JOBS.format(ns=ns), body=job("high", "high-ckpt", queue, f"high-{ns}", 60)
            )

            def low_pods() -> list[str]:
                items = (
                    kube.get(
                        f"/api/v1/namespaces/{ns}/pods", labelSelector="kerasjob.dev/job-name=low"
                    )
                    or {}
                )
                return [p["metadata"]["name"] for p in items.get("items", [])]

            wait_for(lambda: not low_pods(), timeout=120, interval=0.2, what="low stopped")
            t_stopped = time.monotonic()
            status = (kube.get(f"{JOBS.format(ns=ns)}/low") or {})["status"]
            assert status["phase"] == "Queued", status
            assert status["restarts"] == {"disruptions": 0, "failures": 0}, status

            def phase(name: str) -> str | None:
                return ((kube.get(f"{JOBS.format(ns=ns)}/{name}") or {}).get("status") or {}).get(
                    "phase"
                )

            wait_for(
                lambda: phase("high") == "Succeeded",
                timeout=400,
                interval=0.5,
                what="high Succeeded",
            )
            t_high_done = time.monotonic()
            wait_for(
                lambda: any(RESUMED.search(follow.text(p)) for p in workers),
                timeout=300,
                interval=0.2,
                what="low resumed",
            )
            t_resumed = time.monotonic()
            wait_for(
                lambda: phase("low") == "Succeeded", timeout=400, interval=0.5, what="low Succeeded"
            )
            final = wait_for(
                lambda: FINAL.findall(follow.text("low-worker-0")), timeout=30, what="final line"
            )
            follow.stop.set()
            saved = [int(s) for p in workers for s in PREEMPTED.findall(follow.text(p))]
            resumed = [int(s) for p in workers for s in RESUMED.findall(follow.text(p))]
            status = (kube.get(f"{JOBS.format(ns=ns)}/low") or {})["status"]
            print(
                f"\nKUEUE real node: low at step {step_at} when high arrived; saved at steps "
                f"{sorted(set(saved))} ({(follow.saved_at or t0) - t0:.1f}s), stopped "
                f"{t_stopped - t0:.1f}s after; high done {t_high_done - t0:.1f}s; first "
                f"resumed step {sorted(set(resumed))} {t_resumed - t_high_done:.1f}s after "
                f"high finished; final {final}; restarts {status.get('restarts')}"
            )
            assert int(final[-1][1]) == LOW_STEPS, final
            assert status["restarts"] == {"disruptions": 0, "failures": 0}, status
            # It resumed mid-run from a state newer than the step seen when high arrived (the
            # preemption came after it), not from the start nor the end. How many steps it
            # ran in between depends on the machine's speed (~40 steps/s here), not checked.
            assert resumed and all(step_at < s < LOW_STEPS for s in resumed), (resumed, step_at)
            if saved:  # the state saved at SIGTERM is where it resumed, saved promptly
                assert set(resumed) == set(saved), (saved, resumed)
                assert follow.saved_at is not None and follow.saved_at - t0 < 30, follow.saved_at
    finally:
        for r in ("low", "high"):
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"{JOBS.format(ns=ns)}/{r}")
        for pv in pvs:
            localdeploy.delete_volume(kube, pv)
