"""The save-before-preemption override (runtimes/tf_keras/preemption.py): the one module that
touches private TensorFlow/tf_keras API. These tests fail when an upgrade moves it."""

from __future__ import annotations

import signal
import time

import pytest

pytestmark = pytest.mark.tf


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch):
    from kerasjob_trainer.runtimes.tf_keras import preemption

    monkeypatch.setattr(preemption, "_enabled", None)
    return preemption


def test_override_enables_tf_keras_gate_and_skips_gce_probe(fresh, monkeypatch) -> None:
    import tensorflow as tf
    from tensorflow.python.distribute.failure_handling import failure_handling_util
    from tf_keras.src.distribute import worker_training_state

    # Anything that reaches for the GCE metadata server now fails loudly instead of waiting.
    monkeypatch.setattr(
        failure_handling_util,
        "on_gcp",
        lambda: pytest.fail("GCE metadata probe after the override"),
    )
    monkeypatch.setattr(
        worker_training_state,
        "support_on_demand_checkpoint_callback",
        worker_training_state.support_on_demand_checkpoint_callback,
    )
    monkeypatch.setattr(
        failure_handling_util, "detect_platform", failure_handling_util.detect_platform
    )
    assert fresh.enable_save_before_preemption() is True
    started = time.monotonic()
    assert (
        failure_handling_util.detect_platform() is failure_handling_util.PlatformDevice.INTERNAL_CPU
    )
    assert time.monotonic() - started < 1.0
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    assert worker_training_state.support_on_demand_checkpoint_callback(strategy) is True
    assert (
        worker_training_state.support_on_demand_checkpoint_callback(tf.distribute.get_strategy())
        is False
    )


def test_unpinned_versions_disable_the_override_loudly(fresh, monkeypatch, caplog) -> None:
    import tensorflow as tf
    from tf_keras.src.distribute import worker_training_state

    gate = worker_training_state.support_on_demand_checkpoint_callback
    monkeypatch.setattr(worker_training_state, "support_on_demand_checkpoint_callback", gate)
    monkeypatch.setattr(tf, "__version__", "2.99.0")
    with caplog.at_level("ERROR", logger="kerasjob"):
        assert fresh.enable_save_before_preemption() is False
    assert "DISABLED" in caplog.text and "2.99.0" in caplog.text
    assert worker_training_state.support_on_demand_checkpoint_callback is gate  # untouched
    with pytest.raises(fresh.UnsupportedVersion):
        fresh.check_versions()


def test_callback_has_the_handler_after_train_begin(fresh, tmp_path) -> None:
    """Single-process MWMS: the handler exists, runs from step 0, and restores the backup."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
        model.compile("sgd", "mse")
    seen = {}

    class Probe(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            handler = getattr(self.model, "_preemption_handler", None)
            seen["handler"] = handler is not None and handler._run_counter == 0
            seen["quiet"] = fresh.preemption_in_progress(self.model)

    data = tf.data.Dataset.from_tensor_slices((np.ones((8, 4)), np.ones((8, 2)))).batch(4)
    cb = fresh.backup_and_restore(str(tmp_path / "backup"), 1, lambda: None)
    previous = signal.getsignal(signal.SIGTERM)  # the handler claims SIGTERM; give it back
    try:
        model.fit(data.repeat(), epochs=1, steps_per_epoch=3, callbacks=[cb, Probe()], verbose=0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == {"handler": True, "quiet": False}
    assert int(model.optimizer.iterations.numpy()) == 3
    # the step the input pipeline starts at, read from the backup's files before fit
    assert fresh.restored_step(str(tmp_path / "backup"), 3) == 3
    assert fresh.restored_step(str(tmp_path / "backup"), 5) == 3  # mid-epoch: epoch 0, batch 2
    assert fresh.restored_step(str(tmp_path / "none"), 3) == 0
