"""Bounded nesting (kerasjob.k8s.bounded): decoding and walking never fail on deep input."""

from __future__ import annotations

import json

import pytest

from kerasjob.k8s import bounded
from kerasjob.manifests.validation import validate_job


def nested(depth: int, *, lists: bool = False) -> str:
    if lists:
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("lists", [False, True])
def test_prune_text_keeps_shallow_documents_and_cuts_deep_ones(lists: bool) -> None:
    text = nested(5, lists=lists)
    assert bounded.prune_text(text, 10) == text
    pruned = json.loads(bounded.prune_text(nested(50, lists=lists), 3))
    assert bounded.depth(pruned) == 3
    inner = pruned[0][0] if lists else pruned["a"]["a"]
    assert inner == [bounded.TOO_DEEP] if lists else inner == {"a": bounded.TOO_DEEP}


def test_prune_text_is_not_fooled_by_brackets_in_strings() -> None:
    doc = {"s": '{[\\"}]', "t": [{"u": "]]]}}}"}], "v": {"w": {"x": 1}}}
    text = json.dumps(doc)
    assert json.loads(bounded.prune_text(text, 3)) == doc
    assert json.loads(bounded.prune_text(text, 2)) == {
        "s": doc["s"],
        "t": [bounded.TOO_DEEP],
        "v": {"w": bounded.TOO_DEEP},
    }


def test_installed_decoder_prunes_what_the_c_decoder_cannot_decode() -> None:
    text = '{"keep": "me", "deep": ' + nested(20_000) + "}"
    with pytest.raises(RecursionError):
        json.JSONDecoder().decode(text)
    bounded.install()
    doc = json.loads(text)  # the module-level decoder, as kopf and aiohttp call it
    assert doc["keep"] == "me"
    assert bounded.depth(doc) == bounded.DECODE_DEPTH
    assert json.loads('{"a": [1, 2.5, null, true]}') == {"a": [1, 2.5, None, True]}


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, -0.0, 1e300, null, true, false], "b": {"c": "d\\u00e9\\n"}, "a": 2}',
        nested(900),
        '{"nan": NaN, "inf": -Infinity}',  # not JSON, but Python's json reads it
        '{"lone": "\\ud800"}',  # a lone surrogate
    ],
)
def test_the_fast_path_decodes_as_the_standard_library_does(text: str) -> None:
    assert bounded.BoundedDecoder().decode(text) == json.JSONDecoder().decode(text)


def test_a_malformed_document_is_the_standard_librarys_error() -> None:
    with pytest.raises(json.JSONDecodeError):
        bounded.BoundedDecoder().decode('{"a": ')


def test_depth_and_prune_do_not_recurse() -> None:
    deep: object = {}
    for _ in range(50_000):
        deep = {"a": deep}
    assert bounded.depth(deep) == 50_001
    pruned = bounded.prune(deep, 4)
    assert bounded.depth(pruned) == 4
    shallow = {"a": [1, {"b": 2}]}
    assert bounded.prune(shallow, 4) is shallow


def _job(template: object) -> dict[str, object]:
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {"workers": 1, "template": template},
    }


def test_validation_fails_deep_templates_before_walking_them() -> None:
    deep: object = {}
    for _ in range(5000):
        deep = {"a": deep}
    problems = validate_job(_job({"spec": {"x": deep}}))
    assert problems == [
        "spec.template is nested more than 32 levels deep (a Pod template needs about 12)"
    ]
    pruned = bounded.prune(_job({"spec": {"x": deep}}))  # as the job index holds it
    assert validate_job(pruned) == problems


def test_validation_fails_huge_templates() -> None:
    big = {"metadata": {"annotations": {f"k{i}": "v" * 1000 for i in range(600)}}}
    (problem,) = validate_job(_job(big))
    assert problem.startswith("spec.template is ") and "at most 524288 are allowed" in problem


def test_a_real_template_is_well_within_the_bounds() -> None:
    tpl = {
        "spec": {
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 1,
                            "podAffinityTerm": {
                                "topologyKey": "k",
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": "a", "operator": "In", "values": ["b"]}
                                    ]
                                },
                            },
                        }
                    ]
                }
            },
        }
    }
    assert bounded.depth(tpl) <= 12
    assert validate_job(_job(tpl)) == []


def test_validation_of_a_parsed_model_checks_the_bounds_too() -> None:
    from kerasjob.api import KerasJob

    deep: object = {}
    for _ in range(40):
        deep = {"a": deep}
    model = KerasJob.from_body(_job({"spec": {"x": deep}}))
    assert validate_job(model) == [
        "spec.template is nested more than 32 levels deep (a Pod template needs about 12)"
    ]


def test_plain_copy_is_plain_of_prune_in_one_walk() -> None:
    """What the KerasJob index stores: a plain copy, deep parts cut exactly as `prune` cuts
    them, whatever the depth (at, just over and far over the bound)."""
    from types import MappingProxyType

    from kerasjob.api import plain

    def nested(levels: int) -> object:
        value: object = {"leaf": 1}
        for i in range(levels - 1):
            value = {"k": value, "xs": [i, (i,)]} if i % 2 else [value]
        return value

    for levels in (1, 5, bounded.BODY_DEPTH, bounded.BODY_DEPTH + 1, bounded.BODY_DEPTH + 40):
        body = MappingProxyType({"spec": nested(levels), "status": {"phase": "Running"}})
        copy = bounded.plain_copy(body)
        assert copy == plain(bounded.prune(body))
        assert type(copy) is dict and copy["status"] is not body["status"]
