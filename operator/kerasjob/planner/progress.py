"""Training progress: read the chief's Prometheus metrics into ``status.progress``.

The chief serves ``kerasjob_*`` gauges at ``http://<podIP>:<KERASJOB_METRICS_PORT>/metrics``
(names in `kerasjob_contract`). Parsing and comparison here are pure; the scrape itself (one
short-timeout GET whose failures are expected and only logged at debug level) is
`control.scraping`'s.
"""

from __future__ import annotations

from datetime import datetime

from kerasjob.api import wire
from kerasjob.planner import goodput
from kerasjob.planner.prom import samples
from kerasjob_contract import (
    METRIC_EPOCH,
    METRIC_LOSS,
    METRIC_SAMPLES_PER_SECOND,
    METRIC_STEP,
    METRIC_TRAINING_METRIC,
)
from kerasjob_contract.times import format_time


def parse_metrics(text: str) -> wire.Progress:
    """``status.progress`` fields (without updatedAt/totalSteps) from Prometheus text."""
    out: wire.Progress = {}
    metrics: dict[str, float] = {}
    for name, labels, value in samples(text):
        if name == METRIC_EPOCH:
            out["epoch"] = int(value)
        elif name == METRIC_STEP:
            out["step"] = int(value)
        elif name == METRIC_LOSS:
            out["loss"] = round(value, 6)
        elif name == METRIC_SAMPLES_PER_SECOND:
            out["samplesPerSecond"] = round(max(value, 0.0), 3)
        elif name == METRIC_TRAINING_METRIC and "name" in labels:
            metrics[labels["name"]] = round(value, 6)
    if metrics:
        out["metrics"] = metrics
    return out


def progress_patch(
    current: wire.Progress | None,
    scraped: wire.Progress,
    *,
    total_steps: int | None,
    now: datetime,
) -> wire.Progress | None:
    """The new ``status.progress``, or None when nothing but the time would change."""
    if not scraped:
        return None
    new = scraped.copy()
    if total_steps is not None:
        new["totalSteps"] = total_steps
    old = {k: v for k, v in (current or {}).items() if k != "updatedAt"}
    if old == new:
        return None
    new["updatedAt"] = format_time(now)
    return new


def from_termination(
    current: wire.Progress | None, message: str, *, total_steps: int | None, now: datetime
) -> wire.Progress | None:
    """The new ``status.progress`` from the chief's termination message (the /metrics
    samples it leaves when its process ends), or None when it holds none or nothing new."""
    scraped = parse_metrics(message)
    if not scraped:
        return None
    costs = goodput.parse_goodput(message)
    if costs is not None:
        scraped["goodput"] = costs
    elif current and "goodput" in current:
        scraped["goodput"] = current["goodput"].copy()
    return progress_patch(current, scraped, total_steps=total_steps, now=now)
