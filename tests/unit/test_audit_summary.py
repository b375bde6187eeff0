"""bench/audit_summary.py: an audit log's Pod deletions counted by who made them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "audit_summary", Path(__file__).resolve().parents[2] / "bench" / "audit_summary.py"
)
assert SPEC is not None and SPEC.loader is not None
audit_summary = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(audit_summary)


def event(
    user: str,
    ns: str,
    at: str,
    *,
    stage: str = "ResponseComplete",
    code: int = 200,
    sub: str | None = None,
    verb: str = "delete",
) -> str:
    ref = {"resource": "pods", "namespace": ns, "name": "j1-worker-1"}
    if sub:
        ref["subresource"] = sub
    return json.dumps(
        {
            "stage": stage,
            "verb": verb,
            "objectRef": ref,
            "user": {"username": user},
            "userAgent": "kwok/v0.8.0 (linux/amd64) kubernetes/$Format",
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": at,
        }
    )


def test_deletions_are_counted_by_user_agent_and_code_within_the_namespace() -> None:
    lines = [
        event("kwok", "a", "t1"),
        event("kwok", "a", "t2"),
        event("kwok", "a", "t3", code=404),
        event("kwok", "a", "t0", stage="ResponseStarted"),  # not a completed request
        event("system:serviceaccount:kube-system:taint-eviction-controller", "a", "t4"),
        event("kwok", "b", "t5"),  # another namespace
        event("admin", "a", "t6", verb="create", sub="eviction"),
        '{"stage": "ResponseComplete", "verb": "del',  # cut short when the server stopped
    ]
    rows = audit_summary.summarize(lines, "a")
    assert [(r["verb"], r["user"], r["user_agent"], r["code"], r["count"]) for r in rows] == [
        ("delete", "kwok", "kwok/v0.8.0", 200, 2),
        ("delete", "kwok", "kwok/v0.8.0", 404, 1),
        (
            "delete",
            "system:serviceaccount:kube-system:taint-eviction-controller",
            "kwok/v0.8.0",
            200,
            1,
        ),
        ("create/eviction", "admin", "kwok/v0.8.0", 200, 1),
    ]
    assert (rows[0]["first"], rows[0]["last"]) == ("t1", "t2")
    assert (
        len(audit_summary.summarize(lines)) == 4 and audit_summary.summarize(lines)[0]["count"] == 3
    )
