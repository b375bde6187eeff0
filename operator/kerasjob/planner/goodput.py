"""Goodput in the operator: what disruptions cost a job, from the chief's counters.

The chief serves
``kerasjob_disruptions_total``, ``kerasjob_lost_seconds_total``,
``kerasjob_steps_redone_total``, ``kerasjob_productive_seconds_total`` and
``kerasjob_goodput_ratio`` (names in `kerasjob_contract`) next to the progress gauges that
`progress.parse_metrics` reads (both parse with `prom.samples`). The controller's progress
scrape stores `parse_goodput` in ``status.progress.goodput`` and posts the Events of
`goodput_events` when a disruption was accounted; ``kerasjob status`` and ``kerasjob
describe`` print `describe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kerasjob.api import Reason, wire
from kerasjob.planner.prom import samples
from kerasjob_contract import (
    METRIC_DISRUPTIONS,
    METRIC_GOODPUT_RATIO,
    METRIC_LOST_SECONDS,
    METRIC_PRODUCTIVE_SECONDS,
    METRIC_STEPS_REDONE,
)


def parse_goodput(text: str) -> wire.Goodput | None:
    """The goodput figures (camelCase, as status would hold them) from Prometheus text;
    None before the chief has accounted any disruption."""
    values = {name: value for name, _, value in samples(text)}
    if not values.get(METRIC_DISRUPTIONS):
        return None
    out: wire.Goodput = {"disruptions": int(values[METRIC_DISRUPTIONS])}
    if METRIC_LOST_SECONDS in values:
        out["lostSeconds"] = round(values[METRIC_LOST_SECONDS], 3)
    if METRIC_STEPS_REDONE in values:
        out["stepsRedone"] = int(values[METRIC_STEPS_REDONE])
    if METRIC_PRODUCTIVE_SECONDS in values:
        out["productiveSeconds"] = round(values[METRIC_PRODUCTIVE_SECONDS], 3)
    if METRIC_GOODPUT_RATIO in values:
        out["goodput"] = round(values[METRIC_GOODPUT_RATIO], 4)
    return out


def goodput_events(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(reason, message) of the Events for disruptions accounted since `old`."""
    before = int((old or {}).get("disruptions") or 0)
    after = int(new.get("disruptions") or 0)
    if after <= before:
        return []
    lost = float(new.get("lostSeconds") or 0.0) - float((old or {}).get("lostSeconds") or 0.0)
    redone = int(new.get("stepsRedone") or 0) - int((old or {}).get("stepsRedone") or 0)
    which = f"disruption {after}" if after == before + 1 else f"disruptions {before + 1}-{after}"
    return [
        (
            Reason.DISRUPTION_COST.value,
            f"{which} cost {lost:.1f}s ({redone} steps redone); "
            f"goodput {float(new.get('goodput') or 0.0):.1%}",
        )
    ]


def describe(goodput: Mapping[str, Any] | None) -> str:
    """One line for `kerasjob status`."""
    if not goodput or not goodput.get("disruptions"):
        return "goodput: no disruption so far"
    n = int(goodput["disruptions"])
    return (
        f"goodput {float(goodput.get('goodput') or 0.0):.1%}: "
        f"{float(goodput.get('productiveSeconds') or 0.0):.1f}s productive, "
        f"{float(goodput.get('lostSeconds') or 0.0):.1f}s lost to {n} "
        f"disruption{'s' if n != 1 else ''} ({int(goodput.get('stepsRedone') or 0)} "
        "steps redone)"
    )
