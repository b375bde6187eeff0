"""Save-on-SIGTERM outside GCP: the ONE place that touches private TensorFlow/tf_keras API.

Why: tf_keras's BackupAndRestore(save_before_preemption=True) drives TensorFlow's
PreemptionCheckpointHandler, which makes every MWMS worker agree (through the coordination
service) on the step at which to save when any of them receives SIGTERM, then saves and
exits. tf_keras enables it only when a GCE metadata server answers
(`distributed_file_utils.support_on_demand_checkpoint_callback`), and TensorFlow tunes it per
platform (`failure_handling_util.detect_platform`, a 5 s HTTP probe; on a GCE *CPU* VM the
handler refuses to initialise). Kubernetes sends SIGTERM everywhere, so we:

1. make tf_keras's gate say yes for MultiWorkerMirroredStrategy,
2. make platform detection skip the GCE probe (INTERNAL_GPU/INTERNAL_CPU: SIGTERM watcher,
   no grace period), identical behaviour on every cloud,
3. fix two gaps in tf_keras's wiring (see `PreemptibleBackupAndRestore`).

All of this is pinned to the versions below and verified before patching; any mismatch
disables the override loudly and the trainer falls back to "SIGTERM = exit 43 without a
save" (the last periodic backup stays valid). tests/trainer/test_preemption.py checks it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NoReturn

from kerasjob_contract import ExitCode
from kerasjob_trainer.shared.faults import hard_exit

#: Versions whose private internals this module was written against.
PINNED_TF_PREFIX = "2.21."
PINNED_TF_KERAS_PREFIX = "2.21."

#: Escape hatch: KERASJOB_SAVE_ON_SIGTERM=0 turns the override off (SIGTERM then exits 43
#: and the restart resumes from the last periodic backup).
DISABLE_ENV = "KERASJOB_SAVE_ON_SIGTERM"

log = logging.getLogger("kerasjob")

_enabled: bool | None = None


class UnsupportedVersion(RuntimeError):
    pass


def check_versions() -> None:
    import tensorflow as tf
    import tf_keras

    if not tf.__version__.startswith(PINNED_TF_PREFIX) or not tf_keras.__version__.startswith(
        PINNED_TF_KERAS_PREFIX
    ):
        raise UnsupportedVersion(
            f"save-before-preemption override is pinned to tensorflow {PINNED_TF_PREFIX}x / "
            f"tf_keras {PINNED_TF_KERAS_PREFIX}x, found {tf.__version__} / "
            f"{tf_keras.__version__}; re-check kerasjob_trainer/preemption.py"
        )


def enable_save_before_preemption() -> bool:
    """Patch the GCP gating. Returns False (and logs an error) when it cannot be done."""
    global _enabled
    if _enabled is not None:
        return _enabled
    if os.environ.get(DISABLE_ENV, "1") == "0":
        log.warning("kerasjob: save-before-preemption off (%s=0): SIGTERM exits 43", DISABLE_ENV)
        _enabled = False
        return _enabled
    try:
        check_versions()
        import tensorflow as tf
        from tensorflow.python.distribute.failure_handling import failure_handling_util
        from tf_keras.src.distribute import worker_training_state

        platform = failure_handling_util.PlatformDevice
        for owner, attr in (
            (worker_training_state, "support_on_demand_checkpoint_callback"),
            (failure_handling_util, "detect_platform"),
            (platform, "INTERNAL_GPU"),
            (platform, "INTERNAL_CPU"),
        ):
            if not hasattr(owner, attr):
                raise UnsupportedVersion(f"{owner.__name__}.{attr} is gone")

        def supported(strategy: Any) -> bool:
            return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)

        def detect_platform() -> Any:
            if tf.config.list_logical_devices("GPU"):
                return platform.INTERNAL_GPU
            return platform.INTERNAL_CPU

        worker_training_state.support_on_demand_checkpoint_callback = supported
        failure_handling_util.detect_platform = detect_platform
        _enabled = True
    except (UnsupportedVersion, ImportError) as e:
        log.error("kerasjob: save-before-preemption DISABLED: %s", e)
        _enabled = False
    return _enabled


def backup_and_restore(
    backup_dir: str,
    save_freq: int,
    on_saved: Callable[[], None],
    metric_state: Any = None,
    on_backup: Callable[[int], None] | None = None,
) -> Any:
    """A BackupAndRestore callback; with the override, SIGTERM saves and calls on_saved().
    `metric_state` (a `metric_state.MetricState`) is kept in every backup it writes;
    `on_backup(step)` is called after each periodic backup (the step a restart resumes at)."""
    import tf_keras

    enabled = enable_save_before_preemption()

    class PreemptibleBackupAndRestore(tf_keras.callbacks.BackupAndRestore):
        """Fixes two gaps in tf_keras 2.21's save_before_preemption wiring.

        - tf_keras builds PreemptionCheckpointHandler with the *write* manager, whose
          constructor restores from it; on a non-chief that is the worker's temp dir, not
          the chief's backup, and tf_keras then skips its own restore. So a resumed
          non-chief would start from scratch: restore from the chief's backup here.
        - The handler's exit function is `sys.exit(42)`, which unwinds through fit and the
          MWMS teardown (seconds, sometimes a hang); call `on_saved` (a hard exit) instead.
        """

        def on_train_begin(self, logs: Any = None) -> None:
            super().on_train_begin(logs)
            if metric_state is not None:
                metric_state.keep_in(self._training_state.write_checkpoint_manager)
            handler = getattr(self.model, "_preemption_handler", None)
            if handler is None:
                return
            state = self._training_state
            state.read_checkpoint_manager.restore_or_initialize()
            # Every worker starts counting at 0 together, so the step they agree to save
            # at is the same step everywhere.
            handler._run_counter = 0
            write_dir = state.write_checkpoint_manager.directory
            strategy = self.model.distribute_strategy

            def exit_fn() -> None:
                from tf_keras.src.distribute import distributed_file_utils

                distributed_file_utils.remove_temp_dirpath(write_dir, strategy)
                on_saved()

            handler._exit_fn = exit_fn

        def _backup(self, epoch: int, batch: int = 0) -> None:
            super()._backup(epoch, batch)
            if on_backup is not None:
                on_backup(int(self.model.optimizer.iterations.numpy()))

    return PreemptibleBackupAndRestore(
        # Kept after fit(): the chief deletes it only once the final model is on disk, so a
        # kill between the two resumes near the end instead of starting over.
        backup_dir,
        save_freq=save_freq,
        delete_checkpoint=False,
        save_before_preemption=enabled,
    )


def sigterm_without_save() -> NoReturn:
    """SIGTERM after a step but before fit() installs TensorFlow's handler, or with the
    override off: the work since the last backup is lost; exit 43 ("restart me"), which the
    operator treats as a disruption too."""
    hard_exit(
        ExitCode.PEER_LOST,
        "SIGTERM without save-before-preemption: resuming from the last backup; exiting 43",
    )


def leave_together(step: int, timeout_seconds: float) -> str | None:
    """Wait until every worker of the group has saved at the agreed `step` and called this
    too: the coordination service's barrier. A worker that left at once could cut a peer
    short while that peer still pulls its share of the save's last collectives (the metric
    variables are reduced as they are saved), and the peer would exit 43, unsaved.

    None once all are there (milliseconds after the slowest save); otherwise why not (a
    peer gone, the timeout, TensorFlow without the barrier), and the caller waits a moment.
    """
    try:
        from tensorflow.python.eager import context

        context.context().wait_at_barrier(
            f"kerasjob-preempted-{step}", max(int(timeout_seconds * 1000), 1)
        )
    except Exception as e:  # every failure means: leave the old way
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def preemption_in_progress(model: Any) -> bool:
    """Whether some worker got SIGTERM and the group is (about to be) saving and exiting 42.

    Peers then leave within moments of each other on purpose; a peer going away must not
    be mistaken for a lost peer (exit 43) before this worker has saved.
    """
    handler = getattr(model, "_preemption_handler", None)
    if handler is None:
        return False
    events = [
        getattr(handler, name, None)
        for name in ("_received_own_sigterm", "_received_checkpoint_step")
    ]
    return any(e is not None and e.is_set() for e in events) or bool(
        getattr(handler, "_final_checkpoint_countdown", False)
    )


#: Variables tf_keras's WorkerTrainingState writes into every backup (pinned like the rest).
_SAVED_EPOCH_KEY = "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"
_SAVED_BATCH_KEY = "ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE"


def restored_step(backup_dir: str, steps_per_epoch: int) -> int:
    """The global step `fit` will resume at from the chief's backup (0 without one).

    Read from the files before `fit` (no collective), so the input pipeline can start at the
    right position; the same rule as tf_keras's
    `WorkerTrainingState.maybe_load_initial_counters_from_ckpt` for an integer save_freq.
    The trainer checks the result against `optimizer.iterations` at the first step.
    """
    import tensorflow as tf

    path = tf.train.latest_checkpoint(os.path.join(backup_dir, "chief"))
    if not path:
        return 0
    reader = tf.train.load_checkpoint(path)
    for key in (_SAVED_EPOCH_KEY, _SAVED_BATCH_KEY):
        if not reader.has_tensor(key):
            raise UnsupportedVersion(f"backup {path} has no {key}; re-check preemption.py")
    epoch = int(reader.get_tensor(_SAVED_EPOCH_KEY))
    batch = int(reader.get_tensor(_SAVED_BATCH_KEY))
    if batch < 0:  # written by an epoch-level save (never by this trainer)
        return max(epoch + 1, 0) * steps_per_epoch
    if batch == steps_per_epoch - 1:
        return (epoch + 1) * steps_per_epoch
    return epoch * steps_per_epoch + batch + 1


def checkpoint_random_state(model: Any) -> int:
    """Put the `tf.random.Generator` of every random layer (Dropout, ...) into the backup.

    With `enable_tf_random_generator` (deterministic runs) such a layer draws from a
    generator whose state is a variable, but tf_keras keeps it out of checkpoints on purpose
    (`BaseRandomLayer._trackable_children`): a resumed run would restart every random stream
    from its seed. Tracking the generators as an attribute of the model puts their state in
    the BackupAndRestore checkpoint (not in model.keras). Returns how many were found.
    """
    import tf_keras

    generators = []
    for layer in model.submodules:
        if not isinstance(layer, tf_keras.layers.Layer):
            continue
        generator = getattr(getattr(layer, "_random_generator", None), "_generator", None)
        if generator is not None:
            generators.append(generator)
    if generators:
        model._kerasjob_random_state = generators
    return len(generators)
