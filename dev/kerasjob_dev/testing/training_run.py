"""One training job of the e2e tests: examples/mnist.yaml (or another example) as a user
applies it under another name and claim, its checkpoint claim (a hostPath volume of the
real node, or a ReadWriteMany claim on another cluster) and how to read it back.
Shared by test_training, test_network_policy_enforced, test_kueue_training and test_dra (test
modules never import each other)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import kerasjob_contract as contract
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT
from kerasjob_dev.objectstores import Stores
from kerasjob_dev.synckube import ApiError

STEP = re.compile(contract.LOG_STEP_RE, re.M)
RESUMED = re.compile(contract.LOG_RESUMED_RE, re.M)
FINAL = re.compile(contract.LOG_FINAL_RE, re.M)
JOBS = "/apis/kerasjob.dev/v1alpha1/namespaces/{ns}/kerasjobs"


class Run:
    """One job of the test: its name, namespace, checkpoint claim and how to read it back."""

    def __init__(self, dep: Any, name: str, tmp_path: Path) -> None:
        self.dep, self.kj, self.ns, self.name = dep, dep.kube, dep.namespace, name
        self.claim = f"{name}-ckpt"
        self.ckpt: Path | None = None
        self.pv: str | None = None
        self.tmp_path = tmp_path

    def log(self, pod: str) -> str:
        return self.kj.pod_log(self.ns, pod)

    def make_claim(self) -> None:
        if self.dep.cluster.local:
            self.ckpt = self.tmp_path / "ckpt"
            self.pv = localdeploy.shared_claim(self.kj, self.ns, self.claim, self.ckpt)
            return
        storage_class = os.environ.get("KERASJOB_TEST_STORAGE_CLASS")
        if not storage_class:
            pytest.skip("KERASJOB_TEST_STORAGE_CLASS (a ReadWriteMany class) is not set")
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": self.claim},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        self.kj.request("POST", f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims", body=claim)

    def cleanup(self) -> None:
        for path in (
            f"{JOBS.format(ns=self.ns)}/{self.name}",
            f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/{self.claim}",
        ):
            with contextlib.suppress(ApiError):
                self.kj.request("DELETE", path)
        if self.pv:
            localdeploy.delete_volume(self.kj, self.pv)

    def progress_files(self) -> list[dict[str, Any]] | None:
        """progress.json files the chief wrote (None: not readable from here)."""
        if self.ckpt is None:
            return None
        return [json.loads(p.read_text()) for p in self.ckpt.rglob("progress.json")]

    def status(self) -> dict[str, Any]:
        return (self.kj.get(f"{JOBS.format(ns=self.ns)}/{self.name}") or {}).get("status") or {}


def mnist_job(name: str, claim: str, example: str = "mnist.yaml", **trainer: Any) -> dict[str, Any]:
    """examples/mnist.yaml (or `example`) as a user applies it, under another name and claim
    (and with these spec.trainer fields changed)."""
    job = yaml.safe_load((REPO_ROOT / "examples" / example).read_text())
    job["spec"].setdefault("trainer", {}).update(trainer)
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": claim}}
    job["spec"].pop("ttlSecondsAfterFinished", None)  # keep it for the assertions
    return job


def last_step(text: str) -> int:
    steps = STEP.findall(text)
    return int(steps[-1][0]) if steps else 0


def node_ip(kube: Any) -> str:
    """The real node's InternalIP (the KWOK nodes are skipped)."""
    for node in (kube.get("/api/v1/nodes") or {}).get("items") or []:
        if (node["metadata"].get("labels") or {}).get("type") == "kwok":
            continue
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
    raise AssertionError("no real node with an InternalIP")


def bucket_job(
    job: dict[str, Any], stores: Stores, kube: Any, namespace: str, prefix: str = "e2e"
) -> str:
    """`job` with `spec.checkpoint.location: s3://...` on `stores` (no volume) and a Secret
    of its S3 keys in `namespace`, made here; returns the Secret's name."""
    secret = f"{job['metadata']['name']}-s3"
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret},
        "stringData": {
            key: stores.env[key] for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        },
    }
    kube.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)
    save_freq = job["spec"]["checkpoint"].get("saveFreq")
    job["spec"]["checkpoint"] = {
        "location": f"s3://{stores.bucket}/{prefix}",
        "endpoint": stores.s3_endpoint,
        "pathStyle": True,
        "credentials": {"secretName": secret},
        **({"saveFreq": save_freq} if save_freq else {}),
    }
    return secret
