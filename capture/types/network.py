"""Network types: inet, cidr, macaddr, macaddr8.

Python values: inet is an ``ipaddress.IPv4Interface``/``IPv6Interface`` (address plus
prefix length, host bits kept: ``10.1.2.3/8``); cidr is an ``IPv4Network``/``IPv6Network``
(host bits are always zero in a cidr). macaddr/macaddr8 are ``str`` in PostgreSQL's
canonical lower-case, colon-separated form.

Text output is PostgreSQL's (``pg_inet_net_ntop``), not Python's: inet omits ``/32`` and
``/128``, cidr always shows the prefix, and IPv6 uses PostgreSQL's rules, which print an
embedded IPv4 address in dotted form for ``::ffff:a.b.c.d`` and ``::a.b.c.d`` (Python 3.11
prints ``::ffff:102:304``).
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPv4Interface = ipaddress.IPv4Interface
IPv6Interface = ipaddress.IPv6Interface
IPv4Network = ipaddress.IPv4Network
IPv6Network = ipaddress.IPv6Network

PGSQL_AF_INET: Final = 2
"""Address family byte of IPv4 in inet_send (AF_INET + 0)."""
PGSQL_AF_INET6: Final = 3
"""Address family byte of IPv6 in inet_send (AF_INET + 1)."""

Inet = IPv4Interface | IPv6Interface
Cidr = IPv4Network | IPv6Network


def _check_header(data: bytes) -> tuple[int, int, bytes]:
    family, bits, _is_cidr, nb = data[0], data[1], data[2], data[3]
    address = data[4 : 4 + nb]
    expected = 4 if family == PGSQL_AF_INET else 16 if family == PGSQL_AF_INET6 else -1
    if len(address) != expected:
        raise ValueError(f"invalid inet/cidr send data {data!r}")
    return family, bits, address


def inet_from_binary(data: bytes) -> Inet:
    """Decode inet_send: family, bits, is_cidr, nb (address length), address bytes."""
    family, bits, address = _check_header(data)
    if family == PGSQL_AF_INET:
        return IPv4Interface((address, bits))
    return IPv6Interface((address, bits))


def cidr_from_binary(data: bytes) -> Cidr:
    """Decode cidr_send (same layout as inet_send)."""
    family, bits, address = _check_header(data)
    if family == PGSQL_AF_INET:
        return IPv4Network((address, bits))
    return IPv6Network((address, bits))


def inet_from_text(data: bytes) -> Inet:
    """Decode inet_out: ``192.168.0.1``, ``10.1.2.3/8``, ``::ffff:1.2.3.4/120``."""
    return ipaddress.ip_interface(data.decode("ascii"))


def cidr_from_text(data: bytes) -> Cidr:
    """Decode cidr_out: ``10.0.0.0/8``, ``2001:db8::/32``."""
    return ipaddress.ip_network(data.decode("ascii"))


def ipv6_text(packed: bytes) -> str:
    """PostgreSQL's ``inet_net_ntop_ipv6`` address text (without the ``/bits`` suffix).

    The longest run (first one on ties) of two or more zero words becomes ``::``; the
    last 32 bits print as a dotted IPv4 address when the first 96 bits are zero and the
    seventh word is not (``::1.2.3.4``), or the address is ``::ffff:a.b.c.d``.
    """
    words = [packed[i] << 8 | packed[i + 1] for i in range(0, 16, 2)]
    best_base, best_len, cur_base, cur_len = -1, 0, -1, 0
    for index, word in enumerate(words):
        if word == 0:
            if cur_base == -1:
                cur_base, cur_len = index, 1
            else:
                cur_len += 1
        elif cur_base != -1:
            if best_base == -1 or cur_len > best_len:
                best_base, best_len = cur_base, cur_len
            cur_base = -1
    if cur_base != -1 and (best_base == -1 or cur_len > best_len):
        best_base, best_len = cur_base, cur_len
    if best_base != -1 and best_len < 2:
        best_base = -1

    out: list[str] = []
    for index in range(8):
        if best_base != -1 and best_base <= index < best_base + best_len:
            if index == best_base:
                out.append(":")
            continue
        if index != 0:
            out.append(":")
        if (
            index == 6
            and best_base == 0
            and (best_len == 6 or (best_len == 5 and words[5] == 0xFFFF))
        ):
            out.append(".".join(str(octet) for octet in packed[12:]))
            break
        out.append(f"{words[index]:x}")
    if best_base != -1 and best_base + best_len == 8:
        out.append(":")
    return "".join(out)


def inet_to_text(value: Inet | ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Render like inet_out: the address, then ``/bits`` unless it is 32 (v4) / 128 (v6)."""
    if isinstance(value, IPv4Interface):
        bits = value.network.prefixlen
        return str(value.ip) if bits == 32 else f"{value.ip}/{bits}"
    if isinstance(value, IPv6Interface):
        bits = value.network.prefixlen
        text = ipv6_text(value.ip.packed)
        return text if bits == 128 else f"{text}/{bits}"
    if isinstance(value, ipaddress.IPv4Address):
        return str(value)
    return ipv6_text(value.packed)


def cidr_to_text(value: Cidr) -> str:
    """Render like cidr_out: the network address and always ``/bits``."""
    if isinstance(value, IPv4Network):
        return f"{value.network_address}/{value.prefixlen}"
    return f"{ipv6_text(value.network_address.packed)}/{value.prefixlen}"


def macaddr_from_binary(data: bytes) -> str:
    """Decode macaddr_send / macaddr8_send (6 or 8 raw bytes) to ``08:00:2b:01:02:03``."""
    return data.hex(":")
