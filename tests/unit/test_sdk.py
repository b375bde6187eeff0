"""The SDK's pure parts: error mapping, loading jobs, summaries, function jobs, logs merge,
and the CLI's offline behaviour (parsing, completion, one-line errors)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kerasjob.api import KerasJob
from kerasjob.cli import app as cli
from kerasjob.cli.args import completion_script
from kerasjob.sdk import errors, load_job, summarize
from kerasjob.sdk.client import KerasJobClient
from kerasjob.sdk.function import MODULE, function_job, function_source
from kerasjob.sdk.logs import LogLine, interleave
from kerasjob_dev.cluster import REPO_ROOT


def test_from_response_tells_missing_job_crd_forbidden_invalid() -> None:
    gone = errors.from_response(
        404,
        '{"reason": "NotFound", "details": {"name": "mnist", "kind": "kerasjobs"}}',
        namespace="ml",
    )
    assert isinstance(gone, errors.NotFoundError) and gone.exit_code == 3
    assert str(gone) == "KerasJob 'mnist' not found in namespace 'ml'"
    pod = errors.from_response(404, {"details": {"name": "x-worker-0", "kind": "pods"}})
    assert str(pod) == "Pod 'x-worker-0' not found"
    assert isinstance(errors.from_response(404, "404 page not found"), errors.CRDNotFoundError)
    denied = errors.from_response(403, {"message": "kerasjobs is forbidden", "reason": "Forbidden"})
    assert isinstance(denied, errors.ForbiddenError) and denied.exit_code == 4
    bad = errors.from_response(
        422,
        {
            "reason": "Invalid",
            "message": "bad",
            "details": {"causes": [{"field": "spec.workers", "message": "must be >= 1"}]},
        },
    )
    assert isinstance(bad, errors.InvalidError) and bad.causes == ["spec.workers: must be >= 1"]
    exists = errors.from_response(409, {"reason": "AlreadyExists", "message": "exists"})
    assert isinstance(exists, errors.AlreadyExistsError)
    assert errors.JobFailedError("j", "BackoffLimitExceeded", "4 failures").exit_code == 5
    assert errors.WaitTimeoutError("late").exit_code == 6


def test_load_job_from_dict_file_and_model(tmp_path: Path) -> None:
    body = {
        "apiVersion": "kerasjob.dev/v1alpha1",
        "kind": "KerasJob",
        "metadata": {"name": "a"},
        "spec": {"workers": 1},
    }
    assert load_job(body).name == "a"
    assert load_job(REPO_ROOT / "examples" / "mnist.yaml").spec.workers == 2
    two_docs = REPO_ROOT / "examples" / "user-code-configmap.yaml"  # ConfigMap + KerasJob
    assert load_job(str(two_docs)).name == "user-code"
    model = KerasJob.model_validate(body)
    assert load_job(model) is model
    with pytest.raises(errors.InvalidError, match=r"spec\.workers"):
        load_job({**body, "spec": {"workers": 0}})
    with pytest.raises(errors.InvalidError, match="expected one KerasJob"):
        load_job(REPO_ROOT / "examples" / "checkpoint-pvc.yaml")


def test_summary_of_a_failed_job() -> None:
    s = summarize(
        {
            "metadata": {
                "name": "j",
                "namespace": "ml",
                "creationTimestamp": "2020-01-01T00:00:00Z",
            },
            "spec": {"workers": 2, "checkpoint": {"volume": {"nfs": {"server": "s", "path": "/"}}}},
            "status": {
                "phase": "Failed",
                "restarts": {"disruptions": 1, "failures": 4},
                "progress": {"step": 10, "totalSteps": 20, "epoch": 0},
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "4 failures",
                    }
                ],
            },
        }
    )
    assert (s.phase, s.reason, s.message, s.progress) == (
        "Failed",
        "BackoffLimitExceeded",
        "4 failures",
        "step 10/20",
    )
    assert s.finished and s.age().endswith("d")


def build_for_test(config):
    import tf_keras as keras  # never imported here: only shipped

    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])


def test_function_job_ships_the_source_and_mounts_it() -> None:
    source = function_source(build_for_test)
    assert "def build_for_test(config):" in source
    compile(source, MODULE, "exec")  # a valid module on its own
    job = function_job(
        build_for_test,
        "fn",
        workers=1,
        trainer={"epochs": 2},
        spec={"template": {"spec": {"nodeSelector": {"a": "b"}}}},
    )
    assert job.spec.trainer.model == f"{MODULE}:build_for_test"
    assert job.spec.trainer.epochs == 2
    pod = job.spec.template["spec"]
    assert pod["volumes"][0]["configMap"]["name"] == "fn-code"
    assert pod["containers"][0]["env"][0]["name"] == "PYTHONPATH"
    assert pod["nodeSelector"] == {"a": "b"}
    with pytest.raises(errors.InvalidError, match="named function"):
        function_source(lambda c: c)


def test_interleave_keeps_time_order() -> None:
    a = [LogLine("w0", "a1", "2024-01-01T00:00:01Z"), LogLine("w0", "a2", "2024-01-01T00:00:03Z")]
    b = [LogLine("w1", "b1", "2024-01-01T00:00:02Z")]
    assert [str(x) for x in interleave([a, b])] == ["[w0] a1", "[w1] b1", "[w0] a2"]


def test_replica_pods() -> None:
    job = load_job(REPO_ROOT / "examples" / "mnist.yaml")
    c = KerasJobClient.__new__(KerasJobClient)
    assert c.replica_pods(job) == ["mnist-worker-0"]
    assert c.replica_pods(job, "all") == ["mnist-worker-0", "mnist-worker-1"]
    assert c.replica_pods(job, "worker-1") == ["mnist-worker-1"]
    with pytest.raises(errors.NotFoundError, match="has no replica 'chief-0'"):
        c.replica_pods(job, "chief-0")


def test_completion_script_is_valid_bash() -> None:
    script = completion_script(cli.parser())
    assert "submit" in script and "--replica" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_cli_errors_without_a_cluster_are_one_line(capsys, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    for argv in (
        ["get"],
        ["submit", "-f", "examples/mnist.yaml"],
        ["logs", "x", "--all"],
        ["wait", "x", "--timeout", "1m"],
        ["delete", "x"],
    ):
        assert cli.main(["--kubeconfig", missing, *argv]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(e.startswith("kerasjob: no usable kubeconfig") for e in err)
    # A kubeconfig whose server does not answer: "cannot reach", still one line.
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u, namespace: ns1}}]\n"
    )
    assert cli.main(["get", "--kubeconfig", str(cfg)]) == 1
    assert capsys.readouterr().err.startswith("kerasjob: cannot reach the API server")
    assert KerasJobClient(kubeconfig=str(cfg)).namespace == "ns1"
    with pytest.raises(SystemExit) as usage:
        cli.main(["logs", "x", "--all", "--replica", "worker-1"])
    assert usage.value.code == 2


def test_cli_table_and_progress_line() -> None:
    from kerasjob.cli.jobs import progress_line, table

    s = summarize(
        {
            "metadata": {"name": "mnist", "namespace": "ml"},
            "spec": {"workers": 1},
            "status": {
                "phase": "Running",
                "restarts": {"disruptions": 2, "failures": 1},
                "progress": {"step": 120, "totalSteps": 300, "epoch": 1, "loss": 0.25},
            },
        }
    )
    assert progress_line(s) == (
        "mnist  Running  epoch 1  step 120/300 loss 0.25  restarts 3 (2 disruptions, 1 failures)"
    )
    text = table([s], wide=True, namespaces=True).splitlines()
    assert text[0].split() == [
        "NAMESPACE",
        "NAME",
        "PHASE",
        "WORKERS",
        "RESTARTS",
        "PROGRESS",
        "AGE",
        "DISRUPTIONS",
        "FAILURES",
        "REASON",
    ]
    assert text[1].split()[:5] == ["ml", "mnist", "Running", "1", "3"]
    # An elastic job running short of its preferred size shows both.
    short = summarize(
        {
            "metadata": {"name": "e", "namespace": "ml"},
            "spec": {"workers": 3, "elastic": {"minWorkers": 1}},
            "status": {"phase": "Running", "elastic": {"workers": 2, "resizes": 1}},
        }
    )
    assert (short.workers, short.preferred_workers, short.resizes, short.size) == (2, 3, 1, "2/3")
    assert table([short]).splitlines()[1].split()[:3] == ["e", "Running", "2/3"]


def test_kubectl_plugin_alone_prints_help(monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.argv", ["kubectl-kerasjob"])
    assert cli.main([]) == 2
    assert "kerasjob submit -f job.yaml" in capsys.readouterr().out
