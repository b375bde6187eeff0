"""One run of the bundled trainer: model and data from the config, trained through the
library API of `kerasjob_trainer.session` (fit with BackupAndRestore, final outputs)."""

from __future__ import annotations

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer import faults
from kerasjob_trainer.context import RunContext
from kerasjob_trainer.faults import hard_exit


def run(ctx: RunContext) -> int:
    """Train; every error after TensorFlow starts ends in a contract exit code, fast."""
    try:
        return _run(ctx)
    except ConfigError:
        raise  # user code that returned the wrong thing: exit 78 in __main__
    except Exception as e:
        # e.g. a peer that died while the group was still forming (UnavailableError)
        code = faults.classify(e) if ctx.cluster.num_workers > 1 else ExitCode.FAILURE
        hard_exit(code, f"{type(e).__name__}: {faults.summary(e)} -> exiting {int(code)}")


def _run(ctx: RunContext) -> int:
    from kerasjob_trainer import data, models
    from kerasjob_trainer.session import session_for

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
    train_input = data.make_train_input(
        examples, global_batch, cfg.seed, start_step, job.audit.pipeline_hook if job.audit else None
    )
    job.fit(
        model,
        train_input,
        epochs=cfg.epochs,
        steps_per_epoch=cfg.steps_per_epoch,
        global_batch_size=global_batch,
        start_step=start_step,
    )
    metrics = {}
    if examples.test is not None:
        try:
            result = model.evaluate(
                data.make_test_dataset(examples.test, global_batch), verbose=0, return_dict=True
            )
        except Exception as e:
            job.fail(e)
        if result.get("accuracy") is not None:
            metrics["test_accuracy"] = float(result["accuracy"])
    return job.finish(model, metrics=metrics, exit=False)
