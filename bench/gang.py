"""Gang scheduling at KWOK scale: N KerasJobs x W workers competing for room for a few.

    python bench/gang.py                          # 50 jobs x 8 workers, room for 3; on, off
    python bench/gang.py --jobs 100 --modes on    # other sizes, one mode
    python bench/gang.py --quick                  # 6 jobs, a mode at most 30 s: runs?

Each worker asks for one ``kerasjob.dev/gang-slot`` (an extended resource patched onto the
local cluster's KWOK nodes, `--slots` per node: 4 x 6 = 24, three 8-worker jobs). For each
mode, one fresh operator process on its own namespace (``--gang-scheduling`` on, or off),
all jobs created at once, and each job finished (every Pod exits 0, as a kubelet writes it)
as soon as it runs (`kerasjob_dev.gangs.run_competing`). Recorded per mode: seconds until
every job Succeeded (or how many did within ``--timeout``), job created -> all its Pods
bound (median, 90th percentile, max), places freed -> the next gang bound (polled, ~1 s),
the largest spread of one job's binds, the jobs left with part of their Pods bound, the
operator's API requests (by kind) and CPU seconds. Prints a line per mode, writes
bench/results/gang.json.

Without gangs the scheduler binds Pods one by one: jobs end up holding part of the room each,
waiting for the rest (the deadlock the gang prevents); the "off" run shows how many.
The control plane shares this machine's cores: the times include its work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kerasjob_dev import benchrun
from kerasjob_dev import cluster as support
from kerasjob_dev.gangs import kwok_nodes, run_competing, set_slots
from kerasjob_dev.harness import OperatorProcess, install_crds
from kerasjob_dev.procstat import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "gang.json"


def p90(values: list[float]) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def mode(cluster: Any, kube: Any, gang: bool, args: argparse.Namespace) -> dict[str, Any]:
    ns = support.create_namespace(kube, prefix=f"gangbench{'on' if gang else 'off'}")
    extra = ("--gang-scheduling",) if gang else ()
    op = OperatorProcess(cluster, (ns,), name=f"gangbench-{ns}", extra_args=extra)
    try:
        op.start()
        assert op.proc is not None
        got = run_competing(kube, ns, args.jobs, args.workers, timeout=args.timeout, strict=gang)
        got["operator_api_requests"] = op.api_requests()
        got["operator_cpu_seconds"] = round(cpu_seconds(op.proc.pid), 1)
    finally:
        op.stop()
        support.delete_namespace(kube, ns)
    waits = got["bound_seconds"]
    got.update(gang=gang, bound_p90_seconds=p90(waits))
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--slots", type=int, default=6, help="gang slots per KWOK node (6)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="seconds a mode may take (600; the 'off' mode may never finish)",
    )
    parser.add_argument("--modes", nargs="+", choices=["on", "off"], default=["on", "off"])
    parser.add_argument(
        "--quick", action="store_true", help="6 jobs, a mode at most 30 s: checks that it runs"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.timeout = 6, 30.0  # 'off' never finishes: it waits the timeout
    cluster = (
        support.current_cluster() if support.wants_current_cluster() else support.acquire_local()
    )
    kube = cluster.api_client()
    install_crds(cluster)
    nodes = kwok_nodes(kube)
    stamp = benchrun.stamp()
    started = time.monotonic()
    runs = []
    try:
        set_slots(kube, nodes, args.slots)
        for m in args.modes:
            res = mode(cluster, kube, m == "on", args)
            runs.append(res)
            total = res["total_seconds"]
            done = (
                f"all Succeeded in {total:.1f} s"
                if total is not None
                else (
                    f"{res['succeeded']}/{res['jobs']} Succeeded in {args.timeout:.0f} s, "
                    f"{len(res['partly_bound_jobs'])} jobs holding part of their Pods' places"
                )
            )
            bound = (
                f"created -> all Pods bound median {res['bound_median_seconds']:.1f} s, "
                f"p90 {res['bound_p90_seconds']:.1f} s, max {res['bound_max_seconds']:.1f} s, "
                f"one job's binds within {res['bind_spread_max_seconds']:.0f} s, "
                f"places freed -> next gang bound median "
                f"{res['freed_to_next_bound_median_seconds']} s"
                if res["bound_seconds"]
                else "no job had all its Pods bound"
            )
            print(
                f"gang {m:3}: {args.jobs} jobs x {args.workers} workers, "
                f"{args.slots * len(nodes)} places: {done}; {bound}; operator CPU "
                f"{res['operator_cpu_seconds']} s",
                flush=True,
            )
    finally:
        set_slots(kube, nodes, None)
        if not support.wants_current_cluster():
            support.release_local()
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_end": os.getloadavg(),
        },
        "quick": args.quick,
        "nodes": len(nodes),
        "slots_per_node": args.slots,
        "runs": runs,
        "duration_s": round(time.monotonic() - started, 1),
    }
    results["run"] = benchrun.finish(stamp, started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {args.out} ({results['duration_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
