"""Your own Keras 3 script as a KerasJob trainer (backend jax): the library API.

The Keras 3 runtime's session (its lifecycle is the core's `Lifecycle`), in a few lines:

    from kerasjob_trainer.keras3 import session

    job = session.start()                 # identity env, jax.distributed, DataParallel
    model = build_and_compile_my_model()  # a Keras 3 model, built after start()
    job.fit(model, (x_train, y_train), epochs=3, steps_per_epoch=200,
            global_batch_size=job.global_batch_size(64))
    job.finish(model)                     # the chief writes model.keras; exit 0

- **Identity**: KERAS_DISTRIBUTION_* / JAX_* (none: one local process); ``job.is_chief``
  (process 0), ``job.index``, ``job.num_workers``. The variables are replicated over every
  device of every process (`keras.distribution.DataParallel`); each process feeds its share
  of each global batch.
- **Data**: in-memory (x, y) arrays are fed by global step (`data.py`): a resumed run
  continues at the exact example, at any number of processes. Or pass a function
  ``batch(step, process, processes) -> (x, y)`` that returns this process's share.
- **Backups**: every `saveFreq` steps every process writes its shards of an Orbax checkpoint
  (`checkpoint.py`: every variable, the metrics' totals, the data position; asynchronous,
  committed atomically); a restarted job resumes at the exact step, bit for bit. With
  KERASJOB_CHECKPOINT_LOCATION=gs://... they go straight to the bucket (`bucket.py`).
- **SIGTERM** (eviction, preemption): JAX's preemption sync point makes every process stop
  after the same step; all save, all exit 42. A lost peer: 43 (an error in a
  collective, the stall watchdog, or the JAX runtime's abort, turned into 43 by
  `supervisor`). Any other error in `fit`: 1.
- **Progress and goodput**: the chief writes progress.json, serves /metrics and logs the
  stable `kerasjob: step N/M ...` lines, as the tf-keras path does.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, NoReturn

from kerasjob_contract import ExitCode
from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core import lifecycle
from kerasjob_trainer.core.lifecycle import Lifecycle
from kerasjob_trainer.runtimes.keras3 import bucket, checkpoint, errors, group
from kerasjob_trainer.runtimes.keras3 import data as k3data
from kerasjob_trainer.runtimes.keras3 import mesh as k3mesh
from kerasjob_trainer.runtimes.keras3.callback import SIGTERM_SEEN, keras_callback
from kerasjob_trainer.runtimes.keras3.context import Context, build_context
from kerasjob_trainer.runtimes.keras3.grain_input import (
    ArraySource,
    grain_source,
    workers_from_env,
)
from kerasjob_trainer.shared import startup
from kerasjob_trainer.shared.data import Indexed
from kerasjob_trainer.shared.faults import exit_invalid, hard_exit, say


class Session(Lifecycle):
    """One Keras 3 trainer process of a KerasJob (see the module docstring)."""

    ctx: Context
    show_traceback = True
    #: spec.trainer.mesh in this process (None: DataParallel); set by `session_for`.
    sharding: k3mesh.Sharding | None = None
    backups: checkpoint.Backups  # made by `fit` (every process takes part in each save)

    def global_batch_size(self, per_replica: int) -> int:
        """per_replica x every device of the job; for an elastic job (KeepGlobalBatch), x the
        devices of the job at its preferred size, split over the processes there are now."""
        import jax

        elastic = self.config.elastic
        if self.sharding is not None:  # a model replica per slice of the batch axis
            now = self.sharding.replicas
            if elastic is None:
                return int(per_replica) * now
            preferred = self.sharding.replicas_at(elastic.preferred_workers)
            return self.keep_global_batch(per_replica, now, preferred, "replica", self.num_workers)
        devices = jax.device_count()
        if elastic is None:
            return int(per_replica) * devices
        preferred = elastic.preferred_workers * jax.local_device_count()
        return self.keep_global_batch(per_replica, devices, preferred, "device", self.num_workers)

    def restored_step(self) -> int:
        """The global step a resumed job starts at (0: no backup); with a bucket, the newest
        step there that counts (what `fit`'s claim chooses unless another start wins)."""
        config = bucket.config_from(os.environ)
        if config is not None:
            return bucket.latest_step(config)
        header = checkpoint.read_header(self.backup_dir)
        return header.step if header else 0

    # -- sharded models (spec.trainer.mesh) ----------------------------------------------------

    @property
    def device_mesh(self) -> Any:
        """The job's keras.distribution.DeviceMesh (None without spec.trainer.mesh)."""
        return self.sharding.device_mesh if self.sharding is not None else None

    def shard(self, layout_map: Any) -> None:
        """Shard the model by `layout_map` (a LayoutMap over `device_mesh`), before building
        it; `fit` refuses a layout that shards nothing (exit 78)."""
        if self.sharding is None:
            group.exit_invalid("shard() needs a mesh")
        try:
            self.sharding.shard(layout_map)
        except ConfigError as e:
            group.exit_invalid(str(e))

    def data_share(self) -> tuple[int, int]:
        """(index, count): this process feeds part `index` of `count` of each global batch."""
        return self.sharding.data if self.sharding is not None else (self.index, self.num_workers)

    def _guard_layout(self, model: Any) -> None:
        if self.sharding is None:
            return
        try:
            unmatched = self.sharding.guard(model)
        except ConfigError as e:
            group.exit_invalid(str(e))
        for key in unmatched:
            say(f"warning: layout key {key!r} matches no variable path (re.fullmatch)")

    # -- training -----------------------------------------------------------------------------

    def fit(
        self,
        model: Any,
        train: Indexed | tuple[Any, Any] | k3data.BatchFn,
        *,
        epochs: int,
        steps_per_epoch: int,
        global_batch_size: int,
        callbacks: list[Any] | None = None,
        data_workers: int | None = None,
        **kwargs: Any,
    ) -> int:
        """Restore the backup, then model.fit epoch by epoch from the restored step, with
        backups, save-on-SIGTERM, progress and goodput. Returns the steps done."""
        self._guard_layout(model)
        source = self._source(train, global_batch_size, data_workers)
        self.backups = checkpoint.Backups(self.backup_dir, place=self._bucket_place())
        restored = self._restore(model, source, steps_per_epoch)
        step = restored.header.step if restored else 0
        # A resume in mid-epoch continues the epoch's running averages (not at an epoch start:
        # Keras resets them there anyway).
        totals = restored.metric_totals if restored and step % steps_per_epoch else {}
        startup.mark("restore")
        total = epochs * steps_per_epoch
        ours = keras_callback()(
            self,
            model,
            total=total,
            steps_per_epoch=steps_per_epoch,
            start=step,
            global_batch=global_batch_size,
            totals=totals,
            backups=self.backups,
            data_position=source.position,
        )
        self._say_plan(epochs, steps_per_epoch, global_batch_size)
        ours.begin()
        while step < total:
            epoch = step // steps_per_epoch
            steps = (epoch + 1) * steps_per_epoch - step
            x = k3data.step_input(source, step, steps, *self.data_share())
            try:
                model.fit(
                    x,
                    epochs=epoch + 1,
                    initial_epoch=epoch,
                    steps_per_epoch=steps,
                    callbacks=[ours, *(callbacks or [])],
                    verbose=0,
                    shuffle=False,
                    **kwargs,
                )
            except Exception as e:  # every error must end in a contract exit code, fast
                self.fail(e)
            step += steps
        self.watchdog.pause()
        self._close(source)
        self.steps = step
        return step

    def _bucket_place(self) -> bucket.Place | None:
        """With a bucket location: this incarnation's generation there (process 0 claims
        it; every process learns it and the step to restore)."""
        config = bucket.config_from(os.environ)
        if config is None:
            return None
        return bucket.open_place(config, self.index, self.num_workers, os.environ)

    def _restore(
        self, model: Any, source: k3data.StepSource, steps_per_epoch: int
    ) -> checkpoint.Restored | None:
        """The newest backup into `model` (bit for bit) at its data position, or exit 1."""
        try:
            restored = self.backups.restore(model)
            if restored is not None:
                source.check(restored.header.data, restored.header.step)
        except ValueError as e:
            hard_exit(ExitCode.FAILURE, f"cannot resume: {e}")
        if restored is not None and restored.matched_by != "path":
            say(f"backup: restored step {restored.header.step} by {restored.matched_by}")
        return restored

    def _close(self, source: k3data.StepSource) -> None:
        try:
            self.backups.close()  # every save committed before the final model and cleanup
        except Exception as e:
            self.fail(e)
        if source.close is not None:
            source.close()

    def _say_plan(self, epochs: int, steps_per_epoch: int, global_batch: int) -> None:
        cfg = self.config
        say(
            f"worker:{self.index} of {self.num_workers} process(es), keras {_keras_version()} "
            f"on jax, {epochs}x{steps_per_epoch} steps, global batch {global_batch}, "
            f"backup every {cfg.save_freq}{', deterministic' if cfg.deterministic else ''}"
        )

    def _source(self, train: Any, global_batch: int, workers: int | None) -> k3data.StepSource:
        """Arrays and any random-access source (`len`, `[i]` -> (x, y); `records.Records`
        for ArrayRecord files) are read through Grain; a batch function is called as is."""
        if callable(train) and not hasattr(train, "__getitem__"):
            return k3data.StepSource(train)
        if isinstance(train, tuple):
            train = Indexed(*train)
        if isinstance(train, Indexed):
            train = ArraySource(train.x, train.y)
        k3data.share(global_batch, self.data_share()[1])
        return grain_source(
            train,
            global_batch,
            self.config.seed,
            workers=workers_from_env() if workers is None else workers,
            audit=self.audit,
        )

    def evaluate(self, model: Any, test: tuple[Any, Any], global_batch: int) -> dict[str, float]:
        """Every process evaluates its equal share of the test set (a collective)."""
        x, y = test
        index, n = self.data_share()
        per = len(y) // n
        mine = slice(index * per, (index + 1) * per)
        try:
            result = model.evaluate(
                x[mine], y[mine], batch_size=max(global_batch // n, 1), verbose=0, return_dict=True
            )
        except Exception as e:
            self.fail(e)
        return {k: float(v) for k, v in result.items()}

    def classify(self, error: BaseException) -> ExitCode:
        return errors.classify(error, multi_process=True)

    def before_final_save(self, model: Any) -> None:
        """A variable split across processes (a mesh) is gathered whole first: every process
        reads every value in `model.save`, and JAX cannot read another process's shards."""
        if self.sharding is None:
            return
        gathered = k3mesh.gather_to_host(model)
        if gathered:
            say(f"final save: {len(gathered)} variable(s) split across processes gathered whole")

    def after_final_save(self) -> None:
        shutil.rmtree(os.path.join(self.checkpoint_dir, JAX_CACHE_SUBDIR), ignore_errors=True)

    def exit_invalid(self, message: str) -> NoReturn:
        group.exit_invalid(message)

    def leave(self) -> None:
        """Leave JAX's distributed runtime (`group.leave`; the teardown timer bounds it)."""
        if self.identity.multi_process:
            group.leave()


def start(argv: list[str] | None = None) -> Session:
    """This process's Session: configuration and identity from the environment (exit 78 when
    they cannot work), then JAX's distributed runtime and DataParallel. Call it first."""
    return lifecycle.start(argv, build_context, session_for, SIGTERM_SEEN.set)


def session_for(ctx: Context) -> Session:
    """JAX up (the group formed), the distribution set, the seed set: the Session."""
    os.environ["KERAS_BACKEND"] = "jax"
    if ctx.config.deterministic:
        # XLA on CPU is deterministic; on GPUs, ask for deterministic kernels too.
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_gpu_deterministic_ops" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_gpu_deterministic_ops=true".strip()
    import jax

    startup.mark("tensorflow")  # the framework's import (the log line keeps one format)
    _compile_cache(jax, ctx.checkpoint_dir)
    identity = ctx.identity
    if identity.multi_process:
        heartbeat = max(int(ctx.config.collective_timeout_seconds), 10)
        config = bucket.config_from(os.environ)
        where = bucket.board(config) if config is not None else ctx.checkpoint_dir
        group.form(jax, identity, where, heartbeat)
    import keras

    if keras.backend.backend() != "jax":
        exit_invalid(
            f"Keras runs the {keras.backend.backend()} backend; "
            "backend jax needs KERAS_BACKEND=jax before Keras is imported"
        )
    sharding = _distribution(ctx, keras)
    keras.utils.set_random_seed(ctx.config.seed)
    startup.mark("cluster")
    session = Session(ctx)
    session.sharding = sharding
    return session


def _distribution(ctx: Context, keras: Any) -> k3mesh.Sharding | None:
    """DataParallel, or with spec.trainer.mesh ModelParallel over it (exit 78 when it does
    not fit the job's devices)."""
    mesh = ctx.config.mesh
    if mesh is None:
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(
                devices=keras.distribution.list_devices(), auto_shard_dataset=False
            )
        )
        return None
    try:
        sharding = k3mesh.Sharding.setup(
            mesh, ctx.config.devices_per_process, elastic=ctx.config.elastic is not None
        )
    except ConfigError as e:
        group.exit_invalid(str(e))
    say(sharding.describe())
    return sharding


#: JAX's persistent compilation cache, below the checkpoint directory (the job's shared
#: volume): a restarted process loads the XLA programs its predecessor compiled (the train
#: step, the initializers) instead of compiling them again. KERASJOB_JAX_CACHE=0 turns it off.
JAX_CACHE_SUBDIR = "jax-cache"


def _compile_cache(jax: Any, checkpoint_dir: str) -> None:
    if os.environ.get("KERASJOB_JAX_CACHE", "1") == "0":
        return
    path = os.path.join(checkpoint_dir, JAX_CACHE_SUBDIR)
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except (OSError, AttributeError, ValueError) as e:  # a cache is an optimisation only
        say(f"warning: no JAX compilation cache in {path}: {e}")


def _keras_version() -> str:
    import keras

    return str(keras.__version__)
