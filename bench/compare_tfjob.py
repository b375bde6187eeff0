"""Our operator beside Kubeflow's training-operator (TFJobs) on one control plane.

N concurrent 4-worker jobs for each operator in turn, one operator running at a time:
KerasJobs under ours, TFJobs under training-operator v1.9.3.

    python bench/compare_tfjob.py              # (make bench-tfjob): 100 jobs per operator
    python bench/compare_tfjob.py --jobs 10    # a quick look
    python bench/compare_tfjob.py --quick      # 5 jobs; checks that it runs (below)

--quick runs the TFJob side only when the training-operator is already built (`make
bench-tfjob` or hack/cluster/training-operator.sh build: a cold build from its Go module takes
minutes) and the cluster is the local one; otherwise it prints that it skips the TFJob side
and measures KerasJobs alone. With KERASJOB_TEST_CLUSTER=current (the cluster of
KUBECONFIG, e.g. a test session's) only --quick runs, KerasJobs alone.

The local cluster (hack/cluster, fake KWOK nodes: Pods are never run, KWOK marks them
Running) is started with an API server audit log (bench/audit-writes.yaml: every write
request), unless one is already up: then start it yourself with
APISERVER_EXTRA_ARGS="--audit-policy-file=$PWD/bench/audit-writes.yaml
--audit-log-path=$PWD/.run/compare-tfjob-audit.log" (or pass --audit-log), else the API
writes are not counted. KERASJOB_NODE=0 leaves the real node out (not needed here).

For each operator in turn, in a fresh namespace:
- start it: ours as the tests do (`python -m kerasjob run`, kerasjob_dev.harness), the
  training-operator v1.9.3 with hack/cluster/training-operator.sh up (TFJob scheme only,
  no gang scheduling, no webhook registered; otherwise its defaults, as its Deployment
  runs it: client rate limit 20 QPS / burst 30, one controller thread); a one-worker
  warm-up job; its RSS at idle;
- create N jobs at once (16 client threads): KerasJobs (4 workers), or TFJobs (4 Worker
  replicas, restartPolicy OnFailure, a container that would run `python -c pass`), both
  with the KWOK node selector and toleration;
- until every Pod is Running and every job says Running: per job, apply -> all its Pods
  created (median, max), first apply -> last Pod created (wall); per Pod, created ->
  Running (median, p99); per job, apply -> job Running (median, max);
- the operator's write requests in that window (from the audit log, by its user agent:
  `kerasjob-operator` and `kopf/...` for ours, `training-operator/...` for theirs), its CPU
  seconds (/proc, user + system) and its peak RSS (VmHWM). Writes are counted whatever
  the answer; the ones not answered 2xx (409 AlreadyExists, Conflict...) also apart;
- the jobs deleted (namespace gone), the operator stopped.
Prints a table with the ratios (ours / theirs), writes bench/results/compare_tfjob.json
(with the commit, and whether operator/ had uncommitted changes: the working tree is run).
The control plane shares the machine's cores with the operators: the latencies include its
work (the scheduler binds, KWOK marks Running).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kerasjob_dev import benchrun
from kerasjob_dev import cluster as support
from kerasjob_dev.cluster import KWOK_POD_PLACEMENT
from kerasjob_dev.harness import GROUP, PLURAL, VERSION, OperatorProcess, core, install_crds
from kerasjob_dev.harness import custom as custom_api
from kerasjob_dev.harness import job_manifest as kerasjob_manifest
from kerasjob_dev.procstat import cpu_seconds, peak_rss_mib, rss_mib

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "compare_tfjob.json"
AUDIT_POLICY = ROOT / "bench" / "audit-writes.yaml"
DEFAULT_AUDIT_LOG = (
    Path(os.environ.get("KERASJOB_RUN") or ROOT / ".run") / "compare-tfjob-audit.log"
)
TRAINING_OPERATOR = ROOT / "hack" / "cluster" / "training-operator.sh"
WORKERS = 4
THREADS = 16
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
TF = ("kubeflow.org", "v1", "tfjobs")


def tfjob_manifest(name: str, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "tensorflow",  # the name the operator expects
                                    "image": "kerasjob/trainer:test",
                                    "command": ["python", "-c", "pass"],
                                }
                            ],
                            **KWOK_POD_PLACEMENT,
                        }
                    },
                }
            }
        },
    }


def tfjob_running(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Running" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


class Flavor:
    """One operator and its kind of job."""

    name = ""
    agents: tuple[str, ...] = ()
    group, version, plural = "", "", ""

    def __init__(self, cluster: Any, ns: str) -> None:
        self.cluster, self.ns = cluster, ns

    def start(self) -> int:  # the operator's pid
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def manifest(self, name: str, workers: int) -> dict[str, Any]:
        raise NotImplementedError

    def running(self, status: dict[str, Any]) -> bool:
        raise NotImplementedError

    def ours(self, user_agent: str) -> bool:
        return user_agent.startswith(self.agents)


class KerasJobs(Flavor):
    name = "kerasjob"
    agents = ("kerasjob-operator", "kopf/")
    group, version, plural = GROUP, VERSION, PLURAL

    def start(self) -> int:
        self.op = OperatorProcess(
            self.cluster, (self.ns,), name="compare-tfjob", extra_args=("--progress-interval", "0")
        )
        self.op.start()
        assert self.op.proc is not None
        return self.op.proc.pid

    def stop(self) -> None:
        self.op.stop()

    def manifest(self, name: str, workers: int) -> dict[str, Any]:
        return kerasjob_manifest(name, workers=workers)

    def running(self, status: dict[str, Any]) -> bool:
        return status.get("phase") == "Running"


class TFJobs(Flavor):
    name = "tfjob"
    agents = ("training-operator/",)
    group, version, plural = TF

    def script(self, cmd: str) -> None:
        subprocess.run(
            [str(TRAINING_OPERATOR), cmd], check=True, env=self.cluster.env(), timeout=1800
        )

    def start(self) -> int:
        self.script("up")
        pid_file = Path(self.cluster.kubeconfig).parent / "pids" / "training-operator.pid"
        return int(pid_file.read_text().strip())

    def stop(self) -> None:
        self.script("down")

    def manifest(self, name: str, workers: int) -> dict[str, Any]:
        return tfjob_manifest(name, workers)

    def running(self, status: dict[str, Any]) -> bool:
        return tfjob_running(status)


class Watcher:
    """When each Pod of a namespace was first seen, first seen Running; when each job was
    first seen Running."""

    def __init__(self, kube: Any, flavor: Flavor) -> None:
        self.kube, self.flavor = kube, flavor
        self.added: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.job_running: dict[str, float] = {}
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        for fn in (self._pods, self._jobs):
            threading.Thread(target=self._forever, args=(fn,), daemon=True).start()

    def _forever(self, fn: Any) -> None:
        while not self.stopping.is_set():
            try:
                fn()
            except Exception:  # a broken watch is started again
                time.sleep(0.1)

    def _pods(self) -> None:
        from kubernetes import watch

        for ev in watch.Watch().stream(
            core(self.kube).list_namespaced_pod, self.flavor.ns, timeout_seconds=5
        ):
            pod, now = ev["object"], time.monotonic()
            with self.cond:
                self.added.setdefault(pod.metadata.name, now)
                if pod.status and pod.status.phase == "Running":
                    self.running.setdefault(pod.metadata.name, now)
                self.cond.notify_all()
            if self.stopping.is_set():
                return

    def _jobs(self) -> None:
        from kubernetes import watch

        f = self.flavor
        for ev in watch.Watch().stream(
            custom_api(self.kube).list_namespaced_custom_object,
            f.group,
            f.version,
            f.ns,
            f.plural,
            timeout_seconds=5,
        ):
            obj, now = ev["object"], time.monotonic()
            if f.running(obj.get("status") or {}):
                with self.cond:
                    self.job_running.setdefault(obj["metadata"]["name"], now)
                    self.cond.notify_all()
            if self.stopping.is_set():
                return

    def wait(self, predicate: Any, timeout: float) -> bool:
        return support.wait_notified(self.cond, predicate, timeout)

    def pods_of(self, job: str) -> list[str]:
        # Both name their Pods <job>-worker-<index>.
        return [p for p in list(self.added) if p.rsplit("-", 2)[0] == job]


def stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "median_s": None, "p99_s": None, "max_s": None}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(values),
        "median_s": round(statistics.median(values), 3),
        "p99_s": round(p99, 3),
        "max_s": round(max(values), 3),
    }


def audit_writes(
    log: Path, offset: int, start: datetime, end: datetime
) -> Counter[tuple[str, str, int]]:
    """Completed write requests received in [start, end], by (user agent, verb resource,
    response code)."""
    counts: Counter[tuple[str, str, int]] = Counter()
    with log.open("rb") as f:
        f.seek(offset)
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in WRITE_VERBS:
                continue
            at = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if not start <= at <= end:
                continue
            ref = ev.get("objectRef") or {}
            what = ref.get("resource", "?") + (
                f"/{ref['subresource']}" if ref.get("subresource") else ""
            )
            agent = ev.get("userAgent", "?").split(" ")[0]
            code = (ev.get("responseStatus") or {}).get("code", 0)
            counts[(agent, f"{ev['verb']} {what}", code)] += 1
    return counts


def run(
    cluster: Any,
    kube: Any,
    flavor_cls: type[Flavor],
    n: int,
    audit_log: Path | None,
) -> dict[str, Any]:
    ns = support.create_namespace(kube, prefix=f"cmp-{flavor_cls.name}")
    flavor = flavor_cls(cluster, ns)
    api = custom_api(kube)
    result: dict[str, Any] = {
        "operator": flavor.name,
        "namespace": ns,
        "jobs": n,
        "workers_per_job": WORKERS,
    }
    watcher = Watcher(kube, flavor)
    started = False
    try:
        pid = flavor.start()
        started = True
        result["operator_rss_after_start_mib"] = rss_mib(pid)
        # Warm-up: one 1-worker job through to Running, so what follows is the steady state
        # (watches open, caches filled), then a few idle seconds.
        api.create_namespaced_custom_object(
            flavor.group, flavor.version, ns, flavor.plural, flavor.manifest("warmup", 1)
        )
        if not watcher.wait(lambda: "warmup" in watcher.job_running, timeout=120):
            raise TimeoutError(f"{flavor.name}: the warm-up job not Running in 120 s")
        time.sleep(3)
        result["operator_rss_idle_mib"] = rss_mib(pid)
        offset = audit_log.stat().st_size if audit_log is not None else 0
        wall_start = datetime.now(UTC)
        cpu0 = cpu_seconds(pid)
        load = os.getloadavg()[0]
        names = [f"j{i}" for i in range(n)]
        applied: dict[str, float] = {}

        def create(name: str) -> None:
            applied[name] = time.monotonic()
            api.create_namespaced_custom_object(
                flavor.group, flavor.version, ns, flavor.plural, flavor.manifest(name, WORKERS)
            )

        with ThreadPoolExecutor(max_workers=min(n, THREADS)) as pool:
            list(pool.map(create, names))
        timeout = 120 + 2.0 * n
        ok_created = watcher.wait(
            lambda: all(len(watcher.pods_of(j)) == WORKERS for j in names), timeout
        )
        ok_running = watcher.wait(
            lambda: (
                all(j in watcher.job_running for j in names)
                and all(p in watcher.running for j in names for p in watcher.pods_of(j))
            ),
            timeout,
        )
        time.sleep(1.0)  # the writes that follow the last transition land
        cpu = cpu_seconds(pid) - cpu0
        wall_end = datetime.now(UTC)
        with watcher.cond:
            pods = {j: watcher.pods_of(j) for j in names}
            created = {
                j: max(watcher.added[p] for p in ps) for j, ps in pods.items() if len(ps) == WORKERS
            }
            to_running = [
                watcher.running[p] - watcher.added[p]
                for ps in pods.values()
                for p in ps
                if p in watcher.running
            ]
            job_running = [
                watcher.job_running[j] - applied[j] for j in names if j in watcher.job_running
            ]
        result.update(
            {
                "complete": ok_created and ok_running,
                "loadavg_1m_before": load,
                "apply_to_all_pods_created": stats([created[j] - applied[j] for j in created]),
                "first_apply_to_last_pod_created_s": round(
                    max(created.values()) - min(applied.values()), 3
                )
                if created
                else None,
                "pod_created_to_running": stats(to_running),
                "apply_to_job_running": stats(job_running),
                "operator_cpu_seconds": round(cpu, 3),
                "operator_cpu_seconds_per_job": round(cpu / n, 4),
                "operator_peak_rss_mib": peak_rss_mib(pid),
                "window_s": round((wall_end - wall_start).total_seconds(), 1),
            }
        )
        if audit_log is not None:
            counts = audit_writes(audit_log, offset, wall_start, wall_end)
            mine: Counter[str] = Counter()
            failed: Counter[str] = Counter()
            by_agent: Counter[str] = Counter()
            for (agent, what, code), c in counts.items():
                by_agent[agent] += c
                if flavor.ours(agent):
                    mine[what] += c
                    if not 200 <= code < 300:  # e.g. 409 AlreadyExists, Conflict
                        failed[f"{what} {code}"] += c
            result["api_writes"] = sum(mine.values())
            result["api_writes_per_job"] = round(sum(mine.values()) / n, 2)
            result["api_writes_by_kind_per_job"] = {
                k: round(v / n, 2) for k, v in sorted(mine.items())
            }
            result["api_writes_failed_per_job"] = {
                k: round(v / n, 2) for k, v in sorted(failed.items())
            }
            result["all_writes_in_window_by_user_agent"] = dict(by_agent.most_common())
    finally:
        watcher.stopping.set()
        support.delete_namespace_and_wait(kube, ns, timeout=300)
        if started:
            flavor.stop()
    return result


def training_operator_built() -> bool:
    """Whether hack/cluster/training-operator.sh has its binary (no build needed)."""
    out = subprocess.run(
        [str(TRAINING_OPERATOR), "--bin"], capture_output=True, text=True, check=False
    )
    return out.returncode == 0 and Path(out.stdout.strip()).is_file()


ROWS = [  # label, path in a result, format
    ("apply -> all Pods created, median (s)", ("apply_to_all_pods_created", "median_s"), ".2f"),
    ("apply -> all Pods created, max (s)", ("apply_to_all_pods_created", "max_s"), ".2f"),
    ("first apply -> last Pod created (s)", ("first_apply_to_last_pod_created_s",), ".2f"),
    ("Pod created -> Running, median (s)", ("pod_created_to_running", "median_s"), ".2f"),
    ("Pod created -> Running, p99 (s)", ("pod_created_to_running", "p99_s"), ".2f"),
    ("apply -> job Running, median (s)", ("apply_to_job_running", "median_s"), ".2f"),
    ("apply -> job Running, max (s)", ("apply_to_job_running", "max_s"), ".2f"),
    ("API writes per job (any response)", ("api_writes_per_job",), ".1f"),
    ("CPU per job (ms)", ("operator_cpu_seconds_per_job",), "ms"),
    ("RSS idle, before the burst (MiB)", ("operator_rss_idle_mib",), ".0f"),
    ("peak RSS, VmHWM (MiB)", ("operator_peak_rss_mib",), ".0f"),
]


def pick(result: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = result
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int | float) else None


def table(ours: dict[str, Any], theirs: dict[str, Any]) -> tuple[str, dict[str, float | None]]:
    def fmt(v: float | None, spec: str) -> str:
        if v is None:
            return "-"
        return f"{1000 * v:.0f}" if spec == "ms" else format(v, spec)

    lines = [f"{'':36s} {'KerasJob':>10s} {'TFJob':>10s} {'ours/theirs':>12s}"]
    ratios: dict[str, float | None] = {}
    for label, path, spec in ROWS:
        a, b = pick(ours, path), pick(theirs, path)
        r = round(a / b, 2) if a is not None and b else None
        ratios[".".join(path)] = r
        lines.append(
            f"{label:36s} {fmt(a, spec):>10s} {fmt(b, spec):>10s} "
            f"{'-' if r is None else f'{r:.2f}x':>12s}"
        )
    return "\n".join(lines), ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="concurrent jobs per operator")
    parser.add_argument(
        "--audit-log",
        type=Path,
        default=None,
        help=f"the API server's audit log (default: {DEFAULT_AUDIT_LOG}, "
        "with APISERVER_EXTRA_ARGS set for it when this starts the cluster)",
    )
    parser.add_argument(
        "--order", default="kerasjob,tfjob", help="which operator runs first (comma-separated)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="5 jobs; the TFJob side only if the training-operator is built",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    current = support.wants_current_cluster()
    if current and not args.quick:
        print(
            "compare_tfjob.py needs the local cluster (hack/cluster); with "
            "KERASJOB_TEST_CLUSTER=current only --quick runs (KerasJobs alone)",
            file=sys.stderr,
        )
        return 2
    if args.quick:
        args.jobs = 5
    skip_tfjob = ""
    if current:
        skip_tfjob = (
            "KERASJOB_TEST_CLUSTER=current: training-operator.sh starts it only "
            "next to hack/cluster's own cluster"
        )
    elif args.quick and not training_operator_built():
        skip_tfjob = (
            "the training-operator is not built; make bench-tfjob builds it from its "
            "Go module, minutes cold"
        )
    if skip_tfjob:
        print(f"quick: skipping the TFJob side, KerasJobs only: {skip_tfjob}", flush=True)
    audit_log = args.audit_log
    if current:
        audit_log = None  # not ours to know where (nothing counted)
    elif audit_log is None:
        audit_log = DEFAULT_AUDIT_LOG
        os.environ.setdefault(
            "APISERVER_EXTRA_ARGS",
            f"--audit-policy-file={AUDIT_POLICY} --audit-log-path={audit_log}",
        )
    flavors = {"kerasjob": KerasJobs, "tfjob": TFJobs}
    order = [flavors[o.strip()] for o in args.order.split(",")]
    if sorted(f.name for f in order) != sorted(flavors):
        parser.error("--order names both kerasjob and tfjob, once each")
    if skip_tfjob:
        order = [f for f in order if f is not TFJobs]

    stamp = benchrun.stamp()
    started = time.monotonic()
    size0 = audit_log.stat().st_size if audit_log and audit_log.exists() else -1
    cluster = support.current_cluster() if current else support.acquire_local()
    try:
        kube = cluster.api_client()
        install_crds(cluster)  # writes: the log grows if the API server keeps it
        time.sleep(1)
        if audit_log is not None and (not audit_log.exists() or audit_log.stat().st_size <= size0):
            print(
                f"warning: the API server writes no audit log at {audit_log} (a cluster "
                "already up without one?): API writes not counted",
                file=sys.stderr,
                flush=True,
            )
            audit_log = None
        results: dict[str, Any] = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "loadavg_start": os.getloadavg(),
            },
            "quick": args.quick,
            "tfjob_skipped": skip_tfjob or None,
            "jobs": args.jobs,
            "workers_per_job": WORKERS,
            "runs": {},
        }
        for flavor in order:
            print(f"{flavor.name}: {args.jobs} jobs x {WORKERS} workers ...", flush=True)
            res = run(cluster, kube, flavor, args.jobs, audit_log)
            results["runs"][flavor.name] = res
            print(
                f"{flavor.name}: {'complete' if res['complete'] else 'INCOMPLETE'}, "
                f"window {res['window_s']} s, load before {res['loadavg_1m_before']:.1f}",
                flush=True,
            )
    finally:
        if not current:
            support.release_local()
    runs = results["runs"]
    text, ratios = table(runs["kerasjob"], runs.get("tfjob", {}))
    print(
        f"\n{args.jobs} concurrent {WORKERS}-worker jobs per operator"
        f"{' (TFJob side skipped)' if skip_tfjob else ''}:\n{text}"
    )
    for name, res in results["runs"].items():
        if "api_writes_by_kind_per_job" in res:
            print(
                f"{name} writes per job: {res['api_writes_by_kind_per_job']}; "
                f"not 2xx: {res['api_writes_failed_per_job'] or 'none'}"
            )
    results["ratios_ours_over_theirs"] = ratios
    results["duration_s"] = round(time.monotonic() - started, 1)
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["run"] = benchrun.finish(stamp, started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out} ({results['duration_s']} s)")
    return 0 if all(r["complete"] for r in results["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
