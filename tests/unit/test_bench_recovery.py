"""bench/recovery.py's reading of a container's log: the last incarnation of a trainer that
restarts in place, and the disruption kinds it cycles through."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "recovery", Path(__file__).resolve().parents[2] / "bench" / "recovery.py"
)
assert SPEC is not None and SPEC.loader is not None
recovery = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(recovery)

LOG = """kerasjob: incarnation 3 of worker-0 started (#1 in this container; log -)
kerasjob: step 100/600
kerasjob: incarnation 4 of worker-0 started (#2 in this container; restarted in place after \
exit 43: a peer was lost; log -)
kerasjob: resumed at step 100
"""


def test_the_last_incarnation_of_a_log() -> None:
    number, text = recovery.incarnation(LOG)
    assert number == 4
    assert text.startswith("kerasjob: incarnation 4") and "step 100/600" not in text
    assert recovery.RESUMED.search(text)
    assert recovery.incarnation("no banner\n") == (0, "no banner\n")


def test_kinds_cycle_and_unknown_ones_are_refused() -> None:
    assert recovery.kinds_of("sigterm,evict", 5) == [
        "sigterm",
        "evict",
        "sigterm",
        "evict",
        "sigterm",
    ]
    with pytest.raises(SystemExit, match="--kinds"):
        recovery.kinds_of("sigterm,reboot", 2)
