"""CLI of the local node agent.

python -m kerasjob.localnode [run] [--node NAME] [--kubeconfig PATH] ...
python -m kerasjob.localnode logs POD [-n NAMESPACE] [-c CONTAINER] [-f]
python -m kerasjob.localnode cleanup      # remove leftovers of a crashed agent
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from . import netns, paths


def _run(args: argparse.Namespace) -> int:
    from .agent import Agent, AgentConfig, PrerequisiteError, write_agent_info
    from .node import machine_capacity

    problems = netns.missing_prerequisites()
    if problems:
        print(
            "kerasjob.localnode: cannot run here:\n  - " + "\n  - ".join(problems), file=sys.stderr
        )
        return 2
    capacity = machine_capacity()
    if args.cpu:
        capacity["cpu"] = args.cpu
    if args.memory:
        capacity["memory"] = args.memory
    cfg = AgentConfig(
        node_name=args.node,
        state_dir=Path(args.state_dir),
        python_bin=Path(args.python_bin),
        kubeconfig=args.kubeconfig,
        cidr=args.cidr,
        bridge=args.bridge,
        capacity=capacity,
        log_port=args.log_port,
    )
    agent = Agent(cfg)
    agent.install_signal_handlers()
    try:
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        write_agent_info(cfg)
        agent.run()
    except PrerequisiteError as e:
        print(f"kerasjob.localnode: {e}", file=sys.stderr)
        return 2
    return 0


def _logs(args: argparse.Namespace) -> int:
    logs_dir = Path(args.state_dir) / "logs"
    if args.container:
        candidates = [logs_dir / f"{args.namespace}_{args.pod}_{args.container}.log"]
    else:
        candidates = sorted(logs_dir.glob(f"{args.namespace}_{args.pod}_*.log"))
    candidates = [c for c in candidates if c.exists()]
    if not candidates:
        print(f"no logs for pod {args.namespace}/{args.pod} in {logs_dir}", file=sys.stderr)
        return 1
    if len(candidates) > 1:
        names = ", ".join(c.stem.rsplit("_", 1)[1] for c in candidates)
        print(f"pod has several containers, choose one with -c: {names}", file=sys.stderr)
        return 1
    with candidates[0].open("rb") as f:
        while True:
            chunk = f.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            elif args.follow:
                time.sleep(0.3)
            else:
                return 0


def _cleanup(args: argparse.Namespace) -> int:
    from .mountpoints import MountPoints

    problems = netns.missing_prerequisites()
    if problems:
        print("kerasjob.localnode: " + "; ".join(problems), file=sys.stderr)
        return 2
    removed = netns.cleanup_all(args.bridge)
    removed += MountPoints(Path(args.state_dir) / "created-mountpoints.json").remove_all()
    print("\n".join(removed) if removed else "nothing to clean up")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kerasjob.localnode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--state-dir",
        default=str(paths.state_dir()),
        help="logs, per-pod dirs, claim dirs (default $KERASJOB_RUN/localnode)",
    )
    sub = parser.add_subparsers(dest="cmd")
    run = sub.add_parser("run", help="run the agent (the default)")
    for p in (parser, run):
        p.add_argument("--node", default="kerasjob-local", help="Node name")
        p.add_argument("--kubeconfig", default=paths.default_kubeconfig())
        p.add_argument("--cidr", default="10.213.0.0/24", help="pod subnet; .1 is the host's")
        p.add_argument("--bridge", default="kjbr0")
        p.add_argument(
            "--python-bin",
            default=str(paths.python_bin()),
            help="put first in containers' PATH (default: this Python's bin dir)",
        )
        p.add_argument("--cpu", help="override the CPU capacity reported (e.g. 4)")
        p.add_argument("--memory", help="override the memory capacity reported (e.g. 8Gi)")
        p.add_argument(
            "--log-port",
            type=int,
            default=10250,
            help="port of the `kubectl logs` endpoint on the bridge address",
        )
        p.add_argument("-v", "--verbose", action="store_true")
    logs = sub.add_parser("logs", help="print a pod's container log")
    logs.add_argument("pod")
    logs.add_argument("-n", "--namespace", default="default")
    logs.add_argument("-c", "--container")
    logs.add_argument("-f", "--follow", action="store_true")
    clean = sub.add_parser("cleanup", help="remove namespaces, veths, bridge of a dead agent")
    clean.add_argument("--bridge", default="kjbr0")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s localnode %(levelname)s %(message)s",
    )
    if args.cmd == "logs":
        return _logs(args)
    if args.cmd == "cleanup":
        return _cleanup(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
