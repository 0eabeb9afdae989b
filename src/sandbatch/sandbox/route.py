"""This host's address as a sandbox elsewhere reaches it: the source address of the route
toward the sandboxes' service."""

from __future__ import annotations

import ipaddress
import socket

# stands for "anywhere off this host": only the routing table is consulted, nothing is sent
_OFF_HOST = "192.0.2.1"


def route_source(service: str) -> str | None:
    """This host's source address on its route toward `service` (host:port), or None.

    A service on this host (a loopback route) runs its sandboxes on this host's container
    engine, which never reaches the host's loopback: the address of the route off the host
    is used instead.
    """
    host, _, port = service.rpartition(":") if ":" in service else (service, "", "80")
    host = host.strip("[]") or service

    def source(target: str, port: int) -> str | None:
        try:
            infos = socket.getaddrinfo(target, port, type=socket.SOCK_DGRAM)
        except (OSError, UnicodeError):
            return None
        for family, _, _, _, addr in infos:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                try:
                    sock.connect(addr)  # UDP: picks the route, sends nothing
                    return sock.getsockname()[0]
                except OSError:
                    continue
        return None

    found = source(host, int(port) if port.isdigit() else 80)
    if found is not None and ipaddress.ip_address(found.split("%")[0]).is_loopback:
        found = source(_OFF_HOST, 9)
    return found
