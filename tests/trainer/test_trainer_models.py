"""Built-in models and the data pipeline, in-process (no cluster)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("mnist-mlp", (784,)),
        ("mnist-cnn", (28, 28, 1)),
        ("cifar10-cnn", (32, 32, 3)),
    ],
)
def test_builtin_models_train_on_synthetic_data(name: str, shape: tuple[int, ...]) -> None:
    from kerasjob_contract.trainer_config import DatasetConfig
    from kerasjob_trainer.runtimes.tf_keras import data, models

    model = models.build_model(name, {}, 1e-3).model
    assert tuple(model.input_shape[1:]) == shape and model.output_shape[-1] == 10
    examples = data.load_examples(DatasetConfig("synthetic"), shape, 10, 42)
    history = model.fit(
        data.make_train_input(examples, 8, 42, 0), steps_per_epoch=2, epochs=1, verbose=0
    )
    assert np.isfinite(history.history["loss"][-1])


def test_mnist_sample_split_is_fixed_and_disjoint() -> None:
    from kerasjob_trainer.shared.data import mnist_sample

    x_train, _, x_test, y_test = mnist_sample()
    assert x_train.shape == (4000, 784) and x_test.shape == (1000, 784)
    assert x_train.min() >= 0.0 and x_train.max() <= 1.0
    assert set(np.unique(y_test)) == set(range(10))  # shuffled, not sorted by label
    again = mnist_sample()
    assert np.array_equal(again[3], y_test)


def test_mnist_sample_cache_holds_the_csv_and_a_bad_one_is_not_used(tmp_path) -> None:
    """The image's cache (`python -m kerasjob_trainer.shared.data`) is the CSV's table exactly; a
    cache that is not that table (truncated, another shape) falls back to the CSV."""
    from kerasjob_trainer.shared import data

    parsed = data._parse_mnist_csv()
    cache = str(tmp_path / "mnist-sample.npy")
    assert data.write_mnist_sample_cache(cache) == cache
    assert not (tmp_path / "mnist-sample.npy.partial").exists()
    loaded = data.mnist_sample_table(cache)
    assert loaded.dtype == np.uint8 and np.array_equal(loaded, parsed)
    np.save(cache, parsed[:10])  # another shape
    assert np.array_equal(data.mnist_sample_table(cache), parsed)
    (tmp_path / "mnist-sample.npy").write_bytes(b"not numpy")
    assert np.array_equal(data.mnist_sample_table(cache), parsed)
    assert np.array_equal(data.mnist_sample_table(str(tmp_path / "absent.npy")), parsed)


def test_stream_pipeline_seeded_shuffle_gives_every_worker_the_same_order() -> None:
    import tensorflow as tf

    from kerasjob_trainer.runtimes.tf_keras import data

    ds = tf.data.Dataset.from_tensor_slices((np.arange(64.0)[:, None], np.arange(64)))
    ex = data.Examples(ds, None, 64)

    def first_batches(seed: int) -> list[list[int]]:
        it = iter(data.make_stream_dataset(ex, 16, seed))
        return [next(it)[1].numpy().tolist() for _ in range(4)]

    assert first_batches(42) == first_batches(42)
    seen = [label for batch in first_batches(42) for label in batch]
    assert sorted(seen) == list(range(64))  # one epoch, no duplicates
