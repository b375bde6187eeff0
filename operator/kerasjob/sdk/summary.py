"""What `get`/`list`/`status` show of a job: one row per job, computed from the API models."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kerasjob.api import (
    Condition,
    ConditionStatus,
    ConditionType,
    KerasJob,
    Phase,
    checkpoint_dir,
    checkpoint_location,
)
from kerasjob_contract.times import parse_time, utcnow

#: Phases after which a job never changes again.
FINISHED = frozenset({Phase.SUCCEEDED.value, Phase.FAILED.value})


@dataclasses.dataclass(frozen=True)
class JobSummary:
    """One job at a glance (``kerasjob get`` columns; ``as_dict`` for -o json)."""

    name: str
    namespace: str
    phase: str | None
    workers: int
    """Workers now: an elastic job's current size (status.elastic.workers), else spec.workers."""
    disruptions: int
    failures: int
    step: int | None
    total_steps: int | None
    epoch: int | None
    loss: float | None
    reason: str
    message: str
    created: str | None
    preferred_workers: int = 0
    """spec.workers (an elastic job's preferred size)."""
    resizes: int = 0

    @property
    def size(self) -> str:
        """ "3", or "2/3" for an elastic job running short of its preferred size."""
        if self.preferred_workers and self.workers != self.preferred_workers:
            return f"{self.workers}/{self.preferred_workers}"
        return str(self.workers)

    @property
    def progress(self) -> str:
        """ "step 340/600 loss 0.1235", or "-" before the first report."""
        if self.step is None:
            return "-"
        text = f"step {self.step}/{self.total_steps if self.total_steps is not None else '?'}"
        if self.loss is not None:
            text += f" loss {self.loss:.4g}"
        return text

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    def age(self, now: datetime | None = None) -> str:
        then = parse_time(self.created)
        if then is None:
            return "-"
        return human_duration(((now or utcnow()) - then).total_seconds())

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["progress"] = self.progress
        return out


def human_duration(seconds: float) -> str:
    """kubectl's AGE style: 42s, 5m, 3h, 2d."""
    s = max(int(seconds), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size * (2 if unit != "m" else 1):
            return f"{s // size}{unit}"
    return f"{s}s"


def condition(job: KerasJob, type_: str) -> Condition | None:
    """The condition of ``type_`` on the job, if any."""
    conditions = (job.status.conditions if job.status else None) or []
    return next((c for c in conditions if c.type == type_), None)


def condition_true(job: KerasJob, type_: str) -> bool:
    c = condition(job, type_)
    return c is not None and c.status is ConditionStatus.TRUE


def phase_of(job: KerasJob) -> str | None:
    return job.status.phase.value if job.status and job.status.phase else None


def summarize(job: KerasJob | Mapping[str, Any]) -> JobSummary:
    """The summary of a job (a model, or a body as the API server returns it)."""
    if not isinstance(job, KerasJob):
        job = KerasJob.model_validate(
            {
                "metadata": job.get("metadata") or {},
                "status": job.get("status") or None,
                "spec": job.get("spec") or {},
            }
        )
    status = job.status
    restarts = status.restarts if status and status.restarts else None
    prog = status.progress if status and status.progress else None
    phase = phase_of(job)
    # Why a job is in its phase; a job held by Kueue: its Admitted condition (which queue,
    # Kueue's reason, evicted by whom).
    why = (
        condition(job, ConditionType.ADMITTED.value if phase == Phase.QUEUED.value else phase)
        if phase
        else None
    )
    if phase == Phase.PENDING.value:
        # Why its Pods are not made (a missing checkpoint Secret, a forbidden create): its
        # Created condition, False; else why they do not run yet (a gang that cannot be
        # placed, a Pod no node fits, an image that cannot be pulled): Running, False.
        created = condition(job, ConditionType.CREATED.value)
        running = condition(job, ConditionType.RUNNING.value)
        why = next((c for c in (created, running) if c and c.status is ConditionStatus.FALSE), None)
    elastic = status.elastic if status and status.elastic else None
    return JobSummary(
        name=job.name,
        namespace=job.namespace,
        phase=phase,
        workers=elastic.workers if elastic and elastic.workers else job.spec.workers,
        preferred_workers=job.spec.workers,
        resizes=(elastic.resizes or 0) if elastic else 0,
        disruptions=restarts.disruptions if restarts else 0,
        failures=restarts.failures if restarts else 0,
        step=prog.step if prog else None,
        total_steps=prog.total_steps if prog else None,
        epoch=prog.epoch if prog else None,
        loss=prog.loss if prog else None,
        reason=why.reason if why else "",
        message=why.message if why else "",
        created=job.metadata.get("creationTimestamp"),
    )


def checkpoint_where(job: KerasJob) -> str:
    """Where the job's backups are, in one line (`kerasjob describe`): its own prefix in the
    bucket, or its own directory on the checkpoint volume (and which volume)."""
    ckpt = job.spec.checkpoint
    if ckpt.location is not None:
        where = checkpoint_location(ckpt.location, job.namespace, job.name, job.uid)
        how = [f"endpoint {ckpt.endpoint}"] if ckpt.endpoint else []
        if ckpt.region:
            how.append(f"region {ckpt.region}")
        if ckpt.path_style:
            how.append("path-style")
        creds = ckpt.credentials
        how.append(f"Secret {creds.secret_name}" if creds else "the Pods' own identity")
        return f"{where} ({', '.join(how)}; staged in an emptyDir at {ckpt.mount_path})"
    directory = checkpoint_dir(ckpt.mount_path, job.namespace, job.name, job.uid)
    volume = ckpt.volume or {"emptyDir": {}}
    kind, source = next(iter(volume.items()))
    named = next(
        (
            str(source[k])
            for k in ("claimName", "path", "server")
            if isinstance(source, Mapping) and source.get(k)
        ),
        "",
    )
    return f"{directory} on volume {kind}{' ' + named if named else ''}"
