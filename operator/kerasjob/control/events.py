"""Kubernetes Events about a KerasJob (what `kubectl describe kerasjob` shows).

Posted by the controller after the status write they describe succeeded; a lost event
(operator killed in between) is acceptable, a wrong one is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any, Protocol

from kerasjob import API_GROUP, API_VERSION, KIND
from kerasjob.k8s.paths import events_path
from kerasjob_contract.times import format_time

log = logging.getLogger("kerasjob.control.events")

COMPONENT = "kerasjob-operator"
MAX_MESSAGE = 1024


def build_event(
    *,
    namespace: str,
    name: str,
    uid: str,
    type_: str,
    reason: str,
    message: str,
    now: datetime,
    instance: str = "",
) -> dict[str, Any]:
    """A core/v1 Event involving the KerasJob ``namespace/name``."""
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": name,
            "namespace": namespace,
            "uid": uid,
        },
        "type": type_,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance or COMPONENT,
    }


class _Creates(Protocol):
    async def create(self, path: str, obj: Any, resource: str) -> Any: ...


class EventRecorder:
    """Posts Events in the background (best effort: a lost Event is logged at debug level),
    and logs each one as the operator's own log line."""

    def __init__(self, api: _Creates) -> None:
        self.api = api
        self._pending: set[asyncio.Task[None]] = set()

    def post(self, body: dict[str, Any]) -> None:
        """Post an Event made by `build_event` (in the background)."""
        namespace, name = body["metadata"]["namespace"], body["involvedObject"]["name"]
        level = logging.WARNING if body["type"] == "Warning" else logging.INFO
        log.log(level, "%s/%s: %s: %s", namespace, name, body["reason"], body["message"])

        async def send() -> None:
            try:
                await self.api.create(events_path(namespace), body, "events")
            except Exception as e:  # an event is best effort
                log.debug("event for %s/%s not posted: %s", namespace, name, e)

        task = asyncio.create_task(send())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for the Events in flight (tests; shutdown cancels them instead)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def cancel(self) -> None:
        for task in list(self._pending):
            task.cancel()
        for task in list(self._pending):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
