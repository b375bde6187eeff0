"""One name per image: kerasjob_contract.images is the source; the operator's defaults, the
local deployment and hack/images/build.sh read it, and what cannot read it (the chart's
values, Chart.yaml, the examples, the docs, the Dockerfiles' comments) is checked here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from kerasjob_contract import images

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kerasjob-operator"

#: Every spelling of one of our images in prose, manifests and scripts (the registry part, if
#: any, is captured to be rejected).
_NAME = re.compile(r"([\w.\-]+/)?kerasjob/(trainer|operator):([\w.<>\-]+)")
_TAGS = {images.RELEASE_TAG, images.DEV_TAG, "<version>"}


def _files() -> list[Path]:
    out = [
        REPO / "README.md",
        REPO / "DEVELOPMENT.md",
        *(REPO / "docs").rglob("*.md"),
        *(REPO / "examples").rglob("*.yaml"),
        *(REPO / "examples").rglob("Dockerfile"),
        *(REPO / "trainer_image").glob("*Dockerfile"),
        *CHART.rglob("*.yaml"),
        *CHART.rglob("*.md"),
        *CHART.rglob("*.txt"),
        *(REPO / "hack").rglob("*.md"),
        *(REPO / "hack").rglob("*.sh"),
    ]
    return [p for p in out if p.is_file()]


def test_the_operator_defaults_and_the_local_deployment_use_the_contract_names() -> None:
    from kerasjob.config import DEFAULT_JAX_TRAINER_IMAGE, DEFAULT_TRAINER_IMAGE
    from kerasjob_dev import localdeploy

    assert DEFAULT_TRAINER_IMAGE == images.trainer_image("cpu") == "kerasjob/trainer:0.1.0-cpu"
    assert images.trainer_image("jax-cpu") == DEFAULT_JAX_TRAINER_IMAGE
    assert images.operator_image(images.DEV_TAG) == localdeploy.OPERATOR_IMAGE
    assert images.trainer_image("cpu", images.DEV_TAG) == localdeploy.TRAINER_IMAGE
    assert images.trainer_image("jax-cpu", images.DEV_TAG) == localdeploy.TRAINER_JAX_IMAGE
    with pytest.raises(ValueError):
        images.trainer_image("cuda")


def test_the_chart_names_the_same_repositories_and_release_tag() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["appVersion"] == images.RELEASE_TAG
    assert values["image"]["repository"] == images.OPERATOR_REPOSITORY
    assert values["trainerImage"]["repository"] == images.TRAINER_REPOSITORY
    assert values["trainerImage"]["variant"] in images.TRAINER_VARIANTS


def test_build_sh_reads_the_repositories_from_the_contract() -> None:
    """hack/images/build.sh runs with bash alone, so it reads images.py with sed: the same
    sed lines, run here, give the module's values."""
    script = (REPO / "hack/images/build.sh").read_text()
    assert "contract/kerasjob_contract/images.py" in script
    assert '"kerasjob/' not in script, "build.sh spells an image name of its own"
    for var, expected in (
        ("OPERATOR_REPOSITORY", images.OPERATOR_REPOSITORY),
        ("TRAINER_REPOSITORY", images.TRAINER_REPOSITORY),
    ):
        sed = f's/^{var} = "\\(.*\\)"$/\\1/p'
        assert sed in script, var
        got = subprocess.run(
            ["sed", "-n", sed, str(REPO / "contract/kerasjob_contract/images.py")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert got == expected


def test_examples_name_released_trainer_images() -> None:
    found = 0
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "KerasJob":
                continue
            image = (doc.get("spec") or {}).get("image")
            if image and "kerasjob/trainer" in image:
                found += 1
                variants = {images.trainer_image(v) for v in images.TRAINER_VARIANTS}
                assert image in variants, f"{path.name}: {image}"
    assert found, "no example names a trainer image (examples/cifar10-gpu.yaml does)"


def test_every_spelling_of_an_image_is_the_contract_name() -> None:
    bad = []
    for path in _files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in _NAME.finditer(line):
                registry, kind, tag = m.groups()
                where = f"{path.relative_to(REPO)}:{n}: {m.group(0)}"
                # docker.io/: how containerd and Kubernetes name an image saved without one.
                if registry not in (None, "docker.io/"):
                    bad.append(f"{where} (registry {registry!r}; ours: none)")
                if kind == "operator":
                    ok = tag in _TAGS
                else:
                    ok = any(
                        tag == f"{t}-{v}"
                        for t in _TAGS | {"<tag>"}
                        for v in (*images.TRAINER_VARIANTS, "<variant>")
                    )
                if not ok:
                    bad.append(where)
    assert not bad, "image names that are not kerasjob_contract.images':\n" + "\n".join(bad)
