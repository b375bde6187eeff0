"""Status helpers: conditions, merge patches, phase."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kerasjob.planner import conditions
from kerasjob.planner import status as st

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_set_condition_moves_transition_time_only_on_change() -> None:
    c = conditions.set_condition([], "Running", True, "PodsReady", "m", now=T0, generation=3)
    assert c == [
        {
            "type": "Running",
            "status": "True",
            "reason": "PodsReady",
            "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": 3,
        }
    ]
    later = T0 + timedelta(minutes=1)
    same = conditions.set_condition(c, "Running", True, "PodsReady", "m2", now=later, generation=3)
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z" and same[0]["message"] == "m2"
    flipped = conditions.set_condition(
        c, "Running", False, "Restarting", "m", now=later, generation=3
    )
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T00:01:00Z"


def test_absent_condition_is_not_added_as_false() -> None:
    assert (
        conditions.set_condition([], "Restarting", False, "r", "m", now=T0, generation=None) == []
    )


def test_merge_patch() -> None:
    old = {"a": 1, "b": {"c": 1, "d": 2}, "e": [1], "gone": 1}
    new = {"a": 1, "b": {"c": 2, "d": 2}, "e": [1, 2], "f": {"x": 1}}
    assert st.merge_patch(old, new) == {"b": {"c": 2}, "e": [1, 2], "f": {"x": 1}, "gone": None}
    assert st.merge_patch(new, new) == {}


def test_active_phase() -> None:
    assert st.active_phase(None, all_ready=False, restarted=False) == "Pending"
    assert st.active_phase("Pending", all_ready=True, restarted=False) == "Running"
    assert st.active_phase("Running", all_ready=False, restarted=False) == "Restarting"
    assert st.active_phase("Pending", all_ready=False, restarted=True) == "Restarting"


def test_pod_view_says_why_a_pod_cannot_start() -> None:
    from kerasjob.planner.podview import pod_view

    base = {
        "metadata": {
            "name": "j-worker-0",
            "namespace": "ns",
            "uid": "u",
            "labels": {
                "kerasjob.dev/job-name": "j",
                "kerasjob.dev/replica-type": "worker",
                "kerasjob.dev/replica-index": "0",
            },
        },
        "spec": {"containers": [{"name": "trainer"}]},
    }
    unschedulable = {
        **base,
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": 'persistentvolumeclaim "ckpt" not found',
                }
            ],
        },
    }
    view = pod_view(unschedulable)
    assert view is not None
    assert view.waiting == 'Unschedulable: persistentvolumeclaim "ckpt" not found'
    pulling = {
        **base,
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "restartCount": 0,
                    "state": {
                        "waiting": {"reason": "ImagePullBackOff", "message": "no such image"}
                    },
                }
            ],
        },
    }
    view = pod_view(pulling)
    assert view is not None and view.waiting == "ImagePullBackOff: no such image"
    creating = {
        **base,
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ],
        },
    }
    view = pod_view(creating)
    assert view is not None and view.waiting == ""
