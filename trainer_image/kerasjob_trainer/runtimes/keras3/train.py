"""One run of the bundled Keras 3 trainer: model and data from the config, trained through the
library API of `session`."""

from __future__ import annotations

from functools import partial

import numpy as np

from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core.lifecycle import guarded
from kerasjob_trainer.runtimes.keras3 import errors, records
from kerasjob_trainer.runtimes.keras3.context import Context
from kerasjob_trainer.shared.data import Indexed, load_arrays
from kerasjob_trainer.shared.faults import say


def run(ctx: Context) -> int:
    """Train; every error after JAX starts ends in a contract exit code, fast."""
    return guarded(_run, ctx, partial(errors.classify, multi_process=True))


def _run(ctx: Context) -> int:
    from kerasjob_trainer.runtimes.keras3 import models
    from kerasjob_trainer.runtimes.keras3.session import session_for

    cfg = ctx.config
    job = session_for(ctx)
    if job.sharding is not None:  # the layout first: Keras lays a variable out when made
        try:
            layout = models.layout_for(cfg.model, job.sharding, ctx.raw_config)
        except ConfigError as e:  # every process finds the same: they leave together
            job.exit_invalid(str(e))
        job.shard(layout)
    global_batch = job.global_batch_size(cfg.batch_size_per_replica)
    model, train, test = models.build_model(cfg.model, ctx.raw_config, cfg.learning_rate)
    examples: Indexed | records.Records
    if train is not None:
        examples = Indexed(np.asarray(train[0]), np.asarray(train[1]))
    elif cfg.dataset.source == "arrayrecord":  # files on a volume, read through Grain
        assert cfg.dataset.path is not None  # parse_dataset requires it
        examples, test = records.open_dataset(cfg.dataset.path, tuple(model.input_shape[1:]))
        say(f"dataset {cfg.dataset.path}: {len(examples)} examples in ArrayRecord files (Grain)")
    else:
        arrays = load_arrays(
            cfg.dataset, tuple(model.input_shape[1:]), int(model.output_shape[-1]), cfg.seed
        )
        if arrays is None:
            raise ConfigError(
                f"dataset {cfg.dataset.source!r} needs TensorFlow: use backend tensorflow, "
                "or an npz file, for backend jax"
            )
        examples, held_out = arrays
        test = (held_out.x, held_out.y) if held_out is not None else None
    evaluate = None
    if test is not None:
        held = (np.asarray(test[0]), np.asarray(test[1]))
        evaluate = partial(job.evaluate, model, held, global_batch)
    return job.fit_and_finish(job.fit, model, examples, evaluate, global_batch_size=global_batch)
