"""One run of the bundled tf-keras trainer: model and data from the config, trained through
the library API of `session` (fit with BackupAndRestore, final outputs)."""

from __future__ import annotations

from typing import Any

from kerasjob_trainer.core.lifecycle import guarded
from kerasjob_trainer.runtimes.tf_keras import errors
from kerasjob_trainer.runtimes.tf_keras.context import RunContext


def run(ctx: RunContext) -> int:
    """Train; every error after TensorFlow starts ends in a contract exit code, fast (e.g.
    a peer that died while the group was still forming: UnavailableError)."""
    return guarded(_run, ctx, errors.classify)


def _run(ctx: RunContext) -> int:
    from kerasjob_trainer.runtimes.tf_keras import audit, data, models
    from kerasjob_trainer.runtimes.tf_keras.session import session_for

    cfg = ctx.config
    job = session_for(ctx)  # the same library API a user's own script uses
    global_batch = job.global_batch_size(cfg.batch_size_per_replica)
    with job.strategy.scope():
        built = models.build_model(cfg.model, ctx.raw_config, cfg.learning_rate)
    model = built.model
    if built.train_dataset is not None:
        examples = data.Examples(built.train_dataset, built.test_dataset, None)
    else:
        examples = data.load_examples(
            cfg.dataset, tuple(model.input_shape[1:]), int(model.output_shape[-1]), cfg.seed
        )
    # Where fit will resume (read from the backup's files; checked at the first step), so
    # the pipeline yields exactly the batches an undisturbed run trains on from there.
    start_step = job.restored_step(cfg.steps_per_epoch)
    hook = audit.pipeline_hook(job.audit) if job.audit else None
    train_input = data.make_train_input(examples, global_batch, cfg.seed, start_step, hook)

    def test() -> dict[str, Any]:
        try:
            return model.evaluate(  # type: ignore[no-any-return]
                data.make_test_dataset(examples.test, global_batch), verbose=0, return_dict=True
            )
        except Exception as e:
            job.fail(e)

    has_test = examples.test is not None
    return job.fit_and_finish(
        job.fit,
        model,
        train_input,
        test if has_test else None,
        global_batch_size=global_batch,
        start_step=start_step,
    )
