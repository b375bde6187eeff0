"""The controller's API client against the real API server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob.k8s.kube import ApiError, KubeApi
from kerasjob_dev.cluster import Cluster

pytestmark = pytest.mark.cluster


def _token_kubeconfig(admin: dict[str, Any], token: str) -> dict[str, Any]:
    """The admin kubeconfig's server and CA, authenticating with a bearer token instead."""
    cfg = yaml.safe_load(yaml.safe_dump(admin))
    cfg["users"] = [{"name": u["name"], "user": {"token": token}} for u in cfg["users"]]
    return cfg


def test_reloads_credentials_after_401(cluster: Cluster, tmp_path: Path) -> None:
    """A rotated token (the kubelet rewrites it in place) is picked up on the next 401."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(_token_kubeconfig(admin, "expired-token")))

    async def scenario() -> None:
        api = KubeApi(str(kubeconfig))
        try:
            with pytest.raises(ApiError) as err:
                await api.request("GET", "/api/v1/namespaces/default", count_as="get ns")
            assert err.value.status == 401

            # Credentials rotate on disk; the same client must recover without a restart.
            kubeconfig.write_text(yaml.safe_dump(admin))
            got = await api.request("GET", "/api/v1/namespaces/default", count_as="get ns")
            assert got["metadata"]["name"] == "default"
        finally:
            await api.close()

    asyncio.run(scenario())
