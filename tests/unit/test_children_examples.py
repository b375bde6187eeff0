"""Every KerasJob in examples/ passes validate_job and renders to Pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob.manifests import children, validation

ROOT = Path(__file__).resolve().parents[2]


def _examples() -> list[Any]:
    out = []
    for path in sorted((ROOT / "examples").glob("**/*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "KerasJob":
                out.append(pytest.param(doc, id=f"{path.name}:{doc['metadata']['name']}"))
    return out or [pytest.param(None, marks=pytest.mark.skip(reason="no examples yet"))]


@pytest.mark.parametrize("doc", _examples())
def test_example_is_valid_and_renders(doc: dict[str, Any]) -> None:
    doc = {**doc, "metadata": {"namespace": "default", "uid": "u", **doc["metadata"]}}
    assert validation.validate_job(doc) == []
    pods = children.desired_pods(doc, default_image="kerasjob/trainer:test")
    assert pods and all(children.is_dns_label(p["metadata"]["name"]) for p in pods)
    assert children.build_service(doc)["metadata"]["name"] == doc["metadata"]["name"]
