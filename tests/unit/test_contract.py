"""The contract's log-line helpers (kerasjob_contract): the line of an exit 78 and its reason,
found in a termination message whichever form it has, and the termination log's path."""

from __future__ import annotations

import kerasjob_contract as contract
from kerasjob_contract import (
    INVALID_CONFIG_REASON_CHARS,
    LOG_INVALID_CONFIG,
    invalid_config_line,
    invalid_config_reason,
)

REASON = "mesh batch=1 x model=4 needs 4 devices, but the job has 1 process(es) x 1 device(s) = 1"

#: What the chief leaves (its last /metrics samples), then the supervisor's line.
METRICS_THEN_LINE = (
    "kerasjob_epoch 0\nkerasjob_step 0\nkerasjob_loss NaN\n"
    f"kerasjob_disruptions_total 0\n{LOG_INVALID_CONFIG}{REASON}\n"
)
#: The tail of the container's log (terminationMessagePolicy FallbackToLogsOnError).
LOG_TAIL = (
    "kerasjob: incarnation 1 of worker-0 started (#1 in this container; log -)\n"
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    f"{LOG_INVALID_CONFIG}{REASON}\n"
    "I0000 00:00:1796648327.672493    6924 port.cc:153] oneDNN custom operations are on.\n"
)


def test_the_line_is_the_prefix_and_the_reason_on_one_line() -> None:
    assert LOG_INVALID_CONFIG == "kerasjob: invalid configuration: "
    assert invalid_config_line(REASON) == f"kerasjob: invalid configuration: {REASON}"
    assert invalid_config_line("two\nlines  here\n") == f"{LOG_INVALID_CONFIG}two lines here"


def test_the_reason_is_found_after_metrics_and_in_a_log_tail() -> None:
    assert invalid_config_reason(METRICS_THEN_LINE) == REASON
    assert invalid_config_reason(LOG_TAIL) == REASON
    # a prefix inside a line (a logger's own prefix before ours), trailing blanks stripped
    assert invalid_config_reason(f"E1129 x.py:3] {LOG_INVALID_CONFIG}bad port  \r\n") == "bad port"


def test_the_last_line_with_a_reason_wins() -> None:
    text = f"{LOG_INVALID_CONFIG}first\nother\n{LOG_INVALID_CONFIG}second\n{LOG_INVALID_CONFIG}\n"
    assert invalid_config_reason(text) == "second"


def test_no_line_no_reason() -> None:
    assert invalid_config_reason("") is None
    assert invalid_config_reason("kerasjob_step 12\nkerasjob_loss 0.3\n") is None
    assert invalid_config_reason("kerasjob: invalid configuration:\n") is None


def test_a_long_reason_is_cut() -> None:
    reason = invalid_config_reason(LOG_INVALID_CONFIG + "x" * 5000)
    assert reason == "x" * INVALID_CONFIG_REASON_CHARS


def test_the_termination_log_is_the_kubelets_default_unless_the_environment_says() -> None:
    assert contract.termination_log({}) == contract.TERMINATION_LOG == "/dev/termination-log"
    assert contract.termination_log({"KERASJOB_TERMINATION_LOG": "/tmp/t"}) == "/tmp/t"
    assert contract.termination_log({"KERASJOB_TERMINATION_LOG": ""}) == contract.TERMINATION_LOG
