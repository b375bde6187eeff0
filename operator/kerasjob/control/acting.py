"""Carrying out a plan's actions: create the job's Service, NetworkPolicy and Pods (Service
and NetworkPolicy first, and a changed one patched back first), delete Pods and finished
jobs. Creates are strict and idempotent; a child the API server refuses is returned as a
`Rejection` for the next plan, not raised."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kerasjob.config import OperatorConfig
from kerasjob.control.observed import (
    NETWORK_POLICY,
    SERVICE,
    Expectations,
    Observed,
    Restores,
    resource_version,
)
from kerasjob.control.secrets import checkpoint_secret
from kerasjob.integrations.integration import PodUpdate, pod_updates
from kerasjob.k8s.kube import ApiError, KubeApi, gather_limited
from kerasjob.k8s.paths import (
    job_path,
    network_policy_path,
    pod_path,
    priority_class_path,
    service_path,
)
from kerasjob.k8s.workqueue import Key
from kerasjob.manifests import children, drift
from kerasjob.manifests.runtimes import default_images
from kerasjob.planner import rejection
from kerasjob.planner.planning import (
    Action,
    CreatePod,
    CreateProbe,
    CreateService,
    DeleteJob,
    DeletePod,
    Plan,
    RestoreChild,
)
from kerasjob.planner.rejection import Rejection

log = logging.getLogger("kerasjob.control.controller")

_SHARED_KINDS = {SERVICE: "Service", NETWORK_POLICY: "NetworkPolicy"}


class Acting(Protocol):
    """What carrying out actions needs of the controller."""

    api: KubeApi
    config: OperatorConfig
    expectations: Expectations
    restores: Restores
    rejections: dict[Key, Rejection]
    probe_class: str | None
    """The probes' PriorityClass once known to exist ('' until checked; None: none)."""


#: Below every Pod of default priority, above cluster-autoscaler's expendable cut-off (-10):
#: an autoscaler still scales up for a pending probe.
PROBE_PRIORITY = -1


async def probe_priority_class(ctx: Acting) -> str | None:
    """The probes' PriorityClass (`OperatorConfig.probe_priority_class`): made once if
    missing where the operator may; None when there is none."""
    if ctx.probe_class != "":
        return ctx.probe_class
    name = ctx.config.probe_priority_class or None
    if name is not None:
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "kerasjob"}},
            "value": PROBE_PRIORITY,
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": "kerasjob elastic jobs' probe Pods: they wait for capacity and "
            "give way to every Pod of default priority.",
        }
        try:
            await ctx.api.create(priority_class_path(), body, "priorityclasses")
        except ApiError as e:
            # Not ours to make (the chart's RBAC does not let it: the chart made it): use it;
            # a probe refused for want of it drops it (`act`).
            log.info("PriorityClass %s not made here (%s); using it", name, e.status)
    ctx.probe_class = name
    return name


def _uid(created: Any) -> str | None:
    """The UID of a child just created (None: it existed already)."""
    if isinstance(created, Mapping):
        return (created.get("metadata") or {}).get("uid") or None
    return None


def _update(pod: dict[str, Any], updates: list[PodUpdate], role: str, *, probe: bool) -> None:
    for update in updates:
        update(pod, role, probe=probe)


Call = tuple[str | None, Any]
"""(the child a create makes, or None; the call, not awaited yet)"""


@dataclass(frozen=True)
class Acted:
    """What carrying out a plan's actions came to."""

    refused: Rejection | None = None
    """A child the API server refused to create (kept for the next plan)."""
    made_shared: tuple[str, ...] = ()
    """The job's Service and NetworkPolicy kinds these creates made (not 409: they were
    missing, whether or not the plan knew it)."""
    restored: tuple[RestoreChild, ...] = ()
    """The restores whose patch went through."""


async def act(ctx: Acting, key: Key, seen: Observed, plan: Plan, actions: list[Action]) -> Acted:
    """Carry out the actions; a child the API server refused to create is returned (and
    kept for the next plan) instead of raised."""
    # The Secret of the bucket's credentials, before any Pod: a missing one holds them back.
    waiting = None
    model = seen.parsed.model
    if model is not None and any(isinstance(a, CreatePod | CreateProbe) for a in actions):
        waiting = await checkpoint_secret(ctx.api, model, seen.job.generation)
        if waiting is not None:
            actions = [a for a in actions if not isinstance(a, CreatePod | CreateProbe)]
    # What must exist before the Pods (the gang's PodGroup), and what each integration adds
    # to them (a Kueue admission's flavors, the gang's name).
    updates = await pod_updates(seen.integrations, plan, actions)
    first: list[Call] = []
    rest: list[Call] = []
    probes: set[str] = set()  # probe Pods: a refusal is logged, never the job's
    for action in actions:
        made = await _call(ctx, seen, plan, action, updates)
        # The Service and NetworkPolicy first, made or patched back (Pods resolve each
        # other through the one and must never run unprotected by the other), then the
        # rest together.
        (first if isinstance(action, CreateService | RestoreChild) else rest).extend(made)
        if isinstance(action, CreateProbe):
            probes.update(name for name, _ in made if name is not None)
    calls = first + rest
    results = await gather_limited([c for _, c in first])
    results += await gather_limited([c for _, c in rest])
    shared = tuple(
        _SHARED_KINDS[name]
        for (name, _), result in zip(calls, results, strict=True)
        if name in _SHARED_KINDS and isinstance(result, Mapping)
    )
    restored = tuple(r for r in results if isinstance(r, RestoreChild))
    previous = ctx.rejections.get(key)
    refused = _outcome(ctx, key, seen, calls, results, probes)
    if refused is None and waiting is not None:
        refused = ctx.rejections[key] = waiting.again(previous)
        log.info("%s/%s: %s", *key, refused.describe())
    return Acted(refused, shared, restored)


async def _call(
    ctx: Acting, seen: Observed, plan: Plan, action: Action, updates: list[PodUpdate]
) -> list[Call]:
    """The API calls one action makes (none for a create of an invalid job)."""
    job, model = seen.job, seen.parsed.model
    ns = job.namespace
    if isinstance(action, DeletePod):
        grace = 0 if action.force else action.grace_seconds
        call = ctx.api.delete(
            pod_path(ns, action.name), "pods", uid=action.uid, grace_period_seconds=grace
        )
        return [(None, call)]
    if isinstance(action, DeleteJob):
        log.info("%s/%s: ttlSecondsAfterFinished passed, deleting the job", ns, job.name)
        call = ctx.api.delete(
            job_path(ns, job.name), "kerasjobs", uid=job.uid, propagation="Background"
        )
        return [(None, call)]
    if model is None:
        return []
    if isinstance(action, RestoreChild):
        return [(None, _restore(ctx, seen, action))]
    if isinstance(action, CreateService):
        # The job's shared children: its Service and, unless switched off, the
        # NetworkPolicy that keeps its TF port to its own Pods (before any Pod).
        calls: list[Call] = []
        # The created objects (None: 409, it exists), for their UIDs (`Expectations.seen`).
        if ctx.config.network_policy:
            policy = children.build_network_policy(model, metrics_from=ctx.config.metrics_from)
            path = network_policy_path(ns)
            create = ctx.api.create_object(path, policy, "networkpolicies", strict=True)
            calls.append((NETWORK_POLICY, create))
        service = children.build_service(model)
        create = ctx.api.create_object(service_path(ns), service, "services", strict=True)
        return [*calls, (SERVICE, create)]
    if isinstance(action, CreatePod):
        manifest = children.build_pod(
            model,
            action.task.role,
            action.task.index,
            default_image=default_images(ctx.config),
            restart_attempt=plan.restart_attempt,
            workers=action.workers,
            node_lost_toleration=ctx.config.node_lost_toleration_seconds,
        )
        _update(manifest, updates, action.task.role, probe=False)
        pod = ctx.api.create_object(pod_path(ns), manifest, "pods", strict=True)
        return [(action.task.name, pod)]
    manifest = children.build_probe_pod(
        model,
        action.index,
        default_image=default_images(ctx.config),
        priority_class=await probe_priority_class(ctx),
    )
    _update(manifest, updates, "worker", probe=True)
    pod = ctx.api.create_object(pod_path(ns), manifest, "pods", strict=True)
    return [(action.name, pod)]


async def _restore(ctx: Acting, seen: Observed, action: RestoreChild) -> RestoreChild | None:
    """Patch the job's ``action.kind`` ("Service", "NetworkPolicy") back to the spec fields
    the operator renders for it (`drift.restore_patch`), conditional on the version the
    index showed: one changed again since, or gone, is looked at anew on its own watch
    event. A refusal (RBAC without patch, a validation error) is logged and not tried again
    on that version (`Restores`). The action once patched; else None."""
    job, kind = seen.job, action.kind
    key = (job.namespace, job.name)
    shown = seen.children.get(kind)
    desired = seen.parsed.shared_specs(ctx.config.metrics_from).get(kind)
    if shown is None or desired is None:
        return None
    if kind == "Service":
        path, resource = service_path(job.namespace, job.name), "services"
    else:
        path, resource = network_policy_path(job.namespace, job.name), "networkpolicies"
    patch = {
        "metadata": {"resourceVersion": str(shown.resource_version)},
        "spec": drift.restore_patch(kind, shown.spec, desired),
    }
    try:
        written = await ctx.api.merge_patch(path, patch, resource)
    except ApiError as e:
        if e.status in (404, 409):
            log.debug("%s/%s: %s changed or gone before its restore (%s)", *key, kind, e.status)
            return None
        if e.status == 429 or e.status >= 500:
            raise
        log.warning("%s/%s: %s not restored (%s): %s", *key, kind, e.status, e)
        ctx.restores.record(key, kind, shown.resource_version)
        return None
    ctx.restores.record(key, kind, resource_version(written))
    log.info("%s/%s: %s restored (%s)", *key, kind, ", ".join(patch["spec"]))
    return action


def _outcome(
    ctx: Acting,
    key: Key,
    seen: Observed,
    calls: list[Call],
    results: list[Any],
    probes: set[str],
) -> Rejection | None:
    """Expect what was created; return the first refusal (kept for the next plan), raise
    the first other error."""
    job = seen.job
    now = asyncio.get_running_loop().time()
    refused: Rejection | None = None
    errors: list[BaseException] = []
    for (name, _), result in zip(calls, results, strict=True):
        if name in probes:
            _probe_outcome(ctx, job.namespace, job.name, name, result)
            if isinstance(result, ApiError):
                continue
        if name in _SHARED_KINDS and result is None:
            # It already exists (409): nothing was made, so nothing is expected. Expecting
            # it would hide its deletion if that came between the 409 and here: the DELETE
            # event would find no expectation to end, and the next plan would skip it.
            continue
        if name is not None and not isinstance(result, BaseException):
            ctx.expectations.expect(key, name, now, uid=_uid(result))
        elif isinstance(result, ApiError) and name is not None and refused is None:
            kind, child = _SHARED_KINDS.get(name, "Pod"), name
            if name in _SHARED_KINDS:
                child = job.name
            refused = rejection.from_error(
                result.status, result.body, kind=kind, name=child, generation=job.generation
            )
            if refused is None:
                errors.append(result)
        elif isinstance(result, BaseException):
            errors.append(result)
    if refused is not None:
        refused = ctx.rejections[key] = refused.again(ctx.rejections.get(key))
        log.info("%s/%s: %s", *key, refused.describe())
        return refused
    if any(n is not None for n, _ in calls):
        ctx.rejections.pop(key, None)  # every create went through
    if errors:
        raise errors[0]
    return None


def _probe_outcome(ctx: Acting, ns: str, job: str, name: str, result: Any) -> None:
    """A probe Pod's create: logged; a refusal is never the job's."""
    if isinstance(result, ApiError):
        log.warning("%s/%s: probe Pod %s refused (%s): %s", ns, job, name, result.status, result)
        if ctx.probe_class and "PriorityClass" in str(result):
            ctx.probe_class = None  # it does not exist: probes go without it
    elif not isinstance(result, BaseException):
        log.info(
            "%s/%s: probe Pod %s created: looking for a place for one more worker", ns, job, name
        )
