"""The planner's structure: its layers contract (pyproject.toml) names every planner module
(a module left out would be free to import any other, its place in the order unchecked),
and it names no scheduler integration."""

from __future__ import annotations

import tokenize
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PLANNER = ROOT / "operator" / "kerasjob" / "planner"


def _planner_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == "the planner's layers"]
    assert contract["containers"] == ["kerasjob.planner"]
    return [m.strip() for layer in contract["layers"] for m in layer.split("|")]


def test_every_planner_module_is_in_one_layer() -> None:
    listed = _planner_layers()
    modules = sorted(p.stem for p in PLANNER.glob("*.py") if p.stem != "__init__")
    assert sorted(listed) == modules


def _names(path: Path) -> set[str]:
    with path.open("rb") as f:
        return {t.string for t in tokenize.tokenize(f.readline) if t.type == tokenize.NAME}


def test_the_planner_names_no_integration() -> None:
    """Integrations speak to the planner through `scheduling`'s values (a `Gate`, a
    `Placement`), never by name: no identifier in the planner names one (docstrings may
    give them as examples)."""
    named = {
        f"{p.name}: {n}"
        for p in PLANNER.glob("*.py")
        for n in _names(p)
        if any(word in n.lower() for word in ("kueue", "gang"))
    }
    assert named == set()
