"""Pod IP allocation on the agent's private subnet."""

from __future__ import annotations

import ipaddress


class IPExhaustedError(RuntimeError):
    """Every address of the subnet is in use."""


class IPAllocator:
    """Hands out addresses of one IPv4 subnet; the first host address is the bridge's.

    Allocation goes round-robin from the last address handed out instead of always taking
    the lowest free one, so that an address freed by a deleted Pod is not immediately
    reused by its replacement while peers may still hold connections or ARP entries for it.
    """

    def __init__(self, cidr: str) -> None:
        self.network = ipaddress.IPv4Network(cidr)
        hosts = list(self.network.hosts())
        if len(hosts) < 2:
            raise ValueError(f"subnet {cidr} is too small for a gateway and a pod")
        self.gateway = hosts[0]
        self._pool = hosts[1:]
        self._next = 0
        self._by_key: dict[str, ipaddress.IPv4Address] = {}

    @property
    def prefixlen(self) -> int:
        return self.network.prefixlen

    def allocate(self, key: str, prefer: str | None = None) -> ipaddress.IPv4Address:
        """The address of `key` (a Pod uid), allocating one if it has none yet; `prefer` (the
        IP a Pod had under a previous agent) is taken when it is in the pool and free."""
        if key in self._by_key:
            return self._by_key[key]
        used = set(self._by_key.values())
        if prefer:
            try:
                wanted = ipaddress.IPv4Address(prefer)
            except ValueError:
                wanted = None
            if wanted in self._pool and wanted not in used:
                self._by_key[key] = wanted
                return wanted
        for offset in range(len(self._pool)):
            index = (self._next + offset) % len(self._pool)
            candidate = self._pool[index]
            if candidate not in used:
                self._next = index + 1
                self._by_key[key] = candidate
                return candidate
        raise IPExhaustedError(f"no free address left in {self.network}")

    def release(self, key: str) -> None:
        self._by_key.pop(key, None)

    def get(self, key: str) -> ipaddress.IPv4Address | None:
        return self._by_key.get(key)
