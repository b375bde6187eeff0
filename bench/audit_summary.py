"""Who deleted the Pods? Counts an API server audit log's Pod deletions and evictions.

    python bench/audit_summary.py .run/audit.log [--namespace NS]

Reads the JSON-lines audit log an API server writes with bench/audit-pod-deletes.yaml as its
policy (see bench/scale.py) and prints one line per (verb, user, user agent, response code):
how many requests, first and last time. Only completed requests (stage ResponseComplete).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def summarize(lines: Any, namespace: str | None = None) -> list[dict[str, Any]]:
    counts: Counter[tuple[str, str, str, int]] = Counter()
    first: dict[tuple[str, str, str, int], str] = {}
    last: dict[tuple[str, str, str, int], str] = {}
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a line cut short when the server stopped
        if ev.get("stage") != "ResponseComplete":
            continue
        ref = ev.get("objectRef") or {}
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        verb = ev.get("verb", "?") + ("/" + ref["subresource"] if ref.get("subresource") else "")
        key = (
            verb,
            (ev.get("user") or {}).get("username", "?"),
            ev.get("userAgent", "?").split(" ")[0],
            (ev.get("responseStatus") or {}).get("code", 0),
        )
        counts[key] += 1
        at = ev.get("requestReceivedTimestamp", "")
        first.setdefault(key, at)
        last[key] = at
    return [
        {
            "verb": k[0],
            "user": k[1],
            "user_agent": k[2],
            "code": k[3],
            "count": n,
            "first": first[k],
            "last": last[k],
        }
        for k, n in counts.most_common()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--namespace")
    args = parser.parse_args()
    try:
        with args.log.open() as f:
            rows = summarize(f, args.namespace)
    except OSError as e:
        print(f"audit_summary: {e}", file=sys.stderr)
        return 1
    for r in rows:
        print(
            f"{r['count']:7d}  {r['verb']:<18} {r['code']:<4} {r['user']:<58} "
            f"{r['user_agent']:<40} {r['first']} .. {r['last']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
