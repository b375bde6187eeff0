"""kerasjob.control.kopf_fixes against kopf's real namespace observer (its API calls faked): a
namespace created between the observer's own listing and its watcher's listing is served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import fetching
from kopf._cogs.structs import references
from kopf._core.reactor import observation, queueing

from kerasjob.control import kopf_fixes

NAMESPACES = references.Resource(
    group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False
)


def ns(name: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}}


def observe(monkeypatch: pytest.MonkeyPatch, watched: list[dict[str, Any]]) -> set[str]:
    """Run kopf's namespace observer for ``team-*``: its listing finds team-a; then its
    watcher delivers ``watched`` (raw events) and ends. The namespaces it serves."""

    async def fetch_objs(**_: Any) -> AsyncIterator[tuple[list[Any], str]]:
        yield [ns("team-a"), ns("other")], "1"

    async def watcher(*, processor: Callable[..., Any], **_: Any) -> None:
        for event in watched:
            await processor(raw_event=event)

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(queueing, "watcher", watcher)

    async def run() -> set[str]:
        insights = references.Insights()
        await insights.backbone.fill(resources=[NAMESPACES])
        await observation.namespace_observer(
            clusterwide=False,
            namespaces=["team-*"],
            insights=insights,
            settings=kopf.OperatorSettings(),
        )
        return {str(n) for n in insights.namespaces}

    return asyncio.run(run())


# The watcher's own listing (type None) repeats team-a and has team-b, made between the two
# listings; then team-c is created and team-a deleted while it watches.
EVENTS = [
    {"type": None, "object": ns("team-a")},
    {"type": None, "object": ns("team-b")},
    {"type": "ADDED", "object": ns("team-c")},
    {"type": "DELETED", "object": ns("team-a", deletionTimestamp="2026-11-23T00:00:00Z")},
]


def test_kopf_alone_loses_a_namespace_made_between_its_two_listings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bug (kopf 1.45): fails once kopf serves listed namespaces itself, and then
    kopf_fixes can go."""
    assert observe(monkeypatch, EVENTS) == {"team-c"}


def test_with_the_fix_every_matching_namespace_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        observation, "process_discovered_namespace_event", kopf_fixes.process_namespace_event
    )
    assert observe(monkeypatch, EVENTS) == {"team-b", "team-c"}


def test_the_operator_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observation, "process_discovered_namespace_event", None)
    monkeypatch.setattr(kopf, "run", lambda **_: None)
    from kerasjob.cli import app as cli

    assert cli.main(["run", "--namespace", "team-*"]) == 0
    assert observation.process_discovered_namespace_event is kopf_fixes.process_namespace_event
