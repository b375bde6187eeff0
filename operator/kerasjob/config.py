"""The operator's settings: command-line flags, with environment-variable defaults.

Every flag of `kerasjob run` has a ``KERASJOB_*`` variable so the Helm chart can set it
through the Deployment's env.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from kerasjob_contract.images import trainer_image

#: The trainer image used when neither spec.image nor the template names one (backend
#: tensorflow: tf-keras on TensorFlow); the names: kerasjob_contract.images.
DEFAULT_TRAINER_IMAGE = trainer_image("cpu")
#: The same for spec.trainer.backend jax: Keras 3 on JAX, an image without TensorFlow.
DEFAULT_JAX_TRAINER_IMAGE = trainer_image("jax-cpu")


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class OperatorConfig:
    """How the operator runs."""

    namespaces: tuple[str, ...] = ()
    """Namespaces (kopf globs) to watch; empty means all namespaces."""
    default_image: str = field(
        default_factory=lambda: _env("KERASJOB_DEFAULT_IMAGE", DEFAULT_TRAINER_IMAGE)
    )
    """The trainer image of backend tensorflow jobs that name none (spec.image, template)."""
    default_jax_image: str = field(
        default_factory=lambda: _env("KERASJOB_DEFAULT_JAX_IMAGE", DEFAULT_JAX_TRAINER_IMAGE)
    )
    """The same for backend jax. Each runtime says which of these is its own
    (`runtimes.Runtime.default_image_setting`)."""
    workers: int = field(default_factory=lambda: int(_env("KERASJOB_WORKERS", "8")))
    """Jobs reconciled concurrently."""
    resync_seconds: float = field(
        default_factory=lambda: float(_env("KERASJOB_RESYNC_SECONDS", "60"))
    )
    """Every job is reconciled at least this often, events or not."""
    force_delete_after: float = field(
        default_factory=lambda: float(_env("KERASJOB_FORCE_DELETE_AFTER", "30"))
    )
    """Seconds past a Pod's deletionTimestamp (grace included) before it is force-deleted."""
    node_lost_toleration_seconds: int | None = field(
        default_factory=lambda: (
            int(v)
            if (v := _env("KERASJOB_NODE_LOST_TOLERATION_SECONDS", "60")) not in ("", "-1")
            else None
        )
    )
    """tolerationSeconds of the trainer Pods for a NotReady/unreachable node (NoExecute):
    how long a job waits for a node that stopped answering before its Pods are evicted and
    the group restarts elsewhere. Kubernetes' default is 300 s; None keeps it. A template's
    own toleration for these taints wins."""
    progress_interval: float = field(
        default_factory=lambda: float(_env("KERASJOB_PROGRESS_INTERVAL", "10"))
    )
    """Seconds between scrapes of a running job's chief metrics (0 disables)."""
    progress_timeout: float = field(
        default_factory=lambda: float(_env("KERASJOB_PROGRESS_TIMEOUT", "1"))
    )
    kubeconfig: str | None = None
    """A kubeconfig file; None: $KUBECONFIG, ~/.kube/config, else in-cluster."""
    context: str | None = None
    liveness: str | None = field(
        default_factory=lambda: os.environ.get("KERASJOB_LIVENESS", "http://0.0.0.0:8080/healthz")
    )
    """kopf's liveness endpoint URL; it also serves the probes (API request counts)."""
    metrics_port: int | None = field(
        default_factory=lambda: (
            int(os.environ["KERASJOB_METRICS_PORT"])
            if os.environ.get("KERASJOB_METRICS_PORT")
            else None
        )
    )
    """Port of the operator's Prometheus endpoint (/metrics); None: no endpoint."""
    instance: str = field(default_factory=lambda: _env("POD_NAME", ""))
    """This replica's name in Events (reportingInstance); the chart sets POD_NAME."""
    peering: str | None = field(default_factory=lambda: os.environ.get("KERASJOB_PEERING"))
    """A kopf peering name for several replicas (needs kopf's peering CRDs); None: standalone."""
    priority: int = field(default_factory=lambda: int(_env("KERASJOB_PRIORITY", "0")))
    network_policy: bool = field(
        default_factory=lambda: (
            _env("KERASJOB_NETWORK_POLICY", "true").lower() not in ("0", "false", "no", "off")
        )
    )
    """Create a NetworkPolicy per job: its TF port reachable only from its own Pods."""
    metrics_from: tuple[dict[str, Any], ...] = field(
        default_factory=lambda: tuple(json.loads(_env("KERASJOB_METRICS_FROM", "[]")))
    )
    """NetworkPolicyPeers allowed to the trainers' metrics port (the operator itself,
    Prometheus); JSON in $KERASJOB_METRICS_FROM (the chart writes it). Empty: nobody."""
    kueue: bool = field(default_factory=lambda: _env("KERASJOB_KUEUE", "") in ("1", "true"))
    """Integrate with Kueue (needs its CRDs): jobs labelled kueue.x-k8s.io/queue-name wait
    for their Workload's admission (see `kueue`)."""
    gang_scheduling: bool = field(
        default_factory=lambda: _env("KERASJOB_GANG_SCHEDULING", "") in ("1", "true")
    )
    """Native gang scheduling (Kubernetes 1.36 alpha, `gang`): each job's Pods in one
    PodGroup, bound all together or not at all. Needs scheduling.k8s.io/v1alpha2 served and
    the GenericWorkload and GangScheduling gates (checked at start-up)."""
    probe_priority_class: str = field(
        default_factory=lambda: _env("KERASJOB_PROBE_PRIORITY_CLASS", "kerasjob-elastic-probe")
    )
    """The PriorityClass of elastic jobs' probe Pods (made with priority -1 if missing, as
    cluster-autoscaler's over-provisioning placeholders are): any Pod of default priority
    goes first and pre-empts a probe holding its place. Empty: probes get none."""
    verbose: bool = False
