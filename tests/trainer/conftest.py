"""Trainer tests: every `tf.keras` is tf_keras, as in the trainer (set before TF loads)."""

import os
from collections.abc import Iterator

import pytest

from kerasjob_dev import objectstores  # imports no TensorFlow

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[objectstores.Stores]:
    """versitygw (S3) and fake-gcs-server (GCS) on loopback ports of this session's own,
    their state in its own temporary directory; started once for every test that asks."""
    with objectstores.running(tmp_path_factory.mktemp("objectstores")) as s:
        yield s
