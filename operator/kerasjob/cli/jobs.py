"""The job commands of `kerasjob`: submit, get, describe, logs, wait, suspend, resume, delete,
status, convert. Thin glue over `kerasjob.sdk`; parsing and errors are in `kerasjob.cli.app`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO

import yaml

from kerasjob.api import KerasJob, Phase
from kerasjob.planner import goodput
from kerasjob.sdk import KerasJobClient, load_job, summarize
from kerasjob.sdk.errors import InvalidError, NotFoundError
from kerasjob.sdk.summary import JobSummary, checkpoint_where
from kerasjob_contract.times import format_time

RESOURCE = "kerasjob.kerasjob.dev"


def client(args: argparse.Namespace) -> KerasJobClient:
    return KerasJobClient(
        getattr(args, "namespace_single", None), kubeconfig=args.kubeconfig, context=args.context
    )


def _dump(obj: Any, fmt: str, out: TextIO | None = None) -> None:
    out = out or sys.stdout  # at call time: a default bound at import misses redirections
    if fmt == "json":
        print(json.dumps(obj, indent=2), file=out)
    else:
        print(yaml.safe_dump(obj, sort_keys=False).rstrip(), file=out)


def _manifest(job: KerasJob) -> dict[str, Any]:
    out = job.to_manifest()
    out.get("metadata", {}).pop("managedFields", None)  # as kubectl without --show-managed
    return out


def progress_line(s: JobSummary) -> str:
    """One line while waiting: phase, progress, restarts."""
    parts = [s.name, s.phase or "Pending"]
    if s.step is not None:
        parts.append(f"epoch {s.epoch if s.epoch is not None else '?'}")
        parts.append(s.progress)
    parts.append(
        f"restarts {s.disruptions + s.failures} "
        f"({s.disruptions} disruptions, {s.failures} failures)"
    )
    return "  ".join(parts)


class ProgressPrinter:
    """The live line: rewritten in place on a terminal, a new line per change otherwise."""

    def __init__(self, out: TextIO | None = None) -> None:
        out = out or sys.stderr  # at call time (see _dump)
        self.out = out
        self.tty = out.isatty()
        self.last = ""

    def __call__(self, job: KerasJob) -> None:
        line = progress_line(summarize(job))
        if line == self.last:
            return
        self.last = line
        if self.tty:
            self.out.write("\r\x1b[K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.tty and self.last:
            self.out.write("\n")
            self.out.flush()


def _wait(
    c: KerasJobClient, name: str, until: Iterable[str], timeout: float, quiet: bool
) -> KerasJob:
    printer = None if quiet else ProgressPrinter()
    try:
        return c.wait(name, until=list(until), timeout=timeout, callback=printer)
    finally:
        if printer:
            printer.close()


def submit(args: argparse.Namespace) -> int:
    c = client(args)
    created = []
    for path in args.filename:
        job = c.create(path, namespace=args.namespace_single, dry_run=args.dry_run)
        created.append(job)
        if args.output in ("json", "yaml"):
            _dump(_manifest(job), args.output)
        elif args.output == "name":
            print(f"{RESOURCE}/{job.name}")
        else:
            suffix = " (server dry run)" if args.dry_run else ""
            print(f"{RESOURCE}/{job.name} created{suffix}")
    if args.wait and not args.dry_run:
        for job in created:
            _wait(c, job.name, ["Succeeded"], args.timeout, args.quiet)
    return 0


_COLUMNS = ("NAME", "PHASE", "WORKERS", "RESTARTS", "PROGRESS", "AGE")
_WIDE = ("DISRUPTIONS", "FAILURES", "REASON")


def table(rows: list[JobSummary], wide: bool = False, namespaces: bool = False) -> str:
    header = (("NAMESPACE",) if namespaces else ()) + _COLUMNS + (_WIDE if wide else ())
    lines = [header]
    for s in rows:
        row = ((s.namespace,) if namespaces else ()) + (
            s.name,
            s.phase or "-",
            s.size,
            str(s.disruptions + s.failures),
            s.progress,
            s.age(),
        )
        if wide:
            row += (str(s.disruptions), str(s.failures), s.reason or "-")
        lines.append(row)
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    return "\n".join(
        "   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in lines
    )


def get(args: argparse.Namespace) -> int:
    c = client(args)
    if args.names:
        jobs = [c.get(n) for n in args.names]
    else:
        jobs = c.list(all_namespaces=args.all_namespaces, label_selector=args.selector)
    if args.output in ("json", "yaml"):
        if len(args.names) == 1:
            _dump(_manifest(jobs[0]), args.output)
        else:
            _dump(
                {"apiVersion": "v1", "kind": "List", "items": [_manifest(j) for j in jobs]},
                args.output,
            )
    elif args.output == "name":
        for j in jobs:
            print(f"{RESOURCE}/{j.name}")
    elif not jobs:
        print(f"No resources found in {c.namespace} namespace.", file=sys.stderr)
    else:
        print(
            table(
                [summarize(j) for j in jobs],
                wide=args.output == "wide",
                namespaces=args.all_namespaces,
            )
        )
    return 0


def describe(args: argparse.Namespace) -> int:
    c = client(args)
    job = c.get(args.name)
    s = summarize(job)
    spec = job.spec
    st = job.status
    out = [
        f"Name:         {job.name}",
        f"Namespace:    {job.namespace}",
        f"Created:      {job.metadata.get('creationTimestamp', '-')} ({s.age()} ago)",
        f"Phase:        {s.phase or '-'}" + (f" ({s.reason}: {s.message})" if s.reason else ""),
        "Replicas:     " + ", ".join(f"{r.value} x{n}" for r, n in spec.replicas().items()),
        f"Trainer:      model {spec.trainer.model}, {spec.trainer.epochs} epochs x "
        f"{spec.trainer.steps_per_epoch} steps, batch {spec.trainer.batch_size_per_replica}"
        "/replica",
        f"Image:        {spec.image or '(template or operator default)'}",
        f"Policy:       restartPolicy {spec.restart_policy.value}, backoffLimit "
        f"{spec.backoff_limit}, cleanPodPolicy {spec.clean_pod_policy.value}, suspend "
        f"{str(spec.suspend).lower()}",
        f"Checkpoint:   {checkpoint_where(job)}",
        f"Restarts:     {s.disruptions} disruptions, {s.failures} failures",
        f"Progress:     {s.progress}",
    ]
    costs = st.progress.goodput if st and st.progress else None
    if costs is not None:
        out.append(f"Goodput:      {goodput.describe(costs.model_dump(by_alias=True))}")
    if spec.elastic is not None:
        out.append(
            f"Elastic:      {s.workers} of {spec.workers} workers (min "
            f"{spec.elastic.min_workers}), {s.resizes} resizes"
        )
        for r in (st.elastic.history if st and st.elastic else None) or []:
            out.append(
                f"  {format_time(r.time) if r.time else '-'} {r.from_workers} -> "
                f"{r.to_workers} {r.reason}: {r.message}"
            )
        if st and st.elastic and st.elastic.growth:
            out.append(f"  growing: {st.elastic.growth}")
    if st and st.last_restart and st.last_restart.reason:
        lr = st.last_restart
        out.append(f"Last restart: {lr.reason} of {lr.pod} (exit {lr.exit_code}) at {lr.time}")
    out.append("Conditions:")
    for cond in (st.conditions if st else None) or []:
        out.append(f"  {cond.type:<10} {cond.status.value:<6} {cond.reason:<24} {cond.message}")
    out.append("Pods:")
    for pod in c.pods(args.name):
        meta, pst = pod.get("metadata") or {}, pod.get("status") or {}
        out.append(
            f"  {meta.get('name', ''):<32} {pst.get('phase', '-'):<10} "
            f"{pst.get('podIP', '') or '-'}"
        )
    out.append("Events:")
    for ev in c.events(args.name)[-20:]:
        out.append(f"  {ev.get('type', ''):<8} {ev.get('reason', ''):<22} {ev.get('message', '')}")
    print("\n".join(out))
    return 0


def logs(args: argparse.Namespace) -> int:
    if args.follow and (args.previous or args.all_incarnations):
        raise SystemExit("kerasjob logs: -f cannot follow earlier incarnations")
    c = client(args)
    multi = args.all
    for line in c.logs(
        args.name,
        replica=args.replica,
        all_replicas=args.all,
        follow=args.follow,
        tail_lines=args.tail,
        previous=args.previous,
        all_incarnations=args.all_incarnations,
    ):
        print(str(line) if multi or args.prefix else line.text, flush=args.follow)
    return 0


def _until(spec: str) -> list[str]:
    # kubectl style: --for condition=Running, --for phase=Succeeded, or a bare name.
    return [part.split("=", 1)[-1] for part in spec.split(",") if part]


def wait(args: argparse.Namespace) -> int:
    c = client(args)
    job = _wait(c, args.name, _until(args.for_), args.timeout, args.quiet)
    print(f"{RESOURCE}/{job.name} {summarize(job).phase}")
    return 0


def suspend(args: argparse.Namespace) -> int:
    c = client(args)
    for name in args.names:
        c.suspend(name)
        print(f"{RESOURCE}/{name} suspended")
    return 0


def resume(args: argparse.Namespace) -> int:
    c = client(args)
    for name in args.names:
        c.resume(name)
        print(f"{RESOURCE}/{name} resumed")
    return 0


def delete(args: argparse.Namespace) -> int:
    c = client(args)
    code = 0
    for name in args.names:
        try:
            c.delete(name, wait=args.wait, timeout=args.timeout)
        except NotFoundError as e:
            if not args.ignore_not_found:
                print(f"kerasjob: {e}", file=sys.stderr)
                code = e.exit_code
            continue
        print(f"{RESOURCE}/{name} deleted")
    return code


def status(args: argparse.Namespace) -> int:
    """The original `kerasjob status`: NAME PHASE DISRUPTIONS FAILURES PROGRESS (or --json)."""
    c = client(args)
    jobs = [c.get(args.name)] if args.name else c.list()
    rows = [summary_dict(j.to_manifest()) for j in jobs]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'NAME':30} {'PHASE':11} {'DISRUPTIONS':>11} {'FAILURES':>8}  PROGRESS")
    for s in rows:
        print(
            f"{s['name']:30} {s['phase'] or '-':11} {s['disruptions']:>11} "
            f"{s['failures']:>8}  {s['progress']}"
        )
        if s.get("goodput"):
            print(f"  {goodput.describe(s['goodput'])}")
        if s["waiting"]:
            print(f"  {'':28} waiting: {s['waiting']}")
    return 0


def summary_dict(obj: dict[str, Any]) -> dict[str, Any]:
    s = summarize(obj)
    # Why a job waits: Kueue's verdict (queued where, evicted by whom), suspend, or why its
    # Pods do not run yet (e.g. a gang that cannot be placed).
    held = (Phase.QUEUED.value, Phase.SUSPENDED.value, Phase.PENDING.value)
    waiting = s.message if s.phase in held else ""
    row = {
        "name": s.name,
        "phase": s.phase,
        "disruptions": s.disruptions,
        "failures": s.failures,
        "progress": s.progress,
        "waiting": waiting,
    }
    costs = ((obj.get("status") or {}).get("progress") or {}).get("goodput")
    if costs:
        row["goodput"] = costs
    return row


def convert(args: argparse.Namespace) -> int:
    from kerasjob.cli.convert import ConversionError, convert_tfjob

    with open(args.filename) if args.filename != "-" else sys.stdin as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    if not docs:
        raise InvalidError(0, f"{args.filename}: no TFJob in it")
    out = []
    for doc in docs:
        try:
            job, warnings = convert_tfjob(
                doc,
                checkpoint_claim=args.checkpoint_claim,
                checkpoint_location=args.checkpoint,
                checkpoint_secret=args.checkpoint_secret,
            )
        except (ConversionError, ValueError) as e:
            raise InvalidError(0, f"{args.filename}: {str(e).splitlines()[0]}") from None
        for w in warnings:
            print(f"kerasjob: warning: {job['metadata'].get('name', '')}: {w}", file=sys.stderr)
        load_job(job)
        out.append(job)
    if args.output == "json":
        _dump(
            out[0] if len(out) == 1 else {"apiVersion": "v1", "kind": "List", "items": out}, "json"
        )
    else:
        print(yaml.safe_dump_all(out, sort_keys=False).rstrip())
    return 0
