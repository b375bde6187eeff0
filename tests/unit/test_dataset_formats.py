"""Dataset file formats in the trainer configuration: ArrayRecord (backend jax, through Grain)
beside npz and TFRecord, inferred from the path as the API documents, refused for backend
tensorflow."""

from __future__ import annotations

import json

import pytest

from kerasjob.api.trainer import DatasetSpec
from kerasjob_contract.trainer_config import ConfigError, infer_format, parse_config


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/d/mnist.npz", "npz"),
        ("/d/train.array_record", "arrayrecord"),
        ("/d/records", "tfrecord"),
        ("/d/train.tfrecord", "tfrecord"),
    ],
)
def test_the_format_is_inferred_from_the_path_alike_by_operator_and_trainer(
    path: str, expected: str
) -> None:
    assert infer_format(path) == expected
    spec = DatasetSpec.model_validate({"source": "path", "path": path})
    resolved = spec.resolved_format()
    assert resolved is not None and resolved.value == expected


def _config(backend: str, fmt: str) -> str:
    dataset = {"source": "path", "path": "/data/mnist", "format": fmt}
    return json.dumps({"backend": backend, "dataset": dataset})


def test_arrayrecord_is_for_backend_jax() -> None:
    assert parse_config(_config("jax", "arrayrecord")).dataset.source == "arrayrecord"
    with pytest.raises(ConfigError, match="arrayrecord is read by backend jax"):
        parse_config(_config("tensorflow", "arrayrecord"))


def test_an_unknown_format_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="npz, tfrecord, arrayrecord"):
        parse_config(_config("jax", "parquet"))
