"""The restart policy: classification of Pod outcomes and the job's verdict."""

from __future__ import annotations

import pytest

from kerasjob.api import Reason
from kerasjob.planner import restart_policy as rp
from kerasjob.planner.podview import PodView, Termination


def pod(**kw: object) -> PodView:
    base: dict[str, object] = dict(
        name="j-worker-1",
        namespace="ns",
        uid="u1",
        job_name="j",
        owner_uid="job",
        role="worker",
        index=1,
    )
    base.update(kw)
    return PodView(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (0, "Completed", rp.Success()),
        (1, "Error", rp.Failure("Error", 1)),
        (2, "Error", rp.Failure("Error", 2)),
        (42, "Error", rp.Disruption("Preempted", 42)),
        (43, "Error", rp.Disruption("PeerLost", 43)),
        (78, "Error", rp.Permanent(Reason.INVALID_CONFIG.value, 78)),
        (137, "Error", rp.Disruption("Killed", 137)),
        (143, "Error", rp.Disruption("Terminated", 143)),
        (137, "OOMKilled", rp.Failure("OOMKilled", 137)),
        (139, "Error", rp.Failure("Error", 139)),
    ],
)
def test_classify_exit(code: int, reason: str, expected: rp.Outcome) -> None:
    assert rp.classify_exit(Termination(code, reason)) == expected


def test_finished_pod_disruption_condition_wins_over_exit_code() -> None:
    p = pod(
        phase="Failed",
        disruption_reason="EvictionByEvictionAPI",
        termination=Termination(1, "Error"),
    )
    assert rp.classify_finished(p) == rp.Disruption("EvictionByEvictionAPI", 1)


def test_finished_pod_evicted_by_kubelet_is_a_disruption() -> None:
    assert rp.classify_finished(pod(phase="Failed", status_reason="Evicted")) == rp.Disruption(
        "Evicted"
    )


def test_finished_pod_without_information_is_a_failure() -> None:
    assert isinstance(rp.classify_finished(pod(phase="Failed")), rp.Failure)


def test_succeeded_pod() -> None:
    assert rp.classify_finished(pod(phase="Succeeded")) == rp.Success()


def test_in_place_restart_uses_last_state() -> None:
    p = pod(phase="Running", restart_count=1, last_termination=Termination(43, "Error"))
    assert rp.classify_in_place_restart(p) == rp.Disruption("PeerLost", 43)
    assert isinstance(rp.classify_in_place_restart(pod(restart_count=1)), rp.Failure)


def test_lost_pod() -> None:
    assert rp.classify_lost(None) == rp.Disruption("PodDeleted")
    assert rp.classify_lost(pod(disruption_reason="PreemptionByScheduler")) == rp.Disruption(
        "PreemptionByScheduler"
    )


def decide(policy: str, outcome: rp.Outcome, failures: int = 0, limit: int = 2) -> rp.Verdict:
    return rp.decide(policy, outcome, pod="p", failures_before=failures, backoff_limit=limit)


@pytest.mark.parametrize("policy", ["OnFailure", "Never", "ExitCode"])
def test_disruptions_never_fail_and_never_count_as_failures(policy: str) -> None:
    v = decide(policy, rp.Disruption("Evicted"), failures=100, limit=0)
    assert not v.fail and v.count_disruption and not v.count_failure


@pytest.mark.parametrize("policy", ["OnFailure", "Never", "ExitCode"])
def test_permanent_fails_at_once(policy: str) -> None:
    v = decide(policy, rp.Permanent(Reason.INVALID_CONFIG.value, 78))
    assert v.fail and v.reason == Reason.INVALID_CONFIG.value


#: What an exit-78 container leaves: the chief's last metrics, then the supervisor's line.
REJECTED = (
    "kerasjob_epoch 0\nkerasjob_step 0\nkerasjob: invalid configuration: mesh batch=1 x "
    "model=4 needs 4 devices, but the job has 1 process(es) x 1 device(s) = 1\n"
)
WHY = "mesh batch=1 x model=4 needs 4 devices, but the job has 1 process(es) x 1 device(s) = 1"


def test_an_exit_78_carries_the_trainers_reason_into_the_verdict() -> None:
    outcome = rp.classify_exit(Termination(78, "Error", message=REJECTED))
    assert outcome == rp.Permanent(Reason.INVALID_CONFIG.value, 78, cause=WHY)
    v = decide("OnFailure", outcome)
    assert v.fail and v.reason == Reason.INVALID_CONFIG.value and v.count_failure
    assert v.message == f"Pod p exited with 78: invalid configuration: {WHY}; retrying cannot help"
    # the same from the tail of the container's log (FallbackToLogsOnError), in place too
    tail = f"kerasjob: incarnation 1 of worker-1 started\nkerasjob: invalid configuration: {WHY}"
    restarted = pod(restart_count=1, last_termination=Termination(78, message=tail))
    assert rp.classify_in_place_restart(restarted) == outcome


def test_an_exit_78_without_a_reason_says_so_as_before() -> None:
    outcome = rp.classify_exit(Termination(78, "Error", message="kerasjob_step 3\n"))
    assert outcome == rp.Permanent(Reason.INVALID_CONFIG.value, 78)
    assert decide("Never", outcome).message == (
        "Pod p exited with 78: the trainer rejected its configuration; retrying cannot help"
    )


def test_on_failure_survives_exactly_backoff_limit_failures() -> None:
    assert not decide("OnFailure", rp.Failure("Error", 1), failures=0).fail
    assert not decide("OnFailure", rp.Failure("Error", 1), failures=1).fail
    v = decide("OnFailure", rp.Failure("Error", 1), failures=2)
    assert v.fail and v.reason == Reason.BACKOFF_LIMIT_EXCEEDED.value and v.count_failure


def test_never_fails_on_first_failure() -> None:
    v = decide("Never", rp.Failure("Error", 1), limit=6)
    assert v.fail and v.reason == Reason.POD_FAILED.value


def test_exit_code_policy() -> None:
    assert decide("ExitCode", rp.Failure("Error", 1)).reason == Reason.NON_RETRYABLE_EXIT_CODE.value
    v = decide("ExitCode", rp.Failure("Error", 139))
    assert not v.fail and v.count_failure
    assert decide("ExitCode", rp.Failure("Error", 139), failures=2).reason == (
        Reason.BACKOFF_LIMIT_EXCEEDED.value
    )


def test_success_counts_nothing() -> None:
    v = decide("OnFailure", rp.Success())
    assert v == rp.Verdict(fail=False)


def test_a_pod_pinned_to_a_node_that_does_not_exist_fails_the_job_naming_it() -> None:
    from dataclasses import replace

    from kerasjob.planner.restart_policy import DELETION_BY_POD_GC
    from kerasjob_dev.testing.builders import NOW, job, pod, run

    j = job(2)
    pinned = dict(phase="Pending", ready=False, node_name="no-such-node")
    s = run(j, {}, [pod(0, **pinned), pod(1, **pinned)]).status
    # The Pod GC marks it Failed (DisruptionTarget DeletionByPodGC) and deletes it.
    gone = pod(0, **{**pinned, "phase": "Failed", "disruption_reason": DELETION_BY_POD_GC})
    p = run(j, s, [gone, pod(1, **pinned)], NOW)
    assert p.status["phase"] == "Failed"
    failed = next(c for c in p.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "NodeNotFound"
    assert failed["message"] == (
        "Pod j-worker-0 names node 'no-such-node' (spec.nodeName), which does not exist: "
        "the Pod garbage collector deleted it; retrying cannot help"
    )
    # A node the scheduler placed it on, gone since: a disruption, as before.
    placed = replace(gone, scheduled_since=NOW)
    p = run(j, s, [placed, pod(1, **pinned)], NOW)
    assert p.status["phase"] != "Failed" and p.status["restarts"]["disruptions"] == 1
