"""The `kerasjob` command line."""

from __future__ import annotations

from kerasjob import cli


def test_status_summary() -> None:
    obj = {
        "metadata": {"name": "mnist"},
        "status": {
            "phase": "Running",
            "restarts": {"disruptions": 2, "failures": 1},
            "progress": {"step": 340, "totalSteps": 600, "loss": 0.1234567},
        },
    }
    assert cli._summary(obj) == {
        "name": "mnist",
        "phase": "Running",
        "disruptions": 2,
        "failures": 1,
        "progress": "step 340/600 loss 0.1235",
    }
    assert cli._summary({"metadata": {"name": "x"}})["progress"] == "-"


def test_run_flags() -> None:
    args = cli.parser().parse_args(
        ["run", "-n", "a-*", "-n", "b", "--metrics-port", "9090", "--workers", "4"]
    )
    assert args.namespace == ["a-*", "b"] and args.metrics_port == 9090 and args.workers == 4
