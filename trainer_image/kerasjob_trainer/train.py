"""One training run: strategy, model, data, fit with BackupAndRestore, final outputs."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Any

import kerasjob_contract as contract
from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError, TrainerConfig
from kerasjob_trainer import faults, preemption
from kerasjob_trainer.cluster import ClusterInfo
from kerasjob_trainer.faults import hard_exit, say
from kerasjob_trainer.metrics import ProgressReporter

MODEL_FILE = contract.MODEL_FILE
BACKUP_SUBDIR = contract.BACKUP_SUBDIR
TENSORBOARD_SUBDIR = "tensorboard"
#: A successful run that is still tearing TensorFlow down after this long exits anyway.
SUCCESS_TEARDOWN_SECONDS = 20.0
PREEMPTED_EXIT_DELAY_SECONDS = 0.3
_SCALAR_METADATA: bytes = b""


@dataclasses.dataclass(frozen=True)
class RunContext:
    config: TrainerConfig
    raw_config: dict[str, Any]
    cluster: ClusterInfo
    checkpoint_dir: str
    output_dir: str
    metrics_port: int | None

    @property
    def backup_dir(self) -> str:
        return os.path.join(self.checkpoint_dir, BACKUP_SUBDIR)


class _State:
    """What the SIGTERM fallback needs to know."""

    steps_this_process = 0


def install_early_sigterm_handler() -> None:
    """SIGTERM before fit() installs TensorFlow's handler, or when the override is off.

    With no step done in this process the backup *is* the current state: exit 42. After
    steps without save-before-preemption, the work since the last backup is lost: exit 43
    ("restart me"), which the operator also treats as a disruption.
    """

    def handler(signum: int, frame: Any) -> None:
        if _State.steps_this_process == 0:
            hard_exit(ExitCode.PREEMPTED_SAVED,
                      "SIGTERM before the first step: the backup is current; exiting 42")
        hard_exit(ExitCode.PEER_LOST,
                  "SIGTERM without save-before-preemption: resuming from the last backup; "
                  "exiting 43")

    signal.signal(signal.SIGTERM, handler)


def _peer_addresses(cluster: ClusterInfo) -> list[str]:
    mine = cluster.training_cluster.get(cluster.role, [])[cluster.index:cluster.index + 1]
    return [a for addrs in cluster.training_cluster.values() for a in addrs if a not in mine]


def _progress_callback(ctx: RunContext, reporter: ProgressReporter | None,
                       watchdog: faults.Watchdog, peers: faults.PeerMonitor,
                       global_batch: int) -> Any:
    import tensorflow as tf
    import tf_keras
    from tensorflow.core.framework import summary_pb2

    global _SCALAR_METADATA
    _SCALAR_METADATA = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    ).SerializeToString()
    total = ctx.config.total_steps
    interval = ctx.config.log_interval
    writer = (tf.summary.create_file_writer(os.path.join(ctx.output_dir, TENSORBOARD_SUBDIR))
              if reporter else None)

    class ProgressCallback(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            self.step = -1  # known after BackupAndRestore (listed later) has restored

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self.step < 0:
                self._begin()

        def _begin(self) -> None:
            self.step = int(self.model.optimizer.iterations.numpy())
            self.epoch = self.step // ctx.config.steps_per_epoch
            self.mark = (time.monotonic(), self.step)
            if self.step:
                say(f"resumed at step {self.step}")
            else:
                say(f"starting at step 0 of {total}")
            if reporter:
                reporter.update(step=self.step, epoch=self.epoch, total_steps=total)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.step += 1
            _State.steps_this_process += 1
            watchdog.beat()
            peers.arm()
            if _State.steps_this_process == 1 or self.step % interval == 0 or self.step == total:
                self._log(logs or {})

        def _log(self, logs: dict[str, Any]) -> None:
            now = time.monotonic()
            then, then_step = self.mark
            rate = (self.step - then_step) * global_batch / max(now - then, 1e-9)
            self.mark = (now, self.step)
            metrics = {k: float(v) for k, v in logs.items() if k != "loss"}
            loss = float(logs["loss"]) if "loss" in logs else None
            text = " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
            say(f"step {self.step}/{total} epoch {self.epoch} loss={loss:.4f} {text} "
                f"samples/s={rate:.0f}")
            if reporter:
                reporter.update(step=self.step, epoch=self.epoch, loss=loss, metrics=metrics,
                                samples_per_second=round(rate, 1))
            if writer:
                scalars = {"loss": loss, **metrics, "samples_per_second": rate}
                with writer.as_default(step=self.step):
                    for k, v in scalars.items():
                        if v is not None:
                            # tf.summary.scalar lives in the tensorboard package, which
                            # tensorflow-cpu does not install; write() + metadata is the same.
                            tf.summary.write(k, tf.constant(v, tf.float32),
                                             metadata=_SCALAR_METADATA)
                writer.flush()

    return ProgressCallback()


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
    import tensorflow as tf

    from kerasjob_trainer import data, models
    from kerasjob_trainer.strategy import build_strategy

    cfg = ctx.config
    strategy = build_strategy(ctx.cluster, cfg.collective_timeout_seconds)
    is_chief = ctx.cluster.is_chief
    global_batch = cfg.batch_size_per_replica * strategy.num_replicas_in_sync
    tf.keras.utils.set_random_seed(cfg.seed)
    with strategy.scope():
        built = models.build_model(cfg.model, ctx.raw_config, cfg.learning_rate)
    model = built.model
    if model.distribute_reduction_method == "auto":
        # "auto" sums per-replica batch logs under MWMS (2 workers log accuracy 1.9); "first"
        # logs the local replica's own batch, the honest per-step figure.
        model.distribute_reduction_method = "first"
    if built.train_dataset is not None:
        examples = data.Examples(built.train_dataset, built.test_dataset, None)
    else:
        examples = data.load_examples(cfg.dataset, tuple(model.input_shape[1:]),
                                      int(model.output_shape[-1]), cfg.seed)
    train_ds = data.make_train_dataset(examples, global_batch, cfg.seed)

    reporter = _reporter(ctx) if is_chief else None
    watchdog = faults.Watchdog(cfg.stall_timeout_seconds)
    peers = faults.PeerMonitor(_peer_addresses(ctx.cluster))
    peers.quiet_when(lambda: preemption.preemption_in_progress(model))

    def on_preempted_saved() -> None:
        # Peers may still be pulling this worker's last collective chunks (gRPC RecvBuf is
        # served by the sender); a brief pause keeps them from seeing a lost peer (43).
        time.sleep(PREEMPTED_EXIT_DELAY_SECONDS)
        hard_exit(ExitCode.PREEMPTED_SAVED,
                  f"preempted: state saved at step {int(model.optimizer.iterations.numpy())}; "
                  f"exiting {int(ExitCode.PREEMPTED_SAVED)}")

    # Progress first: a step is logged before a backup or a preemption save of that step,
    # so the last logged step of a preempted worker is the step it saved.
    callbacks = [
        _progress_callback(ctx, reporter, watchdog, peers, global_batch),
        preemption.backup_and_restore(ctx.backup_dir, cfg.save_freq, on_preempted_saved),
    ]
    say(f"{ctx.cluster.role}:{ctx.cluster.index} of {max(ctx.cluster.num_workers, 1)} "
        f"worker(s), {strategy.num_replicas_in_sync} replica(s), global batch {global_batch}, "
        f"{cfg.epochs}x{cfg.steps_per_epoch} steps, backup every {cfg.save_freq}")
    try:
        model.fit(train_ds, epochs=cfg.epochs, steps_per_epoch=cfg.steps_per_epoch,
                  callbacks=callbacks, verbose=0)
        watchdog.pause()
        peers.stop()  # peers finish and leave on their own from here on
        steps = int(model.optimizer.iterations.numpy())
        test_accuracy = None
        if examples.test is not None:
            result = model.evaluate(data.make_test_dataset(examples.test, global_batch),
                                    verbose=0, return_dict=True)
            test_accuracy = result.get("accuracy")
        _save_model(model, ctx, is_chief)
        if is_chief:
            shutil.rmtree(ctx.backup_dir, ignore_errors=True)  # the model is safe now
    except Exception as e:  # every error must end in a contract exit code, fast
        code = faults.classify(e) if ctx.cluster.num_workers > 1 else ExitCode.FAILURE
        hard_exit(code, f"{type(e).__name__}: {faults.summary(e)} -> exiting {int(code)}")
    if is_chief:
        assert reporter is not None
        metrics = dict(reporter.progress.metrics)
        if test_accuracy is not None:
            metrics["test_accuracy"] = float(test_accuracy)
        reporter.update(step=steps, metrics=metrics, done=True)
        acc = f"test_accuracy={test_accuracy:.4f} " if test_accuracy is not None else ""
        say(f"final {acc}steps={steps}")
        reporter.close()
    else:
        say(f"done steps={steps}")
    _exit_after_teardown()
    return int(ExitCode.SUCCESS)


def _reporter(ctx: RunContext) -> ProgressReporter:
    try:
        return ProgressReporter(ctx.output_dir, ctx.metrics_port)
    except OSError as e:  # a busy port must not stop training; progress.json still works
        say(f"warning: cannot serve /metrics on port {ctx.metrics_port}: {e}")
        return ProgressReporter(ctx.output_dir, None)


def _save_model(model: Any, ctx: RunContext, is_chief: bool) -> None:
    """Every worker saves (reading metric variables is a collective); only the chief keeps it."""
    if is_chief:
        os.makedirs(ctx.output_dir, exist_ok=True)
        path = os.path.join(ctx.output_dir, MODEL_FILE)
        tmp = os.path.join(ctx.output_dir, f".tmp-{MODEL_FILE}")
        model.save(tmp)
        os.replace(tmp, path)  # the evaluator and users never see a half-written model
        say(f"saved model to {path}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        model.save(os.path.join(tmp, MODEL_FILE))


def _exit_after_teardown() -> None:
    """Let TensorFlow's shutdown barrier run, but never let it keep a finished job alive."""
    timer = threading.Timer(SUCCESS_TEARDOWN_SECONDS,
                            lambda: hard_exit(ExitCode.SUCCESS, "teardown slow; exiting 0"))
    timer.daemon = True
    timer.start()
