"""The command line and environment of a container on the local node (pure functions).

A container runs as:

    ip netns exec <netns> unshare --mount --uts --propagation private -- \
        /bin/sh -c '<set hostname; bind-mount volumes; cd workingDir; exec "$@">' <command...>

`ip netns exec` enters the Pod's network namespace and bind-mounts its hosts file over
/etc/hosts; `unshare` gives the container its own hostname and a mount namespace whose bind
mounts (volumes, termination log) nobody else sees and that vanish with the process. Every
step execs the next, so the Popen pid is the container's own process.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .volumes import Mount

#: The image is ignored on the local node: commands run in the project's Python environment,
#: whose bin directory comes first in PATH (so `python` is the project's interpreter).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Tools:
    """Absolute paths of the system tools the launch needs."""

    ip: str = "ip"
    unshare: str = "unshare"
    mount: str = "mount"
    sh: str = "/bin/sh"


@dataclass(frozen=True)
class LaunchSpec:
    netns: str
    hostname: str
    command: list[str]
    mounts: list[Mount]
    working_dir: str


def build_argv(spec: LaunchSpec, tools: Tools) -> list[str]:
    """The argv that runs `spec.command` inside the Pod's namespaces."""
    q = shlex.quote
    script = ["set -e", f"echo {q(spec.hostname)} > /proc/sys/kernel/hostname"]
    for m in spec.mounts:
        script.append(f"{q(tools.mount)} --bind {q(str(m.source))} {q(m.target)}")
        if m.read_only:
            script.append(f"{q(tools.mount)} -o remount,bind,ro {q(m.target)}")
    script.append(f"mkdir -p {q(spec.working_dir)}")
    script.append(f"cd {q(spec.working_dir)}")
    script.append('exec "$@"')
    return [
        tools.ip, "netns", "exec", spec.netns,
        tools.unshare, "--mount", "--uts", "--propagation", "private", "--",
        tools.sh, "-c", "\n".join(script), "kerasjob-localnode", *spec.command,
    ]  # fmt: skip


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` escapes `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, value)


#: (kind "ConfigMap"|"Secret", namespace, name) -> the object or None.
Lookup = Callable[[str, str, str], "dict | None"]


class EnvError(RuntimeError):
    """An env reference cannot be resolved (CreateContainerConfigError)."""


def _field_ref(pod: dict, path: str, pod_ip: str, host_ip: str) -> str:
    meta, spec = pod["metadata"], pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return simple[path]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    raise EnvError(f"unsupported fieldRef {path!r}")


def _key_ref(ref: dict, kind: str, namespace: str, lookup: Lookup) -> str | None:
    obj = lookup(kind, namespace, ref.get("name", ""))
    data = (obj or {}).get("data") or {}
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise EnvError(f'{kind} "{ref.get("name")}" has no key {ref["key"]!r}')
    value = data[ref["key"]]
    return base64.b64decode(value).decode() if kind == "Secret" else value


def build_env(
    pod: dict,
    container: dict,
    *,
    pod_ip: str,
    host_ip: str,
    python_bin: Path,
    lookup: Lookup,
) -> dict[str, str]:
    """The container's environment: a small base, then envFrom, then env (later wins)."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {
        "PATH": f"{python_bin}:{SYSTEM_PATH}",
        "HOME": "/root",
        "HOSTNAME": pod.get("spec", {}).get("hostname") or pod["metadata"]["name"],
        "LANG": "C.UTF-8",
        # Container images of Python programs set this so that logs appear as they are
        # written; the trainer image does too.
        "PYTHONUNBUFFERED": "1",
    }
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if key not in source:
                continue
            obj = lookup(kind, namespace, source[key].get("name", ""))
            if obj is None and not source[key].get("optional"):
                raise EnvError(f'{kind} "{source[key].get("name")}" not found')
            for k, v in ((obj or {}).get("data") or {}).items():
                env[prefix + k] = base64.b64decode(v).decode() if kind == "Secret" else v
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        src = var["valueFrom"]
        if "fieldRef" in src:
            env[name] = _field_ref(pod, src["fieldRef"]["fieldPath"], pod_ip, host_ip)
        elif "configMapKeyRef" in src or "secretKeyRef" in src:
            kind, ref = (
                ("ConfigMap", src["configMapKeyRef"])
                if "configMapKeyRef" in src
                else ("Secret", src["secretKeyRef"])
            )
            value = _key_ref(ref, kind, namespace, lookup)
            if value is not None:
                env[name] = value
        # resourceFieldRef (limits) has no meaning without cgroups here: left unset.
    return env


def container_command(container: dict, env: dict[str, str]) -> list[str]:
    """command + args with `$(VAR)` expanded. Without `command` the image's entrypoint would
    run, which the local node cannot know: that is an error for the caller to report."""
    return [
        expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])
    ]
