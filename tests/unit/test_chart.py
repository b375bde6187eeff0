"""The Helm chart (charts/kerasjob-operator), rendered with `helm template`: no cluster.

Checks what a reviewer of the chart would check by hand: the CRD it ships is the generated
one, RBAC is least-privilege (no wildcards, nothing beyond the operator's needs) in both the
cluster-wide and the namespaced mode, the Deployment is hardened, peering and the
ServiceMonitor appear only when asked for, and values.schema.json rejects bad values.

helm comes from `make binaries` (hack/cluster/env.sh --bin-dir) or PATH; without it the
helm-based tests are skipped (the file-level checks still run).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kerasjob-operator"
CRD_FILE = "kerasjob.dev_kerasjobs.yaml"


@cache
def helm_binary() -> str | None:
    try:
        bin_dir = subprocess.run(
            [str(ROOT / "hack" / "cluster" / "env.sh"), "--bin-dir"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        bin_dir = ""
    if bin_dir and (Path(bin_dir) / "helm").exists():
        return str(Path(bin_dir) / "helm")
    return shutil.which("helm")


needs_helm = pytest.mark.skipif(helm_binary() is None, reason="helm not built: run `make binaries`")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = helm_binary()
    assert binary is not None
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def set_args(values: dict[str, Any]) -> list[str]:
    # --set-json keeps types (lists, ints) exactly as given.
    return [arg for k, v in values.items() for arg in ("--set-json", f"{k}={json.dumps(v)}")]


def render(namespace: str = "kerasjob-system", **values: Any) -> list[dict[str, Any]]:
    """`helm template` the chart (CRDs included) and return the parsed objects."""
    proc = helm(
        "template", "kj", str(CHART), "--namespace", namespace, "--include-crds", *set_args(values)
    )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def rules_by_resource(role: dict[str, Any]) -> dict[str, set[str]]:
    """{"group/resource[:names]": verbs} so tests can compare whole permission sets."""
    out: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = f"{group}/{resource}"
                if rule.get("resourceNames"):
                    key += ":" + ",".join(rule["resourceNames"])
                out.setdefault(key, set()).update(rule["verbs"])
    return out


# What the operator may do in a namespace it handles, and nothing more (see rbac.yaml).
NAMESPACED_PERMISSIONS = {
    "kerasjob.dev/kerasjobs": {"list", "watch", "delete"},
    "kerasjob.dev/kerasjobs/status": {"patch"},
    "kerasjob.dev/kerasjobs/finalizers": {"update"},
    "/pods": {"list", "watch", "create", "delete"},
    "/services": {"list", "watch", "create", "patch"},
    "/events": {"create"},
    "networking.k8s.io/networkpolicies": {"list", "watch", "create", "patch"},
    "/secrets": {"get"},
}


# --- files ----------------------------------------------------------------------------------


def test_chart_ships_the_generated_crd_unchanged() -> None:
    """One source: the chart's CRD is a byte-for-byte copy of crds/ (`make crds` copies it)."""
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == [CRD_FILE, "kopf-peering.yaml"]
    generated = (ROOT / "crds" / CRD_FILE).read_text()
    assert (CHART / "crds" / CRD_FILE).read_text() == generated, (
        "charts/kerasjob-operator/crds/ differs from crds/: run `make crds`"
    )


def test_chart_crd_matches_the_models() -> None:
    """The chart's copy is also what the pydantic models generate today."""
    from kerasjob.tools import crdgen

    assert (CHART / "crds" / CRD_FILE).read_text() == crdgen.dump(crdgen.render_crd()), (
        "the chart's CRD is out of date with operator/kerasjob/api.py: run `make crds`"
    )


def test_values_schema_is_valid_json_and_covers_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["additionalProperties"] is False
    assert set(values) == set(schema["properties"]), "values.yaml and the schema disagree"


def test_readme_documents_every_top_level_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [key for key in values if f"`{key}" not in readme]
    assert not missing, f"charts/kerasjob-operator/README.md does not document {missing}"


# --- helm lint / package ----------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize(
    "values",
    [
        {},
        {"watchNamespaces": ["team-a", "team-b"], "replicaCount": 2},
        {"replicaCount": 3, "metrics.enabled": True, "metrics.serviceMonitor.enabled": True},
    ],
    ids=["defaults", "namespaced-peering", "cluster-peering-servicemonitor"],
)
def test_helm_lint(values: dict[str, Any]) -> None:
    proc = helm("lint", "--strict", str(CHART), *set_args(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@needs_helm
def test_helm_package_contains_the_crd(tmp_path: Path) -> None:
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("kerasjob-operator-*.tgz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        assert "kerasjob-operator/crds/kopf-peering.yaml" in names
        crd = tar.extractfile(f"kerasjob-operator/crds/{CRD_FILE}")
        assert crd is not None
        assert crd.read().decode() == (ROOT / "crds" / CRD_FILE).read_text()
    assert "kerasjob-operator/values.schema.json" in names


# --- RBAC -----------------------------------------------------------------------------------


def assert_no_wildcards(role: dict[str, Any]) -> None:
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {field} of {role['metadata']['name']}"
        assert not rule.get("nonResourceURLs"), "no non-resource URLs needed"


@needs_helm
def test_cluster_wide_rbac_is_least_privilege() -> None:
    objects = render()
    assert not of_kind(objects, "Role") and not of_kind(objects, "RoleBinding")
    role = one(objects, "ClusterRole")
    assert_no_wildcards(role)
    assert rules_by_resource(role) == {
        **NAMESPACED_PERMISSIONS,
        # kopf notices the CRD being (re)installed at runtime; read-only.
        "apiextensions.k8s.io/customresourcedefinitions": {"list", "watch"},
    }
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": sa["metadata"]["name"],
            "namespace": "kerasjob-system",
        }
    ]
    dep = one(objects, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert not any(a.startswith("--namespace") for a in container(objects)["args"])


@needs_helm
def test_namespaced_rbac_has_nothing_cluster_scoped() -> None:
    objects = render(watchNamespaces=["team-a", "team-b"])
    assert not of_kind(objects, "ClusterRole")
    assert not of_kind(objects, "ClusterRoleBinding")
    roles = of_kind(objects, "Role")
    bindings = of_kind(objects, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for role in roles:
        assert_no_wildcards(role)
        assert rules_by_resource(role) == NAMESPACED_PERMISSIONS
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == "kerasjob-system"
    args = container(objects)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert args[0] == "run"


@needs_helm
@pytest.mark.parametrize("namespaces", [[], ["team-a"]], ids=["cluster-wide", "namespaced"])
def test_kueue_adds_workload_rbac_and_the_flag(namespaces: list[str]) -> None:
    values: dict[str, Any] = {"kueue.enabled": True}
    if namespaces:
        values["watchNamespaces"] = namespaces
    objects = render(**values)
    roles = of_kind(objects, "ClusterRole")
    kueue_role = next(r for r in roles if r["metadata"]["name"].endswith("-kueue"))
    assert rules_by_resource(kueue_role) == {
        "kueue.x-k8s.io/resourceflavors": {"get"},
        "kueue.x-k8s.io/workloadpriorityclasses": {"get"},
    }
    main = [
        r
        for r in of_kind(objects, "ClusterRole" if not namespaces else "Role")
        if not r["metadata"]["name"].endswith("-kueue")
    ]
    for role in main:
        rules = rules_by_resource(role)
        assert rules["kueue.x-k8s.io/workloads"] == {"list", "watch", "create", "delete", "patch"}
        assert rules["kueue.x-k8s.io/workloads/status"] == {"patch"}
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["KERASJOB_KUEUE"] == "1"
    assert "KERASJOB_KUEUE" not in {e["name"] for e in container(render())["env"]}


@needs_helm
@pytest.mark.parametrize("namespaces", [[], ["team-a"]], ids=["cluster-wide", "namespaced"])
def test_gang_scheduling_adds_workload_and_pod_group_rbac_and_the_flag(
    namespaces: list[str],
) -> None:
    values: dict[str, Any] = {"gangScheduling.enabled": True}
    if namespaces:
        values["watchNamespaces"] = namespaces
    objects = render(**values)
    for role in of_kind(objects, "ClusterRole" if not namespaces else "Role"):
        assert_no_wildcards(role)
        rules = rules_by_resource(role)
        for resource in ("workloads", "podgroups"):
            assert rules[f"scheduling.k8s.io/{resource}"] == {"list", "watch", "create", "delete"}
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["KERASJOB_GANG_SCHEDULING"] == "1"
    plain = render()
    assert "KERASJOB_GANG_SCHEDULING" not in {e["name"] for e in container(plain)["env"]}
    for role in of_kind(plain, "ClusterRole"):
        assert not any(
            k.startswith("scheduling.k8s.io/w") or k.startswith("scheduling.k8s.io/p")
            for k in rules_by_resource(role)
        )


@needs_helm
def test_rbac_create_false_renders_no_rbac() -> None:
    objects = render(
        **{
            "rbac.create": False,
            "serviceAccount.create": False,
            "serviceAccount.name": "my-operator",
        }
    )
    kinds = {o["kind"] for o in objects}
    assert not kinds & {
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
    }
    dep = one(objects, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "my-operator"


# --- the Deployment -------------------------------------------------------------------------


@needs_helm
def test_deployment_is_hardened() -> None:
    objects = render()
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = pod["containers"][0]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


@needs_helm
def test_liveness_probe_targets_kopf_liveness_endpoint() -> None:
    c = container(render(**{"liveness.port": 8181, "liveness.path": "/alive"}))
    assert env_of(c)["KERASJOB_LIVENESS"] == "http://0.0.0.0:8181/alive"
    assert c["livenessProbe"]["httpGet"] == {"path": "/alive", "port": "healthz"}
    assert {"name": "healthz", "containerPort": 8181, "protocol": "TCP"} in c["ports"]


@needs_helm
def test_images_and_trainer_default() -> None:
    c = container(render())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert c["image"] == f"kerasjob/operator:{chart['appVersion']}"
    env = env_of(c)
    assert env["KERASJOB_DEFAULT_IMAGE"] == f"kerasjob/trainer:{chart['appVersion']}-cpu"
    assert env["KERASJOB_DEFAULT_JAX_IMAGE"] == f"kerasjob/trainer:{chart['appVersion']}-jax-cpu"

    c = container(
        render(**{"image.tag": "dev", "trainerImage.tag": "dev", "trainerImage.variant": "gpu"})
    )
    assert c["image"] == "kerasjob/operator:dev"
    env = env_of(c)
    assert env["KERASJOB_DEFAULT_IMAGE"] == "kerasjob/trainer:dev-gpu"
    assert env["KERASJOB_DEFAULT_JAX_IMAGE"] == "kerasjob/trainer:dev-jax-gpu"


@needs_helm
def test_jax_trainer_default() -> None:
    """Backend jax jobs get their own default (Keras 3 on JAX, no TensorFlow): the trainer
    image's repository and tag with -jax-<variant>, or trainerImage.jaxImage whole."""
    env = env_of(
        container(
            render(**{"trainerImage.repository": "reg.example/trainer", "trainerImage.tag": "dev"})
        )
    )
    assert env["KERASJOB_DEFAULT_IMAGE"] == "reg.example/trainer:dev-cpu"
    assert env["KERASJOB_DEFAULT_JAX_IMAGE"] == "reg.example/trainer:dev-jax-cpu"
    env = env_of(container(render(**{"trainerImage.jaxImage": "mine/keras3:1"})))
    assert env["KERASJOB_DEFAULT_JAX_IMAGE"] == "mine/keras3:1"
    assert env["KERASJOB_DEFAULT_IMAGE"].endswith("-cpu")


# --- peering ----------------------------------------------------------------------------------


PEERING_KINDS = {"ClusterKopfPeering", "KopfPeering"}


@needs_helm
def test_single_replica_is_standalone_without_peering() -> None:
    objects = render()
    assert not {o["kind"] for o in objects} & PEERING_KINDS
    assert not of_kind(objects, "PodDisruptionBudget")  # it would block every node drain
    dep = one(objects, "Deployment")
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    c = container(objects)
    assert "KERASJOB_PEERING" not in env_of(c)  # standalone
    assert "command" not in c  # the image's ENTRYPOINT runs directly
    assert not any("peering" in a for a in c["args"])


@needs_helm
def test_replicas_enable_peering_cluster_wide() -> None:
    objects = render(replicaCount=2)
    peering = one(objects, "ClusterKopfPeering")
    assert "annotations" not in peering["metadata"]  # a plain release object, not a hook
    name = peering["metadata"]["name"]
    dep = one(objects, "Deployment")
    assert dep["spec"]["replicas"] == 2
    assert "strategy" not in dep["spec"]  # rolling updates are safe with peering
    c = container(objects)
    assert env_of(c)["KERASJOB_PEERING"] == name
    assert "KERASJOB_PRIORITY=" in " ".join(c["command"])  # a random priority per Pod
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]
    perms = rules_by_resource(one(objects, "ClusterRole"))
    assert perms["kopf.dev/clusterkopfpeerings"] == {"list", "watch"}
    assert perms[f"kopf.dev/clusterkopfpeerings:{name}"] == {"get", "patch"}


@needs_helm
def test_replicas_enable_peering_per_namespace() -> None:
    objects = render(replicaCount=2, watchNamespaces=["team-a", "team-b"])
    peerings = of_kind(objects, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    assert not of_kind(objects, "ClusterKopfPeering")
    for role in of_kind(objects, "Role"):
        perms = rules_by_resource(role)
        assert perms["kopf.dev/kopfpeerings"] == {"list", "watch"}


def test_peering_crds_are_the_ones_kopf_uses() -> None:
    """crds/kopf-peering.yaml defines exactly the peering resources kopf looks for."""
    from kopf._cogs.structs import references

    crds = list(yaml.safe_load_all((CHART / "crds" / "kopf-peering.yaml").read_text()))
    served = {
        (f"{c['spec']['group']}/{v['name']}", c["spec"]["names"]["plural"], c["spec"]["scope"])
        for c in crds
        for v in c["spec"]["versions"]
        if v["served"]
    }
    cluster, namespaced = references.CLUSTER_PEERINGS_K, references.NAMESPACED_PEERINGS_K
    assert served == {
        (f"{cluster.group}/{cluster.version}", cluster.any_name, "Cluster"),
        (f"{namespaced.group}/{namespaced.version}", namespaced.any_name, "Namespaced"),
    }
    for crd in crds:  # kopf writes heartbeats into status, without a status subresource
        (version,) = crd["spec"]["versions"]
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert status["x-kubernetes-preserve-unknown-fields"] is True
        assert "subresources" not in version


# --- metrics ----------------------------------------------------------------------------------


@needs_helm
def test_metrics_service_and_optional_servicemonitor() -> None:
    objects = render()
    svc = one(objects, "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert svc["spec"]["ports"][0]["port"] == 9090
    assert not of_kind(objects, "ServiceMonitor")
    assert env_of(container(objects))["KERASJOB_METRICS_PORT"] == "9090"

    objects = render(
        **{
            "metrics.enabled": True,
            "metrics.serviceMonitor.enabled": True,
            "metrics.serviceMonitor.labels": {"release": "prom"},
        }
    )
    sm = one(objects, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()

    objects = render(**{"metrics.enabled": False, "metrics.serviceMonitor.enabled": True})
    assert not of_kind(objects, "Service") and not of_kind(objects, "ServiceMonitor")
    assert "KERASJOB_METRICS_PORT" not in env_of(container(objects))


# --- values.schema.json -------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 0},
        {"replicaCount": "two"},
        {"watchNamespaces": ["Not_A_Namespace"]},
        {"watchNamespaces": "team-a"},
        {"trainerImage.variant": "tpu"},
        {"trainerImage.jaxImage": 3},
        {"verbose": "yes"},
        {"metrics.port": 70000},
        {"metrics.serviceMonitor.interval": "often"},
        {"image.pullPolicy": "Sometimes"},
        {"liveness.path": "healthz"},
        {"unknownKey": True},
        {"metrics.serviceMonitor.enable": True},  # a typo of "enabled"
    ],
    ids=lambda v: next(iter(v)),
)
def test_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    proc = helm("template", "kj", str(CHART), *set_args(values), check=False)
    assert proc.returncode != 0, f"{values} was accepted"
    assert "schema" in proc.stderr, proc.stderr


def test_readme_permission_table_matches_the_rules() -> None:
    readme = (CHART / "README.md").read_text()
    table = {
        res: {v.strip() for v in verbs.split(",")}
        for res, verbs in re.findall(r"^\| `([a-z/]+)` \| ([a-z, ]+) \|", readme, re.M)
    }
    expected = {key.split("/", 1)[1]: verbs for key, verbs in NAMESPACED_PERMISSIONS.items()}
    assert table == expected


@needs_helm
def test_network_policy_env_and_rbac_follow_the_switch() -> None:
    mon = {"namespaceSelector": {"matchLabels": {"team": "mon"}}}
    objects = render(**{"networkPolicy.metricsFrom": [mon]})
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["KERASJOB_NETWORK_POLICY"] == "true"
    peers = json.loads(env["KERASJOB_METRICS_FROM"])
    assert peers[0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "kerasjob-system"}
    }
    assert peers[0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "kerasjob-operator"
    assert peers[1:] == [mon]
    off = render(**{"networkPolicy.enabled": False})
    env = {e["name"]: e.get("value") for e in container(off)["env"]}
    assert env["KERASJOB_NETWORK_POLICY"] == "false" and "KERASJOB_METRICS_FROM" not in env
    assert "networking.k8s.io/networkpolicies" not in rules_by_resource(one(off, "ClusterRole"))


@needs_helm
def test_secrets_rule_follows_the_switch() -> None:
    """Only get on Secrets (the one a job's checkpoint.credentials names), and none when
    checkpointSecrets.check is off."""
    assert rules_by_resource(one(render(), "ClusterRole"))["/secrets"] == {"get"}
    off = render(**{"checkpointSecrets.check": False})
    assert "/secrets" not in rules_by_resource(one(off, "ClusterRole"))
    for role in of_kind(render(watchNamespaces=["team-a"]), "Role"):
        assert rules_by_resource(role)["/secrets"] == {"get"}


@needs_helm
def test_elastic_probe_priority_class() -> None:
    objects = render()
    pc = one(objects, "PriorityClass")
    assert (pc["value"], pc["preemptionPolicy"], pc["globalDefault"]) == (-1, "Never", False)
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert (
        env["KERASJOB_PROBE_PRIORITY_CLASS"]
        == pc["metadata"]["name"]
        == ("kj-kerasjob-operator-elastic-probe")
    )
    off = render(**{"elastic.probePriorityClass": False})
    assert not of_kind(off, "PriorityClass")
    assert {e["name"]: e.get("value") for e in container(off)["env"]}[
        "KERASJOB_PROBE_PRIORITY_CLASS"
    ] == ""
