"""What ships next to the chart: the operator Dockerfile, .dockerignore, the kind workflow
(hack/kind) and the Makefile's image target. Docker and kind are not available on every
machine, so these check the files and the failure modes without them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_runs_the_operator_as_non_root_without_tensorflow() -> None:
    ins = instructions(DOCKERFILE)
    froms = [a for i, a in ins if i == "FROM"]
    assert froms and all("PYTHON_IMAGE" in f for f in froms)
    (base,) = [a for i, a in ins if i == "ARG" and a.startswith("PYTHON_IMAGE=")]
    assert "slim" in base
    assert ("ENTRYPOINT", '["python", "-m", "kerasjob"]') in ins
    users = [a for i, a in ins if i == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    runs = " ".join(a for i, a in ins if i == "RUN")
    assert "pip install --no-deps ./contract ./operator" in runs
    installs = re.findall(r"pip install ([^&;]*)", runs)
    assert all("trainer" not in i and "tensorflow" not in i for i in installs), installs
    # The build itself proves TensorFlow, the trainer and the dev tools did not sneak in.
    assert "for m in tensorflow kerasjob_trainer kerasjob_dev" in runs


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    ignored = {
        line.strip().strip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "tests", ".run"} <= ignored
    for instruction, args in instructions(DOCKERFILE):
        if instruction == "COPY" and "--from" not in args:
            *sources, _dest = args.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: missing"
                assert src.strip("/").split("/")[0] not in ignored, f"COPY {src} is ignored"


def test_image_user_matches_the_chart_pod_security_context() -> None:
    values = yaml.safe_load((ROOT / "charts/kerasjob-operator/values.yaml").read_text())
    uid, _, gid = [a for i, a in instructions(DOCKERFILE) if i == "USER"][-1].partition(":")
    assert values["podSecurityContext"]["runAsUser"] == int(uid)
    assert values["podSecurityContext"]["runAsGroup"] == int(gid)


def test_kind_cluster_has_two_workers_sharing_the_checkpoint_directory() -> None:
    config = yaml.safe_load((ROOT / "hack/kind/kind-config.yaml").read_text())
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker"]
    mounts = [
        (m["hostPath"], m["containerPath"])
        for n in config["nodes"]
        if n["role"] == "worker"
        for m in n["extraMounts"]
    ]
    assert len(set(mounts)) == 1 and len(mounts) == 2, "every worker mounts the same directory"
    storage = list(yaml.safe_load_all((ROOT / "hack/kind/shared-storage.yaml").read_text()))
    pvs = [d for d in storage if d["kind"] == "PersistentVolume"]
    assert len(pvs) >= 4
    for pv in pvs:
        assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pv["spec"]["hostPath"]["path"].startswith(mounts[0][1] + "/pv-")
        assert pv["spec"]["storageClassName"] == "kerasjob-shared"


def bare_path(tmp_path: Path, docker: str | None) -> dict[str, str]:
    """An environment whose PATH has the basics, and `docker` only as given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "env", "dirname", "cat", "make", "sed", "grep", "mkdir", "sh"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    if docker is not None:
        (bin_dir / "docker").write_text(docker)
        (bin_dir / "docker").chmod(0o755)
    return {"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp")}


def test_kind_e2e_explains_a_missing_docker(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "hack/kind/e2e.sh")],
        env=bare_path(tmp_path, None),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "docker not found" in proc.stderr and "make test-e2e" in proc.stderr


def test_kind_e2e_explains_a_stopped_docker_daemon(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "hack/kind/e2e.sh")],
        env=bare_path(tmp_path, "#!/bin/sh\nexit 1\n"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "daemon is not reachable" in proc.stderr


def test_kind_e2e_explains_a_missing_kind(tmp_path: Path) -> None:
    """KIND names a kind binary to use instead of the one hack/kind/build.sh builds."""
    proc = subprocess.run(
        ["bash", str(ROOT / "hack/kind/e2e.sh")],
        env={**bare_path(tmp_path, "#!/bin/sh\nexit 0\n"), "KIND": str(tmp_path / "kind")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "kind not found at KIND=" in proc.stderr


def test_make_images_explains_a_missing_docker(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "images"],
        env=bare_path(tmp_path, None),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    assert "docker not found" in proc.stderr


def test_kind_e2e_gives_the_example_claim_the_kind_storage_class() -> None:
    """e2e.sh rewrites one comment line of examples/checkpoint-pvc.yaml: it must exist."""
    script = (ROOT / "hack/kind/e2e.sh").read_text()
    (pattern,) = re.findall(r"sed 's\|([^|]+)\|([^|]+)\|'", script)
    pvc = (ROOT / "examples/checkpoint-pvc.yaml").read_text()
    assert pattern[0] in pvc
    patched = yaml.safe_load(pvc.replace(pattern[0], pattern[1]))
    assert patched["spec"]["storageClassName"] == "kerasjob-shared"
    assert 'kubectl apply -n "$SMOKE_NS" -f examples/mnist.yaml' in script


def test_image_works_for_a_uid_without_a_passwd_entry() -> None:
    """kopf calls getpass.getuser(), which needs USER/LOGNAME when the UID has no passwd entry
    (OpenShift's arbitrary UIDs, a runAsUser override); verified by running the operator as
    an unknown UID 10001 with in-cluster credentials."""
    env = " ".join(a for i, a in instructions(DOCKERFILE) if i == "ENV")
    assert "USER=" in env and "LOGNAME=" in env and "HOME=/tmp" in env
