"""The log check the chart tests share (`chart_operator.is_refusal`): no cluster needed."""

from __future__ import annotations

import pytest

from kerasjob_dev.testing.chart_operator import is_refusal


@pytest.mark.parametrize(
    "line",
    [
        "kubernetes.client.exceptions.ApiException: (403)",
        "HTTP 403 on POST /apis/batch/v1/jobs",
        "kopf: APIForbiddenError: pods is forbidden: cannot create",
        "status=403 reason=Forbidden",
        # kopf's retry of a namespaced request: its URL says "namespaces", still a refusal
        "Request attempt 1/9 failed; will retry: PATCH https://127.0.0.1:6443/apis/"
        "kerasjob.dev/v1/namespaces/jobs-1/kerasjobs/rbac -> APIForbiddenError('kerasjobs"
        '.kerasjob.dev "rbac" is forbidden: User "system:serviceaccount:op:op" cannot patch '
        'resource "kerasjobs/status" in API group "kerasjob.dev" in the namespace "jobs-1"\')',
    ],
)
def test_a_refused_request_is_seen(line: str) -> None:
    assert is_refusal(line)


@pytest.mark.parametrize(
    "line",
    [
        "2026-11-26 22:58:33,595 INFO jobs-bf403a17/rbac: None -> Pending",  # hex namespace
        "2026-11-26 07:20:02,403 INFO listening on 127.0.0.1:40389",  # milliseconds, port
        "uid 4031c2e0-403b-11ef-9403-0242ac120002 created",
        # kopf's cluster-wide discovery in namespaced mode: harmless
        "Request attempt 1/9 failed; escalating: GET https://127.0.0.1:6443/api/v1/namespaces"
        ' -> APIForbiddenError(\'namespaces is forbidden: User "system:serviceaccount:op:op" '
        'cannot list resource "namespaces" in API group "" at the cluster scope\')',
        'customresourcedefinitions.apiextensions.k8s.io is forbidden: User "u" cannot watch '
        'resource "customresourcedefinitions" in API group "apiextensions.k8s.io"',
    ],
)
def test_other_lines_are_not(line: str) -> None:
    assert not is_refusal(line)
