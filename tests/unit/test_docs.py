"""The documentation site: generated reference pages == generated (drift), a strict build, and
a real browser's screenshot of a built page that shows something.

The build and the screenshot take a few seconds; chromium comes from hack/deps.sh (`make deps`,
which `make test` runs first).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kerasjob.api import KerasJobSpec, KerasJobStatus
from kerasjob.cli import app as cli
from kerasjob.tools import docgen

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.mark.parametrize("filename", sorted(docgen.PAGES))
def test_committed_reference_is_up_to_date(filename: str) -> None:
    path = REFERENCE / filename
    assert path.exists(), "run `make docs-ref`"
    assert path.read_text() == docgen.PAGES[filename](), (
        f"docs/reference/{filename} drifted from the code: run `make docs-ref`"
    )


def test_check_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert docgen.main(["--out", str(tmp_path), "--check"]) == 1  # missing
    assert docgen.main(["--out", str(tmp_path)]) == 0
    assert docgen.main(["--out", str(tmp_path), "--check"]) == 0
    api = tmp_path / docgen.API_FILE
    api.write_text(api.read_text().replace("| `2222` |", "| `2223` |"))
    capsys.readouterr()
    assert docgen.main(["--out", str(tmp_path), "--check"]) == 1
    diff = capsys.readouterr().out
    assert "`2223`" in diff and "`2222`" in diff


def _fields(model: type, prefix: str) -> list[str]:
    """Every field path of a pydantic model, by its wire (camelCase) name."""
    return [f"{prefix}.{info.alias or name}" for name, info in model.model_fields.items()]


def test_api_page_lists_every_field_with_its_rules() -> None:
    text = docgen.render_api()
    for path in _fields(KerasJobSpec, "spec") + _fields(KerasJobStatus, "status"):
        parent, field = path.rsplit(".", 1)
        assert f"### `{parent}`" in text and f"| `{field}` |" in text, path
    # Nested objects get their own section, with their fields.
    for section in (
        "spec.trainer",
        "spec.trainer.dataset",
        "spec.checkpoint",
        "spec.elastic",
        "status.conditions[]",
        "status.replicaStatuses[*]",
        "status.progress.goodput",
    ):
        assert f"### `{section}`" in text, section
    # Defaults, bounds, enums, patterns and every CEL rule of the CRD appear.
    assert "| `workers` | integer | `1` | &gt;= 1; &lt;= 1000" in text
    assert "one of `OnFailure`, `Never`, `ExitCode`" in text
    rules = []

    def walk(node: dict) -> None:
        rules.extend(r["rule"] for r in node.get("x-kubernetes-validations", []))
        for sub in (node.get("properties") or {}).values():
            walk(sub)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                walk(node[key])

    walk(docgen.crdgen.openapi_schema())
    assert rules
    for rule in rules:
        assert f"`{rule}`" in text, rule


def test_cli_page_lists_every_command_and_flag() -> None:
    text = docgen.render_cli()
    root = cli.parser()
    subs = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in subs.choices.items():
        assert f"## `kerasjob {name}`" in text, name
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"`{option}`" in text, (name, option)


def _build(site: Path) -> subprocess.CompletedProcess[str]:
    assert MKDOCS.exists(), (
        f"{MKDOCS} missing: run `make venv` (dev/pyproject.toml installs mkdocs)"
    )
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = _build(site)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    return site


def test_site_builds_strict(site: Path) -> None:
    for page in (
        "index.html",
        "reference/api.html",
        "reference/cli.html",
        "migrating-from-tfjob.html",
        "keras3-jax.html",
    ):
        assert (site / page).is_file(), page


def test_strict_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """The guard itself: a link to an anchor that does not exist fails the build."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "index.md").open("a") as f:
        f.write("\n[broken](reference/api.md#no-such-field)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    )
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(config), "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode != 0
    assert "no-such-field" in done.stdout + done.stderr


def test_page_renders_in_a_browser(site: Path, tmp_path: Path) -> None:
    from PIL import Image

    chromium = shutil.which("chromium")
    assert chromium, (
        "chromium not found: run `make deps` (hack/deps.sh installs the Debian package)"
    )
    shot = tmp_path / "index.png"
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,900",
            "--virtual-time-budget=5000",
            (site / "index.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and shot.is_file(), f"chromium failed:\n{done.stderr[-2000:]}"
    with Image.open(shot) as image:
        assert image.size == (1200, 900)
        pixels = list(image.convert("RGB").get_flattened_data())
    _, most = Counter(pixels).most_common(1)[0]
    differing = 1 - most / len(pixels)
    # A blank (or error) page is one colour; the index page has a header bar, text and code.
    assert differing > 0.01, f"screenshot nearly one colour: {differing:.2%} of pixels differ"
    # The theme's header colour (deep orange) is there: the stylesheet loaded from file://.
    assert sum(1 for p in pixels if p[0] > 200 and 60 < p[1] < 140 and p[2] < 110) > 1200 * 30


def test_the_from_horovod_page_shows_the_shipped_script() -> None:
    """docs/from-horovod.md shows both ports exactly as examples/from-horovod.yaml ships
    them (the scripts tests/trainer/test_from_horovod.py runs)."""
    import yaml

    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "from-horovod.yaml").read_text())]
    (cm,) = [d for d in docs if d and d["kind"] == "ConfigMap"]
    page = (ROOT / "docs" / "from-horovod.md").read_text()
    for script in ("train_tf_keras.py", "train_keras3.py"):
        assert f"```python\n{cm['data'][script]}```" in page, script
