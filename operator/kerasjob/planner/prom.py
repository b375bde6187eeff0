"""Prometheus text format: the samples of a /metrics page or a termination message.

Pure parsing, shared by `progress` (the progress gauges) and `goodput` (the disruption
counters) so that neither imports the other for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
)
_LABEL = re.compile(r'(?P<k>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<v>(?:[^"\\]|\\.)*)"')


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each finite sample in Prometheus text format."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if math.isnan(value) or math.isinf(value):
            continue
        labels = {lm.group("k"): lm.group("v") for lm in _LABEL.finditer(m.group("labels") or "")}
        yield m.group("name"), labels, value
