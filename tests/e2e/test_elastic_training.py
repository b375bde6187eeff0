"""An elastic KerasJob on the real node: capacity lost, shrink, train on, capacity back, grow.

The node advertises an extended resource (kerasjob.dev/e2e-slot, patched into its status as
a device plugin would) and each worker asks for one. The job prefers 3 workers, may shrink
to 2. With 3 slots it starts at 3; the node then has 2 slots and worker 2 is evicted: the
group saves and exits, comes back at 3, one Pod cannot be scheduled, the operator shrinks to
2 after shrinkAfterSeconds and training goes on (each replica takes half the global batch
instead of a third). Then the node has 3 slots again: the probe Pod is scheduled, and after
the cool-down the job grows back to 3 and finishes with exactly the configured steps and an
accuracy in the band of an undisturbed run. Printed: capacity lost -> training at 2, and
capacity back -> training at 3 (run with -s).

4 x 500 steps: after capacity is back the job still trains ~60 s at 2 workers (~26 steps/s
here), the window in which the grow must happen (it takes ~7 s: 5 s of probe settling, the
rest scheduling). With 4 x 300 a CI run once ended training at 2 workers 38 s after
capacity was back without a grow; on failure the test prints the Pods, the node's slots and
when capacity changed, beside the operator's log.
"""

from __future__ import annotations

import contextlib
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

import kerasjob_contract as contract
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT, wait_for
from kerasjob_dev.synckube import MERGE, ApiError, pod_path

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

NAME, CLAIM = "elastic", "elastic-ckpt"
NODE = "kerasjob-node"
SLOT = "kerasjob.dev/e2e-slot"
JOBS = "/apis/kerasjob.dev/v1alpha1/namespaces/{ns}/kerasjobs"
EPOCHS, STEPS_PER_EPOCH = 4, 500
TOTAL = EPOCHS * STEPS_PER_EPOCH
STEP = re.compile(contract.LOG_STEP_RE, re.M)
RESUMED = re.compile(contract.LOG_RESUMED_RE, re.M)
FINAL = re.compile(contract.LOG_FINAL_RE, re.M)


def _slots(kj: Any, n: int | None) -> None:
    value = None if n is None else str(n)
    kj.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}/status",
        content_type=MERGE,
        body={"status": {"capacity": {SLOT: value}, "allocatable": {SLOT: value}}},
    )


def _pods_and_slots(kj: Any, ns: str) -> str:
    """What a failure needs to be understood: each Pod's phase, node and scheduling
    condition (probes included), and the node's slots."""
    lines = []
    for pod in kj.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
        meta, st = pod["metadata"], pod.get("status") or {}
        scheduled = next(
            (c for c in st.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        lines.append(
            f"pod {meta['name']}: {st.get('phase')} node={pod['spec'].get('nodeName')}"
            f" deleting={bool(meta.get('deletionTimestamp'))} scheduled="
            f"{scheduled.get('status')}/{scheduled.get('reason')} at "
            f"{scheduled.get('lastTransitionTime')} {scheduled.get('message') or ''}"
        )
    node = (kj.get(f"/api/v1/nodes/{NODE}") or {}).get("status") or {}
    lines.append(
        f"node {NODE}: capacity {(node.get('capacity') or {}).get(SLOT)} allocatable "
        f"{(node.get('allocatable') or {}).get(SLOT)}"
    )
    return "\n".join(lines)


def _job() -> dict[str, Any]:
    job = yaml.safe_load((REPO_ROOT / "examples" / "mnist.yaml").read_text())
    job["metadata"]["name"] = NAME
    spec = job["spec"]
    spec.pop("ttlSecondsAfterFinished", None)
    spec["workers"] = 3
    spec["elastic"] = {"minWorkers": 2, "shrinkAfterSeconds": 10, "resizeCooldownSeconds": 15}
    spec["trainer"].update(epochs=EPOCHS, stepsPerEpoch=STEPS_PER_EPOCH)
    spec["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": CLAIM}}
    (trainer,) = spec["template"]["spec"]["containers"]
    trainer["resources"] = {
        "requests": {"cpu": "100m", "memory": "512Mi", SLOT: "1"},
        "limits": {"memory": "2Gi", SLOT: "1"},
    }
    return job


def test_elastic_job_shrinks_trains_on_and_grows_back(deployment: Any, tmp_path: Path) -> None:
    if not deployment.cluster.local:
        pytest.skip("patches the local real node's capacity")
    kj, ns = deployment.kube, deployment.namespace
    jobs = JOBS.format(ns=ns)
    chief = f"{NAME}-worker-0"

    def status() -> dict[str, Any]:
        return (kj.get(f"{jobs}/{NAME}") or {}).get("status") or {}

    def workers() -> int | None:
        return (status().get("elastic") or {}).get("workers")

    def log() -> str:
        try:
            return kj.pod_log(ns, chief)
        except ApiError:
            return ""

    def training_at(size: int, after: int) -> bool:
        """The current chief resumed at `size` workers and finished a step after `after`."""
        text = log()
        small = "elastic: 2 of 3 preferred workers" in text
        steps = [int(s[0]) for s in STEP.findall(text)]
        return (
            bool(RESUMED.search(text))
            and small == (size == 2)
            and bool(steps)
            and steps[-1] > after
        )

    marks: dict[str, str] = {}  # when (UTC) the test changed capacity: to read the logs by

    def mark(what: str) -> float:
        marks[what] = datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
        return time.monotonic()

    pv = localdeploy.shared_claim(kj, ns, CLAIM, tmp_path / "ckpt")
    _slots(kj, 3)
    try:
        kj.request("POST", jobs, body=_job())
        wait_for(
            lambda: status().get("phase") == "Running" and workers() == 3,
            timeout=300,
            interval=0.5,
            what="the job running with 3 workers",
        )
        wait_for(
            lambda: (s := STEP.findall(log())) and int(s[-1][0]) >= 100,
            timeout=300,
            interval=0.5,
            what="the chief past step 100",
        )

        # Capacity lost: 2 slots; worker 2 evicted; its group comes back, one Pod stays
        # Pending (Insufficient slots), the job shrinks to 2 and trains on.
        before = int(STEP.findall(log())[-1][0])
        _slots(kj, 2)
        lost = mark("capacity lost")
        victim = f"{NAME}-worker-2"
        kj.request(
            "POST",
            pod_path(ns, victim, "eviction"),
            body={
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": victim, "namespace": ns},
            },
        )
        wait_for(lambda: workers() == 2, timeout=180, interval=0.5, what="a shrink to 2")
        shrunk = time.monotonic()
        wait_for(lambda: training_at(2, 0), timeout=240, interval=0.5, what="training at 2 workers")
        at_two = time.monotonic()
        resumed_small = int(RESUMED.findall(log())[-1])
        wait_for(
            lambda: training_at(2, resumed_small + 40),
            timeout=240,
            interval=0.5,
            what="40 steps at 2 workers",
        )

        # Capacity back: the probe is scheduled; after the cool-down the job grows to 3.
        _slots(kj, 3)
        back = mark("capacity back")
        wait_for(lambda: workers() == 3, timeout=180, interval=0.5, what="a grow to 3")
        grown = time.monotonic()
        wait_for(
            lambda: training_at(3, 0), timeout=240, interval=0.5, what="training at 3 workers again"
        )
        at_three = time.monotonic()

        done = wait_for(
            lambda: status().get("phase") in ("Succeeded", "Failed") and status(),
            timeout=600,
            interval=1,
            what="the job to finish",
        )
        final_log = log()
    except BaseException:
        print(
            status(),
            marks,
            _pods_and_slots(kj, ns),
            log()[-3000:],
            deployment.operator_logs(tail=600),
            sep="\n",
        )
        raise
    finally:
        with contextlib.suppress(ApiError):
            kj.request("DELETE", f"{jobs}/{NAME}")
        wait_for(
            lambda: not kj.get(f"{jobs}/{NAME}"), timeout=120, interval=0.5, what="the job deleted"
        )
        with contextlib.suppress(ApiError):
            kj.request("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}")
        localdeploy.delete_volume(kj, pv)
        _slots(kj, None)

    assert done["phase"] == "Succeeded", done
    ((accuracy, steps),) = FINAL.findall(final_log)
    assert int(steps) == TOTAL and float(accuracy) > 0.85, (accuracy, steps)
    elastic = done["elastic"]
    assert elastic["workers"] == 3 and elastic["resizes"] == 2, elastic
    assert [(r["fromWorkers"], r["toWorkers"], r["reason"]) for r in elastic["history"]] == [
        (3, 2, "CapacityLost"),
        (2, 3, "CapacityReturned"),
    ]
    assert done["restarts"]["failures"] == 0
    events = kj.request(
        "GET",
        f"/api/v1/namespaces/{ns}/events",
        query={"fieldSelector": f"involvedObject.name={NAME},reason=Resized"},
    )["items"]
    assert len(events) == 2, [e["message"] for e in events]
    print(
        f"\nelastic: capacity lost at step ~{before}: shrink decided after "
        f"{shrunk - lost:.1f}s (shrinkAfterSeconds 10), training at 2 workers after "
        f"{at_two - lost:.1f}s (resumed at step {resumed_small}); capacity back: grow decided "
        f"after {grown - back:.1f}s (cool-down 15s from the shrink), training at 3 workers "
        f"after {at_three - back:.1f}s; final accuracy {accuracy}, {steps} steps; "
        f"restarts {done['restarts']}"
    )
