"""The generated CRD: committed file == generated (drift), structural, documented."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob.api import KerasJobSpec
from kerasjob.tools import crdgen

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "crds" / crdgen.FILENAME


def _schema() -> dict[str, Any]:
    return crdgen.render_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}[*]")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")


def test_committed_crd_is_up_to_date() -> None:
    assert COMMITTED.exists(), "run `make crds`"
    assert COMMITTED.read_text() == crdgen.dump(crdgen.render_crd()), (
        "crds/ drifted from operator/kerasjob/api.py: run `make crds`"
    )


def test_check_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 1  # missing
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 0
    out = tmp_path / crdgen.FILENAME
    out.write_text(out.read_text().replace("default: 2222", "default: 2223"))
    capsys.readouterr()
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 1
    diff = capsys.readouterr().out
    assert "-                default: 2223" in diff and "+                default: 2222" in diff


def test_crd_identity() -> None:
    crd = crdgen.render_crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "kerasjobs.kerasjob.dev"
    spec = crd["spec"]
    assert spec["group"] == "kerasjob.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "KerasJob" and spec["names"]["plural"] == "kerasjobs"
    assert spec["names"]["shortNames"] == ["kj"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    columns = {
        c["name"]: c for c in crdgen.render_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Ready"]["jsonPath"] == ".status.replicaStatuses.worker.ready"
    assert columns["Workers"]["jsonPath"] == ".spec.workers"
    assert columns["Disruptions"]["jsonPath"] == ".status.restarts.disruptions"
    assert columns["Failures"]["jsonPath"] == ".status.restarts.failures"
    assert columns["Step"]["jsonPath"] == ".status.progress.step"
    assert columns["Age"]["type"] == "date"
    # every column points at a field of the schema
    schema = _schema()
    paths = {p for p, _ in _walk(schema)} | {".metadata.creationTimestamp"}
    for c in columns.values():
        # a condition filter (the Kueue column) points into the conditions list
        path = re.sub(r"\[\?\(@\.type==\"\w+\"\)\]", "[]", c["jsonPath"])
        assert path.replace(".worker.", "[*].") in paths, c
    assert columns["Kueue"]["jsonPath"] == '.status.conditions[?(@.type=="Admitted")].message'


def test_schema_is_structural() -> None:
    for path, node in _walk(_schema()):
        for key in ("$ref", "$defs", "anyOf", "allOf", "oneOf", "title", "nullable"):
            assert key not in node, f"{path or '<root>'}: {key}"
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert "type" in node, f"{path}: every node needs a type"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path
        if isinstance(node.get("default"), dict) and "properties" in node:
            # complete: the API server checks a default against CEL before nested defaulting
            assert node["default"] == {
                k: s["default"] for k, s in node["properties"].items() if "default" in s
            }, path
        if node.get("x-kubernetes-list-type") == "map":
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in node["items"]["required"], path


def test_every_field_is_documented() -> None:
    for path, node in _walk(_schema()):
        if path in ("", ".metadata") or path.endswith("[*]") or path.endswith("[]"):
            continue
        assert node.get("description"), f"{path} has no description"


def test_defaults_are_in_the_schema() -> None:
    spec = _schema()["properties"]["spec"]
    props = spec["properties"]
    assert spec["default"] == KerasJobSpec().model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    assert props["workers"]["default"] == 1
    assert props["port"]["default"] == 2222
    assert props["restartPolicy"]["default"] == "OnFailure"
    assert props["cleanPodPolicy"]["default"] == "Running"
    assert props["backoffLimit"]["default"] == 6
    assert props["suspend"]["default"] is False
    assert props["trainer"]["default"]["dataset"] == {"source": "mnist-sample"}
    assert props["trainer"]["properties"]["epochs"]["default"] == 3
    assert (
        props["trainer"]["properties"]["dataset"]["properties"]["source"]["default"]
        == "mnist-sample"
    )
    assert props["checkpoint"]["properties"]["mountPath"]["default"] == "/kerasjob/checkpoint"
    assert props["checkpoint"]["properties"]["saveFreq"]["default"] == 100
    assert "default" not in props["chief"] and "default" not in props["image"]


def test_templates_preserve_unknown_fields() -> None:
    props = _schema()["properties"]["spec"]["properties"]
    for node in (
        props["template"],
        props["chief"]["properties"]["template"],
        props["checkpoint"]["properties"]["volume"]["additionalProperties"],
    ):
        assert node == {**node, "type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _rules() -> dict[str, dict[str, str]]:
    return {
        f"{path}:{r['message']}": r
        for path, node in _walk(_schema())
        for r in node.get("x-kubernetes-validations", [])
    }


def test_cel_rules_have_messages_and_cover_the_cross_field_rules() -> None:
    rules = _rules()
    for key, rule in rules.items():
        assert rule["message"] and "\n" not in rule["message"], key
    text = "\n".join(rules)
    for expected in (
        ".spec.workers:workers is immutable",
        ".spec.port:port is immutable",
        ".spec.trainer:trainer is immutable",
        ".spec.checkpoint:checkpoint is immutable",
        ".spec:chief cannot be added",
        ".spec:evaluator cannot be added",
        ".spec:a job with more than one Pod needs a shared checkpoint.volume",
        ".spec:managedBy is immutable",
        ".spec.trainer.dataset:dataset.path is required",
        ".spec.checkpoint:checkpoint.mountPath must be an absolute path",
        ".spec.checkpoint.volume:checkpoint.volume must have exactly one volume source key",
        ".spec.trainer:trainer.model must be",
        ":metadata.name must be a DNS-1035 label",
        ":metadata.name is too long",
    ):
        assert any(k.startswith(expected) for k in rules), expected
    assert text


def test_mutable_fields_have_no_transition_rules() -> None:
    props = _schema()["properties"]["spec"]["properties"]
    for name in (
        "suspend",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "backoffLimit",
        "template",
        "image",
        "restartPolicy",
        "cleanPodPolicy",
    ):
        assert "x-kubernetes-validations" not in props[name], name


def test_yaml_is_loadable_and_has_a_header() -> None:
    text = crdgen.dump(crdgen.render_crd())
    assert text.startswith("# Generated by `make crds`")
    assert yaml.safe_load(text) == crdgen.render_crd()


def test_backend_is_an_enum_with_a_default_and_jax_rules() -> None:
    """spec.trainer.backend: tensorflow | jax, default tensorflow; with jax the CRD's CEL
    rejects a chief and an evaluator replica, in the operator's words."""
    from kerasjob.api import JAX_NO_CHIEF, JAX_NO_EVALUATOR

    spec = _schema()["properties"]["spec"]
    backend = spec["properties"]["trainer"]["properties"]["backend"]
    assert backend["type"] == "string"
    assert backend["enum"] == ["tensorflow", "jax"]
    assert backend["default"] == "tensorflow"
    assert spec["properties"]["trainer"]["default"]["backend"] == "tensorflow"
    assert spec["default"]["trainer"]["backend"] == "tensorflow"
    rules = {r["message"]: r["rule"] for r in spec["x-kubernetes-validations"]}
    assert rules[JAX_NO_CHIEF] == (
        "self.trainer.backend != 'jax' || !has(self.chief) || self.chief.replicas == 0"
    )
    assert rules[JAX_NO_EVALUATOR] == (
        "self.trainer.backend != 'jax' || !has(self.evaluator) || self.evaluator.replicas == 0"
    )
    # immutable with the rest of spec.trainer
    assert any(
        r["message"] == "trainer is immutable"
        for r in spec["properties"]["trainer"]["x-kubernetes-validations"]
    )
    committed = yaml.safe_load(COMMITTED.read_text())
    served = committed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert served["properties"]["trainer"]["properties"]["backend"]["enum"] == ["tensorflow", "jax"]
