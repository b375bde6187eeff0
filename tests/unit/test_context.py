"""A trainer process's context (kerasjob_trainer.core.context): the checkpoint directory is
made and must be writable, else a configuration error (exit 78) naming the path and the
cause. The whole trainer process on such a directory: tests/trainer/test_trainer_training.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from kerasjob_contract.trainer_config import ConfigError
from kerasjob_trainer.core import context


def test_a_new_checkpoint_directory_is_made_and_left_clean(tmp_path: Path) -> None:
    ckpt = tmp_path / "ns" / "job" / "uid"
    context.check_writable(str(ckpt))
    assert ckpt.is_dir() and list(ckpt.iterdir()) == []


def test_a_read_only_volume_is_a_configuration_error_naming_path_and_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EROFS from the kernel (a volume mounted read-only; root cannot write there either),
    injected at the call that creates the probe file."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    real_open = os.open

    def read_only(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if str(path).startswith(str(ckpt)) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(ConfigError) as e:
        context.check_writable(str(ckpt))
    message = str(e.value)
    assert message.startswith(f"checkpoint directory {ckpt} cannot be written: [Errno 30] "), (
        message
    )
    assert "Read-only file system" in message and "mounted read-only" in message, message
    assert "\n" not in message


def test_a_path_through_a_file_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    ckpt = tmp_path / "file" / "ckpt"
    with pytest.raises(ConfigError, match=r"checkpoint directory .*/file/ckpt cannot be written: "):
        context.check_writable(str(ckpt))


def test_the_trainer_configuration_is_parsed_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`core.main` picks the runtime by the configuration, the runtime's context takes the
    same parse on: one json.loads, one typed parse, whatever reads it."""
    calls: list[str] = []
    decode, parse = context.decode_config, context.config_from

    def counted_decode(text: str | None) -> dict[str, object]:
        calls.append("decode")
        return decode(text)

    def counted_parse(raw: dict[str, object]) -> object:
        calls.append("parse")
        return parse(raw)

    monkeypatch.setattr(context, "decode_config", counted_decode)
    monkeypatch.setattr(context, "config_from", counted_parse)
    text = '{"epochs": 2, "modelArgs": {"width": 8}}'
    monkeypatch.setenv("KERASJOB_TRAINER_CONFIG", text)
    argv = ["--checkpoint-dir", str(tmp_path / "ckpt")]
    assert context.runtime_key_of(argv) == "tensorflow"
    ctx = context.build_context(argv, lambda args: "me", check_model=False)
    assert calls == ["decode", "parse"]
    assert ctx.config.epochs == 2 and ctx.raw_config == {"epochs": 2, "modelArgs": {"width": 8}}
    monkeypatch.setenv("KERASJOB_TRAINER_CONFIG", '{"epochs": 5}')  # another text: read anew
    assert context.build_context(argv, lambda args: "me", check_model=False).config.epochs == 5
    assert calls == ["decode", "parse"] * 2
