"""The status wire format (`kerasjob.api.wire`, the planner's TypedDicts) and the API's
models (`kerasjob.api.status`, the CRD's schema) declare the same keys, nested types
included: a field added to one and not the other fails here."""

from __future__ import annotations

import typing
from collections.abc import Iterator

import pydantic
import pytest

from kerasjob.api import KerasJobStatus, wire


def _nested(annotation: object) -> Iterator[type]:
    """The TypedDicts and models inside an annotation (list[X], dict[str, X], X | None)."""
    if isinstance(annotation, type) and (
        typing.is_typeddict(annotation) or issubclass(annotation, pydantic.BaseModel)
    ):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _nested(arg)


def _typeddict_fields(td: type) -> dict[str, object]:
    return typing.get_type_hints(td)


def _model_fields(model: type[pydantic.BaseModel]) -> dict[str, object]:
    return {(f.alias or name): f.annotation for name, f in model.model_fields.items()}


def drift(td: type, model: type[pydantic.BaseModel]) -> list[str]:
    """Every difference between a TypedDict and a model, recursively ('' when none)."""
    ours, theirs = _typeddict_fields(td), _model_fields(model)
    out = [f"{td.__name__}.{k}: not in {model.__name__}" for k in sorted(ours.keys() - theirs)]
    out += [f"{model.__name__}.{k}: not in {td.__name__}" for k in sorted(theirs.keys() - ours)]
    for key in sorted(ours.keys() & theirs.keys()):
        inner_td, inner_model = list(_nested(ours[key])), list(_nested(theirs[key]))
        if len(inner_td) != len(inner_model):
            out.append(f"{td.__name__}.{key}: {inner_td} vs {model.__name__}'s {inner_model}")
            continue
        for sub_td, sub_model in zip(inner_td, inner_model, strict=True):
            out += drift(sub_td, sub_model)
    return out


def _pairs(td: type, model: type[pydantic.BaseModel]) -> Iterator[tuple[type, type]]:
    yield td, model
    ours, theirs = _typeddict_fields(td), _model_fields(model)
    for key in ours.keys() & theirs.keys():
        for pair in zip(_nested(ours[key]), _nested(theirs[key]), strict=False):
            yield from _pairs(*pair)


PAIRS = sorted(set(_pairs(wire.Status, KerasJobStatus)), key=lambda p: p[0].__name__)


def test_the_status_has_the_models_keys_both_ways() -> None:
    assert drift(wire.Status, KerasJobStatus) == []


@pytest.mark.parametrize(("td", "model"), PAIRS, ids=[td.__name__ for td, _ in PAIRS])
def test_each_part_pairs_with_its_namesake(td: type, model: type[pydantic.BaseModel]) -> None:
    # Paired by position, named alike: a TypedDict checked against the wrong model would
    # pass only by chance.
    assert td.__name__ == model.__name__.removeprefix("KerasJob")
    assert drift(td, model) == []


def test_every_typeddict_is_checked() -> None:
    declared = {v for v in vars(wire).values() if isinstance(v, type) and typing.is_typeddict(v)}
    assert declared == {td for td, _ in PAIRS}


class _Extra(typing.TypedDict, total=False):
    uid: str
    restartCount: int
    counted: bool
    succeeded: bool
    stopped: bool
    extra: int


class _Short(typing.TypedDict, total=False):
    uid: str


def test_drift_is_found_either_way() -> None:
    tracked = KerasJobStatus.model_fields["tracked_pods"].annotation
    model = next(_nested(tracked))
    assert drift(wire.TrackedPod, model) == []
    assert drift(_Extra, model) == ["_Extra.extra: not in TrackedPod"]
    assert "TrackedPod.counted: not in _Short" in drift(_Short, model)
