"""spec.managedBy: a job handed to another controller (Kueue's MultiKueue) is left alone:
no Pod, no Service, no status write, even when this operator would find it invalid."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from kerasjob import CONTROLLER_NAME
from kerasjob.api import KerasJob
from kerasjob.control.jobview import ParsedJob, managed_elsewhere
from kerasjob.planner import reconcile as rc
from kerasjob_dev.testing.builders import NOW, job, pod

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def body(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": spec,
    }


def test_only_another_controllers_name_hands_the_job_over() -> None:
    assert managed_elsewhere({"managedBy": MULTIKUEUE}) == MULTIKUEUE
    assert managed_elsewhere({"managedBy": CONTROLLER_NAME}) is None
    assert managed_elsewhere({}) is None
    # Read from the body: an invalid job of another controller is still not ours to fail.
    invalid = body({"managedBy": MULTIKUEUE, "workers": 0})
    view = ParsedJob(invalid).view(invalid)
    assert view.invalid and view.managed_by == MULTIKUEUE
    assert ParsedJob(body({"workers": 1})).view(body({"workers": 1})).managed_by is None


def test_the_planner_writes_nothing_and_acts_on_nothing_for_such_a_job() -> None:
    handed = job(2, managed_by=MULTIKUEUE)
    p = rc.plan(handed, {}, [], NOW)
    assert p.status == {} and not p.actions and not p.events and p.pod_group is None
    # The status MultiKueue copied from the worker cluster stays exactly as it is.
    copied = {"phase": "Running", "restarts": {"disruptions": 1, "failures": 0}}
    p = rc.plan(handed, copied, [pod(0)], NOW)
    assert p.status == copied and not p.actions
    invalid = rc.plan(job(2, managed_by=MULTIKUEUE, invalid=("bad",)), {}, [], NOW)
    assert invalid.status == {} and not invalid.events


def test_the_model_validates_managed_by() -> None:
    ok = KerasJob.from_body(body({"managedBy": MULTIKUEUE}))
    assert ok.spec.managed_by == MULTIKUEUE
    for bad in ("multikueue", "Example.com/x", "example.com/" + "x" * 60):
        with pytest.raises(pydantic.ValidationError):
            KerasJob.from_body(body({"managedBy": bad}))
