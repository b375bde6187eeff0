"""Kubernetes Events about a KerasJob (what `kubectl describe kerasjob` shows).

Posted by the controller after the status write they describe succeeded; a lost event
(operator killed in between) is acceptable, a wrong one is not.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kerasjob import API_GROUP, API_VERSION, KIND
from kerasjob.status import fmt_time

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
    stamp = fmt_time(now)
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
