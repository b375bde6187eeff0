"""The project's shell scripts: version checks that a writer's SIGPIPE cannot fail, and the
lint that keeps `| grep -q` and `| head` out of scripts running under pipefail.

A cold `make demo` failed once in ten: `etcd --version | grep -qF 3.6.16` under `set -o
pipefail`, where grep exits at its match while etcd still writes (SIGPIPE, exit 141). The
fake binary here writes its version the same way, in several writes with a pause between
them, so the old idiom fails every time and `reports_version` (hack/cluster/lib.sh) must not.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kerasjob_dev.testing.shell import bash

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "hack" / "cluster" / "lib.sh"
LINT = REPO / "hack" / "lint-shell.sh"

FAKE_ETCD = """#!/usr/bin/env bash
printf 'etcd Version: 3.6.16\\n'
sleep 0.05
printf 'Git SHA: 0123456\\n'
printf 'Go Version: go1.26.8\\n'
printf 'Go OS/Arch: linux/amd64\\n'
"""


@pytest.fixture
def fake_etcd(tmp_path: Path) -> Path:
    path = tmp_path / "etcd"
    path.write_text(FAKE_ETCD)
    path.chmod(0o755)
    return path


def test_the_old_idiom_fails_on_such_a_writer(fake_etcd: Path) -> None:
    """The reproduction: without it, the next test would prove nothing."""
    runs = [bash(f"{fake_etcd} --version | grep -qF 3.6.16") for _ in range(5)]
    assert [r.returncode for r in runs].count(0) < 5


def test_reports_version_never_fails_on_sigpipe_under_load(fake_etcd: Path) -> None:
    check = f"source {LIB}; reports_version {fake_etcd} 3.6.16 && echo ok"
    with ThreadPoolExecutor(max_workers=16) as pool:
        runs = list(pool.map(lambda _: bash(check), range(100)))
    failed = [(r.returncode, r.stdout, r.stderr) for r in runs if r.stdout.strip() != "ok"]
    assert failed == []


def test_reports_version_names_what_the_binary_said(fake_etcd: Path) -> None:
    run = bash(f'source {LIB}; reports_version {fake_etcd} 3.7.0 || echo "said: $?"')
    assert run.stdout.splitlines() == ["etcd Version: 3.6.16", "said: 1"]


@pytest.mark.parametrize(
    "line",
    [
        "etcd --version | grep -qF x",
        "x=$(ip route | head -n1)",
        "foo | grep --quiet bar || true",
        "if kubectl get ns | grep -Eq '^kube'; then :; fi",
    ],
)
def test_the_lint_flags_a_pipe_into_grep_q_or_head(tmp_path: Path, line: str) -> None:
    script = tmp_path / "s.sh"
    header = "#!/usr/bin/env bash\nset -euo pipefail\n# a | grep -q in a comment\n"
    script.write_text(f"{header}{line}\n")
    run = subprocess.run(
        ["bash", str(LINT), str(script)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 1
    assert f"{script}:4: pipe into grep -q or head under pipefail" in run.stdout
    assert ":3:" not in run.stdout


def test_the_projects_scripts_pass_the_lint() -> None:
    run = subprocess.run(["bash", str(LINT)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
