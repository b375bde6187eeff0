"""The manifest templates (templates/*.yaml.j2): rendered with Jinja2, parsed as YAML.

Every Pod the operator creates goes through here, so rendering is made cheap: where a
template prints each variable as a whole YAML value (``key: {{ x | to_json }}`` or
``key: {{ n }}``) and has no control flow, its YAML shape does not depend on the values.
Such a template is rendered and parsed once, with a placeholder per variable, and each
render afterwards copies that tree with the values put in the placeholders' places (what
parsing the rendered text would give: a ``to_json`` value as JSON decodes it, a bare one as
YAML reads its text). Parsing YAML was most of a Pod's build time (~0.4 of 0.8 ms).

A template with ``{% if %}``/``{% for %}``, another filter, or a variable inside a longer
string is rendered and parsed in full on every call, as before; both ways give equal
manifests (tests/unit/test_templating.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import yaml
from jinja2 import nodes

#: libyaml's C loader when present: ~10x faster than the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PLACEHOLDER = "kerasjob__placeholder__{}__"
_PARTIAL = object()  # what _slotted gives for a placeholder inside a longer string


def to_json(value: Any) -> str:
    """The templates' one filter. JSON is valid YAML: a correctly quoted scalar or flow."""
    if isinstance(value, jinja2.Undefined):  # StrictUndefined's error, not json's TypeError
        value._fail_with_undefined_error()
    return json.dumps(value, separators=(",", ":"))


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kerasjob.manifests", "templates"),
        undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML
    )
    env.filters["to_json"] = to_json
    return env


def render(template: str, **context: Any) -> dict[str, Any]:
    """templates/<template> rendered with `context` and parsed as YAML."""
    shape = _shape(template)
    if shape is None:
        return render_text(template, **context)
    missing = shape.variables - context.keys()
    if missing:  # what StrictUndefined says when the text is rendered
        raise jinja2.UndefinedError(f"{sorted(missing)[0]!r} is undefined")
    out: dict[str, Any] = shape.fill(context)
    return out


def render_text(template: str, **context: Any) -> dict[str, Any]:
    """templates/<template> rendered to text and parsed, every time (no shape reused)."""
    out: dict[str, Any] = yaml.load(
        environment().get_template(template).render(**context), Loader=_LOADER
    )
    return out


# --- the parsed shape ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    variable: str


@dataclass(frozen=True)
class _Shape:
    tree: Any  # the parsed YAML, a _Slot where each variable's value goes
    variables: frozenset[str]
    reader: Mapping[str, Callable[[Any], Any]]  # variable -> its value as the parser reads it

    def fill(self, context: Mapping[str, Any]) -> Any:
        return self._fill(self.tree, context)

    def _fill(self, node: Any, context: Mapping[str, Any]) -> Any:
        if isinstance(node, dict):
            return {k: self._fill(v, context) for k, v in node.items()}
        if isinstance(node, list):
            return [self._fill(v, context) for v in node]
        if isinstance(node, _Slot):  # a fresh value at each place: no two places share one
            return self.reader[node.variable](context[node.variable])
        return node  # a str, number, bool or None of the template's own text


def _as_json(value: Any) -> Any:
    return json.loads(to_json(value))


def _as_bare(value: Any) -> Any:
    if type(value) is int:  # not a bool: an int whose text YAML reads differently
        return value
    return yaml.load(str(value), Loader=_LOADER)


@functools.cache
def _shape(template: str) -> _Shape | None:
    """The template's parsed shape, or None when its shape may depend on the values."""
    env = environment()
    source = env.loader.get_source(env, template)[0] if env.loader else ""
    ast = env.parse(source)
    reader: dict[str, Callable[[Any], Any]] = {}
    for output in ast.body:
        if not isinstance(output, nodes.Output):
            return None  # {% if %}, {% for %}, {% set %}, ...
        for node in output.nodes:
            if isinstance(node, nodes.TemplateData):
                continue
            if isinstance(node, nodes.Name):
                how = _as_bare
            elif (
                isinstance(node, nodes.Filter)
                and node.name == "to_json"
                and isinstance(node.node, nodes.Name)
                and not node.args
                and not node.kwargs
            ):
                how, node = _as_json, node.node
            else:
                return None
            if reader.setdefault(node.name, how) is not how:
                return None  # printed both ways: keep it simple, render it
    variables = frozenset(reader)  # (a name may also be a Jinja global, e.g. `namespace`)
    text = env.from_string(source).render({v: _PLACEHOLDER.format(v) for v in variables})
    slots = {_PLACEHOLDER.format(v): _Slot(v) for v in variables}
    tree = _slotted(yaml.load(text, Loader=_LOADER), slots)
    return None if tree is _PARTIAL else _Shape(tree, variables, reader)


def _slotted(node: Any, slots: Mapping[str, _Slot]) -> Any:
    """`node` with each placeholder value replaced by its slot; _PARTIAL where a placeholder
    is only part of a string or a key (its value would change the text around it)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            v = _slotted(v, slots)
            if v is _PARTIAL or (isinstance(k, str) and _has_placeholder(k)):
                return _PARTIAL
            out[k] = v
        return out
    if isinstance(node, list):
        items = [_slotted(v, slots) for v in node]
        return _PARTIAL if any(v is _PARTIAL for v in items) else items
    if isinstance(node, str):
        if node in slots:
            return slots[node]
        return _PARTIAL if _has_placeholder(node) else node
    return node


def _has_placeholder(text: str) -> bool:
    return _PLACEHOLDER.split("{}")[0] in text
