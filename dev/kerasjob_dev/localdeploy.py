"""Run kerasjob on the local cluster the way users run it: `make demo` and the e2e tests.

One place for the steps both take:

* :func:`build_images` -- the operator and trainer images (``hack/images/build.sh``, cached),
  exported as archives for the node's containerd, and the example images
  (``examples/<name>/Dockerfile``);
* :func:`load_images` -- imported into the real node (``hack/cluster/node.sh load``);
  :func:`load_archives` for an example image that one test needs;
* :func:`install_operator` / :func:`uninstall_operator` -- ``helm upgrade --install`` of
  ``charts/kerasjob-operator`` with the built operator image: the operator runs in-cluster,
  as the chart's hardened Pod, with the chart's ServiceAccount and RBAC;
* :func:`shared_claim` -- a ReadWriteMany checkpoint claim bound to a hostPath volume of the
  node (the node is this machine, so its files are readable here).

Nothing here imitates a part of Kubernetes: every step is what a user types, run for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kerasjob_contract.images import DEV_TAG, operator_image, trainer_image
from kerasjob_dev import REPO_ROOT
from kerasjob_dev.synckube import ApiError, Kube

CHART = REPO_ROOT / "charts" / "kerasjob-operator"
IMAGE_TAG = DEV_TAG
OPERATOR_IMAGE = operator_image(IMAGE_TAG)
TRAINER_IMAGE = trainer_image("cpu", IMAGE_TAG)
#: The Keras 3 image (backend jax); the chart makes it the operator's default for jax jobs.
TRAINER_JAX_IMAGE = trainer_image("jax-cpu", IMAGE_TAG)
#: The trainer variants the local deployment builds (hack/images/build.sh IMAGE_VARIANTS).
#: Not gpu: the CUDA image is 6.3 GB more to build, export and import, and the node has no
#: GPU; `make test-gpu-image` builds and checks it.
IMAGE_VARIANTS = "cpu jax-cpu"
#: Archives `hack/images/build.sh --export` writes (name -> file stem).
ARCHIVES = {
    OPERATOR_IMAGE: "operator",
    TRAINER_IMAGE: "trainer-cpu",
    TRAINER_JAX_IMAGE: "trainer-jax-cpu",
}
#: A user's TFJob image, played by examples/tfjob-mnist (build.sh builds it FROM the trainer).
TFJOB_MNIST_IMAGE = f"kerasjob.local/tfjob-mnist:{IMAGE_TAG}"
#: Example images' archives (name -> file stem): loaded by the tests that run them.
EXAMPLE_ARCHIVES = {TFJOB_MNIST_IMAGE: "tfjob-mnist"}


class DeployError(RuntimeError):
    """A step failed; the message says which and where its output is."""


def cache_dir() -> Path:
    return Path(os.environ.get("KERASJOB_CACHE", Path.home() / ".cache" / "kerasjob"))


def export_dir() -> Path:
    return cache_dir() / "images" / "export"


def _run(argv: list[str], what: str, timeout: float, env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise DeployError(f"{what}: timed out after {timeout:g} s") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise DeployError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


@dataclass(frozen=True)
class Images:
    """Built image archives and how long building (or confirming) them took."""

    archives: dict[str, Path]
    seconds: float
    summary: str
    #: The example images' archives (not loaded by :func:`load_images`).
    examples: dict[str, Path]


class ImageBuild:
    """`hack/images/build.sh --export` running in the background (the demo overlaps it with
    the Go build of the cluster's binaries); :meth:`wait` gives its :class:`Images`.

    `variants` are the trainer variants (default: :data:`IMAGE_VARIANTS`), `examples` whether
    the example images are built too (the tests that run them need them; the demo does not).
    """

    def __init__(self, variants: str = IMAGE_VARIANTS, examples: bool = True) -> None:
        self.t0 = time.monotonic()
        self.variants = variants.split()
        self.examples = examples
        env = {**os.environ, "IMAGE_VARIANTS": variants}
        if not examples:
            env["KERASJOB_EXAMPLE_IMAGES"] = "0"
        # --stop: a private Docker daemon started for the build does not outlive it.
        argv = [str(REPO_ROOT / "hack/images/build.sh"), "--export", str(export_dir()), "-q"]
        self.proc = subprocess.Popen(
            [*argv, "--stop"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )

    def wait(self, timeout: float = 3600) -> Images:
        what = "building the images (hack/images/build.sh)"
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.proc.kill()
            raise DeployError(f"{what}: timed out after {timeout:g} s") from e
        if self.proc.returncode != 0:
            tail = "\n".join((err or out).strip().splitlines()[-15:])
            raise DeployError(f"{what} failed (exit {self.proc.returncode}):\n{tail}")
        wanted = {OPERATOR_IMAGE, *(trainer_image(v, IMAGE_TAG) for v in self.variants)}
        archives = {i: export_dir() / f"{stem}.tar" for i, stem in ARCHIVES.items() if i in wanted}
        examples = {
            image: export_dir() / f"{stem}.tar"
            for image, stem in EXAMPLE_ARCHIVES.items()
            if self.examples
        }
        missing = [str(p) for p in [*archives.values(), *examples.values()] if not p.exists()]
        if missing:
            raise DeployError(f"hack/images/build.sh wrote no {', '.join(missing)}")
        return Images(archives, time.monotonic() - self.t0, out.strip(), examples)


def build_images(timeout: float = 3600) -> Images:
    """Build (or confirm, in seconds when nothing changed) the images and export them."""
    return ImageBuild().wait(timeout)


def load_images(images: Images, timeout: float = 900) -> float:
    """Import the operator and trainer archives into the real node's containerd."""
    return load_archives(list(images.archives.values()), timeout)


def load_archives(archives: list[Path], timeout: float = 900) -> float:
    """Import image archives into the real node's containerd (skipped for ones already
    there); the seconds it took."""
    t0 = time.monotonic()
    _run(
        [str(REPO_ROOT / "hack/cluster/node.sh"), "load", *map(str, archives)],
        "loading the images into the node (hack/cluster/node.sh load)",
        timeout,
    )
    return time.monotonic() - t0


def install_operator(
    helm: str,
    kubeconfig: str,
    *,
    release: str,
    namespace: str,
    watch_namespaces: list[str],
    timeout_s: int = 240,
    extra: dict[str, Any] | None = None,
) -> None:
    """``helm upgrade --install`` the chart with the built images; waits for the Pod Ready."""
    values: dict[str, Any] = {
        "image": {"tag": IMAGE_TAG, "pullPolicy": "Never"},
        "trainerImage": {"tag": IMAGE_TAG, "variant": "cpu"},
        "watchNamespaces": watch_namespaces,
        **(extra or {}),
    }
    argv = [helm, "--kubeconfig", kubeconfig, "upgrade", "--install", release, str(CHART)]
    argv += ["--namespace", namespace, "--create-namespace", "--wait"]
    argv += ["--timeout", f"{timeout_s}s"]
    for key, value in values.items():
        argv += ["--set-json", f"{key}={json.dumps(value)}"]
    _run(argv, f"helm install of {release} into {namespace}", timeout_s + 60)


def uninstall_operator(helm: str, kubeconfig: str, *, release: str, namespace: str) -> None:
    argv = [helm, "--kubeconfig", kubeconfig, "uninstall", release, "--namespace", namespace]
    _run([*argv, "--wait", "--ignore-not-found"], f"helm uninstall of {release}", 180)


def shared_claim(kube: Kube, namespace: str, claim: str, directory: Path) -> str:
    """A ReadWriteMany claim ``claim`` in ``namespace``, bound to a hostPath volume at
    ``directory`` (created world-writable: the trainer runs as a non-root user and hostPath
    volumes get no fsGroup ownership change). Returns the PersistentVolume's name, which the
    caller deletes when done (PersistentVolumes are cluster-scoped)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    # Unique: a deleted PersistentVolume lingers until its protection finalizer is done.
    pv = f"{namespace}-{claim}-{uuid.uuid4().hex[:6]}"
    kube.request(
        "POST",
        "/api/v1/persistentvolumes",
        body={
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv, "labels": {"app.kubernetes.io/part-of": "kerasjob-dev"}},
            "spec": {
                "capacity": {"storage": "5Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": claim},
                "hostPath": {"path": str(directory), "type": "Directory"},
            },
        },
    )
    kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        body={
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return pv


def delete_volume(kube: Kube, pv: str) -> None:
    try:
        kube.request("DELETE", f"/api/v1/persistentvolumes/{pv}")
    except ApiError as e:
        if e.status != 404:
            raise


def container_id(pod: dict[str, Any], container: str = "trainer") -> str | None:
    """The runtime's id of a Pod's running container (``containerd://<id>`` -> ``<id>``)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container and "running" in (status.get("state") or {}):
            cid = status.get("containerID") or ""
            return cid.split("://", 1)[-1] or None
    return None


def kill_container(cid: str, signal: str = "SIGKILL") -> None:
    """Send a signal to a container's main process through the node's containerd (what an
    OOM kill or a crashed process looks like to the kubelet)."""
    _run(
        [str(REPO_ROOT / "hack/cluster/node.sh"), "kill", cid, signal],
        f"{signal} to container {cid[:12]}",
        30,
    )


def tag_image(src: str, dst: str) -> None:
    """Give an image imported into the real node another name: an operator "upgrade" to a
    new tag without rebuilding, or an example image under the name a user's manifest gives."""
    _run([str(REPO_ROOT / "hack/cluster/node.sh"), "tag", src, dst], f"tagging {src} as {dst}", 60)


def netcut(cid: str, cut: bool) -> None:
    """Drop (cut) or restore all traffic of a container's network namespace but loopback:
    a network partition of one Pod, inside the Pod only."""
    state = "on" if cut else "off"
    _run(
        [str(REPO_ROOT / "hack/cluster/node.sh"), "netcut", cid, state],
        f"network cut {state} for container {cid[:12]}",
        30,
    )
