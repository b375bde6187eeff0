"""The kind cluster configuration of ``make kind-e2e`` (``hack/kind/e2e.sh``).

``hack/kind/kind-config.yaml`` is the cluster (one control plane, two workers sharing a host
directory for ReadWriteMany checkpoints); :func:`render` makes the file kind is given:

* every ``extraMounts`` entry's ``hostPath`` becomes the run's shared directory;
* with the local node image of ``hack/kind/node-image.sh`` (recognised by its labels, see
  :data:`LABEL_PREFIX`), kubeadm is told the names of the images baked into it (a
  ``ClusterConfiguration`` patch: ``imageRepository``, etcd's and CoreDNS's tags); with any
  other image (kind's own ``kindest/node``) nothing else changes.

Command line (what e2e.sh runs)::

    python -m kerasjob_dev.kindconfig --base hack/kind/kind-config.yaml \\
        --shared-dir /tmp/kerasjob-kind-shared --image-labels "$(docker image inspect ...)"
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

#: Labels of the local node image (hack/kind/node/Dockerfile), each ``<prefix>.<field>``.
LABEL_PREFIX = "dev.kerasjob.kind-node"
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPOSITORY = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


class KindConfigError(ValueError):
    """Bad input for the configuration, said in one line."""


@dataclass(frozen=True)
class LocalImages:
    """Where the local node image's control-plane images are, as kubeadm must be told."""

    repository: str
    etcd_tag: str
    coredns_tag: str

    @classmethod
    def from_labels(cls, labels: Mapping[str, str] | None) -> LocalImages | None:
        """The settings in a node image's labels; None for an image without them (kind's)."""
        ours = {
            k.removeprefix(LABEL_PREFIX + "."): v
            for k, v in (labels or {}).items()
            if k.startswith(LABEL_PREFIX + ".")
        }
        if not ours:
            return None
        fields = {"image-repository", "etcd-tag", "coredns-tag"}
        if missing := sorted(fields - ours.keys()):
            raise KindConfigError(f"node image labels lack {LABEL_PREFIX}.{missing[0]}")
        images = cls(ours["image-repository"], ours["etcd-tag"], ours["coredns-tag"])
        if not _REPOSITORY.match(images.repository):
            raise KindConfigError(f"bad image repository in the labels: {images.repository!r}")
        for name, tag in (("etcd", images.etcd_tag), ("coredns", images.coredns_tag)):
            if not _TAG.match(tag):
                raise KindConfigError(f"bad {name} image tag in the labels: {tag!r}")
        return images

    def kubeadm_patch(self) -> str:
        """The kubeadm ClusterConfiguration patch naming these images."""
        patch = {
            "kind": "ClusterConfiguration",
            "imageRepository": self.repository,
            "etcd": {"local": {"imageTag": self.etcd_tag}},
            "dns": {"imageTag": self.coredns_tag},
        }
        return yaml.safe_dump(patch, sort_keys=False)


def render(
    base: Mapping[str, Any], shared_dir: str, local: LocalImages | None = None
) -> dict[str, Any]:
    """The kind configuration for a run: ``base`` with ``shared_dir`` mounted on the nodes
    that mount anything, and the local image's settings when ``local`` is given."""
    if base.get("kind") != "Cluster" or not str(base.get("apiVersion", "")).startswith(
        "kind.x-k8s.io/"
    ):
        raise KindConfigError("the base is not a kind Cluster configuration")
    path = PurePosixPath(shared_dir)
    if not path.is_absolute() or ".." in path.parts:
        raise KindConfigError(f"the shared directory must be an absolute path: {shared_dir!r}")
    config = copy.deepcopy(dict(base))
    nodes = config.get("nodes") or []
    if not any(n.get("role") == "worker" for n in nodes):
        raise KindConfigError("the base has no worker node")
    for node in nodes:
        for mount in node.get("extraMounts") or []:
            mount["hostPath"] = str(path)
    if local is not None:
        config["kubeadmConfigPatches"] = [
            *config.get("kubeadmConfigPatches", []),
            local.kubeadm_patch(),
        ]
    return config


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the kubeadm patches) as literal blocks, as people write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(config: Mapping[str, Any]) -> str:
    """The configuration as YAML (what kind reads)."""
    return yaml.dump(dict(config), Dumper=_Dumper, sort_keys=False)


def _labels(text: str) -> dict[str, str] | None:
    """The labels of ``docker image inspect -f '{{json .Config.Labels}}'`` ('' or 'null': none)."""
    if text.strip() in ("", "null"):
        return None
    try:
        labels = json.loads(text)
    except json.JSONDecodeError as e:
        raise KindConfigError(f"--image-labels is not JSON: {e}") from e
    if not isinstance(labels, dict):
        raise KindConfigError("--image-labels must be a JSON object")
    return {str(k): str(v) for k, v in labels.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kerasjob_dev.kindconfig", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--base", required=True, help="hack/kind/kind-config.yaml")
    parser.add_argument("--shared-dir", required=True, help="host directory the workers share")
    parser.add_argument(
        "--image-labels", default="", help="the node image's labels as JSON ('' for kind's)"
    )
    args = parser.parse_args(argv)
    try:
        with open(args.base, encoding="utf-8") as f:
            base = yaml.safe_load(f)
        config = render(base, args.shared_dir, LocalImages.from_labels(_labels(args.image_labels)))
    except (OSError, yaml.YAMLError, KindConfigError) as e:
        print(f"kindconfig: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(dump(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
