"""`kerasjob logs --previous / --all-incarnations` (kerasjob.sdk.incarnations): the reader
Pod it makes, and its program run here on files laid out as the supervisor writes them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kerasjob.sdk import incarnations
from kerasjob.sdk.client import load_job
from kerasjob.sdk.errors import KerasJobError
from kerasjob_dev import REPO_ROOT

UID = "0f0f0f0f-1111-2222-3333-444444444444"


def job(volume: dict[str, Any] | None = None) -> Any:
    j = load_job(REPO_ROOT / "examples" / "mnist.yaml")
    body = j.model_dump(by_alias=True, exclude_none=True)
    body["metadata"].update(namespace="ns", uid=UID)
    body["spec"]["checkpoint"]["volume"] = volume or {"persistentVolumeClaim": {"claimName": "c"}}
    return load_job(body)


class ReaderTransport:
    """The API server and node in one: the reader Pod's program runs here, on `root` as the
    checkpoint volume; the job's Pods are `pods`."""

    def __init__(self, root: Path, pods: dict[str, dict[str, Any]]) -> None:
        self.root, self.pods = root, pods
        self.created: dict[str, Any] = {}
        self.deleted: list[str] = []
        self.output = ""

    def get(self, path: str) -> dict[str, Any] | None:
        name = path.rsplit("/", 1)[-1]
        if name == self.created.get("metadata", {}).get("name"):
            return {"status": {"phase": "Succeeded"}}
        return self.pods.get(name)

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "POST":
            self.created = kw["body"]
            argv = self.created["spec"]["containers"][0]["command"]
            mount = incarnations.READER_MOUNT
            args = [a.replace(mount, str(self.root)) for a in argv[3:]]
            self.output = subprocess.run(
                [sys.executable, "-c", argv[2], *args], capture_output=True, text=True, check=True
            ).stdout
        elif method == "DELETE":
            self.deleted.append(path.rsplit("/", 1)[-1])
        elif method == "GET":  # the job's Pods by label
            return {"items": list(self.pods.values())}
        return {}

    def lines(self, path: str, **kw: Any) -> Any:
        yield from self.output.rstrip("\n").split("\n") if self.output else []


def lay_out(root: Path, replica: str, texts: list[str]) -> None:
    d = root / "ns" / "mnist" / UID / "logs" / replica
    d.mkdir(parents=True)
    for n, text in enumerate(texts, 1):
        (d / f"{n:04d}.log").write_text(text)


def pod(node: str = "node-a", started: bool = True) -> dict[str, Any]:
    state = {"running": {}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "spec": {
            "nodeName": node,
            "containers": [{"name": "trainer", "image": "kerasjob/trainer:dev-cpu"}],
        },
        "status": {"containerStatuses": [{"name": "trainer", "state": state}]},
    }


def test_previous_is_the_incarnation_before_the_one_the_pod_shows(tmp_path: Path) -> None:
    lay_out(tmp_path, "worker-1", ["first\n", "lost pod's last\n", "current\n"])
    t = ReaderTransport(tmp_path, {"mnist-worker-1": pod()})
    lines = incarnations.read(t, job(), ["mnist-worker-1"], "previous")  # type: ignore[arg-type]
    assert [(ln.pod, ln.text) for ln in lines] == [("mnist-worker-1", "lost pod's last")]
    spec = t.created["spec"]
    assert spec["nodeName"] == "node-a"  # where the job's Pod mounts the volume
    assert spec["containers"][0]["image"] == "kerasjob/trainer:dev-cpu"
    assert spec["containers"][0]["volumeMounts"][0]["readOnly"] is True
    assert spec["volumes"] == [{"name": "checkpoint", "persistentVolumeClaim": {"claimName": "c"}}]
    assert t.deleted == [t.created["metadata"]["name"]]


def test_without_the_pod_previous_is_the_last_and_all_is_every_one(tmp_path: Path) -> None:
    lay_out(tmp_path, "worker-0", ["a1\na2\n", "b\n"])
    lay_out(tmp_path, "worker-1", ["c\n"])
    t = ReaderTransport(tmp_path, {"mnist-worker-0": pod()})
    got = incarnations.read(t, job(), ["mnist-worker-1"], "previous")  # type: ignore[arg-type]
    assert [ln.text for ln in got] == ["c"]
    both = ["mnist-worker-0", "mnist-worker-1"]
    every = incarnations.read(t, job(), both, "all")  # type: ignore[arg-type]
    assert [str(ln) for ln in every] == [
        "[mnist-worker-0] a1",
        "[mnist-worker-0] a2",
        "[mnist-worker-0] b",
        "[mnist-worker-1] c",
    ]


def test_a_pod_not_started_yet_shows_nothing_of_its_own(tmp_path: Path) -> None:
    lay_out(tmp_path, "worker-1", ["first\n", "lost pod's last\n"])
    t = ReaderTransport(tmp_path, {"mnist-worker-1": pod(started=False)})
    got = incarnations.read(t, job(), ["mnist-worker-1"], "previous")  # type: ignore[arg-type]
    assert [ln.text for ln in got] == ["lost pod's last"]


def test_nothing_kept_is_no_lines(tmp_path: Path) -> None:
    t = ReaderTransport(tmp_path, {"mnist-worker-0": pod()})
    assert incarnations.read(t, job(), ["mnist-worker-0"], "all") == []  # type: ignore[arg-type]


def test_an_emptydir_or_no_image_is_a_clear_error() -> None:
    with pytest.raises(KerasJobError, match="emptyDir"):
        incarnations.reader_pod(job({"emptyDir": {}}), "all", {"worker-0": 0}, pod())
    with pytest.raises(KerasJobError, match=r"no Pod and no spec\.image"):
        incarnations.reader_pod(job(), "all", {"worker-0": 0}, None)
