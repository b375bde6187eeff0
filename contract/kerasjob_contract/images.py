"""The names of the project's images: one place.

``<repository>:<tag>`` for the operator, ``<repository>:<tag>-<variant>`` for the trainer.
The release tag is the chart's ``appVersion`` and a local build's is ``dev``. Read by the
operator's defaults (``kerasjob.config``), the local deployment (``kerasjob_dev.localdeploy``)
and ``hack/images/build.sh`` (which reads the ``*_REPOSITORY`` lines of this file with
``sed``: keep them one plain string each). The chart's ``values.yaml`` and the examples
cannot import it: ``tests/unit/test_image_names.py`` fails when they, the docs or
``Chart.yaml`` spell an image otherwise.
"""

from __future__ import annotations

OPERATOR_REPOSITORY = "kerasjob/operator"
TRAINER_REPOSITORY = "kerasjob/trainer"

#: The tag of a release's images (the chart's appVersion).
RELEASE_TAG = "0.1.0"
#: The tag of images built from a checkout (`make images`, hack/images/build.sh).
DEV_TAG = "dev"

#: Trainer variants: tf-keras on TensorFlow (cpu: tensorflow-cpu; gpu: TensorFlow's CUDA
#: build, tensorflow[and-cuda]) and Keras 3 on JAX (jax-cpu, jax-gpu).
TRAINER_VARIANTS = ("cpu", "gpu", "jax-cpu", "jax-gpu")


def operator_image(tag: str = RELEASE_TAG) -> str:
    """``kerasjob/operator:<tag>``."""
    return f"{OPERATOR_REPOSITORY}:{tag}"


def trainer_image(variant: str, tag: str = RELEASE_TAG) -> str:
    """``kerasjob/trainer:<tag>-<variant>``."""
    if variant not in TRAINER_VARIANTS:
        raise ValueError(f"unknown trainer variant {variant!r}; one of {TRAINER_VARIANTS}")
    return f"{TRAINER_REPOSITORY}:{tag}-{variant}"
