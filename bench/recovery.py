"""Recovery from repeated disruptions of one worker on the real node, per disruption.

    python bench/recovery.py [--disruptions 5] [--kinds sigterm,sigkill,evict,delete]
                             [--backend tensorflow|jax] [--victims 1] [--workers 2]
                             [--example keras3-hub-lora] [--cpu-request 250m]
                                      # writes bench/results/recovery.json (--out)
    python bench/recovery.py --quick  # two disruptions: checks that it runs

`--backend jax` runs examples/keras3-jax.yaml (Keras 3 on JAX) instead of examples/mnist.yaml;
`--example keras3-hub-lora` runs that file of examples/ instead (there: the sharded KerasHub
fine-tune, ModelParallel over 2 Pods x 2 devices; its backend is the file's);
`--victims 0` disrupts worker 0 (the chief, JAX's coordinator) instead of worker 1, and
`--victims 0,1` alternates them in one run, so both see the same machine and their medians
compare (the summary prints each victim's median and their ratio); `--workers` sets the job's
size. Below, "worker 1" is the victim and "worker 0" the survivors.

Everything as users run it: the local cluster with its real node (kubelet + containerd), the
images built from this checkout, the operator installed by Helm, a 2-worker MNIST KerasJob
(examples/mnist.yaml with more steps). Worker 1 is disrupted N times, cycling through the
kinds, each time once the chief has trained 40 steps past the previous resume: SIGTERM to its
container (both trainers save and exit 42), SIGKILL of its container (exit 137; the chief's
trainer exits 43), its eviction, or its deletion. Worker 1's Pod ends and is re-created;
worker 0's trainer restarts in place (the container's supervisor), so its Pod UID, IP and
node must not change, and there is no kubelet back-off to grow from one disruption to the
next. For each disruption: seconds from the disruption to the chief's "resumed at step" line
and to its first new step, worker 0's Pod before and after; at the end the job's counted
restarts (one disruption each).

And where the seconds go, per disruption: disruption -> the old generation's last exit (the
save on SIGTERM; the goodput ledger's `exited_at`) -> the chief's new trainer process started
(its `kerasjob: startup` line) -> Python -> TensorFlow imported -> cluster formed -> model
built and backup restored -> first step done (tracing, first collectives). All wall clocks of
this one machine.
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


#: The lines of a container's log read at each look: more than one incarnation prints before
#: its first step, and far fewer than the whole log of 50 incarnations, which this bench
#: otherwise read 10 times a second, a load on the node growing with every disruption.
TAIL_LINES = 400


def log(kube: Kube, pod: str) -> str:
    return kube.pod_log(NS, pod, tail_lines=TAIL_LINES)


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


BANNER = re.compile(contract.LOG_INCARNATION_RE, re.M)
KINDS = ("sigterm", "sigkill", "evict", "delete")


def identity(kube: Kube, pod: str) -> dict[str, Any]:
    """The Pod's UID, IP and node and its container's restartCount ({} when it is gone)."""
    p = kube.get(pod_path(NS, pod)) or {}
    status = p.get("status") or {}
    cs = status.get("containerStatuses") or [{}]
    if not p:
        return {}
    return {
        "uid": p["metadata"]["uid"],
        "ip": status.get("podIP", ""),
        "node": (p.get("spec") or {}).get("nodeName", ""),
        "restarts": cs[0].get("restartCount", 0),
    }


def incarnation(text: str) -> tuple[int, str]:
    """The last incarnation's number (0: no banner) and its part of a container's log."""
    found = list(BANNER.finditer(text))
    if not found:
        return 0, text
    return int(found[-1].group(1)), text[found[-1].start() :]


def breakdown(
    ckpt: Path, chief_text: str, signalled_at: float, resumed_at: int
) -> dict[str, float]:
    """Seconds per phase of the disruption resumed at `resumed_at` (see the module
    docstring); {} until the ledger holds it and the chief's startup line is read."""
    # This job's: the volume keeps earlier runs' directories (one per job UID).
    ledgers = sorted(ckpt.rglob("ledger.json"), key=lambda p: p.stat().st_mtime)
    m = STARTUP.search(chief_text)
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
    if kind == "delete":
        kube.request("DELETE", pod_path(NS, pod))
        return
    cid = localdeploy.container_id(kube.get(pod_path(NS, pod)) or {})
    if not cid:
        raise RuntimeError(f"{pod} has no running container")
    localdeploy.kill_container(cid, "SIGTERM" if kind == "sigterm" else "SIGKILL")


def kinds_of(text: str, n: int) -> list[str]:
    """`--kinds a,b`: n disruptions cycling through them."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if not kinds or unknown:
        raise SystemExit(f"--kinds: one or more of {', '.join(KINDS)}, not {text!r}")
    return [kinds[i % len(kinds)] for i in range(n)]


def example_file(args: argparse.Namespace) -> str:
    if args.example:
        return f"{args.example}.yaml"
    return "keras3-jax.yaml" if args.backend == "jax" else "mnist.yaml"


def victims_of(text: str, workers: int, n: int) -> list[int]:
    """`--victims 0,1`: n disruptions taking the workers in turn."""
    try:
        victims = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        victims = []
    if not victims or any(not 0 <= v < workers for v in victims):
        raise SystemExit(f"--victims: workers of 0..{workers - 1}, comma-separated, not {text!r}")
    return [victims[i % len(victims)] for i in range(n)]


def per_victim(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each victim's median disruption -> first new step, and worker 0's over worker 1's."""
    medians = {
        str(v): statistics.median(r["first_step_s"] for r in results if r["victim"] == v)
        for v in sorted({r["victim"] for r in results})
    }
    out: dict[str, Any] = {"median_first_step_s_by_victim": medians}
    if "0" in medians and "1" in medians:
        out["victim0_over_victim1"] = round(medians["0"] / medians["1"], 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disruptions", type=int, default=5)
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"disruptions to cycle through, of {', '.join(KINDS)} (default: all, in order)",
    )
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    parser.add_argument(
        "--victims", default="1", help="the workers disrupted, in turn (default 1; e.g. 0,1)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--example", help="a file of examples/ to run, without .yaml (default: by --backend)"
    )
    parser.add_argument(
        "--cpu-request",
        help="each trainer's CPU request instead of the example's (e.g. 250m: 4 workers of "
        "500m do not fit a 2-CPU node)",
    )
    parser.add_argument("--quick", action="store_true", help="two disruptions: checks it runs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.disruptions = 2
    kinds = kinds_of(args.kinds, args.disruptions)
    victims = victims_of(args.victims, args.workers, args.disruptions)

    cluster = LocalCluster(owner="bench", repo=ROOT)
    cluster.acquire()
    kube = Kube(str(cluster.kubeconfig))
    helm = str(cluster.bin_dir / "helm")
    pv = None
    results: list[dict[str, Any]] = []
    counted: dict[str, Any] = {}
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
        job = yaml.safe_load((ROOT / "examples" / example_file(args)).read_text())
        args.backend = job["spec"]["trainer"].get("backend", "tensorflow")
        job["metadata"]["name"] = JOB
        job["spec"]["workers"] = args.workers
        job["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": "ckpt"}}
        job["spec"]["trainer"]["epochs"] = 2 + args.disruptions
        job["spec"].pop("ttlSecondsAfterFinished", None)
        if args.cpu_request:
            for c in job["spec"]["template"]["spec"]["containers"]:
                c.setdefault("resources", {}).setdefault("requests", {})["cpu"] = args.cpu_request
        job_path = f"/apis/kerasjob.dev/v1alpha1/namespaces/{NS}/kerasjobs"
        kube.request("POST", job_path, body=job)
        chief = f"{JOB}-worker-0"  # it prints the steps

        def step() -> int:
            found = STEP.findall(log(kube, chief))
            return int(found[-1][0]) if found else 0

        resumed_at = wait(lambda: step() >= 60 and step(), 300, "the chief at step 60")
        for i, (kind, victim_index) in enumerate(zip(kinds, victims, strict=True), 1):
            # The survivors must keep their Pods.
            victim = f"{JOB}-worker-{victim_index}"
            survivors = [f"{JOB}-worker-{n}" for n in range(args.workers) if n != victim_index]
            target = resumed_at + 40
            wait(lambda t=target: step() >= t, 300, f"the chief at step {target}")
            before = {p: identity(kube, p) for p in {chief, victim, *survivors}}
            chief_incarnation = incarnation(log(kube, chief))[0]
            at_step = step()
            t0, signalled_at = time.monotonic(), time.time()
            disrupt(kube, kind, victim)

            def chief_resumed(
                uid: str = before[chief]["uid"], n: int = chief_incarnation
            ) -> tuple[int, str] | None:
                """The chief's new incarnation (in place, or a new Pod) once it resumed."""
                now = identity(kube, chief)
                number, text = incarnation(log(kube, chief))
                if not now or (now["uid"] == uid and number <= n):
                    return None
                m = RESUMED.search(text)
                return (int(m.group(1)), text) if m else None

            resumed_at, _ = wait(chief_resumed, 600, "the chief to resume", 0.1)
            t_resumed = time.monotonic() - t0

            def stepped(r: int = resumed_at) -> str | None:
                text = chief_resumed()
                return (
                    text[1] if text and any(int(x[0]) > r for x in STEP.findall(text[1])) else None
                )

            wait(stepped, 300, "a new step", 0.1)
            t_step = time.monotonic() - t0
            after = {p: identity(kube, p) for p in {chief, victim, *survivors}}
            phases = wait(
                lambda t=signalled_at, r=resumed_at: breakdown(
                    ckpt, incarnation(log(kube, chief))[1], t, r
                ),
                30,
                "the ledger and the chief's startup line",
                0.5,
            )
            if t_step > 15:  # an outlier: show how the restarted workers spent the time
                for p in (chief, victim):
                    print(f"--- {p} (slow recovery), its last incarnation:")
                    print("\n".join(incarnation(log(kube, p))[1].splitlines()[:60]))
            kept = {
                f"{p[len(JOB) + 1 :]}.{k}": before[p][k] == after[p].get(k)
                for p in survivors
                for k in ("uid", "ip", "node")
            }
            # The lost worker's new process: when it started, how long its cluster took.
            victim_startup = STARTUP.search(incarnation(log(kube, victim))[1])
            if victim_startup:
                phases["victim_started"] = round(float(victim_startup.group(1)) - signalled_at, 2)
                for phase, value in zip(PHASES, victim_startup.groups()[1:6], strict=True):
                    phases[f"victim_{phase}"] = float(value) if value != "-" else float("nan")
            results.append(
                {
                    "disruption": i,
                    "kind": kind,
                    "victim": victim_index,
                    "at_step": at_step,
                    "resumed_at": resumed_at,
                    "resumed_s": round(t_resumed, 2),
                    "first_step_s": round(t_step, 2),
                    "chief_before": before[chief],
                    "chief_after": after[chief],
                    "chief_pod_kept": all(kept.values()),  # every survivor's Pod
                    "victim_recreated": before[victim]["uid"] != after[victim].get("uid"),
                    "phases_s": phases,
                }
            )
            print(
                f"disruption {i} ({kind} of worker {victim_index} at step {at_step}): "
                f"resumed at {resumed_at} after {t_resumed:.1f}s, "
                f"first new step after {t_step:.1f}s; survivors "
                f"{'kept their Pods' if all(kept.values()) else f'changed: {kept}'}\n  "
                + " ".join(f"{k}={v:.2f}s" for k, v in phases.items()),
                flush=True,
            )
        status = (kube.get(f"{job_path}/{JOB}") or {}).get("status") or {}
        counted = {"made": len(results), "status_restarts": status.get("restarts")}
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
            "max_first_step_s": max(r["first_step_s"] for r in results),
            "last_over_first": round(last / first, 2),
            "chief_pod_kept_every_time": all(r["chief_pod_kept"] for r in results),
            "counted": counted,
            **per_victim(results),
            "median_phases_s": {
                k: round(statistics.median(r["phases_s"][k] for r in results), 2) for k in keys
            },
        }
        print(
            f"median disruption -> first new step {summary['median_first_step_s']:.1f}s "
            f"(max {summary['max_first_step_s']:.1f}s); last/first "
            f"{summary['last_over_first']}; survivors kept their Pods every time: "
            f"{summary['chief_pod_kept_every_time']}; counted {counted}; by victim: "
            f"{summary['median_first_step_s_by_victim']} "
            f"(worker 0 / worker 1: {summary.get('victim0_over_victim1', '-')}); median phases: "
            + " ".join(f"{k}={v:.2f}s" for k, v in summary["median_phases_s"].items())
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "machine": platform.node(),
                    "quick": args.quick,
                    "backend": args.backend,
                    "example": example_file(args),
                    "cpu_request": args.cpu_request,
                    "victims": sorted(set(victims)),
                    "workers": args.workers,
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
