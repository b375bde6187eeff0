"""Whether the job's Service or NetworkPolicy still has the spec the operator gave it, and
the patch that gives it back.

The operator holds these two children's spec as it holds their existence: a policy patched
to admit everyone (``ingress: [{}]``) or a Service whose selector was changed is put back.
Only the fields the operator sets are compared (`OWNED_SPEC`), each after the API server's
defaulting and omission of empty values is applied to both sides (`normal`), so that what
the API server adds (a Service's clusterIP, ipFamilies, sessionAffinity; a port's protocol)
is never a difference and no restore can loop. A Service's clusterIP is immutable, so it is
not held. Pure functions: the controller keeps each child's owned fields in its index
(`control.observed.ChildView`) and compares them with the ones rendered for the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kerasjob.planner.status import merge_patch

#: The spec fields the operator sets on each shared child, in the order they are named.
OWNED_SPEC: dict[str, tuple[str, ...]] = {
    "Service": ("selector", "ports", "publishNotReadyAddresses"),
    # Every field of a NetworkPolicySpec: a rule added (egress) changes what it does too.
    "NetworkPolicy": ("podSelector", "policyTypes", "ingress", "egress"),
}

#: Fields whose value is a Go map: the API server omits an empty one.
_MAPS = frozenset({"matchLabels", "selector"})

#: A top-level field at this value is as good as absent (the API server omits it).
_ABSENT_AT: dict[str, dict[str, Any]] = {
    "Service": {"publishNotReadyAddresses": False},
    "NetworkPolicy": {},
}


def owned_spec(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``body``'s spec the operator sets on a ``kind``, as they are."""
    spec = body.get("spec") if isinstance(body, Mapping) else None
    if not isinstance(spec, Mapping):
        return {}
    return {k: spec[k] for k in OWNED_SPEC[kind] if k in spec}


def normal(kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` (owned fields) as the API server would store it: empty lists and maps
    dropped (an empty struct, ``namespaceSelector: {}`` or an ingress rule ``{}``, is kept:
    it means "all"), a port's protocol defaulted to TCP, a Service port's targetPort to its
    port, a NetworkPolicy's policyTypes to what its rules imply."""
    out = {k: _plain(k, v) for k, v in spec.items() if k in OWNED_SPEC[kind]}
    out = {k: v for k, v in out.items() if not _empty(k, v)}
    for key, absent in _ABSENT_AT[kind].items():
        if out.get(key) == absent:
            del out[key]
    if kind == "Service" and isinstance(out.get("ports"), list):
        out["ports"] = [_service_port(p) for p in out["ports"]]
    if kind == "NetworkPolicy":
        for rules in ("ingress", "egress"):
            if isinstance(out.get(rules), list):
                out[rules] = [_rule(r) for r in out[rules]]
        if "policyTypes" not in out:
            out["policyTypes"] = ["Ingress", *(["Egress"] if "egress" in out else [])]
    return out


def drifted(kind: str, live: Mapping[str, Any], desired: Mapping[str, Any]) -> tuple[str, ...]:
    """The owned fields whose live value differs from the desired one ((): none)."""
    have, want = normal(kind, live), normal(kind, desired)
    return tuple(k for k in OWNED_SPEC[kind] if have.get(k) != want.get(k))


def restore_patch(kind: str, live: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch of ``spec`` that gives the drifted fields their desired value:
    a list whole, a map with every key the operator did not set removed, a field the
    operator does not set removed."""
    patch: dict[str, Any] = {}
    for key in drifted(kind, live, desired):
        want, have = desired.get(key), live.get(key)
        if isinstance(want, Mapping) and isinstance(have, Mapping):
            patch[key] = merge_patch(have, want)
        else:
            patch[key] = want
    return patch


def _plain(key: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {k: _plain(k, v) for k, v in value.items()}
        return {k: v for k, v in out.items() if not _empty(k, v)}
    if isinstance(value, list):
        return [_plain(key, v) for v in value]
    return value


def _empty(key: str, value: Any) -> bool:
    return value is None or value == [] or (key in _MAPS and value == {})


def _service_port(port: Any) -> Any:
    if not isinstance(port, Mapping):
        return port
    return {"protocol": "TCP", "targetPort": port.get("port"), **port}


def _rule(rule: Any) -> Any:
    if not isinstance(rule, Mapping) or not isinstance(rule.get("ports"), list):
        return rule
    ports = [{"protocol": "TCP", **p} if isinstance(p, Mapping) else p for p in rule["ports"]]
    return {**rule, "ports": ports}
