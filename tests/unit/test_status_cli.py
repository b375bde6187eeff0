"""The `kerasjob` command line."""

from __future__ import annotations

from kerasjob.cli import app as cli


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
        "waiting": "",
    }
    assert cli._summary({"metadata": {"name": "x"}})["progress"] == "-"


def test_status_says_why_a_queued_job_waits() -> None:
    why = "queued in LocalQueue team-a: couldn't assign flavors to pod set worker"
    obj = {
        "metadata": {"name": "mnist"},
        "status": {
            "phase": "Queued",
            "conditions": [
                {"type": "Suspended", "status": "True", "reason": "Queued", "message": why},
                {"type": "Admitted", "status": "False", "reason": "Queued", "message": why},
            ],
        },
    }
    assert cli._summary(obj)["waiting"] == why
    obj["status"]["phase"] = "Running"
    assert cli._summary(obj)["waiting"] == ""


def test_status_says_why_a_pending_job_waits_for_its_gang() -> None:
    why = (
        "the gang of 9 Pods cannot be placed together (PodGroup big-gang-1: Unschedulable: "
        "pod group is unschedulable); no Pod is bound until all fit: 0/4 nodes are available"
    )
    obj = {
        "metadata": {"name": "big"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Created", "status": "True", "reason": "Created", "message": "ok"},
                {
                    "type": "Running",
                    "status": "False",
                    "reason": "GangUnschedulable",
                    "message": why,
                },
            ],
        },
    }
    assert cli._summary(obj)["waiting"] == why
    obj["status"]["conditions"][1]["status"] = "True"
    assert cli._summary(obj)["waiting"] == ""


def test_run_flags() -> None:
    args = cli.parser().parse_args(
        ["run", "-n", "a-*", "-n", "b", "--metrics-port", "9090", "--workers", "4"]
    )
    assert args.namespace == ["a-*", "b"] and args.metrics_port == 9090 and args.workers == 4
    assert not args.gang_scheduling
    assert cli.parser().parse_args(["run", "--gang-scheduling"]).gang_scheduling


def test_status_errors_are_one_line_and_exit_1(capsys, tmp_path) -> None:
    from kerasjob.k8s.credentials import CredentialsError
    from kerasjob.sdk.errors import from_response

    missing = tmp_path / "no-such-kubeconfig"
    assert cli.main(["--kubeconfig", str(missing), "status", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kerasjob: no usable kubeconfig") and err.count("\n") == 1

    args = cli.parser().parse_args(["status", "mnist", "-n", "ml"])
    gone = from_response(
        404,
        '{"kind": "Status", "reason": "NotFound", "details": {"name": "mnist"}}',
        namespace="ml",
    )
    assert cli._explain(gone, args) == "KerasJob 'mnist' not found in namespace 'ml'"
    no_crd = from_response(404, "404 page not found")
    assert "no kerasjobs.kerasjob.dev CRD" in (cli._explain(no_crd, args) or "")
    forbidden = from_response(
        403, '{"message": "kerasjobs is forbidden: User \\"u\\" cannot list"}'
    )
    listing = cli.parser().parse_args(["status", "-n", "ml"])
    assert cli._explain(forbidden, listing) == (
        'the API server refused: kerasjobs is forbidden: User "u" cannot list (HTTP 403)'
    )
    broken = CredentialsError("kubeconfig has no context named 'x'")
    assert cli._explain(broken, args) == "no usable kubeconfig: kubeconfig has no context named 'x'"
    assert cli._explain(ValueError("a bug"), args) is None  # not ours to hide


def test_status_shows_what_disruptions_cost() -> None:
    costs = {
        "disruptions": 2,
        "lostSeconds": 21.5,
        "stepsRedone": 7,
        "productiveSeconds": 300.0,
        "goodput": 0.9331,
    }
    obj = {
        "metadata": {"name": "mnist"},
        "status": {"phase": "Running", "progress": {"step": 3, "goodput": costs}},
    }
    assert cli._summary(obj)["goodput"] == costs
    from kerasjob.planner import goodput

    assert goodput.describe(costs) == (
        "goodput 93.3%: 300.0s productive, 21.5s lost to 2 disruptions (7 steps redone)"
    )


def test_gang_scheduling_without_a_reachable_cluster_is_one_line_and_exit_1(
    capsys, tmp_path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code = cli.main(["--kubeconfig", str(kubeconfig), "run", "--gang-scheduling"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("kerasjob: --gang-scheduling: cannot ask the API server"), err


def test_status_says_why_a_pending_job_has_no_pods() -> None:
    why = (
        "Secret ml/aws-keys (spec.checkpoint.credentials of s3://bkt) not found: it must hold "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; no Pods are created until it exists"
    )
    obj = {
        "metadata": {"name": "b"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "Created",
                    "status": "False",
                    "reason": "CheckpointSecretMissing",
                    "message": why,
                },
            ],
        },
    }
    assert cli._summary(obj)["waiting"] == why


def test_describe_says_where_the_backups_are() -> None:
    from kerasjob.api import KerasJob
    from kerasjob.sdk.summary import checkpoint_where

    meta = {"name": "b", "namespace": "ml", "uid": "u-1"}
    bucket = {
        "location": "s3://bkt/team/",
        "endpoint": "http://versitygw:7070",
        "region": "us-east-1",
        "pathStyle": True,
        "credentials": {"secretName": "aws-keys"},
    }
    job = KerasJob.from_body({"metadata": meta, "spec": {"workers": 2, "checkpoint": bucket}})
    assert checkpoint_where(job) == (
        "s3://bkt/team/ml/b/u-1 (endpoint http://versitygw:7070, region us-east-1, path-style, "
        "Secret aws-keys; staged in an emptyDir at /kerasjob/checkpoint)"
    )
    gcs = {"metadata": meta, "spec": {"checkpoint": {"location": "gs://bkt"}}}
    assert checkpoint_where(KerasJob.from_body(gcs)) == (
        "gs://bkt/ml/b/u-1 (the Pods' own identity; staged in an emptyDir at /kerasjob/checkpoint)"
    )
    pvc = {"persistentVolumeClaim": {"claimName": "ckpt"}}
    volume = {"metadata": meta, "spec": {"workers": 2, "checkpoint": {"volume": pvc}}}
    assert checkpoint_where(KerasJob.from_body(volume)) == (
        "/kerasjob/checkpoint/ml/b/u-1 on volume persistentVolumeClaim ckpt"
    )
    assert checkpoint_where(KerasJob.from_body({"metadata": meta})) == (
        "/kerasjob/checkpoint/ml/b/u-1 on volume emptyDir"
    )
