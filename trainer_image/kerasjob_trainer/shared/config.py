"""Checks of the trainer configuration that look at the Pod's files (the schema and its
parser are `kerasjob_contract.trainer_config`, shared with the operator)."""

from __future__ import annotations

import os

from kerasjob_contract.trainer_config import ConfigError, DatasetConfig


def validate_dataset_files(dataset: DatasetConfig) -> None:
    """Fail before any TensorFlow work when a mounted dataset is missing."""
    if dataset.source not in ("npz", "tfrecord"):
        return
    assert dataset.path is not None
    if not os.path.exists(dataset.path):
        raise ConfigError(f"dataset.path {dataset.path!r} does not exist")
    if dataset.source == "npz":
        if not os.path.isfile(dataset.path):
            raise ConfigError(f"dataset.path {dataset.path!r} is not a file (.npz expected)")
        import zipfile  # an .npz is a zip of .npy members; check keys without numpy

        try:
            with zipfile.ZipFile(dataset.path) as z:
                keys = {n.removesuffix(".npy") for n in z.namelist()}
        except zipfile.BadZipFile:
            raise ConfigError(f"dataset.path {dataset.path!r} is not an .npz file") from None
        missing = {"x_train", "y_train"} - keys
        if missing:
            raise ConfigError(
                f"{dataset.path!r} lacks {sorted(missing)}; expected x_train, y_train "
                "and optionally x_test, y_test"
            )
    elif not tfrecord_files(dataset.path):
        raise ConfigError(f"dataset.path {dataset.path!r} holds no *.tfrecord files")


def tfrecord_files(path: str, split: str = "train") -> list[str]:
    """A file, or `<dir>/<split>*.tfrecord*` (falling back to every *.tfrecord* in dir)."""
    if os.path.isfile(path):
        return [path] if split == "train" else []
    if not os.path.isdir(path):
        return []
    names = sorted(n for n in os.listdir(path) if ".tfrecord" in n)
    chosen = [n for n in names if n.startswith(split)]
    if not chosen and split == "train":
        chosen = [n for n in names if not n.startswith("test")]
    return [os.path.join(path, n) for n in chosen]
