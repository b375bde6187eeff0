"""Timestamps, written and read in one form everywhere (operator status and Events, the
trainer's progress.json, the tools): metav1.Time -- RFC 3339, second precision, UTC,
``2026-05-01T12:00:00Z``. kubectl and other controllers compare these strings."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def format_time(value: datetime) -> str:
    """``2026-05-01T12:00:00Z``; a naive datetime is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    """Any RFC 3339 timestamp (or datetime) as an aware datetime; None if unset or invalid."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = str(value).replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
