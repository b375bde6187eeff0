"""From a KerasJob body to the `planning.JobView` the planner decides on.

The body is parsed once per (uid, generation) into the API models and checked with
`validation.validate_job`; an invalid job still gets a view (with its problems), so the
planner can fail it with reason InvalidSpec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from kerasjob import CONTROLLER_NAME
from kerasjob.api import KerasJob
from kerasjob.manifests import children, drift, validation
from kerasjob.manifests.tf_config import pod_name
from kerasjob.planner.planning import (
    ALL_REDUCE,
    PARAMETER_SERVER,
    ElasticPolicy,
    JobView,
    Task,
)


class ParsedJob:
    """A job body parsed once per (uid, generation): the model, its tasks, its problems."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        self.model: KerasJob | None = None
        try:  # parsed once; the semantic checks then run on the model
            self.model = KerasJob.from_body(body)
        except pydantic.ValidationError as e:
            problems = validation.validation_problems(e)
        else:
            problems = validation.validate_job(self.model)
            if problems:
                self.model = None
        name = str(meta.get("name", ""))
        self._shared: tuple[str, dict[str, Any]] | None = None
        self.problems = tuple(problems)
        if self.model is not None:
            spec = self.model.spec
            self.tasks = tuple(
                Task(pod_name(name, role, i), role.value, i) for role, i in spec.tasks()
            )
            self.chief = pod_name(name, *spec.chief_task())
            self.total_steps: int | None = spec.trainer.epochs * spec.trainer.steps_per_epoch
        else:
            self.tasks = ()
            self.chief = ""
            self.total_steps = None

    def shared_specs(self, metrics_from: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The spec fields the operator sets on the job's Service and NetworkPolicy
        (`drift.owned_spec`), by kind, as it renders them: made once per generation (and
        metrics peers); {} for an invalid job."""
        if self.model is None:
            return {}
        peers = json.dumps(list(metrics_from), sort_keys=True)
        if self._shared is None or self._shared[0] != peers:
            policy = children.build_network_policy(self.model, metrics_from=metrics_from)
            specs = {
                "Service": drift.owned_spec("Service", children.build_service(self.model)),
                "NetworkPolicy": drift.owned_spec("NetworkPolicy", policy),
            }
            self._shared = (peers, specs)
        return self._shared[1]

    def view(self, body: Mapping[str, Any]) -> JobView:
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        m = self.model.spec if self.model is not None else None
        return JobView(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            generation=meta.get("generation"),
            tasks=self.tasks,
            chief=self.chief,
            restart_policy=m.restart_policy.value if m else "OnFailure",
            backoff_limit=m.backoff_limit if m else 6,
            active_deadline_seconds=m.active_deadline_seconds if m else None,
            ttl_seconds_after_finished=(
                m.ttl_seconds_after_finished if m else spec.get("ttlSecondsAfterFinished")
            ),
            clean_pod_policy=m.clean_pod_policy.value if m else "Running",
            suspend=bool(m.suspend) if m else False,
            elastic=(
                ElasticPolicy(
                    min_workers=m.elastic.min_workers,
                    preferred=m.workers,
                    shrink_after_seconds=float(m.elastic.shrink_after_seconds),
                    resize_cooldown_seconds=float(m.elastic.resize_cooldown_seconds),
                )
                if m and m.elastic
                else None
            ),
            managed_by=managed_elsewhere(spec),
            deleting=bool(meta.get("deletionTimestamp")),
            invalid=self.problems,
            total_steps=self.total_steps,
            group=PARAMETER_SERVER if m is not None and m.ps is not None else ALL_REDUCE,
        )


def managed_elsewhere(spec: Mapping[str, Any]) -> str | None:
    """spec.managedBy when it names another controller than this operator (read from the
    body, so that even a job this operator finds invalid is left to its manager)."""
    value = spec.get("managedBy") if isinstance(spec, Mapping) else None
    if not value or value == CONTROLLER_NAME:
        return None
    return str(value)
