"""Poison input against the real API server: objects the API server stores but that once
crashed or stalled the operator for every job.

A KerasJob whose ``spec.template`` nests thousands of levels deep is accepted (Go's decoder
allows 10,000 levels; the template is schemaless). It crashed the operator at every start
(RecursionError in kopf's LIST). Now each such job is Failed (InvalidSpec) with a message,
the operator keeps serving a valid job beside it, and survives a restart with them present.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kerasjob.k8s import bounded
from kerasjob_dev.cluster import Cluster, wait_for
from kerasjob_dev.harness import (
    OperatorProcess,
    condition,
    core,
    create_job,
    events_for,
    job_manifest,
    job_status,
    own_namespace,
    own_operator,
    pods,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

# This test's own client reads these jobs back too.
bounded.install()

#: Levels of nesting inside spec.template.spec: past the 32 allowed, past what the C JSON
#: decoder can decode at the default recursion limit, and near Go's limit of 10,000.
DEPTHS = (40, 500, 3000, 9000)


def deep_job(name: str, depth: int, *, lists: bool = False) -> str:
    """The JSON of a KerasJob with a template ``depth`` levels deep (built as text: Python's
    own encoder cannot write it either)."""
    opening, closing = ("[", "]") if lists else ('{"a":', "}")
    inner = opening * depth + ("" if lists else "{}") + closing * depth
    body = job_manifest(name, workers=1)
    body["spec"]["checkpoint"] = {"volume": {"emptyDir": {}}}
    text = json.dumps(body)
    marker = '"template": {"spec": {'
    assert marker in text
    return text.replace(marker, f'"template": {{"deep": {inner}, "spec": {{', 1)


@pytest.fixture
def poison_ns(cluster: Cluster, kube: Any, kwok_placement: dict[str, Any]) -> Iterator[str]:
    yield from own_namespace(kube, "poison")


@pytest.fixture
def operator(cluster: Cluster, poison_ns: str) -> Iterator[OperatorProcess]:
    yield from own_operator(cluster, poison_ns, "poison")


def assert_failed_too_deep(kube: Any, ns: str, name: str) -> None:
    status = wait_phase(kube, ns, name, "Failed", timeout=20)
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec", status
    assert "nested more than 32 levels deep" in failed["message"], failed
    wait_for(
        lambda: any(e.reason == "InvalidSpec" for e in events_for(kube, ns, name)),
        timeout=10,
        what=f"an InvalidSpec event of {name}",
    )
    assert not pods(kube, ns, name)


def test_deeply_nested_templates_fail_alone(
    cluster: Cluster, kube: Any, poison_ns: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    names = []
    for depth in DEPTHS:
        for lists in (False, True):
            name = f"deep-{depth}-{'list' if lists else 'map'}"
            path = tmp_path / f"{name}.json"
            path.write_text(deep_job(name, depth, lists=lists))
            cluster.kubectl("create", "-n", poison_ns, "-f", str(path))
            names.append(name)
    create_job(kube, poison_ns, job_manifest("valid", workers=2))
    for name in names:  # arrived through the watch
        assert_failed_too_deep(kube, poison_ns, name)
    wait_phase(kube, poison_ns, "valid", "Running")
    assert operator.alive()

    # A restart LISTs them all at once (the path that crashed at every start).
    operator.restart()
    create_job(kube, poison_ns, job_manifest("valid-after-restart", workers=1))
    wait_phase(kube, poison_ns, "valid-after-restart", "Running")
    assert operator.alive()
    log = operator.log_path.read_text(errors="replace")
    assert "RecursionError" not in log and "Traceback" not in log, operator.log_tail()

    # The CLI reads them too.
    cli = subprocess.run(
        [sys.executable, "-m", "kerasjob", "status", "-n", poison_ns],
        capture_output=True,
        text=True,
        env=cluster.env(),
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert "deep-9000-map" in cli.stdout and "Traceback" not in cli.stderr


#: Templates that make a Pod the API server refuses (id, template, a fragment of its message).
INVALID_PODS: list[tuple[str, dict[str, Any], str]] = [
    (
        "cpu-quantity",
        {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {"cpu": "lots"}}}]}},
        "quantities must match the regular expression",
    ),
    ("no-container", {"spec": {"containers": None}}, "spec.containers: Required value"),
    (
        "image-removed",
        {"spec": {"containers": [{"name": "trainer", "image": None}]}},
        "spec.containers[0].image: Required value",
    ),
    (
        "field-typo",
        {"spec": {"containers": [{"name": "trainer", "resorces": {"limits": {"cpu": "1"}}}]}},
        'unknown field "spec.containers[0].resorces"',
    ),
]


@pytest.mark.parametrize(
    ("template", "fragment"),
    [case[1:] for case in INVALID_PODS],
    ids=[case[0] for case in INVALID_PODS],
)
def test_a_pod_the_api_server_refuses_fails_the_job_with_its_message(
    kube: Any,
    poison_ns: str,
    operator: OperatorProcess,
    template: dict[str, Any],
    fragment: str,
) -> None:
    body = job_manifest("bad-pod", workers=2)
    body["spec"]["template"] = merge_template(body["spec"]["template"], template)
    create_job(kube, poison_ns, body)
    status = wait_phase(kube, poison_ns, "bad-pod", "Failed", timeout=20)
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "PodRejected", status
    assert fragment in failed["message"], failed["message"]
    wait_for(
        lambda: any(
            e.type == "Warning" and e.reason == "PodRejected" and fragment in e.message
            for e in events_for(kube, poison_ns, "bad-pod")
        ),
        timeout=10,
        what="a Warning event PodRejected with the API's message",
    )
    assert not pods(kube, poison_ns, "bad-pod")
    create_job(kube, poison_ns, job_manifest("good", workers=1))
    wait_phase(kube, poison_ns, "good", "Running")
    assert operator.alive()


def merge_template(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_template(out[key], value)
        else:
            out[key] = value
    return out


def test_a_forbidden_pod_waits_with_the_reason_and_runs_once_allowed(
    cluster: Cluster, kube: Any, poison_ns: str, operator: OperatorProcess
) -> None:
    cluster.kubectl("create", "quota", "one-pod", "--hard=pods=1", "-n", poison_ns)
    wait_for(
        lambda: (
            "pods"
            in (core(kube).read_namespaced_resource_quota("one-pod", poison_ns).status.hard or {})
        ),
        timeout=20,
        what="the quota's status",
    )
    create_job(kube, poison_ns, job_manifest("over-quota", workers=2))

    def forbidden() -> dict[str, Any] | None:
        created = condition(job_status(kube, poison_ns, "over-quota"), "Created")
        ok = created and created["status"] == "False" and created["reason"] == "CreateForbidden"
        return created if ok else None

    created = wait_for(forbidden, timeout=30, what="Created False, reason CreateForbidden")
    assert "exceeded quota" in created["message"], created
    assert job_status(kube, poison_ns, "over-quota")["phase"] == "Pending"
    wait_for(  # events are posted in the background, right after the status write
        lambda: any(
            e.reason == "CreateForbidden" for e in events_for(kube, poison_ns, "over-quota")
        ),
        timeout=10,
        what="a Warning event CreateForbidden",
    )
    cluster.kubectl("delete", "quota", "one-pod", "-n", poison_ns)
    status = wait_phase(kube, poison_ns, "over-quota", "Running", timeout=90)
    assert condition(status, "Created")["status"] == "True"  # type: ignore[index]
