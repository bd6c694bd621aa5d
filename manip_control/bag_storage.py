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
rosbag2 storage files: MCAP and sqlite3 writers and readers, ``metadata.yaml``, recovery.

Everything here uses public interfaces only: the ``mcap`` library (``mcap.writer.Writer``,
``mcap.reader.make_reader(...).get_summary()``, ``mcap.stream_reader.StreamReader``), the
standard ``sqlite3`` module with the rosbag2 sqlite3 schema, and the MCAP and rosbag2 file
formats as their specifications define them. ``rosbags`` is not needed here.

Writers (:class:`McapStorageWriter`, :class:`SqliteStorageWriter`) report after every write
whether the data written so far became durable (a complete MCAP chunk with its message
indexes reached the file; a sqlite3 transaction was committed), so the caller can count what
the file holds. Readers (:class:`McapStorageReader`, :class:`SqliteStorageReader`) return the
raw CDR bytes of whole topics as numpy buffers. An MCAP file without its summary (the writer
was killed) is read up to its last complete chunk (``recovered`` and ``recovered_reason`` say
so); a sqlite3 file is read with its write-ahead log. :func:`reindex` rebuilds
``metadata.yaml`` (version 8) of a bag directory and completes an unfinished MCAP file.

"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
import mmap
import operator
import os
from pathlib import Path
import re
import shutil
import sqlite3
import struct
import tempfile
import zlib

from mcap.data_stream import RecordBuilder
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.reader import make_reader
from mcap.records import Channel
from mcap.records import Chunk
from mcap.records import ChunkIndex
from mcap.records import DataEnd
from mcap.records import Footer
from mcap.records import Header
from mcap.records import Message
from mcap.records import MessageIndex
from mcap.records import Schema
from mcap.records import Statistics
from mcap.records import SummaryOffset
from mcap.stream_reader import StreamReader
from mcap.writer import MCAP0_MAGIC
import numpy as np
import yaml

METADATA_FILE = 'metadata.yaml'
METADATA_VERSION = 8
SUFFIXES = {'.mcap': 'mcap', '.db3': 'sqlite3'}
#: MCAP chunk size [bytes] of the writer (a killed recorder loses at most one chunk).
CHUNK_SIZE = 1024 * 1024
_MCAP_MAGIC = b'\x89MCAP0\r\n'
_MSG_HEADER = 31          # opcode 1 + length 8 + channel 2 + sequence 4 + log 8 + publish 8
_SQLITE_DDL = (
    'CREATE TABLE schema(schema_version INTEGER PRIMARY KEY, ros_distro TEXT NOT NULL)',
    'CREATE TABLE metadata(id INTEGER PRIMARY KEY, metadata_version INTEGER NOT NULL, '
    'metadata TEXT NOT NULL)',
    'CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, '
    'serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL, '
    'type_description_hash TEXT NOT NULL)',
    'CREATE TABLE message_definitions(id INTEGER PRIMARY KEY, topic_type TEXT NOT NULL, '
    'encoding TEXT NOT NULL, encoded_message_definition TEXT NOT NULL, '
    'type_description_hash TEXT NOT NULL)',
    'CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL, '
    'timestamp INTEGER NOT NULL, data BLOB NOT NULL)',
    'CREATE INDEX timestamp_idx ON messages (timestamp ASC)',
)


class StorageError(Exception):
    """A storage file or ``metadata.yaml`` is unreadable, corrupt or cannot be written."""


class CorruptDataError(StorageError):
    """Stored data fail their checksum (MCAP chunk, data section or summary CRC)."""


@dataclass
class CorruptRegion:
    """
    A part of a storage file whose checksum does not match (its data are not used).

    Attributes
    ----------
    path : Path
    what : str
        E.g. ``'chunk 12 of 120'``.
    offset : int
        File offset [bytes] of the record.
    start_ns, end_ns : int or None
        Log-time range [ns] of the messages it holds (None if unknown).
    reason : str
        What failed, in words.

    """

    path: Path
    what: str
    offset: int
    start_ns: int | None
    end_ns: int | None
    reason: str

    def describe(self) -> str:
        """One line naming the file, the record, its time range and what failed."""
        span = ''
        if self.start_ns is not None and self.end_ns is not None:
            span = (f', messages from bag time {ns_text(self.start_ns)} s to '
                    f'{ns_text(self.end_ns)} s')
        return f'{self.path}: {self.what} at byte {self.offset}{span}: {self.reason}'


def ns_text(ns: int) -> str:
    """
    Seconds with 9 decimals written from integer nanoseconds (exact, unlike a float64).

    A bag time of 1.7e18 ns has float64 steps of 256 ns: ``ns / 1e9`` printed to 9 decimals
    can be tens of nanoseconds off.
    """
    ns = int(ns)
    sign = '-' if ns < 0 else ''
    sec, frac = divmod(abs(ns), 10**9)
    return f'{sign}{sec}.{frac:09d}'


# ---------------------------------------------------------------------------------------------
# metadata.yaml


@dataclass
class TopicRecord:
    """One topic as ``metadata.yaml`` and the storage files describe it."""

    id: int  # noqa: A003 - the storage id of the topic / channel
    topic: str
    msgtype: str
    msgdef_format: str = ''          # 'ros2msg', 'ros2idl' or '' (no definition stored)
    msgdef: str = ''
    type_hash: str = ''
    qos: str = ''                    # offered QoS profiles, rosbag2 YAML string
    count: int = 0


def metadata_dict(storage: str, files: list[tuple[str, int, int, int]],
                  topics: Iterable[TopicRecord], *, ros_distro: str = 'jazzy') -> dict:
    """
    ``metadata.yaml`` content of a bag (rosbag2 metadata version 8).

    Parameters
    ----------
    storage : {'mcap', 'sqlite3'}
        Storage identifier.
    files : list of (file name, start [ns], end [ns], message count)
        ``end`` is the last message's timestamp; a file without messages has count 0.
    topics : iterable of TopicRecord
        Counts are the messages the files hold per topic.
    ros_distro : str
        Distribution name recorded in the metadata.

    """
    topics = list(topics)
    total = sum(f[3] for f in files)
    with_data = [f for f in files if f[3]]
    start = min((f[1] for f in with_data), default=0)
    end = max((f[2] for f in with_data), default=0)
    return {'rosbag2_bagfile_information': {
        'version': METADATA_VERSION,
        'storage_identifier': storage,
        'duration': {'nanoseconds': int(end - start) if total else 0},
        'starting_time': {'nanoseconds_since_epoch': int(start)},
        'message_count': int(total),
        'topics_with_message_count': [
            {'topic_metadata': {'name': t.topic, 'type': t.msgtype,
                                'serialization_format': 'cdr',
                                'offered_qos_profiles': t.qos,
                                'type_description_hash': t.type_hash},
             'message_count': int(t.count)} for t in topics],
        'compression_format': '',
        'compression_mode': '',
        'relative_file_paths': [f[0] for f in files],
        'files': [{'path': f[0], 'starting_time': {'nanoseconds_since_epoch': int(f[1])},
                   'duration': {'nanoseconds': int(f[2] - f[1]) if f[3] else 0},
                   'message_count': int(f[3])} for f in files],
        'custom_data': None,
        'ros_distro': ros_distro,
    }}


def write_metadata(bag_dir: str | Path, meta: dict) -> Path:
    """Write ``metadata.yaml`` atomically (temporary file, then rename)."""
    target = Path(bag_dir) / METADATA_FILE
    tmp = target.with_name(METADATA_FILE + '.tmp')
    try:
        tmp.write_text(yaml.safe_dump(meta, sort_keys=False), encoding='utf-8')
        os.replace(tmp, target)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise StorageError(f'{target}: cannot write ({exc.strerror or exc})') from None
    return target


def _need(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise StorageError(f'{path}: {what}')


def read_metadata(path: str | Path) -> dict:
    """
    Parse and check a ``metadata.yaml`` (versions 1 to 9).

    Returns the ``rosbag2_bagfile_information`` mapping. Every problem raises
    :class:`StorageError` with one line naming the file and what is wrong.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding='utf-8')
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f'{path}: unreadable ({getattr(exc, "strerror", None) or exc})') \
            from None
    try:
        meta = yaml.load(text, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = f' at line {mark.line + 1}, column {mark.column + 1}' if mark else ''
        problem = getattr(exc, 'problem', None) or type(exc).__name__
        raise StorageError(f'{path}: not valid YAML{where} ({problem})') from None
    _need(isinstance(meta, dict), path, 'not a rosbag2 metadata file (expected a mapping with '
          'rosbag2_bagfile_information)')
    info = meta.get('rosbag2_bagfile_information')
    _need(isinstance(info, dict), path, 'no rosbag2_bagfile_information mapping')
    version = info.get('version')
    _need(isinstance(version, int) and not isinstance(version, bool), path,
          f'version: expected an integer (got {version!r})')
    _need(1 <= version <= 9, path,
          f'rosbag2 metadata version {version} is not supported (1 to 9)')
    storage = info.get('storage_identifier')
    _need(isinstance(storage, str) and storage != '', path,
          f'storage_identifier: expected a storage name (got {storage!r})')
    rel = info.get('relative_file_paths')
    _need(isinstance(rel, list) and all(isinstance(p, str) and p for p in rel), path,
          f'relative_file_paths: expected a list of file names (got {rel!r})')
    topics = info.get('topics_with_message_count', [])
    _need(isinstance(topics, list), path,
          f'topics_with_message_count: expected a list (got {type(topics).__name__})')
    for k, entry in enumerate(topics):
        where = f'topics_with_message_count[{k}]'
        _need(isinstance(entry, dict) and isinstance(entry.get('topic_metadata'), dict), path,
              f'{where}: expected a mapping with topic_metadata')
        tm = entry['topic_metadata']
        for key in ('name', 'type'):
            _need(isinstance(tm.get(key), str) and tm.get(key), path,
                  f'{where}.topic_metadata.{key}: expected a string (got {tm.get(key)!r})')
        count = entry.get('message_count', 0)
        _need(isinstance(count, int) and not isinstance(count, bool) and count >= 0, path,
              f'{where}.message_count: expected a count >= 0 (got {count!r})')
    count = info.get('message_count', 0)
    _need(isinstance(count, int) and not isinstance(count, bool) and count >= 0, path,
          f'message_count: expected a count >= 0 (got {count!r})')
    for key in ('compression_format', 'compression_mode'):
        value = info.get(key, '')
        _need(value is None or isinstance(value, str), path,
              f'{key}: expected a string (got {value!r})')
    for key, sub in (('starting_time', 'nanoseconds_since_epoch'), ('duration', 'nanoseconds')):
        value = info.get(key)
        _need(value is None or (isinstance(value, dict) and isinstance(value.get(sub), int)),
              path, f'{key}: expected {{{sub}: integer}} (got {value!r})')
    return info


# ---------------------------------------------------------------------------------------------
# writers


class _Sink:
    """Unbuffered file for the mcap writer: each write reaches the OS at once (or raises)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.pos = 0
        self.writes = 0

    def write(self, data) -> int:
        view = memoryview(data)
        size = len(view)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.pos += size
        self.writes += 1
        return size

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        return None

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


#: MCAP record header and the fixed part of a Message record: opcode, record length, channel
#: id, sequence, log time, publish time (little endian, as the MCAP specification lays it out).
_MCAP_MESSAGE = struct.Struct('<BQHIQQ')
_MCAP_MESSAGE_FIXED = 2 + 4 + 8 + 8


class McapStorageWriter:
    """
    MCAP storage file (profile ``ros2``), with chunks of at most ``chunk_size`` bytes.

    The per-message path packs the Message record by hand into the open chunk (one
    ``struct`` call and one append: about 1 us, against about 5 us through
    ``mcap.writer.Writer.add_message``, which builds a record object and writes it field by
    field); schemas, channels, chunks, indexes and the summary are the ``mcap`` library's own
    record classes, laid out as its writer lays them out (schema and channel records in the
    chunk that first holds their messages and again in the summary; a message index per
    channel after each chunk; statistics, chunk indexes and summary offsets). Chunks are
    uncompressed by default (``zstd`` / ``lz4`` on request: compressed when the chunk is
    closed). :meth:`flush` closes the open chunk. ``good_size`` is the file size up to the last
    complete chunk with its message indexes.
    """

    def __init__(self, path: Path, *, chunk_size: int = CHUNK_SIZE,
                 compression: str = 'none') -> None:
        if compression not in ('none', 'zstd', 'lz4'):
            raise StorageError(f'{path}: unknown MCAP compression {compression!r} '
                               "(expected one of ['lz4', 'none', 'zstd'])")
        if compression == 'zstd':
            import zstandard
            self._compress = zstandard.compress
        elif compression == 'lz4':
            import lz4.frame
            self._compress = lz4.frame.compress
        else:
            self._compress = None
        self._compression = '' if compression == 'none' else compression
        self.path = Path(path)
        self.chunk_size = int(chunk_size)
        self._sink = _Sink(self.path)
        self._schemas: dict[tuple, int] = {}
        self._schema_records: list = []
        self._channel_records: list = []
        self._chunk = bytearray()
        self._index: dict[int, list] = {}      # channel -> [(log time, offset in chunk)]
        self._chunk_times = [0, 0]
        self._chunk_messages = 0
        self._chunk_indexes: list = []
        self._counts: dict[int, int] = {}
        self._times: list = [None, None]
        self._messages = 0
        self._finished = False
        self._sink.write(MCAP0_MAGIC + self._record(Header('ros2', 'manip_control')))
        self.good_size = self._sink.pos

    @staticmethod
    def _record(*records) -> bytes:
        rb = RecordBuilder()
        for r in records:
            r.write(rb)
        return rb.end()

    def add_topic(self, t: TopicRecord) -> int:
        """Register a schema (once per type and definition) and a channel; returns its id."""
        key = (t.msgtype, t.msgdef_format, t.msgdef)     # one type may have two definitions
        sid = self._schemas.get(key)
        if sid is None:
            sid = len(self._schema_records) + 1
            schema = Schema(id=sid, name=t.msgtype, encoding=t.msgdef_format or 'ros2msg',
                            data=t.msgdef.encode())
            self._schema_records.append(schema)
            self._chunk += self._record(schema)
            self._schemas[key] = sid
        meta = {'offered_qos_profiles': t.qos}
        if t.type_hash:
            meta['topic_type_hash'] = t.type_hash
        cid = len(self._channel_records) + 1
        channel = Channel(id=cid, topic=t.topic, message_encoding='cdr', schema_id=sid,
                          metadata=meta)
        self._channel_records.append(channel)
        self._chunk += self._record(channel)
        self._counts[cid] = 0
        self._index[cid] = []
        return cid

    def write(self, cid: int, ts: int, raw) -> bool:
        """Add one message; True if a chunk (with everything before) reached the file."""
        chunk = self._chunk
        self._index[cid].append((ts, len(chunk)))
        chunk += _MCAP_MESSAGE.pack(5, _MCAP_MESSAGE_FIXED + len(raw), cid, 0, ts, ts)
        chunk += raw
        self._counts[cid] += 1
        times = self._chunk_times
        if self._chunk_messages:
            if ts < times[0]:
                times[0] = ts
            elif ts > times[1]:
                times[1] = ts
        else:
            times[0] = times[1] = ts
        self._chunk_messages += 1
        if len(chunk) > self.chunk_size:
            return self._close_chunk()
        return False

    def _close_chunk(self) -> bool:
        """Write the open chunk and its message indexes; True if one was written."""
        if not self._chunk_messages:
            return False
        data = bytes(self._chunk)
        packed = self._compress(data) if self._compress is not None else data
        lo, hi = self._chunk_times
        chunk = self._record(Chunk(compression=self._compression, data=packed,
                                   message_start_time=lo, message_end_time=hi,
                                   uncompressed_crc=zlib.crc32(data),
                                   uncompressed_size=len(data)))
        start = self._sink.pos
        offsets = {}
        indexes = bytearray()
        for cid, entries in self._index.items():
            if entries:
                offsets[cid] = start + len(chunk) + len(indexes)
                indexes += self._record(MessageIndex(channel_id=cid, records=entries))
        self._sink.write(chunk + indexes)
        self._chunk_indexes.append(ChunkIndex(
            message_start_time=lo, message_end_time=hi, chunk_start_offset=start,
            chunk_length=len(chunk), message_index_offsets=offsets,
            message_index_length=len(indexes), compression=self._compression,
            compressed_size=len(packed), uncompressed_size=len(data)))
        if self._times[0] is None or lo < self._times[0]:
            self._times[0] = lo
        if self._times[1] is None or hi > self._times[1]:
            self._times[1] = hi
        self._messages += self._chunk_messages
        self._chunk = bytearray()
        self._index = {cid: [] for cid in self._index}
        self._chunk_messages = 0
        self.good_size = self._sink.pos
        return True

    def flush(self) -> bool:
        """Close the open chunk; True if one was written."""
        return self._close_chunk()

    def finish(self) -> None:
        """Write the last chunk and the summary, then close the file."""
        try:
            self._close_chunk()
            self._sink.write(self._record(DataEnd(0)))
            summary_start = self._sink.pos
            stats = Statistics(
                message_count=self._messages, schema_count=len(self._schema_records),
                channel_count=len(self._channel_records), attachment_count=0,
                metadata_count=0, chunk_count=len(self._chunk_indexes),
                message_start_time=self._times[0] or 0, message_end_time=self._times[1] or 0,
                channel_message_counts=defaultdict(int, self._counts))
            groups = [(Opcode.SCHEMA, self._schema_records),
                      (Opcode.CHANNEL, self._channel_records), (Opcode.STATISTICS, [stats]),
                      (Opcode.CHUNK_INDEX, self._chunk_indexes),
                      (Opcode.ATTACHMENT_INDEX, []), (Opcode.METADATA_INDEX, [])]
            summary = bytearray()
            offsets = []
            for opcode, records in groups:
                body = self._record(*records)
                offsets.append(SummaryOffset(group_opcode=opcode,
                                             group_start=summary_start + len(summary),
                                             group_length=len(body)))
                summary += body
            offset_start = summary_start + len(summary)
            summary += self._record(*offsets)
            crc = zlib.crc32(struct.pack('<BQQQ', Opcode.FOOTER, 20, summary_start,
                                         offset_start), zlib.crc32(summary))
            self._sink.write(bytes(summary) + self._record(Footer(
                summary_start=summary_start, summary_offset_start=offset_start,
                summary_crc=crc)) + MCAP0_MAGIC)
        finally:
            self._sink.close()

    def abandon(self) -> None:
        """After a write error: cut the file after its last complete chunk, close it."""
        try:
            os.truncate(self._sink.fd if self._sink.fd >= 0 else self.path, self.good_size)
        except OSError:
            pass
        self._sink.close()


class SqliteStorageWriter:
    """
    sqlite3 storage file with the rosbag2 schema (standard library ``sqlite3``).

    Written in write-ahead-log mode with ``synchronous=NORMAL`` (rosbag2's resilient preset):
    a killed writer leaves every committed transaction readable. :meth:`flush` commits. The
    file is switched back to the rollback journal when it is finished, so a finished bag is one
    plain ``.db3`` file.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise StorageError(f'{self.path}: exists')
        self._db = sqlite3.connect(str(self.path), isolation_level=None,
                                   check_same_thread=False)
        try:
            self._db.execute('PRAGMA journal_mode=WAL')
            self._db.execute('PRAGMA synchronous=NORMAL')
            for ddl in _SQLITE_DDL:
                self._db.execute(ddl)
            self._db.execute('INSERT INTO schema(schema_version, ros_distro) VALUES (4, ?)',
                             ('jazzy',))
            self._db.execute('BEGIN')
        except sqlite3.Error:
            self._db.close()
            raise
        self._insert = self._db.cursor().execute
        self._next_id = 1
        self._types: set[str] = set()

    def add_topic(self, t: TopicRecord) -> int:
        """Insert the topic (and its type's definition once); returns the topic id."""
        cid = self._next_id
        self._next_id += 1
        self._db.execute('INSERT INTO topics (id, name, type, serialization_format, '
                         'offered_qos_profiles, type_description_hash) VALUES (?,?,?,?,?,?)',
                         (cid, t.topic, t.msgtype, 'cdr', t.qos, t.type_hash))
        if t.msgtype not in self._types:
            self._types.add(t.msgtype)
            self._db.execute('INSERT INTO message_definitions (topic_type, encoding, '
                             'encoded_message_definition, type_description_hash) '
                             'VALUES (?,?,?,?)', (t.msgtype, t.msgdef_format or 'ros2msg',
                                                  t.msgdef, t.type_hash))
        return cid

    def write(self, cid: int, ts: int, raw) -> bool:
        """Insert one message (durable at the next :meth:`flush`)."""
        self._insert('INSERT INTO messages (topic_id, timestamp, data) VALUES (?,?,?)',
                     (cid, ts, raw))
        return False

    def flush(self) -> bool:
        """Commit the open transaction; True (everything written so far is durable)."""
        self._db.execute('COMMIT')
        self._db.execute('BEGIN')
        return True

    def finish(self) -> None:
        """Commit, fold the write-ahead log into the file, close."""
        try:
            self._db.execute('COMMIT')
            self._db.execute('PRAGMA journal_mode=DELETE')
        finally:
            self._db.close()

    def abandon(self) -> None:
        """After a write error: drop the open transaction and close (committed data stays)."""
        try:
            if self._db.in_transaction:
                self._db.execute('ROLLBACK')
        except sqlite3.Error:
            pass
        try:
            self._db.close()
        except sqlite3.Error:
            pass


def open_storage_writer(path: Path, storage: str, **options):
    """Create a storage file of kind ``storage`` ('mcap' or 'sqlite3')."""
    if storage == 'mcap':
        return McapStorageWriter(path, **options)
    if storage == 'sqlite3':
        return SqliteStorageWriter(path)
    raise StorageError(f'{path}: unknown storage {storage!r} (expected mcap or sqlite3)')


# ---------------------------------------------------------------------------------------------
# raw message batches


@dataclass
class RawBatch:
    """
    Raw CDR messages of one topic: one byte buffer, message ``starts`` and ``lengths`` in it.

    ``ts`` are the bag (receive) timestamps [ns]; messages are in storage order. The buffer
    may be the whole mapped storage file (uncompressed MCAP, read in place): ``starts`` are
    then file offsets and nothing is copied until the messages are decoded.
    """

    ts: np.ndarray
    buf: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)

    def item(self, i: int) -> bytes:
        """Bytes of message ``i``."""
        a = int(self.starts[i])
        return self.buf[a:a + int(self.lengths[i])].tobytes()

    @staticmethod
    def from_list(ts: Iterable[int], data: list) -> RawBatch:
        """Batch from a list of byte strings."""
        lengths = np.fromiter(map(len, data), np.int64, len(data))
        starts = np.zeros(len(data), np.int64)
        if len(data) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        buf = np.frombuffer(b''.join(data), np.uint8) if data else np.zeros(0, np.uint8)
        return RawBatch(np.asarray(list(ts) if not isinstance(ts, np.ndarray) else ts,
                                   np.int64), buf, starts, lengths)

    def compact(self) -> RawBatch:
        """Return the same messages packed one after the other in a buffer of their own."""
        lengths = self.lengths.astype(np.int64, copy=False)
        starts = np.zeros(len(lengths), np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        total = int(lengths.sum()) if len(lengths) else 0
        if total == self.buf.size and (self.starts == starts).all():
            return self
        first = int(lengths[0]) if len(lengths) else 0
        if first > 0 and (lengths == first).all():
            buf = gather_rows(self.buf, self.starts, first).reshape(-1)
        else:
            src = self.buf
            buf = np.frombuffer(b''.join(src[a:a + n].tobytes() for a, n in
                                         zip(self.starts.tolist(), lengths.tolist())),
                                np.uint8) if total else np.zeros(0, np.uint8)
        return RawBatch(self.ts, buf, starts, lengths)

    @staticmethod
    def concat(parts: list[RawBatch]) -> RawBatch:
        """One batch of several (their messages packed into one new buffer)."""
        if not parts:
            return RawBatch(np.zeros(0, np.int64), np.zeros(0, np.uint8),
                            np.zeros(0, np.int64), np.zeros(0, np.int64))
        if len(parts) == 1:
            return parts[0]
        parts = [p.compact() for p in parts]
        offsets = np.cumsum([0] + [p.buf.size for p in parts[:-1]])
        return RawBatch(np.concatenate([p.ts for p in parts]),
                        np.concatenate([p.buf for p in parts]),
                        np.concatenate([p.starts + o for p, o in zip(parts, offsets)]),
                        np.concatenate([p.lengths for p in parts]))

    def order_by_time(self) -> RawBatch:
        """Return the same messages sorted by timestamp (stable)."""
        if self.ts.size < 2 or not (np.diff(self.ts) < 0).any():
            return self
        order = np.argsort(self.ts, kind='stable')
        return RawBatch(self.ts[order], self.buf, self.starts[order], self.lengths[order])


def _windows(payload, width: int) -> np.ndarray:
    """Read-only (len - width + 1, width) view: row k is ``payload[k:k + width]``."""
    return np.ndarray(shape=(max(len(payload) - width + 1, 0), width), dtype=np.uint8,
                      buffer=payload, strides=(1, 1))


def gather_rows(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """
    Copy ``buf[s:s + width]`` for every ``s`` in ``starts`` into a new (n, width) uint8 array.

    One take of ``width``-byte void items from a sliding-window view of ``buf`` (a memcpy per
    row; indexing a (len, width) uint8 window view costs about 1.5 times as much).
    """
    n = len(starts)
    if width <= 0 or n == 0:
        return np.zeros((n, max(width, 0)), np.uint8)
    size = len(buf) - width + 1
    if size <= 0:
        raise IndexError(f'rows of {width} bytes do not fit a buffer of {len(buf)} bytes')
    items = np.ndarray(shape=(size,), dtype=np.dtype((np.void, width)), buffer=buf,
                       strides=(1,))
    return items[starts].view(np.uint8).reshape(n, width)


def gather_numbers(buf: np.ndarray, at: np.ndarray, dtype: str = '<u8',
                   skip: int = 0) -> np.ndarray:
    """Read a (possibly unaligned) ``dtype`` number at each offset ``at + skip`` of ``buf``."""
    dt = np.dtype(dtype)
    size = max(len(buf) - skip - dt.itemsize + 1, 0)
    return np.ndarray(shape=(size,), dtype=dt, buffer=buf, offset=skip if size else 0,
                      strides=(1,))[at]


class _Collector:
    """
    Messages of one topic gathered chunk by chunk.

    Chunks read in place (uncompressed, in the mapped file) only contribute message offsets:
    the batch refers to the whole file buffer (no copy). Messages of other chunks are copied:
    those of one length in a chunk as rows of a sliding-window view of the chunk (one C-level
    copy per message), other lengths sliced.
    """

    def __init__(self, source=None) -> None:
        self.ts: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.pieces: list = []
        self.source = source               # whole-file uint8 array for messages read in place
        self.at: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []

    def add_at(self, base: int, end: int, ts: np.ndarray, records: np.ndarray,
               _unused=None) -> None:
        """Message records at file offsets ``base + records`` (chunk data ends at ``end``)."""
        self.ts.append(ts)
        self.at.append(records + base)
        self.ends.append((len(records), end))

    def add(self, payload, ts: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
        self.ts.append(ts)
        self.lengths.append(lengths)
        first = int(lengths[0])
        if first > 0 and (lengths == first).all():
            self.pieces.append(gather_rows(np.frombuffer(payload, np.uint8), starts,
                                           first).reshape(-1))
        else:
            ends = (starts + lengths).tolist()
            self.pieces.append(np.frombuffer(b''.join(
                map(payload.__getitem__, map(slice, starts.tolist(), ends))), np.uint8))

    def _lengths_at(self) -> tuple[np.ndarray, np.ndarray]:
        """Check the records read in place; return their payload offsets and lengths."""
        records = np.concatenate(self.at) if len(self.at) > 1 else self.at[0]
        src = self.source
        if records.size and int(records.max()) + _MSG_HEADER > len(src):
            raise StorageError('message index points outside the file')
        lengths = gather_numbers(src, records, skip=1).view(np.int64)     # record lengths
        if (src[records] != 0x05).any() or ((lengths < 22) | (lengths > len(src))).any():
            raise StorageError('message index does not point at message records')
        lengths -= 22
        records += _MSG_HEADER
        counts = np.array([c for c, _ in self.ends], np.int64)
        firsts = np.zeros(len(counts), np.int64)
        np.cumsum(counts[:-1], out=firsts[1:])
        stops = np.maximum.reduceat(records + lengths, firsts)       # per chunk
        if (stops > np.array([e for _, e in self.ends], np.int64)).any():
            raise StorageError('message record exceeds its chunk')
        return records, lengths

    def batch(self) -> RawBatch:
        if not self.ts:
            return RawBatch.concat([])
        ts = np.concatenate(self.ts) if len(self.ts) > 1 else self.ts[0]
        ts = ts.astype(np.int64, copy=False)
        if self.at:                     # messages stay in the mapped file: no copy
            at, lengths = self._lengths_at()
            return RawBatch(ts, self.source, at, lengths)
        lengths = np.concatenate(self.lengths).astype(np.int64, copy=False)
        starts = np.zeros(len(lengths), np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        buf = self.pieces[0] if len(self.pieces) == 1 else np.concatenate(self.pieces)
        return RawBatch(ts, buf, starts, lengths)


# ---------------------------------------------------------------------------------------------
# MCAP reading

_CHUNK_HEAD = struct.Struct('<QQQI')            # start, end, uncompressed size, crc


def _decompress(data, compression: str, size: int, crc: int, check: bool):
    """Uncompressed records of a chunk; damage raises :class:`CorruptDataError`."""
    try:
        if compression == '':
            out = data
        elif compression == 'zstd':
            import zstandard
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
        elif compression == 'lz4':
            import lz4.frame
            out = lz4.frame.decompress(data)
        else:
            raise StorageError(f'unsupported MCAP chunk compression {compression!r}')
    except StorageError:
        raise
    except Exception as exc:  # noqa: BLE001 - decompressor errors have no common base
        raise CorruptDataError(f'the compressed data of the chunk are damaged ({compression}: '
                               f'{exc})') from None
    if len(out) != size:
        raise CorruptDataError(f'chunk decompressed to {len(out)} bytes, expected {size}')
    if check and crc and zlib.crc32(out) != crc:
        raise CorruptDataError('chunk CRC mismatch (the data differ from what was written)')
    return out


def _mcap_string(buf, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from('<I', buf, pos)
    return bytes(buf[pos + 4:pos + 4 + n]).decode('utf-8'), pos + 4 + n


def _parse_schema(body) -> tuple[int, str, str, bytes]:
    (sid,) = struct.unpack_from('<H', body, 0)
    name, pos = _mcap_string(body, 2)
    encoding, pos = _mcap_string(body, pos)
    (n,) = struct.unpack_from('<I', body, pos)
    return sid, name, encoding, bytes(body[pos + 4:pos + 4 + n])


def _parse_channel(body) -> tuple[int, int, str, str, dict]:
    cid, sid = struct.unpack_from('<HH', body, 0)
    topic, pos = _mcap_string(body, 4)
    encoding, pos = _mcap_string(body, pos)
    (n,) = struct.unpack_from('<I', body, pos)
    pos += 4
    end = pos + n
    meta = {}
    while pos < end:
        key, pos = _mcap_string(body, pos)
        value, pos = _mcap_string(body, pos)
        meta[key] = value
    return cid, sid, topic, encoding, meta


@dataclass
class _Chunk:
    """A decoded chunk: its payload and, per channel, message times / starts / lengths."""

    payload: bytes
    index: dict = field(default_factory=dict)
    base: int | None = None     # file offset of an uncompressed payload (read in place)


def _walk_chunk(payload: bytes, schemas: dict, channels: dict) -> dict:
    """Parse the records of one decompressed chunk; returns the per-channel message index."""
    unpack_len = struct.Struct('<Q').unpack_from
    unpack_msg = struct.Struct('<HIQ').unpack_from
    per: dict[int, tuple[list, list, list]] = {}
    pos, end = 0, len(payload)
    while pos < end:
        if pos + 9 > end:
            raise StorageError('truncated record in chunk')
        op = payload[pos]
        (size,) = unpack_len(payload, pos + 1)
        if pos + 9 + size > end:
            raise StorageError('record exceeds its chunk')
        if op == 0x05:
            if size < 22:
                raise StorageError(f'invalid message record length {size}')
            cid, _, log_time = unpack_msg(payload, pos + 9)
            lists = per.get(cid)
            if lists is None:
                lists = per[cid] = ([], [], [])
            lists[0].append(log_time)
            lists[1].append(pos + _MSG_HEADER)
            lists[2].append(size - 22)
        elif op == 0x03:
            sid, name, encoding, data = _parse_schema(payload[pos + 9:pos + 9 + size])
            schemas[sid] = (name, encoding, data)
        elif op == 0x04:
            info = _parse_channel(payload[pos + 9:pos + 9 + size])
            channels[info[0]] = info
        pos += 9 + size
    return {cid: (np.array(a, np.int64), np.array(b, np.int64), np.array(c, np.int64))
            for cid, (a, b, c) in per.items()}


def _topics_from(schemas: dict, channels: dict, counts: dict) -> list[TopicRecord]:
    out = []
    for cid in sorted(channels):
        _, sid, topic, encoding, meta = channels[cid]
        name, fmt, data = schemas.get(sid, ('', '', b''))
        out.append(TopicRecord(cid, topic, name, fmt if fmt in ('ros2msg', 'ros2idl') else '',
                               data.decode('utf-8', 'replace'), meta.get('topic_type_hash', ''),
                               meta.get('offered_qos_profiles', ''), int(counts.get(cid, 0))))
    return out


_FOOTER = struct.Struct('<BQQQI')               # opcode, length, summary start, offset, crc
_FOOTER_SIZE = _FOOTER.size                     # 29 bytes, then the closing magic
_DATA_END = 0x0F


def _stop_in_words(view, at: int, size: int, exc: BaseException) -> str:
    """Say in words why sequential reading stopped at byte ``at`` (not the parser's text)."""
    if at >= size:
        return (f'the file ends at byte {at}, right after a complete record (it was cut at a '
                'record boundary)')
    if at + 9 > size:
        return f'the file ends inside a record header at byte {at} (it was cut short)'
    (length,) = struct.unpack_from('<Q', view, at + 1)
    if at + 9 + length > size:
        return (f'the record at byte {at} claims more bytes than the file has left '
                f'({size - at - 9} of them): the file was cut short or this record is damaged')
    if isinstance(exc, (EOFError,)):
        return f'the file ends inside the record at byte {at} (it was cut short)'
    return f'the record at byte {at} is unreadable ({exc.__class__.__name__})'


class McapStorageReader:
    """
    Read an MCAP storage file, checking its CRCs.

    With a summary (a finished file; ``mcap``'s ``get_summary()``) the chunk indexes locate
    the chunks and their message indexes, which are read directly as numpy arrays. A file
    whose footer is missing or invalid (writer killed, disk full, a file cut short) is read
    sequentially with ``mcap``'s ``StreamReader`` up to its last complete chunk:
    ``recovered`` is True, ``recovered_reason`` says why and ``end_ns`` is where the data
    ends. A complete file that lacks part of its summary (no summary section, no statistics,
    no chunk indexes) is read sequentially too, but it is not "recovered": ``notes`` say what
    the file lacks.

    Checksums: every chunk's CRC (of its uncompressed records) is checked when the chunk is
    read, uncompressed chunks read in place included; the data-section CRC (``DataEnd``) and
    the summary CRC (footer) when they are not zero. A mismatch raises
    :class:`CorruptDataError` naming the chunk and the time range of its messages; with
    ``skip_corrupt`` the chunk is left out and listed in ``corrupt`` instead.
    """

    def __init__(self, path: Path, *, skip_corrupt: bool = False) -> None:
        self.path = Path(path)
        self.skip_corrupt = bool(skip_corrupt)
        self.recovered = False
        self.recovered_reason = ''
        self.notes: list[str] = []
        self.corrupt: list[CorruptRegion] = []
        self.crc_checked = 0                            # chunks whose CRC was checked
        self.dropped_bytes = 0
        self.topics: list[TopicRecord] = []
        self.start_ns = 0
        self.end_ns = 0
        self.count = 0
        self._chunk_indexes: list = []
        self._chunks: list[_Chunk] | None = None       # sequentially read files: decoded at open
        self._loose: dict[int, tuple[list, list]] = {}  # messages outside chunks
        self._data_end = None                           # (offset, crc) of DataEnd
        self._data_ok: bool | None = None               # data-section CRC checked (True: ok)
        self._bad_chunks: set[int] = set()              # chunks a data-section CRC blamed
        self._lost_chunks: dict[int, object] = {}       # damaged chunks (index), by number
        self._mmap = None
        self._view = memoryview(b'')
        try:
            self._fh = open(self.path, 'rb')
        except OSError as exc:
            raise StorageError(f'{self.path}: cannot open ({exc.strerror or exc})') from None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the file."""
        view, self._view = self._view, memoryview(b'')
        try:
            view.release()
        except BufferError:              # arrays still refer to it: the GC releases it later
            pass
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:          # arrays still refer to it: the GC unmaps it later
                pass
        self._fh.close()

    def _open(self) -> None:
        head = self._fh.read(8)
        if head != _MCAP_MAGIC:
            raise StorageError(f'{self.path}: not an MCAP file (bad magic)')
        size = os.fstat(self._fh.fileno()).st_size
        self._mmap = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self._view = memoryview(self._mmap) if self._mmap is not None else memoryview(b'')
        found = self._summary_from_mcap()
        if found is None:
            return
        schemas, channels, st, chunk_indexes = found
        self.topics = _topics_from(schemas, channels, st.channel_message_counts)
        self.count = int(st.message_count)
        self.start_ns = int(st.message_start_time) if self.count else 0
        self.end_ns = int(st.message_end_time) if self.count else 0
        self._chunk_indexes = sorted(chunk_indexes, key=lambda c: c.chunk_start_offset)

    def _footer(self) -> tuple[int, int, int] | None:
        """(summary start, summary offset start, summary CRC) of a valid footer, else None."""
        view = self._view
        size = len(view)
        at = size - 8 - _FOOTER_SIZE
        if at < 8 or bytes(view[size - 8:]) != _MCAP_MAGIC:
            return None
        op, length, start, offset_start, crc = _FOOTER.unpack_from(view, at)
        if op != 0x02 or length != 20 or start > at or offset_start > at:
            return None
        return start, offset_start, crc

    def _find_data_end(self, end: int) -> None:
        """Locate the DataEnd record that ends at ``end`` (summary start or footer)."""
        at = end - 13
        if at >= 8 and self._view[at] == _DATA_END:
            (length, crc) = struct.unpack_from('<QI', self._view, at + 1)
            if length == 4:
                self._data_end = (at, crc)

    def _summary_from_mcap(self):
        """Read the summary with the ``mcap`` library; None after reading the file in full."""
        footer = self._footer()
        if footer is None:
            self._scan('the file has no valid footer: its writer did not finish it (killed, '
                       'or stopped by a full disk or a file-size limit)', finished=False)
            return None
        start, _, summary_crc = footer
        footer_at = len(self._view) - 8 - _FOOTER_SIZE
        self._find_data_end(start if start else footer_at)
        if start == 0:
            self._scan('the file has no summary section', finished=True)
            return None
        if summary_crc and zlib.crc32(self._view[start:footer_at + 1 + 8 + 16]) != summary_crc:
            self._scan('its summary section fails its CRC (not used)', finished=True)
            return None
        self._fh.seek(0)
        try:
            summary = make_reader(self._fh).get_summary()
        except (McapError, struct.error, ValueError, EOFError, OSError) as exc:
            self._scan(f'its summary section is unreadable ({exc.__class__.__name__})',
                       finished=True)
            return None
        lacks = []
        if summary is None:
            lacks.append('summary section')
        else:
            if summary.statistics is None:
                lacks.append('statistics record')
            if not summary.chunk_indexes and (summary.statistics is None
                                              or summary.statistics.message_count):
                lacks.append('chunk index')
        if lacks:
            self._scan('its summary has no ' + ' and no '.join(lacks), finished=True)
            return None
        schemas = {sid: (s.name, s.encoding, bytes(s.data)) for sid, s in
                   summary.schemas.items()}
        channels = {cid: (c.id, c.schema_id, c.topic, c.message_encoding, dict(c.metadata))
                    for cid, c in summary.channels.items()}
        return schemas, channels, summary.statistics, summary.chunk_indexes

    def _corrupt(self, region: CorruptRegion) -> None:
        """Raise for a record that failed its checksum, or (``skip_corrupt``) note it."""
        if not self.skip_corrupt:
            raise CorruptDataError(region.describe() + ' (--skip-corrupt analyses the rest)')
        if not any(c.offset == region.offset and c.what == region.what for c in self.corrupt):
            self.corrupt.append(region)

    @property
    def lost(self) -> dict[int, int]:
        """
        Messages per channel id in the chunks left out as damaged (``skip_corrupt``).

        Counted from the chunks' message indexes, which lie outside the checksummed chunk
        (a file read sequentially never counted them in the first place: empty).
        """
        out: dict[int, int] = {}
        for ci in self._lost_chunks.values():
            if not ci.message_index_offsets:
                continue
            first = min(ci.message_index_offsets.values())
            block = self._view[first:first + ci.message_index_length]
            for cid, at in ci.message_index_offsets.items():
                off = at - first
                if 0 <= off and off + 15 <= len(block) and block[off] == 0x07:
                    (nbytes,) = struct.unpack_from('<I', block, off + 11)
                    out[cid] = out.get(cid, 0) + nbytes // 16
        return out

    def _scan(self, why: str, finished: bool) -> None:
        """
        Read the file sequentially.

        ``finished``: the file has a valid footer (complete); a record that cannot be read is
        then damage, not the end of an unfinished file.
        """
        self._fh.seek(0)
        schemas: dict = {}
        channels: dict = {}
        chunks: list[_Chunk] = []
        stop = None
        reader = StreamReader(self._fh, emit_chunks=True)
        complete = 8
        k = 0
        try:
            for rec in reader.records:
                if isinstance(rec, Chunk):
                    k += 1
                    try:
                        payload = _decompress(rec.data, rec.compression,
                                              rec.uncompressed_size, rec.uncompressed_crc, True)
                    except CorruptDataError as exc:
                        self._corrupt(CorruptRegion(
                            self.path, f'chunk {k}', complete, rec.message_start_time,
                            rec.message_end_time, str(exc)))
                        complete = self._fh.tell()
                        continue
                    self.crc_checked += bool(rec.uncompressed_crc)
                    index = _walk_chunk(payload, schemas, channels)
                    chunks.append(_Chunk(payload, index))
                elif isinstance(rec, Schema):
                    schemas[rec.id] = (rec.name, rec.encoding, bytes(rec.data))
                elif isinstance(rec, Channel):
                    channels[rec.id] = (rec.id, rec.schema_id, rec.topic, rec.message_encoding,
                                        dict(rec.metadata))
                elif isinstance(rec, Message):
                    ts, data = self._loose.setdefault(rec.channel_id, ([], []))
                    ts.append(rec.log_time)
                    data.append(bytes(rec.data))
                elif isinstance(rec, DataEnd):
                    if rec.data_section_crc and \
                            zlib.crc32(self._view[:complete]) != rec.data_section_crc:
                        self._corrupt(CorruptRegion(
                            self.path, 'data section', 0, None, None,
                            'data-section CRC mismatch (the data differ from what was '
                            'written)'))
                    break
                complete = self._fh.tell()
        except CorruptDataError:
            raise
        except (McapError, StorageError, struct.error, ValueError, EOFError, OSError,
                MemoryError, UnicodeDecodeError, zlib.error) as exc:
            stop = exc
        except Exception as exc:  # noqa: BLE001 - decompressor errors have no common base
            stop = exc
        size = len(self._view)
        self._chunks = chunks
        counts: dict[int, int] = {}
        starts, ends = [], []
        for ch in chunks:
            for cid, (ts, _, _) in ch.index.items():
                counts[cid] = counts.get(cid, 0) + len(ts)
                if len(ts):
                    starts.append(int(ts.min()))
                    ends.append(int(ts.max()))
        for cid, (ts, _) in self._loose.items():
            counts[cid] = counts.get(cid, 0) + len(ts)
            if ts:
                starts.append(min(ts))
                ends.append(max(ts))
        self.topics = _topics_from(schemas, channels, counts)
        self.count = sum(counts.values())
        self.start_ns = min(starts) if starts else 0
        self.end_ns = max(ends) if ends else 0
        loose = sum(len(v[0]) for v in self._loose.values())
        held = (f'{len(chunks)} chunks' + (f', {loose} messages outside chunks' if loose else '')
                + f', {self.count} messages')
        if stop is not None and finished:
            words = _stop_in_words(self._view, complete, size, stop)
            self._corrupt(CorruptRegion(self.path, 'record', complete, None, None,
                                        f'{words}; the {size - complete} bytes from there on '
                                        'are not read'))
        if stop is not None and not finished:
            self.recovered = True
            self.dropped_bytes = max(0, size - complete)
            words = _stop_in_words(self._view, complete, size, stop)
            ignored = (f'so its last {self.dropped_bytes} bytes are ignored'
                       if self.dropped_bytes else 'so no byte of it is ignored')
            self.recovered_reason = (f'{why}; read up to its last complete chunk ({held}); '
                                     f'{words}, {ignored}')
        elif not finished:
            self.recovered = True
            self.recovered_reason = f'{why}; read sequentially ({held})'
        else:
            self.notes.append(f'{self.path.name}: complete file, but {why}: read sequentially '
                              f'({held})')
        if not self.topics and stop is not None and not chunks:
            raise StorageError(f'{self.path}: no complete MCAP chunk or channel '
                               f'({_stop_in_words(self._view, complete, size, stop)})')

    # -- checksums --------------------------------------------------------------------------
    def _region_of(self, k: int, ci, reason: str) -> CorruptRegion:
        self._lost_chunks[k] = ci
        return CorruptRegion(self.path, f'chunk {k + 1} of {len(self._chunk_indexes)}',
                             int(ci.chunk_start_offset), int(ci.message_start_time),
                             int(ci.message_end_time), reason)

    def _check_data_section(self) -> None:
        """Check the data-section CRC once (if the file has one); localise a mismatch."""
        if self._data_ok is not None or self._data_end is None or not self._data_end[1]:
            return
        at, crc = self._data_end
        self._data_ok = zlib.crc32(self._view[:at]) == crc
        if self._data_ok:
            return
        bad = [k for k, ci in enumerate(self._chunk_indexes)
               if self._chunk_crc_fails(ci)]
        if not bad:
            raise CorruptDataError(
                f'{self.path}: data-section CRC mismatch outside every chunk (schemas, '
                'channels or message indexes are damaged); the file cannot be trusted')
        self._bad_chunks = set(bad)

    def _chunk_crc_fails(self, ci) -> bool:
        raw = self._view[ci.chunk_start_offset:ci.chunk_start_offset + ci.chunk_length]
        if len(raw) < 9 + _CHUNK_HEAD.size + 4 or raw[0] != 0x06:
            return True
        _, _, usize, crc = _CHUNK_HEAD.unpack_from(raw, 9)
        comp, pos = _mcap_string(raw, 9 + _CHUNK_HEAD.size)
        (n,) = struct.unpack_from('<Q', raw, pos)
        try:
            _decompress(raw[pos + 8:pos + 8 + n], comp, usize, crc, True)
        except CorruptDataError:
            return True
        except Exception:  # noqa: BLE001 - undecompressable is damaged too
            return True
        return False

    def verify(self) -> int:
        """
        Check every CRC of the file (chunks, data section); return the chunks checked.

        Raises :class:`CorruptDataError` on the first mismatch (``skip_corrupt``: lists them
        in ``corrupt``).
        """
        if self._chunks is not None:             # read sequentially at open: all checked
            return self.crc_checked
        self._check_data_section()
        for k, ci in enumerate(self._chunk_indexes):
            if self._chunk_crc_fails(ci) and not any(
                    c.offset == ci.chunk_start_offset for c in self.corrupt):
                self._corrupt(self._region_of(k, ci, 'chunk CRC mismatch (the data differ '
                                                     'from what was written)'))
        return len(self._chunk_indexes)

    # -- data -------------------------------------------------------------------------------
    def _read_chunk(self, k: int, ci, wanted: set[int], in_place: bool = False
                    ) -> _Chunk | None:
        """
        Read one chunk of a finished file via its chunk index and message indexes.

        ``in_place`` (uncompressed chunk in the mapped file): the index holds the record
        offsets and record lengths are read later, for all chunks at once. The chunk's CRC is
        checked (an uncompressed chunk in place: unless the data-section CRC covered it).
        """
        cids = [c for c in wanted if c in ci.message_index_offsets] \
            if ci.message_index_offsets else None
        if cids is not None and not cids:
            return None
        raw = self._view[ci.chunk_start_offset:ci.chunk_start_offset + ci.chunk_length]
        if len(raw) != ci.chunk_length or raw[0] != 0x06:
            raise StorageError(f'truncated or misplaced chunk at offset {ci.chunk_start_offset}')
        _, _, usize, crc = _CHUNK_HEAD.unpack_from(raw, 9)
        comp, pos = _mcap_string(raw, 9 + _CHUNK_HEAD.size)
        (n,) = struct.unpack_from('<Q', raw, pos)
        data = raw[pos + 8:pos + 8 + n]
        if len(data) != n:
            raise StorageError(f'truncated chunk at offset {ci.chunk_start_offset}')
        if k in self._bad_chunks:
            self._corrupt(self._region_of(k, ci, 'chunk CRC mismatch (the data differ from '
                                                 'what was written)'))
            return None
        covered = self._data_ok is True and comp == ''
        try:
            payload = _decompress(data, comp, usize, crc, not covered)
        except CorruptDataError as exc:
            self._corrupt(self._region_of(k, ci, str(exc)))
            return None
        if crc and not covered:
            self.crc_checked += 1
        arr = np.frombuffer(payload, np.uint8)
        if cids is None:                            # no message indexes: walk the records
            payload = bytes(payload)
            return _Chunk(payload, _walk_chunk(payload, {}, {}))
        first = min(ci.message_index_offsets.values())
        block = self._view[first:first + ci.message_index_length]
        index = {}
        for cid in cids:
            off = ci.message_index_offsets[cid] - first
            if off < 0 or off + 15 > len(block) or block[off] != 0x07:
                raise StorageError(f'bad message index record at offset {off + first}')
            (nbytes,) = struct.unpack_from('<I', block, off + 11)
            if off + 15 + nbytes > len(block):
                raise StorageError(f'truncated message index at offset {off + first}')
            entries = np.frombuffer(block, '<u8', nbytes // 8, off + 15)
            if entries.size * 8 != nbytes:
                raise StorageError(f'truncated message index at offset {off + first}')
            entries = entries.reshape(-1, 2)
            ts = entries[:, 0].astype(np.int64)
            offsets = entries[:, 1].astype(np.int64)
            if offsets.size and offsets.max() + _MSG_HEADER > arr.size:
                raise StorageError('message index points outside its chunk')
            if in_place and comp == '':
                index[cid] = (ts, offsets, None)
                continue
            heads = _windows(payload, 9)[offsets]
            sizes = np.ascontiguousarray(heads[:, 1:]).view('<u8')[:, 0]
            if (heads[:, 0] != 0x05).any() or (sizes < 22).any():
                raise StorageError('message index does not point at message records')
            lengths = sizes.astype(np.int64) - 22
            if offsets.size and (offsets + 9 + lengths + 22).max() > arr.size:
                raise StorageError('message record exceeds its chunk')
            index[cid] = (ts, offsets + _MSG_HEADER, lengths)
        base = ci.chunk_start_offset + pos + 8 if comp == '' else None
        return _Chunk(payload, index, base)

    def read(self, ids: Iterable[int], progress=None) -> dict[int, RawBatch]:
        """Raw messages of the channels ``ids`` (per channel in file order)."""
        wanted = set(ids)
        if self._chunks is None:
            self._check_data_section()
        in_place = self._chunks is None and all(ci.compression == ''
                                                for ci in self._chunk_indexes)
        whole = np.frombuffer(self._view, np.uint8) if in_place else None
        parts = {c: _Collector(whole) for c in wanted}
        chunks = self._chunks if self._chunks is not None else (
            self._read_chunk(k, ci, wanted, in_place)
            for k, ci in enumerate(self._chunk_indexes))
        for chunk in chunks:
            if chunk is None:
                continue
            done = 0
            for cid in wanted:
                item = chunk.index.get(cid)
                if item is not None and len(item[0]):
                    if in_place and chunk.base is not None:
                        parts[cid].add_at(chunk.base, chunk.base + len(chunk.payload), *item)
                    else:
                        parts[cid].add(chunk.payload, *item)
                    done += len(item[0])
            if progress is not None:
                progress(done)
        out = {}
        for cid, col in parts.items():
            loose = self._loose.get(cid)
            batch = col.batch()
            if loose:
                batch = RawBatch.concat([batch, RawBatch.from_list(*loose)])
            out[cid] = batch
        return out


# ---------------------------------------------------------------------------------------------
# sqlite3 reading


class SqliteStorageReader:
    """
    Read a rosbag2 sqlite3 file with the standard ``sqlite3`` module, never changing it.

    A finished file is opened read-only and immutable (works in read-only directories). A file
    with a write-ahead log beside it (its writer was killed) is copied with its log into a
    temporary directory and read from there, so that the committed transactions in the log are
    read too (``recovered``) while the bag, its ``-wal`` and ``-shm`` files stay exactly as
    they were (opening the original read-write would fold the log into it and delete the log;
    only ``manip-bag reindex`` does that). Per-topic counts always come from the data; sqlite3
    files carry no checksums.
    """

    def __init__(self, path: Path, counts: dict[str, int] | None = None) -> None:
        self.path = Path(path)
        self.recovered = False
        self.recovered_reason = ''
        self.notes: list[str] = []
        self.corrupt: list[CorruptRegion] = []
        self.crc_checked = 0
        self._tmp: str | None = None
        wal = self.path.with_name(self.path.name + '-wal')
        try:
            if wal.is_file() and wal.stat().st_size > 0:
                self.recovered = True
                self._tmp = tempfile.mkdtemp(prefix='manip_bag_')
                copy = Path(self._tmp) / self.path.name
                try:
                    shutil.copyfile(self.path, copy)
                    shutil.copyfile(wal, copy.with_name(copy.name + '-wal'))
                except OSError as exc:
                    self._cleanup()
                    raise StorageError(f'{self.path}: cannot copy the unfinished file and its '
                                       f'write-ahead log to read them ({exc.strerror or exc})'
                                       ) from None
                self._db = sqlite3.connect(f'file:{copy}?mode=rw', uri=True)
                self.recovered_reason = (f'unfinished sqlite3 file: read with its write-ahead '
                                         f'log {wal.name} (from a copy; the bag is not '
                                         'changed: manip-bag reindex folds the log in)')
            else:
                self._db = sqlite3.connect(f'file:{self.path}?immutable=1', uri=True)
        except sqlite3.Error as exc:
            self._cleanup()
            raise StorageError(f'{self.path}: cannot open ({exc})') from None
        try:
            self._open(counts)
        except sqlite3.Error as exc:
            self.close()
            raise StorageError(f'{self.path}: unreadable or corrupt sqlite3 bag ({exc})') \
                from None
        except BaseException:
            self.close()
            raise

    def _cleanup(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def close(self) -> None:
        """Close the database (and remove the temporary copy, if any)."""
        try:
            self._db.close()
        finally:
            self._cleanup()

    def verify(self) -> int:
        """sqlite3 files have no checksums: nothing to check (returns 0)."""
        return 0

    def _open(self, counts: dict[str, int] | None) -> None:
        db = self._db
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {'messages', 'topics'} <= tables:
            raise StorageError(f'{self.path}: not a rosbag2 sqlite3 file (no topics/messages '
                               'tables)')
        columns = {r[1] for r in db.execute('PRAGMA table_info(topics)')}
        defs: dict[str, tuple[str, str]] = {}
        if 'message_definitions' in tables:
            for name, enc, text in db.execute(
                    'SELECT topic_type, encoding, encoded_message_definition '
                    'FROM message_definitions ORDER BY id'):
                if enc in ('ros2msg', 'ros2idl') and name not in defs:
                    defs[name] = (enc, text)
        qos_col = 'offered_qos_profiles' if 'offered_qos_profiles' in columns else "''"
        hash_col = 'type_description_hash' if 'type_description_hash' in columns else "''"
        rows = list(db.execute(f'SELECT id, name, type, {qos_col}, {hash_col} FROM topics '
                               'ORDER BY id'))
        # counts from the data, never from metadata.yaml: one scan with a filtered count per
        # topic (half the CPU of GROUP BY, which sorts in a temporary B-tree)
        ids = [int(r[0]) for r in rows]
        try:
            counted = next(db.execute(
                'SELECT ' + ''.join(f'COUNT(*) FILTER (WHERE topic_id = {i}), ' for i in ids)
                + 'COUNT(*) FROM messages'))
            per = dict(zip(ids, counted[:-1]))
            orphans = counted[-1] - sum(counted[:-1])
        except sqlite3.OperationalError:         # SQLite < 3.30: no FILTER clause
            per = dict(db.execute('SELECT topic_id, COUNT(*) FROM messages GROUP BY topic_id'))
            orphans = sum(n for i, n in per.items() if i not in set(ids))
        by_id = {r[0]: per.get(r[0], 0) for r in rows}
        self.topics = [TopicRecord(cid, name, typ, *defs.get(typ, ('', '')), digest or '',
                                   qos or '', int(by_id.get(cid, 0)))
                       for cid, name, typ, qos, digest in rows]
        if counts is not None:
            for t in self.topics:
                listed = counts.get(t.topic)
                if listed is not None and listed != t.count:
                    self.notes.append(f'{t.topic}: metadata.yaml lists {listed} messages, the '
                                      f'file holds {t.count} (the counts of the file are used)')
        ((start, end),) = list(db.execute('SELECT MIN(timestamp), MAX(timestamp) '
                                          'FROM messages'))
        self.start_ns = int(start) if start is not None else 0
        self.end_ns = int(end) if end is not None else 0
        self.count = sum(t.count for t in self.topics) + orphans
        if orphans:
            self.notes.append(f'{self.path.name}: {orphans} messages of no listed topic')

    def read(self, ids: Iterable[int], progress=None) -> dict[int, RawBatch]:
        """Raw messages of the topics ``ids``: one table scan (rows of all topics interleave)."""
        ids = sorted(set(ids))
        acc: dict[int, tuple[list, list]] = {c: ([], []) for c in ids}
        if not ids:
            return {}
        get_id, get_ts, get_data = (operator.itemgetter(k) for k in range(3))
        try:
            cur = self._db.execute(
                'SELECT topic_id, timestamp, data FROM messages WHERE topic_id IN '
                f'({",".join("?" * len(ids))}) ORDER BY id', ids)
            while True:
                rows = cur.fetchmany(200_000)
                if not rows:
                    break
                n = len(rows)
                ts = np.fromiter(map(get_ts, rows), np.int64, n)
                data = list(map(get_data, rows))
                if len(ids) == 1:
                    acc[ids[0]][0].append(ts)
                    acc[ids[0]][1].extend(data)
                else:
                    tid = np.fromiter(map(get_id, rows), np.int64, n)
                    for cid in ids:
                        idx = np.flatnonzero(tid == cid)
                        if idx.size:
                            acc[cid][0].append(ts[idx])
                            acc[cid][1].extend(operator.itemgetter(*idx.tolist())(data)
                                               if idx.size > 1 else [data[int(idx[0])]])
                if progress is not None:
                    progress(n)
        except sqlite3.Error as exc:
            raise StorageError(f'{self.path}: corrupt bag data ({exc})') from None
        return {cid: RawBatch.from_list(np.concatenate(ts) if ts else np.zeros(0, np.int64),
                                        data)
                for cid, (ts, data) in acc.items()}


def open_storage_reader(path: Path, counts: dict[str, int] | None = None, *,
                        skip_corrupt: bool = False):
    """
    Reader for one storage file (kind from the suffix).

    ``counts`` (per topic, from ``metadata.yaml``) are compared with the file's own;
    ``skip_corrupt``: MCAP chunks failing their CRC are left out instead of raising.
    """
    kind = SUFFIXES.get(Path(path).suffix)
    if kind == 'mcap':
        return McapStorageReader(path, skip_corrupt=skip_corrupt)
    if kind == 'sqlite3':
        return SqliteStorageReader(path, counts)
    raise StorageError(f'{path}: not a rosbag2 storage file (.mcap or .db3)')


# ---------------------------------------------------------------------------------------------
# reindex


def _rewrite_mcap(reader: McapStorageReader, target: Path) -> None:
    """Write the messages ``reader`` recovered into a finished MCAP file ``target``."""
    tmp = target.with_name(target.name + '.reindex')
    if tmp.exists():
        tmp.unlink()
    out = McapStorageWriter(tmp)
    ok = False
    try:
        ids = {}
        for t in reader.topics:
            ids[t.id] = out.add_topic(t)
        batches = reader.read(list(ids))
        merged = []
        for cid, b in batches.items():
            merged += [(int(t), cid, i) for i, t in enumerate(b.ts.tolist())]
        merged.sort(key=lambda x: x[0])
        for t, cid, i in merged:
            out.write(ids[cid], t, batches[cid].item(i))
        out.finish()
        ok = True
    finally:
        if not ok:
            out.abandon()
            tmp.unlink(missing_ok=True)
    os.replace(tmp, target)


def parts_problem(parts: list[tuple[str, int, int, int, dict]]) -> str | None:
    """
    Tell why storage files cannot be the parts of one recording (None when they can be).

    ``parts``: per file ``(name, start_ns, end_ns, message_count, {topic: msgtype})``. The
    files of one split recording follow each other in time (a part starts at or after the
    end of the one before it) and each part registers every topic of the parts before it
    with the same type (a recorder opens a new part with all the topics it knows). Two
    recordings side by side in one folder break one of these.
    """
    # rosbag2 names the parts of a split recording NAME_0, NAME_1, ...
    named = [re.fullmatch(r'(.*)_(\d+)\.[a-z0-9]+', p[0]) for p in parts]
    if all(named) and len({m.group(1) for m in named}) > 1:
        return 'their names ' + ', '.join(p[0] for p in parts) + ' are of different recordings'
    used = sorted((p for p in parts if p[3]), key=lambda p: (p[1], p[2]))
    for a, b in zip(used, used[1:]):
        if b[1] < a[2]:
            return (f'{a[0]} ({a[1] / 1e9:.3f} .. {a[2] / 1e9:.3f} s) and {b[0]} '
                    f'({b[1] / 1e9:.3f} .. {b[2] / 1e9:.3f} s) overlap in time')
    for a, b in zip(used, used[1:]):
        for topic, msgtype in a[4].items():
            if topic not in b[4]:
                return f'{b[0]} lacks the topic {topic} of {a[0]}, which starts before it'
            if b[4][topic] != msgtype:
                return (f'{topic} is {msgtype} in {a[0]} but {b[4][topic]} in {b[0]}')
    return None


def reindex(bag_dir: str | Path, *, log=None) -> dict:
    """
    Rebuild ``metadata.yaml`` (version 8) of a bag directory from its storage files.

    Like ``ros2 bag reindex``: the storage files are read (an unfinished MCAP file up to its
    last complete chunk, a sqlite3 file with its write-ahead log) and the topics, counts and
    times they hold are written to ``metadata.yaml``. An unfinished MCAP file is rewritten as
    a finished one (same messages, with summary and indexes) so that every MCAP reader
    accepts it; an unfinished sqlite3 file gets its log folded in. Returns a dict with
    ``storage``, ``files``, ``message_count`` and ``repaired`` (file names).
    """
    bag_dir = Path(bag_dir)
    say = log or (lambda text: None)
    if not bag_dir.is_dir():
        raise StorageError(f'{bag_dir}: not a directory')
    files = sorted(p for p in bag_dir.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise StorageError(f'{bag_dir}: no .mcap or .db3 storage file to reindex')
    kinds = {SUFFIXES[p.suffix] for p in files}
    if len(kinds) != 1:
        raise StorageError(f'{bag_dir}: mixed storage files {[p.name for p in files]}')
    storage = kinds.pop()
    # nothing is changed before every file is known to be a part of one recording
    parts = []
    for path in files:
        reader = open_storage_reader(path)
        try:
            parts.append((path.name, reader.start_ns, reader.end_ns, reader.count,
                          {t.topic: t.msgtype for t in reader.topics}))
        finally:
            reader.close()
    if len(files) > 1:
        problem = parts_problem(parts)
        if problem is not None:
            raise StorageError(
                f'{bag_dir}: the storage files are not the parts of one recording ({problem}); '
                'nothing was changed: put each recording in a folder of its own and reindex '
                'that folder')
        say(f'joining {len(files)} files as the parts of one recording: '
            + ', '.join(f'{p[0]} ({p[3]} messages, {p[1] / 1e9:.3f} .. {p[2] / 1e9:.3f} s)'
                        for p in sorted(parts, key=lambda p: (p[1], p[2]))))
    topics: dict[str, TopicRecord] = {}
    entries = []
    repaired = []
    for path in files:
        reader = open_storage_reader(path)
        try:
            if storage == 'mcap' and reader.recovered:
                say(f'{path.name}: {reader.recovered_reason}; rewriting it as a finished file')
                _rewrite_mcap(reader, path)
                repaired.append(path.name)
            elif storage == 'sqlite3' and reader.recovered:
                reader.close()
                db = sqlite3.connect(str(path))
                try:
                    db.execute('PRAGMA journal_mode=DELETE')
                finally:
                    db.close()
                repaired.append(path.name)
                say(f'{path.name}: write-ahead log folded into the file')
                reader = open_storage_reader(path)
        finally:
            reader.close()
        reader = open_storage_reader(path)
        try:
            entries.append((path.name, reader.start_ns, reader.end_ns, reader.count))
            for t in reader.topics:
                have = topics.get(t.topic)
                if have is None:
                    topics[t.topic] = TopicRecord(len(topics) + 1, t.topic, t.msgtype,
                                                  t.msgdef_format, t.msgdef, t.type_hash,
                                                  t.qos, t.count)
                else:
                    have.count += t.count
        finally:
            reader.close()
    write_metadata(bag_dir, metadata_dict(storage, entries, topics.values()))
    return {'storage': storage, 'files': [e[0] for e in entries],
            'message_count': sum(e[3] for e in entries), 'repaired': repaired,
            'topics': {t.topic: t.count for t in topics.values()}}
