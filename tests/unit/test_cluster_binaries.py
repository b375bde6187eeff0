"""What hack/cluster/build.sh builds: the named sets (`make demo` builds the demo's only, `make
binaries` all), when a set counts as built, and the CoreDNS of our own main package, which
has only the plugins our Corefiles name.

A directive missing from the build fails CoreDNS at start ("unknown directive"), on the real
node or in the kind cluster, minutes into a run; these tests fail at once instead. build.sh's
own sanity check serves the node's Corefile with the built binary and queries it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kerasjob_dev.testing.shell import bash

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "hack" / "cluster"
LIB = CLUSTER / "lib.sh"
BUILD = CLUSTER / "build.sh"
DEMO = REPO / "dev" / "kerasjob_dev" / "demo.py"
COREDNS_MAIN = CLUSTER / "gomod" / "coredns" / "coredns" / "main.go"

#: kubeadm's default Corefile (Kubernetes 1.36, cmd/kubeadm/app/phases/addons/dns/
#: manifests.go), which the kind node's CoreDNS (hack/kind/node-image.sh: our binary) serves.
KUBEADM_DIRECTIVES = {
    "errors", "health", "ready", "kubernetes", "prometheus", "forward", "cache", "loop",
    "reload", "loadbalance",
}  # fmt: skip
#: A directive whose plugin package has another name.
PACKAGE_OF = {"prometheus": "metrics"}


def server_block_directives(corefile: str) -> list[str]:
    """The directives of a Corefile's server blocks (first words at depth 1)."""
    depth, found = 0, []
    for line in corefile.splitlines():
        words = line.split("#", 1)[0].split()
        if depth == 1 and words and words[0] != "}":
            found.append(words[0])
        depth += line.count("{") - line.count("}")
    return found


def node_corefile() -> str:
    run = bash(f"source {LIB}; node_corefile 10.0.0.1 1053 1 2 /k/coredns.kubeconfig")
    assert run.returncode == 0, run.stderr
    return run.stdout


def built_directives() -> list[str]:
    source = COREDNS_MAIN.read_text()
    block = re.search(r"var directives = \[\]string\{(.*?)\n\}", source, re.S)
    assert block is not None
    return re.findall(r'"([a-z0-9_]+)"', block.group(1))


def imported_plugins() -> set[str]:
    plugin = r'"github\.com/coredns/coredns/plugin/([a-z0-9_]+)"'
    return set(re.findall(plugin, COREDNS_MAIN.read_text()))


def test_the_node_corefile_is_the_one_node_sh_wrote_before() -> None:
    assert server_block_directives(node_corefile()) == [
        "bind", "errors", "health", "ready", "kubernetes", "cache",
    ]  # fmt: skip
    assert "kubeconfig /k/coredns.kubeconfig local" in node_corefile()


def test_coredns_is_built_with_every_directive_our_corefiles_name() -> None:
    built = set(built_directives())
    assert set(server_block_directives(node_corefile())) <= built
    assert built >= KUBEADM_DIRECTIVES


def test_coredns_is_built_with_those_plugins_only() -> None:
    """Each directive has its plugin imported and each imported plugin a directive; none other
    (the node's Corefile and kubeadm's name all of them)."""
    directives = built_directives()
    assert len(directives) == len(set(directives))
    assert {PACKAGE_OF.get(d, d) for d in directives} == imported_plugins()
    assert set(directives) == set(server_block_directives(node_corefile())) | KUBEADM_DIRECTIVES


def test_the_directives_keep_upstreams_order() -> None:
    """CoreDNS runs a server block's plugins in the order of dnsserver.Directives; ours is
    upstream's (plugin.cfg of CoreDNS 1.14) with the others left out."""
    upstream = [
        "reload", "bind", "ready", "health", "prometheus", "errors", "loadbalance", "cache",
        "kubernetes", "loop", "forward",
    ]  # fmt: skip
    assert built_directives() == upstream


def binaries(build_set: str) -> list[str]:
    run = bash(f"{BUILD} --binaries {build_set}")
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def test_the_sets_are_nested_and_the_demo_builds_what_it_runs() -> None:
    demo, everything = binaries("demo"), binaries("all")
    cluster = bash(f'source {LIB}; echo "${{CLUSTER_BINARIES[@]}}"').stdout.split()
    assert set(cluster) < set(demo) < set(everything)
    assert set(demo) - set(cluster) == {"helm"}  # demo.py installs the chart with it
    # KWOK nodes (make test, the benchmarks): the demo starts none (KWOK_NODES=0)
    assert set(everything) - set(demo) == {"kwok", "kwokctl"}
    # what up.sh and node.sh start
    for name in ("etcd", "kube-apiserver", "kubelet", "containerd", "coredns"):
        assert name in cluster
    assert "KWOK_NODES" in DEMO.read_text()


def test_every_binary_of_a_set_has_a_recipe_in_build_sh() -> None:
    recipes = re.findall(
        r"\b([a-z][a-z0-9-]*)=((?:k8s\.io|go\.etcd\.io|helm\.sh|sigs\.k8s\.io|github\.com|kerasjob\.dev)/\S+)",
        BUILD.read_text(),
    )
    assert sorted(name for name, _ in recipes) == sorted(binaries("all"))
    assert ("coredns", "kerasjob.dev/hack/cluster/coredns/coredns") in recipes


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A directory of fake executables named as the demo's binaries."""
    d = tmp_path / "bin"
    d.mkdir()
    for name in binaries("demo"):
        (d / name).write_text("#!/bin/sh\n")
        (d / name).chmod(0o755)
    return d


def build(bin_dir: Path, build_set: str) -> subprocess.CompletedProcess[str]:
    """build.sh SET on a prebuilt directory: it confirms the set or says what is missing
    (it never builds into KERASJOB_BIN_DIR)."""
    return bash(
        f"{BUILD} {build_set}",
        KERASJOB_BIN_DIR=str(bin_dir),
        KERASJOB_CACHE=str(bin_dir.parent / "cache"),
    )


def test_a_set_without_its_marker_is_not_built(bin_dir: Path) -> None:
    """Binaries alone do not make a set: it is complete after its sanity checks passed."""
    run = build(bin_dir, "demo")
    assert run.returncode == 1
    assert "lacks some of (demo, or its marker .complete-demo)" in run.stderr


def test_the_demos_set_does_not_make_the_full_set(bin_dir: Path) -> None:
    (bin_dir / ".complete-demo").write_text("set=demo\n")
    assert build(bin_dir, "demo").returncode == 0
    run = build(bin_dir, "all")
    assert run.returncode == 1
    assert "lacks some of (all, or its marker .complete)" in run.stderr
    # the full marker without kwokctl: still not complete
    (bin_dir / ".complete").write_text("set=all\n")
    assert build(bin_dir, "all").returncode == 1


def test_the_full_set_makes_the_demos_too(bin_dir: Path) -> None:
    for name in ("kwok", "kwokctl"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / ".complete").write_text("set=all\n")
    for build_set in ("all", "demo"):
        run = build(bin_dir, build_set)
        assert run.returncode == 0, run.stderr
        assert f"binaries ({build_set}) up to date" in run.stderr


def test_an_unknown_set_is_refused() -> None:
    run = bash(f"{BUILD} --binaries tests")
    assert run.returncode == 1
    assert "unknown set 'tests'" in run.stderr


def test_the_cold_demo_echoes_no_comment_and_builds_first(tmp_path: Path) -> None:
    """`make demo` on a bare machine: make echoes every recipe line, comments too, so a
    comment that says "ERROR" reads as one (issue 36); the binaries' build starts before the
    Python environment is made, so the two overlap."""
    run = subprocess.run(
        ["make", "-n", "demo", f"VENV={tmp_path / 'venv'}", f"KERASJOB_CACHE={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("#")], run.stdout
    build = next(i for i, line in enumerate(lines) if "build.sh demo &" in line)
    venv = next(i for i, line in enumerate(lines) if "-m venv" in line)
    assert build < venv < next(i for i, line in enumerate(lines) if "kerasjob_dev.demo" in line)
