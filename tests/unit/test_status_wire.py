"""The status wire format (`kerasjob.api.wire`, the TypedDicts the planner builds the status
with) is generated from the API's models (`kerasjob.api.status`, the CRD's schema too) by
`kerasjob.tools.wiregen`: the committed module is what the models generate, key for key."""

from __future__ import annotations

import typing
from datetime import datetime
from pathlib import Path

import pytest

from kerasjob.api import KerasJobStatus, Phase, Timestamp, wire
from kerasjob.api.status import Condition
from kerasjob.tools import wiregen

ROOT = Path(__file__).resolve().parents[2]


def test_committed_wire_module_is_generated() -> None:
    assert (ROOT / wiregen.PATH).read_text() == wiregen.render(), (
        "operator/kerasjob/api/wire.py is out of date: run `make crds`"
    )


def test_check_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "wire.py"
    assert wiregen.main(["--out", str(out), "--check"]) == 1  # missing
    assert wiregen.main(["--out", str(out)]) == 0
    assert wiregen.main(["--out", str(out), "--check"]) == 0
    out.write_text(out.read_text().replace("restartCount: int", "restartCount: str"))
    assert wiregen.main(["--out", str(out), "--check"]) == 1
    assert "restartCount" in capsys.readouterr().out


@pytest.mark.parametrize("model", wiregen.models(), ids=wiregen.name_of)
def test_each_model_is_a_typeddict_of_its_aliases(model: type) -> None:
    td = getattr(wire, wiregen.name_of(model))
    assert typing.is_typeddict(td) and not td.__required_keys__
    aliases = [f.alias or n for n, f in model.model_fields.items()]  # type: ignore[attr-defined]
    assert list(typing.get_type_hints(td)) == aliases


def test_every_model_the_status_holds_is_generated_once_after_its_parts() -> None:
    names = [m.__name__ for m in wiregen.models()]
    assert names[-1] == KerasJobStatus.__name__ and len(set(names)) == len(names)
    assert names.index("Goodput") < names.index("Progress") < names.index("KerasJobStatus")


@pytest.mark.parametrize(
    ("tp", "text"),
    [
        (Timestamp, "str"),
        (datetime | None, "str"),
        (Phase, "str"),
        (list[Condition] | None, "list[Condition]"),
        (dict[str, float], "dict[str, float]"),
        (typing.Literal["a", "b"], "str"),
        (KerasJobStatus, "Status"),
    ],
)
def test_wire_types(tp: object, text: str) -> None:
    assert wiregen.annotation(tp) == text


def test_a_type_without_a_wire_form_is_refused() -> None:
    with pytest.raises(TypeError, match="no wire type"):
        wiregen.annotation(set[int])
