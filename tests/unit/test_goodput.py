"""operator/kerasjob/planner/goodput.py: the chief's goodput counters -> status figures, Events
and the CLI line (pure)."""

from __future__ import annotations

from kerasjob.api import Reason
from kerasjob.planner.goodput import describe, goodput_events, parse_goodput

# What the trainer's render_prometheus serves (tests/trainer/test_trainer_goodput.py).
TEXT = """# HELP kerasjob_step Optimizer steps done (global, across restarts).
# TYPE kerasjob_step gauge
kerasjob_step 340.0
# TYPE kerasjob_disruptions_total counter
kerasjob_disruptions_total 2.0
# TYPE kerasjob_lost_seconds_total counter
kerasjob_lost_seconds_total 25.5
# TYPE kerasjob_steps_redone_total counter
kerasjob_steps_redone_total 15.0
# TYPE kerasjob_productive_seconds_total counter
kerasjob_productive_seconds_total 100.0
# TYPE kerasjob_goodput_ratio gauge
kerasjob_goodput_ratio 0.7968
"""


def test_parse() -> None:
    assert parse_goodput(TEXT) == {
        "disruptions": 2,
        "lostSeconds": 25.5,
        "stepsRedone": 15,
        "productiveSeconds": 100.0,
        "goodput": 0.7968,
    }
    assert parse_goodput("kerasjob_disruptions_total 0.0\nkerasjob_step 3\n") is None
    assert parse_goodput("kerasjob_disruptions_total NaN\n") is None
    assert parse_goodput("") is None


def test_events_only_for_new_disruptions() -> None:
    new = parse_goodput(TEXT)
    assert new is not None
    one = {"disruptions": 1, "lostSeconds": 17.5, "stepsRedone": 15, "goodput": 0.8}
    assert goodput_events(one, new) == [
        (Reason.DISRUPTION_COST.value, "disruption 2 cost 8.0s (0 steps redone); goodput 79.7%")
    ]
    assert goodput_events(None, new)[0][1].startswith("disruptions 1-2 cost 25.5s (15 steps")
    assert goodput_events(new, new) == []


def test_describe() -> None:
    assert describe(None) == "goodput: no disruption so far"
    assert describe(parse_goodput(TEXT)) == (
        "goodput 79.7%: 100.0s productive, 25.5s lost to 2 disruptions (15 steps redone)"
    )
