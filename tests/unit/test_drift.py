"""`drift`: whether the job's Service or NetworkPolicy still has the spec the operator gave
it (only the fields it sets, after the API server's defaulting), and the patch that gives it
back. The controller's use of it: `test_controller`; against a real API server:
`tests/integration/test_network_policy.py`."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kerasjob.manifests import children, drift
from kerasjob.planner.status import merge_patch

BODY = {
    "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
    "spec": {
        "workers": 2,
        "port": 2345,
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}},
    },
}
JAX = {**BODY, "spec": {**BODY["spec"], "trainer": {"backend": "jax"}}}
#: The chart's default metrics peers: the operator's namespace and Pods (an empty struct
#: and an empty map beside them, which the API server keeps and drops respectively).
PEERS = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kerasjob-system"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kerasjob-operator"}},
    },
    {"namespaceSelector": {}, "podSelector": {"matchLabels": {}, "matchExpressions": []}},
]
OWN = {"matchLabels": {"kerasjob.dev/job-name": "j"}}


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies a merge patch."""
    out = copy.deepcopy(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def desired(kind: str, body: dict[str, Any] = BODY) -> dict[str, Any]:
    if kind == "Service":
        return drift.owned_spec(kind, children.build_service(body))
    return drift.owned_spec(kind, children.build_network_policy(body, metrics_from=PEERS))


def stored_service() -> dict[str, Any]:
    """The job's Service as the API server returns it: defaulted and allocated fields added."""
    svc = children.build_service(BODY)
    svc["spec"].update(
        clusterIPs=["None"],
        type="ClusterIP",
        sessionAffinity="None",
        ipFamilies=["IPv4"],
        ipFamilyPolicy="SingleStack",
        internalTrafficPolicy="Cluster",
    )
    return svc


def stored_policy(body: dict[str, Any] = BODY) -> dict[str, Any]:
    """The job's NetworkPolicy as the API server returns it: empty maps and lists dropped."""
    policy = children.build_network_policy(body, metrics_from=PEERS)
    _, metrics = policy["spec"]["ingress"]
    metrics["from"][1] = {"namespaceSelector": {}, "podSelector": {}}
    return policy


def live(kind: str) -> dict[str, Any]:
    body = stored_service() if kind == "Service" else stored_policy()
    return drift.owned_spec(kind, body)


@pytest.mark.parametrize("body", [BODY, JAX], ids=["tensorflow", "jax"])
def test_what_the_api_server_stores_is_no_difference(body: dict[str, Any]) -> None:
    assert drift.drifted("Service", live("Service"), desired("Service")) == ()
    policy = drift.owned_spec("NetworkPolicy", stored_policy(body))
    assert drift.drifted("NetworkPolicy", policy, desired("NetworkPolicy", body)) == ()


def test_only_the_fields_the_operator_sets_are_compared() -> None:
    svc = stored_service()
    assert set(drift.owned_spec("Service", svc)) == {
        "selector",
        "ports",
        "publishNotReadyAddresses",
    }
    # A port's protocol and targetPort defaulted by the API server are no difference either.
    bare = copy.deepcopy(drift.owned_spec("Service", svc))
    bare["ports"] = [{"name": "tf", "port": 2345}]
    assert drift.drifted("Service", bare, desired("Service")) == ()
    policy = copy.deepcopy(live("NetworkPolicy"))
    del policy["policyTypes"]  # the API server's default for a policy without egress
    policy["ingress"][0]["ports"] = [{"port": 2345}]
    assert drift.drifted("NetworkPolicy", policy, desired("NetworkPolicy")) == ()


#: Changes that loosen or break the job's policy or Service, and the fields each names.
CHANGES = [
    ("NetworkPolicy", {"ingress": [{}]}, ("ingress",)),  # admit everyone
    ("NetworkPolicy", {"ingress": None}, ("ingress",)),  # admit no one (the metrics scrape)
    ("NetworkPolicy", {"podSelector": {"matchLabels": {"other": "x"}}}, ("podSelector",)),
    ("NetworkPolicy", {"podSelector": {"matchLabels": None}}, ("podSelector",)),
    (
        "NetworkPolicy",
        {"policyTypes": ["Ingress", "Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "0/0"}}]}]},
        ("policyTypes", "egress"),
    ),
    ("Service", {"selector": {"app": "other"}}, ("selector",)),
    ("Service", {"publishNotReadyAddresses": None}, ("publishNotReadyAddresses",)),
    ("Service", {"ports": [{"name": "tf", "port": 80, "targetPort": 2345}]}, ("ports",)),
]


@pytest.mark.parametrize(("kind", "patch", "fields"), CHANGES)
def test_a_change_is_named_and_the_restore_patch_undoes_it(
    kind: str, patch: dict[str, Any], fields: tuple[str, ...]
) -> None:
    changed = _merge(live(kind), patch)
    assert drift.drifted(kind, changed, desired(kind)) == fields
    restore = drift.restore_patch(kind, changed, desired(kind))
    assert set(restore) == set(fields)
    assert drift.drifted(kind, _merge(changed, restore), desired(kind)) == ()


def test_a_peer_widened_to_every_namespace_is_a_difference() -> None:
    """``namespaceSelector: {}`` beside a podSelector admits those Pods of every namespace:
    an empty struct is not dropped as an empty map is."""
    policy = copy.deepcopy(live("NetworkPolicy"))
    policy["ingress"][0]["from"][0]["namespaceSelector"] = {}
    assert drift.drifted("NetworkPolicy", policy, desired("NetworkPolicy")) == ("ingress",)


def test_a_label_added_to_a_selector_is_removed_by_the_patch() -> None:
    """A map merges under a merge patch: the restore names the key to remove."""
    policy = copy.deepcopy(live("NetworkPolicy"))
    policy["podSelector"]["matchLabels"]["only"] = "these"
    restore = drift.restore_patch("NetworkPolicy", policy, desired("NetworkPolicy"))
    assert restore == {"podSelector": {"matchLabels": {"only": None}}}
    assert restore == {"podSelector": merge_patch(policy["podSelector"], OWN)}
