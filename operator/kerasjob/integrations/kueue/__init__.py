"""Kueue integration, the pure part: what a KerasJob's Workload is, what its state means for
the job, and which writes to it are due (`decisions`). The I/O is `kueue.sync`'s.

Modules: `names` (constants, names, reads of a Workload), `workloads` (its body, its
shape), `admission` (the gate), `flavors` (what an admission adds to the Pods), `statuses`
(the Workload status writes), `slicing` (an elastic job's slices), `decisions` (which
writes are due, as actions); this package re-exports their public names. `sync` (the
I/O: the `Integration`) is imported by name, never from here.

A KerasJob labelled ``kueue.x-k8s.io/queue-name`` is a Kueue workload of an *external
framework* (Kueue's ``integrations.externalFrameworks: [KerasJob.v1alpha1.kerasjob.dev]``):
Kueue brings no controller or webhook for it, so the operator plays Kueue's job-framework
part itself (`GenericJob` in Kueue's pkg/controller/jobframework):

* it creates the job's Workload (owned by the job; one podSet per role with its count and
  Pod template; ``kueue.x-k8s.io/priority-class`` becomes the Workload's priority);
* the job is held, with no Pods, until the Workload is admitted (`gate`); the planner
  treats a held job exactly like ``spec.suspend`` (Pods deleted with their grace period, the
  trainer saves on SIGTERM; no restart counted);
* on admission the Pods get the assigned flavors' node labels and tolerations and the
  admission checks' podSetUpdates (`pod_set_updates`, `apply_update`);
* an eviction (Workload ``Evicted``: preemption, waitForPodsReady timeout, deactivation...)
  holds the job again; once its Pods are gone the operator gives the quota back
  (`release_status`), as Kueue's job reconciler does, and Kueue re-queues the Workload;
* the Workload's ``PodsReady`` follows the job's Pods (`pods_ready_status`), for Kueue's
  ``waitForPodsReady``; a job whose roles or replicas change gets a new Workload (`matches`);
* when the job ends the Workload gets ``Finished`` (`finished_status`).

An elastic job (spec.elastic) is an elastic Kueue workload (Kueue's
``ElasticJobsViaWorkloadSlices``): its Workload is marked ``kueue.x-k8s.io/elastic-job`` and
counts the job's *current* workers (status.elastic.workers), so Kueue charges what runs.

* **Shrink**: the admitted Workload's worker count is lowered in place (`shrunk_pod_sets`;
  Kueue's webhook allows a decrease with the gate on, and its cache then charges the smaller
  count: ``totalRequestsFromAdmission`` scales the admitted usage down to spec.podSets). With
  the gate off the update is refused and the workers go back through
  ``status.reclaimablePods`` instead (`reclaimable_status`: never given back while admitted).
* **Grow**: the job grows only once Kueue admitted a *workload slice* of the bigger size: a
  new Workload (`build_workload` with ``replaces``), annotated
  ``kueue.x-k8s.io/workload-slice-replacement-for: <ns>/<current slice>``, which Kueue's
  scheduler admits counting the current slice's quota as its own, and then finishes the
  current slice (Finished, ``WorkloadSliceReplaced``). `slices` tells the current slice, a
  pending grow slice and old slices still to finish (when the scheduler did not: the gate
  off) from the job's Workloads; slice names are deterministic (`slice_name`).
"""

from __future__ import annotations

from kerasjob.integrations.kueue.admission import (
    ADMITTING_GRACE_SECONDS,
    admitting_left,
    gate,
    gate_of,
)
from kerasjob.integrations.kueue.flavors import (
    PodSetUpdate,
    apply_update,
    assigned_flavors,
    pod_set_updates,
)
from kerasjob.integrations.kueue.names import (
    ADMITTED,
    ELASTIC_ANNOTATION,
    EVICTED,
    FINISHED,
    GROUP,
    JOB_UID_LABEL,
    PODS_READY,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    QUOTA_RESERVED,
    REPLACEMENT_FOR_ANNOTATION,
    REQUEUED,
    SLICE_ANNOTATION,
    SLICE_NAME_ANNOTATION,
    VERSION,
    WORKER,
    WORKLOADS,
    admitted_workers,
    condition,
    finished,
    is_true,
    owned_by,
    pod_set_counts,
    queue_name,
    reclaimable,
    reserved,
    slice_name,
    slice_serial,
    workload_key,
    workload_name,
)
from kerasjob.integrations.kueue.reasons import WorkloadReason
from kerasjob.integrations.kueue.slicing import Slices, slices
from kerasjob.integrations.kueue.statuses import (
    finished_status,
    pods_ready_status,
    reclaimable_status,
    release_status,
    replaced_status,
)
from kerasjob.integrations.kueue.workloads import (
    build_workload,
    matches,
    same_shape,
    shrunk_pod_sets,
)

__all__ = [
    "ADMITTED",
    "ADMITTING_GRACE_SECONDS",
    "ELASTIC_ANNOTATION",
    "EVICTED",
    "FINISHED",
    "GROUP",
    "JOB_UID_LABEL",
    "PODS_READY",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "QUOTA_RESERVED",
    "REPLACEMENT_FOR_ANNOTATION",
    "REQUEUED",
    "SLICE_ANNOTATION",
    "SLICE_NAME_ANNOTATION",
    "VERSION",
    "WORKER",
    "WORKLOADS",
    "PodSetUpdate",
    "Slices",
    "WorkloadReason",
    "admitted_workers",
    "admitting_left",
    "apply_update",
    "assigned_flavors",
    "build_workload",
    "condition",
    "finished",
    "finished_status",
    "gate",
    "gate_of",
    "is_true",
    "matches",
    "owned_by",
    "pod_set_counts",
    "pod_set_updates",
    "pods_ready_status",
    "queue_name",
    "reclaimable",
    "reclaimable_status",
    "release_status",
    "replaced_status",
    "reserved",
    "same_shape",
    "shrunk_pod_sets",
    "slice_name",
    "slice_serial",
    "slices",
    "workload_key",
    "workload_name",
]
