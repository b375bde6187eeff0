"""The project's shell scripts: version checks that a writer's SIGPIPE cannot fail, the
lint that keeps `| grep -q` and `| head` out of scripts running under pipefail, and the
Debian package sets hack/deps.sh installs for `make demo` and `make test`.

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
DEPS = REPO / "hack" / "deps.sh"

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


def _deps_set(*args: str) -> list[str]:
    run = bash(f"{DEPS} {' '.join(args)} --list")
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


#: What only the tests and the lint use: the docs' screenshot, make lint's shell half, Cilium.
TEST_ONLY = {"chromium", "shellcheck", "clang-19"}


def test_the_demo_installs_only_what_it_runs() -> None:
    """`make demo` needs the cluster's, the images' and the run's packages, not the browser
    of the docs test, the shell linter or Cilium's compiler (issue 48)."""
    demo = _deps_set("demo")
    assert not TEST_ONLY & set(demo), demo
    assert {"runc", "containernetworking-plugins", "docker.io", "debootstrap", "jq"} <= set(demo)


def test_make_test_installs_the_demos_set_and_the_tests_own() -> None:
    full = _deps_set("test")
    assert full == _deps_set()  # the default is the full set: .ci/run's make test
    assert set(full) == set(_deps_set("demo")) | TEST_ONLY


def test_an_unknown_set_is_refused() -> None:
    run = bash(f"{DEPS} tests --list")
    assert run.returncode == 2 and "usage: hack/deps.sh" in run.stderr


@pytest.mark.parametrize(("target", "deps_set"), [("demo", "demo"), ("test", "test")])
def test_make_asks_deps_sh_for_its_own_set(tmp_path: Path, target: str, deps_set: str) -> None:
    run = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'venv'}", f"KERASJOB_CACHE={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    calls = [line for line in run.stdout.splitlines() if "hack/deps.sh" in line]
    assert [line.split("hack/deps.sh")[1].split() for line in calls] == [[deps_set]]
