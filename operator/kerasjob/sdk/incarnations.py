"""The logs of a replica's earlier trainer incarnations, read from the job's checkpoint volume.

The container's supervisor writes each incarnation's output to
<checkpoint dir>/logs/<role>-<index>/<NNNN>.log (kerasjob_contract.LOGS_SUBDIR), numbered
across in-place restarts and Pod re-creations. The API serves a Pod's log only while the Pod
exists, so these files are read by a short-lived reader Pod: the job's trainer image, the
job's checkpoint volume mounted read-only (on the node of one of the job's Pods, if one
exists: a ReadWriteOnce claim or a hostPath can be read there), printing the chosen files;
its log is read through the API and the Pod is deleted. Needs what `kubectl run` and
`kubectl logs` need: create, get and delete Pods, get pods/log.

Which files: ``previous`` is the incarnation before the one `kerasjob logs` shows (the one
before the last file while the replica's container runs or ran, else the last file);
``all`` is every kept one, oldest first.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping
from typing import Any

from kerasjob.api import KerasJob, checkpoint_dir, labels
from kerasjob.k8s.paths import pod_path
from kerasjob.sdk import logs as _logs
from kerasjob.sdk.errors import KerasJobError, NotFoundError
from kerasjob.sdk.transport import Transport
from kerasjob_contract import LOGS_SUBDIR, TRAINER_CONTAINER

#: Seconds the reader Pod may take to start, print and end.
READER_TIMEOUT_SECONDS = 120.0
READER_MOUNT = "/kerasjob-checkpoint"
#: Printed by the reader for every file before its lines: `\x02<replica>/<file>`.
FILE_MARK = "\x02"

#: The reader's program (argv: the logs directory, "previous" or "all", then one
#: "<replica>:<skip>" per replica; skip: newest files not to consider, 1 while the replica's
#: Pod exists and `kerasjob logs` shows its newest file). Python: the trainer image has it.
READER = """
import os, sys
base, which = sys.argv[1], sys.argv[2]
found = 0
for arg in sys.argv[3:]:
    replica, _, skip = arg.rpartition(":")
    d = os.path.join(base, replica)
    names = sorted(f for f in (os.listdir(d) if os.path.isdir(d) else [])
                   if f.endswith(".log") and f[:-4].isdigit())
    names = names[: len(names) - int(skip)]
    for name in names[-1:] if which == "previous" else names:
        found += 1
        print("\\x02" + replica + "/" + name, flush=True)
        with open(os.path.join(d, name), "rb") as f:
            for line in f:
                sys.stdout.buffer.write(line)
        sys.stdout.flush()
if not found:
    print("\\x02-", flush=True)
"""


def reader_pod(
    job: KerasJob,
    which: str,
    replicas: Mapping[str, int],
    seen_pod: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The reader Pod for `replicas` (replica -> newest files to skip) of `job`."""
    volume = job.spec.checkpoint.volume
    location = job.spec.checkpoint.location
    if location is not None:
        raise KerasJobError(
            f"KerasJob {job.name!r} checkpoints to a bucket ({location}): the logs of earlier "
            f"incarnations are read from a checkpoint volume only"
        )
    if not volume or "emptyDir" in volume:
        raise KerasJobError(
            f"KerasJob {job.name!r} keeps its checkpoint in an emptyDir: the logs of earlier "
            f"incarnations went with their Pods (give it a checkpoint volume)"
        )
    pod_spec = (seen_pod or {}).get("spec") or {}
    containers = pod_spec.get("containers") or []
    trainer: dict[str, Any] = next(
        (c for c in containers if c.get("name") == TRAINER_CONTAINER), {}
    )
    image = trainer.get("image") or job.spec.image
    if not image:
        raise KerasJobError(
            f"KerasJob {job.name!r} has no Pod and no spec.image: which image would "
            f"read its checkpoint volume is unknown"
        )
    job_dir = checkpoint_dir(job.spec.checkpoint.mount_path, job.namespace, job.name, job.uid)
    relative = job_dir[len(job.spec.checkpoint.mount_path.rstrip("/")) :]
    logs_dir = f"{READER_MOUNT}{relative}/{LOGS_SUBDIR}"
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "read",
                "image": image,
                "command": ["python", "-c", READER, logs_dir, which]
                + [f"{r}:{skip}" for r, skip in replicas.items()],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "checkpoint", "mountPath": READER_MOUNT, "readOnly": True}
                ],
            }
        ],
        "volumes": [{"name": "checkpoint", **volume}],
    }
    for key in ("nodeName", "imagePullSecrets", "tolerations"):
        if pod_spec.get(key):
            spec[key] = pod_spec[key]
    if pod_spec.get("securityContext"):  # the job's (e.g. runAsNonRoot false for a root image)
        spec["securityContext"] = pod_spec["securityContext"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job.name[:40]}-logs-{uuid.uuid4().hex[:6]}",
            "namespace": job.namespace,
            "labels": {"app.kubernetes.io/managed-by": "kerasjob-cli"},
        },
        "spec": spec,
    }


def parse_output(lines: list[str], job_name: str) -> list[_logs.LogLine]:
    """The reader's output -> LogLines, each with its replica's Pod name."""
    out: list[_logs.LogLine] = []
    pod = ""
    for line in lines:
        if line.startswith(FILE_MARK):
            replica = line[1:].partition("/")[0]
            pod = "" if replica == "-" else f"{job_name}-{replica}"
            continue
        if pod:
            out.append(_logs.LogLine(pod, line))
    return out


def read(
    transport: Transport,
    job: KerasJob,
    pods: list[str],
    which: str,
    *,
    timeout: float = READER_TIMEOUT_SECONDS,
) -> list[_logs.LogLine]:
    """The kept logs of `pods` (the job's Pod names): "previous" or "all" (module doc)."""
    if which not in ("previous", "all"):
        raise ValueError(f"which must be 'previous' or 'all', not {which!r}")
    ns = job.namespace
    found = {pod: transport.get(pod_path(ns, pod)) for pod in pods}
    # "previous" skips the newest file of a replica whose container runs or ran: its log
    # shows that one.
    replicas = {
        pod[len(job.name) + 1 :]: int(
            which == "previous" and _logs.container_started(found[pod] or {})
        )
        for pod in pods
    }
    seen = next((p for p in found.values() if p is not None), None) or _any_job_pod(transport, job)
    body = reader_pod(job, which, replicas, seen)
    name = body["metadata"]["name"]
    transport.request("POST", pod_path(ns), body=body)
    try:
        phase = _wait_finished(transport, ns, name, timeout)
        lines = [ln.text for ln in _logs.read_pod_log(transport, ns, name, container="read")]
    finally:
        with contextlib.suppress(NotFoundError):
            transport.request("DELETE", pod_path(ns, name), body={"gracePeriodSeconds": 0})
    if phase != "Succeeded":
        tail = "\n".join(lines[-10:])
        raise KerasJobError(f"the log reader Pod {name} ended {phase}:\n{tail}")
    return parse_output(lines, job.name)


def _any_job_pod(transport: Transport, job: KerasJob) -> dict[str, Any] | None:
    listed = transport.request(
        "GET",
        pod_path(job.namespace),
        query={"labelSelector": f"{labels.JOB_NAME}={job.name}"},
    )
    items = listed.get("items") or []
    return items[0] if items else None


def _wait_finished(transport: Transport, ns: str, name: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    waiting = ""
    while time.monotonic() < deadline:
        pod = transport.get(pod_path(ns, name)) or {}
        status = pod.get("status") or {}
        phase = str(status.get("phase") or "")
        if phase in ("Succeeded", "Failed"):
            return phase
        for cs in status.get("containerStatuses") or []:
            w = (cs.get("state") or {}).get("waiting") or {}
            waiting = f"{w.get('reason', '')}: {w.get('message', '')}" if w else waiting
        time.sleep(0.5)
    raise KerasJobError(
        f"the log reader Pod {name} did not finish in {timeout:g} s"
        + (f" ({waiting})" if waiting else "")
    )
