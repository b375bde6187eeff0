"""The real node's chained CNI plugin that forgets a new Pod's stale neighbour entries
(hack/cluster/cni/neigh-reset.py), run as containerd runs it: CNI_COMMAND in the
environment, the network configuration on stdin, the result or a CNI error on stdout.
ip(8) is a recorder on PATH here; tests/integration/test_real_node.py checks the plugin on
the node's bridge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "hack" / "cluster" / "cni" / "neigh-reset.py"
NODE_SH = REPO / "hack" / "cluster" / "node.sh"

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/var/run/netns/x"}],
    "ips": [
        {"address": "10.213.0.7/24", "gateway": "10.213.0.1", "interface": 0},
        {"address": "fd00::7/64", "interface": 0},
    ],
}


@pytest.fixture
def fake_ip(tmp_path: Path) -> Path:
    """An ip(8) that appends its arguments to calls.log and exits with $FAKE_IP_RC."""
    script = tmp_path / "bin" / "ip"
    script.parent.mkdir()
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path / "calls.log"}\nexit "${{FAKE_IP_RC:-0}}"\n'
    )
    script.chmod(0o755)
    return tmp_path


def run(command: str, conf: Any, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(PLUGIN)],
        input=conf if isinstance(conf, str) else json.dumps(conf),
        env={**os.environ, "PATH": str(home / "bin"), "CNI_COMMAND": command, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def calls(home: Path) -> list[str]:
    log = home / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def conf(prev: Any = PREV) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "kerasjob", "type": "kerasjob-neigh-reset",
            "prevResult": prev}  # fmt: skip


def test_add_flushes_every_address_and_passes_the_result_on(fake_ip: Path) -> None:
    done = run("ADD", conf(), fake_ip)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == PREV
    assert calls(fake_ip) == ["neigh flush to 10.213.0.7", "neigh flush to fd00::7"]


def test_del_and_check_touch_nothing(fake_ip: Path) -> None:
    for command in ("DEL", "CHECK"):
        done = run(command, conf(), fake_ip)
        assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert calls(fake_ip) == []


def test_version_names_the_spec_versions(fake_ip: Path) -> None:
    done = run("VERSION", "", fake_ip)
    assert done.returncode == 0
    assert "1.0.0" in json.loads(done.stdout)["supportedVersions"]


@pytest.mark.parametrize(
    ("stdin", "code", "words"),
    [
        ("{not json", 6, "not JSON"),
        (json.dumps({"cniVersion": "1.0.0", "name": "kerasjob"}), 7, "no prevResult"),
    ],
)
def test_bad_input_is_a_cni_error(fake_ip: Path, stdin: str, code: int, words: str) -> None:
    done = run("ADD", stdin, fake_ip)
    assert done.returncode == 1
    error = json.loads(done.stdout)
    assert error["code"] == code and words in error["msg"]
    assert calls(fake_ip) == []


def test_a_failed_flush_fails_the_add(fake_ip: Path) -> None:
    done = run("ADD", conf(), fake_ip, FAKE_IP_RC="2")
    assert done.returncode == 1
    assert "ip neigh flush to 10.213.0.7 failed" in json.loads(done.stdout)["msg"]


def test_the_node_chains_it_after_the_bridge() -> None:
    text = NODE_SH.read_text()
    chain = text[text.index('"plugins": [') :]
    assert chain.index('"type": "bridge"') < chain.index('"type": "kerasjob-neigh-reset"')
    assert "cni/neigh-reset.py" in text
