"""A kopf bug worked around: a namespace created while the operator starts is never served.

With namespace patterns (``--namespace 'team-*'``), kopf 1.45's namespace observer first lists
the namespaces (the set it serves), then starts a watcher on them; that watcher lists them
*again* and watches from its own listing. Its listing's events (type ``None``) are dropped
(``process_discovered_namespace_event`` returns on them), so a namespace created between the
two listings is in neither the served set nor the watch: its KerasJobs were ignored until the
operator restarted. Found by ``tests/integration/test_kueue.py``, whose namespace is created
right after the operator answers its liveness probe (CI failed on it twice: no Workload, the
job's status empty, the operator's log silent about it).

`install` makes the observer revise the served set from the watcher's listing too. A listed
namespace counts exactly as a watched one (matched by the patterns; a terminating one kept
while it has blockers, as kopf does); adding one already served changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kopf._core.reactor import observation


async def process_namespace_event(
    *,
    raw_event: Any,
    namespaces: Collection[Any],
    insights: Any,
    **_: Any,
) -> None:
    """kopf's ``process_discovered_namespace_event``, for listed namespaces too."""
    async with insights.revised:
        observation.revise_namespaces(
            raw_events=[raw_event], insights=insights, namespaces=namespaces
        )
        insights.revised.notify_all()


def install() -> None:
    """Patch the observer (it looks the processor up in its module at each start)."""
    observation.process_discovered_namespace_event = process_namespace_event
