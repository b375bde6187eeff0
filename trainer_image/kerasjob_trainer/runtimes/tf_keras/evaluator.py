"""Sidecar evaluator: evaluates the chief's backups as they appear, exits 0 when training is
done (the chief's progress.json says done) after evaluating the final model.

It never joins the training collectives and never writes the backup; it reads
`<checkpoint>/backup/chief` (BackupAndRestore's chief directory) and the final
`<output>/model.keras`, and writes `<output>/eval.json`.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import kerasjob_contract as contract
from kerasjob_trainer.runtimes.tf_keras.context import RunContext
from kerasjob_trainer.shared.faults import say
from kerasjob_trainer.shared.metrics import now_iso, write_json_atomic

POLL_SECONDS = 2.0
EVAL_FILE = contract.EVAL_FILE


def _done(output_dir: str) -> bool:
    try:
        with open(os.path.join(output_dir, contract.PROGRESS_FILE), encoding="utf-8") as f:
            return bool(json.load(f).get("done"))
    except (OSError, ValueError):
        return False


def run(ctx: RunContext, poll: float = POLL_SECONDS) -> int:
    import tensorflow as tf
    import tf_keras

    from kerasjob_trainer.runtimes.tf_keras import data, models

    cfg = ctx.config
    built = models.build_model(cfg.model, ctx.raw_config, cfg.learning_rate)
    model = built.model
    if built.train_dataset is not None:
        test = built.test_dataset if built.test_dataset is not None else built.train_dataset
    else:
        examples = data.load_examples(
            cfg.dataset, tuple(model.input_shape[1:]), int(model.output_shape[-1]), cfg.seed
        )
        test = examples.test if examples.test is not None else examples.train
    # A bounded slice: the evaluator must keep up with the chief's backups.
    test_ds = test.take(2000).batch(cfg.batch_size_per_replica).prefetch(2)
    chief_dir = os.path.join(ctx.backup_dir, "chief")
    say(f"evaluator watching {chief_dir}")
    last: str | None = None

    def evaluate(m: Any, step: int, final: bool) -> None:
        result = m.evaluate(test_ds, verbose=0, return_dict=True)
        say(
            f"eval step={step} "
            + " ".join(f"{k}={v:.4f}" for k, v in result.items())
            + (" final" if final else "")
        )
        write_json_atomic(
            os.path.join(ctx.output_dir, EVAL_FILE),
            {
                "step": step,
                "final": final,
                "updatedAt": now_iso(),
                **{k: float(v) for k, v in result.items()},
            },
        )

    while True:
        done = _done(ctx.output_dir)  # read first: the final model exists once done is set
        if done:
            final = tf_keras.models.load_model(os.path.join(ctx.output_dir, contract.MODEL_FILE))
            evaluate(final, int(final.optimizer.iterations.numpy()), final=True)
            return int(contract.ExitCode.SUCCESS)
        latest = tf.train.latest_checkpoint(chief_dir)
        if latest and latest != last:
            try:
                tf.train.Checkpoint(model=model).restore(latest).expect_partial()
                evaluate(model, int(model.optimizer.iterations.numpy()), final=False)
                last = latest
            except (tf.errors.NotFoundError, tf.errors.DataLossError):
                pass  # replaced by a newer backup while we read it; try the newer one
        time.sleep(poll)
