"""`make demo`: MNIST on two workers under the real operator, one eviction, a resume.

    python -m kerasjob_dev.demo                     # local cluster with its real node
    python -m kerasjob_dev.demo --cluster current   # the cluster of $KUBECONFIG, as it is
    python -m kerasjob_dev.demo --cluster current --operator installed   # e.g. after helm install

What a user does, run for them (a line each): local cluster up (control plane + the real
node: containerd, kubelet, kube-proxy, CoreDNS) -> the operator and trainer images built from
this checkout (cached) and imported into the node -> `helm install` of the chart with the
operator image (in-cluster, the chart's ServiceAccount and RBAC) -> checkpoint claim and
examples/mnist.yaml with the trainer image -> training progress from the chief's log ->
evict a worker through the Eviction API -> training resumes from the last backup (recovery
time measured from the eviction to the first "resumed at step" log line) -> job Succeeded,
final test accuracy, restart counters. Whatever happens (failure, Ctrl-C, SIGTERM),
everything the demo started is removed again: the Helm release, the demo's namespace and
volume, and the local cluster if the demo started it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3
import yaml

import kerasjob_contract as contract
from kerasjob.sdk.errors import KerasJobError
from kerasjob_dev import localdeploy
from kerasjob_dev.localcluster import LocalCluster, LocalClusterError
from kerasjob_dev.synckube import ApiError, Kube, pod_path

NAMESPACE = "kerasjob-demo"
JOB = "mnist"
WORKERS = (f"{JOB}-worker-0", f"{JOB}-worker-1")
CHIEF, VICTIM = WORKERS
CLAIM = "kerasjob-ckpt"
RELEASE = "kerasjob-demo"
OPERATOR_NAMESPACE = "kerasjob-demo-system"
#: Evict once the chief has passed this step (two backups made with saveFreq 50).
EVICT_AT_STEP = 100
JOBS = "/apis/kerasjob.dev/v1alpha1/namespaces/{ns}/kerasjobs"

STEP = re.compile(contract.LOG_STEP_RE)
RESUMED = re.compile(contract.LOG_RESUMED_RE)
FINAL = re.compile(contract.LOG_FINAL_RE)

_PATHS = {
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "Namespace": "/api/v1/namespaces",
    "PersistentVolume": "/api/v1/persistentvolumes",
    "PersistentVolumeClaim": "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    "KerasJob": JOBS,
}


class DemoError(RuntimeError):
    pass


class Clock:
    """Stage lines with the time since the demo started."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {message}", flush=True)


#: Called on every poll of `wait`; raises when a process the demo depends on died.
GUARDS: list[Callable[[], None]] = []


def wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        for guard in GUARDS:
            guard()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def apply(kube: Kube, obj: dict, namespace: str | None = None) -> None:
    """Create, or replace what is there (a tiny `kubectl apply` for the demo's objects)."""
    path = _PATHS[obj["kind"]].format(ns=namespace)
    if namespace and "{ns}" in _PATHS[obj["kind"]]:
        obj.setdefault("metadata", {})["namespace"] = namespace
    try:
        kube.request("POST", path, body=obj)
    except ApiError as e:
        if e.status != 409:
            raise
        current = kube.request("GET", f"{path}/{obj['metadata']['name']}")
        obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        kube.request("PUT", f"{path}/{obj['metadata']['name']}", body=obj)


class Logs:
    """New lines of a Pod's trainer log, read through the API server (`kubectl logs`)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.seen: dict[tuple[str, str, int], int] = {}

    def new_lines(self, pod: str) -> list[str]:
        obj = self.kube.get(pod_path(NAMESPACE, pod))
        if not obj:
            return []
        restarts = sum(
            cs.get("restartCount", 0) for cs in obj.get("status", {}).get("containerStatuses", [])
        )
        key = (pod, obj["metadata"]["uid"], restarts)
        lines = self.kube.pod_log(NAMESPACE, pod).splitlines()
        new = lines[self.seen.get(key, 0) :]
        self.seen[key] = len(lines)
        return new


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.local = args.cluster == "local"
        self.clock = Clock()
        self.say = self.clock.say
        self.repo = localdeploy.REPO_ROOT
        self.run_dir = Path(os.environ.get("KERASJOB_RUN") or self.repo / ".run")
        self.demo_dir = self.run_dir / "demo"
        self.kubeconfig = ""
        self.owns_cluster = False
        self.cluster: LocalCluster | None = None
        self.helm = "helm"
        self.installed = False
        self.image_build: localdeploy.ImageBuild | None = None
        self.pv: str | None = None
        self.kube: Kube | None = None
        self.total = 0

    # ------------------------------------------------------------------ setup

    def start_cluster(self) -> None:
        if not self.local:
            self.kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(
                Path.home() / ".kube" / "config"
            )
            self.say(f"using the current cluster of {self.kubeconfig}")
            return
        # The images build in the background while the binaries build and the cluster starts:
        # on a bare 2-core machine the Go build is CPU-bound and the images mostly wait on
        # downloads, so the two overlap (hack/images/build.sh; only what the demo runs).
        self.image_build = localdeploy.ImageBuild(variants="cpu", examples=False)
        self.say("building the operator and trainer images in the background ...")
        try:
            # No KWOK node (and so no KWOK controller to build): the demo trains on the real
            # node only. A cluster already running with KWOK nodes is used as it is.
            kwok = {"KWOK_NODES": os.environ.get("KWOK_NODES", "0")}
            self.cluster = LocalCluster(owner="demo", repo=self.repo, env=kwok)
            t0 = time.monotonic()
            # The demo's set only (hack/cluster/build.sh demo): no kwokctl.
            build = [str(self.cluster.scripts / "build.sh"), "demo"]
            built = subprocess.run(build, check=False)
            if built.returncode != 0:
                raise DemoError("hack/cluster/build.sh failed")
            self.say(f"binaries ready in {time.monotonic() - t0:.1f}s ({self.cluster.bin_dir})")
            self.kubeconfig = str(self.cluster.kubeconfig)
            self.helm = str(self.cluster.bin_dir / "helm")
            up = self.cluster.acquire()
        except LocalClusterError as e:
            raise DemoError(str(e)) from e
        self.owns_cluster = self.cluster.started
        if not self.cluster.started:
            self.say("control plane already running: using it")
        elif up is not None:
            summary = [ln for ln in up.stderr.splitlines() if "cluster up in" in ln]
            detail = summary[-1].split("up.sh: ", 1)[-1] if summary else "up"
            self.say(f"local cluster (control plane + real node): {detail}")

    def images(self) -> None:
        if self.image_build is None:
            return
        self.say("waiting for the images (cached after the first run) ...")
        try:
            built = self.image_build.wait()
            self.say(
                f"images ready {built.seconds:.1f}s after their build started: "
                + ", ".join(built.archives)
            )
            load_s = localdeploy.load_images(built)
        except localdeploy.DeployError as e:
            raise DemoError(str(e)) from e
        self.say(f"images imported into the node's containerd in {load_s:.1f}s")

    def install_operator(self, kube: Kube) -> None:
        if self.args.operator == "installed":
            self.say("using the operator installed in the cluster")
            return
        self.say(f"helm install {RELEASE} charts/kerasjob-operator -n {OPERATOR_NAMESPACE} ...")
        t0 = time.monotonic()
        try:
            localdeploy.install_operator(
                self.helm,
                self.kubeconfig,
                release=RELEASE,
                namespace=OPERATOR_NAMESPACE,
                watch_namespaces=[NAMESPACE],
            )
        except localdeploy.DeployError as e:
            raise DemoError(str(e)) from e
        self.installed = True
        pods = kube.get(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods") or {}
        where = ", ".join(
            f"{p['metadata']['name']} on {p['spec'].get('nodeName')}" for p in pods.get("items", [])
        )
        self.say(f"operator running in-cluster ({where}), Ready in {time.monotonic() - t0:.1f}s")

    def install(self, kube: Kube) -> None:
        if self.local:
            # A ReadWriteMany claim on a hostPath volume of the node (this machine).
            ckpt = self.demo_dir / "checkpoints"
            if ckpt.exists():
                shutil.rmtree(ckpt)
            self.pv = localdeploy.shared_claim(kube, NAMESPACE, CLAIM, ckpt)
        else:
            for doc in yaml.safe_load_all(
                (self.repo / "examples" / "checkpoint-pvc.yaml").read_text()
            ):
                if doc:
                    apply(kube, doc, NAMESPACE)
        job = yaml.safe_load((self.repo / "examples" / "mnist.yaml").read_text())
        apply(kube, job, NAMESPACE)
        spec = job["spec"]
        self.total = total = spec["trainer"]["epochs"] * spec["trainer"]["stepsPerEpoch"]
        self.say(
            f"applied examples/mnist.yaml in namespace {NAMESPACE}: {spec['workers']} workers, "
            f"{total} steps, backup every {spec['checkpoint']['saveFreq']} steps, "
            f"checkpoints on claim {CLAIM}"
        )

    def delete_namespace(self, kube: Kube, timeout: float = 60) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}"
        if kube.get(path) is None:
            return
        with contextlib.suppress(ApiError):
            kube.request("DELETE", path)
        wait(lambda: kube.get(path) is None, timeout, f"namespace {NAMESPACE} to go", 0.5)

    # ------------------------------------------------------------------ the story

    def pod(self, kube: Kube, name: str) -> dict | None:
        return kube.get(pod_path(NAMESPACE, name))

    def job_status(self, kube: Kube) -> dict:
        return (kube.get(f"{JOBS.format(ns=NAMESPACE)}/{JOB}") or {}).get("status") or {}

    def run(self) -> int:
        self.demo_dir.mkdir(parents=True, exist_ok=True)
        self.start_cluster()
        self.kube = kube = Kube(self.kubeconfig)
        self.images()
        self.delete_namespace(kube)
        apply(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        self.install_operator(kube)
        logs = Logs(kube)
        self.install(kube)
        t_applied = time.monotonic()

        claim = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{CLAIM}"
        hinted = []

        def running() -> list[dict] | None:
            late = not hinted and time.monotonic() - t_applied > 30
            if late and (kube.get(claim) or {}).get("status", {}).get("phase") != "Bound":
                hinted.append(True)
                self.say(
                    f"claim {CLAIM} is not bound yet: the cluster needs a ReadWriteMany "
                    "StorageClass (see examples/checkpoint-pvc.yaml)"
                )
            pods = [self.pod(kube, p) for p in WORKERS]
            ok = all(p and p.get("status", {}).get("phase") == "Running" for p in pods)
            return pods if ok else None  # type: ignore[return-value]

        pods = wait(running, 180, "both worker Pods to run", 0.3)
        where = ", ".join(
            f"{p['metadata']['name']} {p['status'].get('podIP')} on {p['spec'].get('nodeName')}"
            for p in pods
        )
        self.say(f"pods running: {where}")

        # --- train until past EVICT_AT_STEP, then evict worker 1
        def chief_step() -> int | None:
            step = None
            for line in logs.new_lines(CHIEF):
                m = STEP.search(line)
                if m:
                    step = int(m.group(1))
                    self.say(f"training: {line.split('kerasjob: ', 1)[1]}")
            logs.new_lines(VICTIM)  # keep its offset current: later lines are new ones
            return step if step is not None and step >= EVICT_AT_STEP else None

        step_at_eviction = wait(chief_step, 300, f"the chief to pass step {EVICT_AT_STEP}", 0.1)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": VICTIM, "namespace": NAMESPACE},
        }
        kube.request("POST", pod_path(NAMESPACE, VICTIM, "eviction"), body=body)
        t_evict = time.monotonic()
        self.say(f"EVICTED {VICTIM} through the Eviction API at step {step_at_eviction}")

        # --- watch for the resume
        resumed: dict[str, int] = {}
        shown: set[tuple[str, str]] = set()
        marks: dict[str, float] = {}

        def resume_seen() -> bool:
            for pod in WORKERS:
                for line in logs.new_lines(pod):
                    exiting = "exiting" in line or "preempted" in line
                    if "kerasjob:" in line and exiting and (pod, line) not in shown:
                        shown.add((pod, line))  # API logs may repeat a run's last lines
                        self.say(f"{pod}: {line.split('kerasjob: ', 1)[1]}")
                    m = RESUMED.search(line)
                    if m and pod not in resumed:
                        resumed[pod] = int(m.group(1))
                        self.say(f"{pod}: resumed at step {m.group(1)}")
                    if pod == CHIEF and STEP.search(line):
                        self.say(f"training: {line.split('kerasjob: ', 1)[1]}")
                        if resumed:  # the first step trained after the resume
                            marks.setdefault("first_step", time.monotonic() - t_evict)
            return bool(resumed)

        wait(resume_seen, 300, "training to resume", 0.1)
        recovery_s = time.monotonic() - t_evict
        self.say(
            f"training resumed at step {min(resumed.values())} (evicted at step "
            f"{step_at_eviction}): recovery took {recovery_s:.1f}s from eviction to first "
            "resumed step"
        )

        # --- to the end
        final: list[str] = []

        def succeeded() -> dict | None:
            for pod in WORKERS:
                for line in logs.new_lines(pod):
                    m = RESUMED.search(line)
                    if m and pod not in resumed:
                        resumed[pod] = int(m.group(1))
                        self.say(f"{pod}: resumed at step {m.group(1)}")
                    if pod == CHIEF and STEP.search(line):
                        self.say(f"training: {line.split('kerasjob: ', 1)[1]}")
                        marks.setdefault("first_step", time.monotonic() - t_evict)
                    if pod == CHIEF and FINAL.search(line):
                        final.append(line)
            status = self.job_status(kube)
            if status.get("phase") == "Failed":
                raise DemoError(f"the KerasJob failed: {status.get('conditions')}")
            return status if status.get("phase") == "Succeeded" else None

        status = wait(succeeded, 400, "the KerasJob to succeed", 0.2)
        for _ in range(10):  # the chief's final line may trail the phase by a moment
            if final:
                break
            succeeded()
            time.sleep(0.3)
        m = FINAL.search(final[-1]) if final else None
        accuracy = m.group(1) if m else None
        steps = m.group(2) if m else "?"
        restarts = status.get("restarts") or {}
        last = status.get("lastRestart") or {}
        self.say(f"KerasJob {JOB}: phase Succeeded after {steps} steps")
        resumed_at = ", ".join(map(str, sorted(set(resumed.values()))))
        last_text = f"  (last: {last.get('reason')} of {last.get('pod')})" if last else ""
        summary = [
            f"final test accuracy : {accuracy or 'n/a'}"
            + ("  (>= 0.90 expected)" * bool(accuracy)),
            f"steps               : {steps} of {self.total} planned (resumed at step {resumed_at})",
            f"recovery time       : {recovery_s:.1f}s eviction -> resumed from the backup"
            + (f" ({marks['first_step']:.1f}s -> first new step)" if marks else ""),
            f"restarts            : disruptions={restarts.get('disruptions', 0)} "
            f"failures={restarts.get('failures', 0)}{last_text}",
        ]
        rule = "  " + "-" * 66
        print("\n".join(["", rule, *(f"  {line}" for line in summary), rule, ""]), flush=True)
        if accuracy is not None and float(accuracy) < 0.90:
            self.say(f"WARNING: test accuracy {accuracy} is below the expected 0.90")
        return 0

    # ------------------------------------------------------------------ teardown

    def cleanup(self) -> None:
        self.say("cleaning up ...")
        removed = []
        if self.image_build is not None and self.image_build.proc.poll() is None:
            self.image_build.proc.terminate()  # the demo failed before it needed them
            removed.append("the unfinished image build")
        if self.installed:
            try:
                localdeploy.uninstall_operator(
                    self.helm, self.kubeconfig, release=RELEASE, namespace=OPERATOR_NAMESPACE
                )
                removed.append(f"helm release {RELEASE}")
            except localdeploy.DeployError as e:
                self.say(str(e))
        if self.kube is not None and not self.owns_cluster:
            # A cluster we did not start stays, without the demo's objects.
            for ns in (NAMESPACE, OPERATOR_NAMESPACE):
                with contextlib.suppress(Exception):
                    self.kube.request("DELETE", f"/api/v1/namespaces/{ns}")
            if self.pv:
                with contextlib.suppress(Exception):
                    localdeploy.delete_volume(self.kube, self.pv)
            removed.append(f"namespaces {NAMESPACE}, {OPERATOR_NAMESPACE}")
        if self.cluster is not None:
            try:
                others = self.cluster.release()
            except LocalClusterError as e:
                self.say(str(e))
            else:
                if others:
                    self.say(f"local cluster left running: also used by pid(s) {others}")
                    self.owns_cluster = False
        if self.owns_cluster:
            removed.append("the local cluster (its node's containers, mounts, bridge, cgroups)")
        self.say("removed " + ", ".join(removed) if removed else "nothing to remove")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kerasjob_dev.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--cluster",
        choices=("local", "current"),
        default="local",
        help="local: start the local cluster with its real node (default); "
        "current: the cluster of $KUBECONFIG, as it is",
    )
    parser.add_argument(
        "--operator",
        choices=("chart", "installed"),
        default="chart",
        help="helm install the chart with the operator image (default), or use the one "
        "already installed in the cluster",
    )
    args = parser.parse_args(argv)

    def on_sigterm(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_sigterm)
    # Also when started with SIGINT ignored (a background job of a script): Ctrl-C or
    # `kill -INT` must still stop the demo through its cleanup.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    demo = Demo(args)
    code = 1
    try:
        code = demo.run()
    except KeyboardInterrupt:
        demo.say("interrupted")
        code = 130
    except (DemoError, KerasJobError, OSError, urllib3.exceptions.HTTPError) as e:
        demo.say(f"FAILED: {e}")
        code = 1
    finally:
        # Ctrl-C again during cleanup must not leave things half-stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        demo.cleanup()
    return code


if __name__ == "__main__":
    sys.exit(main())
