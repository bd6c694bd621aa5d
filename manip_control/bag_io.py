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
rosbag2 reading and writing helpers built on ``rosbags`` (ROS-free: never imports rclpy).

Writing
-------
:class:`BagWriter` records already-serialized CDR messages (what an rclpy subscription created
with ``raw=True`` delivers) into a rosbag2 directory with **metadata version 8** (readable by
Humble; version 9 is not), in MCAP or sqlite3 storage. Every topic is registered with its
message type, its full message definition (``ros2msg``, so readers without a typestore can
decode it) and its offered QoS profiles. :func:`write_params` / :meth:`BagWriter.write_params`
put the resolved run parameters in ``params.yaml`` beside ``metadata.yaml``.

Reading
-------
:class:`BagReader` opens a rosbag2 directory (sqlite3 or MCAP, metadata versions 4 to 9; a
directory that lost its ``metadata.yaml`` is read from its storage files) or a bare ``.db3`` /
``.mcap`` file. Types are taken from the bag's own message definitions when present, else from a
default typestore (ROS 2 Humble for metadata version <= 6 or no metadata, Jazzy otherwise).
Topics whose type cannot be resolved are listed in :attr:`BagReader.skipped` with the reason;
they are never fatal. Messages with a few trailing bytes after the CDR payload are accepted
(:func:`deserialize_tolerant`). Unreadable, truncated or corrupt bags raise :class:`BagError`
naming the file.

Bulk extraction (:meth:`BagReader.read_series`) decodes ``sensor_msgs/JointState``,
``std_msgs/Float64MultiArray`` and ``trajectory_msgs/JointTrajectory`` topics into numpy arrays.
Messages of one topic that have the same byte length and the same non-numeric content (names,
array lengths) share one CDR layout; the layout is found by walking the first such message and
the numbers of all of them are read with one numpy view per field. Messages that do not fit a
layout are decoded one by one with the rosbags deserializer.

"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field
import itertools
import operator
import os
from pathlib import Path
import sqlite3
import struct
import threading
from typing import Any

import apsw as _apsw  # rosbags' sqlite3 storage uses apsw
import numpy as np
from rosbags.interfaces import Connection
from rosbags.interfaces import ConnectionExtRosbag2
from rosbags.interfaces import MessageDefinition
from rosbags.interfaces import MessageDefinitionFormat
from rosbags.interfaces import Qos
from rosbags.interfaces import QosDurability
from rosbags.interfaces import QosHistory
from rosbags.interfaces import QosLiveliness
from rosbags.interfaces import QosReliability
from rosbags.interfaces import QosTime
from rosbags.rosbag2 import ReaderError
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer
from rosbags.rosbag2 import WriterError
from rosbags.rosbag2.metadata import parse_qos
from rosbags.rosbag2.metadata import ReaderMetadata
from rosbags.rosbag2.reader import DirectoryReader
from rosbags.rosbag2.storage_mcap import decompress as _mcap_decompress
from rosbags.rosbag2.storage_mcap import McapReader
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Reader
from rosbags.serde import SerdeError
from rosbags.typesys import get_types_from_idl
from rosbags.typesys import get_types_from_msg
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores
from rosbags.typesys import TypesysError
import yaml

__all__ = [
    'BagError',
    'DecodeError',
    'BagWriter',
    'BagReader',
    'TopicInfo',
    'JointStateSeries',
    'ArraySeries',
    'TrajectorySeries',
    'JOINT_STATE',
    'FLOAT64_MULTI_ARRAY',
    'JOINT_TRAJECTORY',
    'make_qos',
    'qos_from_profile',
    'message_definition',
    'normalize_msgtype',
    'default_typestore',
    'deserialize_tolerant',
    'write_params',
    'read_params',
    'PARAMS_FILE',
]

JOINT_STATE = 'sensor_msgs/msg/JointState'
FLOAT64_MULTI_ARRAY = 'std_msgs/msg/Float64MultiArray'
JOINT_TRAJECTORY = 'trajectory_msgs/msg/JointTrajectory'

PARAMS_FILE = 'params.yaml'
METADATA_VERSION = 8
#: Trailing bytes accepted after a CDR payload (rosbags itself accepts at most 3).
MAX_TRAILING_BYTES = 16

_STORAGES = {'mcap': StoragePlugin.MCAP, 'sqlite3': StoragePlugin.SQLITE3}
_SUFFIXES = {'.mcap': 'mcap', '.db3': 'sqlite3'}
_DISTRO_STORES = {
    'foxy': Stores.ROS2_FOXY, 'galactic': Stores.ROS2_GALACTIC, 'humble': Stores.ROS2_HUMBLE,
    'iron': Stores.ROS2_IRON, 'jazzy': Stores.ROS2_JAZZY, 'kilted': Stores.ROS2_KILTED,
}
_INFINITE = QosTime(9223372036, 854775807)   # RMW_DURATION_INFINITE as rosbag2 records it


class BagError(Exception):
    """
    A bag cannot be read or written (missing, not a bag, truncated, corrupt).

    The message always names the offending file or directory.
    """


class DecodeError(ValueError):
    """One serialized message cannot be decoded as its type."""


# ---------------------------------------------------------------------------------------------
# types and typestores


def normalize_msgtype(msgtype: str) -> str:
    """``'sensor_msgs/JointState'`` -> ``'sensor_msgs/msg/JointState'`` (idempotent)."""
    parts = msgtype.strip().split('/')
    if len(parts) == 2:
        return f'{parts[0]}/msg/{parts[1]}'
    return '/'.join(parts)


def default_typestore(store: Stores | str = Stores.ROS2_JAZZY):
    """A rosbags typestore of a ROS 2 distribution (``Stores`` member or distro name)."""
    if isinstance(store, str) and not isinstance(store, Stores):
        try:
            store = _DISTRO_STORES[store.lower()]
        except KeyError:
            raise BagError(f'unknown ROS distribution {store!r} for a typestore') from None
    return get_typestore(store)


_JAZZY = None


def _jazzy():
    global _JAZZY
    if _JAZZY is None:
        _JAZZY = get_typestore(Stores.ROS2_JAZZY)
    return _JAZZY


def message_definition(msgtype: str, typestore=None) -> tuple[str, str]:
    """
    Full ``ros2msg`` definition text and RIHS01 hash of ``msgtype``.

    The text is the concatenated form rosbag2 stores (the type's own fields, then every nested
    type after a ``====`` / ``MSG: pkg/msg/Name`` separator).
    """
    store = typestore or _jazzy()
    msgtype = normalize_msgtype(msgtype)
    try:
        text, _ = store.generate_msgdef(msgtype, ros_version=2)
        return text, store.hash_rihs01(msgtype)
    except (KeyError, TypesysError) as exc:
        raise BagError(f'message type {msgtype!r} is unknown to the typestore '
                       f'({exc}); pass msgdef=') from None


def _parse_definition(msgtype: str, fmt: MessageDefinitionFormat, text: str) -> dict:
    """Types dictionary (rosbags ``Typesdict``) of a stored message definition."""
    if fmt == MessageDefinitionFormat.MSG:
        return get_types_from_msg(text, msgtype)
    sep = '=' * 80 + '\n'
    types: dict = {}
    if text.startswith(f'{sep}IDL: '):
        for part in text.split(sep)[1:]:
            _, idl = part.split('\n', 1)
            types.update(get_types_from_idl(idl))
    else:
        types.update(get_types_from_idl(text))
    return types


def deserialize_tolerant(typestore, raw: bytes | memoryview, msgtype: str,
                         max_trailing: int = MAX_TRAILING_BYTES):
    """
    Deserialize one CDR message, accepting up to ``max_trailing`` bytes after the payload.

    rosbags' ``Typestore.deserialize_cdr`` rejects more than 3 trailing bytes; some serializers
    pad further. This calls the typestore's generated decoder, which returns the number of bytes
    it consumed, and checks that against the buffer length.

    Raises
    ------
    DecodeError
        Bad encapsulation header, payload shorter than the type needs, wrong content, or more
        than ``max_trailing`` unused bytes.

    """
    if len(raw) < 4 or raw[0] != 0 or raw[1] not in (0, 1):
        raise DecodeError(f'{msgtype}: invalid or unsupported CDR encapsulation header')
    try:
        msgdef = typestore.get_msgdef(msgtype)
    except (KeyError, TypesysError, SyntaxError) as exc:
        raise DecodeError(f'{msgtype}: no usable definition ({exc})') from None
    func = msgdef.deserialize_cdr_le if raw[1] else msgdef.deserialize_cdr_be
    try:
        message, pos = func(memoryview(raw)[4:], 0, msgdef.cls, typestore)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError, TypeError,
            SerdeError) as exc:
        raise DecodeError(f'{msgtype}: {exc}') from None
    extra = len(raw) - 4 - pos
    if extra < 0:
        raise DecodeError(f'{msgtype}: payload truncated by {-extra} bytes')
    if extra > max_trailing:
        raise DecodeError(f'{msgtype}: {extra} unexpected bytes after the payload')
    return message


# ---------------------------------------------------------------------------------------------
# QoS and params


_ENUM_NAMES = {
    'history': (QosHistory, {'system_default': 0, 'keep_last': 1, 'keep_all': 2,
                             'unknown': 3}),
    'reliability': (QosReliability, {'system_default': 0, 'reliable': 1, 'best_effort': 2,
                                     'unknown': 3, 'best_available': 4}),
    'durability': (QosDurability, {'system_default': 0, 'transient_local': 1, 'volatile': 2,
                                   'unknown': 3, 'best_available': 4}),
    'liveliness': (QosLiveliness, {'system_default': 0, 'automatic': 1, 'manual_by_node': 2,
                                   'manual_by_topic': 3, 'unknown': 4,
                                   'best_available': 5}),
}


def _qos_enum(kind: str, value: Any):
    cls, names = _ENUM_NAMES[kind]
    if hasattr(value, 'value') and not isinstance(value, cls):   # e.g. an rclpy IntEnum
        value = value.value
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().lower().replace('-', '_').replace(' ', '_')
        if key not in names:
            raise BagError(f'QoS {kind}: unknown value {value!r} '
                           f'(expected one of {sorted(names)})')
        value = names[key]
    try:
        return cls(int(value))
    except (TypeError, ValueError):
        raise BagError(f'QoS {kind}: unknown value {value!r}') from None


def _qos_time(value: Any) -> QosTime:
    if value is None:
        return _INFINITE
    if isinstance(value, QosTime):
        return value
    if hasattr(value, 'nanoseconds'):   # rclpy Duration
        ns = int(value.nanoseconds)
    elif isinstance(value, Mapping):
        return QosTime(int(value['sec']), int(value['nsec']))
    else:
        ns = int(round(float(value) * 1e9))
    return QosTime(ns // 1_000_000_000, ns % 1_000_000_000)


def make_qos(reliability: str | int = 'reliable', durability: str | int = 'volatile',
             history: str | int = 'keep_last', depth: int = 10,
             liveliness: str | int = 'automatic', deadline=None, lifespan=None,
             liveliness_lease_duration=None) -> Qos:
    """
    One offered QoS profile as rosbag2 records it.

    Enum values may be names (``'reliable'``, ``'best_effort'``, ``'transient_local'``, ...)
    or the rmw integers; durations are rclpy Durations, seconds (float), ``{'sec', 'nsec'}``
    mappings or None for "infinite".
    """
    return Qos(_qos_enum('history', history), int(depth), _qos_enum('reliability', reliability),
               _qos_enum('durability', durability), _qos_time(deadline), _qos_time(lifespan),
               _qos_enum('liveliness', liveliness), _qos_time(liveliness_lease_duration), False)


def qos_from_profile(profile: Any) -> Qos:
    """Convert an rclpy ``QoSProfile`` (duck-typed: no rclpy import here) to a rosbags Qos."""
    def dur(name):
        value = getattr(profile, name, None)
        if value is not None and getattr(value, 'nanoseconds', None) == 0:
            return QosTime(0, 0)
        return value
    return make_qos(reliability=profile.reliability, durability=profile.durability,
                    history=profile.history, depth=getattr(profile, 'depth', 0),
                    liveliness=getattr(profile, 'liveliness', 1), deadline=dur('deadline'),
                    lifespan=dur('lifespan'),
                    liveliness_lease_duration=dur('liveliness_lease_duration'))


def _qos_list(qos: Any) -> list[Qos]:
    if qos is None:
        return [make_qos()]
    if isinstance(qos, (str, Qos)) or isinstance(qos, Mapping) or hasattr(qos, 'reliability'):
        qos = [qos]
    out = []
    for item in qos:
        if isinstance(item, Qos):
            out.append(item)
        elif isinstance(item, str):
            out.extend(parse_qos(item))
        elif isinstance(item, Mapping):
            if 'deadline' in item and 'avoid_ros_namespace_conventions' in item:
                out.extend(parse_qos([dict(item)]))
            else:
                out.append(make_qos(**item))
        else:
            out.append(qos_from_profile(item))
    return out


def _plain(obj: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and dataclasses to YAML-safe plain data."""
    if hasattr(obj, 'to_dict') and callable(obj.to_dict):
        obj = obj.to_dict()
    elif hasattr(obj, '__dataclass_fields__'):
        import dataclasses
        obj = dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_params(bag_dir: str | Path, params: Mapping[str, Any]) -> Path:
    """
    Write the resolved run parameters to ``bag_dir/params.yaml`` (atomically).

    ``params`` is a mapping (numpy values, tuples and dataclasses are converted to plain YAML).
    Returns the path written.
    """
    bag_dir = Path(bag_dir)
    target = bag_dir / PARAMS_FILE
    try:
        text = yaml.safe_dump(_plain(params), sort_keys=False, default_flow_style=None)
        tmp = target.with_suffix('.yaml.tmp')
        tmp.write_text(text, encoding='utf-8')
        os.replace(tmp, target)
    except (OSError, yaml.YAMLError) as exc:
        raise BagError(f'{target}: cannot write parameters ({exc})') from None
    return target


def read_params(bag_path: str | Path) -> dict | None:
    """The ``params.yaml`` beside a bag's ``metadata.yaml`` (or beside a bare file), or None."""
    bag_path = Path(bag_path)
    target = (bag_path if bag_path.is_dir() else bag_path.parent) / PARAMS_FILE
    if not target.is_file():
        return None
    try:
        data = yaml.safe_load(target.read_text(encoding='utf-8'))
    except (OSError, yaml.YAMLError) as exc:
        raise BagError(f'{target}: unreadable parameters file ({exc})') from None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------------------------------------
# writer


class BagWriter:
    """
    rosbag2 writer for already-serialized CDR messages (metadata version 8).

    Parameters
    ----------
    path : str or Path
        Bag directory to create. It must not exist (an existing *empty* directory is accepted).
    storage : {'mcap', 'sqlite3'}
        Storage plugin (default ``'mcap'``, the Jazzy default; both are readable by Humble's
        rosbag2 with the mcap plugin installed, sqlite3 always).
    typestore : rosbags Typestore, optional
        Where message definitions of registered types come from (default ROS 2 Jazzy).
    flush_every : int
        Make buffered messages durable every this many writes (sqlite3: commit; MCAP: close the
        pending chunk and flush the file). 0 disables periodic flushing.

    Usage (e.g. from a recorder node with ``raw=True`` subscriptions)::

        writer = BagWriter('runs/r1', storage='mcap')
        writer.open()
        writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState',
                         qos=make_qos('reliable', 'volatile', depth=10))
        writer.write_params(scenario.to_dict())
        ...
        writer.write('/joint_states', node.get_clock().now().nanoseconds, raw_bytes)
        ...
        writer.close()

    ``write`` is thread-safe (one lock) and does a dict lookup plus the storage insert.

    """

    def __init__(self, path: str | Path, storage: str = 'mcap', *, typestore=None,
                 flush_every: int = 1000) -> None:
        self.path = Path(path)
        if storage not in _STORAGES:
            raise BagError(f'{self.path}: unknown storage {storage!r} '
                           f'(expected one of {sorted(_STORAGES)})')
        self.storage = storage
        self._typestore = typestore
        self._flush_every = int(flush_every)
        self._writer: Writer | None = None
        self._connections: dict[str, Connection] = {}
        self._counts: dict[str, int] = {}
        self._since_flush = 0
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------
    def open(self) -> BagWriter:
        """Create the bag directory and storage file."""
        if self._writer is not None:
            raise BagError(f'{self.path}: writer already open')
        if self.path.is_dir() and not any(self.path.iterdir()):
            self.path.rmdir()
        try:
            writer = Writer(self.path, version=METADATA_VERSION,
                            storage_plugin=_STORAGES[self.storage])
            writer.open()
        except (WriterError, OSError) as exc:
            raise BagError(f'{self.path}: cannot create bag ({exc})') from None
        self._writer = writer
        self._tune_storage()
        return self

    def _tune_storage(self) -> None:
        """sqlite3: reopen the connection usable from any thread, with rosbag2's write pragmas."""
        st = self._writer.storage
        conn = getattr(st, 'conn', None)
        if isinstance(conn, sqlite3.Connection):
            conn.commit()
            conn.close()
            st.conn = sqlite3.connect(f'file:{st.path}', uri=True, check_same_thread=False)
            st.conn.execute('PRAGMA journal_mode=MEMORY')
            st.conn.execute('PRAGMA synchronous=OFF')
            st.cursor = st.conn.cursor()

    def close(self) -> None:
        """Finish the storage file and write ``metadata.yaml`` (idempotent)."""
        with self._lock:
            if self._writer is None:
                return
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except (WriterError, OSError, sqlite3.Error) as exc:
                raise BagError(f'{self.path}: cannot finish bag ({exc})') from None
            self._closed = True

    def abort(self) -> None:
        """Stop without writing metadata (the storage file stays, readable as a bare file)."""
        with self._lock:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                try:
                    writer.abort()
                except Exception:  # noqa: BLE001 - best effort on an error path
                    pass

    def __enter__(self) -> BagWriter:
        if self._writer is None:
            self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    # -- topics -----------------------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str, *, msgdef: str | None = None,
                  qos: Any = None) -> None:
        """
        Register ``topic`` with its type, message definition and offered QoS profiles.

        Parameters
        ----------
        topic : str
            Fully qualified topic name.
        msgtype : str
            ``pkg/msg/Name`` (``pkg/Name`` accepted).
        msgdef : str, optional
            Concatenated ``ros2msg`` definition; default: generated from the typestore.
        qos : optional
            Offered QoS profile(s): a rosbags ``Qos``, an rclpy ``QoSProfile``, a mapping of
            :func:`make_qos` arguments or a rosbag2 QoS mapping, a YAML string, or a list of
            those. Default: one reliable / volatile / keep-last(10) profile.

        """
        if self._writer is None:
            raise BagError(f'{self.path}: writer not open')
        if topic in self._connections:
            raise BagError(f'{self.path}: topic {topic} registered twice')
        msgtype = normalize_msgtype(msgtype)
        if msgdef is None:
            msgdef, rihs01 = message_definition(msgtype, self._typestore)
        else:
            try:
                store = get_typestore(Stores.EMPTY)
                store.register(get_types_from_msg(msgdef, msgtype))
                rihs01 = store.hash_rihs01(msgtype)
            except (TypesysError, KeyError) as exc:
                raise BagError(f'{self.path}: invalid message definition for {msgtype} '
                               f'({exc})') from None
        profiles = _qos_list(qos)
        with self._lock:
            try:
                conn = self._writer.add_connection(topic, msgtype, msgdef=msgdef,
                                                   rihs01=rihs01,
                                                   offered_qos_profiles=profiles)
            except (WriterError, sqlite3.Error, OSError) as exc:
                raise BagError(f'{self.path}: cannot add topic {topic} ({exc})') from None
            self._connections[topic] = conn
            self._counts[topic] = 0

    @property
    def topics(self) -> dict[str, str]:
        """Registered topics and their types."""
        return {t: c.msgtype for t, c in self._connections.items()}

    @property
    def counts(self) -> dict[str, int]:
        """Messages written per topic."""
        return dict(self._counts)

    # -- data -------------------------------------------------------------------------------
    def write(self, topic: str, timestamp_ns: int, raw: bytes | memoryview) -> None:
        """
        Append one serialized CDR message (``raw`` as an rclpy ``raw=True`` callback gets it).

        ``timestamp_ns`` is the receive time [ns] stored as the bag timestamp.
        """
        try:
            conn = self._connections[topic]
        except KeyError:
            raise BagError(f'{self.path}: topic {topic} not registered '
                           '(call add_topic first)') from None
        with self._lock:
            writer = self._writer
            if writer is None:
                raise BagError(f'{self.path}: writer not open')
            writer.write(conn, timestamp_ns, raw)
            self._counts[topic] += 1
            self._since_flush += 1
            if self._flush_every and self._since_flush >= self._flush_every:
                self._flush_locked()

    def flush(self) -> None:
        """Make everything written so far reach the storage file."""
        with self._lock:
            if self._writer is not None:
                self._flush_locked()

    def _flush_locked(self) -> None:
        self._since_flush = 0
        st = self._writer.storage
        conn = getattr(st, 'conn', None)
        if conn is not None:
            conn.commit()
        elif hasattr(st, 'close_chunk') and st.chunk.bio.tell():
            st.close_chunk()
            st.bio.flush()

    def write_params(self, params: Mapping[str, Any]) -> Path:
        """Write ``params.yaml`` in the bag directory (see :func:`write_params`)."""
        if self._writer is None and not self._closed:
            raise BagError(f'{self.path}: writer not open')
        return write_params(self.path, params)


# ---------------------------------------------------------------------------------------------
# CDR layout walking (fast path)


class _NoLayout(Exception):
    """A message cannot be walked as a fixed layout (fall back to the generic decoder)."""


class _Walker:
    """
    Walk a little-endian CDR message and record where its parts are.

    ``static`` collects byte ranges that must be identical for two messages to share the
    layout (lengths, counts, names); ``fields`` maps a key to ``(offset, kind, count)`` of the
    numbers to extract. Alignment is relative to the end of the 4-byte encapsulation header.
    """

    __slots__ = ('raw', 'pos', 'static', 'fields', 'meta')

    def __init__(self, raw: bytes) -> None:
        if len(raw) < 4 or raw[0] != 0 or raw[1] != 1:
            raise _NoLayout('not little-endian CDR')
        self.raw = raw
        self.pos = 4
        self.static: list[tuple[int, int]] = [(0, 2)]
        self.fields: dict[Any, tuple[int, str, int]] = {}
        self.meta: dict[str, Any] = {}

    def _need(self, size: int) -> None:
        if self.pos + size > len(self.raw):
            raise _NoLayout('message shorter than its layout')

    def align(self, n: int) -> None:
        self.pos += (-(self.pos - 4)) % n

    def u32(self, static: bool = True) -> int:
        self.align(4)
        self._need(4)
        (value,) = struct.unpack_from('<I', self.raw, self.pos)
        if static:
            self.static.append((self.pos, self.pos + 4))
        self.pos += 4
        return value

    def string(self, static: bool = True) -> str:
        n = self.u32()
        if n == 0:
            return ''
        self._need(n)
        if static:
            self.static.append((self.pos, self.pos + n))
        text = self.raw[self.pos:self.pos + n - 1].decode('utf-8', 'replace')
        self.pos += n
        return text

    def strings(self) -> list[str]:
        return [self.string() for _ in range(self.u32())]

    def time(self, key: Any) -> None:
        self.align(4)
        self._need(8)
        self.fields[key] = (self.pos, 'time', 1)
        self.pos += 8

    def f64s(self, key: Any) -> int:
        n = self.u32()
        if n:
            self.align(8)
            self._need(8 * n)
            self.fields[key] = (self.pos, 'f64', n)
            self.pos += 8 * n
        else:
            self.fields[key] = (self.pos, 'f64', 0)
        return n


def _walk_joint_state(w: _Walker) -> None:
    w.time('stamp')
    w.string(static=False)            # frame_id (its length stays static)
    w.meta['names'] = tuple(w.strings())
    for key in ('position', 'velocity', 'effort'):
        w.f64s(key)


def _walk_float64_multi_array(w: _Walker) -> None:
    for _ in range(w.u32()):          # layout.dim[]
        w.string()
        w.u32()
        w.u32()
    w.u32()                           # data_offset
    w.f64s('data')


def _walk_joint_trajectory(w: _Walker) -> None:
    w.time('stamp')
    w.string(static=False)
    w.meta['names'] = tuple(w.strings())
    npoints = w.u32()
    w.meta['npoints'] = npoints
    for k in range(npoints):
        for key in ('positions', 'velocities', 'accelerations', 'effort'):
            w.f64s((key, k))
        w.time(('tfs', k))


def _msg_joint_state(msg) -> tuple[dict, dict]:
    st = msg.header.stamp
    return ({'names': tuple(msg.name)},
            {'stamp': np.array([st.sec * 1_000_000_000 + st.nanosec], np.int64),
             'position': np.asarray(msg.position, float)[None, :],
             'velocity': np.asarray(msg.velocity, float)[None, :],
             'effort': np.asarray(msg.effort, float)[None, :]})


def _msg_float64_multi_array(msg) -> tuple[dict, dict]:
    return {}, {'data': np.asarray(msg.data, float)[None, :]}


def _msg_joint_trajectory(msg) -> tuple[dict, dict]:
    st = msg.header.stamp
    values: dict[Any, np.ndarray] = {
        'stamp': np.array([st.sec * 1_000_000_000 + st.nanosec], np.int64)}
    for k, pt in enumerate(msg.points):
        for key in ('positions', 'velocities', 'accelerations', 'effort'):
            values[(key, k)] = np.asarray(getattr(pt, key), float)[None, :]
        tfs = pt.time_from_start
        values[('tfs', k)] = np.array([tfs.sec * 1_000_000_000 + tfs.nanosec], np.int64)
    return {'names': tuple(msg.joint_names), 'npoints': len(msg.points)}, values


_DECODERS = {
    JOINT_STATE: (_walk_joint_state, _msg_joint_state),
    FLOAT64_MULTI_ARRAY: (_walk_float64_multi_array, _msg_float64_multi_array),
    JOINT_TRAJECTORY: (_walk_joint_trajectory, _msg_joint_trajectory),
}

_MAX_TEMPLATES = 8


@dataclass
class _Group:
    idx: np.ndarray                 # message indices (into the topic's sorted message list)
    meta: dict
    values: dict


def _extract(rows: np.ndarray, fields: Mapping) -> dict:
    """Read the fields of a layout from an (n, L) uint8 array of identically laid out messages."""
    out = {}
    n = rows.shape[0]
    for key, (off, kind, count) in fields.items():
        if kind == 'time':
            sec = np.ascontiguousarray(rows[:, off:off + 4]).view('<i4')[:, 0].astype(np.int64)
            nsec = np.ascontiguousarray(rows[:, off + 4:off + 8]).view('<u4')[:, 0]
            out[key] = sec * 1_000_000_000 + nsec.astype(np.int64)
        elif count:
            block = np.ascontiguousarray(rows[:, off:off + 8 * count])
            out[key] = block.view('<f8').reshape(n, count).astype(np.float64, copy=False)
        else:
            out[key] = np.empty((n, 0))
    return out


def _same_static(rows: np.ndarray, ranges: list[tuple[int, int]], ref: int) -> np.ndarray:
    """Rows whose bytes in ``ranges`` equal those of row ``ref`` (compared as 8-byte words)."""
    merged: list[list[int]] = []
    for a, b in sorted(ranges):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    width = sum(b - a for a, b in merged)
    packed = np.zeros((rows.shape[0], width + (-width) % 8), np.uint8)
    pos = 0
    for a, b in merged:
        packed[:, pos:pos + b - a] = rows[:, a:b]
        pos += b - a
    words = packed.view('<u8')
    return (words == words[ref]).all(axis=1)


def _decode_batch(data: Sequence[bytes], msgtype: str, deser: Callable[[bytes], Any],
                  stats: dict) -> list[_Group]:
    """
    Decode messages of one fixed-layout type into groups of identical layout.

    ``deser`` is the tolerant generic deserializer used for messages that fit no layout;
    ``stats`` receives ``'fast'``, ``'generic'`` and ``'errors'`` counts and a first error.
    """
    walk, from_msg = _DECODERS[msgtype]
    groups: list[_Group] = []
    n = len(data)
    if n == 0:
        return groups
    lengths = np.fromiter(map(len, data), np.int64, n)
    generic: list[int] = []
    for length in np.unique(lengths):
        idx = np.flatnonzero(lengths == length) if len(lengths) > 1 else np.arange(n)
        if idx.size == n:
            buf = b''.join(data)
        else:
            buf = b''.join([data[i] for i in idx.tolist()])
        rows = np.frombuffer(buf, np.uint8).reshape(idx.size, int(length))
        remaining = np.arange(idx.size)
        templates = 0
        while remaining.size and templates < _MAX_TEMPLATES:
            first = int(remaining[0])
            w = _Walker(data[int(idx[first])]) if rows[first, :2].tolist() == [0, 1] else None
            try:
                if w is None:
                    raise _NoLayout('big-endian')
                walk(w)
            except (_NoLayout, struct.error, UnicodeDecodeError):
                generic.append(int(idx[first]))
                remaining = remaining[1:]
                templates += 1
                continue
            sub = rows if remaining.size == idx.size else rows[remaining]
            same = _same_static(sub, w.static, first if sub is rows else 0)
            chosen = sub if same.all() else sub[same]
            groups.append(_Group(idx[remaining[same]], w.meta, _extract(chosen, w.fields)))
            stats['fast'] = stats.get('fast', 0) + int(same.sum())
            remaining = remaining[~same]
            templates += 1
        generic.extend(idx[remaining].tolist())
    for i in sorted(generic):
        try:
            msg = deser(data[i])
        except DecodeError as exc:
            stats['errors'] = stats.get('errors', 0) + 1
            stats.setdefault('first_error', str(exc))
            continue
        meta, values = from_msg(msg)
        groups.append(_Group(np.array([i]), meta, values))
        stats['generic'] = stats.get('generic', 0) + 1
    return groups


# ---------------------------------------------------------------------------------------------
# decoded series


@dataclass
class JointStateSeries:
    """
    A ``sensor_msgs/JointState`` topic as arrays (messages in receive order).

    Attributes
    ----------
    recv_ns, stamp_ns : ndarray of int64, shape (N,)
        Bag (receive) timestamps and header stamps [ns].
    names : list of str
        Joint names (union over messages, in order of first appearance).
    position, velocity, effort : ndarray, shape (N, J)
        Values per joint, NaN where a message does not carry that joint or array.

    """

    topic: str
    msgtype: str
    recv_ns: np.ndarray
    stamp_ns: np.ndarray
    names: list[str]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    decode_errors: int = 0
    decode_stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.recv_ns)


@dataclass
class ArraySeries:
    """A ``std_msgs/Float64MultiArray`` topic: ``data`` (N, M), NaN-padded if lengths vary."""

    topic: str
    msgtype: str
    recv_ns: np.ndarray
    data: np.ndarray
    decode_errors: int = 0
    decode_stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.recv_ns)


@dataclass
class TrajectorySeries:
    """
    A ``trajectory_msgs/JointTrajectory`` topic flattened to one sample per point.

    Attributes
    ----------
    recv_ns, stamp_ns : ndarray of int64, shape (N,)
        Per message.
    joint_names : list of str
    sample_msg : ndarray of int, shape (S,)
        Message index of each sample (point).
    time_from_start_ns : ndarray of int64, shape (S,)
    positions, velocities, accelerations, effort : ndarray, shape (S, J), NaN where absent.

    """

    topic: str
    msgtype: str
    recv_ns: np.ndarray
    stamp_ns: np.ndarray
    joint_names: list[str]
    sample_msg: np.ndarray
    time_from_start_ns: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray
    effort: np.ndarray
    decode_errors: int = 0
    decode_stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.recv_ns)

    def sample_times_ns(self, base: str = 'header') -> np.ndarray:
        """
        Time of each sample [ns]: header stamp (receive time if ``base == 'receive'`` or if
        every stamp is zero, i.e. unset) + time_from_start.
        """
        use_header = base == 'header' and bool(self.stamp_ns.size) and bool(self.stamp_ns.any())
        ref = self.stamp_ns if use_header else self.recv_ns
        return ref[self.sample_msg] + self.time_from_start_ns


def _union_names(groups: list[_Group]) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    for g in sorted(groups, key=lambda g: int(g.idx[0])):
        for nm in g.meta.get('names', ()):
            if nm not in seen:
                seen.add(nm)
                names.append(nm)
    return names


def _scatter(out: np.ndarray, rows: np.ndarray, cols: list[int], values: np.ndarray) -> None:
    k = min(len(cols), values.shape[1])
    if k == 0:
        return
    if cols[:k] == list(range(k)) and k == out.shape[1]:
        out[rows] = values[:, :k]
    else:
        out[np.ix_(rows, cols[:k])] = values[:, :k]


def _assemble_joint_states(topic, msgtype, recv, groups, stats) -> JointStateSeries:
    n = len(recv)
    names = _union_names(groups)
    col = {nm: j for j, nm in enumerate(names)}
    stamp = np.zeros(n, np.int64)
    arrays = {k: np.full((n, len(names)), np.nan) for k in ('position', 'velocity', 'effort')}
    ok = np.zeros(n, bool)
    for g in groups:
        cols = [col[nm] for nm in g.meta['names']]
        stamp[g.idx] = g.values['stamp']
        ok[g.idx] = True
        for key, arr in arrays.items():
            _scatter(arr, g.idx, cols, g.values[key])
    keep = ok if not ok.all() else slice(None)
    return JointStateSeries(topic, msgtype, recv[keep], stamp[keep], names,
                            arrays['position'][keep], arrays['velocity'][keep],
                            arrays['effort'][keep], stats.get('errors', 0), stats)


def _assemble_arrays(topic, msgtype, recv, groups, stats) -> ArraySeries:
    n = len(recv)
    width = max((g.values['data'].shape[1] for g in groups), default=0)
    data = np.full((n, width), np.nan)
    ok = np.zeros(n, bool)
    for g in groups:
        vals = g.values['data']
        data[g.idx, :vals.shape[1]] = vals
        ok[g.idx] = True
    keep = ok if not ok.all() else slice(None)
    return ArraySeries(topic, msgtype, recv[keep], data[keep], stats.get('errors', 0), stats)


def _assemble_trajectories(topic, msgtype, recv, groups, stats) -> TrajectorySeries:
    n = len(recv)
    names = _union_names(groups)
    col = {nm: j for j, nm in enumerate(names)}
    stamp = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    parts: list[tuple] = []
    for g in groups:
        stamp[g.idx] = g.values['stamp']
        ok[g.idx] = True
        cols = [col[nm] for nm in g.meta['names']]
        for k in range(g.meta['npoints']):
            block = {}
            for key in ('positions', 'velocities', 'accelerations', 'effort'):
                arr = np.full((len(g.idx), len(names)), np.nan)
                _scatter(arr, np.arange(len(g.idx)), cols, g.values[(key, k)])
                block[key] = arr
            parts.append((g.idx, np.full(len(g.idx), k), g.values[('tfs', k)], block))
    # keep only decoded messages and renumber
    new_index = np.cumsum(ok) - 1
    if len(parts) == 1 and ok.all():          # one layout, one point: already in order
        idx, pt, tfs, block = parts[0]
        order = np.argsort(idx, kind='stable')
        if (order == np.arange(len(order))).all():
            return TrajectorySeries(topic, msgtype, recv, stamp, names, idx, tfs,
                                    block['positions'], block['velocities'],
                                    block['accelerations'], block['effort'],
                                    stats.get('errors', 0), stats)
    if parts:
        msg = np.concatenate([p[0] for p in parts])
        pt = np.concatenate([p[1] for p in parts])
        order = np.lexsort((pt, msg))
        sample_msg = new_index[msg[order]]
        tfs = np.concatenate([p[2] for p in parts])[order]
        arrays = {key: np.concatenate([p[3][key] for p in parts])[order]
                  for key in ('positions', 'velocities', 'accelerations', 'effort')}
    else:
        sample_msg = np.zeros(0, np.int64)
        tfs = np.zeros(0, np.int64)
        arrays = {key: np.zeros((0, len(names)))
                  for key in ('positions', 'velocities', 'accelerations', 'effort')}
    return TrajectorySeries(topic, msgtype, recv[ok], stamp[ok], names, sample_msg, tfs,
                            arrays['positions'], arrays['velocities'],
                            arrays['accelerations'], arrays['effort'],
                            stats.get('errors', 0), stats)


_ASSEMBLERS = {
    JOINT_STATE: _assemble_joint_states,
    FLOAT64_MULTI_ARRAY: _assemble_arrays,
    JOINT_TRAJECTORY: _assemble_trajectories,
}


# ---------------------------------------------------------------------------------------------
# reader


@dataclass
class TopicInfo:
    """One topic of a bag."""

    name: str
    msgtype: str
    count: int
    decodable: bool
    reason: str | None = None


_READ_ERRORS = (ReaderError, OSError, sqlite3.Error, struct.error, ValueError, KeyError,
                IndexError, EOFError, TypesysError, yaml.YAMLError, AssertionError)
_READ_ERRORS = _READ_ERRORS + (_apsw.Error,)


class _IndexedSqlite3Reader(Sqlite3Reader):
    """
    rosbags' sqlite3 storage reader without its per-topic message count query.

    That query (``topics LEFT JOIN messages ... GROUP BY``) scans the whole message table,
    which costs as much as reading the data once. Inside a bag directory the counts come from
    ``metadata.yaml``, so this reader leaves ``msgcount`` at 0 and takes the time range from the
    timestamp index.
    """

    def _open(self) -> None:
        conn = _apsw.Connection(f'file:{self.path}?immutable=1',
                                flags=_apsw.SQLITE_OPEN_READONLY | _apsw.SQLITE_OPEN_URI)
        try:
            cur = conn.cursor()
            tables = {r[0] for r in cur.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if not {'messages', 'topics'} <= tables:
                raise ReaderError(f'Cannot open database {self.path} or database missing '
                                  'tables.')
            columns = {r[1] for r in cur.execute('PRAGMA table_info(topics)')}
            msgtypes = []
            if 'message_definitions' in tables:
                msgtypes = [{'name': r[0], 'encoding': r[1], 'msgdef': r[2]} for r in cur.execute(
                    'SELECT topic_type, encoding, encoded_message_definition '
                    'FROM message_definitions ORDER BY id')]
            fmtmap = {'ros2msg': MessageDefinitionFormat.MSG,
                      'ros2idl': MessageDefinitionFormat.IDL}

            def msgdef(name: str) -> MessageDefinition:
                for item in msgtypes:
                    if item['name'] == name and item['encoding'] in fmtmap:
                        return MessageDefinition(fmtmap[item['encoding']], item['msgdef'])
                return MessageDefinition(MessageDefinitionFormat.NONE, '')

            qos_col = 'offered_qos_profiles' if 'offered_qos_profiles' in columns else "''"
            hash_col = ('type_description_hash' if 'type_description_hash' in columns
                        else "''")
            self.connections = [
                Connection(cid, topic, msgtype, msgdef(msgtype), digest or '', 0,
                           ConnectionExtRosbag2(fmt, parse_qos(qos) if qos else []), self)
                for cid, topic, msgtype, fmt, qos, digest in cur.execute(
                    f'SELECT id, name, type, serialization_format, {qos_col}, {hash_col} '
                    'FROM topics ORDER BY id')]
            ((start, end),) = list(cur.execute(
                'SELECT MIN(timestamp), MAX(timestamp) + 1 FROM messages'))
            self.msgtypes = msgtypes
            self.metadata = ReaderMetadata(
                end - start if start is not None else 0,
                start if start is not None else 2**63 - 1,
                end if end is not None else 0, 0, None, None, None, None)
        finally:
            conn.close()


class _DirectoryReader(DirectoryReader):
    """rosbags' directory reader with the lighter sqlite3 storage reader."""

    STORAGE_PLUGINS = {'mcap': McapReader, 'sqlite3': _IndexedSqlite3Reader}


class _MultiSource:
    """Bare storage readers behind one ``messages`` interface."""

    def __init__(self, storages: list) -> None:
        self.storages = storages
        self.connections = [c for s in storages for c in s.connections]

    def messages(self, connections):
        for st in self.storages:
            mine = [c for c in connections if c.owner is st]
            if mine:
                yield from st.messages(mine)


class BagReader:
    """
    Read a rosbag2 bag: a directory, or a bare ``.db3`` / ``.mcap`` file.

    Parameters
    ----------
    path : str or Path
    default_store : rosbags ``Stores`` member or distro name, optional
        Typestore for types the bag does not define (default: Humble for metadata version
        <= 6 or a bag without metadata, Jazzy otherwise, or the ``ros_distro`` recorded in
        the metadata).
    max_trailing : int
        Trailing bytes accepted after a CDR payload.

    Use as a context manager. Attributes after opening: ``storage`` ('sqlite3' / 'mcap'),
    ``metadata_version`` (None for a bare file), ``files``, ``start_ns``, ``end_ns``,
    ``message_count``, ``topics`` (dict of :class:`TopicInfo`), ``skipped`` (topic -> reason),
    ``params`` (``params.yaml`` content or None), ``typestore``.

    """

    def __init__(self, path: str | Path, *, default_store: Stores | str | None = None,
                 max_trailing: int = MAX_TRAILING_BYTES) -> None:
        self.path = Path(path)
        self._default_store = default_store
        self.max_trailing = max_trailing
        self._source = None
        self._storages: list = []
        self._compression_mode = None
        self._conns: dict[str, list[Connection]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.skipped: dict[str, str] = {}
        self.metadata_version: int | None = None
        self.storage: str | None = None
        self.ros_distro: str | None = None
        self.files: list[Path] = []
        self.start_ns = 0
        self.end_ns = 0
        self.message_count = 0
        self.params: dict | None = None
        self.typestore = None
        self.decode_errors: dict[str, int] = {}

    # -- opening ----------------------------------------------------------------------------
    def __enter__(self) -> BagReader:
        self.open()
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def open(self) -> BagReader:
        """Open the bag and resolve its topics and types (raises :class:`BagError`)."""
        path = self.path
        if not path.exists():
            raise BagError(f'{path}: no such file or directory')
        try:
            if path.is_dir():
                if (path / 'metadata.yaml').is_file():
                    self._open_directory(path)
                else:
                    files = sorted(p for p in path.iterdir()
                                   if p.is_file() and p.suffix in _SUFFIXES)
                    if not files:
                        raise BagError(f'{path}: not a rosbag2 bag (no metadata.yaml and no '
                                       '.db3/.mcap file)')
                    self._open_bare(files)
            elif path.suffix in _SUFFIXES:
                self._open_bare([path])
            else:
                raise BagError(f'{path}: not a rosbag2 bag (expected a bag directory, '
                               'a .db3 or a .mcap file)')
            self.params = read_params(path)
            self._resolve_types()
        except BagError:
            self.close()
            raise
        except _READ_ERRORS as exc:
            self.close()
            raise BagError(f'{self._culprit(exc)}: unreadable or corrupt bag ({exc})') from None
        return self

    def _culprit(self, exc: BaseException | None = None) -> Path:
        """The file to name in an error message."""
        text = str(exc) if exc is not None else ''
        for f in self.files:
            if str(f) in text or f.name in text:
                return f
        if len(self.files) == 1:
            return self.files[0]
        return self.path

    def _open_directory(self, path: Path) -> None:
        meta_path = path / 'metadata.yaml'
        try:
            meta = yaml.safe_load(meta_path.read_text(encoding='utf-8'))
            info = meta['rosbag2_bagfile_information']
            self.metadata_version = int(info['version'])
            self.storage = str(info['storage_identifier'])
            self.ros_distro = info.get('ros_distro')
            rel = info.get('relative_file_paths') or []
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            raise BagError(f'{meta_path}: invalid rosbag2 metadata ({exc})') from None
        if self.metadata_version > 9:
            raise BagError(f'{meta_path}: rosbag2 metadata version {self.metadata_version} '
                           'is not supported (1 to 9)')
        self.files = [path / Path(p).name for p in rel]
        for f in self.files:
            if not f.is_file():
                raise BagError(f'{f}: storage file listed in metadata.yaml is missing')
        reader = _DirectoryReader(path)
        reader.open()
        self._source = reader
        self._storages = list(reader.storages)
        self._compression_mode = reader.metadata.compression_mode
        self.start_ns = reader.metadata.start_time if reader.metadata.message_count else 0
        self.end_ns = reader.metadata.end_time - 1 if reader.metadata.message_count else 0
        self.message_count = reader.metadata.message_count
        # Map directory-level connections to the storage connections that hold the data.
        for conn in reader.connections:
            self._conns.setdefault(conn.topic, []).append(conn)

    def _open_bare(self, files: list[Path]) -> None:
        self.files = list(files)
        kinds = {_SUFFIXES[f.suffix] for f in files}
        if len(kinds) != 1:
            raise BagError(f'{self.path}: mixed storage files {[f.name for f in files]}')
        self.storage = kinds.pop()
        storages = []
        for f in files:
            st = (McapReader if self.storage == 'mcap' else Sqlite3Reader)(f)
            try:
                st.open()
            except _READ_ERRORS as exc:
                for s in storages:
                    s.close()
                raise BagError(f'{f}: unreadable or corrupt bag file ({exc})') from None
            storages.append(st)
        self._storages = storages
        self._source = _MultiSource(storages)
        starts = [s.metadata.start_time for s in storages if s.metadata.message_count]
        ends = [s.metadata.end_time - 1 for s in storages if s.metadata.message_count]
        self.start_ns = min(starts) if starts else 0
        self.end_ns = max(ends) if ends else 0
        self.message_count = sum(s.metadata.message_count for s in storages)
        for conn in self._source.connections:
            self._conns.setdefault(conn.topic, []).append(conn)

    def _store_choice(self):
        if self._default_store is not None:
            return self._default_store
        if self.ros_distro and str(self.ros_distro).lower() in _DISTRO_STORES:
            return _DISTRO_STORES[str(self.ros_distro).lower()]
        if self.metadata_version is None or self.metadata_version <= 6:
            return Stores.ROS2_HUMBLE
        return Stores.ROS2_JAZZY

    def _resolve_types(self) -> None:
        store_id = self._store_choice()
        store = default_typestore(store_id)
        store_name = getattr(store_id, 'name', str(store_id))
        problems: dict[str, str] = {}
        seen: set[str] = set()
        for conns in self._conns.values():
            for conn in conns:
                if conn.msgtype in seen or conn.msgdef.format == MessageDefinitionFormat.NONE \
                        or not conn.msgdef.data.strip():
                    continue
                seen.add(conn.msgtype)
                try:
                    types = _parse_definition(conn.msgtype, conn.msgdef.format,
                                              conn.msgdef.data)
                except (TypesysError, ValueError, KeyError, IndexError) as exc:
                    problems[conn.msgtype] = f'unparsable message definition in the bag ({exc})'
                    continue
                # the bag's own definitions win over the default typestore's
                new = {}
                for name, fdef in types.items():
                    have = store.fielddefs.get(name)
                    if have is not None and [(f[0].lower(), f[1]) for f in have[1]] != \
                            [(f[0].lower(), f[1]) for f in fdef[1]]:
                        store.fielddefs.pop(name, None)
                        store.types.pop(name, None)
                        store.cache.clear()
                        have = None
                    if have is None:
                        new[name] = fdef
                try:
                    store.register(new)
                except (TypesysError, ValueError, KeyError) as exc:
                    problems[conn.msgtype] = f'unusable message definition in the bag ({exc})'
        self.typestore = store
        self.topics.clear()
        self.skipped.clear()
        for topic, conns in self._conns.items():
            msgtype = conns[0].msgtype
            count = sum(c.msgcount for c in conns if c.msgtype == msgtype)
            reason = None
            others = sorted({c.msgtype for c in conns} - {msgtype})
            note = f'also recorded as {others} (only {msgtype} is read)' if others else None
            missing = _missing_type(store, msgtype)
            if missing is not None:
                reason = problems.get(msgtype) or (
                    f'type {msgtype} is neither defined in the bag nor in the default '
                    f'{store_name} typestore'
                    + (f' (missing {missing})' if missing != msgtype else ''))
            self.topics[topic] = TopicInfo(topic, msgtype, count, reason is None,
                                           reason or note)
            if reason is not None:
                self.skipped[topic] = reason

    def close(self) -> None:
        """Close the storage files."""
        src, self._source = self._source, None
        if src is None:
            return
        try:
            if isinstance(src, DirectoryReader):
                src.close()
            else:
                for st in src.storages:
                    st.close()
        except Exception:  # noqa: BLE001 - closing after an error must not mask it
            pass

    # -- decoding ---------------------------------------------------------------------------
    def _check(self) -> None:
        if self._source is None:
            raise BagError(f'{self.path}: reader not open')

    def deserialize(self, raw: bytes | memoryview, msgtype: str):
        """Decode one message with the bag's typestore (trailing bytes tolerated)."""
        return deserialize_tolerant(self.typestore, raw, normalize_msgtype(msgtype),
                                    self.max_trailing)

    def _wanted(self, topics: Iterable[str] | None) -> list[str]:
        if topics is None:
            return [t for t, info in self.topics.items() if info.decodable]
        out = []
        for t in topics:
            if t not in self.topics:
                raise BagError(f'{self.path}: no topic {t} in the bag')
            out.append(t)
        return out

    def raw_messages(self, topics: Iterable[str] | None = None
                     ) -> Iterator[tuple[str, int, bytes]]:
        """Yield ``(topic, receive_ns, raw_cdr)`` in storage order (time order per file)."""
        self._check()
        wanted = set(self._wanted(topics) if topics is not None else self.topics)
        conns = [c for t in wanted for c in self._conns[t]
                 if c.msgtype == self.topics[t].msgtype]
        try:
            for conn, ts, raw in self._source.messages(conns):
                yield conn.topic, ts, raw
        except _READ_ERRORS as exc:
            raise BagError(f'{self._culprit(exc)}: corrupt bag data ({exc})') from None

    def messages(self, topics: Iterable[str] | None = None) -> Iterator[tuple[str, int, Any]]:
        """
        Yield ``(topic, receive_ns, message)``; undecodable topics and messages are skipped
        (counted in :attr:`decode_errors`).
        """
        wanted = [t for t in self._wanted(topics) if self.topics[t].decodable]
        types = {t: self.topics[t].msgtype for t in wanted}
        for topic, ts, raw in self.raw_messages(wanted):
            try:
                msg = deserialize_tolerant(self.typestore, raw, types[topic],
                                           self.max_trailing)
            except DecodeError:
                self.decode_errors[topic] = self.decode_errors.get(topic, 0) + 1
                continue
            yield topic, ts, msg

    # -- bulk -------------------------------------------------------------------------------
    def read_raw(self, topics: Iterable[str],
                 progress: Callable[[int, int], None] | None = None
                 ) -> dict[str, tuple[np.ndarray, list[bytes]]]:
        """
        Read all raw messages of ``topics`` at once.

        Returns ``{topic: (receive_ns int64 array sorted ascending, [raw bytes, ...])}``.
        ``progress(done, total)`` is called now and then with message counts.
        """
        self._check()
        wanted = self._wanted(topics)
        total = max(1, sum(self.topics[t].count for t in wanted))
        acc: dict[str, tuple[list, list]] = {t: ([], []) for t in wanted}
        done = [0]

        def tick(k: int) -> None:
            done[0] += k
            if progress is not None:
                progress(min(done[0], total), total)

        try:
            for st in self._storages:
                by_id = {}
                for c in st.connections:
                    if c.topic in acc and c.msgtype == self.topics[c.topic].msgtype:
                        by_id[c.id] = c.topic
                if not by_id:
                    continue
                if isinstance(st, Sqlite3Reader) and getattr(st, 'dbconn', None) is not None:
                    self._raw_sqlite(st, by_id, acc, tick)
                elif isinstance(st, McapReader) and st.chunks:
                    self._raw_mcap(st, by_id, acc, tick)
                else:
                    self._raw_generic(st, by_id, acc, tick)
        except BagError:
            raise
        except _READ_ERRORS as exc:
            raise BagError(f'{self._culprit(exc)}: corrupt bag data ({exc})') from None
        out = {}
        for topic, (ts_parts, data) in acc.items():
            ts = np.concatenate(ts_parts) if ts_parts else np.zeros(0, np.int64)
            if self._compression_mode == 'message':
                from rosbags.rosbag2.reader import zstd
                data = [zstd.decompress(d) for d in data]
            if ts.size > 1 and (np.diff(ts) < 0).any():
                order = np.argsort(ts, kind='stable')
                ts = ts[order]
                data = [data[i] for i in order.tolist()]
            out[topic] = (ts, data)
        return out

    @staticmethod
    def _raw_sqlite(st, by_id, acc, tick) -> None:
        """One table scan for all wanted topics (rows interleave topics in the table)."""
        ids = sorted(by_id)
        cur = st.dbconn.execute(
            'SELECT topic_id, timestamp, data FROM messages WHERE topic_id IN '
            f'({",".join("?" * len(ids))})', ids)
        get_id, get_ts, get_data = (operator.itemgetter(k) for k in range(3))
        while True:
            batch = list(itertools.islice(cur, 200_000))
            if not batch:
                break
            n = len(batch)
            ts = np.fromiter(map(get_ts, batch), np.int64, n)
            data = list(map(get_data, batch))
            if len(ids) == 1:
                acc[by_id[ids[0]]][0].append(ts)
                acc[by_id[ids[0]]][1].extend(data)
            else:
                tid = np.fromiter(map(get_id, batch), np.int64, n)
                for cid in ids:
                    idx = np.flatnonzero(tid == cid)
                    if idx.size:
                        ts_parts, out = acc[by_id[cid]]
                        ts_parts.append(ts[idx])
                        out.extend(operator.itemgetter(*idx.tolist())(data)
                                   if idx.size > 1 else [data[int(idx[0])]])
            tick(n)

    @staticmethod
    def _raw_mcap(st, by_id, acc, tick) -> None:
        """Read MCAP chunks with their message indexes (no per-record parsing loop)."""
        bio = st.bio
        for chunk in st.chunks:
            indexed = bool(chunk.message_index_offsets)
            cids = [c for c in by_id if chunk.channel_count.get(c)] if indexed else list(by_id)
            if not cids:
                continue
            bio.seek(chunk.chunk_start_offset + 9 + 24)
            (crc,) = struct.unpack('<I', bio.read(4))
            bio.seek(chunk.chunk_start_offset + 9 + 40 + len(chunk.compression))
            comp = bio.read(chunk.compressed_size)
            if len(comp) != chunk.compressed_size:
                raise ReaderError(f'truncated chunk at offset {chunk.chunk_start_offset}')
            payload = _mcap_decompress(comp, chunk.compression, chunk.uncompressed_size, crc)
            if not indexed:                    # chunk written without message indexes
                BagReader._scan_chunk(payload, by_id, acc, tick)
                continue
            arr = np.frombuffer(payload, np.uint8)
            for cid in cids:
                off = chunk.message_index_offsets[cid]
                bio.seek(off)
                head = bio.read(15)
                if len(head) != 15 or head[0] != 0x07:
                    raise ReaderError(f'bad message index record at offset {off}')
                (nbytes,) = struct.unpack_from('<I', head, 11)
                index = np.frombuffer(bio.read(nbytes), '<u8')
                if index.size * 8 != nbytes:
                    raise ReaderError(f'truncated message index at offset {off}')
                index = index.reshape(-1, 2)
                ts = index[:, 0].astype(np.int64)
                offsets = index[:, 1].astype(np.int64)
                if offsets.size and (offsets.max() + 31 > arr.size):
                    raise ReaderError('message index points outside its chunk')
                sizes = np.ascontiguousarray(
                    arr[(offsets[:, None] + np.arange(1, 9)).ravel()]).view('<u8')
                ops = arr[offsets]
                if (ops != 0x05).any() or (sizes < 22).any():
                    raise ReaderError('message index does not point at message records')
                starts = (offsets + 31).tolist()
                ends = (offsets + 9 + sizes.astype(np.int64)).tolist()
                if ends and max(ends) > arr.size:
                    raise ReaderError('message record exceeds its chunk')
                ts_parts, data = acc[by_id[cid]]
                ts_parts.append(ts)
                data.extend([payload[a:b] for a, b in zip(starts, ends)])
                tick(len(starts))

    @staticmethod
    def _scan_chunk(payload: bytes, by_id, acc, tick) -> None:
        """Parse the records of one decompressed MCAP chunk one by one."""
        parts: dict[str, tuple[list, list]] = {t: ([], []) for t in by_id.values()}
        pos, end = 0, len(payload)
        unpack_len, unpack_msg = struct.Struct('<Q').unpack_from, struct.Struct('<HIQ').unpack_from
        count = 0
        while pos < end:
            if pos + 9 > end:
                raise ReaderError('truncated record in chunk')
            (size,) = unpack_len(payload, pos + 1)
            if pos + 9 + size > end:
                raise ReaderError('record exceeds its chunk')
            if payload[pos] == 0x05:
                if size < 22:
                    raise ReaderError(f'invalid message record length {size}')
                cid, _, log_time = unpack_msg(payload, pos + 9)
                topic = by_id.get(cid)
                if topic is not None:
                    parts[topic][0].append(log_time)
                    parts[topic][1].append(payload[pos + 31:pos + 9 + size])
                    count += 1
            pos += 9 + size
        for topic, (ts, data) in parts.items():
            if ts:
                acc[topic][0].append(np.array(ts, np.int64))
                acc[topic][1].extend(data)
        tick(count)

    @staticmethod
    def _raw_generic(st, by_id, acc, tick) -> None:
        conns = [c for c in st.connections if c.id in by_id]
        parts: dict[str, tuple[list, list]] = {t: ([], []) for t in by_id.values()}
        k = 0
        for conn, ts, raw in st.messages(conns):
            p = parts[by_id[conn.id]]
            p[0].append(ts)
            p[1].append(bytes(raw))
            k += 1
            if k == 100_000:
                tick(k)
                k = 0
        tick(k)
        for topic, (ts, data) in parts.items():
            acc[topic][0].append(np.array(ts, np.int64))
            acc[topic][1].extend(data)

    def read_series(self, topics: Iterable[str],
                    progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """
        Decode whole topics into arrays.

        ``JointState`` -> :class:`JointStateSeries`, ``Float64MultiArray`` ->
        :class:`ArraySeries`, ``JointTrajectory`` -> :class:`TrajectorySeries`; any other type
        -> list of ``(receive_ns, message)``. Undecodable topics raise :class:`BagError` (check
        :attr:`skipped` first).
        """
        wanted = self._wanted(topics)
        for t in wanted:
            if not self.topics[t].decodable:
                raise BagError(f'{self.path}: topic {t} cannot be decoded '
                               f'({self.topics[t].reason})')
        raw = self.read_raw(wanted, progress)
        out: dict[str, Any] = {}
        for topic in wanted:
            ts, data = raw.pop(topic)
            msgtype = self.topics[topic].msgtype

            def deser(b, _t=msgtype):
                return deserialize_tolerant(self.typestore, b, _t, self.max_trailing)
            if msgtype in _DECODERS and self._layout_matches(msgtype):
                stats: dict = {}
                groups = _decode_batch(data, msgtype, deser, stats)
                out[topic] = _ASSEMBLERS[msgtype](topic, msgtype, ts, groups, stats)
                if stats.get('errors'):
                    self.decode_errors[topic] = stats['errors']
            else:
                msgs = []
                for t, b in zip(ts.tolist(), data):
                    try:
                        msgs.append((t, deser(b)))
                    except DecodeError:
                        self.decode_errors[topic] = self.decode_errors.get(topic, 0) + 1
                out[topic] = msgs
        return out

    def _layout_matches(self, msgtype: str) -> bool:
        """True if the bag's definition of ``msgtype`` has the standard field layout."""
        try:
            return _signature(self.typestore, msgtype) == _LAYOUTS[msgtype]
        except (KeyError, IndexError, AttributeError):
            return False


def _desc_signature(store, desc) -> str:
    node = desc[0].name
    if node == 'BASE':
        return desc[1][0]
    if node == 'NAME':
        return _signature(store, desc[1])
    sub = _desc_signature(store, desc[1][0])
    return f'{sub}[{desc[1][1]}]' if node == 'ARRAY' else f'{sub}[]'


def _signature(store, msgtype: str) -> str:
    """Field layout of a type from its field definitions (names, base types, nesting)."""
    return '{' + ','.join(f'{name}:{_desc_signature(store, desc)}'
                          for name, desc in store.fielddefs[msgtype][1]) + '}'


def _missing_type(store, msgtype: str, seen: set | None = None) -> str | None:
    """Name of the first type ``msgtype`` needs that the typestore lacks, else None."""
    seen = set() if seen is None else seen
    if msgtype in seen:
        return None
    seen.add(msgtype)
    if msgtype not in store.fielddefs:
        return msgtype
    for _, desc in store.fielddefs[msgtype][1]:
        while desc[0].name in ('ARRAY', 'SEQUENCE'):
            desc = desc[1][0]
        if desc[0].name == 'NAME':
            missing = _missing_type(store, desc[1], seen)
            if missing:
                return missing
    return None


_TIME = '{sec:int32,nanosec:uint32}'
_HEADER = '{stamp:' + _TIME + ',frame_id:string}'
#: Field layouts the fast decoders walk (identical in Humble and Jazzy).
_LAYOUTS = {
    JOINT_STATE: ('{header:' + _HEADER + ',name:string[],position:float64[],'
                  'velocity:float64[],effort:float64[]}'),
    FLOAT64_MULTI_ARRAY: ('{layout:{dim:{label:string,size:uint32,stride:uint32}[],'
                          'data_offset:uint32},data:float64[]}'),
    JOINT_TRAJECTORY: ('{header:' + _HEADER + ',joint_names:string[],points:{positions:'
                       'float64[],velocities:float64[],accelerations:float64[],'
                       'effort:float64[],time_from_start:' + _TIME + '}[]}'),
}
