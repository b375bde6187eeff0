"""What the chief leaves for users and the operator, the same for both runtimes: the progress
reporter (progress.json, /metrics) and the final model file."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import kerasjob_contract as contract
from kerasjob_trainer.shared.faults import say
from kerasjob_trainer.shared.metrics import ProgressReporter


def open_reporter(output_dir: str, metrics_port: int | None) -> ProgressReporter:
    """The chief's reporter; a busy port must not stop training (progress.json still works)."""
    try:
        return ProgressReporter(output_dir, metrics_port)
    except OSError as e:
        say(f"warning: cannot serve /metrics on port {metrics_port}: {e}")
        return ProgressReporter(output_dir, None)


def save_model(model: Any, output_dir: str, is_chief: bool) -> None:
    """Every process saves (tf-keras reads metric variables collectively; Keras 3 checks across
    processes that the values agree); only the chief keeps the file, written whole then
    renamed, so the evaluator and users never see a half-written model."""
    if not is_chief:
        with tempfile.TemporaryDirectory() as tmp:
            model.save(os.path.join(tmp, contract.MODEL_FILE))
        return
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, contract.MODEL_FILE)
    tmp = os.path.join(output_dir, f".tmp-{contract.MODEL_FILE}")
    model.save(tmp)
    os.replace(tmp, path)
    say(f"saved model to {path}")
