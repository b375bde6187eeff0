"""Who a Keras 3 / JAX trainer process is: read from the variables the operator sets.

Pure Python, checked before JAX starts (a bad value exits 78 with one line). The operator
sets both spellings (`KERAS_DISTRIBUTION_*` for keras.distribution.initialize(), `JAX_*` for
jax.distributed.initialize()); they must agree. None of them set: one local process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from kerasjob_contract import Env
from kerasjob_contract.trainer_config import ConfigError


@dataclasses.dataclass(frozen=True)
class Identity:
    """Process `process_id` of `num_processes`; process 0 is the chief (the coordinator)."""

    process_id: int = 0
    num_processes: int = 1
    coordinator: str | None = None  # host:port of process 0; None for one local process

    @property
    def is_chief(self) -> bool:
        return self.process_id == 0

    @property
    def multi_process(self) -> bool:
        return self.num_processes > 1

    @property
    def index(self) -> int:
        return self.process_id

    @property
    def workers(self) -> int:
        return self.num_processes

    @property
    def name(self) -> str:
        """The goodput and audit files' name for this process (the tf path's role+index)."""
        return f"worker{self.process_id}"

    @property
    def coordinator_host_port(self) -> tuple[str, int] | None:
        if self.coordinator is None:
            return None
        host, _, port = self.coordinator.rpartition(":")
        return host, int(port)


LOCAL = Identity()


def _int(env: Mapping[str, str], names: tuple[Env, Env], what: str) -> int | None:
    values = {n.value: env[n.value].strip() for n in names if env.get(n.value, "").strip()}
    if not values:
        return None
    if len(set(values.values())) > 1:
        raise ConfigError(f"{' and '.join(values)} disagree: {values}")
    text = next(iter(values.values()))
    if not text.isdigit():
        raise ConfigError(
            f"{next(iter(values))} must be a non-negative integer ({what}), got {text!r}"
        )
    return int(text)


def _address(env: Mapping[str, str]) -> str | None:
    names = (Env.KERAS_JOB_ADDRESSES.value, Env.JAX_COORDINATOR_ADDRESS.value)
    # keras.distribution takes a comma-separated list whose first entry is the coordinator.
    values = {n: env[n].split(",")[0].strip() for n in names if env.get(n, "").strip()}
    if not values:
        return None
    if len(set(values.values())) > 1:
        raise ConfigError(f"{' and '.join(values)} name different coordinators: {values}")
    address = next(iter(values.values()))
    host, sep, port = address.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"{next(iter(values))} must be host:port, got {address!r}")
    return address


def parse_identity(env: Mapping[str, str] | None = None) -> Identity:
    """The identity in `env` (default: os.environ). Raises ConfigError when it cannot work."""
    env = os.environ if env is None else env
    count = _int(env, (Env.KERAS_NUM_PROCESSES, Env.JAX_NUM_PROCESSES), "processes")
    pid = _int(env, (Env.KERAS_PROCESS_ID, Env.JAX_PROCESS_ID), "this process's id")
    address = _address(env)
    if count is None and pid is None and address is None:
        return LOCAL
    if count is None or pid is None:
        raise ConfigError(
            "a multi-process job needs the number of processes and this "
            "process's id (KERAS_DISTRIBUTION_NUM_PROCESSES, "
            "KERAS_DISTRIBUTION_PROCESS_ID)"
        )
    if count < 1 or not 0 <= pid < count:
        raise ConfigError(f"process id {pid} is not in 0..{count - 1}")
    if count > 1 and address is None:
        raise ConfigError(
            "a multi-process job needs the coordinator's address "
            "(KERAS_DISTRIBUTION_JOB_ADDRESSES or JAX_COORDINATOR_ADDRESS)"
        )
    return Identity(process_id=pid, num_processes=count, coordinator=address)
