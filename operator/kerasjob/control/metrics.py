"""The operator's own Prometheus endpoint: ``GET /metrics`` on ``--metrics-port``.

Counters come straight from the controller (never cached, unlike kopf's liveness probes):
API requests by verb and resource, reconciles and their errors, the queue depth, the
jobs known per phase, and each elastic job's size and resizes.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from kerasjob.control.controller import Controller

log = logging.getLogger(__name__)


def render(controller: Controller) -> str:
    """Prometheus text exposition of the controller's counters."""
    lines = [
        "# HELP kerasjob_operator_api_requests_total API requests made by the controller.",
        "# TYPE kerasjob_operator_api_requests_total counter",
    ]
    for key, value in sorted(controller.api.requests.items()):
        verb, _, resource = key.partition(" ")
        lines.append(
            f'kerasjob_operator_api_requests_total{{verb="{verb}",resource="{resource}"}} {value}'
        )
    lines += [
        "# HELP kerasjob_operator_reconciles_total Reconciles of a KerasJob.",
        "# TYPE kerasjob_operator_reconciles_total counter",
        f"kerasjob_operator_reconciles_total {controller.reconciles}",
        "# HELP kerasjob_operator_reconcile_errors_total Reconciles that raised (retried).",
        "# TYPE kerasjob_operator_reconcile_errors_total counter",
        f"kerasjob_operator_reconcile_errors_total {controller.reconcile_errors}",
        "# HELP kerasjob_operator_status_conflicts_total Status writes refused as stale (409).",
        "# TYPE kerasjob_operator_status_conflicts_total counter",
        f"kerasjob_operator_status_conflicts_total {controller.conflicts}",
        "# HELP kerasjob_operator_queue_depth Jobs waiting to be reconciled.",
        "# TYPE kerasjob_operator_queue_depth gauge",
        f"kerasjob_operator_queue_depth {len(controller.queue)}",
        "# HELP kerasjob_operator_jobs KerasJobs known to the operator, by phase.",
        "# TYPE kerasjob_operator_jobs gauge",
    ]
    phases: Counter[str] = Counter()
    for store in list(controller.jobs.values()):
        for body in store:
            phases[(body.get("status") or {}).get("phase") or "None"] += 1
    for phase, count in sorted(phases.items()):
        lines.append(f'kerasjob_operator_jobs{{phase="{phase}"}} {count}')
    return "\n".join(lines + _elastic(controller)) + "\n"


def _elastic(controller: Controller) -> list[str]:
    """Per elastic job: its current size and resizes (from its status: they survive an
    operator restart)."""
    workers, resizes = [], []
    for store in list(controller.jobs.values()):
        for body in store:
            elastic = (body.get("status") or {}).get("elastic") or {}
            if not elastic:
                continue
            meta = body.get("metadata") or {}
            job = f'namespace="{meta.get("namespace", "")}",name="{meta.get("name", "")}"'
            workers.append(
                f"kerasjob_operator_elastic_workers{{{job}}} {int(elastic.get('workers') or 0)}"
            )
            resizes.append(
                f"kerasjob_operator_elastic_resizes_total{{{job}}} "
                f"{int(elastic.get('resizes') or 0)}"
            )
    if not workers:
        return []
    return [
        "# HELP kerasjob_operator_elastic_workers An elastic job's current number of workers.",
        "# TYPE kerasjob_operator_elastic_workers gauge",
        *sorted(workers),
        "# HELP kerasjob_operator_elastic_resizes_total Resizes of an elastic job.",
        "# TYPE kerasjob_operator_elastic_resizes_total counter",
        *sorted(resizes),
    ]


async def serve(controller: Controller, port: int, host: str = "0.0.0.0") -> web.AppRunner:
    """Start the endpoint; returns the runner (``await runner.cleanup()`` to stop)."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=render(controller), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("metrics on http://%s:%d/metrics", host, port)
    return runner


def parse(text: str) -> dict[str, float]:
    """``{"name{labels}": value}`` from Prometheus text (for tests and benches)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
