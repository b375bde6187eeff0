"""The controller loop: a de-duplicating work queue of jobs, reconciled by a few workers.

kopf feeds it: its indices hold every KerasJob and a `PodView` per child Pod (so the hot path
never LISTs), and its event handlers put the key ``(namespace, job name)`` of whatever
changed into the queue (`notify`). A worker takes a key, takes one snapshot of the job and
its Pods (`observe`: the indices plus our own writes they have not delivered yet, see
`observed`), asks `rc.plan` what to do, writes the status with one merge patch made
conditional on the resourceVersion it read (`write_status`: a conflict just requeues), and
only then acts: create/delete Pods and the Service (all idempotent: 409 on create and 404
on delete are success), patch a changed Service or NetworkPolicy back, post Events
(`events.EventRecorder`). One key is never processed by two workers at once; a key
notified while being processed is processed again right after.

Two periodic loops complete it: a resync that requeues every job (for deadlines, TTLs and
anything missed) and the progress scraper of running jobs (`scraping`), whose status
writes take the same conditional path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import aiohttp

from kerasjob.api import wire
from kerasjob.config import OperatorConfig
from kerasjob.control import acting, scraping
from kerasjob.control.events import EventRecorder, build_event
from kerasjob.control.jobview import ParsedJob
from kerasjob.control.observed import (
    SHARED_CHILDREN,
    ChildView,
    Expectations,
    Observed,
    Restores,
    WriteCache,
    index_behind,
    skip_expected,
)
from kerasjob.integrations.integration import Integration, JobIntegration, ManagedElsewhere
from kerasjob.k8s.kube import ApiError, KubeApi
from kerasjob.k8s.paths import events_path, job_path
from kerasjob.k8s.workqueue import Key, WorkQueue
from kerasjob.manifests import drift
from kerasjob.planner import elastic, planning
from kerasjob.planner import reconcile as rc
from kerasjob.planner.housekeeping import child_restored
from kerasjob.planner.planning import ChildDrift, Event, JobView
from kerasjob.planner.podview import PodView
from kerasjob.planner.rejection import Rejection
from kerasjob.planner.running import recreated_unplanned
from kerasjob.planner.status import merge_patch
from kerasjob_contract.times import utcnow

log = logging.getLogger("kerasjob.control.controller")

#: The reason of the dry-run Event that asks whether a namespace is being deleted (never
#: stored, so not one of the job's `Reason`s).
NAMESPACE_PROBE = "NamespaceProbe"


def _namespace_gone(error: BaseException) -> bool:
    """The job's namespace is being deleted, or is gone: its jobs go with it."""
    if not isinstance(error, ApiError):
        return False
    text = str(error)
    return (error.status == 403 and "being terminated" in text) or (
        error.status == 404 and "namespaces" in text and "not found" in text
    )


def _api_unavailable(error: BaseException) -> bool:
    """The API server cannot be reached, or says it is not ready (restarting, storage
    re-initialising): nothing about the job is wrong."""
    if isinstance(error, ApiError):
        return error.status in (429, 503)
    return isinstance(error, (aiohttp.ClientConnectionError, asyncio.TimeoutError))


class Controller:
    """Reconciles KerasJobs. Construct inside the event loop; `run` until cancelled."""

    def __init__(
        self,
        config: OperatorConfig,
        api: KubeApi,
        jobs: Mapping[Key, Iterable[Mapping[str, Any]]],
        pods: Mapping[Key, Iterable[PodView]],
        integrations: Sequence[Integration] = (),
        children: Mapping[str, Mapping[Key, Iterable[ChildView]]] | None = None,
    ) -> None:
        self.config = config
        self.api = api
        self.jobs = jobs
        self.pods = pods
        #: The job's other children the operator watches, by kind ("Service",
        #: "NetworkPolicy"): an index of each, keyed like ``pods``, a `ChildView` per object
        #: (`observed.SHARED_CHILDREN`).
        self.children = dict(children or {})
        #: The scheduler integrations the operator runs with (Kueue, gang scheduling).
        self.integrations = tuple(integrations)
        self.queue = WorkQueue()
        self.ready = asyncio.Event()
        self.events = EventRecorder(api)
        self.written = WriteCache()
        self.expectations = Expectations()
        self.restores = Restores()
        self.rejections: dict[Key, Rejection] = {}
        self.probe_class: str | None = ""  # elastic probes' PriorityClass: checked when needed
        self.waiting = elastic.WaitingJobs()  # for elastic jobs: who waits for a place
        """The API server's last refusal to create a child, per job (see `rejection`)."""
        self._errors: dict[Key, int] = {}
        self._awaiting_api: set[Key] = set()
        self._api_probe: asyncio.Task[None] | None = None
        self._parsed: dict[tuple[str, Any], ParsedJob] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.reconciles = 0
        self.reconcile_errors = 0
        self.conflicts = 0

    # -- input -----------------------------------------------------------------------------

    def notify(self, key: Key) -> None:
        """Something about job ``key`` (or one of its Pods) changed. Called by kopf handlers,
        which kopf runs only once its indices are fully populated: hence `ready`."""
        self.ready.set()
        self.queue.add(key)

    def child_changed(
        self, key: Key, kind: str, *, gone: bool = False, uid: str | None = None
    ) -> None:
        """A watch event for job ``key``'s Service or NetworkPolicy (`SHARED_CHILDREN`),
        incarnation ``uid``. Its deletion ends the expectation of one just made (else the
        index showing it does: an ADDED event may be handled before the index holds the
        object, and the reconcile it wakes would see it missing and make it, and say so,
        twice) -- unless it is the DELETE of the one that the new one replaced."""
        if gone:
            self.expectations.seen(key, SHARED_CHILDREN[kind], uid)
        self.notify(key)

    def pod_changed(self, key: Key, pod_name: str, uid: str | None = None) -> None:
        """A watch event for a child Pod of job ``key`` (incarnation ``uid``)."""
        self.expectations.seen(key, pod_name, uid)
        self.notify(key)

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self) -> None:
        self._tasks = [
            asyncio.create_task(self._worker(i), name=f"kerasjob-worker-{i}")
            for i in range(max(1, self.config.workers))
        ]
        self._tasks.append(asyncio.create_task(self._resync(), name="kerasjob-resync"))
        if self.config.progress_interval > 0:
            self._tasks.append(asyncio.create_task(self._progress(), name="kerasjob-progress"))
        try:
            await asyncio.gather(*self._tasks)
        finally:
            for t in self._tasks:
                t.cancel()

    async def stop(self) -> None:
        if self._api_probe is not None:
            self._tasks.append(self._api_probe)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.events.cancel()
        self.queue.close()
        await self.api.close()

    async def _worker(self, n: int) -> None:
        await self.ready.wait()
        while True:
            key = await self.queue.get()
            try:
                delay = await self.reconcile(key)
                self._errors.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the loop must survive anything; retried with backoff
                self.reconcile_errors += 1
                delay = self._failed(key, e)
            finally:
                self.queue.done(key)
            if delay is not None:
                self.queue.add_after(key, delay)

    def _failed(self, key: Key, error: Exception) -> float | None:
        """Log a failed reconcile; the delay before the next try (None: do not retry)."""
        if _namespace_gone(error):
            # The namespace, and with it the job, is going away: nothing left to do.
            log.debug("%s/%s: namespace terminating, not retrying", key[0], key[1])
            self._errors.pop(key, None)
            return None
        if _api_unavailable(error):
            # The API server is down or restarting: one probe for all jobs, and every job
            # waiting for it is reconciled the moment it answers again (not after its own
            # back-off, which grows to 30 s during a long outage).
            self._awaiting_api.add(key)
            if self._api_probe is None or self._api_probe.done():
                log.warning("API server unavailable (%s); waiting for it", error)
                self._api_probe = asyncio.create_task(self._probe_api(), name="kerasjob-api-probe")
            return None
        errors = self._errors[key] = self._errors.get(key, 0) + 1
        delay = min(0.25 * 2.0**errors, 30.0)
        api_error = isinstance(error, ApiError)
        log.log(
            logging.WARNING if not api_error or errors > 2 else logging.INFO,
            "reconcile %s/%s failed (retry in %.1fs): %s",
            key[0],
            key[1],
            delay,
            error,
            exc_info=not api_error,
        )
        return delay

    async def _probe_api(self) -> None:
        """GET /readyz (public to every client) with back-off up to 2 s until it answers,
        then requeue the jobs that waited for it."""
        delay = 0.25
        while True:
            await asyncio.sleep(delay)
            try:
                await self.api.request("GET", "/readyz", count_as="get readyz")
                break
            except Exception as e:
                log.debug("API server still unavailable: %s", e)
                delay = min(delay * 2, 2.0)
        waiting, self._awaiting_api = self._awaiting_api, set()
        log.info("API server available again; reconciling %d jobs", len(waiting))
        for key in waiting:
            self.queue.add(key)

    async def _resync(self) -> None:
        await self.ready.wait()
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            for key in list(self.jobs.keys()):
                self.queue.add(key)

    # -- what we know ----------------------------------------------------------------------

    def observe(self, key: Key) -> Observed | None:
        """The one snapshot a decision is made on: the job (the index's body, or our own
        newer write), parsed once per generation, its Pods from the index, the children
        still expected (read in the same step: see `observed.Expectations`), and the
        integrations' views."""
        indexed = next(iter(self.jobs.get(key, ())), None)
        body = self.written.freshest(key, indexed)
        if body is None:
            return None
        parsed = self._parse(body)
        job = parsed.view(body)
        loop_now = asyncio.get_running_loop().time()
        if job.elastic is not None:  # only elastic jobs look at the others' Pods
            others = self.waiting.others(self.pods, loop_now, key)
            job = dataclasses.replace(job, others_waiting=others)
        parts: list[JobIntegration] = []
        for integration in self.integrations:
            job, part = integration.view(key, body, parsed.model, job)
            if part is not None:
                parts.append(part)
        pods = list(self.pods.get(key, ()))
        expected = self.expectations.pending(key, pods, loop_now)
        shown = self._shared_children(key)
        missing = self._missing_children(key, shown, expected)
        drifted = self._drifted_children(key, parsed, shown)
        if missing or drifted:
            job = dataclasses.replace(job, missing_children=missing, drifted_children=drifted)
        return Observed(
            body=body,
            parsed=parsed,
            job=job,
            status=cast(wire.Status, dict(body.get("status") or {})),
            pods=pods,
            expected=expected,
            integrations=tuple(parts),
            children=shown,
        )

    def _shared_children(self, key: Key) -> dict[str, ChildView]:
        """The job's Service and NetworkPolicy (named after the job) that the indices show,
        by kind; only the kinds the operator makes."""
        wanted = [k for k in self.children if k != "NetworkPolicy" or self.config.network_policy]
        shown: dict[str, ChildView] = {}
        for kind in wanted:
            views = [v for v in self.children[kind].get(key, ()) if v.name == key[1]]
            if views:
                shown[kind] = max(views, key=lambda v: v.resource_version)
        return shown

    def _missing_children(
        self, key: Key, shown: Mapping[str, ChildView], expected: Mapping[str, float]
    ) -> tuple[str, ...]:
        """The watched kinds of child the job has none of, nor was just made (read from
        the indices: no request)."""
        wanted = [k for k in self.children if k != "NetworkPolicy" or self.config.network_policy]
        missing: list[str] = []
        for kind in wanted:
            if kind in shown:
                self.expectations.seen(key, SHARED_CHILDREN[kind])  # shown: no longer expected
            elif SHARED_CHILDREN[kind] not in expected:
                missing.append(kind)
        return tuple(missing)

    def _drifted_children(
        self, key: Key, parsed: ParsedJob, shown: Mapping[str, ChildView]
    ) -> tuple[ChildDrift, ...]:
        """The shown children whose owned spec fields differ from those the operator renders
        for the job (`manifests.drift`); not one whose restore the index has not shown yet
        (`observed.Restores`)."""
        desired = parsed.shared_specs(self.config.metrics_from)
        out: list[ChildDrift] = []
        for kind, child in shown.items():
            if kind not in desired or self.restores.settled(key, kind, child):
                continue
            fields = drift.drifted(kind, child.spec, desired[kind])
            if fields:
                out.append(ChildDrift(kind, fields))
        return tuple(out)

    def _parse(self, body: Mapping[str, Any]) -> ParsedJob:
        meta = body.get("metadata") or {}
        cache_key = (str(meta.get("uid", "")), meta.get("generation"))
        parsed = self._parsed.get(cache_key)
        if parsed is None:
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            parsed = self._parsed[cache_key] = ParsedJob(body)
        return parsed

    async def write_status(self, key: Key, seen: Observed, patch: Mapping[str, Any]) -> bool:
        """Merge-patch the status, conditional on the resourceVersion of the snapshot the
        patch was computed from; record the written body (see `observed.WriteCache`).
        False when someone wrote in between (409) or the job is gone (404)."""
        request = {"metadata": {"resourceVersion": seen.resource_version}, "status": patch}
        try:
            written = await self.api.merge_patch(
                job_path(*key, "status"), request, "kerasjobs/status"
            )
        except ApiError as e:
            if e.status == 409:
                self.conflicts += 1
                log.debug("%s/%s: status conflict at %s", *key, seen.resource_version)
                return False
            if e.status == 404:
                return False
            raise
        self.written.record(key, written)
        return True

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: Key) -> float | None:
        """Reconcile one job; returns seconds until it must be looked at again (or None)."""
        self.reconciles += 1
        seen = self.observe(key)
        if seen is None:  # deleted: forget everything about it
            self.queue.forget(key)
            self._errors.pop(key, None)
            self.expectations.forget(key)
            self.restores.forget(key)
            self.rejections.pop(key, None)
            return None
        if seen.job.managed_by is not None:
            await self._managed_elsewhere(seen)
            return None
        if await index_behind(self.api, key[0], seen.status, seen.pods):
            log.debug("%s/%s: Pod index behind the status; waiting", *key)
            return 0.5
        now = utcnow()
        shown = self.rejections.get(key)
        plan = rc.plan(
            seen.job,
            seen.status,
            seen.pods,
            now,
            force_delete_after=self.config.force_delete_after,
            rejection=shown,
        )
        patch = merge_patch(seen.status, plan.status)
        if plan.status.get("restarts") != seen.status.get("restarts") and (
            await self._namespace_terminating(seen, now)
        ):
            # The namespace is being deleted: its Pods go first, which is no disruption,
            # and nothing can be re-created. Leave the job alone; it goes with the namespace.
            log.debug("%s/%s: namespace terminating, leaving the job alone", *key)
            return None
        if patch:
            if not await self.write_status(key, seen, patch):
                # Someone wrote since we read (or the job is gone): look again shortly.
                return 0.2 if self.observe(key) is not None else None
            old, new = seen.status.get("phase"), plan.status.get("phase")
            if new != old:
                log.info("%s/%s: %s -> %s", *key, old, new)
        events = list(plan.events)
        for part in seen.integrations:
            events += await part.after_plan(plan, len(seen.pods), now)
        self.post(seen.job, events, now)
        actions, wait = skip_expected(
            plan.actions, seen.expected, asyncio.get_running_loop().time()
        )
        if actions:
            log.debug("%s/%s: %s", *key, ", ".join(type(a).__name__ for a in actions))
            acted = await self._act(key, seen, plan, actions)
            self.post(seen.job, recreated_unplanned(seen.job, seen.status, acted.made_shared), now)
            self.post(seen.job, [child_restored(seen.job, r) for r in acted.restored], now)
            refused = acted.refused
            if refused is not None:  # plan again with it: fail the job, or show the wait
                # A missing prerequisite (the checkpoint Secret) is shown at once when it
                # changed, then looked at again on the timer.
                changed = refused.waiting_reason is not None and (
                    shown is None or shown.describe() != refused.describe()
                )
                return 0.0 if refused.permanent or changed else refused.retry_after
        delay = (
            plan.requeue_after
            if wait is None
            else (wait if plan.requeue_after is None else min(wait, plan.requeue_after))
        )
        log.debug("%s/%s: reconciled at %s; again in %s s", *key, seen.resource_version, delay)
        return delay

    async def _managed_elsewhere(self, seen: Observed) -> None:
        """A job whose spec.managedBy names another controller (MultiKueue): no Pod, no
        status write. Only what an integration still does for it (`ManagedElsewhere`: for
        a job of a Kueue LocalQueue, its Kueue Workload, the part of Kueue's job framework
        this operator plays for KerasJobs, which MultiKueue needs on the manager cluster to
        dispatch the job to a worker cluster)."""
        parts = [p for p in seen.integrations if isinstance(p, ManagedElsewhere)]
        if not parts:
            return
        now = utcnow()
        plan = rc.plan(seen.job, seen.status, [], now)  # the status, unchanged
        events: list[Event] = []
        for part in parts:
            events += await part.managed_elsewhere(plan, now)
        self.post(seen.job, events, now)

    def post(self, job: JobView, events: Iterable[Event], now: datetime) -> None:
        for event in events:
            self.events.post(
                build_event(
                    namespace=job.namespace,
                    name=job.name,
                    uid=job.uid,
                    type_=event.type,
                    reason=event.reason,
                    message=event.message,
                    now=now,
                    instance=self.config.instance,
                )
            )

    async def _namespace_terminating(self, seen: Observed, now: datetime) -> bool:
        """Whether the job's namespace is being deleted: asked only before a restart is
        counted, with a dry-run create of an Event (the NamespaceLifecycle admission refuses
        creates in a terminating namespace; the operator may create Events everywhere it
        works, and needs no read access to Namespaces, which a Role cannot grant)."""
        job = seen.job
        probe = build_event(
            namespace=job.namespace,
            name=job.name,
            uid=job.uid,
            type_="Normal",
            reason=NAMESPACE_PROBE,
            message="dry run",
            now=now,
            instance=self.config.instance,
        )
        try:
            await self.api.request(
                "POST",
                events_path(job.namespace),
                body=probe,
                params={"dryRun": "All"},
                count_as="create events",  # a dry run: RBAC-wise the same verb
            )
        except ApiError as e:
            return _namespace_gone(e)
        return False

    async def _act(
        self, key: Key, seen: Observed, plan: planning.Plan, actions: list[planning.Action]
    ) -> acting.Acted:
        return await acting.act(self, key, seen, plan, actions)

    # -- progress --------------------------------------------------------------------------

    async def _progress(self) -> None:
        await scraping.progress_loop(self)

    async def scrape_progress(self, session: aiohttp.ClientSession, key: Key) -> None:
        await scraping.scrape_progress(self, session, key)
