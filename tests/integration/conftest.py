"""Fixtures shared by the integration tests.

``operator`` (function)
    This session's operator (`kerasjob_dev.harness.session_operator`), for jobs whose Pods
    land on fake KWOK nodes (skips without them). Its namespaces come from
    `harness.isolated_namespace`: a test module using it overrides ``namespace`` with
    ``yield from isolated_namespace(kube)``. Modules that need an operator of their own (one
    they kill, or with other flags) define their own ``operator``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kerasjob_dev.cluster import Cluster
from kerasjob_dev.harness import OperatorProcess, session_operator


@pytest.fixture
def operator(cluster: Cluster, kwok_placement: dict[str, Any]) -> OperatorProcess:
    return session_operator(cluster)
