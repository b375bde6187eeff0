"""A trainer process's context, from the environment the operator sets or from flags: what
every runtime shares (the flags, the config, the checkpoint and output directories, the
metrics port, the user's command), with the runtime's identity in it. Pure: everything
here runs before TensorFlow or JAX is imported; a bad configuration raises ConfigError
(exit 78 in `core.main`)."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from kerasjob_contract import BACKUP_SUBDIR, DEFAULT_OUTPUT_SUBDIR, Env
from kerasjob_contract.trainer_config import (
    BUILTIN_MODELS,
    ConfigError,
    TrainerConfig,
    config_from,
    decode_config,
)
from kerasjob_trainer.shared.config import validate_dataset_files

Who = TypeVar("Who")


@dataclasses.dataclass(frozen=True)
class Context(Generic[Who]):
    """A trainer process's context: the parsed configuration and its places, and `identity`,
    who this process is, as its runtime reads it (TF_CONFIG, KERAS_DISTRIBUTION_*, ...)."""

    config: TrainerConfig
    raw_config: dict[str, Any]
    identity: Who
    checkpoint_dir: str
    output_dir: str
    metrics_port: int | None

    @property
    def backup_dir(self) -> str:
        return os.path.join(self.checkpoint_dir, BACKUP_SUBDIR)


DEFAULT_CHECKPOINT_DIR = "kerasjob-checkpoints"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kerasjob-trainer",
        description="Distributed Keras training that survives preemption. "
        "Flags override the KERASJOB_* / TF_CONFIG environment variables.",
    )
    p.add_argument("--config", help=f"trainer config JSON (default: ${Env.TRAINER_CONFIG.value})")
    p.add_argument("--tf-config", help="TF_CONFIG JSON (default: $TF_CONFIG)")
    p.add_argument(
        "--checkpoint-dir",
        help=f"shared checkpoint dir (default: ${Env.CHECKPOINT_DIR.value} or "
        f"./{DEFAULT_CHECKPOINT_DIR})",
    )
    p.add_argument(
        "--output-dir",
        help=f"model/logs/progress dir (default: ${Env.OUTPUT_DIR.value} or "
        "<checkpoint-dir>/output)",
    )
    p.add_argument(
        "--metrics-port",
        help=f"serve /metrics here; 0 = off (default: ${Env.METRICS_PORT.value} or off)",
    )
    return p


def metrics_port(text: str | None) -> int | None:
    if text is None or text.strip() in ("", "0"):
        return None
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"metrics port must be 0..65535, got {text!r}")
    return int(text)


def build_context(
    argv: list[str] | None,
    identity: Callable[[argparse.Namespace], Who],
    *,
    check_model: bool = True,
    check: Callable[[TrainerConfig], None] | None = None,
) -> Context[Who]:
    """The context from flags and the environment, checked (ConfigError: exit 78): the
    config, `identity(args)` (the runtime's reading of who this process is), the places
    (the checkpoint directory made and writable), the dataset's files, the runtime's
    `check` of the config and, when asked, the user's model function. A user's own
    command reads its own data and builds its own model."""
    args = parser().parse_args(argv)
    env = os.environ
    loaded = load_config(config_text(args, env))
    config = loaded.config
    who = identity(args)
    checkpoint_dir, output_dir, port = places(args, env)
    check_writable(checkpoint_dir)
    if not config.command:
        validate_dataset_files(config.dataset)
        if check is not None:
            check(config)
        if check_model:
            check_user_model(config)
    return Context(config, loaded.raw, who, checkpoint_dir, output_dir, port)


def check_writable(checkpoint_dir: str) -> None:
    """The checkpoint directory exists (made if need be) and a file can be written there:
    every process keeps its backups, goodput records and logs in it, so one that cannot is a
    configuration error (exit 78 at once, naming the path and the cause: a volume mounted
    read-only, a path through a file), not a failure retried until backoffLimit."""
    try:
        os.makedirs(checkpoint_dir, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".kerasjob-write-check-", dir=checkpoint_dir)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        hint = " (spec.checkpoint.volume is mounted read-only)" if e.errno == errno.EROFS else ""
        raise ConfigError(
            f"checkpoint directory {checkpoint_dir} cannot be written: {e}{hint}; every "
            "process keeps its backups and logs there"
        ) from None


def check_command(command: tuple[str, ...]) -> None:
    """The user's program exists (ConfigError, exit 78, when it cannot run)."""
    program = command[0]
    if not (shutil.which(program) or (os.path.sep in program and os.access(program, os.X_OK))):
        raise ConfigError(f"command {program!r} is not an executable in the image")
    for arg in command[1:]:
        if arg.endswith(".py") and arg.startswith("/") and not os.path.isfile(arg):
            raise ConfigError(f"command: script {arg!r} does not exist (is its volume mounted?)")


def config_text(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The trainer config's JSON text: --config, else KERASJOB_TRAINER_CONFIG."""
    return args.config if args.config is not None else env.get(Env.TRAINER_CONFIG.value)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The trainer configuration as this process read it: its text, its JSON object (what a
    user's model and dataset functions get) and its fields."""

    text: str | None
    raw: dict[str, Any]
    config: TrainerConfig


#: This process's configuration, once read (`load_config`).
_LOADED: list[Loaded] = []


def load_config(text: str | None) -> Loaded:
    """The configuration of `text`, parsed once per process: `core.main` picks the runtime
    by it (`runtime_key_of`) and the runtime's context takes it on (the same text: the same
    `Loaded`, no second parse)."""
    if not _LOADED or _LOADED[0].text != text:
        raw = decode_config(text)
        _LOADED[:] = [Loaded(text, raw, config_from(raw))]
    return _LOADED[0]


def places(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[str, str, int | None]:
    """(checkpoint dir, output dir, metrics port), absolute, from flags or the environment."""
    checkpoint_dir = (
        args.checkpoint_dir or env.get(Env.CHECKPOINT_DIR.value) or DEFAULT_CHECKPOINT_DIR
    )
    output_dir = (
        args.output_dir
        or env.get(Env.OUTPUT_DIR.value)
        or os.path.join(checkpoint_dir, DEFAULT_OUTPUT_SUBDIR)
    )
    port = metrics_port(
        args.metrics_port if args.metrics_port is not None else env.get(Env.METRICS_PORT.value)
    )
    return os.path.abspath(checkpoint_dir), os.path.abspath(output_dir), port


def check_user_model(config: TrainerConfig) -> None:
    """A user model function must be importable (a missing module is a config error)."""
    if config.model not in BUILTIN_MODELS:
        from kerasjob_trainer.shared.models import load_user_function

        load_user_function(config.model)


def runtime_key_of(argv: list[str] | None) -> str:
    """The registry key of the job's runtime from the config (flag or environment): its
    backend, and its strategy when one is set (`TrainerConfig.runtime_key`)."""
    args, _ = parser().parse_known_args(argv)
    return load_config(config_text(args, os.environ)).config.runtime_key
