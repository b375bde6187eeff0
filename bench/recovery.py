"""Recovery from repeated disruptions on the real node, per disruption.

    python bench/recovery.py [--disruptions 5] [--kind sigterm|sigkill|evict]
                                      # writes bench/results/recovery.json
    python bench/recovery.py --quick  # one disruption: checks that it runs

Everything as users run it: the local cluster with its real node (kubelet + containerd), the
images built from this checkout, the operator installed by Helm, a 2-worker MNIST KerasJob
(examples/mnist.yaml with more steps). Worker 1 is disrupted N times, each time once the chief
has trained 40 steps past the previous resume: SIGTERM to its container (the trainer saves
and exits 42, its peer too; both restart), SIGKILL (exit 137; the peer exits 43), or an
eviction (the Pod is re-created). For each disruption: seconds from the signal to the first
"resumed at step" line of the restarted workers, and to the chief's first new step, and the
kubelet's restart count. The question this answers: does the 5th disruption of a run cost
more than the 1st (the kubelet's CrashLoopBackOff grows 10 s, 20 s, 40 s ... for containers
restarted in place)?

And where the seconds go, per disruption: signal -> the old generation's last exit (the save
on SIGTERM; the goodput ledger's `exited_at`) -> the new chief process started (its
`kerasjob: startup` line: operator, Pod re-creation, kubelet, container) -> Python ->
TensorFlow imported -> cluster formed -> model built and backup restored -> first step done
(tracing, first collectives). All wall clocks of this one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

import kerasjob_contract as contract
from kerasjob_dev import localdeploy
from kerasjob_dev.localcluster import LocalCluster
from kerasjob_dev.synckube import ApiError, Kube, pod_path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "recovery.json"
NS = "kerasjob-bench"
JOB = "recover"
STEP = re.compile(contract.LOG_STEP_RE, re.M)
RESUMED = re.compile(contract.LOG_RESUMED_RE, re.M)
STARTUP = re.compile(contract.LOG_STARTUP_RE, re.M)
PHASES = ("python", "tensorflow", "cluster", "restore", "first_step")


def log(kube: Kube, pod: str) -> str:
    return kube.pod_log(NS, pod)


def wait(pred: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = pred()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")


def restarts(kube: Kube, pod: str) -> tuple[str, int]:
    p = kube.get(pod_path(NS, pod)) or {}
    cs = (p.get("status") or {}).get("containerStatuses") or [{}]
    return p.get("metadata", {}).get("uid", ""), cs[0].get("restartCount", 0)


def breakdown(
    kube: Kube, ckpt: Path, chief: str, signalled_at: float, resumed_at: int
) -> dict[str, float]:
    """Seconds per phase of the disruption resumed at `resumed_at` (see the module
    docstring); {} until the ledger holds it and the chief's startup line is read."""
    # This job's: the volume keeps earlier runs' directories (one per job UID).
    ledgers = sorted(ckpt.rglob("ledger.json"), key=lambda p: p.stat().st_mtime)
    m = STARTUP.search(log(kube, chief))
    if not ledgers or not m:
        return {}
    events = json.loads(ledgers[-1].read_text())["events"]
    if not events or events[-1]["resumed_step"] != resumed_at:
        return {}
    event = events[-1]
    started = float(m.group(1))
    out: dict[str, float] = {}
    exited = event.get("exited_at")
    if exited is not None:
        out["exit"] = exited - signalled_at
        out["restart"] = started - exited
    else:
        out["restart"] = started - signalled_at
    for phase, value in zip(PHASES, m.groups()[1:6], strict=True):
        out[phase] = float(value) if value != "-" else float("nan")
    out["total"] = event["first_step_at"] - signalled_at
    return {k: round(v, 2) for k, v in out.items()}


def disrupt(kube: Kube, kind: str, pod: str) -> None:
    if kind == "evict":
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}}
        kube.request("POST", pod_path(NS, pod, "eviction"), body=body)
        return
    cid = localdeploy.container_id(kube.get(pod_path(NS, pod)) or {})
    if not cid:
        raise RuntimeError(f"{pod} has no running container")
    localdeploy.kill_container(cid, "SIGTERM" if kind == "sigterm" else "SIGKILL")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disruptions", type=int, default=5)
    parser.add_argument("--kind", choices=("sigterm", "sigkill", "evict"), default="sigterm")
    parser.add_argument("--quick", action="store_true", help="one disruption")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.disruptions = 1

    cluster = LocalCluster(owner="bench", repo=ROOT)
    cluster.acquire()
    kube = Kube(str(cluster.kubeconfig))
    helm = str(cluster.bin_dir / "helm")
    pv = None
    results: list[dict[str, Any]] = []
    try:
        localdeploy.load_images(localdeploy.build_images())
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
        localdeploy.install_operator(
            helm,
            str(cluster.kubeconfig),
            release="bench",
            namespace=f"{NS}-system",
            watch_namespaces=[NS],
        )
        ckpt = Path(os.environ.get("KERASJOB_RUN") or ROOT / ".run") / "bench" / "ckpt"
        pv = localdeploy.shared_claim(kube, NS, "ckpt", ckpt)
        job = yaml.safe_load((ROOT / "examples" / "mnist.yaml").read_text())
        job["metadata"]["name"] = JOB
        job["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": "ckpt"}}
        job["spec"]["trainer"]["epochs"] = 2 + args.disruptions
        job["spec"].pop("ttlSecondsAfterFinished", None)
        kube.request("POST", f"/apis/kerasjob.dev/v1alpha1/namespaces/{NS}/kerasjobs", body=job)
        chief, victim = f"{JOB}-worker-0", f"{JOB}-worker-1"

        def step() -> int:
            found = STEP.findall(log(kube, chief))
            return int(found[-1][0]) if found else 0

        resumed_at = wait(lambda: step() >= 60 and step(), 300, "the chief at step 60")
        for i in range(1, args.disruptions + 1):
            target = resumed_at + 40
            wait(lambda t=target: step() >= t, 300, f"the chief at step {target}")
            before = {p: restarts(kube, p) for p in (chief, victim)}
            at_step = step()
            t0, signalled_at = time.monotonic(), time.time()
            disrupt(kube, args.kind, victim)

            def restarted(before: dict = before) -> bool:
                return all(restarts(kube, p) != before[p] for p in (chief, victim))

            wait(restarted, 600, "both workers restarted", 0.2)

            def resumed() -> int | None:
                m = RESUMED.search(log(kube, chief))
                return int(m.group(1)) if m else None

            resumed_at = wait(resumed, 600, "the chief to resume", 0.1)
            t_resumed = time.monotonic() - t0
            wait(lambda r=resumed_at: step() > r, 300, "a new step", 0.1)
            t_step = time.monotonic() - t0
            counts = {p: restarts(kube, p)[1] for p in (chief, victim)}
            phases = wait(
                lambda t=signalled_at, r=resumed_at: breakdown(kube, ckpt, chief, t, r),
                30,
                "the ledger and the chief's startup line",
                0.5,
            )
            if t_step > 20:  # an outlier: show how the restarted workers spent the time
                for p in (chief, victim):
                    print(f"--- {p} (slow recovery), start of its log:")
                    print("\n".join(log(kube, p).splitlines()[:40]))
            results.append(
                {
                    "disruption": i,
                    "kind": args.kind,
                    "at_step": at_step,
                    "resumed_at": resumed_at,
                    "resumed_s": round(t_resumed, 2),
                    "first_step_s": round(t_step, 2),
                    "restart_counts": counts,
                    "phases_s": phases,
                }
            )
            print(
                f"disruption {i} ({args.kind} at step {at_step}): resumed at {resumed_at} "
                f"after {t_resumed:.1f}s, first new step after {t_step:.1f}s; "
                f"restartCount {counts}\n  " + " ".join(f"{k}={v:.2f}s" for k, v in phases.items()),
                flush=True,
            )
    finally:
        try:
            localdeploy.uninstall_operator(
                helm, str(cluster.kubeconfig), release="bench", namespace=f"{NS}-system"
            )
        finally:
            for path in (f"/api/v1/namespaces/{NS}", f"/api/v1/namespaces/{NS}-system"):
                with contextlib.suppress(ApiError):  # already gone
                    kube.request("DELETE", path)
            if pv:
                localdeploy.delete_volume(kube, pv)
            cluster.release()
    if results:
        first, last = results[0]["first_step_s"], results[-1]["first_step_s"]
        keys = [k for k in results[0]["phases_s"] if all(k in r["phases_s"] for r in results)]
        summary = {
            "median_first_step_s": statistics.median(r["first_step_s"] for r in results),
            "last_over_first": round(last / first, 2),
            "median_phases_s": {
                k: round(statistics.median(r["phases_s"][k] for r in results), 2) for k in keys
            },
        }
        print(
            f"median disruption -> first new step {summary['median_first_step_s']:.1f}s; "
            f"last/first {summary['last_over_first']}; median phases: "
            + " ".join(f"{k}={v:.2f}s" for k, v in summary["median_phases_s"].items())
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "machine": platform.node(),
                    "quick": args.quick,
                    "disruptions": results,
                    **summary,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.out}")
    return 0 if len(results) == args.disruptions else 1


if __name__ == "__main__":
    sys.exit(main())
