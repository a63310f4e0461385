"""The CRC-32 of two byte strings joined, from theirs and the second's length (zlib's
``crc32_combine``, which Python's zlib does not expose).

A gzipped reply built from pieces compressed at different times needs the checksum of the whole;
combining the pieces' checksums costs microseconds where reading the megabytes again costs
milliseconds. Arithmetic modulo the CRC-32 polynomial, as zlib 1.2.12's crc32.c does it.
"""

from __future__ import annotations

_POLY = 0xEDB88320  # the CRC-32 polynomial, bit-reflected


def _multmodp(a: int, b: int) -> int:
    """``a`` times ``b`` modulo the polynomial (``a`` not zero)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


# x to the power 2**k modulo the polynomial, for k from 0 to 31
_X2N = [1 << 30]
for _ in range(31):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 (``zlib.crc32``'s) of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)``."""
    p = 1 << 31  # x**(8 * len2), bit by bit of len2 (x**8 per byte: from _X2N[3])
    k = 3
    while len2:
        if len2 & 1:
            p = _multmodp(_X2N[k & 31], p)
        len2 >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2
