"""Run the agent as a subprocess (for `make demo` and the end-to-end tests).

    with AgentProcess(kubeconfig, log_path) as agent:
        ...   # the Node is Ready; Pods bound to it run

Stopping sends SIGTERM (the agent kills its Pods' processes, removes its namespaces, bridge
and Node) and, should the agent not exit in time, SIGKILL followed by `cleanup`, so nothing
is ever left behind.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from . import netns
from .kube import Kube

DEFAULT_NODE = "kerasjob-local"


class AgentError(RuntimeError):
    pass


class AgentProcess:
    def __init__(
        self,
        kubeconfig: str,
        log_path: Path,
        *,
        node: str = DEFAULT_NODE,
        state_dir: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig, self.log_path, self.node = kubeconfig, log_path, node
        self.state_dir = state_dir
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "kerasjob.localnode"]
        if self.state_dir is not None:
            argv += ["--state-dir", str(self.state_dir)]
        return [
            *argv,
            "run",
            "--node",
            self.node,
            "--kubeconfig",
            self.kubeconfig,
            *self.extra_args,
        ]

    def start(self, timeout: float = 30) -> AgentProcess:
        problems = netns.missing_prerequisites()
        if problems:
            raise AgentError("the local node agent cannot run here: " + "; ".join(problems))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own session: a Ctrl-C in the terminal reaches only our process, which
                # then stops the agent in order (the agent stops its Pods first).
                start_new_session=True,
            )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        kube = Kube(self.kubeconfig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AgentError(f"the local node agent exited:\n{self.log_tail()}")
            node = kube.get(f"/api/v1/nodes/{self.node}")
            conds = ((node or {}).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                return
            time.sleep(0.2)
        raise AgentError(f"node {self.node} not Ready after {timeout:g}s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> None:
        if self.proc is None:
            return
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        if netns.list_netns(netns.NETNS_PREFIX) or netns.link_exists("kjbr0"):
            # The agent died without cleaning up (SIGKILL, crash): do it for it.
            cleanup = [sys.executable, "-m", "kerasjob.localnode"]
            if self.state_dir is not None:
                cleanup += ["--state-dir", str(self.state_dir)]
            subprocess.run([*cleanup, "cleanup"], check=False, capture_output=True, timeout=60)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def leftover_namespaces() -> list[str]:
    """kj-* network namespaces that exist right now (should be none once agents stopped)."""
    return netns.list_netns(netns.NETNS_PREFIX)


def pod_processes(namespace: str, pod: str) -> list[int]:
    """PIDs running in a Pod's network namespace (to SIGKILL a "container" from outside)."""
    return netns.netns_pids(netns.netns_name(namespace, pod))


def log_file(state_dir: Path, namespace: str, pod: str, container: str = "trainer") -> Path:
    return state_dir / "logs" / f"{namespace}_{pod}_{container}.log"
