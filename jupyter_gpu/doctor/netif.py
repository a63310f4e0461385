"""Network interfaces, and which of them ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` select.

NCCL and gloo read these variables only when a process group forms, and a name that matches
nothing, or only a bridge that never leaves the machine, shows up as a hang of the first
multi-node all-reduce. The selection rules are NCCL's and gloo's own, as pure functions.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

# Interfaces that carry traffic between containers of one host, never to another machine.
BRIDGE_PREFIXES = ("docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "podman", "lxcbr")


@dataclass(frozen=True)
class NetInterface:
    name: str
    up: bool
    addresses: list[str] = field(default_factory=list)  # IPv4 and IPv6

    @property
    def kind(self) -> str:
        """ "loopback", "bridge" (a container bridge of this host) or "network"."""
        if self.name == "lo" or any(a.startswith("127.") or a == "::1" for a in self.addresses):
            return "loopback"
        if self.name.startswith(BRIDGE_PREFIXES):
            return "bridge"
        return "network"


def read_interfaces() -> list[NetInterface]:
    """This machine's interfaces (psutil), sorted by name."""
    import psutil

    stats = psutil.net_if_stats()
    addrs = psutil.net_if_addrs()
    families = (socket.AF_INET, socket.AF_INET6)
    return [
        NetInterface(
            name,
            stats[name].isup if name in stats else False,
            [a.address.split("%")[0] for a in addrs.get(name, []) if a.family in families],
        )
        for name in sorted(set(stats) | set(addrs))
    ]


def nccl_selects(spec: str, names: list[str]) -> list[str]:
    """The interfaces NCCL uses for ``NCCL_SOCKET_IFNAME=spec``: comma-separated name prefixes,
    ``=`` before the list for exact names, ``^`` to exclude the listed ones instead."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    patterns = [p.strip() for p in spec.split(",") if p.strip()]

    def matches(name: str) -> bool:
        return any(name == p if exact else name.startswith(p) for p in patterns)

    return [n for n in names if matches(n) != exclude]


def gloo_selects(spec: str, names: list[str]) -> list[str]:
    """gloo takes exact names, comma-separated, and fails on the first it cannot find."""
    wanted = [p.strip() for p in spec.split(",") if p.strip()]
    return [w for w in wanted if w in names]
