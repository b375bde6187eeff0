"""Unit tests of the local node agent's pure parts: IPs, hosts files, status, volumes, launch."""

from __future__ import annotations

import base64
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from kerasjob.localnode import hosts, launch, netns, status, volumes
from kerasjob.localnode.ipam import IPAllocator, IPExhaustedError
from kerasjob.localnode.mountpoints import MountPoints

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


# ----------------------------------------------------------------------------- ipam


def test_ipam_gateway_first_and_stable_per_key() -> None:
    ipam = IPAllocator("10.213.0.0/24")
    assert str(ipam.gateway) == "10.213.0.1"
    a = ipam.allocate("a")
    assert str(a) == "10.213.0.2"
    assert ipam.allocate("a") == a
    assert str(ipam.allocate("b")) == "10.213.0.3"


def test_ipam_does_not_reuse_a_freed_address_at_once() -> None:
    ipam = IPAllocator("10.213.0.0/24")
    a = ipam.allocate("a")
    ipam.release("a")
    assert ipam.allocate("a2") != a


def test_ipam_exhaustion_and_wraparound() -> None:
    ipam = IPAllocator("10.0.0.0/29")  # hosts .1-.6: gateway + 5 pods
    got = [ipam.allocate(str(i)) for i in range(5)]
    assert len(set(got)) == 5
    with pytest.raises(IPExhaustedError):
        ipam.allocate("x")
    ipam.release("2")
    assert ipam.allocate("x") == got[2]


# ----------------------------------------------------------------------------- hosts


def _pod(ns: str, name: str, ip: str, sub: str | None = "job") -> hosts.PodAddress:
    return hosts.PodAddress(ns, name, ip, hostname=name, subdomain=sub)


def test_dns_names_short_form_only_in_same_namespace() -> None:
    p = _pod("a", "job-worker-0", "10.0.0.2")
    assert hosts.dns_names(p, "a") == [
        "job-worker-0.job.a.svc.cluster.local",
        "job-worker-0.job.a.svc",
        "job-worker-0.job.a",
        "job-worker-0.job",
    ]
    assert "job-worker-0.job" not in hosts.dns_names(p, "b")
    assert hosts.dns_names(_pod("a", "x", "10.0.0.9", sub=None), "a") == []


def test_render_hosts_lists_self_and_peers() -> None:
    me, peer = _pod("a", "job-worker-0", "10.0.0.2"), _pod("a", "job-worker-1", "10.0.0.3")
    text = hosts.render_hosts(me, [me, peer])
    lines = text.splitlines()
    assert "127.0.0.1\tlocalhost" in lines
    assert any(line.startswith("10.0.0.2\t") and line.endswith(" job-worker-0") for line in lines)
    assert (
        "10.0.0.3\tjob-worker-1.job.a.svc.cluster.local job-worker-1.job.a.svc "
        "job-worker-1.job.a job-worker-1.job" in lines
    )
    assert sum(line.startswith("10.0.0.2") for line in lines) == 1


def test_write_in_place_keeps_inode(tmp_path: Path) -> None:
    f = tmp_path / "etc" / "hosts"
    hosts.write_in_place(f, "a long first version\n" * 3)
    inode = os.stat(f).st_ino
    hosts.write_in_place(f, "short\n")
    assert os.stat(f).st_ino == inode
    assert f.read_text() == "short\n"


# ----------------------------------------------------------------------------- status


def test_exit_info_signal_is_128_plus() -> None:
    assert status.exit_info(0) == (0, None)
    assert status.exit_info(42) == (42, None)
    assert status.exit_info(-9) == (137, 9)
    assert status.exit_info(-15) == (143, 15)


@pytest.mark.parametrize(
    ("policy", "code", "action"),
    [
        ("Never", 0, "Succeeded"),
        ("Never", 1, "Failed"),
        ("OnFailure", 0, "Succeeded"),
        ("OnFailure", 137, "restart"),
        ("Always", 0, "restart"),
    ],
)
def test_next_action(policy: str, code: int, action: str) -> None:
    assert status.next_action(policy, code) == action


def test_restart_delay_doubles_to_cap() -> None:
    assert [status.restart_delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_build_status_running() -> None:
    c = status.ContainerRecord(name="trainer", running_since=T0, restart_count=1)
    c.last_terminated = status.Terminated(1, T0 - timedelta(seconds=5), T0, None, "boom")
    s = status.build_status(
        status.PodView(c, pod_ip="10.0.0.2", host_ip="10.0.0.1", phase="Running", start_time=T0),
        at=T0,
    )
    assert s["phase"] == "Running"
    assert s["podIP"] == "10.0.0.2" and s["podIPs"] == [{"ip": "10.0.0.2"}]
    cs = s["containerStatuses"][0]
    assert cs["ready"] is True and cs["restartCount"] == 1
    assert cs["state"] == {"running": {"startedAt": "2026-01-01T12:00:00Z"}}
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["lastState"]["terminated"]["message"] == "boom"
    conds = {c["type"]: c["status"] for c in s["conditions"]}
    assert conds["Ready"] == conds["ContainersReady"] == "True"


def test_build_status_terminated_by_signal_and_transition_times_kept() -> None:
    c = status.ContainerRecord(name="trainer", waiting_reason=None)
    c.terminated = status.Terminated(137, T0, T0 + timedelta(seconds=3), 9, "")
    previous = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
    ]
    s = status.build_status(
        status.PodView(c, phase="Failed", pod_ip="10.0.0.2", previous_conditions=previous),
        at=T0,
    )
    term = s["containerStatuses"][0]["state"]["terminated"]
    assert term == {
        "exitCode": 137,
        "reason": "Error",
        "signal": 9,
        "startedAt": "2026-01-01T12:00:00Z",
        "finishedAt": "2026-01-01T12:00:03Z",
    }
    conds = {c["type"]: c for c in s["conditions"]}
    assert conds["Initialized"]["lastTransitionTime"] == "2025-01-01T00:00:00Z"
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert conds["Ready"]["reason"] == "PodCompleted"


def test_build_status_pending_waiting() -> None:
    s = status.build_status(status.PodView(status.ContainerRecord(name="c")), at=T0)
    assert s["phase"] == "Pending"
    assert s["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert "podIP" not in s


# ----------------------------------------------------------------------------- volumes


def _lookup(objects: dict[tuple[str, str, str], dict]):
    return lambda kind, ns, name: objects.get((kind, ns, name))


def test_resolve_bound_pvc_uses_pv_host_path(tmp_path: Path) -> None:
    objs = {
        ("PersistentVolumeClaim", "ns", "ckpt"): {
            "spec": {"volumeName": "pv1"},
            "status": {"phase": "Bound"},
        },
        ("PersistentVolume", "", "pv1"): {"spec": {"hostPath": {"path": "/data/pv1"}}},
    }
    dirs = volumes.PodDirs(tmp_path / "pod", tmp_path / "claims")
    vol = {"name": "c", "persistentVolumeClaim": {"claimName": "ckpt"}}
    r = volumes.resolve_volume(vol, "ns", dirs, _lookup(objs))
    assert r is not None and r.host_path == Path("/data/pv1")


def test_resolve_unbound_pvc_uses_shared_claim_dir(tmp_path: Path) -> None:
    objs = {("PersistentVolumeClaim", "ns", "ckpt"): {"spec": {}, "status": {"phase": "Pending"}}}
    vol = {"name": "c", "persistentVolumeClaim": {"claimName": "ckpt"}}
    a = volumes.resolve_volume(
        vol, "ns", volumes.PodDirs(tmp_path / "a", tmp_path / "cl"), _lookup(objs)
    )
    b = volumes.resolve_volume(
        vol, "ns", volumes.PodDirs(tmp_path / "b", tmp_path / "cl"), _lookup(objs)
    )
    assert a is not None and b is not None
    assert a.host_path == b.host_path == tmp_path / "cl" / "ns" / "ckpt"


def test_resolve_missing_pvc_is_not_ready(tmp_path: Path) -> None:
    vol = {"name": "c", "persistentVolumeClaim": {"claimName": "nope"}}
    with pytest.raises(volumes.VolumeNotReadyError):
        volumes.resolve_volume(vol, "ns", volumes.PodDirs(tmp_path, tmp_path), _lookup({}))


def test_resolve_configmap_and_secret_files(tmp_path: Path) -> None:
    objs = {
        ("ConfigMap", "ns", "code"): {"data": {"train.py": "print(1)\n", "other": "x"}},
        ("Secret", "ns", "s"): {"data": {"token": base64.b64encode(b"t0k").decode()}},
    }
    dirs = volumes.PodDirs(tmp_path / "pod", tmp_path / "claims")
    cm = volumes.resolve_volume(
        {
            "name": "code",
            "configMap": {"name": "code", "items": [{"key": "train.py", "path": "m/t.py"}]},
        },
        "ns",
        dirs,
        _lookup(objs),
    )
    assert cm is not None and cm.files == {"m/t.py": b"print(1)\n"}
    volumes.materialise(cm)
    assert (cm.host_path / "m" / "t.py").read_text() == "print(1)\n"
    sec = volumes.resolve_volume(
        {"name": "s", "secret": {"secretName": "s"}}, "ns", dirs, _lookup(objs)
    )
    assert sec is not None and sec.files == {"token": b"t0k"}


def test_resolve_mounts_empty_dir_host_path_and_sub_path(tmp_path: Path) -> None:
    dirs = volumes.PodDirs(tmp_path / "pod", tmp_path / "claims")
    vols = {}
    for v in ({"name": "scratch", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/srv/x"}}):
        r = volumes.resolve_volume(v, "ns", dirs, _lookup({}))
        assert r is not None
        vols[r.name] = r
    container = {
        "volumeMounts": [
            {"name": "scratch", "mountPath": "/tmp/s"},
            {"name": "h", "mountPath": "/x", "readOnly": True, "subPath": "sub"},
            {"name": "unknown", "mountPath": "/u"},
        ]
    }
    mounts = volumes.resolve_mounts(container, vols)
    assert mounts == [
        volumes.Mount(tmp_path / "pod" / "volumes" / "scratch", "/tmp/s", False),
        volumes.Mount(Path("/srv/x/sub"), "/x", True),
    ]
    with pytest.raises(volumes.VolumeNotReadyError):
        volumes.resolve_mounts(
            {"volumeMounts": [{"name": "h", "mountPath": "/x", "subPath": "../e"}]}, vols
        )


# ----------------------------------------------------------------------------- launch


POD = {
    "metadata": {"name": "job-worker-1", "namespace": "ns", "uid": "u1", "labels": {"role": "w"}},
    "spec": {"hostname": "job-worker-1", "subdomain": "job", "nodeName": "n"},
}


def test_build_env_field_refs_and_expansion(tmp_path: Path) -> None:
    container = {
        "env": [
            {"name": "A", "value": "a"},
            {"name": "B", "value": "$(A)-b-$$(A)"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
        ]
    }
    env = launch.build_env(
        POD,
        container,
        pod_ip="10.0.0.3",
        host_ip="10.0.0.1",
        python_bin=tmp_path,
        lookup=_lookup({}),
    )
    assert env["PATH"].startswith(f"{tmp_path}:")
    assert env["B"] == "a-b-$(A)"
    assert (env["POD"], env["NS"], env["IP"], env["ROLE"]) == (
        "job-worker-1",
        "ns",
        "10.0.0.3",
        "w",
    )
    assert env["HOSTNAME"] == "job-worker-1"


def test_container_command_and_argv() -> None:
    cmd = launch.container_command(
        {"command": ["python", "-m", "x"], "args": ["--pod=$(P)"]}, {"P": "p1"}
    )
    assert cmd == ["python", "-m", "x", "--pod=p1"]
    argv = launch.build_argv(
        launch.LaunchSpec(
            netns="kj-ns-p",
            hostname="p",
            command=cmd,
            mounts=[volumes.Mount(Path("/src dir"), "/ckpt", read_only=True)],
            working_dir="/w",
        ),
        launch.Tools(ip="/sbin/ip", unshare="/usr/bin/unshare", mount="/bin/mount"),
    )
    assert argv[:4] == ["/sbin/ip", "netns", "exec", "kj-ns-p"]
    assert argv[4:10] == ["/usr/bin/unshare", "--mount", "--uts", "--propagation", "private", "--"]
    script = argv[12]
    assert "/bin/mount --bind '/src dir' /ckpt" in script
    assert "remount,bind,ro /ckpt" in script
    assert script.rstrip().endswith('exec "$@"')
    assert argv[-4:] == ["python", "-m", "x", "--pod=p1"]


# ----------------------------------------------------------------------------- names, mounts


def test_names_fit_kernel_limits() -> None:
    host_if, peer_if = netns.veth_names("0123-uid")
    assert len(host_if) <= 15 and len(peer_if) <= 15
    assert netns.netns_name("ns", "job-worker-0") == "kj-ns-job-worker-0"


def test_mountpoints_created_and_removed(tmp_path: Path) -> None:
    mp = MountPoints(tmp_path / "record.json")
    target = tmp_path / "a" / "b" / "c"
    mp.ensure(str(target), is_file=False)
    mp.ensure(str(tmp_path / "f" / "termination-log"), is_file=True)
    assert target.is_dir()
    again = MountPoints(tmp_path / "record.json")  # a later agent finds the record
    removed = again.remove_all()
    assert str(tmp_path / "a") in removed and not (tmp_path / "a").exists()
    assert not (tmp_path / "f").exists()
    assert not (tmp_path / "record.json").exists()


# ----------------------------------------------------------------------------- kubectl logs


def test_log_runs_for_kubectl_logs() -> None:
    from kerasjob.localnode.logserver import select_run, tail_lines

    data = (
        b"==== kerasjob-localnode t0: starting container c of pod ns/p (restart 0) ====\n"
        b"first run\n"
        b"==== kerasjob-localnode t1: container c exited with code 1 ====\n"
        b"==== kerasjob-localnode t2: starting container c of pod ns/p (restart 1) ====\n"
        b"second run a\nsecond run b\n"
    )
    assert select_run(data, previous=False) == b"second run a\nsecond run b\n"
    assert select_run(data, previous=True) == b"first run\n"
    assert select_run(b"no markers\n", previous=False) == b"no markers\n"
    assert tail_lines(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert tail_lines(b"a\n", None) == b"a\n"
