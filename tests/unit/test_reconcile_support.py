"""Pieces around the planner: Pod summaries, progress parsing, the work queue, events."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from kerasjob.control.events import build_event
from kerasjob.k8s.workqueue import WorkQueue
from kerasjob.planner import progress
from kerasjob.planner.podview import Termination, pod_view

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def raw_pod(**status: object) -> dict:
    return {
        "metadata": {
            "name": "j-worker-1",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "42",
            "labels": {
                "kerasjob.dev/job-name": "j",
                "kerasjob.dev/replica-type": "worker",
                "kerasjob.dev/replica-index": "1",
            },
            "ownerReferences": [{"kind": "KerasJob", "uid": "job", "controller": True}],
        },
        "spec": {
            "containers": [
                {"name": "sidecar"},
                {"name": "trainer", "env": [{"name": "KERASJOB_METRICS_PORT", "value": "9999"}]},
            ]
        },
        "status": status,
    }


def test_pod_view_reads_the_trainer_container() -> None:
    view = pod_view(
        raw_pod(
            phase="Running",
            podIP="10.0.0.1",
            conditions=[
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByX"},
            ],
            containerStatuses=[
                {"name": "sidecar", "restartCount": 5},
                {
                    "name": "trainer",
                    "restartCount": 2,
                    "lastState": {"terminated": {"exitCode": 43, "reason": "Error"}},
                },
            ],
        )
    )
    assert view is not None
    assert (view.role, view.index, view.owner_uid, view.resource_version) == (
        "worker",
        1,
        "job",
        42,
    )
    assert view.ready and view.running_ready and view.pod_ip == "10.0.0.1"
    assert view.restart_count == 2 and view.last_termination == Termination(43, "Error")
    assert view.disruption_reason == "PreemptionByX" and view.metrics_port == 9999


def test_pod_view_ignores_pods_without_labels() -> None:
    assert pod_view({"metadata": {"name": "x", "labels": {}}}) is None


def test_parse_metrics() -> None:
    text = (
        "# HELP kerasjob_step steps\n# TYPE kerasjob_step gauge\n"
        "kerasjob_epoch 2\nkerasjob_step 340\nkerasjob_loss 0.1234567\n"
        "kerasjob_samples_per_second 1000.5\n"
        'kerasjob_metric{name="accuracy"} 0.93\nkerasjob_metric{name="auc"} NaN\n'
        "other_metric 5\n"
    )
    assert progress.parse_metrics(text) == {
        "epoch": 2,
        "step": 340,
        "loss": 0.123457,
        "samplesPerSecond": 1000.5,
        "metrics": {"accuracy": 0.93},
    }


def test_progress_patch_only_on_change() -> None:
    scraped = {"epoch": 1, "step": 10}
    new = progress.progress_patch(None, scraped, total_steps=100, now=T0)
    assert new == {"epoch": 1, "step": 10, "totalSteps": 100, "updatedAt": "2026-01-01T00:00:00Z"}
    assert progress.progress_patch(new, scraped, total_steps=100, now=T0) is None
    assert progress.progress_patch(new, {}, total_steps=100, now=T0) is None


def test_work_queue_dedupes_and_requeues_keys_added_while_active() -> None:
    async def scenario() -> list[tuple[str, str]]:
        q = WorkQueue()
        a, b = ("ns", "a"), ("ns", "b")
        q.add(a)
        q.add(a)
        q.add(b)
        assert len(q) == 2
        got = [await q.get()]
        q.add(got[0])  # notified while being processed
        assert len(q) == 1
        q.done(got[0])  # ... so it comes back
        got.append(await q.get())
        q.done(got[-1])
        got.append(await q.get())
        q.done(got[-1])
        q.add_after(a, 0.01)
        q.add_after(a, 5)  # a later deadline does not postpone the earlier one
        got.append(await asyncio.wait_for(q.get(), 1))
        q.close()
        return got

    assert asyncio.run(scenario()) == [("ns", "a"), ("ns", "b"), ("ns", "a"), ("ns", "a")]


def test_event_involves_the_job() -> None:
    event = build_event(
        namespace="ns", name="j", uid="u", type_="Warning", reason="R", message="m" * 5000, now=T0
    )
    assert event["involvedObject"] == {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "name": "j",
        "namespace": "ns",
        "uid": "u",
    }
    assert len(event["message"]) == 1024 and event["metadata"]["generateName"] == "j."
