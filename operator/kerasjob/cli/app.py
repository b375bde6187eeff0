"""The `kerasjob` command: run the operator, or work with KerasJobs as kubectl would.

  kerasjob run [-n NS_GLOB ...] [--peering NAME] ...      start the operator (kopf)
  kerasjob submit -f job.yaml [--wait]                     create jobs (and wait for them)
  kerasjob get [NAME ...] [-A] [-o wide|json|yaml|name]    list jobs: phase, restarts, progress
  kerasjob describe NAME                                   spec, status, conditions, Pods, events
  kerasjob logs NAME [-f] [--replica worker-1 | --all]     trainer logs (default: the chief)
         [--previous | --all-incarnations]              earlier trainer incarnations too
  kerasjob wait NAME [--for Succeeded] [--timeout 600]     block, with a live progress line
  kerasjob suspend|resume|delete NAME ...                  spec.suspend, deletion
  kerasjob status [NAME]                                   phase, restarts, progress (--json)
  kerasjob convert tfjob.yaml                              a Kubeflow TFJob as a KerasJob
  kerasjob completion bash|zsh                             shell completion script

Job commands take -n/--namespace, --context and --kubeconfig anywhere (kubectl's habits; the
namespace defaults to the context's). Installed as `kubectl-kerasjob` too: `kubectl kerasjob get`.
Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 forbidden, 5 job failed, 6 wait timed out.
Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from kerasjob.cli.args import add_job_commands
from kerasjob.config import OperatorConfig
from kerasjob.k8s import bounded


async def _gang_api_problem(config: OperatorConfig) -> str | None:
    from kerasjob.integrations.gang.sync import check_api
    from kerasjob.k8s.kube import KubeApi

    try:
        api = KubeApi(config.kubeconfig, config.context)
    except Exception as e:  # no usable credentials: one line, as every CLI error
        return f"no usable kubeconfig: {e}"
    try:
        return await check_api(api)
    except Exception as e:  # unreachable, TLS...: one line; the Deployment restarts us
        return f"cannot ask the API server: {type(e).__name__}: {str(e).splitlines()[0]}"
    finally:
        await api.close()


def _without_kubernetes_package() -> None:
    """Keep the `kubernetes` package out of the operator process (call before importing kopf).

    The operator never uses it (`kerasjob.k8s.credentials` reads kubeconfigs itself), and its
    image does not install it; but where it is installed (a dev venv: the tests and tools
    use it), kopf would import it just to recognise its model classes (kopf's
    thirdparty.py), 10 MiB of the operator's 65 at start. Blocked here, the operator weighs the
    same in a venv as in its image.
    """
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]


def _run(args: argparse.Namespace) -> int:
    _without_kubernetes_package()
    import kopf

    import kerasjob.control.handlers
    from kerasjob.control import kopf_fixes

    kopf_fixes.install()

    config = OperatorConfig(
        namespaces=tuple(args.namespace or ()),
        kubeconfig=args.kubeconfig,
        context=args.context,
        verbose=args.verbose,
        **{
            k: v
            for k, v in {
                "default_image": args.default_image,
                "default_jax_image": args.default_jax_image,
                "workers": args.workers,
                "resync_seconds": args.resync_seconds,
                "force_delete_after": args.force_delete_after,
                "progress_interval": args.progress_interval,
                "liveness": args.liveness,
                "peering": args.peering,
                "metrics_port": args.metrics_port,
                "network_policy": False if args.no_network_policy else None,
                "kueue": args.kueue or None,
                "gang_scheduling": args.gang_scheduling or None,
            }.items()
            if v is not None
        },
    )
    if args.node_lost_toleration is not None:  # -1: Kubernetes' default (None)
        seconds = args.node_lost_toleration
        config = dataclasses.replace(
            config, node_lost_toleration_seconds=seconds if seconds >= 0 else None
        )
    if config.network_policy:
        kerasjob.control.handlers.register_network_policies()
    if config.kueue:
        kerasjob.control.handlers.register_kueue()
    if config.gang_scheduling:
        problem = asyncio.run(_gang_api_problem(config))
        if problem is not None:
            print(f"kerasjob: --gang-scheduling: {problem}", file=sys.stderr)
            return 1
        kerasjob.control.handlers.register_gang()
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


def _summary(obj: dict[str, Any]) -> dict[str, Any]:
    """The row `kerasjob status` prints for a KerasJob body."""
    from kerasjob.cli.jobs import summary_dict

    return summary_dict(obj)


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
    run.add_argument(
        "--default-image",
        help="trainer image of backend tensorflow jobs that name none ($KERASJOB_DEFAULT_IMAGE)",
    )
    run.add_argument(
        "--default-jax-image",
        help="trainer image of backend jax jobs that name none ($KERASJOB_DEFAULT_JAX_IMAGE)",
    )
    run.add_argument("--workers", type=int, help="jobs reconciled concurrently (8)")
    run.add_argument("--resync-seconds", type=float, help="periodic requeue of every job (60)")
    run.add_argument(
        "--force-delete-after",
        type=float,
        help="seconds past a Pod's deletionTimestamp before force-deleting (30)",
    )
    run.add_argument(
        "--node-lost-toleration",
        type=int,
        help="seconds a trainer Pod stays on a NotReady/unreachable node before it is evicted "
        "(60; -1: Kubernetes' default of 300)",
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
    run.add_argument(
        "--kueue",
        action="store_true",
        help="integrate with Kueue: jobs of a LocalQueue wait for admission ($KERASJOB_KUEUE=1)",
    )
    run.add_argument(
        "--gang-scheduling",
        action="store_true",
        help="native gang scheduling (Kubernetes 1.36 alpha Workload/PodGroup): a job's Pods "
        "are bound all together or none ($KERASJOB_GANG_SCHEDULING=1)",
    )
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=_run)

    add_job_commands(sub, p)
    return p


def _explain(exc: BaseException, args: argparse.Namespace) -> str | None:
    """One line for an error of talking to the cluster, or None if it is not one."""
    from kerasjob.k8s.credentials import CredentialsError
    from kerasjob.sdk.errors import KerasJobError

    if isinstance(exc, KerasJobError):
        return str(exc)
    if isinstance(exc, CredentialsError):
        return f"no usable kubeconfig: {exc}"
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or exc}: {exc.filename}"
    if isinstance(exc, yaml.YAMLError):
        return f"not valid YAML: {str(exc).splitlines()[0]}"
    if type(exc).__module__.startswith("urllib3") or isinstance(exc, ConnectionError):
        return f"cannot reach the API server: {type(exc).__name__}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    # A KerasJob nested thousands of levels deep must not crash the operator or the CLI.
    bounded.install()
    args = parser().parse_args(argv)
    if args.command is None and os.path.basename(sys.argv[0]).startswith("kubectl-"):
        parser().print_help()  # `kubectl kerasjob` alone: help, never the operator
        return 2
    if args.command is None:
        args = parser().parse_args(["run", *(argv or sys.argv[1:])])
    if args.func is _run:
        return int(args.func(args))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kerasjob logs x | head`
        sys.stderr.close()
        return 0
    except Exception as exc:  # mapped to one line below, else re-raised
        line = _explain(exc, args)
        if line is None:
            raise
        print(f"kerasjob: {line}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 1))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
