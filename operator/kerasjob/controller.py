"""The controller loop: a de-duplicating work queue of jobs, reconciled by a few workers.

kopf feeds it: its indices hold every KerasJob and a `PodView` per child Pod (so the hot path
never LISTs), and its event handlers put the key ``(namespace, job name)`` of whatever
changed into the queue (`notify`). A worker takes a key, reads the job and its Pods from the
indices, asks `rc.plan` what to do, writes the status with one merge patch made
conditional on the resourceVersion it read (a conflict just requeues), and only then acts:
create/delete Pods and the Service (all idempotent: 409 on create and 404 on delete are
success), post Events. One key is never processed by two workers at once; a key notified
while being processed is processed again right after.

Two periodic loops complete it: a resync that requeues every job (for deadlines, TTLs and
anything missed) and the progress scraper of running jobs (see `progress`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import aiohttp

from kerasjob import children, progress
from kerasjob import reconcile as rc
from kerasjob.config import OperatorConfig
from kerasjob.events import build_event
from kerasjob.jobview import ParsedJob
from kerasjob.kube import (
    ApiError,
    KubeApi,
    events_path,
    gather_limited,
    job_path,
    pod_path,
    service_path,
)
from kerasjob.podview import PodView
from kerasjob.status import TERMINAL_PHASES, merge_patch
from kerasjob.workqueue import Key, WorkQueue
from kerasjob_contract import DEFAULT_METRICS_PORT

log = logging.getLogger("kerasjob.controller")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


#: Seconds a created child counts as existing before the index shows it (client-go's
#: "expectations"): saves redundant creates (409s) when a job is reconciled again before
#: the watch delivered its new Pods. Purely an optimisation: creates are idempotent anyway.
EXPECTATION_SECONDS = 30.0
_SERVICE = "\0service"


def _created_name(action: rc.Action) -> str | None:
    """The child a create action makes (a Pod name, or _SERVICE); None for other actions."""
    if isinstance(action, rc.CreatePod):
        return action.task.name
    if isinstance(action, rc.CreateService):
        return _SERVICE
    return None


def _namespace_terminating(error: BaseException) -> bool:
    """The job's namespace is being deleted, or is gone: its jobs go with it."""
    if not isinstance(error, ApiError):
        return False
    text = str(error)
    return (error.status == 403 and "being terminated" in text) or (
        error.status == 404 and "namespaces" in text and "not found" in text
    )


def _rv(body: Mapping[str, Any] | None) -> int:
    try:
        return int((body or {}).get("metadata", {}).get("resourceVersion", "0"))
    except (TypeError, ValueError):
        return 0


class Controller:
    """Reconciles KerasJobs. Construct inside the event loop; `run` until cancelled."""

    def __init__(
        self,
        config: OperatorConfig,
        api: KubeApi,
        jobs: Mapping[Key, Iterable[Mapping[str, Any]]],
        pods: Mapping[Key, Iterable[PodView]],
    ) -> None:
        self.config = config
        self.api = api
        self.jobs = jobs
        self.pods = pods
        self.queue = WorkQueue()
        self.ready = asyncio.Event()
        self._written: dict[Key, Mapping[str, Any]] = {}
        self._errors: dict[Key, int] = {}
        self._expected: dict[Key, dict[str, float]] = {}
        self._parsed: dict[tuple[str, Any], ParsedJob] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self.reconciles = 0
        self.reconcile_errors = 0
        self.conflicts = 0

    # -- input -----------------------------------------------------------------------------

    def notify(self, key: Key) -> None:
        """Something about job ``key`` (or one of its Pods) changed. Called by kopf handlers,
        which kopf runs only once its indices are fully populated: hence `ready`."""
        self.ready.set()
        self.queue.add(key)

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
        for t in [*self._tasks, *self._background]:
            t.cancel()
        for t in [*self._tasks, *self._background]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
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
        if _namespace_terminating(error):
            # The namespace, and with it the job, is going away: nothing left to do.
            log.debug("%s/%s: namespace terminating, not retrying", key[0], key[1])
            self._errors.pop(key, None)
            return None
        errors = self._errors[key] = self._errors.get(key, 0) + 1
        delay = min(0.25 * 2**errors, 30.0)
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

    async def _resync(self) -> None:
        await self.ready.wait()
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            for key in list(self.jobs.keys()):
                self.queue.add(key)

    # -- reconcile ------------------------------------------------------------------------

    def _body(self, key: Key) -> Mapping[str, Any] | None:
        """The freshest body we know: the index's, or the response of our last status write
        if the index has not caught up with it yet."""
        body = next(iter(self.jobs.get(key, ())), None)
        written = self._written.get(key)
        if body is None:
            self._written.pop(key, None)
            return None
        if written is not None:
            same_job = written.get("metadata", {}).get("uid") == body.get("metadata", {}).get("uid")
            if same_job and _rv(written) > _rv(body):
                return written
            self._written.pop(key, None)
        return body

    def _parse(self, body: Mapping[str, Any]) -> ParsedJob:
        meta = body.get("metadata") or {}
        cache_key = (str(meta.get("uid", "")), meta.get("generation"))
        parsed = self._parsed.get(cache_key)
        if parsed is None:
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            parsed = self._parsed[cache_key] = ParsedJob(body)
        return parsed

    async def reconcile(self, key: Key) -> float | None:
        """Reconcile one job; returns seconds until it must be looked at again (or None)."""
        self.reconciles += 1
        namespace, name = key
        body = self._body(key)
        if body is None:  # deleted: forget everything about it
            self.queue.forget(key)
            self._errors.pop(key, None)
            self._expected.pop(key, None)
            return None
        parsed = self._parse(body)
        job = parsed.view(body)
        old_status = dict(body.get("status") or {})
        pods = list(self.pods.get(key, ()))
        if await self._index_behind(namespace, old_status, pods):
            return 0.5
        now = utcnow()
        plan = rc.plan(
            job, old_status, pods, now, force_delete_after=self.config.force_delete_after
        )

        patch = merge_patch(old_status, plan.status)
        if patch:
            request = {
                "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                "status": patch,
            }
            try:
                written = await self.api.merge_patch(
                    job_path(namespace, name, "status"), request, "kerasjobs/status"
                )
            except ApiError as e:
                if e.status == 409:  # someone wrote since we read: look again shortly
                    self.conflicts += 1
                    log.debug(
                        "%s/%s: status conflict at resourceVersion %s",
                        namespace,
                        name,
                        body["metadata"]["resourceVersion"],
                    )
                    return 0.2
                if e.status == 404:
                    return None
                raise
            if isinstance(written, Mapping):
                self._written[key] = written
            if plan.status.get("phase") != old_status.get("phase"):
                log.info(
                    "%s/%s: %s -> %s",
                    namespace,
                    name,
                    old_status.get("phase"),
                    plan.status.get("phase"),
                )
        for event in plan.events:
            self._post_event(job, event, now)
        actions, wait = self._skip_expected(key, plan.actions, {p.name for p in pods})
        if actions:
            await self._act(key, job, parsed, plan, actions)
        if wait is not None:
            return wait if plan.requeue_after is None else min(wait, plan.requeue_after)
        return plan.requeue_after

    async def _index_behind(
        self, namespace: str, status: Mapping[str, Any], pods: list[PodView]
    ) -> bool:
        """True when the Pod index is older than the status: a Pod incarnation the status has
        recorded still exists, yet the index shows none or an older one.

        The planner reads a recorded Pod missing from the index as lost, and a different
        incarnation in the index as a replacement. Both are right when the index is at least
        as fresh as the status, which holds when this operator wrote the record; not when
        someone else did (a second operator, a standby taking over with a lagging watch).
        So before such a conclusion one request checks which incarnation really exists.
        """
        if status.get("phase") in TERMINAL_PHASES:  # nothing is counted any more
            return False
        indexed = {p.name: p.uid for p in rc.newest_incarnations(pods)}
        for name, rec in (status.get("trackedPods") or {}).items():
            uid = rec.get("uid")
            if not uid or indexed.get(name) == uid:
                continue
            if name not in indexed and rec.get("counted"):
                continue  # already counted and gone: nothing to conclude
            # A LIST narrowed to the one name: the Role grants list, not get, on Pods.
            found = await self.api.request(
                "GET",
                pod_path(namespace),
                params={"fieldSelector": f"metadata.name={name}"},
                count_as="list pods",
            )
            live = {i.get("metadata", {}).get("uid") for i in (found or {}).get("items", [])}
            if uid in live:
                log.debug("%s/%s: Pod index behind the status; waiting", namespace, name)
                return True
        return False

    def _skip_expected(
        self, key: Key, actions: list[rc.Action], observed: set[str]
    ) -> tuple[list[rc.Action], float | None]:
        """Drop creates of children created moments ago and not yet seen in the index."""
        expected = self._expected.get(key)
        if not expected:
            return actions, None
        now = asyncio.get_running_loop().time()
        for name in [n for n, t in expected.items() if t <= now or n in observed]:
            del expected[name]
        out: list[rc.Action] = []
        wait: float | None = None
        for action in actions:
            made = _created_name(action)
            if made is not None and made in expected:
                if made != _SERVICE:
                    left = expected[made] - now
                    wait = left if wait is None else min(wait, left)
                continue
            out.append(action)
        if not expected:
            self._expected.pop(key, None)
        return out, wait

    def _expect(self, key: Key, name: str) -> None:
        deadline = asyncio.get_running_loop().time() + EXPECTATION_SECONDS
        self._expected.setdefault(key, {})[name] = deadline

    async def _act(
        self,
        key: Key,
        job: rc.JobView,
        parsed: ParsedJob,
        plan: rc.Plan,
        actions: list[rc.Action],
    ) -> None:
        ns = job.namespace
        model = parsed.model
        calls: list[tuple[str | None, Any]] = []  # (child created, or None; the call)
        for action in actions:
            if isinstance(action, rc.CreateService) and model is not None:
                service = children.build_service(model)
                calls.append((_SERVICE, self.api.create(service_path(ns), service, "services")))
            elif isinstance(action, rc.CreatePod) and model is not None:
                manifest = children.build_pod(
                    model,
                    action.task.role,
                    action.task.index,
                    default_image=self.config.default_image,
                    restart_attempt=plan.restart_attempt,
                )
                calls.append((action.task.name, self.api.create(pod_path(ns), manifest, "pods")))
            elif isinstance(action, rc.DeletePod):
                grace = 0 if action.force else None
                call = self.api.delete(
                    pod_path(ns, action.name), "pods", uid=action.uid, grace_period_seconds=grace
                )
                calls.append((None, call))
            elif isinstance(action, rc.DeleteJob):
                log.info("%s/%s: ttlSecondsAfterFinished passed, deleting the job", ns, job.name)
                call = self.api.delete(
                    job_path(ns, job.name), "kerasjobs", uid=job.uid, propagation="Background"
                )
                calls.append((None, call))
        # The Service first (Pods resolve each other through it), then the rest together.
        first = 1 if calls and calls[0][0] == _SERVICE else 0
        results = await gather_limited([c for _, c in calls[:first]])
        results += await gather_limited([c for _, c in calls[first:]])
        for (name, _), result in zip(calls, results, strict=True):
            if name is not None and not isinstance(result, BaseException):
                self._expect(key, name)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    def _post_event(self, job: rc.JobView, event: rc.Event, now: datetime) -> None:
        body = build_event(
            namespace=job.namespace,
            name=job.name,
            uid=job.uid,
            type_=event.type,
            reason=event.reason,
            message=event.message,
            now=now,
            instance=self.config.instance,
        )
        if event.type == "Warning":
            log.warning("%s/%s: %s: %s", job.namespace, job.name, event.reason, event.message)
        else:
            log.info("%s/%s: %s: %s", job.namespace, job.name, event.reason, event.message)

        async def post() -> None:
            try:
                await self.api.create(events_path(job.namespace), body, "events")
            except Exception as e:  # an event is best effort
                log.debug("event for %s/%s not posted: %s", job.namespace, job.name, e)

        task = asyncio.create_task(post())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- progress --------------------------------------------------------------------------

    async def _progress(self) -> None:
        await self.ready.wait()
        timeout = aiohttp.ClientTimeout(total=self.config.progress_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await asyncio.sleep(self.config.progress_interval)
                keys = list(self.jobs.keys())
                await gather_limited([self._scrape_one(session, key) for key in keys], limit=16)

    async def _scrape_one(self, session: aiohttp.ClientSession, key: Key) -> None:
        body = self._body(key)
        if body is None:
            return
        status = body.get("status") or {}
        if status.get("phase") not in ("Running", "Restarting"):
            return
        parsed = self._parse(body)
        chief = next((p for p in self.pods.get(key, ()) if p.name == parsed.chief), None)
        if chief is None or not chief.pod_ip or not chief.running_ready:
            return
        port = chief.metrics_port or DEFAULT_METRICS_PORT
        url = f"http://{chief.pod_ip}:{port}/metrics"
        text = await progress.scrape(session, url, self.config.progress_timeout)
        if text is None:
            return
        new = progress.progress_patch(
            status.get("progress"),
            progress.parse_metrics(text),
            total_steps=parsed.total_steps,
            now=utcnow(),
        )
        if new is None:
            return
        try:
            await self.api.merge_patch(
                job_path(*key, "status"), {"status": {"progress": new}}, "kerasjobs/status"
            )
        except ApiError as e:
            log.debug("progress of %s/%s not written: %s", key[0], key[1], e)
