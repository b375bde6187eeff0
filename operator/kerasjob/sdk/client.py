"""`KerasJobClient`: create, inspect, wait for, follow and delete KerasJobs from Python.

    from kerasjob.sdk import KerasJobClient
    jobs = KerasJobClient(namespace="ml-team")          # kubeconfig, else in-cluster
    job = jobs.create("examples/mnist.yaml")            # a model, a dict or a YAML file
    jobs.wait(job.name, timeout=900, callback=print)    # JobFailedError / WaitTimeoutError
    for line in jobs.logs(job.name, all_replicas=True, follow=True):
        print(line)                                     # "[mnist-worker-1] kerasjob: step ..."

Objects are the pydantic models of `kerasjob.api` (one source of truth with the CRD).
"""

from __future__ import annotations

# `builtins.list` in the annotations of the methods below `list`: in the class body the
# name is the method.
import builtins
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pydantic
import yaml

from kerasjob import API_GROUP, KIND
from kerasjob.api import ConditionType, KerasJob, Phase, ReplicaRole, plain
from kerasjob.k8s.credentials import current_namespace
from kerasjob.k8s.paths import events_path, job_path, pod_path
from kerasjob.manifests.tf_config import pod_name
from kerasjob.sdk import incarnations as _incarnations
from kerasjob.sdk import logs as _logs
from kerasjob.sdk.errors import (
    InvalidError,
    JobFailedError,
    KerasJobError,
    NotFoundError,
    WaitTimeoutError,
)
from kerasjob.sdk.function import submit_function
from kerasjob.sdk.summary import (
    FINISHED,
    JobSummary,
    condition,
    condition_true,
    phase_of,
    summarize,
)
from kerasjob.sdk.transport import MERGE, Transport
from kerasjob_contract import TRAINER_CONTAINER

JobInput = KerasJob | Mapping[str, Any] | str | os.PathLike[str]


def load_job(source: JobInput) -> KerasJob:
    """A KerasJob from a model, a dict, or a YAML/JSON file (the one KerasJob document in it).

    Raises InvalidError when the object does not match the API (before any request)."""
    if isinstance(source, KerasJob):
        return source
    if isinstance(source, (str, os.PathLike)):
        docs = [d for d in yaml.safe_load_all(Path(source).read_text()) if d]
        jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
        if len(jobs) != 1:
            raise InvalidError(0, f"{source}: expected one {KIND} document, found {len(jobs)}")
        source = jobs[0]
    if source.get("kind", KIND) != KIND:
        raise InvalidError(0, f"not a {KIND}: kind {source.get('kind')!r}")
    try:
        return KerasJob.model_validate(plain(source))
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidError(
            0, f"invalid {KIND}: {where}: {first['msg']} ({e.error_count()} error(s))"
        ) from None


class KerasJobClient:
    """A typed client for KerasJobs. ``namespace`` defaults to the kubeconfig context's."""

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.transport = transport or Transport(kubeconfig, context)
        self.namespace = namespace or current_namespace(kubeconfig, context)

    def _ns(self, namespace: str | None) -> str:
        return namespace or self.namespace

    # -- create / read / delete -------------------------------------------------------------

    def create(
        self, job: JobInput, *, namespace: str | None = None, dry_run: bool = False
    ) -> KerasJob:
        """Create a job; returns it as the API server stored it (defaults filled in).

        ``dry_run``: the server validates and defaults it (schema, CEL rules) without
        storing it. AlreadyExistsError, InvalidError, ForbiddenError, CRDNotFoundError."""
        model = load_job(job)
        ns = namespace or model.metadata.get("namespace") or self.namespace
        body = model.to_manifest()
        body.pop("status", None)
        body["metadata"] = {**body.get("metadata", {}), "namespace": ns}
        query = {"dryRun": "All"} if dry_run else None
        return KerasJob.from_body(
            self.transport.request("POST", job_path(ns), query=query, body=body)
        )

    def get(self, name: str, namespace: str | None = None) -> KerasJob:
        """The job (NotFoundError when it does not exist)."""
        body = self.transport.request("GET", job_path(self._ns(namespace), name))
        return KerasJob.from_body(body)

    def list(
        self,
        namespace: str | None = None,
        *,
        all_namespaces: bool = False,
        label_selector: str | None = None,
    ) -> list[KerasJob]:
        path = job_path(None if all_namespaces else self._ns(namespace))
        listed = self.transport.request("GET", path, query={"labelSelector": label_selector})
        return [KerasJob.from_body(i) for i in listed.get("items") or []]

    def summary(self, name: str, namespace: str | None = None) -> JobSummary:
        """Phase, restarts and progress of one job."""
        return summarize(self.get(name, namespace))

    def delete(
        self,
        name: str,
        namespace: str | None = None,
        *,
        wait: bool = False,
        timeout: float = 60,
    ) -> None:
        """Delete the job; its Pods and Service go with it (owner references, foreground
        when ``wait``: returns once the job and its children are gone)."""
        ns = self._ns(namespace)
        policy = "Foreground" if wait else "Background"
        self.transport.request("DELETE", job_path(ns, name), body={"propagationPolicy": policy})
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while self.transport.get(job_path(ns, name)) is not None:
            if time.monotonic() > deadline:
                raise WaitTimeoutError(f"KerasJob {name!r} still exists after {timeout:g}s")
            time.sleep(0.2)

    def suspend(self, name: str, namespace: str | None = None) -> KerasJob:
        """spec.suspend=true: the Pods are deleted, state stays in the checkpoint."""
        return self._set_suspend(name, namespace, True)

    def resume(self, name: str, namespace: str | None = None) -> KerasJob:
        """spec.suspend=false: Pods come back and resume from the last backup."""
        return self._set_suspend(name, namespace, False)

    def _set_suspend(self, name: str, namespace: str | None, value: bool) -> KerasJob:
        body = self.transport.request(
            "PATCH",
            job_path(self._ns(namespace), name),
            body={"spec": {"suspend": value}},
            content_type=MERGE,
        )
        return KerasJob.from_body(body)

    # -- state --------------------------------------------------------------------------------

    def is_running(self, name: str, namespace: str | None = None) -> bool:
        return phase_of(self.get(name, namespace)) == Phase.RUNNING.value

    def is_succeeded(self, name: str, namespace: str | None = None) -> bool:
        return condition_true(self.get(name, namespace), ConditionType.SUCCEEDED.value)

    def is_failed(self, name: str, namespace: str | None = None) -> bool:
        return condition_true(self.get(name, namespace), ConditionType.FAILED.value)

    def wait(
        self,
        name: str,
        namespace: str | None = None,
        *,
        until: str | Iterable[str] = (Phase.SUCCEEDED.value,),
        timeout: float = 600,
        callback: Callable[[KerasJob], None] | None = None,
    ) -> KerasJob:
        """Block until the job's phase, or a True condition, is one of ``until``.

        ``callback(job)`` runs on every change seen (progress, restarts, phase). A job that
        fails meanwhile raises JobFailedError (reason, message) unless "Failed" is in
        ``until``; after ``timeout`` seconds WaitTimeoutError; a deleted job NotFoundError.
        Watches the job (no polling), resuming the watch where the server ended it.
        """
        wanted = {until} if isinstance(until, str) else set(until)
        ns = self._ns(namespace)
        deadline = time.monotonic() + timeout
        job = self.get(name, ns)
        version = job.metadata.get("resourceVersion")
        while True:
            if callback:
                callback(job)
            done = self._check(job, wanted)
            if done:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError(
                    f"KerasJob {name!r} not {'/'.join(sorted(wanted))} after {timeout:g}s "
                    f"(phase {phase_of(job) or 'none yet'})",
                    job,
                )
            job, version = self._next_change(ns, name, version, left, job)

    def _check(self, job: KerasJob, wanted: set[str]) -> bool:
        phase = phase_of(job)
        if phase in wanted or any(condition_true(job, c) for c in wanted):
            return True
        if phase == Phase.FAILED.value:
            failed = condition(job, ConditionType.FAILED.value)
            raise JobFailedError(
                job.name, failed.reason if failed else "", failed.message if failed else "", job
            )
        if phase in FINISHED:  # succeeded while waiting for something else: never happens now
            raise WaitTimeoutError(
                f"KerasJob {job.name!r} finished {phase}; "
                f"it will never be {'/'.join(sorted(wanted))}",
                job,
            )
        return False

    def _next_change(
        self, ns: str, name: str, version: str | None, left: float, job: KerasJob
    ) -> tuple[KerasJob, str | None]:
        """The job at its next change, or as it is when the watch ends quietly."""
        events = self.transport.watch(
            job_path(ns),
            timeout_s=max(1, math.ceil(min(left, 300))),
            fieldSelector=f"metadata.name={name}",
            resourceVersion=version,
        )
        for event in events:
            obj = event.get("object") or {}
            version = (obj.get("metadata") or {}).get("resourceVersion", version)
            if event.get("type") == "DELETED":
                raise NotFoundError(404, f"KerasJob {name!r} was deleted while waiting")
            if event.get("type") in ("ADDED", "MODIFIED"):
                return KerasJob.from_body(obj), version
            if event.get("type") == "ERROR":  # e.g. 410 Gone: start over from a fresh GET
                fresh = self.get(name, ns)
                return fresh, fresh.metadata.get("resourceVersion")
        return job, version

    # -- children: Pods, events, logs -----------------------------------------------------

    def pods(self, name: str, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """The job's Pods as the API server has them (plain dicts)."""
        listed = self.transport.request(
            "GET",
            pod_path(self._ns(namespace)),
            query={"labelSelector": f"{API_GROUP}/job-name={name}"},
        )
        return list(listed.get("items") or [])

    def events(self, name: str, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """The job's Events (transitions, counted restarts, invalid spec), oldest first."""
        listed = self.transport.request(
            "GET",
            events_path(self._ns(namespace)),
            query={"fieldSelector": f"involvedObject.kind={KIND},involvedObject.name={name}"},
        )
        items = list(listed.get("items") or [])
        return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def replica_pods(self, job: KerasJob, replica: str | None = None) -> builtins.list[str]:
        """Pod names: every task's (``replica="all"``), one ("worker-1"), or the chief's."""
        if replica == "all":
            return [pod_name(job.name, role, i) for role, i in job.spec.tasks()]
        if replica:
            role, _, index = replica.rpartition("-")
            if (
                role not in {r.value for r in ReplicaRole}
                or not index.isdigit()
                or (ReplicaRole(role), int(index)) not in job.spec.tasks()
            ):
                tasks = ", ".join(f"{r.value}-{i}" for r, i in job.spec.tasks())
                raise NotFoundError(
                    404, f"KerasJob {job.name!r} has no replica {replica!r} (it has {tasks})"
                )
            return [pod_name(job.name, role, int(index))]
        return [pod_name(job.name, *job.spec.chief_task())]

    def logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        replica: str | None = None,
        all_replicas: bool = False,
        follow: bool = False,
        tail_lines: int | None = None,
        container: str = TRAINER_CONTAINER,
        previous: bool = False,
        all_incarnations: bool = False,
    ) -> Iterator[_logs.LogLine]:
        """Log lines of the chief (default), one replica ("worker-1") or all of them,
        interleaved (``str(line)`` is "[pod] text"). ``follow`` streams until the job
        finishes, across Pod re-creations. ``previous``: the trainer incarnation before the
        current one (of a Pod that was re-created too), ``all_incarnations``: every kept
        one, oldest first; both read the job's checkpoint volume through a short-lived Pod
        (`kerasjob.sdk.incarnations`)."""
        ns = self._ns(namespace)
        job = self.get(name, ns)
        pods = self.replica_pods(job, "all" if all_replicas else replica)
        if previous or all_incarnations:
            if follow or (previous and all_incarnations):
                raise ValueError("previous, all_incarnations and follow exclude each other")
            found = _incarnations.read(self.transport, job, pods, "previous" if previous else "all")
            yield from found[-tail_lines:] if tail_lines else found
            return
        if follow:

            def finished() -> bool:
                try:
                    return phase_of(self.get(name, ns)) in FINISHED
                except NotFoundError:
                    return True

            yield from _logs.follow(
                self.transport,
                ns,
                pods,
                finished=finished,
                container=container,
                tail_lines=tail_lines,
            )
            return
        per_pod = []
        for pod in pods:
            try:
                per_pod.append(
                    _logs.read_pod_log(
                        self.transport, ns, pod, container=container, tail_lines=tail_lines
                    )
                )
            except NotFoundError:
                if len(pods) == 1:
                    raise
        yield from _logs.interleave(per_pod)

    # -- a Python function as a job --------------------------------------------------------

    def train(self, build: Callable[..., Any], name: str, **kwargs: Any) -> KerasJob:
        """Run ``build(config) -> compiled tf_keras model`` as a KerasJob; see
        `kerasjob.sdk.function.submit_function` for the arguments."""
        return submit_function(self, build, name, **kwargs)


__all__ = ["KerasJobClient", "KerasJobError", "job_path", "load_job"]
