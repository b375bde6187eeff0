"""The kind path of ``make kind-e2e`` (hack/kind), without Docker: the configuration kind is
given (:mod:`kerasjob_dev.kindconfig`) and the pins and names the scripts must agree on."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from kerasjob_dev import REPO_ROOT
from kerasjob_dev.kindconfig import (
    LABEL_PREFIX,
    KindConfigError,
    LocalImages,
    dump,
    main,
    render,
)

KIND = REPO_ROOT / "hack" / "kind"
BASE = yaml.safe_load((KIND / "kind-config.yaml").read_text())
LABELS = {
    f"{LABEL_PREFIX}.image-repository": "kerasjob.local",
    f"{LABEL_PREFIX}.etcd-tag": "v3.6.16",
    f"{LABEL_PREFIX}.coredns-tag": "v1.14.7",
    "org.opencontainers.image.description": "anything",
}


def _patches(config: dict) -> list[dict]:
    return [yaml.safe_load(p) for p in config.get("kubeadmConfigPatches", [])]


def test_kinds_own_image_gets_the_base_with_the_shared_directory() -> None:
    config = render(BASE, "/tmp/run-shared")
    mounts = [m for n in config["nodes"] for m in n.get("extraMounts", [])]
    assert len(mounts) == 2  # both workers, not the control plane
    assert {m["hostPath"] for m in mounts} == {"/tmp/run-shared"}
    assert _patches(config) == [{"kind": "KubeletConfiguration", "failCgroupV1": False}]
    # the base itself is untouched
    assert {m["hostPath"] for n in BASE["nodes"] for m in n.get("extraMounts", [])} == {
        "/tmp/kerasjob-kind-shared"
    }


def test_the_local_image_gets_kubeadm_told_its_images_names() -> None:
    local = LocalImages.from_labels(LABELS)
    assert local == LocalImages("kerasjob.local", "v3.6.16", "v1.14.7")
    config = render(BASE, "/srv/shared", local)
    assert _patches(config)[-1] == {
        "kind": "ClusterConfiguration",
        "imageRepository": "kerasjob.local",
        "etcd": {"local": {"imageTag": "v3.6.16"}},
        "dns": {"imageTag": "v1.14.7"},
    }
    # what kind reads: the patches as literal blocks, the same configuration back
    text = dump(config)
    assert "- |\n  kind: ClusterConfiguration\n" in text
    assert yaml.safe_load(text) == config


@pytest.mark.parametrize("labels", [None, {}, {"org.opencontainers.image.version": "1"}])
def test_an_image_without_our_labels_is_kinds(labels: dict[str, str] | None) -> None:
    assert LocalImages.from_labels(labels) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({f"{LABEL_PREFIX}.etcd-tag": None}, "lack dev.kerasjob.kind-node.etcd-tag"),
        ({f"{LABEL_PREFIX}.coredns-tag": "v1 ; rm"}, "bad coredns image tag"),
        ({f"{LABEL_PREFIX}.image-repository": "Kerasjob.Local"}, "bad image repository"),
    ],
)
def test_bad_labels_are_refused(change: dict[str, str | None], message: str) -> None:
    labels = {k: v for k, v in {**LABELS, **change}.items() if v is not None}
    with pytest.raises(KindConfigError, match=re.escape(message)):
        LocalImages.from_labels(labels)


@pytest.mark.parametrize(
    ("base", "shared", "message"),
    [
        (BASE, "relative/dir", "absolute path"),
        (BASE, "/tmp/../etc", "absolute path"),
        ({**BASE, "kind": "Pod"}, "/tmp/x", "not a kind Cluster"),
        ({**BASE, "nodes": [{"role": "control-plane"}]}, "/tmp/x", "no worker"),
    ],
)
def test_bad_input_is_refused(base: dict, shared: str, message: str) -> None:
    with pytest.raises(KindConfigError, match=message):
        render(base, shared)


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = str(KIND / "kind-config.yaml")
    assert (
        main(["--base", base, "--shared-dir", "/tmp/s", "--image-labels", json.dumps(LABELS)]) == 0
    )
    patches = yaml.safe_load(capsys.readouterr().out)["kubeadmConfigPatches"]
    assert "imageRepository: kerasjob.local" in patches[-1]
    assert main(["--base", base, "--shared-dir", "/tmp/s", "--image-labels", "null"]) == 0
    assert len(yaml.safe_load(capsys.readouterr().out)["kubeadmConfigPatches"]) == 1
    assert main(["--base", base, "--shared-dir", "/tmp/s", "--image-labels", "{"]) == 2
    assert "--image-labels is not JSON" in capsys.readouterr().err


def test_the_workers_mount_where_the_persistent_volumes_are() -> None:
    container_paths = {m["containerPath"] for n in BASE["nodes"] for m in n.get("extraMounts", [])}
    volumes = [
        d
        for d in yaml.safe_load_all((KIND / "shared-storage.yaml").read_text())
        if d["kind"] == "PersistentVolume"
    ]
    assert container_paths == {"/var/kerasjob-shared"}
    assert volumes and all(
        str(Path(v["spec"]["hostPath"]["path"]).parent) == "/var/kerasjob-shared" for v in volumes
    )


def _require(go_mod: Path, module: str) -> str:
    match = re.search(rf"^require {re.escape(module)} (\S+)$", go_mod.read_text(), re.M)
    assert match, f"{go_mod} does not require {module}"
    return match.group(1)


def test_kubeadm_is_pinned_at_the_local_clusters_kubernetes() -> None:
    kube = REPO_ROOT / "hack" / "cluster" / "gomod" / "kube" / "go.mod"
    kubeadm = KIND / "gomod" / "kubeadm" / "go.mod"
    assert _require(kubeadm, "k8s.io/kubernetes") == _require(kube, "k8s.io/kubernetes")

    def replaces(p: Path) -> list[str]:
        return [ln.strip() for ln in p.read_text().splitlines() if "=>" in ln]

    assert replaces(kubeadm) == replaces(kube)


def test_the_node_image_labels_are_the_ones_the_renderer_reads() -> None:
    dockerfile = (KIND / "node" / "Dockerfile").read_text()
    found = set(re.findall(rf"{re.escape(LABEL_PREFIX)}\.([a-z-]+)=", dockerfile))
    assert found == {"image-repository", "etcd-tag", "coredns-tag"}


RUNC_BOUNDED = REPO_ROOT / "hack" / "images" / "runc-bounded.sh"


def _runc_bounded(*args: str) -> subprocess.CompletedProcess[str]:
    """runc-bounded.sh with `true` as runc: it only rewrites the bundle or process file."""
    env = {**os.environ, "KERASJOB_RUNC": "true"}
    return subprocess.run(
        ["bash", str(RUNC_BOUNDED), *args], env=env, capture_output=True, text=True, check=True
    )


def test_runc_bounded_drops_exactly_the_capabilities_root_lacks(tmp_path: Path) -> None:
    """kind's privileged nodes ask for every capability; runc-bounded.sh removes those this
    machine's bounding set lacks (CAP_SYS_RESOURCE on ours) and keeps the others."""
    missing = set(_runc_bounded("--missing").stdout.split())
    assert all(c.startswith("CAP_") for c in missing)
    every = ["CAP_CHOWN", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_BPF"]
    caps = {"bounding": every, "effective": every, "permitted": every}
    (tmp_path / "config.json").write_text(json.dumps({"process": {"capabilities": caps}}))
    _runc_bounded("--root", "/run/x", "create", "--bundle", str(tmp_path), "id0")
    kept = json.loads((tmp_path / "config.json").read_text())["process"]["capabilities"]
    assert kept == {k: [c for c in every if c not in missing] for k in caps}
    # exec: the process file; any other command: nothing is touched
    (tmp_path / "process.json").write_text(json.dumps({"capabilities": {"bounding": every}}))
    _runc_bounded("exec", "--process", str(tmp_path / "process.json"), "id0")
    exec_kept = json.loads((tmp_path / "process.json").read_text())["capabilities"]["bounding"]
    assert exec_kept == [c for c in every if c not in missing]
    (tmp_path / "config.json").write_text(json.dumps({"process": {"capabilities": caps}}))
    _runc_bounded("delete", "--bundle", str(tmp_path), "id0")
    assert json.loads((tmp_path / "config.json").read_text())["process"]["capabilities"] == caps
