"""A Python function as a KerasJob, without building an image.

The function's source is shipped in a ConfigMap that every Pod mounts on PYTHONPATH, and the
bundled trainer imports it as ``spec.trainer.model: "kerasjob_user_code:<function>"`` (the
user-code contract of trainer_image/README.md, as `examples/user-code-configmap.yaml` does
by hand). The ConfigMap is owned by the job, so it is deleted with it.

    def build(config):                       # imports inside: only this source is shipped
        import tf_keras as keras
        model = keras.Sequential([...])
        model.compile(...)
        return model                         # or (model, train_ds[, test_ds])

    client.train(build, "my-run", workers=2, trainer={"epochs": 2},
                 spec={"checkpoint": {"volume": {"persistentVolumeClaim": {...}}}})
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kerasjob.api import KerasJob
from kerasjob.k8s.paths import configmap_path
from kerasjob.manifests.merge import deep_merge
from kerasjob.sdk.errors import InvalidError, KerasJobError
from kerasjob.sdk.transport import Transport
from kerasjob_contract import TRAINER_CONTAINER

MODULE = "kerasjob_user_code"
MOUNT_PATH = "/opt/kerasjob-user"
VOLUME = "kerasjob-user-code"
#: A ConfigMap holds at most 1 MiB.
MAX_SOURCE_BYTES = 1 << 20


def function_source(build: Callable[..., Any], dataset: Callable[..., Any] | None = None) -> str:
    """The module shipped for ``build`` (and an optional ``dataset(config)`` function)."""
    parts = []
    for fn in (build, dataset):
        if fn is None:
            continue
        if fn.__name__ == "<lambda>" or not inspect.isfunction(fn):
            raise InvalidError(0, f"{fn!r}: only a named function (def ...) can be shipped")
        try:
            parts.append(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError) as e:
            raise InvalidError(0, f"cannot read the source of {fn.__name__}: {e}") from None
    if dataset is not None and dataset.__name__ != "dataset":
        parts.append(f"dataset = {dataset.__name__}\n")
    source = '"""Shipped by kerasjob.sdk.function."""\n\n' + "\n\n".join(parts)
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise InvalidError(0, "the function's source is over 1 MiB (a ConfigMap's limit)")
    return source


def function_job(
    build: Callable[..., Any],
    name: str,
    *,
    workers: int = 1,
    trainer: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> KerasJob:
    """The KerasJob that runs ``build`` from the ConfigMap ``<name>-code`` (not created)."""
    template = {
        "spec": {
            "containers": [
                {
                    "name": TRAINER_CONTAINER,
                    "env": [{"name": "PYTHONPATH", "value": MOUNT_PATH}],
                    "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}],
                }
            ],
            "volumes": [{"name": VOLUME, "configMap": {"name": code_configmap(name)}}],
        }
    }
    extra = dict(spec or {})
    if extra.get("template"):
        template = deep_merge(template, extra.pop("template"))
    body = {
        "metadata": {"name": name},
        "spec": {
            **extra,
            "workers": workers,
            "trainer": {**(trainer or {}), "model": f"{MODULE}:{build.__name__}"},
            "template": template,
        },
    }
    return KerasJob.model_validate(body)


def code_configmap(job_name: str) -> str:
    return f"{job_name}-code"


class JobCreator(Protocol):
    """What `submit_function` needs of a client (`KerasJobClient` is one)."""

    namespace: str
    transport: Transport

    def create(self, job: KerasJob, *, namespace: str | None = None) -> KerasJob: ...


def submit_function(
    client: JobCreator,
    build: Callable[..., Any],
    name: str,
    *,
    namespace: str | None = None,
    workers: int = 1,
    trainer: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
    dataset: Callable[..., Any] | None = None,
) -> KerasJob:
    """Create the code ConfigMap, then the job, then make the job own the ConfigMap.

    ``trainer``: spec.trainer fields (camelCase or snake_case; model is set here);
    ``spec``: any other spec fields (checkpoint, image, template ...)."""
    ns = namespace or client.namespace
    source = function_source(build, dataset)
    job = function_job(build, name, workers=workers, trainer=trainer, spec=spec)
    t = client.transport
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": code_configmap(name),
            "namespace": ns,
            "labels": {"kerasjob.dev/job-name": name},
        },
        "data": {f"{MODULE}.py": source},
    }
    t.request("POST", configmap_path(ns), body=cm)
    try:
        created = client.create(job, namespace=ns)
    except KerasJobError:
        t.request("DELETE", configmap_path(ns, code_configmap(name)))
        raise
    owner = {
        "apiVersion": created.api_version,
        "kind": created.kind,
        "name": created.name,
        "uid": created.uid,
        "controller": False,
        "blockOwnerDeletion": False,
    }
    t.request(
        "PATCH",
        configmap_path(ns, code_configmap(name)),
        body={"metadata": {"ownerReferences": [owner]}},
        content_type="application/merge-patch+json",
    )
    return created
