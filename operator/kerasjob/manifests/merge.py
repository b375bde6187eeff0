"""Merge a user's PodTemplateSpec over the operator's rendered defaults.

A small, predictable subset of Kubernetes' strategic merge patch:

* mappings merge recursively; an override value of None deletes the key;
* lists of named things merge element-wise by their key (below), keeping the base's order
  and appending new elements: containers, env, volumes, volumeMounts, ports ...;
* every other list (args, command, tolerations, a container's resources.claims, which has
  no strategic merge key either, ...) is replaced as a whole;
* scalars are replaced.

Nothing here knows about KerasJob; `children.py` decides which container is the trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kerasjob.api import plain

#: List field name -> the key its elements merge by. The same keys Kubernetes' strategic
#: merge uses, so a template behaves as `kubectl patch` users expect (volumeMounts merge by
#: mountPath, ports by containerPort: one volume may be mounted twice).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "resourceClaims": "name",  # pod.spec.resourceClaims (DRA): a claim template per Pod
}


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: `override` merged over `base` (neither is modified)."""
    out: dict[str, Any] = plain(base)
    merge_into(out, override)
    return out


def merge_list(base: list[Any], override: list[Any], key: str) -> list[Any]:
    """Merge two lists of mappings by `key`; elements without the key are appended as-is."""
    out: list[Any] = plain(base)
    _merge_list_into(out, override, key)
    return out


def merge_into(out: dict[str, Any], override: Mapping[str, Any]) -> None:
    """`deep_merge` in place: into `out`, a tree of plain dicts and lists that is its caller's
    alone (`override` is not modified; nothing of it is shared with `out`)."""
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            merge_into(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list) and key in MERGE_KEYS:
            _merge_list_into(out[key], value, MERGE_KEYS[key])
        else:
            out[key] = _without_none(value)


def _merge_list_into(out: list[Any], override: list[Any], key: str) -> None:
    index = {
        item[key]: i for i, item in enumerate(out) if isinstance(item, Mapping) and key in item
    }
    for item in override:
        if isinstance(item, Mapping) and key in item and item[key] in index:
            target = out[index[item[key]]]
            if isinstance(target, dict):
                merge_into(target, item)
            else:
                out[index[item[key]]] = deep_merge(target, item)
        else:
            if isinstance(item, Mapping) and key in item:
                index[item[key]] = len(out)
            out.append(_without_none(item))


def _without_none(value: Any) -> Any:
    # A None means "delete"; where there is nothing to delete it must not reach the API.
    if isinstance(value, Mapping):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value  # a JSON scalar: immutable
