"""Which upstream base URLs a pool may name.

The gateway POSTs an agent's call to its pool's upstream and relays the answer, so a base
URL is a request the server makes on an agent's behalf: `file://`, the host's own loopback,
the cloud's metadata address (169.254.169.254) or the private network behind the server
would turn the gateway into a proxy into places no agent should reach (SSRF). A pool's
upstream is https on a public address, or a host the operator names in
AGENTRM_UPSTREAM_ALLOWED_HOSTS (a model server on the private network, a local test
double), which may then also use http.

Hostnames are judged by name, not resolved: a name is not an address until it is
connected to, and this check runs where DNS may not answer. docs/operations/security.md
says what that leaves open.
"""
from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from app.errors import BadInput

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:   # the other spellings of an IPv4 address: 2130706433, 0x7f000001, 127.1
        import socket
        return ipaddress.ip_address(socket.inet_ntoa(socket.inet_aton(host)))
    except (OSError, ValueError):
        return None


def _internal(host: str) -> bool:
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return True
    address = _address(host)
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


def check_upstream_url(url: str, allowed_hosts: frozenset[str]) -> str:
    """The URL if a pool may use it, else BadInput saying why and what would allow it."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("http", "https") or not host:
        raise BadInput(f"upstreamBaseUrl must be an http(s) URL with a host, not {url[:200]!r}")
    if parts.username or parts.password:
        raise BadInput("upstreamBaseUrl must not carry credentials: give the key as upstreamApiKey")
    if host in allowed_hosts:
        return url
    if _internal(host):
        raise BadInput(f"upstreamBaseUrl's host {host!r} is a loopback, private, link-local or reserved "
                       "address; an operator allows it with AGENTRM_UPSTREAM_ALLOWED_HOSTS")
    if parts.scheme != "https":
        raise BadInput(f"upstreamBaseUrl must be https (or its host {host!r} named in "
                       "AGENTRM_UPSTREAM_ALLOWED_HOSTS)")
    return url
