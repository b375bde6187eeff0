"""Scale: N KerasJobs x 8 workers on fake KWOK nodes, through a whole life at once.

    python bench/scale.py                    # (make bench-scale): 10, 100 and 1000 jobs
    python bench/scale.py --jobs 10 100      # chosen levels
    python bench/scale.py --quick            # one level of 5 jobs: checks that it runs

For each level, one fresh operator process (`python -m kerasjob run`, as in the tests) and:
1. create: all N jobs created at once (16 client threads) -> every job Running (all 8 Pods
   scheduled and Ready on KWOK nodes);
2. disrupt: one worker Pod of every job deleted -> every job Running again with exactly one
   disruption counted; the survivors keep their Pods (their trainers restart in place, inside
   the container's supervisor, which on KWOK is nothing to do), so one Pod is created per job;
2b. disrupt, survivors exit: one worker Pod of every job deleted again, and the 7 others end
   with exit 42 (the status their kubelet writes when trainers run without the supervisor, or
   with KERASJOB_IN_PLACE_RESTARTS=0: every Pod of the group re-created, the design before
   in-place restarts) -> every job Running again; 8 Pods created per job. Each exit is
   counted as a disruption of its own there (8 per job): the counting stays exact only with
   the supervisor;
3. finish: every chief (worker 0) exits 0 (the Pod status a kubelet writes) -> every job
   Succeeded, its other Pods cleaned up;
4. delete: every job deleted -> all their Pods gone (garbage collection).
Recorded per level: the seconds of each phase, the operator's peak RSS (VmHWM), its CPU
seconds (in all and per job), its API requests (in all and per job, by kind). Prints a line
per level, writes bench/results/scale.json and a plot, bench/results/scale.svg.

Fake nodes: KWOK marks Pods Running at once; extra KWOK nodes (1000 Pods each) are added
for the level and removed afterwards.

Witness: a watch on the level's Pods and on the Nodes counts, per job, the Pods created and
the Pods that went away during each phase (the disrupt phase deletes one; more means someone
else deleted replacements) and every Node Ready change (a KWOK node whose lease lapses under
load goes NotReady, and its Pods are evicted once their not-ready/unreachable toleration runs
out). Both are in the JSON, and printed when a phase does not converge. Found this way: KWOK's
own pod-delete stage DELETEd the old Pod by name after a grace-0 delete, when the operator
had already created its replacement of the same name (5 of 10 jobs in one audit log; an
earlier 1000-job run's 88 jobs that lost 3-4 Pods fit it); hack/cluster/kwok-stages.yaml now
leaves grace-0 deletions to the API server, and every level converges.

Reading the figures: delete->gone is kube-controller-manager's garbage collector (about
16 Pods/s here at its default client QPS 20; at 10 jobs also up to 30 s until it first syncs
a freshly installed CRD), not the operator, which adds no finalizer.

Who deleted Pods: start the cluster with an audit log, e.g.
APISERVER_EXTRA_ARGS="--audit-policy-file=$PWD/bench/audit-pod-deletes.yaml
--audit-log-path=$PWD/.run/audit.log" (the policy records Pod deletions and evictions
only, with their user) and pass --audit-log .run/audit.log (bench/audit_summary.py prints
the level's deletions by user when a phase times out). The control plane shares this
machine's cores with the operator: the times include the API server's, etcd's, the
scheduler's and KWOK's work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch

import audit_summary
from kerasjob_dev import benchrun
from kerasjob_dev import cluster as support
from kerasjob_dev.harness import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    core,
    custom,
    exit_pod,
    install_crds,
    job_manifest,
)
from kerasjob_dev.procstat import cpu_seconds, peak_rss_mib

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "scale.json"
PLOT = RESULTS.with_suffix(".svg")
WORKERS = 8
PODS_PER_NODE = 1000
THREADS = 16


def kwok_nodes(kube: Any, names: list[str]) -> None:
    for name in names:
        core(kube).create_node(
            {
                "metadata": {
                    "name": name,
                    "labels": {"type": "kwok", "kubernetes.io/hostname": name},
                    "annotations": {
                        "kwok.x-k8s.io/node": "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                },
                "spec": {
                    "taints": [
                        {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
                    ]
                },
                "status": {
                    "capacity": {"cpu": "1000", "memory": "4Ti", "pods": str(PODS_PER_NODE)},
                    "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": str(PODS_PER_NODE)},
                },
            }
        )


def statuses(kube: Any, ns: str) -> dict[str, dict[str, Any]]:
    items = custom(kube).list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
    return {j["metadata"]["name"]: j.get("status") or {} for j in items}


def all_running(kube: Any, ns: str, *, disruptions: int) -> bool:
    """Every job Running, with this many disruptions counted and no failure."""
    return all(
        s.get("phase") == "Running"
        and s.get("restarts") == {"disruptions": disruptions, "failures": 0}
        for s in statuses(kube, ns).values()
    )


def delete_worker(kube: Any, ns: str, job: str) -> None:
    """Worker 1 of ``job`` deleted with grace period 0, as a kubelet finishes a deletion."""
    pod = core(kube).read_namespaced_pod(f"{job}-worker-1", ns)
    core(kube).delete_namespaced_pod(
        pod.metadata.name,
        ns,
        body=client.V1DeleteOptions(
            grace_period_seconds=0,
            preconditions=client.V1Preconditions(uid=pod.metadata.uid),
        ),
    )


def pod_count(kube: Any, ns: str) -> int:
    # Names only would be cheaper; the Python client has no metadata-only list.
    return len(core(kube).list_namespaced_pod(ns, _preload_content=False).json()["items"])


def wait(what: str, done: Any, timeout: float, interval: float = 1.0) -> float:
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(interval)
    return round(time.monotonic() - start, 1)


def parallel(fn: Any, items: list[Any]) -> None:
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(fn, items))


class Witness:
    """Pods of one namespace that go away (per job, per phase) and Node Ready changes."""

    def __init__(self, kube: Any, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.phase = "create"
        self.gone: dict[str, Counter[str]] = defaultdict(Counter)  # phase -> job -> Pods
        self.created: dict[str, Counter[str]] = defaultdict(Counter)  # phase -> job -> Pods
        self.seen: set[str] = set()  # Pod UIDs (a watch started again lists them again)
        self.nodes: list[dict[str, Any]] = []  # Ready changes, with seconds since start
        self.start = time.monotonic()
        self.stopping = threading.Event()
        for fn in (self._pods, self._nodes):
            threading.Thread(target=self._forever, args=(fn,), daemon=True).start()

    def _forever(self, fn: Any) -> None:
        while not self.stopping.is_set():
            try:
                fn()
            except Exception:  # a watch that broke is started again
                time.sleep(1)

    def _pods(self) -> None:
        w = watch.Watch()
        for ev in w.stream(core(self.kube).list_namespaced_pod, self.ns, timeout_seconds=3600):
            meta = ev["object"].metadata
            job = meta.name.rsplit("-", 2)[0]
            if ev["type"] == "DELETED":
                self.gone[self.phase][job] += 1
            elif meta.uid not in self.seen:
                self.seen.add(meta.uid)
                self.created[self.phase][job] += 1
            if self.stopping.is_set():
                return

    def _nodes(self) -> None:
        ready: dict[str, str] = {}
        w = watch.Watch()
        for ev in w.stream(core(self.kube).list_node, timeout_seconds=3600):
            node = ev["object"]
            status = next(
                (c.status for c in node.status.conditions or [] if c.type == "Ready"), "Unknown"
            )
            if ready.get(node.metadata.name, status) != status:
                self.nodes.append(
                    {
                        "node": node.metadata.name,
                        "ready": status,
                        "at_s": round(time.monotonic() - self.start, 1),
                    }
                )
            ready[node.metadata.name] = status
            if self.stopping.is_set():
                return

    def summary(self) -> dict[str, Any]:
        """Per phase: how many jobs lost and got how many Pods ({pods: jobs}), the Pods
        created in all; Node changes."""

        def per_job(counts: dict[str, Counter[str]]) -> dict[str, dict[int, int]]:
            return {
                phase: dict(sorted(Counter(jobs.values()).items()))
                for phase, jobs in counts.items()
            }

        return {
            "pods_gone_per_job": per_job(self.gone),
            "pods_created_per_job": per_job(self.created),
            "pods_created": {phase: sum(jobs.values()) for phase, jobs in self.created.items()},
            "node_ready_changes": self.nodes,
        }

    def stop(self) -> None:
        self.stopping.set()


def level(
    cluster: Any, kube: Any, n: int, run_id: str, audit_log: Path | None = None
) -> dict[str, Any]:
    ns = support.create_namespace(kube, prefix=run_id)
    extra = [f"kwok-scale-{run_id}-{i}" for i in range(-(-n * WORKERS // PODS_PER_NODE))]
    kwok_nodes(kube, extra)
    op = OperatorProcess(cluster, (ns,), name=f"scale{n}", extra_args=("--progress-interval", "0"))
    op.start()
    assert op.proc is not None
    pid = op.proc.pid
    names = [f"j{i}" for i in range(n)]
    timeout = 120 + 2.0 * n
    phases: dict[str, float] = {}
    cpu0 = cpu_seconds(pid)
    witness = Witness(kube, ns)
    try:
        # 1. create
        parallel(
            lambda name: custom(kube).create_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, job_manifest(name, workers=WORKERS, backoffLimit=10)
            ),
            names,
        )
        phases["create_to_all_running_s"] = wait(
            "all Running",
            lambda: (
                all(s.get("phase") == "Running" for s in statuses(kube, ns).values())
                and len(statuses(kube, ns)) == n
            ),
            timeout,
        )

        # 2. disrupt: one worker per job, deleted as a kubelet finishes a deletion; the
        # survivors restart in place (on KWOK: nothing happens to their Pods)
        witness.phase = "disrupt"
        parallel(lambda name: delete_worker(kube, ns, name), names)
        phases["disrupt_to_all_running_s"] = wait(
            "all Running again, one disruption",
            lambda: all_running(kube, ns, disruptions=1),
            timeout,
        )

        # 2b. again, and the survivors' containers exit 42 (no supervisor): all re-created,
        # one disruption (the survivors' exits are the deletion's consequence)
        def disrupt_all(name: str) -> None:
            delete_worker(kube, ns, name)
            for i in range(WORKERS):
                if i != 1:
                    exit_pod(kube, ns, f"{name}-worker-{i}", 42)

        witness.phase = "disrupt_survivors_exit"
        parallel(disrupt_all, names)
        phases["disrupt_survivors_exit_to_all_running_s"] = wait(
            "all Running again, every Pod re-created",
            lambda: all_running(kube, ns, disruptions=2),
            timeout,
        )

        # 3. finish: every chief (worker 0) exits 0
        witness.phase = "finish"
        parallel(lambda name: exit_pod(kube, ns, f"{name}-worker-0", 0), names)
        phases["finish_to_all_succeeded_s"] = wait(
            "all Succeeded",
            lambda: all(s.get("phase") == "Succeeded" for s in statuses(kube, ns).values()),
            timeout,
        )

        # 4. delete
        witness.phase = "delete"
        parallel(
            lambda name: custom(kube).delete_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name, propagation_policy="Background"
            ),
            names,
        )
        phases["delete_to_all_pods_gone_s"] = wait(
            "all Pods gone", lambda: pod_count(kube, ns) == 0, timeout, interval=2.0
        )
        requests = Counter(op.api_requests())
        reconciles = op.metrics().get("kerasjob_operator_reconciles_total", float("nan"))
        cpu = cpu_seconds(pid) - cpu0
        rss = peak_rss_mib(pid)
        restarts_seen = op.starts
    except TimeoutError:
        print(f"{n} jobs: {json.dumps(witness.summary())}", file=sys.stderr, flush=True)
        shown = Counter(
            json.dumps([s.get("phase"), s.get("restarts"), s.get("lastRestart")], sort_keys=True)
            for s in statuses(kube, ns).values()
        )
        for status, jobs in shown.most_common(5):
            print(f"{n} jobs: {jobs} with status {status}", file=sys.stderr, flush=True)
        if audit_log is not None and audit_log.exists():
            with audit_log.open() as f:
                for row in audit_summary.summarize(f, ns):
                    print(f"{n} jobs, audit: {json.dumps(row)}", file=sys.stderr, flush=True)
        raise
    finally:
        witness.stop()
        op.stop()
        for node in extra:
            core(kube).delete_node(node)
        support.delete_namespace(kube, ns)
    total = sum(requests.values())
    return {
        "jobs": n,
        "workers_per_job": WORKERS,
        **phases,
        "operator_peak_rss_mib": rss,
        "operator_cpu_seconds": round(cpu, 2),
        "operator_cpu_seconds_per_job": round(cpu / n, 4),
        "reconciles_per_job": round(reconciles / n, 1),
        "api_requests": total,
        "api_requests_per_job": round(total / n, 2),
        "api_requests_per_job_by_kind": {k: round(v / n, 2) for k, v in sorted(requests.items())},
        "operator_starts": restarts_seen,
        **witness.summary(),
    }


def plot(levels: list[dict[str, Any]], path: Path) -> None:
    """A small SVG: per level, the operator's peak RSS and CPU per job, and each phase's
    seconds, on log-scaled job counts. (Hand-written: no plotting library needed.)"""
    series = {
        "peak RSS (MiB)": [lv["operator_peak_rss_mib"] for lv in levels],
        "CPU ms/job": [1000 * lv["operator_cpu_seconds_per_job"] for lv in levels],
        "API requests/job": [lv["api_requests_per_job"] for lv in levels],
        "create->Running (s)": [lv["create_to_all_running_s"] for lv in levels],
        "disrupt->Running (s)": [lv["disrupt_to_all_running_s"] for lv in levels],
        "disrupt, survivors exit (s)": [
            lv["disrupt_survivors_exit_to_all_running_s"] for lv in levels
        ],
    }
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    w, h, pad = 640, 360, 50
    xs = [lv["jobs"] for lv in levels]
    import math

    def x(v: float) -> float:
        lo, hi = math.log10(min(xs)), math.log10(max(xs))
        return pad + (w - 2 * pad) * ((math.log10(v) - lo) / ((hi - lo) or 1))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{pad}" y="20" font-size="13">kerasjob operator at scale '
        f"({WORKERS} workers per job; each series scaled to its own maximum)</text>",
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
    ]
    for v in xs:
        out.append(f'<text x="{x(v):.0f}" y="{h - pad + 15}" text-anchor="middle">{v} jobs</text>')
    for k, (label, values) in enumerate(series.items()):
        top = max(values) or 1
        pts = [
            (x(xv), h - pad - (h - 2 * pad - 20) * (yv / top))
            for xv, yv in zip(xs, values, strict=True)
        ]
        out.append(
            f'<polyline fill="none" stroke="{colors[k]}" stroke-width="2" points="'
            + " ".join(f"{a:.0f},{b:.0f}" for a, b in pts)
            + '"/>'
        )
        for (a, b), yv in zip(pts, values, strict=True):
            out.append(f'<text x="{a + 4:.0f}" y="{b - 4:.0f}" fill="{colors[k]}">{yv:g}</text>')
        out.append(f'<text x="{w - pad - 150}" y="{40 + 14 * k}" fill="{colors[k]}">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", type=int, nargs="+", default=None, help="levels (default 10 100 1000; --quick: 5)"
    )
    parser.add_argument("--quick", action="store_true", help="one level of 5 jobs")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="the JSON; the plot goes next to it (.svg)"
    )
    parser.add_argument(
        "--audit-log",
        type=Path,
        help="the API server's audit log: who deleted Pods, printed when a phase does not converge",
    )
    args = parser.parse_args()
    if args.jobs is None:
        args.jobs = [5] if args.quick else [10, 100, 1000]
    plot_path = args.out.with_suffix(".svg")
    cluster = (
        support.current_cluster() if support.wants_current_cluster() else support.acquire_local()
    )
    kube = cluster.api_client()
    install_crds(cluster)
    run_id = f"scale{os.getpid() % 100000}"
    stamp = benchrun.stamp()
    started = time.monotonic()
    levels = []
    try:
        for n in args.jobs:
            res = level(cluster, kube, n, run_id, args.audit_log)
            levels.append(res)
            print(
                f"{n:5d} jobs x {WORKERS}: create->Running {res['create_to_all_running_s']} s, "
                f"disrupt->Running {res['disrupt_to_all_running_s']} s "
                f"({res['pods_created'].get('disrupt', 0)} Pods created), survivors exiting "
                f"{res['disrupt_survivors_exit_to_all_running_s']} s "
                f"({res['pods_created'].get('disrupt_survivors_exit', 0)} Pods), finish->Succeeded "
                f"{res['finish_to_all_succeeded_s']} s, delete->gone "
                f"{res['delete_to_all_pods_gone_s']} s | operator peak RSS "
                f"{res['operator_peak_rss_mib']} MiB, CPU "
                f"{1000 * res['operator_cpu_seconds_per_job']:.0f} ms/job, "
                f"{res['api_requests_per_job']} API requests/job, "
                f"{res['reconciles_per_job']} reconciles/job",
                flush=True,
            )
    finally:
        if not support.wants_current_cluster():
            support.release_local()
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_end": os.getloadavg(),
        },
        "quick": args.quick,
        "levels": levels,
        "duration_s": round(time.monotonic() - started, 1),
    }
    results["run"] = benchrun.finish(stamp, started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    wrote = [str(args.out)]
    if len(levels) > 1:
        plot(levels, plot_path)
        wrote.append(str(plot_path))
    print(f"wrote {' and '.join(wrote)} ({results['duration_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
