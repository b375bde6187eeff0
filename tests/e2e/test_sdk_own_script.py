"""The SDK and the CLI on real training: examples/own-script.yaml (a user's own Keras script
under spec.trainer.command) submitted through `KerasJobClient`, every replica's log followed
while it trains, one worker evicted (SIGTERM: the group saves at one step, exits 42), the job
resumed at exactly that step and waited for to Succeeded with progress from the operator."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob import cli
from kerasjob.sdk import KerasJobClient, summarize
from kerasjob_dev import localdeploy
from kerasjob_dev.cluster import REPO_ROOT, wait_for
from kerasjob_dev.synckube import pod_path

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.slow]

# Not the example's own name: test_examples_train runs examples/own-script.yaml in the same
# namespace just before, and its Pods may still be terminating (garbage collection).
NAME, CLAIM = "own-sdk", "own-ckpt"
# Longer than the example's 120 steps: those take ~10 s on a quiet machine, and the eviction
# (after step 30 and the first scraped progress) once came only after the last step.
EPOCHS, STEPS_PER_EPOCH = 3, 400
TOTAL = EPOCHS * STEPS_PER_EPOCH
STEP = re.compile(r"^\[own-sdk-worker-0\] kerasjob: step (\d+)/")
PREEMPTED = re.compile(
    r"^\[(own-sdk-worker-\d)\] kerasjob: preempted: state saved at step (\d+)")
RESUMED = re.compile(r"^\[(own-sdk-worker-\d)\] kerasjob: resumed at step (\d+)")
FINAL = re.compile(
    r"^\[own-sdk-worker-0\] kerasjob: final test_accuracy=([\d.]+) steps=(\d+)")


def _matches(lines: list[str], regex: re.Pattern[str]) -> list[tuple[str, ...]]:
    return [m.groups() for ln in lines if (m := regex.match(ln))]


def test_own_script_trains_through_an_eviction_via_the_sdk(
    deployment: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not deployment.cluster.local:
        pytest.skip("binds the checkpoint claim to a hostPath of the local real node")
    kj, ns = deployment.kube, deployment.namespace
    pv = localdeploy.shared_claim(kj, ns, CLAIM, tmp_path / "ckpt")
    docs = [d for d in yaml.safe_load_all((REPO_ROOT / "examples" / "own-script.yaml")
                                          .read_text()) if d]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (job,) = [d for d in docs if d["kind"] == "KerasJob"]
    job["spec"]["checkpoint"]["volume"]["persistentVolumeClaim"]["claimName"] = CLAIM
    job["metadata"]["name"] = NAME
    command = job["spec"]["trainer"]["command"]
    job["spec"]["trainer"]["command"] = [
        *[a for a in command if not a.startswith(("--epochs=", "--steps-per-epoch="))],
        f"--epochs={EPOCHS}", f"--steps-per-epoch={STEPS_PER_EPOCH}"]
    jobs = KerasJobClient(ns, kubeconfig=str(deployment.cluster.kubeconfig))
    lines: list[str] = []
    try:
        kj.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body=cm)
        jobs.create(job)

        def follow() -> None:
            lines.extend(str(line) for line in jobs.logs(NAME, all_replicas=True, follow=True))

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        wait_for(lambda: any(int(s) >= 30 for (s,) in _matches(list(lines), STEP)),
                 timeout=300, interval=0.5, what="the chief past step 30 (followed log)")
        # status.progress is reported (the operator scrapes the chief every few seconds);
        # asked before the eviction: after it the resumed run may end between two scrapes.
        def progress_step() -> int | None:
            status = jobs.get(NAME).status
            prog = status.progress if status is not None else None
            return prog.step if prog is not None and prog.step else None

        reported = wait_for(progress_step, timeout=60, interval=0.5, what="status.progress")
        before = max(int(s) for (s,) in _matches(list(lines), STEP))
        assert before < TOTAL - 200, f"training nearly over (step {before}) before the eviction"
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": f"{NAME}-worker-1", "namespace": ns}}
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
        assert cli.main(["--kubeconfig", kubeconfig, "logs", NAME, "--all", "-n", ns,
                         "--tail", "3"]) == 0
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
    assert costs is None or costs.steps_redone == 0, costs  # the chief's own account
    (final,) = _matches(lines, FINAL)
    assert int(final[1]) == TOTAL and float(final[0]) > 0.5
    restarts = done.status.restarts
    assert restarts.disruptions >= 1 and restarts.failures == 0
    assert reported > 0 and seen  # progress reported; wait called back on every change
    print(f"own-script: preempted at step {step}, resumed at {step}; restarts {restarts}")
