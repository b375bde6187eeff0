"""The Secret of a job's bucket credentials (spec.checkpoint.credentials), looked at before
its Pods are made: one that does not exist, or lacks a key the bucket's scheme needs
(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://, key.json for gs://), would leave
every Pod stuck in CreateContainerConfigError (envFrom) or ContainerCreating (the mount). The
job waits instead, condition Created False with reason CheckpointSecretMissing naming the
Secret and what it lacks, and a Warning; no Pod is made until it is complete, looked at
again on the retry's timer (`rejection.Rejection.retry_after`: nothing watches Secrets).

Only the names of the Secret's keys are looked at; its values are never logged or kept.
Without RBAC to read Secrets (a chart installed with ``checkpointSecrets.check: false``) the
check is skipped and the Pods' own status says what is wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kerasjob.api import KerasJob, Reason, required_secret_keys
from kerasjob.k8s.kube import ApiError, KubeApi
from kerasjob.k8s.paths import secret_path
from kerasjob.planner import rejection
from kerasjob.planner.rejection import Rejection

log = logging.getLogger("kerasjob.control.secrets")


def secret_problem(job: KerasJob, secret: Mapping[str, Any] | None) -> str | None:
    """What is wrong with the job's credentials Secret (``secret``: its body, None when it
    does not exist), in one line; None when nothing is (or the job names none)."""
    ckpt = job.spec.checkpoint
    if ckpt.location is None or ckpt.credentials is None:
        return None
    name = ckpt.credentials.secret_name
    where = f"Secret {job.namespace}/{name} (spec.checkpoint.credentials of {ckpt.location})"
    required = required_secret_keys(ckpt.location)
    if secret is None:
        return (
            f"{where} not found: it must hold {' and '.join(required)}; no Pods are "
            "created until it exists"
        )
    data = secret.get("data") or {}
    lacking = [k for k in required if not (isinstance(data, Mapping) and data.get(k))]
    if not lacking:
        return None
    return (
        f"{where} lacks {' and '.join(lacking)}; no Pods are created until it has "
        f"{'them' if len(lacking) > 1 else 'it'}"
    )


async def checkpoint_secret(
    api: KubeApi, job: KerasJob, generation: int | None
) -> Rejection | None:
    """The wait for the job's credentials Secret (a `Rejection` of the job's ``generation``
    that holds its Pods back), or None: complete, none named, or not ours to read (403:
    logged, not held back)."""
    ckpt = job.spec.checkpoint
    if ckpt.location is None or ckpt.credentials is None:
        return None
    name = ckpt.credentials.secret_name
    try:
        found = await api.request("GET", secret_path(job.namespace, name), count_as="get secrets")
    except ApiError as e:
        if e.status == 403:
            log.info("%s/%s: Secret %s not checked (%s)", job.namespace, job.name, name, e.status)
            return None
        if e.status != 404:
            raise
        found = None
    problem = secret_problem(job, found if isinstance(found, Mapping) else None)
    if problem is None:
        return None
    return rejection.missing(
        "Secret",
        name,
        problem,
        reason=Reason.CHECKPOINT_SECRET_MISSING.value,
        generation=generation,
    )
