"""The trainer configuration (KERASJOB_TRAINER_CONFIG): its schema, its ONE set of defaults,
and its parser.

The operator's API (`kerasjob.api.TrainerSpec`) takes its defaults from `DEFAULTS` here, and
the trainer parses what the operator passes with `parse_config`: one schema for both sides.
Pure Python, no TensorFlow: everything here runs before TensorFlow is imported and before
the backup directory is touched, so a bad configuration fails in milliseconds with exit 78.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from typing import Any

from kerasjob_contract.mesh import NEEDS_JAX, Mesh, MeshError, builtin_error, parse_mesh

BUILTIN_MODELS = ("mnist-mlp", "mnist-cnn", "cifar10-cnn")
#: spec.trainer.backend: which Keras the job runs. "tensorflow": tf-keras (Keras 2) under
#: MultiWorkerMirroredStrategy, identity in TF_CONFIG. "jax": Keras 3 on JAX with
#: keras.distribution (DataParallel), identity in KERAS_DISTRIBUTION_* / JAX_*.
BACKENDS = ("tensorflow", "jax")
#: `strategy`, set by the operator for a job with spec.ps: "parameterServer" trains with
#: ParameterServerStrategy (backend tensorflow). Unset: the backend's own strategy.
PARAMETER_SERVER = "parameterServer"
STRATEGIES = (PARAMETER_SERVER,)
#: Dataset sources as the API spells them: "path" reads `path` (a mounted volume) in `format`.
API_DATASET_SOURCES = ("mnist-sample", "synthetic", "path")
#: arrayrecord: backend jax only (read through Grain; `kerasjob_trainer.runtimes.keras3.records`).
FILE_FORMATS = ("npz", "tfrecord", "arrayrecord")
#: Resolved sources (`DatasetConfig.source`): "path" becomes its file format.
DATASET_SOURCES = ("mnist-sample", "synthetic", *FILE_FORMATS)


class ConfigError(ValueError):
    """The configuration cannot work; retrying will not help (exit code 78)."""


#: spec.elastic.batchPolicy values. KeepGlobalBatch: the global batch stays that of the
#: preferred size; each replica's share grows when workers are missing (steps, examples,
#: data position and learning rate are those of an undisturbed run).
BATCH_POLICIES = ("KeepGlobalBatch",)


@dataclasses.dataclass(frozen=True)
class ElasticConfig:
    """What an elastic job's trainers need: the preferred number of workers (spec.workers),
    which may differ from the number in TF_CONFIG, and how the batch follows a resize."""

    preferred_workers: int
    batch_policy: str = "KeepGlobalBatch"


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    source: str = "mnist-sample"
    path: str | None = None


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """spec.trainer plus saveFreq, with defaults. Field docs: trainer_image/README.md and the
    CRD's descriptions (`kerasjob.api.TrainerSpec`)."""

    model: str = "mnist-mlp"
    dataset: DatasetConfig = dataclasses.field(default_factory=DatasetConfig)
    epochs: int = 3
    steps_per_epoch: int = 200
    batch_size_per_replica: int = 64
    save_freq: int = 100
    learning_rate: float = 1e-3
    seed: int = 42
    #: A collective op that makes no progress for this long fails (then exit 43).
    collective_timeout_seconds: float = 60.0
    #: No finished step for this long (after the first one) means a silent peer: exit 43.
    stall_timeout_seconds: float = 300.0
    #: Steps between "kerasjob: step ..." log lines; 0 = every saveFreq steps.
    log_every_steps: int = 0
    #: The user's own program (argv) to run instead of the bundled trainer's model.fit;
    #: empty = the bundled trainer. Exec'd with the same environment (TF_CONFIG, KERASJOB_*).
    command: tuple[str, ...] = ()
    #: Reproducible runs: TensorFlow op determinism and seeded, checkpointed random state.
    #: With it a disrupted run ends with the same weights as an undisturbed one.
    deterministic: bool = False
    #: Set for an elastic job (spec.elastic): the TF_CONFIG may hold fewer workers.
    elastic: ElasticConfig | None = None
    #: Which Keras runs the job (BACKENDS).
    backend: str = "tensorflow"
    #: None: the backend's own strategy (MultiWorkerMirroredStrategy, keras.distribution);
    #: one of STRATEGIES otherwise.
    strategy: str | None = None
    #: backend jax: the device mesh (ModelParallel); None = DataParallel (`mesh.py`).
    mesh: Mesh | None = None
    #: JAX devices each process has, where the job declares it (checked by the trainer).
    devices_per_process: int | None = None

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def log_interval(self) -> int:
        return self.log_every_steps or self.save_freq

    @property
    def runtime_key(self) -> str:
        """Which trainer runtime serves the job: the backend, and the strategy when set."""
        return self.backend if self.strategy is None else f"{self.backend}/{self.strategy}"


# camelCase key -> (field name, type). bool is excluded from int on purpose below.
_SCALARS: dict[str, tuple[str, type]] = {
    "model": ("model", str),
    "epochs": ("epochs", int),
    "stepsPerEpoch": ("steps_per_epoch", int),
    "batchSizePerReplica": ("batch_size_per_replica", int),
    "saveFreq": ("save_freq", int),
    "learningRate": ("learning_rate", float),
    "seed": ("seed", int),
    "collectiveTimeoutSeconds": ("collective_timeout_seconds", float),
    "stallTimeoutSeconds": ("stall_timeout_seconds", float),
    "logEverySteps": ("log_every_steps", int),
    "deterministic": ("deterministic", bool),
    "backend": ("backend", str),
    "strategy": ("strategy", str),
    "devicesPerProcess": ("devices_per_process", int),
}
_POSITIVE = (
    "epochs",
    "steps_per_epoch",
    "batch_size_per_replica",
    "save_freq",
    "learning_rate",
    "collective_timeout_seconds",
    "stall_timeout_seconds",
)


def _typed(key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be a bool, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(f"{key} must be a {kind.__name__}, got {value!r}")
    return value


def parse_dataset(raw: Any) -> DatasetConfig:
    if raw is None:
        return DatasetConfig()
    if isinstance(raw, str):  # shorthand: "mnist-sample"
        raw = {"source": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"dataset must be an object, got {raw!r}")
    source = raw.get("source", "mnist-sample")
    path = raw.get("path")
    fmt = raw.get("format")
    if source not in API_DATASET_SOURCES and source not in FILE_FORMATS:
        raise ConfigError(
            f"dataset.source {source!r} is unknown; expected one of "
            f"{', '.join(API_DATASET_SOURCES)}"
        )
    if path is not None and not isinstance(path, str):
        raise ConfigError(f"dataset.path must be a string, got {path!r}")
    if fmt is not None and fmt not in FILE_FORMATS:
        raise ConfigError(
            f"dataset.format {fmt!r} is unknown; expected one of {', '.join(FILE_FORMATS)}"
        )
    if source in ("mnist-sample", "synthetic"):
        return DatasetConfig(source=source)
    if not path:
        raise ConfigError(f"dataset.source {source!r} needs dataset.path")
    if source == "path":  # the format is explicit, else inferred as the API documents
        source = fmt or infer_format(path)
    return DatasetConfig(source=source, path=path)


def infer_format(path: str) -> str:
    """A dataset path's format when none is given: by its name (a directory of ArrayRecord
    files needs format arrayrecord)."""
    if path.endswith(".npz"):
        return "npz"
    return "arrayrecord" if path.endswith(".array_record") else "tfrecord"


def _check_dataset(config: TrainerConfig) -> None:
    if config.dataset.source == "arrayrecord" and config.backend != "jax":
        raise ConfigError(
            "dataset format arrayrecord is read by backend jax (Keras 3, through Grain); "
            "backend tensorflow reads npz or tfrecord"
        )


def parse_command(raw: Any) -> tuple[str, ...]:
    """spec.trainer.command: null or a non-empty list of non-empty strings."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) and a for a in raw):
        raise ConfigError(f"command must be a non-empty list of non-empty strings, got {raw!r}")
    return tuple(raw)


def parse_elastic(raw: Any) -> ElasticConfig | None:
    """{"preferredWorkers": n, "batchPolicy": "KeepGlobalBatch"} (null: not elastic)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"elastic must be an object, got {raw!r}")
    preferred = raw.get("preferredWorkers")
    if isinstance(preferred, bool) or not isinstance(preferred, int) or preferred < 1:
        raise ConfigError(f"elastic.preferredWorkers must be an int >= 1, got {preferred!r}")
    policy = raw.get("batchPolicy", BATCH_POLICIES[0])
    if policy not in BATCH_POLICIES:
        raise ConfigError(
            f"elastic.batchPolicy {policy!r} is unknown; expected one of "
            f"{', '.join(BATCH_POLICIES)}"
        )
    return ElasticConfig(preferred_workers=preferred, batch_policy=policy)


def parse_config(text: str | None) -> TrainerConfig:
    """Parse the JSON text of KERASJOB_TRAINER_CONFIG (None or empty = all defaults)."""
    return config_from(decode_config(text))


def decode_config(text: str | None) -> dict[str, Any]:
    """The JSON object of KERASJOB_TRAINER_CONFIG (None or empty: {}), as a user's model and
    dataset functions get it; ConfigError when it is not one."""
    if not text or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"trainer config is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError("trainer config must be a JSON object")
    return raw


def config_from(raw: Mapping[str, Any]) -> TrainerConfig:
    """The trainer configuration of its JSON object (`decode_config`), checked (ConfigError)."""
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "dataset":
            values["dataset"] = parse_dataset(value)
        elif key == "command":
            values["command"] = parse_command(value)
        elif key == "elastic":
            values["elastic"] = parse_elastic(value)
        elif key == "mesh":
            try:
                values["mesh"] = parse_mesh(value)
            except MeshError as e:
                raise ConfigError(str(e)) from None
        elif key in _SCALARS:
            name, kind = _SCALARS[key]
            if value is not None:
                values[name] = _typed(key, value, kind)
        else:
            # The operator may pass fields a newer API added; a typo should still be visible.
            print(
                f"kerasjob: warning: ignoring unknown trainer config key {key!r}", file=sys.stderr
            )
    config = TrainerConfig(**values)
    for name in _POSITIVE:
        if getattr(config, name) <= 0:
            camel = next(k for k, (n, _) in _SCALARS.items() if n == name)
            raise ConfigError(f"{camel} must be > 0, got {getattr(config, name)}")
    if config.log_every_steps < 0:
        raise ConfigError("logEverySteps must be >= 0")
    if config.backend not in BACKENDS:
        raise ConfigError(
            f"backend {config.backend!r} is unknown; expected one of {', '.join(BACKENDS)}"
        )
    _check_strategy(config)
    _check_dataset(config)
    validate_model_name(config.model)
    _check_mesh(config)
    return config


def _check_strategy(config: TrainerConfig) -> None:
    if config.strategy is None:
        return
    if config.strategy not in STRATEGIES:
        raise ConfigError(
            f"strategy {config.strategy!r} is unknown; expected one of {', '.join(STRATEGIES)}"
        )
    if config.backend != "tensorflow":
        raise ConfigError(f"strategy {config.strategy} needs backend tensorflow")


def _check_mesh(config: TrainerConfig) -> None:
    if config.devices_per_process is not None and config.devices_per_process < 1:
        raise ConfigError(f"devicesPerProcess must be >= 1, got {config.devices_per_process}")
    if config.mesh is None:
        return
    if config.backend != "jax":
        raise ConfigError(NEEDS_JAX)
    # The device checks need the processes: the trainer makes them once JAX is up.
    why = builtin_error(config.mesh) if shards_builtin(config.model, config.command) else None
    if why is not None:
        raise ConfigError(why)


def shards_builtin(model: str, command: Any) -> bool:
    """Whether the job's mesh shards a built-in model (the bundled trainer's; a command runs
    the user's own program and layout)."""
    return model in BUILTIN_MODELS and not command


def validate_model_name(model: str) -> None:
    """A built-in name or 'package.module:function'. Importability is checked later."""
    if model in BUILTIN_MODELS:
        return
    module, sep, func = model.partition(":")
    if (
        not sep
        or not module
        or not func.isidentifier()
        or not all(part.isidentifier() for part in module.split("."))
    ):
        raise ConfigError(
            f"model {model!r} is neither a built-in ({', '.join(BUILTIN_MODELS)}) "
            "nor 'package.module:function'"
        )


#: The defaults, for the API's documentation and CRD defaults.
DEFAULTS = TrainerConfig()
