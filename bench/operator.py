"""Operator benchmarks on the local control plane with fake KWOK nodes.

    python bench/operator.py          # (make bench): prints figures, writes
                                      # bench/results/operator.json
    python bench/operator.py --quick  # 1 and 10 jobs, 3 disruptions: checks that it runs

The operator runs as a real subprocess (`python -m kerasjob run`), as in the tests. Figures:
- apply -> all Pods created: for 1, 10 and 100 concurrent 4-worker KerasJobs, the time from
  the create call of a job to the last of its 4 Pods appearing in a Pod watch (median, p99);
  also apply -> phase Running (KWOK marks Pods Ready);
- disruption -> replacement: delete a worker Pod, time until the watch sees the new Pod of
  the same name (median, p99 over several deletions);
- per Pod, created -> bound to a node -> Running, and the burst's Pods created and bound per
  second: where a Pod's wait between the operator and the node goes;
- API requests per job: counted by the operator's own client (its probe endpoint), by verb
  and resource; kopf's watch streams are per resource kind, not per job, and not counted;
- operator peak RSS (VmHWM) at the end.
``KERASJOB_TEST_CLUSTER=current`` benchmarks the cluster of KUBECONFIG instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kerasjob_dev import benchrun
from kerasjob_dev import cluster as support
from kerasjob_dev.harness import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    core,
    custom,
    install_crds,
    job_manifest,
)
from kerasjob_dev.procstat import cpu_seconds, peak_rss_mib

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "operator.json"
WORKERS = 4


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median_s": round(statistics.median(values), 4) if values else float("nan"),
        "p99_s": round(pct(values, 99), 4),
        "max_s": round(max(values), 4) if values else float("nan"),
    }


class PodWatch:
    """Records when each Pod (name, uid) was first seen, first seen bound to a node and first
    seen Running, and when each job phase was first seen."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.pod_added: dict[tuple[str, str], float] = {}
        self.pod_bound: dict[tuple[str, str], float] = {}
        self.pod_running: dict[tuple[str, str], float] = {}
        self.job_phase: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._pods, daemon=True),
            threading.Thread(target=self._jobs, daemon=True),
        ]
        self.cond = threading.Condition()

    def start(self) -> PodWatch:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _pods(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(
                    core(self.kube).list_namespaced_pod, self.namespace, timeout_seconds=5
                ):
                    pod = ev["object"]
                    key = (pod.metadata.name, pod.metadata.uid)
                    now = time.monotonic()
                    with self.cond:
                        self.pod_added.setdefault(key, now)
                        if pod.spec.node_name:
                            self.pod_bound.setdefault(key, now)
                        if pod.status and pod.status.phase == "Running":
                            self.pod_running.setdefault(key, now)
                        self.cond.notify_all()
                    if self._stop.is_set():
                        break
            except Exception:
                time.sleep(0.1)

    def _jobs(self) -> None:
        from kubernetes import watch

        api = custom(self.kube)
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(
                    api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    timeout_seconds=5,
                ):
                    obj = ev["object"]
                    phase = (obj.get("status") or {}).get("phase")
                    if phase:
                        with self.cond:
                            self.job_phase.setdefault(
                                (obj["metadata"]["name"], phase), time.monotonic()
                            )
                            self.cond.notify_all()
                    if self._stop.is_set():
                        break
            except Exception:
                time.sleep(0.1)

    def wait(self, predicate: Any, timeout: float) -> bool:
        return support.wait_notified(self.cond, predicate, timeout)


def pods_of(watch: PodWatch, job: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, _uid), t in list(watch.pod_added.items()):
        if name.rsplit("-", 2)[0] == job:
            out[name] = min(t, out.get(name, t))
    return out


def pod_lifecycle(watch: PodWatch, jobs: set[str]) -> dict[str, Any]:
    """Where a Pod's time from created to Running goes: created -> bound to a node (the
    scheduler's queue and its binding calls) and bound -> Running (KWOK's status write), and
    the rates at which the burst's Pods were created and bound (Pods/s, first to last)."""
    keys = [k for k in watch.pod_added if k[0].rsplit("-", 2)[0] in jobs]
    bound = [k for k in keys if k in watch.pod_bound]
    running = [k for k in bound if k in watch.pod_running]

    def rate(times: list[float]) -> float:
        span = max(times) - min(times) if len(times) > 1 else 0.0
        return round(len(times) / span, 1) if span > 0 else float("nan")

    return {
        "pod_created_to_bound": summary([watch.pod_bound[k] - watch.pod_added[k] for k in bound]),
        "pod_bound_to_running": summary(
            [watch.pod_running[k] - watch.pod_bound[k] for k in running]
        ),
        "pods_created_per_s": rate([watch.pod_added[k] for k in keys]),
        "pods_bound_per_s": rate([watch.pod_bound[k] for k in bound]),
    }


def burst(kube: Any, op: OperatorProcess, namespace: str, n: int, tag: str) -> dict[str, Any]:
    """Create n jobs at once; time apply -> all Pods created, apply -> Running."""
    watch = PodWatch(kube, namespace).start()
    # A warm-up job first: the operator watches a namespace glob and only starts watching a
    # new namespace when it sees it; that one-off delay is not what is measured here.
    body = job_manifest("warmup", workers=1)
    custom(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    watch.wait(lambda: any(n == "warmup-worker-0" for n, _ in watch.pod_added), timeout=60)
    time.sleep(0.5)
    before = Counter(op.api_requests())
    cpu_before = cpu_seconds(op.proc.pid if op.proc else None)
    load_before = os.getloadavg()[0]
    applied: dict[str, float] = {}

    def create(i: int) -> None:
        name = f"{tag}-{i}"
        body = job_manifest(name, workers=WORKERS)
        applied[name] = time.monotonic()
        custom(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    with ThreadPoolExecutor(max_workers=min(n, 16)) as pool:
        list(pool.map(create, range(n)))

    def all_created() -> bool:
        return all(len(pods_of(watch, j)) == WORKERS for j in applied)

    def all_running() -> bool:
        return all((j, "Running") in watch.job_phase for j in applied)

    ok = watch.wait(all_created, timeout=60 + 2 * n)
    ok_running = watch.wait(all_running, timeout=60 + 2 * n)
    created = [
        max(pods_of(watch, j).values()) - t
        for j, t in applied.items()
        if len(pods_of(watch, j)) == WORKERS
    ]
    running = [
        watch.job_phase[(j, "Running")] - t
        for j, t in applied.items()
        if (j, "Running") in watch.job_phase
    ]
    time.sleep(1.0)  # let the status writes of the Running transition land
    lifecycle = pod_lifecycle(watch, set(applied))
    after = Counter(op.api_requests())
    cpu = cpu_seconds(op.proc.pid if op.proc else None) - cpu_before
    watch.stop()
    delta = after - before
    return {
        "jobs": n,
        "operator_cpu_seconds_per_job": round(cpu / n, 4),
        "loadavg_1m_before": load_before,
        "complete": ok and ok_running,
        "apply_to_pods_created": summary(created),
        "apply_to_running": summary(running),
        **lifecycle,
        "api_requests_per_job": round(sum(delta.values()) / n, 2),
        "api_requests_by_kind_per_job": {k: round(v / n, 2) for k, v in sorted(delta.items())},
    }


def disruptions(kube: Any, namespace: str, job: str, rounds: int) -> dict[str, Any]:
    watch = PodWatch(kube, namespace).start()
    time.sleep(0.5)
    times: list[float] = []
    for r in range(rounds):
        name = f"{job}-worker-{r % WORKERS}"
        old = core(kube).read_namespaced_pod(name, namespace).metadata.uid
        t0 = time.monotonic()
        core(kube).delete_namespaced_pod(name, namespace)

        def new_pods(name: str = name, old: str = old, t0: float = t0) -> list[float]:
            return [
                t
                for (n, u), t in list(watch.pod_added.items())
                if n == name and u != old and t >= t0
            ]

        if watch.wait(new_pods, timeout=30):
            times.append(min(new_pods()) - t0)
        # Wait for Running again before the next disruption.
        support.wait_for(
            lambda: (
                (
                    custom(kube)
                    .get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
                    .get("status")
                    or {}
                ).get("phase")
                == "Running"
            ),
            timeout=30,
            what="Running again",
        )
    watch.stop()
    return {"rounds": rounds, "disruption_to_replacement_created": summary(times)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 and 10 jobs, 3 disruptions: checks that it runs"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    if support.wants_current_cluster():
        cluster = support.current_cluster()
    else:
        cluster = support.acquire_local()
    kube = cluster.api_client()
    install_crds(cluster)
    sizes = [1, 10] if args.quick else [1, 10, 100]
    stamp = benchrun.stamp()
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": os.getloadavg(),
        },
        "quick": args.quick,
        "workers_per_job": WORKERS,
        "bursts": [],
    }
    run_id = f"bench{os.getpid() % 100000}"
    op = OperatorProcess(
        cluster, (f"{run_id}-*",), name="bench", extra_args=("--progress-interval", "0")
    )
    op.start()
    started = time.monotonic()
    try:
        for n in sizes:
            ns = support.create_namespace(kube, prefix=run_id)
            try:
                res = burst(kube, op, ns, n, tag=f"b{n}")
                results["bursts"].append(res)
                c, r = res["apply_to_pods_created"], res["apply_to_running"]
                print(
                    f"{n:4d} jobs x {WORKERS} workers: apply->pods created median "
                    f"{c['median_s']:.3f}s p99 {c['p99_s']:.3f}s | apply->Running median "
                    f"{r['median_s']:.3f}s p99 {r['p99_s']:.3f}s | "
                    f"{res['api_requests_per_job']} API requests/job | "
                    f"operator CPU {1000 * res['operator_cpu_seconds_per_job']:.0f} ms/job "
                    f"(load {res['loadavg_1m_before']:.1f})",
                    flush=True,
                )
                b, rn = res["pod_created_to_bound"], res["pod_bound_to_running"]
                print(
                    f"{'':4s} per Pod: created->bound median {b['median_s']:.3f}s p99 "
                    f"{b['p99_s']:.3f}s | bound->Running median {rn['median_s']:.3f}s | Pods "
                    f"created {res['pods_created_per_s']}/s, bound {res['pods_bound_per_s']}/s",
                    flush=True,
                )
                if n == 1:
                    d = disruptions(kube, ns, "b1-0", rounds=3 if args.quick else 8)
                    results["disruption"] = d
                    s = d["disruption_to_replacement_created"]
                    print(
                        f"disruption -> replacement Pod created: median {s['median_s']:.3f}s "
                        f"p99 {s['p99_s']:.3f}s over {s['n']} deletions",
                        flush=True,
                    )
            finally:
                support.delete_namespace_and_wait(kube, ns)
        assert op.proc is not None
        results["operator_peak_rss_mib"] = peak_rss_mib(op.proc.pid)
        results["operator_api_requests_total"] = op.api_requests()
        print(f"operator peak RSS: {results['operator_peak_rss_mib']} MiB", flush=True)
    finally:
        op.stop()
        if not support.wants_current_cluster():
            support.release_local()
    results["duration_s"] = round(time.monotonic() - started, 1)
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["run"] = benchrun.finish(stamp, started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out} ({results['duration_s']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
