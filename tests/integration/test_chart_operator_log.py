"""The log check the chart tests share (`chart_operator.is_refusal`): no cluster needed."""

from __future__ import annotations

import pytest
from chart_operator import is_refusal


@pytest.mark.parametrize(
    "line",
    [
        "kubernetes.client.exceptions.ApiException: (403)",
        "HTTP 403 on POST /apis/batch/v1/jobs",
        "kopf: APIForbiddenError: pods is forbidden: cannot create",
        "status=403 reason=Forbidden",
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
        "Not enough permissions to watch for resources: forbidden namespaces",  # kopf, harmless
    ],
)
def test_other_lines_are_not(line: str) -> None:
    assert not is_refusal(line)
