"""kerasjob-neigh-reset: a chained CNI plugin of the local cluster's real node (node.sh).

A Pod whose IP an earlier Pod of the node had held was unreachable for 5-9 s after it
started: the node kept the earlier Pod's neighbour (ARP) entry, STALE with the old MAC, and
Linux sends to a STALE entry's MAC for delay_first_probe_time (5 s) before it probes (3 x
1 s). The bridge plugin announced a new Pod's address with a gratuitous ARP up to v0.9;
from v1.0 it does not (containernetworking/plugins#858, open), and host-local hands
addresses out round-robin, so every address comes back after ~250 Pods. On the real node
that stalled whoever had to reach a re-created Pod first: the survivors of a Keras 3 job
whose process 0 (JAX's coordinator) was re-created waited 5-9 s for its new address.

On ADD this forgets the node's neighbour entries for the addresses the bridge gave the Pod
(`ip neigh flush to ADDR`: none is fine), so the first packet to the Pod asks who has the
address and the Pod answers. It passes the previous plugin's result on unchanged; DEL and
CHECK have nothing to do. Errors are the CNI spec's JSON on stdout, exit 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, NoReturn

VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
#: ip(8): containerd may run plugins with a short PATH.
IP_PATH = os.pathsep.join(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])


def fail(code: int, msg: str, details: str = "") -> NoReturn:
    json.dump({"cniVersion": "1.0.0", "code": code, "msg": msg, "details": details}, sys.stdout)
    sys.exit(1)


def addresses(result: dict[str, Any]) -> list[str]:
    """The Pod's addresses in the previous result, without their prefix lengths."""
    return [str(ip["address"]).split("/")[0] for ip in result.get("ips", []) if "address" in ip]


def reset(addrs: list[str]) -> None:
    ip = shutil.which("ip", path=os.environ.get("PATH", "") + os.pathsep + IP_PATH)
    if ip is None:
        fail(999, "kerasjob-neigh-reset: ip(8) not found", IP_PATH)
    for addr in addrs:
        done = subprocess.run(
            [ip, "neigh", "flush", "to", addr], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            fail(999, f"kerasjob-neigh-reset: ip neigh flush to {addr} failed", done.stderr)


def main() -> None:
    command = os.environ.get("CNI_COMMAND", "")
    if command == "VERSION":
        json.dump({"cniVersion": "1.0.0", "supportedVersions": VERSIONS}, sys.stdout)
        return
    try:
        conf = json.load(sys.stdin)
    except ValueError as e:
        fail(6, "kerasjob-neigh-reset: the network configuration is not JSON", str(e))
    if command != "ADD":
        return  # DEL, CHECK, GC, STATUS: nothing of ours to undo or check
    result = conf.get("prevResult")
    if not isinstance(result, dict):
        fail(7, "kerasjob-neigh-reset: no prevResult (chain it after the bridge plugin)")
    reset(addresses(result))
    json.dump({**result, "cniVersion": conf.get("cniVersion", "1.0.0")}, sys.stdout)


if __name__ == "__main__":
    main()
