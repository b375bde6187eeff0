"""templating.render (a template's parsed shape, filled) equals rendering and parsing the text."""

from __future__ import annotations

from typing import Any

import jinja2
import pytest

from kerasjob.manifests import templating
from kerasjob.manifests.children import build_network_policy, build_pod, build_service

# Strings that YAML would read as something else if they were not quoted: each must come out
# exactly as it went in, both ways.
AWKWARD = [
    "yes",
    "no",
    "null",
    "~",
    "0x1F",
    "1e3",
    "12:30",
    "- a",
    "a: b",
    "#x",
    "'q'",
    '"dq"',
    "multi\nline",
    "tab\there",
    "ünïcødé",
    "",
    " lead",
    "{a: 1}",
    "[1]",
    "*x",
]


def _context(template: str, i: int) -> dict[str, Any]:
    s = AWKWARD[i % len(AWKWARD)]
    common = {
        "job_name": f"j{i}",
        "namespace": f"ns-{s}",
        "labels": {"a": s, s or "k": "v"},
        "owner_references": [{"name": s, "controller": True, "uid": "u"}],
        "selector": {"x": s},
        "port": 2222 + i,
    }
    if template == "service.yaml.j2":
        return common
    if template == "networkpolicy.yaml.j2":
        return {
            **common,
            "metrics_port": 9090,
            "ports": [{"protocol": "TCP", **({"port": 2000 + i} if i % 2 else {})}],
            "metrics_from": [{"podSelector": {"matchLabels": {"m": s}}}] if i % 2 else [],
        }
    return {
        **common,
        "pod_name": f"p-{s}",
        "annotations": {s or "k": s},
        "restart_policy": "Never",
        "termination_grace_period_seconds": 60 + i,
        "container_name": "trainer",
        "image": f"img:{s}",
        "command": ["python", s, "-c"],
        "metrics_port": 9090,
        "env": [{"name": "E", "value": s}, {"name": "N", "value": "1"}],
        "checkpoint_volume_name": "ck",
        "tmp_volume_name": "tmp",
        "mount_path": f"/m/{s}",
        "checkpoint_volume": {"name": "ck", "hostPath": {"path": f"/h/{s}", "n": i}},
    }


@pytest.mark.parametrize("template", ["pod.yaml.j2", "service.yaml.j2", "networkpolicy.yaml.j2"])
@pytest.mark.parametrize("i", range(len(AWKWARD)))
def test_render_equals_rendering_the_text(template: str, i: int) -> None:
    context = _context(template, i)
    assert templating.render(template, **context) == templating.render_text(template, **context)


def test_the_pod_and_service_templates_are_parsed_once_the_network_policy_is_not() -> None:
    # The network policy has an {% if %}: its shape depends on the values.
    assert templating._shape("pod.yaml.j2") is not None
    assert templating._shape("service.yaml.j2") is not None
    assert templating._shape("networkpolicy.yaml.j2") is None


def test_a_missing_variable_is_an_error_as_when_the_text_is_rendered() -> None:
    context = _context("pod.yaml.j2", 0)
    del context["image"]
    with pytest.raises(jinja2.UndefinedError, match="image"):
        templating.render("pod.yaml.j2", **context)
    with pytest.raises(jinja2.UndefinedError, match="image"):
        templating.render_text("pod.yaml.j2", **context)


def test_no_two_renders_and_no_two_places_share_a_value() -> None:
    context = _context("pod.yaml.j2", 1)
    first = templating.render("pod.yaml.j2", **context)
    second = templating.render("pod.yaml.j2", **context)
    first["metadata"]["labels"]["a"] = "changed"
    first["spec"]["containers"][0]["env"].append({"name": "X"})
    first["spec"]["securityContext"]["runAsNonRoot"] = False  # the template's own text
    assert second == templating.render_text("pod.yaml.j2", **context)
    assert context["labels"]["a"] != "changed"
    assert len(context["env"]) == 2


def test_a_placeholder_inside_a_longer_string_or_a_key_is_not_a_slot() -> None:
    slots = {templating._PLACEHOLDER.format("x"): templating._Slot("x")}
    placeholder = templating._PLACEHOLDER.format("x")
    assert templating._slotted({"a": [placeholder]}, slots) == {"a": [templating._Slot("x")]}
    assert templating._slotted({"a": f"pre-{placeholder}"}, slots) is templating._PARTIAL
    assert templating._slotted({placeholder: 1}, slots) is templating._PARTIAL


def test_children_built_from_shapes_equal_those_built_from_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u-1", "generation": 3},
        "spec": {
            "workers": 3,
            "chief": {"replicas": 1},
            "evaluator": {"replicas": 1},
            "template": {
                "metadata": {"labels": {"team": "yes"}},
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "env": [{"name": "A", "value": "no"}],
                            "resources": {"limits": {"cpu": "1"}},
                        }
                    ],
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                },
            },
        },
    }
    roles = [("worker", 0), ("worker", 2), ("chief", 0), ("evaluator", 0)]

    def build() -> list[Any]:
        return [build_service(job), build_network_policy(job)] + [
            build_pod(job, role, i, default_image="img", restart_attempt=2) for role, i in roles
        ]

    fast = build()
    monkeypatch.setattr(templating, "render", templating.render_text)
    monkeypatch.setattr("kerasjob.manifests.children.render", templating.render_text)
    assert fast == build()
