"""The agent's reconcile loop: Pods bound to the local node become processes.

One thread watches the Pods with `spec.nodeName == <node>` and queues the events; the main
thread owns all state and, every half second or on each event, brings every Pod one step
closer to what its object asks for (set up network -> launch -> watch the process -> restart
or finish -> on deletion: SIGTERM, grace period, SIGKILL, report, delete, tear down). A
single owner of the state means no locks; the heartbeats run in their own thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

import urllib3

from . import hosts, netns
from .ipam import IPAllocator
from .kube import STRATEGIC_MERGE, ApiError, Kube, lookup, pod_path
from .launch import EnvError, LaunchSpec, Tools, build_argv, build_env, container_command
from .logserver import LogServer
from .mountpoints import MountPoints
from .node import NodeKeeper, machine_capacity
from .status import (
    BACKOFF_RESET_AFTER_S,
    ContainerRecord,
    PodView,
    Terminated,
    build_status,
    exit_info,
    next_action,
    now,
    restart_delay,
    rfc3339,
)
from .volumes import (
    Mount,
    PodDirs,
    VolumeNotReadyError,
    materialise,
    resolve_mounts,
    resolve_volume,
)

log = logging.getLogger(__name__)

LOCK_FILE = Path("/run/kerasjob-localnode.lock")
TICK_S = 0.5
SETUP_RETRY_S = 3.0
#: Grace period used when the Pod object vanished (force-deleted) under a running process.
GONE_GRACE_S = 5.0
TERMINATION_MESSAGE_MAX = 4096
_TRANSIENT = (ApiError, urllib3.exceptions.HTTPError, OSError)


class PrerequisiteError(RuntimeError):
    """The machine cannot run the agent (privileges, tools, another agent)."""


@dataclass
class AgentConfig:
    node_name: str
    state_dir: Path
    python_bin: Path
    kubeconfig: str | None = None
    cidr: str = "10.213.0.0/24"
    bridge: str = "kjbr0"
    capacity: dict[str, str] = field(default_factory=machine_capacity)
    shutdown_grace_s: float = 5.0
    log_port: int = 10250
    """Port of the `kubectl logs` endpoint on the bridge address (0: any free port)."""

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"


def log_path(logs_dir: Path, namespace: str, pod: str, container: str) -> Path:
    return logs_dir / f"{namespace}_{pod}_{container}.log"


def main_container(pod: dict) -> dict:
    """The container the local node runs: the default-container annotation's, or the first."""
    containers = pod["spec"]["containers"]
    wanted = (pod["metadata"].get("annotations") or {}).get(
        "kubectl.kubernetes.io/default-container"
    )
    return next((c for c in containers if c["name"] == wanted), containers[0])


@dataclass
class PodRuntime:
    pod: dict
    netns: str
    container: ContainerRecord
    pod_dir: Path
    phase: str = "Pending"
    ip: str | None = None
    start_time: datetime | None = None
    proc: subprocess.Popen[bytes] | None = None
    launches: int = 0
    consecutive_failures: int = 0
    next_start_at: float = 0.0
    retry_setup_at: float = 0.0
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    deleting: bool = False
    kill_at: float | None = None
    gone: bool = False
    last_status: dict | None = None
    torn_down: bool = False
    """Out of the network (finished or deleted): no hosts entry any more."""

    @property
    def uid(self) -> str:
        return self.pod["metadata"]["uid"]

    @property
    def key(self) -> str:
        return f"{self.pod['metadata']['namespace']}/{self.pod['metadata']['name']}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Agent:
    def __init__(self, cfg: AgentConfig, kube: Kube | None = None) -> None:
        self.cfg = cfg
        self.kube = kube or Kube(cfg.kubeconfig)
        self.lookup = lookup(self.kube)
        self.ipam = IPAllocator(cfg.cidr)
        self.host_ip = str(self.ipam.gateway)
        self.tools = Tools(
            ip=shutil.which("ip") or "ip",
            unshare=shutil.which("unshare") or "unshare",
            mount=shutil.which("mount") or "mount",
        )
        self.pods: dict[str, PodRuntime] = {}
        #: uids of Pods this agent is done with: late watch events for them are ignored.
        self.removed: set[str] = set()
        self.events: queue.Queue[tuple[str, object]] = queue.Queue()
        self.stop = threading.Event()
        self.mountpoints = MountPoints(cfg.state_dir / "created-mountpoints.json")
        self.node = NodeKeeper(self.kube, cfg.node_name, self.host_ip, cfg.capacity)
        self._lock_fd: IO[str] | None = None
        self.log_server: LogServer | None = None

    # ----------------------------------------------------------------- lifecycle

    def run(self) -> None:
        """Run until SIGTERM/SIGINT (or `self.stop`), then clean everything up."""
        self._acquire()
        try:
            self._clean_leftovers()
            netns.setup_bridge(self.cfg.bridge, self.host_ip, self.ipam.prefixlen)
            self._start_log_server()
            self.node.register()
            log.info(
                "node %s registered: bridge %s %s/%d, state in %s",
                self.cfg.node_name, self.cfg.bridge, self.host_ip, self.ipam.prefixlen,
                self.cfg.state_dir,
            )  # fmt: skip
            self.node.start()
            threading.Thread(target=self._watch_loop, name="pod-watch", daemon=True).start()
            while not self.stop.is_set():
                self._drain_events()
                for rt in list(self.pods.values()):
                    self._sync(rt)
        finally:
            self._shutdown()

    def _start_log_server(self) -> None:
        try:
            self.log_server = LogServer(
                self.cfg.logs_dir, self.cfg.state_dir, self.host_ip, self.cfg.log_port,
                self.cfg.node_name,
            )  # fmt: skip
        except (OSError, subprocess.CalledProcessError) as e:
            log.warning("no `kubectl logs` for this node: %s", e)
            return
        self.log_server.start()
        self.node.port = self.log_server.port

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: object) -> None:
            log.info("received %s, shutting down", signal.Signals(signum).name)
            self.stop.set()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _acquire(self) -> None:
        problems = netns.missing_prerequisites()
        if problems:
            raise PrerequisiteError(
                "the local node agent cannot run here:\n  - " + "\n  - ".join(problems)
            )
        # One agent per machine: they would fight over the bridge and the kj-* namespaces.
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        fd = LOCK_FILE.open("a+")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fd.seek(0)
            other = fd.read().strip()
            fd.close()
            raise PrerequisiteError(
                f"another local node agent is running on this machine ({other})"
            ) from None
        fd.truncate(0)
        fd.write(f"pid {os.getpid()}, node {self.cfg.node_name}\n")
        fd.flush()
        self._lock_fd = fd
        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.cfg.logs_dir.mkdir(parents=True, exist_ok=True)

    def _clean_leftovers(self) -> None:
        removed = netns.cleanup_all(self.cfg.bridge)
        removed += self.mountpoints.remove_all()
        shutil.rmtree(self.cfg.state_dir / "pods", ignore_errors=True)
        if removed:
            log.info("removed leftovers of a previous agent: %s", ", ".join(removed))

    def _shutdown(self) -> None:
        self.stop.set()
        running = [rt for rt in self.pods.values() if rt.running]
        for rt in running:
            self._signal(rt, signal.SIGTERM)
        deadline = time.monotonic() + self.cfg.shutdown_grace_s
        while any(rt.running for rt in running) and time.monotonic() < deadline:
            time.sleep(0.1)
        for rt in list(self.pods.values()):
            if rt.running:
                self._signal(rt, signal.SIGKILL)
            if rt.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    rt.proc.wait(timeout=5)
            self._teardown(rt, rewrite_hosts=False)
        self.pods.clear()
        if self.log_server is not None:
            self.log_server.stop()
        netns.cleanup_all(self.cfg.bridge)
        self.mountpoints.remove_all()
        if self.node.uid:
            self.node.stop_and_delete()
        if self._lock_fd is not None:
            self._lock_fd.close()
        log.info("local node agent stopped; no pod process, namespace or bridge left")

    # ----------------------------------------------------------------- watch

    def _watch_loop(self) -> None:
        selector = f"spec.nodeName={self.cfg.node_name}"
        rv: str | None = None
        while not self.stop.is_set():
            try:
                if rv is None:
                    listed = self.kube.request(
                        "GET", "/api/v1/pods", query={"fieldSelector": selector}
                    )
                    rv = listed["metadata"]["resourceVersion"]
                    self.events.put(("RESYNC", listed["items"]))
                for ev in self.kube.watch(
                    "/api/v1/pods", timeout_s=240, fieldSelector=selector, resourceVersion=rv
                ):
                    if self.stop.is_set():
                        return
                    obj = ev["object"]
                    if ev["type"] == "ERROR":  # typically 410 Gone: relist
                        rv = None
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        self.events.put((ev["type"], obj))
            except (*_TRANSIENT, ValueError, KeyError) as e:
                if self.stop.is_set():
                    return
                log.warning("pod watch interrupted (%s); relisting", e)
                rv = None
                self.stop.wait(1.0)

    def _drain_events(self) -> None:
        try:
            event = self.events.get(timeout=TICK_S)
        except queue.Empty:
            return
        while True:
            kind, obj = event
            if kind == "RESYNC":
                assert isinstance(obj, list)
                seen = {p["metadata"]["uid"] for p in obj}
                for rt in self.pods.values():
                    if rt.uid not in seen:
                        rt.gone = True
                for pod in obj:
                    self._upsert(pod)
            elif kind == "DELETED":
                assert isinstance(obj, dict)
                rt = self.pods.get(obj["metadata"]["uid"])
                if rt is not None:
                    rt.pod, rt.gone = obj, True
            else:
                assert isinstance(obj, dict)
                self._upsert(obj)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return

    def _upsert(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.removed:
            return
        rt = self.pods.get(uid)
        if rt is not None:
            rt.pod = pod
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
            return  # finished before this agent started: nothing to run
        meta = pod["metadata"]
        rt = PodRuntime(
            pod=pod,
            netns=netns.netns_name(meta["namespace"], meta["name"]),
            container=ContainerRecord(name=main_container(pod)["name"]),
            pod_dir=self.cfg.state_dir / "pods" / uid,
        )
        # A Pod that already ran here (agent restarted) keeps counting its restarts; its
        # process is gone: a Pod that may not restart has failed, as after a node reboot.
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") != rt.container.name:
                continue
            state = cs.get("state") or {}
            if "running" in state or "terminated" in state or cs.get("lastState"):
                rt.launches = int(cs.get("restartCount") or 0) + 1
                rt.container.restart_count = rt.launches
            if "running" in state and pod["spec"].get("restartPolicy") == "Never":
                at = now()
                rt.container.waiting_reason = None
                rt.container.terminated = Terminated(
                    137, at, at, None, "the local node agent restarted; the process was lost"
                )
                rt.phase = "Failed"
        self.pods[uid] = rt
        log.info("pod %s assigned to this node", rt.key)

    # ----------------------------------------------------------------- reconcile

    def _sync(self, rt: PodRuntime) -> None:
        try:
            self._step(rt)
            if rt.uid in self.pods and not rt.gone:
                self._publish(rt)
        except _TRANSIENT as e:
            log.warning("pod %s: %s (will retry)", rt.key, e)

    def _step(self, rt: PodRuntime) -> None:
        mono = time.monotonic()
        if rt.proc is not None and rt.proc.poll() is not None:
            self._on_exit(rt)
        if rt.gone:
            self._finish_gone(rt, mono)
            return
        if rt.pod["metadata"].get("deletionTimestamp") and not rt.deleting:
            self._begin_deletion(rt, mono)
        if rt.deleting:
            self._continue_deletion(rt, mono)
            return
        if rt.phase in ("Succeeded", "Failed"):
            return
        if rt.ip is None:
            if mono < rt.retry_setup_at:
                return
            self._setup_network(rt)
        if rt.proc is None and mono >= rt.next_start_at and mono >= rt.retry_setup_at:
            self._launch(rt)

    def _setup_network(self, rt: PodRuntime) -> None:
        previous = (rt.pod.get("status") or {}).get("podIP")
        ip = str(self.ipam.allocate(rt.uid, prefer=previous))
        try:
            netns.create_pod_network(rt.netns, rt.uid, self.cfg.bridge, ip, self.ipam.prefixlen)
        except netns.NetworkError as e:
            self.ipam.release(rt.uid)
            rt.container.waiting_reason, rt.container.waiting_message = "ContainerCreating", str(e)
            rt.retry_setup_at = time.monotonic() + SETUP_RETRY_S
            log.warning("pod %s: network setup failed: %s", rt.key, e)
            return
        rt.ip = ip
        rt.start_time = rt.start_time or now()
        self._rewrite_hosts()
        log.info("pod %s: netns %s, ip %s", rt.key, rt.netns, ip)

    def _prepare(self, rt: PodRuntime) -> None:
        """Volumes, mounts, environment and argv of the container (once per Pod)."""
        pod = rt.pod
        container = main_container(pod)
        meta, spec = pod["metadata"], pod["spec"]
        for kind in ("initContainers",):
            if spec.get(kind):
                log.info("pod %s: %s are not run on the local node", rt.key, kind)
        dirs = PodDirs(rt.pod_dir, self.cfg.state_dir / "volumes")
        resolved = {}
        for vol in spec.get("volumes") or []:
            r = resolve_volume(vol, meta["namespace"], dirs, self.lookup)
            if r is not None:
                materialise(r)
                resolved[r.name] = r
        for note in dirs.notes:
            log.info("pod %s: %s", rt.key, note)
        mounts = resolve_mounts(container, resolved)
        term_path = container.get("terminationMessagePath") or "/dev/termination-log"
        mounts.append(Mount(rt.pod_dir / "termination-log", term_path))
        for m in mounts:
            self.mountpoints.ensure(m.target, is_file=m.source.is_file() or m.target == term_path)
        env = build_env(
            pod,
            container,
            pod_ip=rt.ip or "",
            host_ip=self.host_ip,
            python_bin=self.cfg.python_bin,
            lookup=self.lookup,
        )
        command = container_command(container, env)
        if not command:
            raise EnvError(
                "the local node runs the container's `command` (it cannot read the image's "
                "entrypoint); this container has none"
            )
        workdir = container.get("workingDir") or str(rt.pod_dir / "work")
        hostname = spec.get("hostname") or meta["name"]
        rt.argv = build_argv(LaunchSpec(rt.netns, hostname, command, mounts, workdir), self.tools)
        rt.env = env

    def _launch(self, rt: PodRuntime) -> None:
        if rt.argv is None:
            rt.pod_dir.mkdir(parents=True, exist_ok=True)
            (rt.pod_dir / "termination-log").touch()
            try:
                self._prepare(rt)
            except (VolumeNotReadyError, EnvError) as e:
                rt.container.waiting_reason = "CreateContainerConfigError"
                rt.container.waiting_message = str(e)
                rt.retry_setup_at = time.monotonic() + SETUP_RETRY_S
                log.warning("pod %s: %s", rt.key, e)
                return
        assert rt.argv is not None and rt.env is not None
        (rt.pod_dir / "termination-log").write_bytes(b"")
        meta = rt.pod["metadata"]
        path = log_path(self.cfg.logs_dir, meta["namespace"], meta["name"], rt.container.name)
        with path.open("ab") as out:
            out.write(
                f"==== kerasjob-localnode {rfc3339(now())}: starting container "
                f"{rt.container.name} of pod {rt.key} (restart {rt.launches}) ====\n".encode()
            )
            out.flush()
            rt.proc = subprocess.Popen(
                rt.argv,
                env=rt.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, signalled as a whole
            )
        rt.container.restart_count = rt.launches
        rt.launches += 1
        rt.container.running_since = now()
        rt.container.waiting_reason, rt.container.waiting_message = None, ""
        rt.phase = "Running"
        log.info(
            "pod %s: started pid %d (restart %d)", rt.key, rt.proc.pid, rt.container.restart_count
        )

    def _termination_message(self, rt: PodRuntime, exit_code: int) -> str:
        try:
            with (rt.pod_dir / "termination-log").open("rb") as f:
                message = f.read(TERMINATION_MESSAGE_MAX).decode(errors="replace")
        except OSError:
            message = ""
        policy = main_container(rt.pod).get("terminationMessagePolicy")
        if not message.strip() and exit_code != 0 and policy == "FallbackToLogsOnError":
            meta = rt.pod["metadata"]
            path = log_path(self.cfg.logs_dir, meta["namespace"], meta["name"], rt.container.name)
            with contextlib.suppress(OSError):
                lines = path.read_bytes()[-64 * 1024 :].decode(errors="replace").splitlines()
                message = "\n".join(lines[-80:])[-2048:]
        return message

    def _on_exit(self, rt: PodRuntime) -> None:
        assert rt.proc is not None and rt.proc.returncode is not None
        code, sig = exit_info(rt.proc.returncode)
        self._signal(rt, signal.SIGKILL)  # stragglers left in its process group
        started = rt.container.running_since or now()
        term = Terminated(code, started, now(), sig, self._termination_message(rt, code).strip())
        rt.proc = None
        rt.container.running_since = None
        meta = rt.pod["metadata"]
        path = log_path(self.cfg.logs_dir, meta["namespace"], meta["name"], rt.container.name)
        with contextlib.suppress(OSError), path.open("ab") as out:
            out.write(
                f"==== kerasjob-localnode {rfc3339(now())}: container {rt.container.name} "
                f"exited with code {code}{f' (signal {sig})' if sig else ''} ====\n".encode()
            )
        log.info("pod %s: container exited with code %d", rt.key, code)
        policy = rt.pod["spec"].get("restartPolicy", "Always")
        action = next_action(policy, code)
        if action == "restart" and not rt.deleting and not rt.gone:
            ran_s = (term.finished_at - term.started_at).total_seconds()
            rt.consecutive_failures = (
                1 if ran_s >= BACKOFF_RESET_AFTER_S else rt.consecutive_failures + 1
            )
            delay = restart_delay(rt.consecutive_failures)
            rt.container.last_terminated = term
            rt.container.waiting_reason = "CrashLoopBackOff"
            rt.container.waiting_message = (
                f"back-off {delay:g}s restarting failed container={rt.container.name}"
            )
            rt.next_start_at = time.monotonic() + delay
            return
        rt.container.terminated = term
        if not rt.deleting and not rt.gone:
            rt.phase = action if action != "restart" else ("Succeeded" if code == 0 else "Failed")
            # A finished Pod keeps its IP in status but leaves the network and the hosts files.
            self._teardown(rt, forget=False)

    def _begin_deletion(self, rt: PodRuntime, mono: float) -> None:
        rt.deleting = True
        meta = rt.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = rt.pod["spec"].get("terminationGracePeriodSeconds", 30)
        if rt.running:
            log.info("pod %s: deleting, SIGTERM (grace period %ss)", rt.key, grace)
            self._signal(rt, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        rt.kill_at = mono + float(grace)

    def _continue_deletion(self, rt: PodRuntime, mono: float) -> None:
        if rt.running:
            if rt.kill_at is not None and mono >= rt.kill_at:
                log.info("pod %s: grace period over, SIGKILL", rt.key)
                self._signal(rt, signal.SIGKILL)
                rt.kill_at = None
            return
        if rt.proc is not None:  # exited since the last look
            self._on_exit(rt)
        term = rt.container.terminated
        if term is not None:
            rt.phase = "Succeeded" if term.exit_code == 0 else "Failed"
        elif rt.phase == "Running":
            rt.phase = "Failed"
        self._publish(rt)
        meta = rt.pod["metadata"]
        # The kubelet's last word: remove the object now that nothing runs any more.
        try:
            self.kube.request(
                "DELETE",
                pod_path(meta["namespace"], meta["name"]),
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": rt.uid}},
            )
        except ApiError as e:
            if e.status not in (404, 409):
                raise
        log.info("pod %s: deleted", rt.key)
        self._teardown(rt)

    def _finish_gone(self, rt: PodRuntime, mono: float) -> None:
        """The object is gone (force-deleted, or removed while we were not watching)."""
        if rt.running:
            if rt.kill_at is None:
                self._signal(rt, signal.SIGTERM)
                rt.kill_at = mono + GONE_GRACE_S
            elif mono >= rt.kill_at:
                self._signal(rt, signal.SIGKILL)
            return
        if rt.proc is not None:
            self._on_exit(rt)
        log.info("pod %s: removed from the API, cleaned up", rt.key)
        self._teardown(rt)

    def _signal(self, rt: PodRuntime, sig: signal.Signals) -> None:
        if rt.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(rt.proc.pid, sig)

    def _teardown(self, rt: PodRuntime, forget: bool = True, rewrite_hosts: bool = True) -> None:
        netns.delete_pod_network(rt.netns, rt.uid)
        self.ipam.release(rt.uid)
        had_ip = rt.ip is not None
        rt.torn_down = True  # status keeps reporting the last IP, DNS no longer has it
        if forget:
            shutil.rmtree(rt.pod_dir, ignore_errors=True)
            self.pods.pop(rt.uid, None)
            self.removed.add(rt.uid)
        if had_ip and rewrite_hosts:
            self._rewrite_hosts()

    def _rewrite_hosts(self) -> None:
        live = [rt for rt in self.pods.values() if rt.ip and not rt.torn_down]
        addrs = {rt.uid: hosts.PodAddress.from_pod(rt.pod, rt.ip or "") for rt in live}
        for rt in live:
            content = hosts.render_hosts(addrs[rt.uid], addrs.values())
            with contextlib.suppress(OSError):
                hosts.write_in_place(netns.hosts_path(rt.netns), content)

    # ----------------------------------------------------------------- status

    def _publish(self, rt: PodRuntime) -> None:
        previous = (
            (rt.last_status or {}).get("conditions")
            or (rt.pod.get("status") or {}).get("conditions")
            or []
        )
        view = PodView(
            container=rt.container,
            image=main_container(rt.pod).get("image", ""),
            phase=rt.phase,
            pod_ip=rt.ip,
            host_ip=self.host_ip,
            start_time=rt.start_time,
            previous_conditions=previous,
        )
        status = build_status(view)
        if status == rt.last_status:
            return
        meta = rt.pod["metadata"]
        body_status = dict(status)
        for key in ("podIPs", "hostIPs"):
            if key in body_status:
                # Lists merged by IP: replace them, or an IP from before an agent restart stays.
                body_status[key] = [*body_status[key], {"$patch": "replace"}]
        try:
            self.kube.request(
                "PATCH",
                pod_path(meta["namespace"], meta["name"], "status"),
                body={"metadata": {"uid": rt.uid}, "status": body_status},
                content_type=STRATEGIC_MERGE,
            )
        except ApiError as e:
            if e.status in (404, 409):  # gone, or a new Pod of the same name
                rt.gone = True
                return
            raise
        rt.last_status = status


def write_agent_info(cfg: AgentConfig) -> None:
    info = {"pid": os.getpid(), "node": cfg.node_name, "bridge": cfg.bridge, "cidr": cfg.cidr}
    (cfg.state_dir / "agent.json").write_text(json.dumps(info) + "\n")
