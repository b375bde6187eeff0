"""What the controller knows of a job when it reconciles it: one snapshot from kopf's
indices plus the operator's own writes the indices have not delivered yet.

* `WriteCache` -- the response of our last status write per job, used while the index still
  shows an older resourceVersion of the same job (so a reconcile right after a write never
  decides on the state before it).
* `Expectations` -- children we created and the index does not show yet (client-go's
  "expectations"): no create is sent for them again. An expectation ends when the index
  shows the name, when a watch event for the name arrives (`seen`: also a DELETE of a Pod
  removed before the index ever showed it, which would otherwise hold its re-creation
  back), or at its deadline. They are read with the index, in the same step (`pending`):
  a watch event handled later in the reconcile (while the status write is awaited) ends an
  expectation the snapshot's index does not reflect yet, and must not let the plan made on
  that snapshot create the Pod again (409 AlreadyExists).
* `Observed` -- the snapshot itself; `Controller.observe` makes it.
* `ChildView` -- the job's Service or NetworkPolicy as its index holds it: the spec fields
  the operator sets, to see one changed by someone else (`manifests.drift`).
* `Restores` -- the children whose spec we just patched back, until the index shows it.
* `index_behind` -- the one check that asks the API server instead of the index: whether a
  Pod incarnation the status recorded still exists although the index does not show it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kerasjob.api import wire
from kerasjob.control.jobview import ParsedJob
from kerasjob.integrations.integration import JobIntegration
from kerasjob.k8s import bounded
from kerasjob.k8s.kube import KubeApi
from kerasjob.k8s.paths import pod_path
from kerasjob.k8s.workqueue import Key
from kerasjob.manifests import drift
from kerasjob.planner.planning import (
    Action,
    CreatePod,
    CreateProbe,
    CreateService,
    JobView,
    newest_incarnations,
)
from kerasjob.planner.podview import PodView
from kerasjob.planner.status import TERMINAL_PHASES

#: Seconds a created child counts as existing before the index shows it.
EXPECTATION_SECONDS = 30.0
#: The name under which the job's Service is expected (Pods use their own names).
SERVICE = "\0service"
#: The name under which the job's NetworkPolicy is expected.
NETWORK_POLICY = "\0networkpolicy"
#: The job's children other than Pods, by kind: the names they are expected under. Both are
#: named after the job and made by one action (`CreateService`).
SHARED_CHILDREN = {"Service": SERVICE, "NetworkPolicy": NETWORK_POLICY}


def resource_version(body: Mapping[str, Any] | None) -> int:
    try:
        return int((body or {}).get("metadata", {}).get("resourceVersion", "0"))
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class ChildView:
    """A Service or NetworkPolicy of a job as its index holds it (`child_view`)."""

    name: str
    uid: str
    resource_version: int
    spec: Mapping[str, Any]
    """The spec fields the operator sets (`drift.owned_spec`), as the API server holds them."""


def child_view(kind: str, body: Mapping[str, Any]) -> ChildView:
    """What the index keeps of a ``kind`` ("Service", "NetworkPolicy") of a job."""
    meta = body.get("metadata") or {}
    return ChildView(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=resource_version(body),
        # A plain copy (kopf's body is a read-only view), bounded as every body is.
        spec=bounded.plain_copy(drift.owned_spec(kind, body)),
    )


class Restores:
    """The job's children whose spec we patched back (or tried to: a refusal is not tried
    again on the same version), with the resourceVersion that left them: until the index
    shows a newer one, the index's older spec is not a difference again (no second patch,
    no second Event)."""

    def __init__(self) -> None:
        self._done: dict[tuple[Key, str], int] = {}

    def record(self, key: Key, kind: str, version: int) -> None:
        self._done[(key, kind)] = version

    def settled(self, key: Key, kind: str, shown: ChildView) -> bool:
        """Whether ``shown`` (the index's) is at or before the version we left."""
        version = self._done.get((key, kind))
        if version is None:
            return False
        if shown.resource_version <= version:
            return True
        del self._done[(key, kind)]
        return False

    def forget(self, key: Key) -> None:
        for done in [d for d in self._done if d[0] == key]:
            del self._done[done]


@dataclass(frozen=True)
class Observed:
    """One job as the controller sees it at the start of a reconcile."""

    body: Mapping[str, Any]
    parsed: ParsedJob
    job: JobView
    status: wire.Status
    pods: list[PodView]
    expected: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Children created and not in ``pods`` yet, with their deadlines (`Expectations`)."""
    integrations: tuple[JobIntegration, ...] = ()
    """The integrations' parts of this snapshot (Kueue's Workload, the gang's PodGroups):
    their writes are decided on the same snapshot as the plan."""
    children: Mapping[str, ChildView] = dataclasses.field(default_factory=dict)
    """The job's Service and NetworkPolicy by kind, as the index shows them (none: absent)."""

    @property
    def resource_version(self) -> str:
        return str(self.body["metadata"]["resourceVersion"])


class WriteCache:
    """Our last status write per job, while it is newer than what the index holds."""

    def __init__(self) -> None:
        self._written: dict[Key, Mapping[str, Any]] = {}

    def record(self, key: Key, written: Any) -> None:
        if isinstance(written, Mapping):
            self._written[key] = written

    def freshest(self, key: Key, indexed: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The indexed body, or our write when it is a newer version of the same job."""
        written = self._written.get(key)
        if indexed is None:
            self._written.pop(key, None)
            return None
        if written is not None:
            uid = written.get("metadata", {}).get("uid")
            if uid == indexed.get("metadata", {}).get("uid") and (
                resource_version(written) > resource_version(indexed)
            ):
                return written
            self._written.pop(key, None)
        return indexed

    def forget(self, key: Key) -> None:
        self._written.pop(key, None)


class Expectations:
    """Children created by us and not yet seen in the index: per job, name -> (deadline,
    the UID of the incarnation created, when known)."""

    def __init__(self, seconds: float = EXPECTATION_SECONDS) -> None:
        self.seconds = seconds
        self._expected: dict[Key, dict[str, tuple[float, str | None]]] = {}

    def expect(self, key: Key, name: str, now: float, *, uid: str | None = None) -> None:
        self._expected.setdefault(key, {})[name] = (now + self.seconds, uid)

    def forget(self, key: Key) -> None:
        self._expected.pop(key, None)

    def seen(self, key: Key, name: str, uid: str | None = None) -> None:
        """A watch event for child ``name`` (incarnation ``uid``) arrived, after the index
        took it in. An event of another incarnation than the one created (the late DELETE
        of the one it replaced: kopf orders events per object, not per name) ends
        nothing."""
        expected = self._expected.get(key)
        if expected is None or name not in expected:
            return
        made = expected[name][1]
        if uid is None or made is None or uid == made:
            del expected[name]
            if not expected:
                del self._expected[key]

    def pending(self, key: Key, indexed: Iterable[PodView], now: float) -> Mapping[str, float]:
        """Read with the index (no await in between): the children still expected, by name,
        with their deadlines; those the index shows, or past their deadline, end."""
        expected = self._expected.get(key)
        if not expected:
            return {}
        shown = {p.name: p.uid for p in indexed}
        for name, (deadline, uid) in list(expected.items()):
            if deadline <= now or (name in shown and uid in (None, shown[name])):
                del expected[name]
        if not expected:
            del self._expected[key]
        return {name: deadline for name, (deadline, _) in expected.items()}


def skip_expected(
    actions: Iterable[Action], expected: Mapping[str, float], now: float
) -> tuple[list[Action], float | None]:
    """The actions minus creates of ``expected`` children (`Expectations.pending`); and how
    long until the first of the skipped Pods' expectations lapses (None: nothing skipped)."""
    out: list[Action] = []
    wait: float | None = None
    for action in actions:
        made = created_name(action)
        if made is not None and made in expected:
            if made != SERVICE:
                left = expected[made] - now
                wait = left if wait is None else min(wait, left)
            continue
        out.append(action)
    return out, wait


def created_name(action: Action) -> str | None:
    """The child a create action makes (a Pod name, or SERVICE); None for other actions."""
    if isinstance(action, CreatePod):
        return action.task.name
    if isinstance(action, CreateProbe):
        return action.name
    if isinstance(action, CreateService):
        return SERVICE
    return None


async def index_behind(
    api: KubeApi, namespace: str, status: Mapping[str, Any], pods: list[PodView]
) -> bool:
    """True when the Pod index is older than the status: a Pod incarnation the status has
    recorded still exists, yet the index shows none or an older one.

    The planner reads a recorded Pod missing from the index as lost, and a different
    incarnation in the index as a replacement. Both are right when the index is at least
    as fresh as the status, which holds when this operator wrote the record; not when
    someone else did (a second operator, a standby taking over with a lagging watch).
    So before such a conclusion one request checks which incarnation really exists.
    """
    if status.get("phase") in TERMINAL_PHASES:  # nothing is counted any more
        return False
    indexed = {p.name: p.uid for p in newest_incarnations(pods)}
    for name, rec in (status.get("trackedPods") or {}).items():
        uid = rec.get("uid")
        if not uid or indexed.get(name) == uid:
            continue
        if name not in indexed and rec.get("counted"):
            continue  # already counted and gone: nothing to conclude
        # A LIST narrowed to the one name: the Role grants list, not get, on Pods.
        found = await api.request(
            "GET",
            pod_path(namespace),
            params={"fieldSelector": f"metadata.name={name}"},
            count_as="list pods",
        )
        live = {i.get("metadata", {}).get("uid") for i in (found or {}).get("items", [])}
        if uid in live:
            return True
    return False
