"""The progress scraper: every few seconds, the chief's metrics of each running job into its
status.progress (and the goodput Events), through the controller's conditional status
write."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

import aiohttp

from kerasjob.config import OperatorConfig
from kerasjob.control.observed import Observed
from kerasjob.k8s.kube import ApiError, gather_limited
from kerasjob.k8s.workqueue import Key
from kerasjob.planner import goodput, progress
from kerasjob.planner.planning import Event, JobView
from kerasjob_contract import DEFAULT_METRICS_PORT
from kerasjob_contract.times import utcnow

log = logging.getLogger("kerasjob.control.controller")


class Scraping(Protocol):
    """What the scraper needs of the controller."""

    config: OperatorConfig
    jobs: Mapping[Key, Iterable[Mapping[str, Any]]]
    ready: asyncio.Event

    def observe(self, key: Key) -> Observed | None: ...

    async def write_status(self, key: Key, seen: Observed, patch: Mapping[str, Any]) -> bool: ...

    def post(self, job: JobView, events: Iterable[Event], now: datetime) -> None: ...


async def progress_loop(ctx: Scraping) -> None:
    await ctx.ready.wait()
    timeout = aiohttp.ClientTimeout(total=ctx.config.progress_timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            await asyncio.sleep(ctx.config.progress_interval)
            keys = list(ctx.jobs.keys())
            await gather_limited([scrape_progress(ctx, session, key) for key in keys], limit=16)


async def scrape_progress(ctx: Scraping, session: aiohttp.ClientSession, key: Key) -> None:
    """Read the chief's metrics of a running job into status.progress, through the same
    conditional write as the reconcile (a conflict skips this round: the next scrape,
    seconds later, reads the newer version)."""
    seen = ctx.observe(key)
    if seen is None or seen.status.get("phase") not in ("Running", "Restarting"):
        return
    chief = next((p for p in seen.pods if p.name == seen.parsed.chief), None)
    if chief is None or not chief.pod_ip or not chief.running_ready:
        return
    port = chief.metrics_port or DEFAULT_METRICS_PORT
    url = f"http://{chief.pod_ip}:{port}/metrics"
    text = await scrape(session, url, ctx.config.progress_timeout)
    if text is None:
        return
    scraped = progress.parse_metrics(text)
    old = seen.status.get("progress") or {}
    costs = goodput.parse_goodput(text)
    if costs is not None:
        scraped["goodput"] = costs
    now = utcnow()
    new = progress.progress_patch(old, scraped, total_steps=seen.parsed.total_steps, now=now)
    if new is None:
        return
    try:
        written = await ctx.write_status(key, seen, {"progress": new})
    except ApiError as e:
        log.debug("progress of %s/%s not written: %s", key[0], key[1], e)
        return
    if written and costs is not None:
        events = goodput.goodput_events(old.get("goodput"), costs)
        ctx.post(seen.job, (Event("Normal", r, m) for r, m in events), now)


async def scrape(session: aiohttp.ClientSession, url: str, timeout: float) -> str | None:
    """GET the metrics text; None on any error (logged at debug)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                log.debug("metrics %s: HTTP %s", url, resp.status)
                return None
            return await resp.text()
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        log.debug("metrics %s: %s", url, e)
        return None
