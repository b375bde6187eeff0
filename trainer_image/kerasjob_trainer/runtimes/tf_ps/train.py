"""One run of the bundled trainer on parameter servers (the chief): a built-in model or user
code's, the examples in memory, each worker's input from `dataset_fn`, trained through
`session` (the library API)."""

from __future__ import annotations

from typing import Any

from kerasjob_contract.trainer_config import BUILTIN_MODELS, ConfigError
from kerasjob_trainer.core.lifecycle import guarded
from kerasjob_trainer.runtimes.tf_keras import errors
from kerasjob_trainer.runtimes.tf_ps.context import PsContext
from kerasjob_trainer.shared.data import Indexed
from kerasjob_trainer.shared.faults import say


def run(ctx: PsContext) -> int:
    return guarded(_run, ctx, errors.classify)


def _run(ctx: PsContext) -> int:
    from kerasjob_trainer.runtimes.tf_keras import data, models
    from kerasjob_trainer.runtimes.tf_ps.session import session_for

    cfg = ctx.config
    job = session_for(ctx)
    batch = job.global_batch_size(cfg.batch_size_per_replica)
    with job.strategy.scope():
        built = models.build_model(cfg.model, ctx.raw_config, cfg.learning_rate)
        model = built.model
        if cfg.model in BUILTIN_MODELS:  # user code compiles its own model
            model.compile(
                optimizer=model.optimizer,
                loss=model.loss,
                metrics=["accuracy"],
                steps_per_execution=job.steps_per_execution(cfg.steps_per_epoch),
            )
    if built.train_dataset is not None:
        train, why = data.materialize(built.train_dataset, finite=True)
        if train is None:
            raise ConfigError(f"a parameter-server job needs a dataset in memory: {why}")
        test = built.test_dataset
    else:
        shape, classes = tuple(model.input_shape[1:]), int(model.output_shape[-1])
        examples = data.load_examples(cfg.dataset, shape, classes, cfg.seed)
        assert examples.indexed is not None
        train, test = examples.indexed, examples.test
    start = job.restored_step(cfg.steps_per_epoch)
    say(f"data: {train.size} examples, each worker its own seeded shuffle from step {start}")

    def evaluate() -> dict[str, Any]:
        # On the chief, on a local copy: ParameterServerStrategy evaluates only inputs
        # of the DatasetCreator kind, in shards, and a finite test set ends a worker's
        # closure with OutOfRange.
        import tf_keras

        local = tf_keras.models.clone_model(model)
        local.set_weights(model.get_weights())
        local.compile(loss=model.loss, metrics=["accuracy"])
        return local.evaluate(  # type: ignore[no-any-return]
            data.make_test_dataset(test, batch), verbose=0, return_dict=True
        )

    return job.fit_and_finish(
        job.fit,
        model,
        dataset_fn(train, batch, cfg.seed + start),
        evaluate if test is not None else None,
        global_batch_size=batch,
    )


def dataset_fn(train: Indexed, batch: int, seed: int) -> Any:
    """Each worker's input: the examples in its own seeded order (by the worker's pipeline
    id and the step the run starts at, so a resumed run does not replay the same order),
    repeated, in batches of one step."""

    def make(input_context: Any) -> Any:
        import tensorflow as tf

        order = seed * 1000 + input_context.input_pipeline_id
        ds = tf.data.Dataset.from_tensor_slices((train.x, train.y))
        ds = ds.shuffle(train.size, seed=order, reshuffle_each_iteration=True).repeat()
        return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return make
