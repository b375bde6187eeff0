"""One run of the bundled Keras 3 trainer: model and data from the config, trained through the
library API of `kerasjob_trainer.keras3.session`."""

from __future__ import annotations

from typing import Any

import numpy as np

from kerasjob_contract.trainer_config import ConfigError, DatasetConfig
from kerasjob_trainer import faults
from kerasjob_trainer.faults import hard_exit
from kerasjob_trainer.keras3.context import Context
from kerasjob_trainer.keras3.session import classify, session_for
from kerasjob_trainer.pipeline import Indexed

SYNTHETIC_EXAMPLES = 1024


def run(ctx: Context) -> int:
    """Train; every error after JAX starts ends in a contract exit code, fast."""
    try:
        return _run(ctx)
    except ConfigError:
        raise
    except Exception as e:
        code = classify(e, ctx.identity.multi_process)
        hard_exit(code, f"{type(e).__name__}: {faults.summary(e)} -> exiting {int(code)}")


def load_examples(
    source: DatasetConfig, input_shape: tuple[int, ...], classes: int, seed: int
) -> tuple[Indexed, tuple[Any, Any] | None]:
    """The configured source in memory (TFRecord needs TensorFlow: backend tensorflow)."""
    from kerasjob_trainer.data import mnist_sample, shape_like

    def indexed(x: Any, y: Any) -> Indexed:
        return Indexed(shape_like(x, input_shape), np.asarray(y, dtype=np.int64))

    if source.source == "mnist-sample":
        x, y, x_test, y_test = mnist_sample()
        test = indexed(x_test, y_test)
        return indexed(x, y), (test.x, test.y)
    if source.source == "synthetic":
        rng = np.random.default_rng(seed)
        x = rng.random((SYNTHETIC_EXAMPLES, *input_shape), dtype=np.float32)
        return indexed(x, rng.integers(0, classes, SYNTHETIC_EXAMPLES)), None
    if source.source == "npz":
        assert source.path is not None  # parse_dataset requires it for a file source
        with np.load(source.path) as f:
            held_out = indexed(f["x_test"], f["y_test"]) if "x_test" in f else None
            train = indexed(f["x_train"], f["y_train"])
            return train, (held_out.x, held_out.y) if held_out else None
    raise ConfigError(
        f"dataset {source.source!r} needs TensorFlow: use backend tensorflow, "
        "or an npz file, for backend jax"
    )


def _run(ctx: Context) -> int:
    from kerasjob_trainer.keras3 import models

    cfg = ctx.config
    job = session_for(ctx)
    global_batch = job.global_batch_size(cfg.batch_size_per_replica)
    model, train, test = models.build_model(cfg.model, ctx.raw_config, cfg.learning_rate)
    if train is not None:
        examples = Indexed(np.asarray(train[0]), np.asarray(train[1]))
    else:
        examples, test = load_examples(
            cfg.dataset, tuple(model.input_shape[1:]), int(model.output_shape[-1]), cfg.seed
        )
    job.fit(
        model,
        examples,
        epochs=cfg.epochs,
        steps_per_epoch=cfg.steps_per_epoch,
        global_batch_size=global_batch,
    )
    metrics = {}
    if test is not None:
        result = job.evaluate(model, (np.asarray(test[0]), np.asarray(test[1])), global_batch)
        if result.get("accuracy") is not None:
            metrics["test_accuracy"] = result["accuracy"]
    return job.finish(model, metrics=metrics, exit=False)
