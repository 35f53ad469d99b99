"""Prometheus' XOR chunks decoded, pure: the samples of one chunk of a remote-read answer.

By the rules of Prometheus' ``tsdb/chunkenc/xor.go``, on a string of the chunk's bits (the
fastest way CPython reads bits at any offset); staleness markers are dropped, as a query
drops them.
"""

from __future__ import annotations

import struct
from itertools import repeat

STALE_NAN = 0x7FF0000000000002
"""The bits of Prometheus' staleness marker: a NaN that says "no sample", which queries
skip; a NaN a GPU reading gave is another NaN and stays."""


class ReadError(ValueError):
    """An answer that is not a well-formed stream of XOR chunks."""


_DOUBLE = struct.Struct(">d")
_DOD_BITS = (14, 17, 20)


def _bit_varint(bits: str, pos: int) -> tuple[int, int]:
    """A varint of whole bytes read from ``bits`` at any bit offset."""
    value = shift = 0
    while True:
        byte = int(bits[pos:pos + 8], 2)
        pos += 8
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def xor_samples(chunk: bytes, times: list[int], values: list[float],
                floats: dict[int, float], until: int = 2**63) -> None:
    """Append the samples of one XOR chunk to ``times`` and ``values``, staleness markers
    left out: a 16-bit sample count, the first time (a signed varint) and value (64 bits),
    the second time's delta (a varint), then for each sample the change of that delta
    ('0', or '10', '110', '1110', '1111' and 14, 17, 20 or 64 bits) and the value XORed with
    the one before ('0': the same; '10': in the previous sample's leading/trailing zeros;
    '11', 5 bits of leading zeros, 6 of significant bits, then those bits). ``floats``
    caches each bit pattern's float; the samples after ``until`` are not decoded."""
    try:
        _decode_xor(chunk, times, values, floats, until)
    except (IndexError, ValueError):  # a slice or a bit past the end
        raise ReadError("an XOR chunk ends before its last sample") from None


def _decode_xor(chunk: bytes, times: list[int], values: list[float],
                floats: dict[int, float], until: int) -> None:
    count = int.from_bytes(chunk[:2], "big")
    if not count:
        return
    bits = bin(int.from_bytes(chunk[2:], "big") | 1 << (len(chunk) - 2) * 8)[3:]
    zigzag, pos = _bit_varint(bits, 0)
    t = (zigzag >> 1) ^ -(zigzag & 1)
    v = int(bits[pos:pos + 64], 2)
    pos += 64
    value = _float(v, floats)
    add_time, add_value = times.append, values.append
    add_times, add_values = times.extend, values.extend
    if t > until:
        return
    if v != STALE_NAN:
        add_time(t)
        add_value(value)
    delta = leading = trailing = 0
    i = 1
    while i < count:
        if i == 1:
            delta, pos = _bit_varint(bits, pos)
        elif bits[pos] == "0":
            if bits[pos + 1] == "0" and v != STALE_NAN and delta > 0:
                # '00' again and again: the same value at the same pace, many at once
                same = min((_next_one(bits, pos) - pos) // 2, count - i,
                           (until - t) // delta)
                if same <= 0:
                    break
                add_times(range(t + delta, t + delta * same + 1, delta))
                add_values(repeat(value, same))
                t += delta * same
                pos += 2 * same
                i += same
                continue
            pos += 1
        else:
            pos += 1
            size = 64
            for bucket in _DOD_BITS:
                pos += 1
                if bits[pos - 1] == "0":
                    size = bucket
                    break
            raw = int(bits[pos:pos + size], 2)
            pos += size
            if size == 64:
                raw -= (raw >= 1 << 63) << 64
            elif raw > 1 << (size - 1):
                raw -= 1 << size
            delta += raw
        t += delta
        if t > until:
            break
        if bits[pos] == "0":
            pos += 1
        else:
            if bits[pos + 1] == "1":
                leading = int(bits[pos + 2:pos + 7], 2)
                trailing = 64 - leading - (int(bits[pos + 7:pos + 13], 2) or 64)
                pos += 13
            else:
                pos += 2
            width = 64 - leading - trailing
            v ^= int(bits[pos:pos + width], 2) << trailing
            pos += width
            value = _float(v, floats)
        if v != STALE_NAN:
            add_time(t)
            add_value(value)
        i += 1
    if pos > len(bits):  # a slice past the end reads short: every value since is wrong
        raise IndexError(pos)


def _next_one(bits: str, pos: int) -> int:
    """Where the next '1' is from ``pos``, or the end."""
    found = bits.find("1", pos)
    return len(bits) if found < 0 else found


def _float(bits: int, floats: dict[int, float]) -> float:
    value = floats.get(bits)
    if value is None:
        value = floats[bits] = _DOUBLE.unpack(bits.to_bytes(8, "big"))[0]
    return value
