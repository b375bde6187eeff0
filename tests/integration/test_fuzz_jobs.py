"""Property-based fuzzing of the KerasJob API through the real API server and the operator.

Hypothesis writes KerasJobs, schema-valid and not: odd numbers and strings where numbers
go, unknown fields, bad mount paths and volumes, and templates with random containers,
quantities, env, typos and nested junk. Each one goes through the API server exactly as
``kubectl apply`` sends it (fieldValidation=Strict) and, if accepted, through the operator.

The properties: every job ends in one of

* rejected at apply, with the API server's message (HTTP 400/422);
* accepted and Running (its Pods on KWOK nodes), or Suspended when it asked to be;
* Failed with a reason and a message (InvalidSpec, PodRejected ...);
* clearly waiting: Pending with a condition that says why (a Pod cannot be scheduled, a
  create is forbidden);

and the operator never crashes (no exit, no traceback) nor hot-loops. The number of cases
is bounded (``KERASJOB_FUZZ_EXAMPLES``, default 60: about 20 s), the examples are
derandomised so CI is repeatable; ``KERASJOB_FUZZ_SEED`` explores other ones.
"""

from __future__ import annotations

import copy
import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from kerasjob_dev.cluster import Cluster, create_namespace, delete_namespace, wait_for
from kerasjob_dev.harness import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    condition,
    custom,
    install_crds,
    job_manifest,
    job_status,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("KERASJOB_FUZZ_EXAMPLES", "60"))
SEED = int(os.environ.get("KERASJOB_FUZZ_SEED", "0"))
#: Seconds an accepted job has to reach one of the outcomes above.
SETTLE_SECONDS = 20.0

# --- strategies ----------------------------------------------------------------------------


def few(fields: dict[str, Any], most: int) -> Any:
    """Objects with at most ``most`` of ``fields`` (each a strategy): mostly small changes,
    so that many jobs are valid or wrong in one way, not invalid in five."""
    return st.lists(st.sampled_from(sorted(fields)), max_size=most, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: fields[k] for k in keys})
    )


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=12),
)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
quantity = st.sampled_from(["1", "100m", "0.5", "1Gi", "lots", "-1", "1e3", "", "2Ki"])
container = st.fixed_dictionaries(
    {"name": st.sampled_from(["trainer", "trainer", "sidecar", "Bad_Name"])}
).flatmap(
    lambda named: few(
        {
            "image": st.sampled_from(["busybox", "", "kerasjob/trainer:test", None]),
            "resources": st.fixed_dictionaries(
                {},
                optional={
                    "requests": st.dictionaries(
                        st.sampled_from(["cpu", "memory"]), quantity, max_size=2
                    ),
                    "limits": st.dictionaries(
                        st.sampled_from(["cpu", "memory"]), quantity, max_size=2
                    ),
                },
            ),
            "resorces": json_any,
            "env": st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(["A", "TF_CONFIG", "KERASJOB_ROLE", "bad name"]),
                        "value": st.text(max_size=6),
                    }
                ),
                max_size=2,
            ),
            "args": st.lists(st.text(max_size=6), max_size=2),
            "ports": st.lists(
                st.fixed_dictionaries({"containerPort": st.integers(-1, 70000)}), max_size=1
            ),
            "volumeMounts": st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(["data", "kerasjob-checkpoint"]),
                        "mountPath": st.sampled_from(["/data", "/kerasjob/checkpoint", "relative"]),
                    }
                ),
                max_size=1,
            ),
        },
        2,
    ).map(lambda extra: {**named, **extra})
)
pod_spec = few(
    {
        "containers": st.none() | st.lists(container, max_size=2),
        "nodeSelector": st.dictionaries(
            st.sampled_from(["type", "zone"]), st.sampled_from(["kwok", "nowhere"]), max_size=1
        ),
        "restartPolicy": st.sampled_from(["Always", "Never"]),
        "priority": st.integers(-5, 5) | st.text(max_size=3),
        "securityContext": st.fixed_dictionaries(
            {}, optional={"runAsNonRoot": st.booleans(), "runAsUser": st.integers(-1, 2000)}
        ),
        "volumes": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["data", "kerasjob-checkpoint", "BAD"]),
                    "emptyDir": st.just({}),
                }
            ),
            max_size=1,
        ),
        "junk": json_any,
    },
    2,
)
template = few(
    {
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(
                    st.sampled_from(["a", "b/c", "bad key!"]), st.text(max_size=6), max_size=2
                ),
                "annotations": st.dictionaries(
                    st.sampled_from(["a", "b"]), st.sampled_from(["x", "y" * 300_000]), max_size=1
                ),
            },
        ),
        "spec": pod_spec,
        "replicas": st.integers(0, 3),
    },
    2,
)
checkpoint = few(
    {
        "volume": st.sampled_from(
            [
                {"hostPath": {"path": "/tmp/kerasjob-ckpt"}},
                {"emptyDir": {}},
                {"persistentVolumeclaim": {"claimName": "c"}},
                {"hostPath": {"path": "/a"}, "nfs": {}},
            ]
        ),
        "mountPath": st.sampled_from(
            ["/kerasjob/checkpoint", "/", "/../../etc", "/data/ckpt", "relative", "/tmp", "//x"]
        ),
        "saveFreq": st.integers(-1, 100),
    },
    1,
)
trainer = few(
    {
        "model": st.sampled_from(["mnist-mlp", "Bad Model!", "pkg.mod:fn", ""]),
        "epochs": st.integers(-1, 3),
        "learningRate": st.floats(-1, 1, allow_nan=False),
        "dataset": st.sampled_from(
            [
                {"source": "synthetic"},
                {"source": "path"},
                {"source": "s3"},
                {"source": "path", "path": "/data/x.npz"},
            ]
        ),
    },
    2,
)
replica = few({"replicas": st.integers(-1, 2), "template": template}, 2)
spec_fields = {
    "workers": st.integers(-1, 4) | st.just("two") | st.just(1001),
    "port": st.integers(-1, 70000) | st.sampled_from([2222, 9464]),
    "image": st.sampled_from(["kerasjob/trainer:test", "", "UPPER/case"]),
    "restartPolicy": st.sampled_from(["OnFailure", "Never", "ExitCode", "Always"]),
    "cleanPodPolicy": st.sampled_from(["Running", "All", "None", "Sometimes"]),
    "backoffLimit": st.integers(-1, 3),
    "activeDeadlineSeconds": st.integers(-1, 3600),
    "suspend": st.booleans(),
    "checkpoint": checkpoint,
    "trainer": trainer,
    "template": template,
    "chief": replica,
    "evaluator": replica,
    "wrokers": st.integers(1, 3),
}
spec = st.one_of(few(spec_fields, 1), few(spec_fields, 2), few(spec_fields, 4))
name_prefix = st.sampled_from(["fz", "fz", "fz", "has.dots", "a" * 60])

# --- the run -------------------------------------------------------------------------------

_counter = itertools.count()


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def outcome(status: dict[str, Any]) -> str | None:
    """Which acceptable end the job reached, or None (not yet)."""
    phase = status.get("phase")
    if phase in ("Running", "Suspended"):
        return phase.lower()
    if phase == "Failed":
        failed = condition(status, "Failed") or {}
        assert failed.get("reason") and failed.get("message"), status
        return "failed"
    if phase in ("Pending", "Restarting"):
        for type_ in ("Running", "Created"):
            cond = condition(status, type_) or {}
            if cond.get("status") == "False" and cond.get("reason") in (
                "Unschedulable",
                "CreateForbidden",
            ):
                assert cond.get("message"), status
                return "waiting"
    return None


@pytest.fixture(scope="module")
def fuzz_ns(cluster: Cluster, kube: Any) -> Iterator[str]:
    ns = create_namespace(kube, prefix="fuzz")
    try:
        yield ns
    finally:
        delete_namespace(kube, ns)


@pytest.fixture(scope="module")
def operator(cluster: Cluster, fuzz_ns: str) -> Iterator[OperatorProcess]:
    install_crds(cluster)
    op = OperatorProcess(cluster, (fuzz_ns,), name="fuzz")
    op.start()
    try:
        yield op
    finally:
        op.stop()


OUTCOMES: dict[str, int] = {}


@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED == 0,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(spec=spec, prefix=name_prefix)
def test_every_job_is_rejected_runs_fails_or_waits_with_a_reason(
    kube: Any, fuzz_ns: str, operator: OperatorProcess, spec: dict[str, Any], prefix: str
) -> None:
    name = f"{prefix}-{next(_counter)}"[-63:].lstrip(".-") or "fz"
    body = job_manifest(name, workers=1)
    body["spec"]["checkpoint"] = {"volume": {"hostPath": {"path": "/tmp/kerasjob-ckpt"}}}
    body["spec"] = merge(body["spec"], spec)
    try:
        custom(kube).create_namespaced_custom_object(
            GROUP, VERSION, fuzz_ns, PLURAL, body, field_validation="Strict"
        )
    except ApiException as e:
        assert e.status in (400, 422), (e.status, e.body)
        assert e.body and ('"message"' in e.body), e.body
        OUTCOMES["rejected"] = OUTCOMES.get("rejected", 0) + 1
        return
    end = wait_for(
        lambda: outcome(job_status(kube, fuzz_ns, name)),
        timeout=SETTLE_SECONDS,
        interval=0.2,
        what=f"KerasJob {name} to run, fail with a reason or wait with one (spec {spec!r:.2000})",
    )
    OUTCOMES[end] = OUTCOMES.get(end, 0) + 1
    assert operator.alive(), operator.log_tail()


def test_the_operator_survived_the_fuzzing_without_a_hot_loop(
    kube: Any, fuzz_ns: str, operator: OperatorProcess
) -> None:
    print(f"fuzz outcomes: {OUTCOMES}")
    assert sum(OUTCOMES.values()) >= min(EXAMPLES, 10), OUTCOMES
    assert operator.alive()
    log = operator.log_path.read_text(errors="replace")
    assert "Traceback" not in log, operator.log_tail(120)
    jobs = len(custom(kube).list_namespaced_custom_object(GROUP, VERSION, fuzz_ns, PLURAL)["items"])
    before = operator.metrics()["kerasjob_operator_reconciles_total"]
    time.sleep(3)
    after = operator.metrics()["kerasjob_operator_reconciles_total"]
    assert after - before <= jobs + 10, f"{after - before} reconciles in 3 s, {jobs} jobs"
