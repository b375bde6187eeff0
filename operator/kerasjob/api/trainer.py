"""spec.trainer: the bundled trainer's configuration (defaults from the contract's
`kerasjob_contract.trainer_config`, the one set of them)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, field_validator
from pydantic.config import JsonDict

from kerasjob.api.base import MODEL_PATTERN, DatasetFormat, DatasetSource, _cel, _Model
from kerasjob_contract import Backend
from kerasjob_contract.mesh import (
    AXIS_NAME_PATTERN,
    BUILTIN_AXIS,
    BUILTIN_AXIS_SIZES,
    BUILTIN_LAYOUT,
    ELASTIC_WHOLE_REPLICAS,
    MAX_AXES,
    MAX_AXIS_SIZE,
    NEEDS_JAX,
    PRODUCT_IS_DEVICES,
    PRODUCT_PER_WORKER,
    MeshError,
    parse_mesh,
)
from kerasjob_contract.trainer_config import BUILTIN_MODELS, infer_format
from kerasjob_contract.trainer_config import DEFAULTS as TRAINER_DEFAULTS

# ---------------------------------------------------------------------------------------
# Spec
# ---------------------------------------------------------------------------------------

#: "2, 4, 8 or 16": the sizes of the axis the built-in models shard on.
_SIZES_TEXT = f"{', '.join(map(str, BUILTIN_AXIS_SIZES[:-1]))} or {BUILTIN_AXIS_SIZES[-1]}"

# Object fields built by default_factory carry `"default": {}` into the CRD: the API server
# then creates the object and fills in its fields' defaults, so CEL rules and the operator
# always see e.g. spec.checkpoint.mountPath.


class DatasetSpec(_Model):
    """The training data of the bundled trainer."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.source != 'path' || has(self.path)",
                    "dataset.path is required when dataset.source is 'path'",
                ),
                _cel(
                    "self.source == 'path' || (!has(self.path) && !has(self.format))",
                    "dataset.path and dataset.format are only allowed when dataset.source "
                    "is 'path'",
                ),
            ]
        }
    )

    source: DatasetSource = Field(
        DatasetSource.MNIST_SAMPLE,
        description=(
            "Where the data comes from: 'mnist-sample' (5,000 real MNIST digits shipped in the "
            "trainer image, no network needed), 'synthetic' (random tensors shaped for the "
            "model, for benchmarks) or 'path' (files on a volume mounted through "
            "spec.template, see dataset.path). Default: mnist-sample."
        ),
    )
    path: str | None = Field(
        None,
        max_length=4096,
        description=(
            "Absolute path, inside the trainer container, of an .npz file, a TFRecord file "
            "or directory, or (backend jax) an ArrayRecord file or directory. Required when "
            "source is 'path', forbidden otherwise."
        ),
    )
    format: DatasetFormat | None = Field(
        None,
        description=(
            "File format of dataset.path: 'npz', 'tfrecord' or 'arrayrecord' (backend jax: "
            "train-*.array_record files read through Grain). When unset it is inferred from "
            "the path: a name ending in .npz is npz, in .array_record arrayrecord, anything "
            "else TFRecord."
        ),
    )

    def resolved_format(self) -> DatasetFormat | None:
        """The effective file format (None unless source is 'path')."""
        if self.source is not DatasetSource.PATH or self.path is None:
            return None
        if self.format is not None:
            return self.format
        return DatasetFormat(infer_format(self.path))


class MeshAxisSpec(_Model):
    """One axis of the device mesh."""

    name: str = Field(
        ...,
        pattern=AXIS_NAME_PATTERN,
        description=(
            "The axis name, e.g. batch or model: what a layout names (the first axis is the "
            "batch axis; the built-in models shard on an axis named model)."
        ),
    )
    size: int = Field(..., ge=1, le=MAX_AXIS_SIZE, description="Devices along this axis.")


class TrainerSpec(_Model):
    """Configuration of the bundled trainer, passed to it as JSON in KERASJOB_TRAINER_CONFIG."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    f"self.model.matches('{MODEL_PATTERN}')",
                    "trainer.model must be a built-in model name (e.g. mnist-mlp) or "
                    "'package.module:function'",
                ),
            ]
        }
    )

    model: str = Field(
        "mnist-mlp",
        min_length=1,
        max_length=256,
        description=(
            "The model to train: a built-in name (mnist-mlp, mnist-cnn, cifar10-cnn) or "
            "'package.module:function' naming a function, importable in the trainer image, "
            "that returns a compiled model: tf_keras for backend tensorflow, Keras 3 for "
            "backend jax. Default: mnist-mlp."
        ),
    )
    dataset: DatasetSpec = Field(
        default_factory=DatasetSpec,
        description="The training data. Default: the MNIST sample bundled with the trainer.",
        json_schema_extra={"default": {}},
    )
    epochs: int = Field(
        TRAINER_DEFAULTS.epochs,
        ge=1,
        description=f"Number of epochs to train. Default: {TRAINER_DEFAULTS.epochs}.",
    )
    steps_per_epoch: int = Field(
        TRAINER_DEFAULTS.steps_per_epoch,
        ge=1,
        description=(
            f"Global training steps per epoch. Default: {TRAINER_DEFAULTS.steps_per_epoch}."
        ),
    )
    batch_size_per_replica: int = Field(
        TRAINER_DEFAULTS.batch_size_per_replica,
        ge=1,
        description=(
            "Batch size on each replica; the global batch is this times the number of "
            f"training replicas. Default: {TRAINER_DEFAULTS.batch_size_per_replica}."
        ),
    )
    learning_rate: float | None = Field(
        None,
        gt=0,
        description=(
            "Optimizer learning rate. When unset the built-in models use "
            f"{TRAINER_DEFAULTS.learning_rate:g} (Adam's default)."
        ),
    )
    seed: int = Field(
        TRAINER_DEFAULTS.seed,
        description=(
            "Seed for weight initialisation and dataset shuffling. The same seed on every "
            "worker is what keeps auto-sharded data free of duplicates and gaps. "
            f"Default: {TRAINER_DEFAULTS.seed}."
        ),
    )
    collective_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description=(
            "A training step whose collective operations make no progress for this long "
            "(a peer gone or cut off) fails: the trainer exits 43 and the group's trainers "
            "restart in place, inside their Pods, from the last backup (a disruption, in "
            "status.progress.goodput); checked by the trainer's watchdog once training runs. "
            "When unset "
            f"the trainer's default ({TRAINER_DEFAULTS.collective_timeout_seconds:g}s)."
        ),
    )
    stall_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description=(
            "No finished step for this long, after the first one, is treated as a silent "
            "peer: the worker exits so the group restarts (backend tensorflow: also no "
            "first step this long after fit began). When unset the trainer's default "
            f"({TRAINER_DEFAULTS.stall_timeout_seconds:g}s)."
        ),
    )
    log_every_steps: int | None = Field(
        None,
        ge=0,
        description=(
            "Steps between progress log lines; 0 or unset logs every checkpoint.saveFreq steps."
        ),
    )
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        None,
        min_length=1,
        max_length=256,
        description=(
            "Your own program instead of the bundled trainer, as an argv list like a "
            "container's command, e.g. [python, /opt/kerasjob-user/train.py, --lr=0.01]. The "
            "trainer image runs it (exec) with TF_CONFIG (backend jax: KERAS_BACKEND and the "
            "KERAS_DISTRIBUTION_*/JAX_* variables) and the KERASJOB_* variables set; "
            "model and dataset are then ignored. The script comes from the image, or a "
            "ConfigMap or volume mounted through spec.template; with the "
            "kerasjob_trainer.session library it gets backups, save-on-SIGTERM (exit 42), "
            "peer-loss exits (43), progress and exact resume. A missing program or script "
            "fails the job at once (exit 78). Unset: the bundled trainer."
        ),
    )
    deterministic: bool = Field(
        TRAINER_DEFAULTS.deterministic,
        description=(
            "Reproducible training: TensorFlow op determinism, seeded and checkpointed "
            "random state. The same job then ends with the same weights whether or not it "
            "was disrupted (bit-identical on CPU). Costs some throughput (see the trainer "
            f"README). Default: {str(TRAINER_DEFAULTS.deterministic).lower()}."
        ),
    )
    backend: Backend = Field(
        Backend(TRAINER_DEFAULTS.backend),
        description=(
            "Which Keras runs the job, for the bundled trainer and for your own command alike. "
            "'tensorflow': tf-keras (Keras 2) under MultiWorkerMirroredStrategy; each Pod "
            "gets TF_CONFIG. 'jax': Keras 3 on the JAX backend with keras.distribution "
            "(data parallel); each worker is one JAX process and gets KERAS_BACKEND=jax, "
            "KERAS_DISTRIBUTION_JOB_ADDRESSES and JAX_COORDINATOR_ADDRESS (worker 0 on "
            "spec.port, the coordinator), KERAS_DISTRIBUTION_NUM_PROCESSES and "
            "JAX_NUM_PROCESSES (the workers the job runs with now), "
            "KERAS_DISTRIBUTION_PROCESS_ID and JAX_PROCESS_ID (the worker's index), and no "
            "TF_CONFIG; the job's Pods reach each other on every TCP port. Backend jax "
            "allows no spec.chief (worker 0 is process 0, the chief) and no spec.evaluator. "
            f"Default: {TRAINER_DEFAULTS.backend}."
        ),
    )
    mesh: list[MeshAxisSpec] | None = Field(
        None,
        min_length=1,
        max_length=MAX_AXES,
        description=(
            "Backend jax: shard the model over a device mesh (keras.distribution.ModelParallel) "
            "instead of replicating it on every device (DataParallel, the default). Ordered "
            "axes, e.g. [{name: batch, size: 2}, {name: model, size: 2}]: every device of the "
            "job laid out row-major in that shape, processes in order (the last axis within "
            "a process first). The FIRST axis is the batch axis: the global batch is "
            "batchSizePerReplica x its size, split along it. Variables are sharded by the "
            "model's layout: the built-in models shard their kernels on an axis named model "
            f"of size {_SIZES_TEXT}, not the first (checked at apply time); "
            "a KerasHub backbone's own get_layout_map; a user's module-level "
            "layout_map(mesh, config). The product of the sizes must equal workers x the "
            "devices of each process (checked at apply time against devicesPerProcess, "
            "and by the trainer, exit 78); a layout that shards nothing is refused (exit 78). "
            "With spec.elastic the mesh is declared at spec.workers and only its batch axis "
            "follows the workers the job runs with, so the product of the axes after the "
            "first must divide devicesPerProcess (checked at apply time when it is set, "
            "else by the trainer, exit 78). Immutable."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    devices_per_process: int | None = Field(
        None,
        ge=1,
        le=1024,
        description=(
            "JAX devices each worker process has (its GPUs, or on CPU "
            "--xla_force_host_platform_device_count in XLA_FLAGS): with it the API server "
            "checks trainer.mesh against workers x devicesPerProcess at apply time, and the "
            "trainer checks it against the devices JAX sees (exit 78). Unset: only the "
            "trainer checks the mesh."
        ),
    )

    @field_validator("mesh")
    @classmethod
    def _unique_axes(cls, mesh: list[MeshAxisSpec] | None) -> list[MeshAxisSpec] | None:
        """The contract's parser (two axes of one name: the CRD's list-map keys refuse it)."""
        try:
            parse_mesh([a.model_dump() for a in mesh or []])
        except MeshError as e:
            raise ValueError(str(e)) from None
        return mesh


def _mesh_product(mesh: str, first: int = 0) -> str:
    """CEL: the product of the mesh's axis sizes from axis `first` on (a list of at most
    MAX_AXES axes)."""
    return " * ".join(
        f"(size({mesh}) > {i} ? {mesh}[{i}].size : 1)" for i in range(first, MAX_AXES)
    )


_M = "self.trainer.mesh"
_PRODUCT = _mesh_product(_M)
#: CEL: one model replica's devices, the product of the axes after the first (batch) one.
_REPLICA_DEVICES = _mesh_product(_M, first=1)
_BUILTINS = ", ".join(f"'{m}'" for m in BUILTIN_MODELS)
_SIZES = ", ".join(map(str, BUILTIN_AXIS_SIZES))
#: KerasJobSpec's rules for trainer.mesh (they need spec.workers and spec.elastic): the
#: contract's `kerasjob_contract.mesh.job_problems` in CEL, in its order and with its messages
#: (static: a messageExpression that prints the product, string() of an int, is estimated
#: beyond the API server's cost budget; v1.36 refused the whole CRD: "more than 100x"). One
#: table of cases holds them to it (`kerasjob_dev.testing.mesh_cases`, run through the API
#: server, the operator's validation, the contract and the trainer).
MESH_RULES: list[JsonDict] = [
    _cel(f"!has({_M}) || self.trainer.backend == 'jax'", NEEDS_JAX),
    _cel(
        f"!has({_M}) || !has(self.elastic) || !has(self.trainer.devicesPerProcess) || "
        f"self.trainer.devicesPerProcess % ({_REPLICA_DEVICES}) == 0",
        ELASTIC_WHOLE_REPLICAS,
    ),
    _cel(
        f"!has({_M}) || !has(self.trainer.devicesPerProcess) || "
        f"{_PRODUCT} == self.workers * self.trainer.devicesPerProcess",
        PRODUCT_IS_DEVICES,
    ),
    _cel(
        f"!has({_M}) || has(self.trainer.devicesPerProcess) || {_PRODUCT} % self.workers == 0",
        PRODUCT_PER_WORKER,
    ),
    # `shards_builtin`: a built-in model run by the bundled trainer (not a command)
    _cel(
        f"!has({_M}) || has(self.trainer.command) || !(self.trainer.model in [{_BUILTINS}]) || "
        f"({_M}.exists(a, a.name == '{BUILTIN_AXIS}' && a.size in [{_SIZES}]) && "
        f"{_M}[0].name != '{BUILTIN_AXIS}')",
        BUILTIN_LAYOUT,
    ),
]
