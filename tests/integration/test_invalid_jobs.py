"""Invalid KerasJobs (corpus: invalid_jobs.yaml): rejected at apply, or failed by the operator.

Each entry must either be refused by the API server (schema, CEL; fieldValidation=Strict as
kubectl does) or be accepted and then be marked Failed with reason InvalidSpec and a Warning
event, with no Pod created and no retry loop. Meanwhile the same operator runs a valid job.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException

from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    condition,
    create_job,
    custom,
    events_for,
    isolated_namespace,
    job_manifest,
    pods,
    session_operator,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]

CORPUS: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "invalid_jobs.yaml").read_text()
)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def manifest(entry: dict[str, Any]) -> dict[str, Any]:
    base = job_manifest(entry.get("name", entry["id"]), workers=2)
    base["spec"] = deep_merge(base["spec"], entry.get("spec") or {})
    return base


@pytest.fixture(scope="module")
def corpus_ns(cluster: Cluster, kube: Any) -> Iterator[str]:
    yield from isolated_namespace(kube)


@pytest.fixture(scope="module")
def operator(cluster: Cluster) -> OperatorProcess:
    return session_operator(cluster)


def test_corpus_is_big_enough() -> None:
    assert len(CORPUS) >= 30
    assert len({e["id"] for e in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_invalid_job(
    operator: OperatorProcess, kube: Any, corpus_ns: str, entry: dict[str, Any]
) -> None:
    body = manifest(entry)
    name = body["metadata"]["name"]
    try:
        custom(kube).create_namespaced_custom_object(
            GROUP, VERSION, corpus_ns, PLURAL, body, field_validation="Strict"
        )
    except ApiException as e:
        assert e.status in (400, 422), e
        assert e.body and ("Invalid" in e.body or "unknown field" in e.body), e.body
        return
    status = wait_phase(kube, corpus_ns, name, "Failed", timeout=20)
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec"
    assert failed["message"].startswith("invalid spec: ")
    wait_for(
        lambda: any(
            e.type == "Warning" and e.reason == "InvalidSpec"
            for e in events_for(kube, corpus_ns, name)
        ),
        timeout=10,
        what="a Warning event InvalidSpec",
    )
    assert not pods(kube, corpus_ns, name)


def test_a_huge_label_value_is_refused_at_apply_naming_the_label(
    operator: OperatorProcess, kube: Any, corpus_ns: str
) -> None:
    """A 2 MB label value (issue 36): refused by the CRD's schema in one line naming the
    field, not later by etcd's request size ("request is too large"), which names none."""
    body = job_manifest("huge-label", workers=2)
    body["spec"]["template"]["metadata"] = {"labels": {"big": "x" * (2 * 1024 * 1024)}}
    with pytest.raises(ApiException) as refused:
        custom(kube).create_namespaced_custom_object(
            GROUP, VERSION, corpus_ns, PLURAL, body, field_validation="Strict"
        )
    assert refused.value.status == 422, refused.value.status
    message = json.loads(refused.value.body)["message"]
    assert "spec.template.metadata.labels.big" in message, message[:300]
    assert len(message) < 1000 and "\n" not in message, message[:300]
    assert "xxxxxxxxxx" not in message  # the value is not echoed back


def test_annotations_over_256_kib_fail_the_job_naming_the_field(
    operator: OperatorProcess, kube: Any, corpus_ns: str
) -> None:
    """300 kB of template annotations: the operator refuses the spec (InvalidSpec naming
    metadata.annotations) before any Pod, instead of the API server refusing every Pod."""
    body = job_manifest("huge-annotation", workers=2)
    body["spec"]["template"]["metadata"] = {"annotations": {"big": "x" * 300_000}}
    custom(kube).create_namespaced_custom_object(
        GROUP, VERSION, corpus_ns, PLURAL, body, field_validation="Strict"
    )
    status = wait_phase(kube, corpus_ns, "huge-annotation", "Failed", timeout=20)
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec", status
    assert "metadata.annotations" in failed["message"] and "256 KiB" in failed["message"]
    assert "xxxxxxxxxx" not in failed["message"]
    assert not pods(kube, corpus_ns, "huge-annotation")


def test_operator_keeps_serving_and_does_not_hot_loop(
    operator: OperatorProcess, kube: Any, corpus_ns: str
) -> None:
    create_job(kube, corpus_ns, job_manifest("valid", workers=2))
    status = wait_phase(kube, corpus_ns, "valid", "Running")
    assert status["restarts"] == {"disruptions": 0, "failures": 0}
    assert operator.alive()
    # No retry loop on the failed jobs: in 3 s at most one periodic resync of each job.
    jobs = len(custom(kube).list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"])
    before = operator.metrics()["kerasjob_operator_reconciles_total"]
    time.sleep(3)
    after = operator.metrics()["kerasjob_operator_reconciles_total"]
    assert after - before <= jobs + 10, f"{after - before} reconciles in 3 s, {jobs} jobs"
    assert "Traceback" not in operator.log_path.read_text(errors="replace")
