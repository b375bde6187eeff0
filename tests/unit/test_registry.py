"""The trainer's registry (kerasjob_trainer.core.registry): every registered runtime loads and
implements the `Runtime` protocol; one that does not is refused when it is loaded, with what
it lacks named."""

from __future__ import annotations

import re
import sys
import types

import pytest

from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core import registry


@pytest.mark.parametrize("key", sorted(registry.RUNTIMES))
def test_every_registered_runtime_implements_the_protocol(key: str) -> None:
    runtime = registry.runtime_for(key)
    assert runtime.backend == key.split("/")[0]
    assert registry.ATTRIBUTES == ("backend", "watch")
    assert set(registry.METHODS) == {"check_image", "context", "on_sigterm", "train", "exit_code"}


class _Partial:
    backend = "tensorflow"
    watch: dict[str, re.Pattern[bytes]] = {}
    on_sigterm = None  # not callable

    def check_image(self) -> None: ...

    def context(self) -> None: ...


def test_a_runtime_lacking_part_of_the_protocol_is_refused_naming_what_it_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(TypeError) as e:
        registry.check_runtime("tensorflow", _Partial(), "mod.RUNTIME")
    assert str(e.value) == (
        "runtime 'tensorflow' (mod.RUNTIME) does not implement core.runtime.Runtime: "
        "train, exit_code, on_sigterm missing or not callable"
    )
    with pytest.raises(TypeError, match=r"runtime 'jax' \(mod.RUNTIME\) has backend 'tensorflow'"):
        registry.check_runtime("jax", registry.runtime_for("tensorflow"), "mod.RUNTIME")
    module = types.ModuleType("kerasjob_trainer_no_runtime")
    monkeypatch.setitem(registry.RUNTIMES, "custom", module.__name__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with pytest.raises(TypeError, match=r"kerasjob_trainer_no_runtime.RUNTIME does not exist"):
        registry.runtime_for("custom")


def test_an_unknown_key_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="backend 'torch' has no runtime in this trainer"):
        registry.runtime_for("torch")
