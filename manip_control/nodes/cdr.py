# Copyright 2026 manip_control contributors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
Serialized (CDR) form of the hot-path messages, for raw publish / raw subscriptions.

At 1 kHz the typed rclpy path (Python message object <-> C struct <-> CDR on every publish
and take) is the largest cost of a tick: in a ping-pong of two JointState topics with the
EventsExecutor on this machine a typed round trip measured 95-130 us and a raw one (bytes in,
bytes out) 30-40 us. The nodes therefore publish and take these messages as CDR bytes:

* ``sensor_msgs/JointState``, ``std_msgs/Float64MultiArray``,
  ``trajectory_msgs/JointTrajectory`` and ``rosgraph_msgs/Clock``.

Encoders are templates: the constant part (names, frame_id, layout) is serialized once and the
numbers are packed into a copy at fixed offsets. Decoders are bounds-checked readers that
return ``(value, None)`` or ``(None, reason)`` and never raise on malformed input. The layout
is plain CDR (XCDR1) as rmw_fastrtps writes it: a 4-byte encapsulation header
(``00 01 00 00`` little endian, ``00 00 00 00`` big endian), then the fields with natural
alignment relative to the end of the header. Padding bytes are zeros, so equal messages give
equal bytes (rclpy's own serializer leaves padding uninitialised). test_nodes_cdr.py checks
every encoder and decoder against ``rclpy.serialization`` in both directions.
"""

from __future__ import annotations

import struct

from manip_control.safety import MAX_NAMES

_HEADER_LE = b'\x00\x01\x00\x00'
_U32 = {True: struct.Struct('<I'), False: struct.Struct('>I')}
_I32U32 = {True: struct.Struct('<iI'), False: struct.Struct('>iI')}
_STAMP = struct.Struct('<iI')
_MAX_SEQ = 1 << 20


class _Writer:
    """Little-endian CDR writer recording field offsets (for the templates)."""

    def __init__(self):
        self.buf = bytearray(_HEADER_LE)

    @property
    def pos(self) -> int:
        return len(self.buf) - 4

    def align(self, n: int) -> None:
        pad = (-self.pos) % n
        if pad:
            self.buf += b'\x00' * pad

    def u32(self, v: int) -> int:
        self.align(4)
        off = len(self.buf)
        self.buf += struct.pack('<I', v)
        return off

    def i32u32(self, a: int, b: int) -> int:
        self.align(4)
        off = len(self.buf)
        self.buf += _STAMP.pack(a, b)
        return off

    def string(self, s: str) -> None:
        data = s.encode('utf-8') + b'\x00'
        self.u32(len(data))
        self.buf += data

    def strings(self, items) -> None:
        self.u32(len(items))
        for s in items:
            self.string(s)

    def f64seq(self, values) -> int:
        """Return the offset of the first double (or of the count when empty)."""
        values = list(values)
        off = self.u32(len(values))
        if values:
            self.align(8)
            off = len(self.buf)
            self.buf += struct.pack(f'<{len(values)}d', *values)
        return off

    def to_bytes(self) -> bytes:
        return bytes(self.buf)


def _split_ns(ns: int) -> tuple[int, int]:
    sec, nsec = divmod(int(ns), 1_000_000_000)
    return sec, nsec


# --------------------------------------------------------------------------------------------
# encoders

def encode_joint_state(stamp_ns: int, names, position, velocity, effort,
                       frame_id: str = '') -> bytes:
    """CDR of a sensor_msgs/JointState."""
    w = _Writer()
    w.i32u32(*_split_ns(stamp_ns))
    w.string(frame_id)
    w.strings(list(names))
    w.f64seq(position)
    w.f64seq(velocity)
    w.f64seq(effort)
    return w.to_bytes()


class JointStateEncoder:
    """Template encoder of JointState messages with fixed names and three n-vectors."""

    def __init__(self, names, frame_id: str = ''):
        names = list(names)
        n = len(names)
        w = _Writer()
        self._stamp = w.i32u32(0, 0)
        w.string(frame_id)
        w.strings(names)
        self._pos = w.f64seq([0.0] * n)
        self._vel = w.f64seq([0.0] * n)
        self._eff = w.f64seq([0.0] * n)
        self._template = w.to_bytes()
        self._vec = struct.Struct(f'<{n}d')

    def encode(self, stamp_ns: int, position, velocity, effort) -> bytes:
        buf = bytearray(self._template)
        sec, nsec = divmod(stamp_ns, 1_000_000_000)
        _STAMP.pack_into(buf, self._stamp, sec, nsec)
        pack = self._vec.pack_into
        pack(buf, self._pos, *position)
        pack(buf, self._vel, *velocity)
        pack(buf, self._eff, *effort)
        return bytes(buf)


def encode_float64_array(values) -> bytes:
    """CDR of a std_msgs/Float64MultiArray with an empty layout."""
    w = _Writer()
    w.u32(0)          # layout.dim: empty
    w.u32(0)          # layout.data_offset
    w.f64seq(values)
    return w.to_bytes()


class Float64ArrayEncoder:
    """Template encoder of Float64MultiArray messages of n values (empty layout)."""

    def __init__(self, n: int):
        w = _Writer()
        w.u32(0)
        w.u32(0)
        self._data = w.f64seq([0.0] * n)
        self._template = w.to_bytes()
        self._vec = struct.Struct(f'<{n}d')

    def encode(self, values) -> bytes:
        buf = bytearray(self._template)
        self._vec.pack_into(buf, self._data, *values)
        return bytes(buf)


def encode_reference(stamp_ns: int, names, positions, velocities, accelerations,
                     frame_id: str = '') -> bytes:
    """CDR of a one-point trajectory_msgs/JointTrajectory (effort empty, time_from_start 0)."""
    w = _Writer()
    w.i32u32(*_split_ns(stamp_ns))
    w.string(frame_id)
    w.strings(list(names))
    w.u32(1)
    w.f64seq(positions)
    w.f64seq(velocities)
    w.f64seq(accelerations)
    w.f64seq([])
    w.i32u32(0, 0)
    return w.to_bytes()


class ReferenceEncoder:
    """Template encoder of one-point JointTrajectory references with fixed joint names."""

    def __init__(self, names, frame_id: str = ''):
        n = len(names)
        w = _Writer()
        self._stamp = w.i32u32(0, 0)
        w.string(frame_id)
        w.strings(list(names))
        w.u32(1)
        self._pos = w.f64seq([0.0] * n)
        self._vel = w.f64seq([0.0] * n)
        self._acc = w.f64seq([0.0] * n)
        w.f64seq([])
        w.i32u32(0, 0)
        self._template = w.to_bytes()
        self._vec = struct.Struct(f'<{n}d')

    def encode(self, stamp_ns: int, positions, velocities, accelerations) -> bytes:
        buf = bytearray(self._template)
        sec, nsec = divmod(stamp_ns, 1_000_000_000)
        _STAMP.pack_into(buf, self._stamp, sec, nsec)
        pack = self._vec.pack_into
        pack(buf, self._pos, *positions)
        pack(buf, self._vel, *velocities)
        pack(buf, self._acc, *accelerations)
        return bytes(buf)


def encode_clock(stamp_ns: int) -> bytes:
    """CDR of a rosgraph_msgs/Clock."""
    sec, nsec = divmod(int(stamp_ns), 1_000_000_000)
    return _HEADER_LE + _STAMP.pack(sec, nsec)


# --------------------------------------------------------------------------------------------
# decoders

class _Malformed(Exception):
    pass


class _Reader:
    __slots__ = ('buf', 'pos', 'le', 'end')

    def __init__(self, buf):
        if len(buf) < 4 or buf[0] != 0 or buf[1] not in (0, 1):
            raise _Malformed('unsupported CDR encapsulation')
        self.buf = buf
        self.le = buf[1] == 1
        self.pos = 4
        self.end = len(buf)

    def _align(self, n: int) -> None:
        self.pos += (-(self.pos - 4)) % n

    def u32(self) -> int:
        self._align(4)
        if self.pos + 4 > self.end:
            raise _Malformed('truncated')
        v = _U32[self.le].unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def stamp(self) -> int:
        self._align(4)
        if self.pos + 8 > self.end:
            raise _Malformed('truncated')
        sec, nsec = _I32U32[self.le].unpack_from(self.buf, self.pos)
        self.pos += 8
        return sec * 1_000_000_000 + nsec

    def string(self) -> str:
        n = self.u32()
        if n == 0 or self.pos + n > self.end:
            raise _Malformed('bad string')
        data = bytes(self.buf[self.pos:self.pos + n - 1])
        self.pos += n
        try:
            return data.decode('utf-8')
        except UnicodeDecodeError:
            raise _Malformed('string not UTF-8') from None

    def strings(self) -> list:
        n = self.u32()
        if n > MAX_NAMES:               # bounded cost: refused before decoding any name
            raise _Malformed(f'too many entries ({n}, at most {MAX_NAMES})')
        if n > _MAX_SEQ or n * 5 > self.end - self.pos:
            raise _Malformed('bad string sequence length')
        return [self.string() for _ in range(n)]

    def f64seq(self) -> tuple:
        n = self.u32()
        if n == 0:
            return ()
        if n > MAX_NAMES:
            raise _Malformed(f'too many entries ({n}, at most {MAX_NAMES})')
        self._align(8)
        if n > _MAX_SEQ or self.pos + 8 * n > self.end:
            raise _Malformed('bad float64 sequence length')
        out = struct.unpack_from(('<' if self.le else '>') + f'{n}d', self.buf, self.pos)
        self.pos += 8 * n
        return out

    def skip_f64seq(self) -> None:
        self.f64seq()


class _Layout:
    """
    Byte layout of one message shape (same length, names and array lengths).

    Messages of a stream almost always share one shape; once it is known, a message of that
    shape is decoded by comparing its constant bytes (``static`` ranges) with the first
    message's and unpacking the numbers at fixed offsets, instead of walking the CDR.
    """

    __slots__ = ('length', 'static', 'signature', 'arrays', 'names')

    def __init__(self, buf, static, arrays, names):
        self.length = len(buf)
        self.static = static                          # [(start, end)] constant bytes
        self.signature = [bytes(buf[a:b]) for a, b in static]
        self.arrays = arrays                          # [(offset, Struct or None)]
        self.names = names

    def matches(self, buf) -> bool:
        if len(buf) != self.length or buf[1] != 1:
            return False
        for (a, b), sig in zip(self.static, self.signature):
            if buf[a:b] != sig:
                return False
        return True

    def values(self, buf) -> list:
        return [st.unpack_from(buf, off) if st is not None else ()
                for off, st in self.arrays]


class _LayoutCache:
    """A few recently seen layouts of one message type (little-endian messages only)."""

    def __init__(self, size: int = 4):
        self.size = size
        self.items: list = []

    def find(self, buf):
        for lay in self.items:
            if lay.matches(buf):
                return lay
        return None

    def add(self, lay: _Layout) -> None:
        self.items.insert(0, lay)
        del self.items[self.size:]


def _walk_arrays(r: '_Reader', count: int, static: list, arrays: list) -> list:
    """Read ``count`` float64 sequences, recording their layout; returns the values."""
    out = []
    for _ in range(count):
        r._align(4)
        static.append((r.pos, r.pos + 4))             # the element count
        vals = r.f64seq()
        n = len(vals)
        arrays.append((r.pos - 8 * n, struct.Struct(f'<{n}d') if n else None))
        out.append(vals)
    return out


_JS_CACHE = _LayoutCache()
_REF_CACHE = _LayoutCache()


def decode_joint_state(buf):
    """``((stamp_ns, names, position, velocity, effort), None)`` or ``(None, reason)``."""
    lay = _JS_CACHE.find(buf)
    if lay is not None:
        sec, nsec = _STAMP.unpack_from(buf, 4)
        pos, vel, eff = lay.values(buf)
        return (sec * 1_000_000_000 + nsec, lay.names, pos, vel, eff), None
    try:
        r = _Reader(buf)
        stamp = r.stamp()
        start = r.pos
        r.string()                          # frame_id
        names = r.strings()
        static = [(start, r.pos)]
        arrays: list = []
        pos, vel, eff = _walk_arrays(r, 3, static, arrays)
    except _Malformed as exc:
        return None, f'malformed JointState ({exc})'
    if r.le:
        _JS_CACHE.add(_Layout(buf, static, arrays, names))
    return (stamp, names, pos, vel, eff), None


def decode_float64_array(buf):
    """Decode a Float64MultiArray: ``(data tuple, None)`` or ``(None, reason)``."""
    try:
        r = _Reader(buf)
        ndim = r.u32()
        if ndim > 64:
            raise _Malformed('too many layout dimensions')
        for _ in range(ndim):
            r.string()
            r.u32()
            r.u32()
        r.u32()                             # data_offset
        return r.f64seq(), None
    except _Malformed as exc:
        return None, f'malformed Float64MultiArray ({exc})'


def decode_reference(buf):
    """
    Decode the first point of a JointTrajectory.

    Returns ``((stamp_ns, names, positions, velocities, accelerations), None)`` or
    ``(None, reason)``.
    """
    lay = _REF_CACHE.find(buf)
    if lay is not None:
        sec, nsec = _STAMP.unpack_from(buf, 4)
        pos, vel, acc = lay.values(buf)
        return (sec * 1_000_000_000 + nsec, lay.names, pos, vel, acc), None
    try:
        r = _Reader(buf)
        stamp = r.stamp()
        start = r.pos
        r.string()
        names = r.strings()
        npts = r.u32()
        if npts == 0:
            return None, 'reference without points'
        static = [(start, r.pos)]
        arrays: list = []
        pos, vel, acc = _walk_arrays(r, 3, static, arrays)
    except _Malformed as exc:
        return None, f'malformed JointTrajectory ({exc})'
    if r.le:
        _REF_CACHE.add(_Layout(buf, static, arrays, names))
    return (stamp, names, pos, vel, acc), None


def decode_clock(buf):
    """``(stamp_ns, None)`` or ``(None, reason)``."""
    try:
        return _Reader(buf).stamp(), None
    except _Malformed as exc:
        return None, f'malformed Clock ({exc})'
