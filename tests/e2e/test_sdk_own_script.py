"""The SDK and the CLI on real training: examples/own-script.yaml (a user's own Keras script
under spec.trainer.command) submitted through `KerasJobClient`, every replica's log followed
while it trains, one worker evicted (SIGTERM: the group saves at one step, exits 42), the job
resumed at exactly that step and waited for to Succeeded with progress from the operator.
Every step is logged (logEverySteps 1), so the goodput the operator shows in status is checked
against the times the container runtime recorded for the trainer's lines (within 1 s)."""

from __future__ import annotations

import re
import statistics
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

import kerasjob_contract as contract
from kerasjob.cli import app as cli
from kerasjob.sdk import KerasJobClient, summarize
from kerasjob.sdk.logs import LogLine
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT, wait_for
from kerasjob_dev.synckube import pod_path

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

# Not the example's own name: a user may have applied examples/own-script.yaml in the same
# namespace, and its Pods may still be terminating (garbage collection).
NAME, CLAIM = "own-sdk", "own-ckpt"
# Longer than the example's 120 steps: those take ~10 s on a quiet machine, and the eviction
# (after step 30 and the first scraped progress) once came only after the last step.
EPOCHS, STEPS_PER_EPOCH = 3, 400
TOTAL = EPOCHS * STEPS_PER_EPOCH
STEP = re.compile(r"^\[own-sdk-worker-0\] kerasjob: step (\d+)/")
PREEMPTED = re.compile(r"^\[(own-sdk-worker-\d)\] kerasjob: preempted: state saved at step (\d+)")
RESUMED = re.compile(r"^\[(own-sdk-worker-\d)\] kerasjob: resumed at step (\d+)")
FINAL = re.compile(r"^\[own-sdk-worker-0\] kerasjob: final test_accuracy=([\d.]+) steps=(\d+)")
ANY_STEP = re.compile(r"^kerasjob: step (\d+)/")
NEW_PROCESS = re.compile(r"^kerasjob: (?:starting at step 0|resumed at step (\d+))")
DISRUPTION = re.compile(contract.LOG_DISRUPTION_RE)


def _matches(lines: list[str], regex: re.Pattern[str]) -> list[tuple[str, ...]]:
    return [m.groups() for ln in lines if (m := regex.match(ln))]


def _seconds(stamp: str) -> float:
    """An RFC 3339 log timestamp (nanoseconds, Z) as Unix seconds."""
    whole, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{frac or 0}")


def _generations(followed: list[LogLine], pod: str) -> list[list[tuple[int, float]]]:
    """One pod's (step, runtime time) per trainer process, processes with no step left out."""
    gens: list[list[tuple[int, float]]] = []
    for line in followed:
        if line.pod != pod:
            continue
        if NEW_PROCESS.match(line.text):
            gens.append([])
        elif (m := ANY_STEP.match(line.text)) and gens and line.time:
            gens[-1].append((int(m.group(1)), _seconds(line.time)))
    return [g for g in gens if g]


def check_goodput_against_log_times(followed: list[LogLine], costs: Any) -> str:
    """status.progress.goodput (the chief's ledger, scraped by the operator) against the
    times the container runtime recorded for every step line: per disruption, downtime =
    the chief's first step of the new process - the latest step of the old one (any worker),
    plus redone steps x the old processes' median step time; within 1 s in total."""
    chief, worker = (_generations(followed, f"{NAME}-worker-{i}") for i in (0, 1))
    assert len(chief) == len(worker) >= 2, (len(chief), len(worker))
    lost, redone = 0.0, 0
    for old_c, old_w, new_c in zip(chief, worker, chief[1:], strict=False):
        last = max(s for s, _ in old_c + old_w)
        at = max(t for s, t in old_c + old_w if s == last)
        resumed, first_at = new_c[0][0] - 1, new_c[0][1]
        step_s = statistics.median(
            (g[-1][1] - g[0][1]) / (g[-1][0] - g[0][0])
            for g in (old_c, old_w)
            if g[-1][0] > g[0][0]
        )
        lost += first_at - at + (last - resumed) * step_s
        redone += last - resumed
    ledger = [
        m.groups()
        for ln in followed
        if ln.pod == f"{NAME}-worker-0" and (m := DISRUPTION.match(ln.text))
    ]
    assert costs is not None and costs.disruptions == len(chief) - 1 == len(ledger), costs
    assert costs.steps_redone == redone, (costs, redone)
    assert abs(costs.lost_seconds - lost) < 1.0, (costs, lost)
    # The span ends at the last step: the chief's termination message is the final word.
    first, last_logged = chief[0][0][1], chief[-1][-1][1]
    span = costs.productive_seconds + costs.lost_seconds
    assert abs(span - (last_logged - first)) < 1.0, (costs, first, last_logged)
    assert costs.goodput == pytest.approx(costs.productive_seconds / span, abs=1e-3)
    return (
        f"goodput in status: {costs.lost_seconds:.2f} s lost "
        f"(runtime log times: {lost:.2f} s), {costs.productive_seconds:.1f} s productive "
        f"(log times: {last_logged - first - lost:.1f} s), "
        f"{costs.disruptions} disruption(s), {costs.steps_redone} steps redone"
    )


def test_own_script_trains_through_an_eviction_via_the_sdk(
    deployment: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not deployment.cluster.local:
        pytest.skip("binds the checkpoint claim to a hostPath of the local real node")
    kj, ns = deployment.kube, deployment.namespace
    pv = localdeploy.shared_claim(kj, ns, CLAIM, tmp_path / "ckpt")
    docs = [
        d for d in yaml.safe_load_all((REPO_ROOT / "examples" / "own-script.yaml").read_text()) if d
    ]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (job,) = [d for d in docs if d["kind"] == "KerasJob"]
    job["spec"]["checkpoint"]["volume"]["persistentVolumeClaim"]["claimName"] = CLAIM
    job["metadata"]["name"] = NAME
    command = job["spec"]["trainer"]["command"]
    job["spec"]["trainer"]["command"] = [
        *[a for a in command if not a.startswith(("--epochs=", "--steps-per-epoch="))],
        f"--epochs={EPOCHS}",
        f"--steps-per-epoch={STEPS_PER_EPOCH}",
    ]
    job["spec"]["trainer"]["logEverySteps"] = 1  # every step's time, for the goodput check
    jobs = KerasJobClient(ns, kubeconfig=str(deployment.cluster.kubeconfig))
    followed: list[LogLine] = []
    lines: list[str] = []
    try:
        kj.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body=cm)
        jobs.create(job)

        def follow() -> None:
            for line in jobs.logs(NAME, all_replicas=True, follow=True):
                followed.append(line)
                lines.append(str(line))

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        wait_for(
            lambda: any(int(s) >= 30 for (s,) in _matches(list(lines), STEP)),
            timeout=300,
            interval=0.5,
            what="the chief past step 30 (followed log)",
        )

        # status.progress is reported (the operator scrapes the chief every few seconds);
        # asked before the eviction: after it the resumed run may end between two scrapes.
        def progress_step() -> int | None:
            status = jobs.get(NAME).status
            prog = status.progress if status is not None else None
            return prog.step if prog is not None and prog.step else None

        reported = wait_for(progress_step, timeout=60, interval=0.5, what="status.progress")
        before = max(int(s) for (s,) in _matches(list(lines), STEP))
        assert before < TOTAL - 200, f"training nearly over (step {before}) before the eviction"
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": f"{NAME}-worker-1", "namespace": ns},
        }
        kj.request("POST", pod_path(ns, f"{NAME}-worker-1", "eviction"), body=eviction)

        seen: list[Any] = []
        done = jobs.wait(NAME, timeout=480, callback=lambda j: seen.append(summarize(j)))
        # The finished Pods' whole logs: a followed stream can miss the last lines of an
        # evicted Pod on a loaded machine (its object, and its log, go with the eviction).
        after = [str(line) for line in jobs.logs(NAME, all_replicas=True)]
        follower.join(120)
        assert not follower.is_alive(), "log follow did not end with the job"
        # The CLI on the finished job: every replica's log, prefixed; the wide table.
        kubeconfig = str(deployment.cluster.kubeconfig)
        capsys.readouterr()
        assert (
            cli.main(["--kubeconfig", kubeconfig, "logs", NAME, "--all", "-n", ns, "--tail", "3"])
            == 0
        )
        out = capsys.readouterr().out
        assert f"[{NAME}-worker-0] kerasjob: " in out and f"[{NAME}-worker-1] " in out
        assert cli.main(["--kubeconfig", kubeconfig, "get", NAME, "-n", ns, "-o", "wide"]) == 0
        assert "Succeeded" in capsys.readouterr().out
    except BaseException:
        print("\n".join(lines[-80:]), deployment.operator_logs(), sep="\n")
        raise
    finally:
        kj.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/{cm['metadata']['name']}")
        jobs.delete(NAME, wait=True, timeout=120)
        kj.request("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}")
        localdeploy.delete_volume(kj, pv)

    resumed = dict(_matches([*lines, *after], RESUMED))
    assert set(resumed) == {f"{NAME}-worker-0", f"{NAME}-worker-1"}, after[-60:]
    (step,) = set(resumed.values())  # both resumed at one agreed step
    saved = dict(_matches(lines, PREEMPTED))  # as far as the followed streams caught them
    assert all(s == step for s in saved.values()), (saved, resumed)  # nothing redone
    costs = done.status.progress.goodput if done.status.progress else None
    assert costs is not None and costs.steps_redone == 0, costs  # the chief's own account
    assert done.status.progress.step == TOTAL  # its termination message: the exact end
    print(check_goodput_against_log_times(followed, costs))
    (final,) = _matches(lines, FINAL)
    assert int(final[1]) == TOTAL and float(final[0]) > 0.5
    restarts = done.status.restarts
    assert restarts.disruptions >= 1 and restarts.failures == 0
    assert reported > 0 and seen  # progress reported; wait called back on every change
    print(f"own-script: preempted at step {step}, resumed at {step}; restarts {restarts}")
