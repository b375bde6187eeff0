"""The tests mirror the code: what they share is one importable package
(`kerasjob_dev.testing`), so no test module imports another test module or a helper that
is importable only because pytest put its folder on ``sys.path``."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_no_test_module_imports_a_module_of_the_tests_folders() -> None:
    local = {p.stem for p in TESTS.rglob("*.py")}
    found = {
        f"{p.relative_to(TESTS)} imports {name}"
        for p in TESTS.rglob("*.py")
        for name in _imported(p) & local
    }
    assert found == set()


def test_the_only_modules_beside_the_tests_are_conftest() -> None:
    others = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if not p.name.startswith("test_") and p.name != "conftest.py"
    ]
    assert others == []
