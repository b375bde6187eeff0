"""Bounded nesting: no object, however deep, crashes or stalls the operator.

The API server stores a KerasJob whose ``spec.template`` (schemaless, preserve-unknown-fields)
nests thousands of levels deep: Go's JSON decoder allows 10,000. Python's C JSON decoder
recurses once per level and raises RecursionError at about 1,000 — inside kopf's LIST and
WATCH of KerasJobs, which took the whole operator down, at every start while the object
existed. Any recursive walk of such a body (copying, validating, merging) fails the same way.

Two bounds, each in one place:

* `install` makes every plain ``json.loads`` of this process (kopf's watch stream and LISTs,
  aiohttp's ``response.json()``, our own client) prune, instead of failing on, a document
  nested deeper than the interpreter can decode: the subtree at `DECODE_DEPTH` becomes the
  string `TOO_DEEP`. Documents that decode normally are untouched (the same C decoder).
* `prune` bounds an already decoded object to `BODY_DEPTH` levels without recursion, for
  the job index and the bodies our writes return, so everything downstream (validation,
  templates, merging) sees at most `BODY_DEPTH` levels.

`validation.validate_job` then fails such a job (reason InvalidSpec): its template is deeper
than `MAX_TEMPLATE_DEPTH` (a real PodTemplateSpec needs about 12 levels).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

#: Levels a decoded document keeps when the C decoder cannot decode it whole.
DECODE_DEPTH = 100
#: Levels of a KerasJob body the controller ever looks at (more than any valid job has).
BODY_DEPTH = 48
#: Levels allowed in spec.template, a role's template and checkpoint.volume.
MAX_TEMPLATE_DEPTH = 32
#: What replaces a subtree nested too deep.
TOO_DEEP = "<kerasjob: nested too deep, dropped>"

# A JSON string (escapes included), or one bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_TOO_DEEP_JSON = json.dumps(TOO_DEEP)


def prune_text(text: str, max_depth: int = DECODE_DEPTH) -> str:
    """JSON ``text`` with every value nested deeper than ``max_depth`` replaced by
    `TOO_DEEP`; linear time, no recursion. Malformed input stays malformed."""
    out: list[str] = []
    pos = depth = 0
    search = _TOKEN.search
    m = search(text)
    while m is not None:
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                # Skip the whole value: find its matching close bracket.
                skip_depth = 1
                end = m.end()
                while skip_depth and (n := search(text, end)) is not None:
                    t = n.group()
                    if t in "[{":
                        skip_depth += 1
                    elif t in "]}":
                        skip_depth -= 1
                    end = n.end()
                out.append(text[pos : m.start()])
                out.append(_TOO_DEEP_JSON)
                pos = end
                depth -= 1
                m = search(text, end)
                continue
        elif token in "]}":
            depth -= 1
        m = search(text, m.end())
    out.append(text[pos:])
    return "".join(out)


class BoundedDecoder(json.JSONDecoder):
    """json.JSONDecoder that prunes, instead of failing on, documents nested too deep.

    A plain ``decode(s)`` tries orjson first: decoding the watch streams' JSON was the
    operator's largest single cost (13% of its CPU at 300 jobs, py-spy), and orjson does it
    about 2x faster, to the same values. Whatever orjson refuses (nesting over 1,024 levels,
    NaN, lone surrogates, malformed text) goes the standard library's way, as before. One
    difference: orjson reads an integer over 64 bits as a float; the API server never sends
    one (Go decodes an object's numbers as int64 or float64).
    """

    def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            try:
                return orjson.loads(s)
            except orjson.JSONDecodeError:
                pass
        try:
            return super().decode(s, *args, **kwargs)
        except RecursionError:
            return super().decode(prune_text(s), *args, **kwargs)


def install() -> None:
    """Make this process's plain ``json.loads(s)`` calls bounded (see the module docstring).

    ``json.loads`` without options delegates to the module-level ``json._default_decoder``,
    looked up at each call (CPython and PyPy alike, since Python 2.6); kopf and aiohttp offer
    no decoder hook of their own. The fast path is the same C decoder as before.
    """
    if not isinstance(json._default_decoder, BoundedDecoder):  # type: ignore[attr-defined]
        json._default_decoder = BoundedDecoder()  # type: ignore[attr-defined]


def depth(value: Any) -> int:
    """Nesting depth of mappings and lists (a scalar is 0, ``{}`` is 1); no recursion."""
    best = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        best = max(best, level)
        stack.extend((child, level) for child in children)
    return best


def prune(value: Any, max_depth: int = BODY_DEPTH) -> Any:
    """``value`` itself when at most ``max_depth`` deep; else a plain copy in which every
    container nested deeper is `TOO_DEEP`. Recurses at most ``max_depth`` levels."""
    if depth(value) <= max_depth:
        return value
    return _pruned(value, max_depth)


def plain_copy(value: Any, max_depth: int = BODY_DEPTH) -> Any:
    """A plain copy (dicts and lists, e.g. of a read-only kopf body) in which every container
    nested deeper than ``max_depth`` is `TOO_DEEP`: ``plain(prune(value))`` in one walk
    (kopf calls the KerasJob index on every event of every job)."""
    return _pruned(value, max_depth)


def _pruned(value: Any, left: int) -> Any:
    if isinstance(value, Mapping):
        return {k: _pruned(v, left - 1) for k, v in value.items()} if left > 0 else TOO_DEEP
    if isinstance(value, list | tuple):
        return [_pruned(v, left - 1) for v in value] if left > 0 else TOO_DEEP
    return value


#: Serialised bytes allowed in one template: the API server caps the whole object (~1.5 MiB
#: in etcd); this keeps rendering and hashing every Pod cheap. A Pod's own limits (e.g.
#: 256 KiB of annotations) are the API server's to enforce when the Pod is created.
MAX_TEMPLATE_BYTES = 512 * 1024


def spec_problems(spec: Any) -> list[str]:
    """The schemaless parts of a KerasJob spec that are nested too deep or too large.

    Checked before anything walks the spec recursively (pydantic, merging, rendering).
    """
    if not isinstance(spec, Mapping):
        return []
    parts: list[tuple[str, Any]] = [("spec.template", spec.get("template"))]
    for role in ("chief", "evaluator"):
        role_spec = spec.get(role)
        if isinstance(role_spec, Mapping):
            parts.append((f"spec.{role}.template", role_spec.get("template")))
    checkpoint = spec.get("checkpoint")
    if isinstance(checkpoint, Mapping):
        parts.append(("spec.checkpoint.volume", checkpoint.get("volume")))
    problems: list[str] = []
    for where, value in parts:
        if value is None:
            continue
        if depth(value) > MAX_TEMPLATE_DEPTH:
            problems.append(
                f"{where} is nested more than {MAX_TEMPLATE_DEPTH} levels deep "
                "(a Pod template needs about 12)"
            )
            continue
        size = len(json.dumps(value, separators=(",", ":"), default=str))
        if size > MAX_TEMPLATE_BYTES:
            problems.append(
                f"{where} is {size} bytes serialised; at most {MAX_TEMPLATE_BYTES} are allowed"
            )
    return problems
