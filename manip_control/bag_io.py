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
rosbag2 reading and writing (ROS-free: never imports rclpy).

Writing
-------
:class:`BagWriter` records already-serialized CDR messages (what an rclpy subscription created
with ``raw=True`` delivers) into a rosbag2 directory with **metadata version 8** (readable by
Humble; version 9 is not), in MCAP (``mcap`` library) or sqlite3 storage. Every topic is
registered with its message type, its full message definition (``ros2msg``, so readers without
a typestore can decode it) and its offered QoS profiles. Data becomes durable chunk by chunk
(MCAP) or transaction by transaction (sqlite3), at least every ``flush_period`` seconds, so a
killed writer loses at most that; a write error (full disk, file-size limit) is raised once,
counted, and ``metadata.yaml`` counts only what the file holds. :func:`write_params` /
:meth:`BagWriter.write_params` put the resolved run parameters in ``params.yaml``.

Reading
-------
:class:`BagReader` opens a rosbag2 directory (sqlite3 or MCAP, metadata versions 1 to 9; a
directory without ``metadata.yaml``, e.g. after a killed recorder, is read from its storage
files, an unfinished MCAP file up to its last complete chunk) or a bare ``.db3`` / ``.mcap``
file. Types are taken from the bag's own message definitions when present, else from a
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

Only documented interfaces of ``rosbags`` (typestores, ``deserialize_cdr``, ``Reader`` for
compressed bags) and of ``mcap`` are used (see :mod:`manip_control.bag_storage`).

"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
import dataclasses
from dataclasses import dataclass
from dataclasses import field
import os
from pathlib import Path
import sqlite3
import struct
import threading
import time
from typing import Any

from manip_control.bag_storage import CHUNK_SIZE
from manip_control.bag_storage import gather_rows
from manip_control.bag_storage import metadata_dict
from manip_control.bag_storage import METADATA_FILE
from manip_control.bag_storage import ns_text
from manip_control.bag_storage import open_storage_reader
from manip_control.bag_storage import open_storage_writer
from manip_control.bag_storage import parts_problem
from manip_control.bag_storage import RawBatch
from manip_control.bag_storage import read_metadata
from manip_control.bag_storage import StorageError
from manip_control.bag_storage import SUFFIXES
from manip_control.bag_storage import TopicRecord
from manip_control.bag_storage import write_metadata
import numpy as np
from rosbags.interfaces import Qos
from rosbags.interfaces import QosDurability
from rosbags.interfaces import QosHistory
from rosbags.interfaces import QosLiveliness
from rosbags.interfaces import QosReliability
from rosbags.interfaces import QosTime
from rosbags.rosbag2 import Reader
from rosbags.serde import SerdeError
from rosbags.typesys import get_types_from_idl
from rosbags.typesys import get_types_from_msg
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores
from rosbags.typesys import TypesysError
import yaml

__all__ = [
    'BagError',
    'RecordingError',
    'WriteFailure',
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

_STORAGES = ('mcap', 'sqlite3')
_DISTRO_STORES = {
    'foxy': Stores.ROS2_FOXY, 'galactic': Stores.ROS2_GALACTIC, 'humble': Stores.ROS2_HUMBLE,
    'iron': Stores.ROS2_IRON, 'jazzy': Stores.ROS2_JAZZY, 'kilted': Stores.ROS2_KILTED,
}
_INFINITE = QosTime(9223372036, 854775807)   # RMW_DURATION_INFINITE as rosbag2 records it
_YAML_LOADER = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)     # libyaml when available


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
    """Return a rosbags typestore of a ROS 2 distribution (``Stores`` member or name)."""
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


def _parse_definition(msgtype: str, fmt: str, text: str) -> dict:
    """Types dictionary (rosbags ``Typesdict``) of a stored definition (ros2msg / ros2idl)."""
    if fmt == 'ros2msg':
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


_DECODE_ERRORS = (struct.error, UnicodeDecodeError, ValueError, IndexError, TypeError,
                  SerdeError, AssertionError)


def deserialize_tolerant(typestore, raw: bytes | memoryview, msgtype: str,
                         max_trailing: int = MAX_TRAILING_BYTES):
    """
    Deserialize one CDR message, accepting up to ``max_trailing`` bytes after the payload.

    rosbags' ``Typestore.deserialize_cdr`` rejects more than 3 trailing bytes; some serializers
    pad further. When it refuses a message, the message is decoded again without its last
    k = 1 .. ``max_trailing`` - 3 bytes: cutting into the payload itself always fails (CDR
    carries the length of every sequence), so the first success is the message.

    Raises
    ------
    DecodeError
        Bad encapsulation header, payload shorter than the type needs, wrong content, or more
        than ``max_trailing`` unused bytes.

    """
    if len(raw) < 4 or raw[0] != 0 or raw[1] not in (0, 1):
        raise DecodeError(f'{msgtype}: invalid or unsupported CDR encapsulation header')
    try:
        return typestore.deserialize_cdr(raw, msgtype)
    except (KeyError, TypesysError, SyntaxError) as exc:
        raise DecodeError(f'{msgtype}: no usable definition ({exc})') from None
    except _DECODE_ERRORS as exc:
        first = exc
    view = memoryview(raw)
    for k in range(1, max(0, max_trailing - 3) + 1):
        if len(view) - k < 4:
            break
        try:
            return typestore.deserialize_cdr(view[:len(view) - k], msgtype)
        except _DECODE_ERRORS:
            continue
    raise DecodeError(f'{msgtype}: undecodable ({first}), also with up to {max_trailing} '
                      'unexpected bytes after the payload ignored') from None


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


def _qos_from_rosbag2(item: Mapping) -> Qos:
    """One profile of rosbag2's ``offered_qos_profiles`` YAML."""
    q = make_qos(reliability=item.get('reliability', 1), durability=item.get('durability', 2),
                 history=item.get('history', 1), depth=item.get('depth', 0),
                 liveliness=item.get('liveliness', 1), deadline=item.get('deadline'),
                 lifespan=item.get('lifespan'),
                 liveliness_lease_duration=item.get('liveliness_lease_duration'))
    return q._replace(avoid_ros_namespace_conventions=bool(
        item.get('avoid_ros_namespace_conventions', False)))


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
            try:
                items = yaml.safe_load(item) or []
            except yaml.YAMLError as exc:
                raise BagError(f'QoS profiles: not valid YAML ({exc})') from None
            out.extend(_qos_list(items if isinstance(items, list) else [items]))
        elif isinstance(item, Mapping):
            if 'deadline' in item and 'avoid_ros_namespace_conventions' in item:
                out.append(_qos_from_rosbag2(item))
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
    """Return the ``params.yaml`` beside a bag's ``metadata.yaml`` (or bare file), or None."""
    bag_path = Path(bag_path)
    target = (bag_path if bag_path.is_dir() else bag_path.parent) / PARAMS_FILE
    if not target.is_file():
        return None
    try:
        data = yaml.load(target.read_text(encoding='utf-8'), Loader=_YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise BagError(f'{target}: unreadable parameters file ({exc})') from None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------------------------------------
# writer


class RecordingError(BagError):
    """
    Writing a bag failed (full disk, file-size limit, permissions): data was not recorded.

    ``failure`` holds the details (:class:`WriteFailure`).
    """

    def __init__(self, message: str, failure: WriteFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


@dataclass
class WriteFailure:
    """
    What a failed recording lost.

    Attributes
    ----------
    error : str
        The first write error (e.g. ``[Errno 27] File too large``).
    first_lost_ns : int
        Bag timestamp [ns] of the first message that is not in the file.
    lost : int
        Messages handed to the writer that are not in the file (so far).
    lost_per_topic : dict

    """

    error: str
    first_lost_ns: int
    lost: int = 0
    lost_per_topic: dict = field(default_factory=dict)
    repair: str = ''

    def describe(self, path: Path, held: int, t0_ns: int | None = None) -> str:
        """One line: what failed, how many messages are missing and from when."""
        rel = ''
        if t0_ns is not None:
            rel = f' ({(self.first_lost_ns - t0_ns) / 1e9:.3f} s after the first message)'
        return (f'{path}: write error ({self.error}): {self.lost} messages not recorded from '
                f'bag time {ns_text(self.first_lost_ns)} s{rel} on; the bag holds the '
                f'{held} messages before it{self.repair}')


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
        Also make the data durable every this many writes (0: only by size and time).
    flush_period : float
        Make the data durable at least this often [s of wall time]: on the first write after
        the period, and from :meth:`flush_if_due` (a recorder calls it from a timer).
    chunk_size : int
        MCAP chunk size [bytes] (a chunk reaches the file when it is full); sqlite3 commits when
        as many bytes of messages are pending.
    compression : {'none', 'zstd', 'lz4'}
        MCAP chunk compression (default none: cheapest for the recorder).

    Durability: an MCAP chunk is written when it is full or at the flush period, a sqlite3
    transaction is committed when ``chunk_size`` bytes are pending or at the flush period (or
    every ``flush_every`` writes). A killed writer
    therefore loses at most the last chunk or the last ``flush_period`` seconds, and the bag is
    read without ``metadata.yaml`` (:class:`BagReader` recovers it, ``manip-bag reindex``
    rebuilds the metadata).

    Write errors: the first failing write raises :class:`RecordingError`; later writes are
    counted as lost (no exception, a recorder must not crash); :meth:`close` writes
    ``metadata.yaml`` with the messages the file holds -- never more -- and raises
    :class:`RecordingError` saying how many messages were not recorded and from when.
    ``write`` is thread-safe (one lock).

    """

    def __init__(self, path: str | Path, storage: str = 'mcap', *, typestore=None,
                 flush_every: int = 0, flush_period: float = 1.0,
                 chunk_size: int = CHUNK_SIZE, compression: str = 'none') -> None:
        self.path = Path(path)
        if storage not in _STORAGES:
            raise BagError(f'{self.path}: unknown storage {storage!r} '
                           f'(expected one of {sorted(_STORAGES)})')
        self.storage = storage
        self._typestore = typestore
        self._flush_every = int(flush_every)
        self._flush_period = float(flush_period)
        self._options = ({'chunk_size': int(chunk_size), 'compression': compression}
                         if storage == 'mcap' else {})
        # sqlite3: commit when this many bytes are pending, like an MCAP chunk
        self._commit_bytes = int(chunk_size) if storage == 'sqlite3' else 0
        self._pending_bytes = 0
        self._file: Path | None = None
        self._st = None
        self._topics: dict[str, TopicRecord] = {}
        self._ids: dict[str, int] = {}
        self._counts: dict[str, int] = {}      # accepted by write (durable or pending)
        self._durable: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._pending_n = 0
        self._pending_first = None
        self._range = [None, None]             # durable start / end [ns]
        self._pending_range = [None, None]
        self._last_flush = 0.0
        self.failure: WriteFailure | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------
    def open(self) -> BagWriter:  # noqa: A003 - the public name since the first release
        """Create the bag directory and storage file."""
        if self._st is not None or self._closed:
            raise BagError(f'{self.path}: writer already open')
        if self.path.exists() and not (self.path.is_dir() and not any(self.path.iterdir())):
            raise BagError(f'{self.path}: cannot create bag (exists and is not an empty '
                           'directory)')
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            suffix = '.mcap' if self.storage == 'mcap' else '.db3'
            self._file = self.path / f'{self.path.name}_0{suffix}'
            self._st = open_storage_writer(self._file, self.storage, **self._options)
        except (OSError, sqlite3.Error, StorageError) as exc:
            raise BagError(f'{self.path}: cannot create bag ({exc})') from None
        self._last_flush = time.monotonic()
        return self

    def _metadata(self) -> dict:
        held = sum(self._durable.values())
        start, end = self._range
        files = [(self._file.name, start or 0, end or 0, held)]
        topics = [TopicRecord(t.id, t.topic, t.msgtype, t.msgdef_format, t.msgdef, t.type_hash,
                              t.qos, self._durable.get(name, 0))
                  for name, t in self._topics.items()]
        return metadata_dict(self.storage, files, topics)

    def close(self) -> None:
        """
        Finish the storage file and write ``metadata.yaml`` (idempotent).

        Raises :class:`RecordingError` if any write failed (after writing the metadata of
        what the file holds) or if finishing fails.
        """
        with self._lock:
            if self._st is None:
                return
            st, self._st = self._st, None
            self._closed = True
            if self.failure is None:
                try:
                    st.flush()
                    self._commit_pending()
                    st.finish()
                except (OSError, sqlite3.Error) as exc:
                    self._fail(exc, None)
                    st.abandon()
            else:
                st.abandon()
            held = sum(self._durable.values())
            try:
                write_metadata(self.path, self._metadata())
            except StorageError as exc:
                if self.failure is None:
                    raise RecordingError(f'{exc}; run manip-bag reindex {self.path} when '
                                         'there is room') from None
                raise RecordingError(self.failure.describe(self.path, held, self._range[0])
                                     + f'; {exc}', self.failure) from None
            if self.failure is not None:
                raise RecordingError(self.failure.describe(self.path, held, self._range[0]),
                                     self.failure)

    def abort(self) -> None:
        """Stop without writing metadata (the storage file keeps what is durable)."""
        with self._lock:
            if self._st is not None:
                st, self._st = self._st, None
                self._closed = True
                try:
                    st.flush()
                    st.finish()
                except Exception:  # noqa: BLE001 - best effort on an error path
                    st.abandon()

    def __enter__(self) -> BagWriter:
        if self._st is None:
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
        if self._st is None:
            raise BagError(f'{self.path}: writer not open')
        if topic in self._topics:
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
        qos_text = _qos_yaml(_qos_list(qos))
        with self._lock:
            record = TopicRecord(0, topic, msgtype, 'ros2msg', msgdef, rihs01, qos_text)
            try:
                record.id = self._st.add_topic(record)
            except (OSError, sqlite3.Error) as exc:
                raise BagError(f'{self.path}: cannot add topic {topic} ({exc})') from None
            self._topics[topic] = record
            self._ids[topic] = record.id
            self._counts[topic] = 0

    @property
    def topics(self) -> dict[str, str]:
        """Return the registered topics and their types."""
        return {t: r.msgtype for t, r in self._topics.items()}

    @property
    def counts(self) -> dict[str, int]:
        """Messages accepted per topic (in the file or on their way; see :attr:`durable`)."""
        return dict(self._counts)

    @property
    def durable(self) -> dict[str, int]:
        """Messages per topic that the storage file holds for sure."""
        return dict(self._durable)

    # -- data -------------------------------------------------------------------------------
    def _commit_pending(self) -> None:
        for topic, n in self._pending.items():
            self._durable[topic] = self._durable.get(topic, 0) + n
        self._pending.clear()
        self._pending_n = 0
        self._pending_bytes = 0
        lo, hi = self._pending_range
        if lo is not None:
            self._range[0] = lo if self._range[0] is None else min(self._range[0], lo)
            self._range[1] = hi if self._range[1] is None else max(self._range[1], hi)
        self._pending_range = [None, None]
        self._pending_first = None

    def _fail(self, exc: BaseException, topic_ts: tuple[str, int] | None) -> None:
        text = f'{exc.__class__.__name__}: {exc}' if not isinstance(exc, OSError) else str(exc)
        first = self._pending_first
        if first is None and topic_ts is not None:
            first = topic_ts[1]
        failure = WriteFailure(text, first if first is not None else 0)
        if self.storage == 'mcap':
            # the file is cut after its last complete chunk: no summary, no footer
            failure.repair = (f'; the MCAP file has no footer, so other readers refuse it: '
                              f'manip-bag reindex {self.path} makes it readable')
        for topic, n in self._pending.items():
            failure.lost_per_topic[topic] = failure.lost_per_topic.get(topic, 0) + n
            failure.lost += n
        self._pending.clear()
        self._pending_n = 0
        self._pending_bytes = 0
        self._pending_range = [None, None]
        self.failure = failure

    def write(self, topic: str, timestamp_ns: int, raw: bytes | memoryview) -> None:
        """
        Append one serialized CDR message (``raw`` as an rclpy ``raw=True`` callback gets it).

        ``timestamp_ns`` is the receive time [ns] stored as the bag timestamp. Raises
        :class:`RecordingError` on the write that fails; after that, messages are counted
        as lost (:attr:`failure`).
        """
        try:
            cid = self._ids[topic]
        except KeyError:
            raise BagError(f'{self.path}: topic {topic} not registered '
                           '(call add_topic first)') from None
        with self._lock:
            st = self._st
            if st is None:
                raise BagError(f'{self.path}: writer not open')
            self._counts[topic] += 1
            failure = self.failure
            if failure is not None:
                failure.lost += 1
                failure.lost_per_topic[topic] = failure.lost_per_topic.get(topic, 0) + 1
                return
            if self._pending_first is None:
                self._pending_first = timestamp_ns
            self._pending[topic] = self._pending.get(topic, 0) + 1
            self._pending_n += 1
            lo, hi = self._pending_range
            if lo is None or timestamp_ns < lo:
                self._pending_range[0] = timestamp_ns
            if hi is None or timestamp_ns > hi:
                self._pending_range[1] = timestamp_ns
            try:
                durable = st.write(cid, timestamp_ns, raw)
                if durable:
                    self._commit_pending()
                    self._last_flush = time.monotonic()
                else:
                    self._pending_bytes += len(raw)
                    if (self._flush_every and self._pending_n >= self._flush_every) or \
                            (self._commit_bytes and self._pending_bytes >= self._commit_bytes) \
                            or time.monotonic() - self._last_flush >= self._flush_period:
                        self._flush_locked()
            except (OSError, sqlite3.Error) as exc:
                self._fail(exc, (topic, timestamp_ns))
                raise RecordingError(self.failure.describe(
                    self.path, sum(self._durable.values()), self._range[0]),
                    self.failure) from None

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if self._pending_n and self._st.flush():
            self._commit_pending()

    def flush(self) -> None:
        """Make everything written so far durable (raises :class:`RecordingError`)."""
        with self._lock:
            if self._st is not None and self.failure is None:
                try:
                    self._flush_locked()
                except (OSError, sqlite3.Error) as exc:
                    self._fail(exc, None)
                    raise RecordingError(self.failure.describe(
                        self.path, sum(self._durable.values()), self._range[0]),
                        self.failure) from None

    def flush_if_due(self) -> None:
        """:meth:`flush` if the flush period has passed since the last one."""
        if time.monotonic() - self._last_flush >= self._flush_period:
            self.flush()

    def write_params(self, params: Mapping[str, Any]) -> Path:
        """Write ``params.yaml`` in the bag directory (see :func:`write_params`)."""
        if self._st is None and not self._closed:
            raise BagError(f'{self.path}: writer not open')
        return write_params(self.path, params)


def _qos_yaml(profiles: list[Qos]) -> str:
    """Offered QoS profiles as the YAML string rosbag2 stores (metadata version 8)."""
    def dur(t: QosTime) -> dict:
        return {'sec': int(t.sec), 'nsec': int(t.nsec)}
    items = [{'history': int(p.history.value), 'depth': int(p.depth),
              'reliability': int(p.reliability.value),
              'durability': int(p.durability.value), 'deadline': dur(p.deadline),
              'lifespan': dur(p.lifespan), 'liveliness': int(p.liveliness.value),
              'liveliness_lease_duration': dur(p.liveliness_lease_duration),
              'avoid_ros_namespace_conventions': bool(p.avoid_ros_namespace_conventions)}
             for p in profiles]
    return yaml.safe_dump(items, default_flow_style=None, sort_keys=True).rstrip('\n')


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


def _floats(msg, name: str) -> np.ndarray:
    """Return a float array field as a (1, n) row (a field the definition lacks: empty)."""
    return np.asarray(getattr(msg, name, ()), float).reshape(1, -1)


def _msg_joint_state(msg) -> tuple[dict, dict]:
    st = msg.header.stamp
    return ({'names': tuple(msg.name)},
            {'stamp': np.array([st.sec * 1_000_000_000 + st.nanosec], np.int64),
             'position': _floats(msg, 'position'),
             'velocity': _floats(msg, 'velocity'),
             'effort': _floats(msg, 'effort')})


def _msg_float64_multi_array(msg) -> tuple[dict, dict]:
    return {}, {'data': _floats(msg, 'data')}


def _msg_joint_trajectory(msg) -> tuple[dict, dict]:
    st = msg.header.stamp
    values: dict[Any, np.ndarray] = {
        'stamp': np.array([st.sec * 1_000_000_000 + st.nanosec], np.int64)}
    for k, pt in enumerate(msg.points):
        for key in ('positions', 'velocities', 'accelerations', 'effort'):
            values[(key, k)] = _floats(pt, key)
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


#: Messages of one layout are gathered and decoded in blocks of about this many bytes: the rows
#: stay in the CPU caches, and no buffer the size of the topic is allocated (fresh memory costs
#: page faults, in a VM up to 1 ms per MB).
_BLOCK_BYTES = 1 << 20


class _StaticCheck:
    """
    Tell which rows (messages of one length) have the static bytes of a template message.

    The 32-bit words holding static bytes are taken out of the rows (one C-level take), partly
    static words masked, compared with the template's into a zero-padded bool array that is
    then read as 64-bit words: a few passes over contiguous memory instead of a reduction along
    a short axis per row. Rows whose length is no multiple of 4 are compared byte by byte.
    """

    def __init__(self, template: np.ndarray, ranges: list[tuple[int, int]]) -> None:
        mask = np.zeros(template.size, np.uint8)
        for a, b in ranges:
            mask[a:b] = 0xFF
        self.byte_cols = np.flatnonzero(mask)
        self.byte_ref = template[self.byte_cols]
        self.words = template.size % 4 == 0
        if self.words:
            wmask = mask.view('<u4')
            self.cols = np.flatnonzero(wmask)
            self.wm = wmask[self.cols]
            self.partial = np.flatnonzero(self.wm != 0xFFFFFFFF).tolist()
            self.ref = template.view('<u4')[self.cols] & self.wm

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        n = rows.shape[0]
        if self.byte_cols.size == 0 or n == 0:
            return np.ones(n, bool)
        if self.words and rows.flags.c_contiguous:
            sel = np.take(rows.view('<u4'), self.cols, axis=1)
            for j in self.partial:
                sel[:, j] &= self.wm[j]
            ref = self.ref
        else:
            sel = np.take(rows, self.byte_cols, axis=1)
            ref = self.byte_ref
        k = sel.shape[1]
        diff = np.zeros((n, -(-k // 8) * 8), bool)
        np.not_equal(sel, ref, out=diff[:, :k])
        flags = diff.view('<u8')
        acc = flags[:, 0].copy()
        for j in range(1, flags.shape[1]):
            acc |= flags[:, j]
        return acc == 0


def _extract_into(rows: np.ndarray, fields: Mapping, out: dict, at: int) -> None:
    """
    Copy the fields of a layout from (m, L) uint8 rows into ``out[key][at:at + m]``.

    ``out`` holds int64 arrays for stamps and (n, count) float64 arrays for float64 arrays
    (never views of ``rows``, which may be the mapped file).
    """
    m, length = rows.shape
    words = rows.view('<u4') if length % 4 == 0 and rows.flags.c_contiguous else None
    for key, (off, kind, count) in fields.items():
        dst = out[key][at:at + m]
        if kind == 'time':
            if words is not None and off % 4 == 0:
                dst[...] = words[:, off // 4].view('<i4')
                nsec = words[:, off // 4 + 1]
            else:
                dst[...] = np.array(rows[:, off:off + 4]).view('<i4')[:, 0]
                nsec = np.array(rows[:, off + 4:off + 8]).view('<u4')[:, 0]
            dst *= 1_000_000_000
            dst += nsec
        elif count:                        # column by column: 1-D strided copies
            src = np.ndarray((m, count), '<f8', rows, off, (length, 8))
            for j in range(count):
                dst[:, j] = src[:, j]


def _rows_at(buf: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """
    (len(starts), length) uint8 array of the messages at ``starts`` of ``buf``.

    A view of ``buf`` when the messages lie back to back, else one gather of rows out of it.
    """
    n = starts.size
    first = int(starts[0])
    if (first + length * n <= buf.size and int(starts[-1]) == first + length * (n - 1)
            and (n < 3 or (np.diff(starts) == length).all())):
        return buf[first:first + length * n].reshape(n, length)
    return gather_rows(buf, starts, length)


def _decode_layout(batch: RawBatch, msgs: np.ndarray | None, n: int, length: int,
                   w: _Walker) -> tuple[np.ndarray, dict]:
    """
    Read the fields of layout ``w`` from the ``n`` messages ``msgs`` (None: all of the batch).

    Returns which messages have the layout's static bytes and the values of all ``n`` (those
    of the others are meaningless). Works block by block (see ``_BLOCK_BYTES``).
    """
    check = _StaticCheck(np.frombuffer(w.raw, np.uint8), w.static)
    out: dict[Any, np.ndarray] = {}
    for key, (_, kind, count) in w.fields.items():
        out[key] = np.empty(n, np.int64) if kind == 'time' else np.empty((n, count))
    same = np.empty(n, bool)
    step = max(1, _BLOCK_BYTES // max(length, 1))
    for a in range(0, n, step):
        b = min(n, a + step)
        starts = batch.starts[a:b] if msgs is None else batch.starts[msgs[a:b]]
        rows = _rows_at(batch.buf, starts, length)
        same[a:b] = check(rows)
        _extract_into(rows, w.fields, out, a)
    return same, out


def _lengths_of(lengths: np.ndarray) -> list[tuple[int, np.ndarray | None]]:
    """Distinct message lengths and the messages of each (None: all of them)."""
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo == hi:
        return [(lo, None)]
    ordered = np.sort(lengths)
    distinct = ordered[np.flatnonzero(np.diff(ordered)) + 1].tolist()
    return [(length, np.flatnonzero(lengths == length)) for length in [lo] + distinct]


def _decode_batch(batch: RawBatch, msgtype: str, deser: Callable[[bytes], Any],
                  stats: dict, walk_layouts: bool = True) -> list[_Group]:
    """
    Decode messages of one fixed-layout type into groups of identical layout.

    ``deser`` is the tolerant generic deserializer used for messages that fit no layout (and
    for all of them when ``walk_layouts`` is False: a stored definition that differs from the
    standard one, e.g. with extra fields); ``stats`` receives ``'fast'``, ``'generic'`` and
    ``'errors'`` counts and a first error.
    """
    walk, from_msg = _DECODERS[msgtype]
    groups: list[_Group] = []
    n = len(batch)
    if n == 0:
        return groups
    generic: list[int] = []
    if not walk_layouts:
        generic = list(range(n))
    for length, sel in (_lengths_of(batch.lengths) if walk_layouts else ()):
        remaining = np.arange(n) if sel is None else sel   # messages still to decode
        everything = sel is None                           # remaining == all, in order
        templates = 0
        while remaining.size and templates < _MAX_TEMPLATES:
            first = int(remaining[0])
            try:
                w = _Walker(batch.item(first))
                walk(w)
            except (_NoLayout, struct.error, UnicodeDecodeError):
                generic.append(first)
                remaining = remaining[1:]
                everything = False
                templates += 1
                continue
            same, values = _decode_layout(batch, None if everything else remaining,
                                          remaining.size, length, w)
            if same.all():
                groups.append(_Group(remaining, w.meta, values))
                stats['fast'] = stats.get('fast', 0) + int(remaining.size)
                remaining = remaining[:0]
                break
            groups.append(_Group(remaining[same], w.meta,
                                 {key: v[same] for key, v in values.items()}))
            stats['fast'] = stats.get('fast', 0) + int(same.sum())
            remaining = remaining[~same]
            everything = False
            templates += 1
        generic.extend(remaining.tolist())
    same_layout: dict[tuple, tuple[list, dict, dict]] = {}
    for i in sorted(generic):
        try:
            msg = deser(batch.item(i))
        except DecodeError as exc:
            stats['errors'] = stats.get('errors', 0) + 1
            stats.setdefault('first_error', str(exc))
            continue
        meta, values = from_msg(msg)
        key = (tuple(sorted(meta.items())),
               tuple((k, v.shape[1:]) for k, v in values.items()))
        idx, _, acc = same_layout.setdefault(key, ([], meta, {k: [] for k in values}))
        idx.append(i)
        for k, v in values.items():
            acc[k].append(v)
        stats['generic'] = stats.get('generic', 0) + 1
    for idx, meta, acc in same_layout.values():     # one group per layout, not per message
        groups.append(_Group(np.array(idx, np.int64), meta,
                             {k: np.concatenate(v) for k, v in acc.items()}))
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
        Return the time of each sample [ns].

        Header stamp (receive time if ``base == 'receive'`` or if
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


def _whole(groups: list[_Group], n: int, names: list[str]) -> _Group | None:
    """
    Return the one group holding all ``n`` messages, joints in ``names`` order (else None).

    Its decoded arrays then are the series (no NaN-filled copy to scatter into).
    """
    if len(groups) != 1 or groups[0].idx.size != n:
        return None
    g = groups[0]
    return g if list(g.meta.get('names', ())) == names else None


def _joint_columns(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` (n, m) as (n, width) columns: itself when m == width, else NaN-padded."""
    if values.shape[1] == width:
        return values
    out = np.full((values.shape[0], width), np.nan)
    k = min(width, values.shape[1])
    out[:, :k] = values[:, :k]
    return out


def _assemble_joint_states(topic, msgtype, recv, groups, stats) -> JointStateSeries:
    n = len(recv)
    names = _union_names(groups)
    whole = _whole(groups, n, names)
    if whole is not None:                 # one layout, every message (the usual case)
        v = whole.values
        return JointStateSeries(topic, msgtype, recv, v['stamp'], names,
                                _joint_columns(v['position'], len(names)),
                                _joint_columns(v['velocity'], len(names)),
                                _joint_columns(v['effort'], len(names)),
                                stats.get('errors', 0), stats)
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
    if len(groups) == 1 and groups[0].idx.size == n:
        return ArraySeries(topic, msgtype, recv, groups[0].values['data'],
                           stats.get('errors', 0), stats)
    width = max((g.values['data'].shape[1] for g in groups), default=0)
    data = np.full((n, width), np.nan)
    ok = np.zeros(n, bool)
    for g in groups:
        vals = g.values['data']
        data[g.idx, :vals.shape[1]] = vals
        ok[g.idx] = True
    keep = ok if not ok.all() else slice(None)
    return ArraySeries(topic, msgtype, recv[keep], data[keep], stats.get('errors', 0), stats)


_POINT_KEYS = ('positions', 'velocities', 'accelerations', 'effort')


def _assemble_trajectories(topic, msgtype, recv, groups, stats) -> TrajectorySeries:
    n = len(recv)
    names = _union_names(groups)
    whole = _whole(groups, n, names)
    if whole is not None and whole.meta['npoints'] == 1:    # one layout, one point each
        v = whole.values
        return TrajectorySeries(topic, msgtype, recv, v['stamp'], names, whole.idx,
                                v[('tfs', 0)],
                                *(_joint_columns(v[(key, 0)], len(names))
                                  for key in _POINT_KEYS),
                                stats.get('errors', 0), stats)
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
            for key in _POINT_KEYS:
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
                  for key in _POINT_KEYS}
    else:
        sample_msg = np.zeros(0, np.int64)
        tfs = np.zeros(0, np.int64)
        arrays = {key: np.zeros((0, len(names))) for key in _POINT_KEYS}
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


_READ_ERRORS = (OSError, sqlite3.Error, struct.error, ValueError, KeyError, IndexError,
                EOFError, TypesysError, yaml.YAMLError, StorageError, MemoryError)
_FMT_NAMES = {'MSG': 'ros2msg', 'IDL': 'ros2idl'}


class _RosbagsSource:
    """A bag that needs rosbags' own reader (compressed bags): its public ``Reader``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._reader = Reader(path)
        self._reader.open()
        meta = self._reader
        self.recovered = False
        self.recovered_reason = ''
        self.start_ns = meta.start_time if meta.message_count else 0
        self.end_ns = meta.end_time - 1 if meta.message_count else 0
        self.count = meta.message_count
        self.topics = [TopicRecord(c.id, c.topic, c.msgtype,
                                   _FMT_NAMES.get(c.msgdef.format.name, ''), c.msgdef.data,
                                   c.digest or '', '', int(c.msgcount))
                       for c in self._reader.connections]

    def read(self, ids, progress=None) -> dict[int, RawBatch]:
        ids = set(ids)
        conns = [c for c in self._reader.connections if c.id in ids]
        acc: dict[int, tuple[list, list]] = {c: ([], []) for c in ids}
        for conn, ts, raw in self._reader.messages(connections=conns):
            acc[conn.id][0].append(ts)
            acc[conn.id][1].append(bytes(raw))
        if progress is not None:
            progress(sum(len(a[0]) for a in acc.values()))
        return {c: RawBatch.from_list(ts, data) for c, (ts, data) in acc.items()}

    def close(self) -> None:
        self._reader.close()


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
    skip_corrupt : bool
        MCAP chunks that fail their CRC are left out and listed in ``corrupt`` (default: a
        mismatch raises :class:`BagError` naming the chunk and its time range).

    Use as a context manager. Attributes after opening: ``storage`` ('sqlite3' / 'mcap'),
    ``metadata_version`` (None without metadata), ``files``, ``start_ns``, ``end_ns``,
    ``message_count``, ``topics`` (dict of :class:`TopicInfo`), ``skipped`` (topic -> reason),
    ``params`` (``params.yaml`` content or None), ``typestore``, and ``recovered`` /
    ``recovered_reason``: the bag's writer did not finish it (no ``metadata.yaml``, an MCAP
    file without summary, a sqlite3 write-ahead log) and what could be read is returned (up to
    the last complete MCAP chunk; ``end_ns`` is where the data ends). ``notes`` say what a
    complete file lacks (e.g. an MCAP summary without statistics) and where ``metadata.yaml``
    disagrees with the data; ``corrupt`` lists the regions left out with ``skip_corrupt``.

    Uncompressed MCAP and sqlite3 files are read with :mod:`manip_control.bag_storage`
    (``mcap`` library, ``sqlite3``); compressed bags with rosbags' ``Reader``.

    """

    def __init__(self, path: str | Path, *, default_store: Stores | str | None = None,
                 max_trailing: int = MAX_TRAILING_BYTES, skip_corrupt: bool = False) -> None:
        self.path = Path(path)
        self.skip_corrupt = bool(skip_corrupt)
        self.notes: list[str] = []
        self._default_store = default_store
        self.max_trailing = max_trailing
        self._sources: list = []
        self._conns: dict[str, list[tuple[Any, TopicRecord]]] = {}
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
        self._stores: dict[str, Any] = {}
        self.decode_errors: dict[str, int] = {}
        self.recovered = False
        self.recovered_reason = ''

    # -- opening ----------------------------------------------------------------------------
    def __enter__(self) -> BagReader:
        self.open()
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def open(self) -> BagReader:  # noqa: A003 - the public name since the first release
        """Open the bag and resolve its topics and types (raises :class:`BagError`)."""
        path = self.path
        if not path.exists():
            raise BagError(f'{path}: no such file or directory')
        try:
            if path.is_dir():
                if (path / METADATA_FILE).is_file():
                    self._open_directory(path)
                else:
                    files = sorted(p for p in path.iterdir()
                                   if p.is_file() and p.suffix in SUFFIXES)
                    if not files:
                        raise BagError(f'{path}: not a rosbag2 bag (no metadata.yaml and no '
                                       '.db3/.mcap file)')
                    self._open_files(files, None)
                    self.recovered = True
                    why = [s.recovered_reason for s in self._sources if s.recovered_reason]
                    self.recovered_reason = '; '.join(
                        ['no metadata.yaml (the recorder did not finish the bag)'] + why)
            elif path.suffix in SUFFIXES:
                self._open_files([path], None)
                why = [s.recovered_reason for s in self._sources if s.recovered_reason]
                if why:
                    self.recovered = True
                    self.recovered_reason = '; '.join(why)
            else:
                raise BagError(f'{path}: not a rosbag2 bag (expected a bag directory, '
                               'a .db3 or a .mcap file)')
            self.params = read_params(path)
            self._resolve_types()
        except BagError:
            self.close()
            raise
        except StorageError as exc:
            self.close()
            raise BagError(str(exc)) from None
        except _READ_ERRORS as exc:
            self.close()
            raise BagError(f'{self._culprit(exc)}: unreadable or corrupt bag ({exc})') from None
        return self

    def _culprit(self, exc: BaseException | None = None) -> Path:
        """Return the file to name in an error message."""
        text = str(exc) if exc is not None else ''
        for f in self.files:
            if str(f) in text or f.name in text:
                return f
        if len(self.files) == 1:
            return self.files[0]
        return self.path

    def _open_directory(self, path: Path) -> None:
        meta_path = path / METADATA_FILE
        info = read_metadata(meta_path)
        self.metadata_version = info['version']
        self.storage = info['storage_identifier']
        self.ros_distro = info.get('ros_distro')
        self.files = [path / Path(p).name for p in info['relative_file_paths']]
        for f in self.files:
            if not f.is_file():
                raise BagError(f'{f}: storage file listed in {meta_path} is missing')
        compressed = bool(info.get('compression_mode') or info.get('compression_format'))
        counts = {e['topic_metadata']['name']: int(e.get('message_count', 0))
                  for e in info.get('topics_with_message_count', [])}
        if compressed or self.storage not in _STORAGES or \
                any(f.suffix not in SUFFIXES for f in self.files):
            try:
                src = _RosbagsSource(path)
            except Exception as exc:  # noqa: BLE001 - rosbags' reader errors vary
                raise BagError(f'{self._culprit(exc)}: unreadable or corrupt bag ({exc})') \
                    from None
            self._add_source(src)
            self.start_ns, self.end_ns, self.message_count = src.start_ns, src.end_ns, \
                src.count
            return
        self._open_files(self.files, counts if len(self.files) == 1 else None)
        listed = int(info.get('message_count', self.message_count))
        if listed != self.message_count and not self.recovered:
            self.notes.append(f'{meta_path}: lists {listed} messages in all, the storage '
                              f'files hold {self.message_count} (the files are used)')

    def _add_source(self, src) -> None:
        self._sources.append(src)
        for t in src.topics:
            self._conns.setdefault(t.topic, []).append((src, t))

    def _open_files(self, files: list[Path], counts: dict | None) -> None:
        self.files = list(files)
        kinds = {SUFFIXES[f.suffix] for f in files}
        if len(kinds) != 1:
            raise BagError(f'{self.path}: mixed storage files {[f.name for f in files]}')
        self.storage = kinds.pop()
        for f in files:
            try:
                src = open_storage_reader(f, counts, skip_corrupt=self.skip_corrupt)
            except StorageError as exc:
                text = str(exc)
                raise BagError(text if str(f) in text else f'{f}: {text}') from None
            self._add_source(src)
        starts = [s.start_ns for s in self._sources if s.count]
        ends = [s.end_ns for s in self._sources if s.count]
        self.start_ns = min(starts) if starts else 0
        self.end_ns = max(ends) if ends else 0
        self.message_count = sum(s.count for s in self._sources)
        for s in self._sources:
            self.notes.extend(s.notes)
        if len(files) > 1:
            problem = parts_problem([(f.name, s.start_ns, s.end_ns, s.count,
                                      {t.topic: t.msgtype for t in s.topics})
                                     for f, s in zip(files, self._sources)])
            if problem is not None:
                self.notes.insert(0, f'the storage files are not the parts of one recording '
                                     f'({problem}): two recordings may be read as one here')
        why = [s.recovered_reason for s in self._sources if s.recovered]
        if why:
            self.recovered = True
            self.recovered_reason = '; '.join(why)

    def _store_choice(self):
        if self._default_store is not None:
            return self._default_store
        if self.ros_distro and str(self.ros_distro).lower() in _DISTRO_STORES:
            return _DISTRO_STORES[str(self.ros_distro).lower()]
        if self.metadata_version is None or self.metadata_version <= 6:
            return Stores.ROS2_HUMBLE
        return Stores.ROS2_JAZZY

    def _resolve_types(self) -> None:
        """
        One typestore for the bag: its own definitions first, the default store for the rest.

        Built with public rosbags calls only (``get_typestore``, ``register``, ``fielddefs``).
        """
        store_id = self._store_choice()
        store_name = getattr(store_id, 'name', str(store_id))
        problems: dict[str, str] = {}
        defaults: list = []

        def build(records: list) -> Any:
            store = get_typestore(Stores.EMPTY)
            seen: set[str] = set()
            for t in records:
                if t.msgtype in seen or not t.msgdef_format or not t.msgdef.strip():
                    continue
                seen.add(t.msgtype)
                try:
                    types = _parse_definition(t.msgtype, t.msgdef_format, t.msgdef)
                except (TypesysError, ValueError, KeyError, IndexError) as exc:
                    problems[t.msgtype] = f'unparsable message definition in the bag ({exc})'
                    continue
                new = {name: fdef for name, fdef in types.items()
                       if name not in store.fielddefs}
                try:
                    store.register(new)
                except (TypesysError, ValueError, KeyError) as exc:
                    problems[t.msgtype] = f'unusable message definition in the bag ({exc})'
            if any(_missing_type(store, t.msgtype) for t in records):
                if not defaults:                   # only when the bag lacks definitions
                    defaults.append(default_typestore(store_id))
                needed: dict = {}
                for t in records:
                    _collect_defaults(store, defaults[0], t.msgtype, needed, set())
                if needed:
                    store.register(needed)
            return store
        records = [t for conns in self._conns.values() for _, t in conns]
        store = build(records)
        self.typestore = store
        # a type stored with another definition on some channel (an extended JointState on
        # one topic, the standard one on another) is decoded with that channel's definition
        first: dict[str, str] = {}
        for t in records:
            if t.msgdef_format and t.msgdef.strip():
                first.setdefault(t.msgtype, t.msgdef)
        self._stores = {}
        own: dict[tuple, Any] = {}
        for topic, conns in self._conns.items():
            t = conns[0][1]
            if t.msgdef_format and t.msgdef.strip() and first.get(t.msgtype) != t.msgdef:
                key = (t.msgtype, t.msgdef_format, t.msgdef)
                if key not in own:
                    own[key] = build([t] + [r for r in records if r.msgtype != t.msgtype])
                self._stores[topic] = own[key]
        self.topics.clear()
        self.skipped.clear()
        for topic, conns in self._conns.items():
            store = self.store_for(topic)
            msgtype = conns[0][1].msgtype
            count = sum(t.count for _, t in conns if t.msgtype == msgtype)
            reason = None
            others = sorted({t.msgtype for _, t in conns} - {msgtype})
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

    def store_for(self, topic: str):
        """Return the typestore that decodes ``topic`` (its channel's own stored definition)."""
        return self._stores.get(topic, self.typestore)

    def lost_messages(self) -> dict[str, int]:
        """Messages per topic in the damaged chunks left out so far (``skip_corrupt``)."""
        out: dict[str, int] = {}
        for src in self._sources:
            lost = getattr(src, 'lost', None)
            if not lost:
                continue
            names = {t.id: t.topic for t in src.topics}
            for cid, n in lost.items():
                if cid in names:
                    out[names[cid]] = out.get(names[cid], 0) + n
        return out

    @property
    def corrupt(self) -> list:
        """Regions (:class:`~manip_control.bag_storage.CorruptRegion`) left out so far."""
        return [c for s in self._sources for c in getattr(s, 'corrupt', [])]

    def verify(self) -> int:
        """
        Check every checksum of the storage files (MCAP chunk, data-section CRCs).

        Returns the number of chunks checked (0 for sqlite3, which has no checksums). Raises
        :class:`BagError` naming the first damaged chunk and its time range (with
        ``skip_corrupt``: lists them in :attr:`corrupt`).
        """
        self._check()
        total = 0
        try:
            for src in self._sources:
                if hasattr(src, 'verify'):
                    total += src.verify()
        except StorageError as exc:
            raise BagError(str(exc)) from None
        return total

    def close(self) -> None:
        """Close the storage files."""
        sources, self._sources = self._sources, []
        for src in sources:
            try:
                src.close()
            except Exception:  # noqa: BLE001 - closing after an error must not mask it
                pass

    # -- decoding ---------------------------------------------------------------------------
    def _check(self) -> None:
        if not self._sources:
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

    def read_batches(self, topics: Iterable[str],
                     progress: Callable[[int, int], None] | None = None
                     ) -> dict[str, RawBatch]:
        """
        All raw messages of ``topics`` as :class:`~manip_control.bag_storage.RawBatch`.

        Messages are sorted by bag timestamp (stable). ``progress(done, total)`` is called
        now and then with message counts.
        """
        self._check()
        wanted = self._wanted(topics)
        total = max(1, sum(self.topics[t].count for t in wanted))
        done = [0]

        def tick(k: int) -> None:
            done[0] += k
            if progress is not None:
                progress(min(done[0], total), total)

        parts: dict[str, list[RawBatch]] = {t: [] for t in wanted}
        try:
            for src in self._sources:
                ids = {t.id: t.topic for t in src.topics
                       if t.topic in parts and t.msgtype == self.topics[t.topic].msgtype}
                if not ids:
                    continue
                for cid, batch in src.read(ids, tick).items():
                    parts[ids[cid]].append(batch)
        except BagError:
            raise
        except StorageError as exc:
            text = str(exc)
            raise BagError(text if any(str(f) in text for f in self.files)
                           else f'{self._culprit(exc)}: corrupt bag data ({text})') from None
        except _READ_ERRORS as exc:
            raise BagError(f'{self._culprit(exc)}: corrupt bag data ({exc})') from None
        return {t: RawBatch.concat(p).order_by_time() for t, p in parts.items()}

    def read_raw(self, topics: Iterable[str],
                 progress: Callable[[int, int], None] | None = None
                 ) -> dict[str, tuple[np.ndarray, list[bytes]]]:
        """``{topic: (receive_ns int64 array sorted ascending, [raw bytes, ...])}``."""
        out = {}
        for topic, b in self.read_batches(topics, progress).items():
            out[topic] = (b.ts, [b.item(i) for i in range(len(b))])
        return out

    def raw_messages(self, topics: Iterable[str] | None = None
                     ) -> Iterator[tuple[str, int, bytes]]:
        """Yield ``(topic, receive_ns, raw_cdr)`` in timestamp order."""
        wanted = self._wanted(topics) if topics is not None else list(self.topics)
        batches = self.read_batches(wanted)
        merged = sorted(((int(t), k, topic, i) for k, (topic, b) in enumerate(batches.items())
                         for i, t in enumerate(b.ts.tolist())))
        for t, _, topic, i in merged:
            yield topic, t, batches[topic].item(i)

    def messages(self, topics: Iterable[str] | None = None) -> Iterator[tuple[str, int, Any]]:
        """
        Yield ``(topic, receive_ns, message)`` in timestamp order.

        Undecodable topics and messages are skipped (counted in :attr:`decode_errors`).
        """
        wanted = [t for t in self._wanted(topics) if self.topics[t].decodable]
        types = {t: self.topics[t].msgtype for t in wanted}
        for topic, ts, raw in self.raw_messages(wanted):
            try:
                msg = deserialize_tolerant(self.store_for(topic), raw, types[topic],
                                           self.max_trailing)
            except DecodeError:
                self.decode_errors[topic] = self.decode_errors.get(topic, 0) + 1
                continue
            yield topic, ts, msg

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
        raw = self.read_batches(wanted, progress)
        out: dict[str, Any] = {}
        for topic in wanted:
            batch = raw.pop(topic)
            msgtype = self.topics[topic].msgtype
            store = self.store_for(topic)

            def deser(b, _t=msgtype, _s=store):
                return deserialize_tolerant(_s, b, _t, self.max_trailing)
            if msgtype in _DECODERS:
                standard = self._layout_matches(msgtype, topic)
                if not standard:
                    missing = _missing_field(store, msgtype, _NEEDED[msgtype])
                    if missing is not None:
                        raise BagError(f'{self.path}: topic {topic}: the stored definition of '
                                       f'{msgtype} has no field {missing}, which the '
                                       'analysis needs')
                stats: dict = {}
                groups = _decode_batch(batch, msgtype, deser, stats, walk_layouts=standard)
                out[topic] = _ASSEMBLERS[msgtype](topic, msgtype, batch.ts, groups, stats)
                if stats.get('errors'):
                    self.decode_errors[topic] = stats['errors']
            else:
                msgs = []
                for i, t in enumerate(batch.ts.tolist()):
                    try:
                        msgs.append((t, deser(batch.item(i))))
                    except DecodeError:
                        self.decode_errors[topic] = self.decode_errors.get(topic, 0) + 1
                out[topic] = msgs
        return out

    def _layout_matches(self, msgtype: str, topic: str | None = None) -> bool:
        """Tell whether the bag's definition of ``msgtype`` has the standard field layout."""
        try:
            store = self.typestore if topic is None else self.store_for(topic)
            return _signature(store, msgtype) == _LAYOUTS[msgtype]
        except (KeyError, IndexError, AttributeError):
            return False


#: Fields each decoded type must have (a stored definition may add others, or lack the rest:
#: those arrays are then empty).
_NEEDED = {
    JOINT_STATE: ('header.stamp.sec', 'header.stamp.nanosec', 'name', 'position'),
    FLOAT64_MULTI_ARRAY: ('data',),
    JOINT_TRAJECTORY: ('header.stamp.sec', 'header.stamp.nanosec', 'joint_names',
                       'points.positions', 'points.time_from_start.sec',
                       'points.time_from_start.nanosec'),
}


def _missing_field(store, msgtype: str, needed: Iterable[str]) -> str | None:
    """First dotted field of ``needed`` that the definition of ``msgtype`` lacks, else None."""
    for dotted in needed:
        current = msgtype
        for part in dotted.split('.'):
            fields = dict(store.fielddefs.get(current, (None, []))[1]) if current else {}
            if part not in fields:
                return dotted
            desc = fields[part]
            while desc[0].name in ('ARRAY', 'SEQUENCE'):
                desc = desc[1][0]
            current = desc[1] if desc[0].name == 'NAME' else None
    return None


def _collect_defaults(store, default, msgtype: str, out: dict, seen: set) -> None:
    """Add to ``out`` the default store's definitions ``msgtype`` needs that ``store`` lacks."""
    if msgtype in seen:
        return
    seen.add(msgtype)
    fdef = store.fielddefs.get(msgtype) or out.get(msgtype)
    if fdef is None:
        fdef = default.fielddefs.get(msgtype)
        if fdef is None:
            return
        out[msgtype] = fdef
    for _, desc in fdef[1]:
        while desc[0].name in ('ARRAY', 'SEQUENCE'):
            desc = desc[1][0]
        if desc[0].name == 'NAME':
            _collect_defaults(store, default, desc[1], out, seen)


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
