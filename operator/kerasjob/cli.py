"""The `kerasjob` command: run the operator, or look at jobs.

kerasjob run [--namespace NS ...] [--peering NAME] ...   start the operator (kopf)
kerasjob status [NAME] [-n NS]                           phase, restarts, progress
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any, cast

from kerasjob import bounded
from kerasjob.config import OperatorConfig


def _run(args: argparse.Namespace) -> int:
    import kopf

    import kerasjob.handlers  # noqa: F401  (registers the handlers)

    config = OperatorConfig(
        namespaces=tuple(args.namespace or ()),
        kubeconfig=args.kubeconfig,
        context=args.context,
        verbose=args.verbose,
        **{
            k: v
            for k, v in {
                "default_image": args.default_image,
                "workers": args.workers,
                "resync_seconds": args.resync_seconds,
                "force_delete_after": args.force_delete_after,
                "progress_interval": args.progress_interval,
                "liveness": args.liveness,
                "peering": args.peering,
                "metrics_port": args.metrics_port,
                "network_policy": False if args.no_network_policy else None,
            }.items()
            if v is not None
        },
    )
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("aiohttp").setLevel(logging.WARNING)
    if sys.version_info < (3, 11):  # pragma: no cover
        asyncio.set_event_loop(asyncio.new_event_loop())
    kopf.run(
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        standalone=config.peering is None,
        peering_name=config.peering,
        priority=config.priority,
        liveness_endpoint=config.liveness or None,
        memo=kopf.Memo(config=config),
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    from kubernetes import client, config

    from kerasjob import API_GROUP, API_VERSION, PLURAL

    config.load_kube_config(config_file=args.kubeconfig, context=args.context)
    api = client.CustomObjectsApi()
    ns = args.namespace_single or "default"
    items: list[dict[str, Any]]
    if args.name:
        one = api.get_namespaced_custom_object(API_GROUP, API_VERSION, ns, PLURAL, args.name)
        items = [cast(dict[str, Any], one)]
    else:
        listed = api.list_namespaced_custom_object(API_GROUP, API_VERSION, ns, PLURAL)
        items = cast(dict[str, Any], listed)["items"]
    if args.json:
        print(json.dumps([_summary(i) for i in items], indent=2))
        return 0
    print(f"{'NAME':30} {'PHASE':11} {'DISRUPTIONS':>11} {'FAILURES':>8}  PROGRESS")
    for item in items:
        s = _summary(item)
        print(
            f"{s['name']:30} {s['phase'] or '-':11} {s['disruptions']:>11} "
            f"{s['failures']:>8}  {s['progress']}"
        )
    return 0


def _summary(obj: dict[str, Any]) -> dict[str, Any]:
    status = obj.get("status") or {}
    restarts = status.get("restarts") or {}
    prog = status.get("progress") or {}
    text = "-"
    if prog.get("step") is not None:
        text = f"step {prog.get('step')}/{prog.get('totalSteps', '?')}"
        if prog.get("loss") is not None:
            text += f" loss {prog['loss']:.4g}"
    return {
        "name": obj["metadata"]["name"],
        "phase": status.get("phase"),
        "disruptions": restarts.get("disruptions", 0),
        "failures": restarts.get("failures", 0),
        "progress": text,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kerasjob", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    sub = p.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run the operator")
    run.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="namespace (glob) to watch; repeatable; default: all namespaces",
    )
    run.add_argument(
        "-A", "--all-namespaces", action="store_true", help="watch all namespaces (the default)"
    )
    run.add_argument(
        "--standalone", action="store_true", help="no peering (the default unless --peering)"
    )
    run.add_argument("--peering", help="kopf peering name, for several operator replicas")
    run.add_argument(
        "--liveness",
        help="liveness/probe endpoint URL, '' to disable (default http://0.0.0.0:8080/healthz)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics on this port ($KERASJOB_METRICS_PORT)",
    )
    run.add_argument("--default-image", help="trainer image when a job names none")
    run.add_argument("--workers", type=int, help="jobs reconciled concurrently (8)")
    run.add_argument("--resync-seconds", type=float, help="periodic requeue of every job (60)")
    run.add_argument(
        "--force-delete-after",
        type=float,
        help="seconds past a Pod's deletionTimestamp before force-deleting (30)",
    )
    run.add_argument(
        "--progress-interval",
        type=float,
        help="seconds between chief metrics scrapes, 0 disables (10)",
    )
    run.add_argument(
        "--no-network-policy",
        action="store_true",
        help="create no NetworkPolicy per job ($KERASJOB_NETWORK_POLICY=false)",
    )
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=_run)

    st = sub.add_parser("status", help="show KerasJobs' phase, restarts and progress")
    st.add_argument("name", nargs="?")
    st.add_argument("-n", "--namespace", dest="namespace_single")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_status)
    return p


def _explain(exc: BaseException, args: argparse.Namespace) -> str | None:
    """One line for an error of talking to the cluster, or None if it is not one."""
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException

    if isinstance(exc, ApiException):
        ns = getattr(args, "namespace_single", None) or "default"
        try:
            body = json.loads(exc.body or "")
        except ValueError:
            body = {}  # e.g. "404 page not found": no such resource at all
        body = body if isinstance(body, dict) else {}
        if exc.status == 404 and (body.get("details") or {}).get("name"):
            return f"KerasJob {body['details']['name']!r} not found in namespace {ns!r}"
        if exc.status == 404:
            return "the KerasJob API is not in this cluster (no kerasjobs.kerasjob.dev CRD)"
        message = body.get("message") or exc.reason
        return f"the API server refused: {message} (HTTP {exc.status})"
    if isinstance(exc, ConfigException | FileNotFoundError):
        return f"no usable kubeconfig: {exc}"
    if type(exc).__module__.startswith("urllib3") or isinstance(exc, ConnectionError):
        return f"cannot reach the API server: {type(exc).__name__}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    # A KerasJob nested thousands of levels deep must not crash the operator or the CLI.
    bounded.install()
    args = parser().parse_args(argv)
    if args.command is None:
        args = parser().parse_args(["run", *(argv or sys.argv[1:])])
    if args.func is not _status:
        return int(args.func(args))
    try:
        return int(args.func(args))
    except Exception as exc:  # mapped to one line below, else re-raised
        line = _explain(exc, args)
        if line is None:
            raise
        print(f"kerasjob: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
