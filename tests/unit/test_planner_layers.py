"""The planner's layers contract (pyproject.toml) names every planner module: a module left
out would be free to import any other, and its place in the order unchecked."""

from __future__ import annotations

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
