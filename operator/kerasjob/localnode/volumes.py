"""Where each volume of a Pod lives on this machine, and where it is mounted.

Resolution is separate from materialisation: `resolve_volume` decides (from the Pod spec and
the API objects a `Lookup` returns) which host directory backs a volume and which files must
be written into it; the agent then creates them and bind-mounts them inside the Pod's
private mount namespace.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

log = logging.getLogger(__name__)

#: (kind, namespace, name) -> the object as a dict, or None when it does not exist.
#: kind is one of "PersistentVolumeClaim", "PersistentVolume", "ConfigMap", "Secret".
Lookup = Callable[[str, str, str], "dict | None"]


class VolumeNotReadyError(RuntimeError):
    """A volume cannot be set up yet (missing ConfigMap, claim...); the Pod stays Pending."""


@dataclass(frozen=True)
class ResolvedVolume:
    name: str
    host_path: Path
    kind: str
    files: dict[str, bytes] | None = None
    """For configMap/secret volumes: relative path -> content, written before mounting."""
    create: str = "dir"
    """'dir': make the directory if missing; 'file': create an empty file; '': must exist."""


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = False


@dataclass
class PodDirs:
    """The agent's per-Pod and per-claim directories."""

    pod_dir: Path
    claims_dir: Path
    notes: list[str] = field(default_factory=list)

    def empty_dir(self, volume: str) -> Path:
        return self.pod_dir / "volumes" / volume

    def claim_dir(self, namespace: str, claim: str) -> Path:
        return self.claims_dir / namespace / claim


def _key_files(obj: dict, items: list[dict] | None, decode: bool) -> dict[str, bytes]:
    data: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        data[key] = base64.b64decode(value) if decode else value.encode()
    for key, value in (obj.get("binaryData") or {}).items():
        data[key] = base64.b64decode(value)
    if not items:
        return data
    return {item["path"]: data[item["key"]] for item in items if item["key"] in data}


def _claim_path(claim: str, namespace: str, dirs: PodDirs, lookup: Lookup) -> Path:
    pvc = lookup("PersistentVolumeClaim", namespace, claim)
    if pvc is None:
        raise VolumeNotReadyError(f'persistentvolumeclaim "{claim}" not found')
    pv_name = (pvc.get("spec") or {}).get("volumeName")
    bound = (pvc.get("status") or {}).get("phase") == "Bound"
    if pv_name and bound:
        pv = lookup("PersistentVolume", "", pv_name) or {}
        spec = pv.get("spec") or {}
        for source in ("hostPath", "local"):
            if spec.get(source, {}).get("path"):
                return Path(spec[source]["path"])
        dirs.notes.append(f"PV {pv_name} is neither hostPath nor local: using a local dir")
    # An unbound claim (or a PV this machine cannot mount) gets a directory of the agent's,
    # shared by every Pod of the claim: the ReadWriteMany semantics the workers need.
    return dirs.claim_dir(namespace, claim)


def resolve_volume(volume: dict, namespace: str, dirs: PodDirs, lookup: Lookup):
    """The host side of one volume of a Pod, or None for volume types we skip."""
    name = volume["name"]
    if "hostPath" in volume:
        kind = volume["hostPath"].get("type") or ""
        create = {"DirectoryOrCreate": "dir", "FileOrCreate": "file"}.get(kind, "")
        return ResolvedVolume(name, Path(volume["hostPath"]["path"]), "hostPath", create=create)
    if "emptyDir" in volume:
        return ResolvedVolume(name, dirs.empty_dir(name), "emptyDir")
    if "persistentVolumeClaim" in volume:
        claim = volume["persistentVolumeClaim"]["claimName"]
        return ResolvedVolume(name, _claim_path(claim, namespace, dirs, lookup), "pvc")
    for kind, api_kind, decode in (("configMap", "ConfigMap", False), ("secret", "Secret", True)):
        if kind not in volume:
            continue
        src = volume[kind]
        obj_name = src.get("name") or src.get("secretName", "")
        obj = lookup(api_kind, namespace, obj_name)
        if obj is None:
            if src.get("optional"):
                obj = {}
            else:
                raise VolumeNotReadyError(f'{kind} "{obj_name}" not found')
        files = _key_files(obj, src.get("items"), decode)
        return ResolvedVolume(name, dirs.empty_dir(name), kind, files=files)
    if "projected" in volume:
        files: dict[str, bytes] = {}
        for source in volume["projected"].get("sources") or []:
            for kind, api_kind, decode in (
                ("configMap", "ConfigMap", False),
                ("secret", "Secret", True),
            ):
                if kind in source:
                    obj = lookup(api_kind, namespace, source[kind].get("name", "")) or {}
                    files.update(_key_files(obj, source[kind].get("items"), decode))
        # Service account tokens are not issued by the local node: no process here needs
        # to talk to the API server (and it cannot reach it from its network namespace).
        if not files:
            return None
        return ResolvedVolume(name, dirs.empty_dir(name), "projected", files=files)
    dirs.notes.append(f"volume {name}: type not supported by the local node, skipped")
    return None


def resolve_mounts(container: dict, volumes: dict[str, ResolvedVolume]) -> list[Mount]:
    """The bind mounts of a container, in the order of its volumeMounts."""
    mounts = []
    for vm in container.get("volumeMounts") or []:
        vol = volumes.get(vm["name"])
        if vol is None:
            continue
        source = vol.host_path
        if vm.get("subPath"):
            sub = PurePosixPath(vm["subPath"])
            if sub.is_absolute() or ".." in sub.parts:
                raise VolumeNotReadyError(f"invalid subPath {vm['subPath']!r}")
            source = source / sub
        mounts.append(Mount(source, vm["mountPath"], bool(vm.get("readOnly"))))
    return mounts


def materialise(vol: ResolvedVolume) -> None:
    """Create the host side of a volume (directories, configMap/secret files)."""
    if vol.files is not None:
        vol.host_path.mkdir(parents=True, exist_ok=True)
        for rel, content in vol.files.items():
            target = vol.host_path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return
    if vol.host_path.exists():
        return
    if vol.kind in ("emptyDir", "pvc") or vol.create == "dir":
        vol.host_path.mkdir(parents=True, exist_ok=True)
    elif vol.create == "file":
        vol.host_path.parent.mkdir(parents=True, exist_ok=True)
        vol.host_path.touch()
    else:
        raise VolumeNotReadyError(f"hostPath {vol.host_path} does not exist")
