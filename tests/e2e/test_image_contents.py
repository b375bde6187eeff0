"""Each image carries only what it runs: the operator image no TensorFlow, trainer or dev
code, and no `kubernetes` client package (its own credentials.py reads kubeconfigs; the
package was 128 MB of the image); the trainer image no kopf, Kubernetes client, pydantic,
operator or dev code. Read from
the very archives the real node imports (`docker save` format: manifest.json + layer tars)."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from kerasjob_dev import localdeploy

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

#: Top-level importable names found in an image's site-packages (or dist-packages).
_SITE = re.compile(r"/(?:site|dist)-packages/([A-Za-z_][A-Za-z0-9_]*)(?:/|\.py$)")


def python_packages(archive: Path) -> set[str]:
    """The top-level Python packages and modules in an image's layers (whiteouts ignored:
    a package removed in a later layer is not in the image)."""
    found: set[str] = set()
    removed: set[str] = set()
    with tarfile.open(archive) as image:
        manifest = json.load(image.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer_name in manifest[0]["Layers"]:
            layer_file = image.extractfile(layer_name)
            assert layer_file is not None, layer_name
            with tarfile.open(fileobj=layer_file, mode="r|*") as layer:
                for member in layer:
                    path = "/" + member.name
                    base = path.rsplit("/", 1)[-1]
                    m = _SITE.search(path.replace("/.wh.", "/"))
                    if not m:
                        continue
                    if base.startswith(".wh."):
                        removed.add(m.group(1))
                    else:
                        found.add(m.group(1))
                        removed.discard(m.group(1))
    return found - removed


def _archive(images: localdeploy.Images | None, image: str) -> Path:
    if images is None:
        pytest.skip("the images were loaded by whoever made this cluster; no archives here")
    return images.archives[image]


def test_operator_image_holds_the_operator_and_the_contract_only(
    images: localdeploy.Images | None,
) -> None:
    packages = python_packages(_archive(images, localdeploy.OPERATOR_IMAGE))
    assert {"kerasjob", "kerasjob_contract", "kopf", "pydantic", "urllib3"} <= packages
    shipped_by_mistake = packages & {
        "tensorflow",
        "tf_keras",
        "keras",
        "kerasjob_trainer",
        "kerasjob_dev",
        "mlxtend",
        "numpy",
        "pytest",
        "tests",
        "kubernetes",
    }
    assert not shipped_by_mistake, f"in the operator image: {sorted(shipped_by_mistake)}"


def test_trainer_image_holds_the_trainer_and_the_contract_only(
    images: localdeploy.Images | None,
) -> None:
    packages = python_packages(_archive(images, localdeploy.TRAINER_IMAGE))
    assert {
        "kerasjob_trainer",
        "kerasjob_contract",
        "tensorflow",
        "tf_keras",
        "mlxtend",
    } <= packages
    shipped_by_mistake = packages & {
        "kopf",
        "kubernetes",
        "pydantic",
        "kerasjob",
        "kerasjob_dev",
        "pytest",
        "tests",
    }
    assert not shipped_by_mistake, f"in the trainer image: {sorted(shipped_by_mistake)}"
    # mlxtend's own dependencies: tf_keras imports pandas (and Keras sklearn, matplotlib)
    # whenever installed, ~0.9 s of every worker's start-up at every restart.
    slow_to_import = packages & {"pandas", "sklearn", "matplotlib", "scipy"}
    assert not slow_to_import, f"in the trainer image: {sorted(slow_to_import)}"


def test_keras3_image_holds_jax_keras3_and_the_trainer_but_no_tensorflow(
    images: localdeploy.Images | None,
) -> None:
    packages = python_packages(_archive(images, localdeploy.TRAINER_JAX_IMAGE))
    assert {
        "kerasjob_trainer",
        "kerasjob_contract",
        "jax",
        "jaxlib",
        "keras",
        "h5py",
        "mlxtend",
        "keras_hub",  # kerasjob_trainer.examples.keras_hub_lora (--no-deps)
        "tokenizers",
        "regex",
        "orbax",  # the backups
        "grain",  # file datasets (+ array_record)
        "array_record",
        "tensorboardX",  # TensorBoard logs without TensorFlow
    } <= packages
    shipped_by_mistake = packages & {
        "tensorflow",
        "tensorflow_text",  # keras-hub's own dependency, left out
        "kagglehub",
        "tf_keras",
        "kopf",
        "kubernetes",
        "pydantic",
        "kerasjob",
        "kerasjob_dev",
        "pytest",
        "tests",
    }
    assert not shipped_by_mistake, f"in the Keras 3 image: {sorted(shipped_by_mistake)}"
    # scipy is JAX's own dependency; mlxtend's are not.
    slow_to_import = packages & {"pandas", "sklearn", "matplotlib"}
    assert not slow_to_import, f"in the Keras 3 image: {sorted(slow_to_import)}"
