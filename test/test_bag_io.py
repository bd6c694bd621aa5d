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
Tests of manip_control.bag_io.

Writer (metadata v8, definitions, QoS, params), reader
(directories, bare files, trailing bytes, corrupt files, undecodable topics) and the fast
bulk decoders checked against the rosbags deserializer.
"""

from __future__ import annotations

from pathlib import Path
import shutil
import sqlite3

from manip_control.bag_io import BagError
from manip_control.bag_io import BagReader
from manip_control.bag_io import BagWriter
from manip_control.bag_io import DecodeError
from manip_control.bag_io import deserialize_tolerant
from manip_control.bag_io import make_qos
from manip_control.bag_io import read_params
from manip_control.bag_io import write_params
import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import Reader
from rosbags.rosbag2 import Writer
from rosbags.serde import SerdeError
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores
import yaml

TS = get_typestore(Stores.ROS2_JAZZY)
T = TS.types
JS, F64, JT = ('sensor_msgs/msg/JointState', 'std_msgs/msg/Float64MultiArray',
               'trajectory_msgs/msg/JointTrajectory')
STORAGES = ['mcap', 'sqlite3']
FIXTURE = (Path(__file__).resolve().parents[1] / '..' / 'shared' / 'fixtures' / 'real_bags'
           / 'iiwa_effort_humble')


def stamp(ns: int):
    return T['builtin_interfaces/msg/Time'](sec=ns // 10**9, nanosec=ns % 10**9)


def joint_state(ns, names, pos, vel=(), eff=(), frame=''):
    return T[JS](header=T['std_msgs/msg/Header'](stamp=stamp(ns), frame_id=frame),
                 name=list(names), position=np.array(pos, float),
                 velocity=np.array(vel, float), effort=np.array(eff, float))


def f64_array(data, dims=()):
    dim = [T['std_msgs/msg/MultiArrayDimension'](label=lab, size=sz, stride=st)
           for lab, sz, st in dims]
    return T[F64](layout=T['std_msgs/msg/MultiArrayLayout'](dim=dim, data_offset=0),
                  data=np.array(data, float))


def trajectory(ns, names, points):
    Point, Duration = T['trajectory_msgs/msg/JointTrajectoryPoint'], \
        T['builtin_interfaces/msg/Duration']
    pts = [Point(positions=np.array(p, float), velocities=np.array(v, float),
                 accelerations=np.array(a, float), effort=np.zeros(0),
                 time_from_start=Duration(sec=tfs // 10**9, nanosec=tfs % 10**9))
           for p, v, a, tfs in points]
    return T[JT](header=T['std_msgs/msg/Header'](stamp=stamp(ns), frame_id='map'),
                 joint_names=list(names), points=pts)


def ser(msg, typ, little_endian=True) -> bytes:
    return bytes(TS.serialize_cdr(msg, typ, little_endian=little_endian))


# Messages with exact, varied values (different name orders, empty arrays, multi-point).
STATES = [
    (1_000_000_000, joint_state(1_000_000_000, ['a', 'b'], [0.1, -0.2], [1.5, 2.5],
                                [3.0, -4.0])),
    (1_001_000_000, joint_state(1_001_000_000, ['a', 'b'], [0.125, -0.25], [], [1e-9, 7.0])),
    (1_002_000_000, joint_state(1_002_000_000, ['b', 'a'], [9.0, 8.0], [7.0, 6.0],
                                [5.0, 4.0], frame='x')),
    (1_003_000_000, joint_state(1_003_000_000, ['a', 'b'], [np.pi, -np.e], [0.0, 0.0],
                                [0.5, 0.25], frame='y')),
]
COMMANDS = [
    (1_000_500_000, f64_array([1.0, -2.0])),
    (1_001_500_000, f64_array([3.25, 4.5], dims=[('joints', 2, 2)])),
    (1_002_500_000, f64_array([1e300, -1e-300])),
]
REFS = [
    (1_000_100_000, trajectory(1_000_000_000, ['a', 'b'],
                               [([0.2, 0.3], [0.0, 0.1], [1.0, 2.0], 0)])),
    (1_001_100_000, trajectory(1_001_000_000, ['a', 'b'],
                               [([0.4, 0.5], [0.5, 0.6], [], 0),
                                ([0.6, 0.7], [], [], 250_000_000)])),
]


def write_bag(path: Path, storage: str, params: dict | None = None) -> Path:
    with BagWriter(path, storage=storage) as w:
        w.add_topic('/joint_states', JS, qos=make_qos('reliable', 'volatile', depth=5))
        w.add_topic('/effort_controller/commands', 'std_msgs/Float64MultiArray')
        w.add_topic('/reference', JT, qos=[make_qos('best_effort', 'transient_local',
                                                    depth=1)])
        for ts, m in STATES:
            w.write('/joint_states', ts, ser(m, JS))
        for ts, m in COMMANDS:
            w.write('/effort_controller/commands', ts, ser(m, F64))
        for ts, m in REFS:
            w.write('/reference', ts, ser(m, JT))
        if params is not None:
            w.write_params(params)
    return path


def expected_state_arrays():
    names = ['a', 'b']
    out = {k: np.full((len(STATES), 2), np.nan) for k in ('position', 'velocity', 'effort')}
    for i, (_, m) in enumerate(STATES):
        for key in out:
            vals = getattr(m, key)
            for j, nm in enumerate(m.name):
                if len(vals):
                    out[key][i, names.index(nm)] = vals[j]
    return out


@pytest.mark.parametrize('storage', STORAGES)
def test_round_trip_exact(tmp_path, storage):
    params = {'control_rate': 1000.0, 'joints': ('a', 'b'), 'gain': np.float64(2.5)}
    bag = write_bag(tmp_path / 'bag', storage, params=params)
    with BagReader(bag) as r:
        assert r.storage == storage
        assert r.metadata_version == 8
        assert r.skipped == {}
        assert {t: i.count for t, i in r.topics.items()} == {
            '/joint_states': 4, '/effort_controller/commands': 3, '/reference': 2}
        assert r.params == {'control_rate': 1000.0, 'joints': ['a', 'b'], 'gain': 2.5}
        s = r.read_series(['/joint_states', '/effort_controller/commands', '/reference'])
    js = s['/joint_states']
    assert js.names == ['a', 'b']
    np.testing.assert_array_equal(js.recv_ns, [t for t, _ in STATES])
    np.testing.assert_array_equal(js.stamp_ns, [t for t, _ in STATES])
    for key, arr in expected_state_arrays().items():
        np.testing.assert_array_equal(getattr(js, key), arr)
    cmd = s['/effort_controller/commands']
    np.testing.assert_array_equal(cmd.data, [[1.0, -2.0], [3.25, 4.5], [1e300, -1e-300]])
    np.testing.assert_array_equal(cmd.recv_ns, [t for t, _ in COMMANDS])
    ref = s['/reference']
    assert ref.joint_names == ['a', 'b']
    np.testing.assert_array_equal(ref.stamp_ns, [1_000_000_000, 1_001_000_000])
    np.testing.assert_array_equal(ref.sample_msg, [0, 1, 1])
    np.testing.assert_array_equal(ref.time_from_start_ns, [0, 0, 250_000_000])
    np.testing.assert_array_equal(ref.positions, [[0.2, 0.3], [0.4, 0.5], [0.6, 0.7]])
    np.testing.assert_array_equal(ref.velocities, [[0.0, 0.1], [0.5, 0.6],
                                                   [np.nan, np.nan]])
    np.testing.assert_array_equal(ref.accelerations[0], [1.0, 2.0])
    assert np.isnan(ref.accelerations[1:]).all()
    np.testing.assert_array_equal(ref.sample_times_ns(),
                                  [1_000_000_000, 1_001_000_000, 1_251_000_000])
    np.testing.assert_array_equal(ref.sample_times_ns('receive'),
                                  [1_000_100_000, 1_001_100_000, 1_251_100_000])


@pytest.mark.parametrize('storage', STORAGES)
def test_metadata_version_8_definitions_and_qos(tmp_path, storage):
    bag = write_bag(tmp_path / 'bag', storage)
    meta = yaml.safe_load((bag / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    assert meta['version'] == 8
    assert meta['storage_identifier'] == storage
    topics = {t['topic_metadata']['name']: t for t in meta['topics_with_message_count']}
    qos = yaml.safe_load(topics['/reference']['topic_metadata']['offered_qos_profiles'])
    assert qos[0]['reliability'] == 2 and qos[0]['durability'] == 1 and qos[0]['depth'] == 1
    qos = yaml.safe_load(topics['/joint_states']['topic_metadata']['offered_qos_profiles'])
    assert qos[0]['reliability'] == 1 and qos[0]['durability'] == 2 and qos[0]['depth'] == 5
    assert topics['/joint_states']['message_count'] == 4
    # Every connection carries its full definition: AnyReader decodes without a typestore.
    with AnyReader([bag]) as reader:
        defs = {c.topic: c.msgdef.data for c in reader.connections}
        assert 'MSG: std_msgs/Header' in defs['/joint_states'] or \
            'MSG: std_msgs/msg/Header' in defs['/joint_states']
        got = [reader.deserialize(raw, c.msgtype).position[0]
               for c, _, raw in reader.messages() if c.topic == '/joint_states']
    assert got == [0.1, 0.125, 9.0, np.pi]


def test_writer_rejects_bad_use(tmp_path):
    (tmp_path / 'full').mkdir()
    (tmp_path / 'full' / 'x').write_text('x')
    with pytest.raises(BagError, match='full'):
        BagWriter(tmp_path / 'full').open()
    with pytest.raises(BagError, match='storage'):
        BagWriter(tmp_path / 'b', storage='rosbag1')
    (tmp_path / 'empty').mkdir()          # an existing empty directory is fine
    with BagWriter(tmp_path / 'empty', storage='sqlite3') as w:
        w.add_topic('/joint_states', JS)
        with pytest.raises(BagError, match='not registered'):
            w.write('/nope', 1, b'\x00\x01\x00\x00')
        with pytest.raises(BagError, match='twice'):
            w.add_topic('/joint_states', JS)
        with pytest.raises(BagError, match='unknown'):
            w.add_topic('/x', 'nope_msgs/msg/Nothing')
    assert (tmp_path / 'empty' / 'metadata.yaml').is_file()


def test_writer_flush_makes_data_durable_before_close(tmp_path):
    """A recorder killed before close() still leaves readable data (bare-file reading)."""
    w = BagWriter(tmp_path / 'bag', storage='sqlite3', flush_every=2).open()
    w.add_topic('/joint_states', JS)
    for ts, m in STATES:
        w.write('/joint_states', ts, ser(m, JS))
    # no close(): metadata.yaml missing, the directory is read from its storage file
    with BagReader(tmp_path / 'bag') as r:
        assert r.metadata_version is None
        s = r.read_series(['/joint_states'])['/joint_states']
    assert len(s) == 4
    w.close()


def test_custom_type_from_bag_definition_and_params(tmp_path):
    msgdef = 'float64 x\nstring label\n'
    with BagWriter(tmp_path / 'bag', storage='mcap') as w:
        w.add_topic('/custom', 'my_pkg/msg/Custom', msgdef=msgdef)
        store = get_typestore(Stores.EMPTY)
        from rosbags.typesys import get_types_from_msg
        store.register(get_types_from_msg(msgdef, 'my_pkg/msg/Custom'))
        Custom = store.types['my_pkg/msg/Custom']
        raw = store.serialize_cdr(Custom(x=2.5, label='hi'), 'my_pkg/msg/Custom')
        w.write('/custom', 5, bytes(raw))
    assert write_params(tmp_path / 'bag', {'a': (1, 2)}) == tmp_path / 'bag' / 'params.yaml'
    assert read_params(tmp_path / 'bag') == {'a': [1, 2]}
    with BagReader(tmp_path / 'bag') as r:
        assert r.topics['/custom'].decodable
        (topic, ts, msg), = list(r.messages())
    assert (topic, ts, msg.x, msg.label) == ('/custom', 5, 2.5, 'hi')


@pytest.mark.parametrize('storage', STORAGES)
def test_trailing_bytes_tolerated(tmp_path, storage):
    raw = ser(STATES[0][1], JS)
    with pytest.raises(SerdeError):          # what a plain rosbags reader does
        TS.deserialize_cdr(raw + b'\x00' * 8, JS)
    msg = deserialize_tolerant(TS, raw + b'\x00' * 8, JS)
    assert list(msg.position) == [0.1, -0.2]
    with pytest.raises(DecodeError, match='unexpected bytes'):
        deserialize_tolerant(TS, raw + b'\x00' * 64, JS)
    with pytest.raises(DecodeError):
        deserialize_tolerant(TS, raw[:-9], JS)
    with BagWriter(tmp_path / 'bag', storage=storage) as w:
        w.add_topic('/joint_states', JS)
        for k, (ts, m) in enumerate(STATES):
            w.write('/joint_states', ts, ser(m, JS) + b'\x00' * (k + 4))
    with BagReader(tmp_path / 'bag') as r:
        decoded = [m.position.tolist() for _, _, m in r.messages()]
        s = r.read_series(['/joint_states'])['/joint_states']
    assert decoded == [m.position.tolist() for _, m in STATES]
    for key, arr in expected_state_arrays().items():
        np.testing.assert_array_equal(getattr(s, key), arr)


@pytest.mark.parametrize('storage', STORAGES)
def test_bare_storage_file(tmp_path, storage):
    bag = write_bag(tmp_path / 'bag', storage)
    (f,) = [p for p in bag.iterdir() if p.suffix in ('.mcap', '.db3')]
    bare = tmp_path / f'copy{f.suffix}'
    shutil.copy(f, bare)
    with BagReader(bare) as r:
        assert r.metadata_version is None and r.storage == storage
        assert r.topics['/joint_states'].count == 4
        s = r.read_series(['/joint_states', '/effort_controller/commands'])
    np.testing.assert_array_equal(s['/joint_states'].position,
                                  expected_state_arrays()['position'])
    np.testing.assert_array_equal(s['/effort_controller/commands'].data[1], [3.25, 4.5])


@pytest.mark.parametrize('storage', STORAGES)
def test_truncated_file_names_the_file(tmp_path, storage):
    bag = tmp_path / 'bag'
    # one chunk however slowly the host runs (the writer also flushes every flush_period s):
    # cut in half, the file holds no complete chunk
    with BagWriter(bag, storage=storage, flush_period=3600.0) as w:
        w.add_topic('/joint_states', JS)
        for k in range(3000):
            w.write('/joint_states', k * 1_000_000,
                    ser(joint_state(k * 1_000_000, ['a', 'b'], [k, -k], [1, 2], [3, 4]), JS))
    (f,) = [p for p in bag.iterdir() if p.suffix in ('.mcap', '.db3')]
    data = f.read_bytes()
    f.write_bytes(data[:len(data) // 2])
    with pytest.raises(BagError) as info:
        with BagReader(bag) as r:
            r.read_series(['/joint_states'])
    assert f.name in str(info.value)
    bare = tmp_path / f'cut{f.suffix}'
    bare.write_bytes(data[:len(data) // 3])
    with pytest.raises(BagError, match=bare.name):
        with BagReader(bare) as r:
            r.read_series(['/joint_states'])
    garbage = tmp_path / 'garbage.db3'
    garbage.write_bytes(b'not a database at all' * 100)
    with pytest.raises(BagError, match='garbage.db3'):
        BagReader(garbage).open()


def test_not_a_bag(tmp_path):
    with pytest.raises(BagError, match='no such file'):
        BagReader(tmp_path / 'missing').open()
    (tmp_path / 'dir').mkdir()
    with pytest.raises(BagError, match='not a rosbag2 bag'):
        BagReader(tmp_path / 'dir').open()
    (tmp_path / 'notes.txt').write_text('hello')
    with pytest.raises(BagError, match='notes.txt'):
        BagReader(tmp_path / 'notes.txt').open()
    bag = write_bag(tmp_path / 'bag', 'mcap')
    (bag / 'metadata.yaml').write_text('rosbag2_bagfile_information: {version: 99}\n')
    with pytest.raises(BagError, match='metadata.yaml'):
        BagReader(bag).open()


def test_undecodable_topic_is_skipped_not_fatal(tmp_path):
    bag = tmp_path / 'bag'
    with Writer(bag, version=8) as w:      # a type without definition, unknown to typestores
        c1 = w.add_connection('/dynamic_joint_states', 'control_msgs/msg/DynamicJointState',
                              msgdef='', rihs01='RIHS01_' + '0' * 64)
        c2 = w.add_connection('/joint_states', JS, typestore=TS)
        w.write(c1, 1, b'\x00\x01\x00\x00' + b'\x00' * 12)
        w.write(c2, 2, ser(STATES[0][1], JS))
    with BagReader(bag) as r:
        assert set(r.skipped) == {'/dynamic_joint_states'}
        assert 'DynamicJointState' in r.skipped['/dynamic_joint_states']
        assert not r.topics['/dynamic_joint_states'].decodable
        assert [t for t, _, _ in r.messages()] == ['/joint_states']
        with pytest.raises(BagError, match='cannot be decoded'):
            r.read_series(['/dynamic_joint_states'])


def test_fast_decoder_matches_rosbags_on_mixed_layouts(tmp_path):
    """Batches with several layouts, big-endian and odd messages: fast path == generic."""
    rng = np.random.default_rng(3)
    msgs = []
    for k in range(400):
        names = [['j1', 'j2', 'j3'], ['j3', 'j1', 'j2'], ['j1', 'j2']][k % 3]
        n = len(names)
        vel = rng.normal(size=n) if k % 5 else []
        m = joint_state(10**9 + k * 10**6, names, rng.normal(size=n), vel, rng.normal(size=n),
                        frame='ab'[k % 2])
        msgs.append((10**9 + k * 10**6, m, k % 37 == 0))
    with BagWriter(tmp_path / 'bag', storage='mcap') as w:
        w.add_topic('/joint_states', JS)
        for ts, m, big in msgs:
            w.write('/joint_states', ts, ser(m, JS, little_endian=not big))
    with BagReader(tmp_path / 'bag') as r:
        s = r.read_series(['/joint_states'])['/joint_states']
    assert s.names == ['j1', 'j2', 'j3']
    assert s.decode_stats['fast'] > 300 and s.decode_stats['generic'] >= 10
    for i, (ts, m, _) in enumerate(msgs):
        assert s.stamp_ns[i] == ts
        for key in ('position', 'velocity', 'effort'):
            want = np.full(3, np.nan)
            vals = getattr(m, key)
            for j, nm in enumerate(m.name):
                if len(vals):
                    want[s.names.index(nm)] = vals[j]
            np.testing.assert_array_equal(getattr(s, key)[i], want)


def test_fixture_dynamic_joint_states_skipped():
    if not FIXTURE.is_dir():
        pytest.skip(f'fixture {FIXTURE} absent (shared/ must sit beside the project)')
    with BagReader(FIXTURE) as r:
        assert r.metadata_version == 5 and r.storage == 'sqlite3'
        assert 'control_msgs/msg/DynamicJointState' in r.skipped['/dynamic_joint_states']
        assert r.topics['/tf'].decodable and r.topics['/joint_states'].count == 696
        s = r.read_series(['/joint_states', '/effort_controller/commands'])
    # compare with a plain rosbags loop
    ts = get_typestore(Stores.ROS2_HUMBLE)
    pos, cmd = [], []
    with Reader(FIXTURE) as reader:
        for c, _, raw in reader.messages():
            if c.topic == '/joint_states':
                pos.append(ts.deserialize_cdr(raw, c.msgtype).position)
            elif c.topic == '/effort_controller/commands':
                cmd.append(ts.deserialize_cdr(raw, c.msgtype).data)
    np.testing.assert_array_equal(s['/joint_states'].position, np.array(pos))
    np.testing.assert_array_equal(s['/effort_controller/commands'].data, np.array(cmd))
    assert s['/joint_states'].names == [f'joint_a{k}' for k in range(1, 8)]


def test_sqlite_storage_is_plain_sqlite(tmp_path):
    bag = write_bag(tmp_path / 'bag', 'sqlite3')
    (db,) = bag.glob('*.db3')
    con = sqlite3.connect(db)
    defs = dict(con.execute('SELECT topic_type, encoded_message_definition '
                            'FROM message_definitions'))
    assert 'float64[] position' in defs[JS]
    assert con.execute('SELECT count(*) FROM messages').fetchone()[0] == 9
    con.close()


@pytest.mark.parametrize('version', [4, 9])
@pytest.mark.parametrize('storage', STORAGES)
def test_metadata_versions_and_compression(tmp_path, version, storage):
    """Bags written by other tools: metadata v9 (and v4, rewritten), zstd compression."""
    from rosbags.rosbag2 import CompressionFormat
    from rosbags.rosbag2 import CompressionMode
    from rosbags.rosbag2 import StoragePlugin
    for mode in (None, CompressionMode.FILE, CompressionMode.MESSAGE):
        bag = tmp_path / f'bag_{mode}'
        w = Writer(bag, version=9, storage_plugin=StoragePlugin[storage.upper()])
        if mode is not None:
            w.set_compression(mode, CompressionFormat.ZSTD)
        with w:
            conn = w.add_connection('/joint_states', JS, typestore=TS)
            for ts, m in STATES:
                w.write(conn, ts, ser(m, JS))
        if version == 4:
            meta = yaml.safe_load((bag / 'metadata.yaml').read_text())
            info = meta['rosbag2_bagfile_information']
            info['version'] = 4
            for key in ('files', 'custom_data', 'ros_distro'):
                info.pop(key, None)
            for topic in info['topics_with_message_count']:
                topic['topic_metadata'].pop('type_description_hash', None)
                topic['topic_metadata']['offered_qos_profiles'] = ''
            (bag / 'metadata.yaml').write_text(yaml.safe_dump(meta))
        with BagReader(bag) as r:
            assert r.metadata_version == version
            s = r.read_series(['/joint_states'])['/joint_states']
        np.testing.assert_array_equal(s.position, expected_state_arrays()['position'])


def test_qos_from_rclpy_like_profile():
    """qos_from_profile duck-types an rclpy QoSProfile (IntEnum policies, Durations)."""
    from enum import IntEnum
    from types import SimpleNamespace

    from manip_control.bag_io import qos_from_profile
    from rosbags.interfaces import QosDurability
    from rosbags.interfaces import QosReliability
    from rosbags.interfaces import QosTime

    class Policy(IntEnum):
        A = 1
        B = 2

    profile = SimpleNamespace(reliability=Policy.B, durability=Policy.A, history=Policy.A,
                              depth=3, liveliness=Policy.A,
                              deadline=SimpleNamespace(nanoseconds=0),
                              lifespan=SimpleNamespace(nanoseconds=1_500_000_000),
                              liveliness_lease_duration=SimpleNamespace(
                                  nanoseconds=9223372036854775807))
    q = qos_from_profile(profile)
    assert q.reliability == QosReliability.BEST_EFFORT
    assert q.durability == QosDurability.TRANSIENT_LOCAL and q.depth == 3
    assert q.deadline == QosTime(0, 0) and q.lifespan == QosTime(1, 500_000_000)
    assert q.liveliness_lease_duration == QosTime(9223372036, 854775807)
    with pytest.raises(BagError, match='reliability'):
        make_qos(reliability='sometimes')


def test_mcap_chunks_without_message_index(tmp_path):
    """An MCAP file written without message indexes is read record by record (same result)."""
    from mcap.writer import IndexType
    from mcap.writer import Writer as McapWriter
    bag = write_bag(tmp_path / 'bag', 'mcap')
    with BagReader(bag) as r:
        want = r.read_series(['/joint_states', '/reference'])
    bare = tmp_path / 'noindex.mcap'
    with open(bare, 'wb') as fh:
        w = McapWriter(fh, chunk_size=200, index_types=IndexType.ALL & ~IndexType.MESSAGE)
        w.start(profile='ros2')
        ids = {}
        for topic, typ in (('/joint_states', JS), ('/reference', JT)):
            text, _ = TS.generate_msgdef(typ, ros_version=2)
            sid = w.register_schema(typ, 'ros2msg', text.encode())
            ids[topic] = w.register_channel(topic, 'cdr', sid, {'offered_qos_profiles': ''})
        for topic, msgs, typ in (('/joint_states', STATES, JS), ('/reference', REFS, JT)):
            for ts, m in msgs:
                w.add_message(ids[topic], ts, ser(m, typ), ts)
        w.finish()
    with BagReader(bare) as r:
        assert not r.recovered
        got = r.read_series(['/joint_states', '/reference'])
    for key in ('position', 'velocity', 'effort', 'stamp_ns', 'recv_ns'):
        np.testing.assert_array_equal(getattr(got['/joint_states'], key),
                                      getattr(want['/joint_states'], key))
    np.testing.assert_array_equal(got['/reference'].positions, want['/reference'].positions)


ROUND_TRIP = r"""
import sys
from pathlib import Path
import numpy as np
import rosbags
from rosbags.rosbag2 import Reader
from rosbags.typesys import get_typestore, Stores
from manip_control.bag_io import BagReader, BagWriter
ts = get_typestore(Stores.ROS2_JAZZY)
T = ts.types
JS = 'sensor_msgs/msg/JointState'
out = Path(sys.argv[1])
for storage in ('mcap', 'sqlite3'):
    bag = out / storage
    with BagWriter(bag, storage=storage) as w:
        w.add_topic('/joint_states', JS)
        for k in range(50):
            msg = T[JS](header=T['std_msgs/msg/Header'](
                stamp=T['builtin_interfaces/msg/Time'](sec=1, nanosec=k * 1000), frame_id=''),
                name=['a', 'b'], position=np.array([k, -k], float),
                velocity=np.array([0.5, 1.5]), effort=np.zeros(2))
            w.write('/joint_states', 10**9 + k * 1000, bytes(ts.serialize_cdr(msg, JS)))
    with BagReader(bag) as r:
        s = r.read_series(['/joint_states'])['/joint_states']
        one = next(r.messages(['/joint_states']))[2]
    assert s.position[:, 0].tolist() == list(range(50)), storage
    assert one.velocity.tolist() == [0.5, 1.5]
    with Reader(bag) as reader:
        pos = [ts.deserialize_cdr(raw, c.msgtype).position[1] for c, _, raw in
               reader.messages()]
    assert pos == [-k for k in range(50)], storage
import rosbags.rosbag2
print(rosbags.rosbag2.__file__)
"""


def test_round_trip_with_newest_rosbags_from_the_package_index(tmp_path):
    """
    The bag round trip with the newest rosbags release on the package index.

    The pinned release runs every other test; this one installs the newest into a temporary
    target directory (skipped, with the reason, when the index cannot be reached) and runs
    BagWriter -> BagReader and rosbags' own Reader in a subprocess that imports it first.
    """
    import subprocess
    import sys
    target = tmp_path / 'site'
    proc = subprocess.run([sys.executable, '-m', 'pip', 'install', '--quiet', '--no-deps',
                           '--upgrade', '--target', str(target), 'rosbags'],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f'cannot install the newest rosbags from the package index: '
                    f'{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "?"}')
    (dist,) = target.glob('rosbags-*.dist-info')
    root = Path(__file__).resolve().parents[1]
    env = {**__import__('os').environ, 'PYTHONPATH': f'{target}:{root}'}
    run = subprocess.run([sys.executable, '-c', ROUND_TRIP, str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=env, cwd=str(tmp_path))
    assert run.returncode == 0, f'{dist.name}: {run.stderr}'
    assert run.stdout.strip().startswith(str(target)), run.stdout     # the newest was used


def test_unfinished_mcap_is_read_up_to_its_last_complete_chunk(tmp_path):
    """An MCAP file cut anywhere (killed writer): every complete chunk is read, flagged."""
    bag = tmp_path / 'bag'
    msgs = [(k * 1_000_000, ser(joint_state(k * 1_000_000, ['a', 'b'], [k, -k], [1, 2],
                                            [3, 4]), JS)) for k in range(3000)]
    with BagWriter(bag, storage='mcap', chunk_size=20_000) as w:
        w.add_topic('/joint_states', JS)
        for ts, raw in msgs:
            w.write('/joint_states', ts, raw)
    (f,) = bag.glob('*.mcap')
    data = f.read_bytes()
    cut = tmp_path / 'cut'
    cut.mkdir()
    (cut / f.name).write_bytes(data[:len(data) * 2 // 3])
    with BagReader(cut) as r:
        assert r.recovered and r.metadata_version is None
        assert 'last complete chunk' in r.recovered_reason
        s = r.read_series(['/joint_states'])['/joint_states']
        n = len(s)
        assert r.end_ns == s.recv_ns[-1] == (n - 1) * 1_000_000
    # exactly the messages of the chunks that lie wholly before the cut (per the summary of
    # the finished file, read with the mcap library)
    from mcap.reader import make_reader
    with open(f, 'rb') as fh:
        summary = make_reader(fh).get_summary()
    size = len(data) * 2 // 3
    whole = [c for c in summary.chunk_indexes if c.chunk_start_offset + c.chunk_length <= size]
    assert len(whole) < len(summary.chunk_indexes)
    assert n == sum(c.message_end_time // 1_000_000 - c.message_start_time // 1_000_000 + 1
                    for c in whole)
    np.testing.assert_array_equal(s.position[:, 0], np.arange(n))
    # the mcap library's non-seeking reader agrees on what is complete
    from mcap.exceptions import McapError
    from mcap.reader import NonSeekingReader
    got = 0
    with open(cut / f.name, 'rb') as fh:
        try:
            for _ in NonSeekingReader(fh).iter_messages(log_time_order=False):
                got += 1
        except (McapError, EOFError, ValueError):
            pass
    assert got >= n


@pytest.mark.parametrize('text, what', [
    ('rosbag2_bagfile_information: [1, 2\n', 'not valid YAML at line'),
    ('rosbag2_bagfile_information: x\n', 'no rosbag2_bagfile_information mapping'),
    ('something_else: {}\n', 'no rosbag2_bagfile_information mapping'),
    ('- 1\n', 'not a rosbag2 metadata file'),
    ('rosbag2_bagfile_information: {version: eight, storage_identifier: mcap}\n',
     'version: expected an integer'),
    ('rosbag2_bagfile_information: {version: 8, storage_identifier: mcap, '
     'relative_file_paths: [b_0.mcap], topics_with_message_count: [x]}\n',
     'topics_with_message_count[0]: expected a mapping'),
    ('rosbag2_bagfile_information: {version: 8, relative_file_paths: [b_0.mcap]}\n',
     'storage_identifier: expected'),
    ('rosbag2_bagfile_information: {version: 8, storage_identifier: mcap, '
     'relative_file_paths: [nothere.mcap]}\n', 'nothere.mcap: storage file listed'),
])
def test_metadata_problems_are_one_line_naming_the_file(tmp_path, capsys, text, what):
    from manip_control.bag_analysis import main
    bag = write_bag(tmp_path / 'b', 'mcap')
    (bag / 'metadata.yaml').write_text(text)
    assert main([str(bag), '--quiet', '--no-plots', '--out', str(tmp_path / 'r')]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith('error: '), err
    assert what in err and ('metadata.yaml' in err or 'nothere.mcap' in err), err


@pytest.mark.parametrize('compression', ['zstd', 'lz4'])
def test_compressed_mcap_chunks_read_like_plain_ones(tmp_path, compression):
    """Chunks compressed by the writer are decompressed (plain chunks are read in place)."""
    plain = write_bag(tmp_path / 'plain', 'mcap')
    packed = tmp_path / 'packed'
    with BagWriter(packed, storage='mcap', compression=compression, chunk_size=300) as w:
        w.add_topic('/joint_states', JS)
        w.add_topic('/reference', JT)
        for ts, m in STATES:
            w.write('/joint_states', ts, ser(m, JS))
        for ts, m in REFS:
            w.write('/reference', ts, ser(m, JT))
    from mcap.reader import make_reader
    with open(next(packed.glob('*.mcap')), 'rb') as fh:
        kinds = {c.compression for c in make_reader(fh).get_summary().chunk_indexes}
    assert kinds == {compression}
    with BagReader(plain) as a, BagReader(packed) as b:
        want = a.read_series(['/joint_states', '/reference'])
        got = b.read_series(['/joint_states', '/reference'])
    for key in ('position', 'velocity', 'effort', 'stamp_ns', 'recv_ns'):
        np.testing.assert_array_equal(getattr(got['/joint_states'], key),
                                      getattr(want['/joint_states'], key))
    np.testing.assert_array_equal(got['/reference'].positions, want['/reference'].positions)


def test_long_uniform_topics_decoded_in_place_match_rosbags(tmp_path):
    """
    One layout per topic (the usual recording): values equal rosbags' decoding.

    The arrays are writable copies: they stay valid and do not refer to the mapped file once
    the reader is closed.
    """
    rng = np.random.default_rng(5)
    n = 3000
    q = rng.normal(size=(n, 2))
    u = rng.normal(size=(n, 2))
    with BagWriter(tmp_path / 'bag', storage='mcap') as w:
        w.add_topic('/joint_states', JS)
        w.add_topic('/effort_controller/commands', F64)
        w.add_topic('/reference', JT)
        for k in range(n):
            ts = 10**9 + k * 10**6
            w.write('/joint_states', ts, ser(joint_state(ts + 7, ['a', 'b'], q[k], -q[k],
                                                         2 * q[k], frame='w'), JS))
            w.write('/effort_controller/commands', ts + 1, ser(f64_array(u[k]), F64))
            w.write('/reference', ts + 2, ser(trajectory(ts, ['a', 'b'],
                                                         [(q[k] + 1, q[k] - 1, [], k)]), JT))
    with BagReader(tmp_path / 'bag') as r:
        got = r.read_series(['/joint_states', '/effort_controller/commands', '/reference'])
    js, cmd, ref = (got['/joint_states'], got['/effort_controller/commands'],
                    got['/reference'])
    assert js.decode_stats == {'fast': n} and cmd.decode_stats == {'fast': n}
    with Reader(tmp_path / 'bag') as reader:
        for conn, ts, raw in reader.messages():
            k = (ts - 10**9) // 10**6
            m = TS.deserialize_cdr(raw, conn.msgtype)
            if conn.topic == '/joint_states':
                assert js.recv_ns[k] == ts and js.stamp_ns[k] == ts + 7
                assert js.position[k].tolist() == m.position.tolist()
                assert js.velocity[k].tolist() == m.velocity.tolist()
                assert js.effort[k].tolist() == m.effort.tolist()
            elif conn.topic == '/reference':
                assert ref.stamp_ns[k] == ts - 2 and ref.time_from_start_ns[k] == k
                assert ref.positions[k].tolist() == m.points[0].positions.tolist()
                assert ref.velocities[k].tolist() == m.points[0].velocities.tolist()
                assert np.isnan(ref.accelerations[k]).all()
            else:
                assert cmd.data[k].tolist() == m.data.tolist()
    for arr in (js.position, js.stamp_ns, js.recv_ns, cmd.data, ref.positions, ref.stamp_ns):
        assert arr.flags.writeable and arr.flags.c_contiguous
        arr[0] = 0                                # not a view of the (closed) file


def test_raw_batches_of_several_files_are_packed():
    """Batches referring to a larger buffer (a mapped file) are packed when joined."""
    from manip_control.bag_storage import RawBatch
    buf = np.frombuffer(b'xxABCyyDEFzz' + b'GHIJ', np.uint8)
    a = RawBatch(np.array([5, 1]), buf, np.array([2, 7]), np.array([3, 3]))
    b = RawBatch(np.array([3]), buf[12:], np.array([0]), np.array([4]))
    both = RawBatch.concat([a, b])
    assert both.buf.tobytes() == b'ABCDEFGHIJ'
    assert [both.item(i) for i in range(3)] == [b'ABC', b'DEF', b'GHIJ']
    ordered = both.order_by_time()
    assert ordered.ts.tolist() == [1, 3, 5]
    assert [ordered.item(i) for i in range(3)] == [b'DEF', b'GHIJ', b'ABC']


@pytest.mark.parametrize('length', [16, 18, 116, 117])
def test_static_check_finds_every_changed_static_byte(length):
    """The word-wise comparison of static bytes (and the byte-wise one for odd lengths)."""
    from manip_control.bag_io import _StaticCheck
    rng = np.random.default_rng(length)
    template = rng.integers(0, 256, length).astype(np.uint8)
    ranges = [(0, 2), (5, 9), (12, min(length, 15))]
    rows = np.tile(template, (60, 1))
    for i in range(1, 60, 2):
        rows[i, rng.integers(0, length)] ^= 1 << int(rng.integers(0, 8))
    want = [all((r[a:b] == template[a:b]).all() for a, b in ranges) for r in rows]
    check = _StaticCheck(template, ranges)
    assert check(np.ascontiguousarray(rows)).tolist() == want
    assert check(np.asfortranarray(rows)).tolist() == want
    assert not all(want) and any(want)


# ---------------------------------------------------------------------------------------------
# damaged files, unusual layouts, truthful labels, read-only reading


def _state_bag(path: Path, n: int = 2000, storage: str = 'mcap', **options) -> Path:
    """``n`` joint states at 1 kHz, position k * 0.001 + 0.5 (exact in binary: no)."""
    with BagWriter(path, storage=storage, **options) as w:
        w.add_topic('/joint_states', JS)
        for k in range(n):
            ns = 10**9 + k * 1_000_000
            w.write('/joint_states', ns, ser(joint_state(ns, ['a', 'b'], [0.5 + k, -0.25],
                                                         [1.0, 2.0], [3.0, 4.0]), JS))
    return path


def _flip_exponent_bit(raw: bytearray, value: float) -> int:
    """Flip the top exponent bit of the stored float64 ``value``; return its offset."""
    at = raw.find(np.float64(value).tobytes())
    assert at > 0
    raw[at + 7] ^= 0x40
    return at


@pytest.mark.parametrize('compression', ['none', 'zstd'])
def test_flipped_bit_in_a_chunk_is_refused_naming_the_chunk(tmp_path, compression):
    """One flipped exponent bit: the chunk CRC fails (as rosbags and mcap say), never analysed."""
    bag = _state_bag(tmp_path / 'bag', compression=compression, chunk_size=20_000)
    (f,) = bag.glob('*.mcap')
    raw = bytearray(f.read_bytes())
    if compression == 'none':
        _flip_exponent_bit(raw, 0.5 + 1234)
    else:                               # a flipped byte inside the compressed data of a chunk
        from mcap.reader import make_reader
        with open(f, 'rb') as fh:
            ci = make_reader(fh).get_summary().chunk_indexes[5]
        raw[ci.chunk_start_offset + ci.chunk_length - 40] ^= 0x10
    f.write_bytes(bytes(raw))
    # the independent readers refuse the file
    from mcap.reader import make_reader
    with pytest.raises(Exception):
        with open(f, 'rb') as fh:
            for _ in make_reader(fh, validate_crcs=True).iter_messages():
                pass
    with pytest.raises(Exception):
        with Reader(bag) as r:
            for _ in r.messages():
                pass
    with BagReader(bag) as r:
        with pytest.raises(BagError) as info:
            r.read_series(['/joint_states'])
    text = str(info.value)
    assert '\n' not in text and f.name in text and 'chunk' in text
    assert 'CRC' in text or 'damaged' in text
    assert 'bag time' in text and 'skip-corrupt' in text
    # on request the rest is read, and what was left out is listed with its time range
    with BagReader(bag, skip_corrupt=True) as r:
        s = r.read_series(['/joint_states'])['/joint_states']
        (bad,) = r.corrupt
    assert 0 < len(s) < 2000 and np.isfinite(s.position).all()
    assert np.abs(s.position).max() < 3000
    lost = 2000 - len(s)
    assert (bad.end_ns - bad.start_ns) // 1_000_000 + 1 == lost
    kept = set(s.recv_ns.tolist())
    assert not any(bad.start_ns <= t <= bad.end_ns for t in kept)
    with BagReader(bag, skip_corrupt=True) as r:
        assert r.verify() > 0 and len(r.corrupt) == 1


def test_data_section_crc_is_checked(tmp_path):
    """A foreign file with a data-section CRC and no chunk CRCs: a flipped bit is found."""
    from mcap.writer import CompressionType
    from mcap.writer import Writer
    path = tmp_path / 'foreign.mcap'
    text, _ = TS.generate_msgdef(JS, ros_version=2)
    with open(path, 'wb') as fh:
        w = Writer(fh, chunk_size=4096, compression=CompressionType.NONE, enable_crcs=False,
                   enable_data_crcs=True)
        w.start(profile='ros2', library='test')
        sid = w.register_schema(JS, 'ros2msg', text.encode())
        cid = w.register_channel('/joint_states', 'cdr', sid)
        for k in range(500):
            ns = 10**9 + k * 1_000_000
            w.add_message(cid, ns, ser(joint_state(ns, ['a'], [0.5 + k]), JS), ns)
        w.finish()
    with BagReader(path) as r:
        assert len(r.read_series(['/joint_states'])['/joint_states']) == 500
    raw = bytearray(path.read_bytes())
    _flip_exponent_bit(raw, 0.5 + 321)
    path.write_bytes(bytes(raw))
    with BagReader(path) as r:
        with pytest.raises(BagError, match='data-section CRC'):
            r.read_series(['/joint_states'])


EXTRA_DEF = """std_msgs/Header header
string[] name
float64 temperature
float64[] position
float64[] velocity
float64[] effort
uint8[] flags
================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
"""


def _custom_store(definition: str):
    from rosbags.typesys import get_types_from_msg
    store = get_typestore(Stores.EMPTY)
    store.register(get_types_from_msg(definition, JS))
    return store


@pytest.mark.parametrize('storage', STORAGES)
def test_joint_state_with_extra_fields_decodes_like_rosbags(tmp_path, storage):
    store = _custom_store(EXTRA_DEF)
    C = store.types
    bag = tmp_path / 'bag'
    with BagWriter(bag, storage=storage) as w:
        w.add_topic('/joint_states', JS, msgdef=EXTRA_DEF)
        for k in range(50):
            ns = 10**9 + k * 10**6
            msg = C[JS](header=C['std_msgs/msg/Header'](
                stamp=C['builtin_interfaces/msg/Time'](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id=''), name=['a', 'b'], temperature=30.0 + k,
                position=np.array([0.1 * k, -0.2]), velocity=np.array([1.0, 2.0]),
                effort=np.array([3.0, float(k)]), flags=np.array([k % 7], np.uint8))
            w.write('/joint_states', ns, bytes(store.serialize_cdr(msg, JS)))
    with BagReader(bag) as r:
        s = r.read_series(['/joint_states'])['/joint_states']
    # independent reader: rosbags with the bag's own definition
    with AnyReader([bag]) as ar:
        ref = [ar.deserialize(raw, c.msgtype) for c, _, raw in ar.messages()]
    assert type(s).__name__ == 'JointStateSeries' and s.names == ['a', 'b'] and len(s) == 50
    np.testing.assert_array_equal(s.position, [list(m.position) for m in ref])
    np.testing.assert_array_equal(s.effort, [list(m.effort) for m in ref])
    assert s.stamp_ns.tolist() == [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
                                   for m in ref]


def test_joint_state_without_a_needed_field_is_one_line_naming_it(tmp_path):
    definition = EXTRA_DEF.replace('float64[] position\n', '')
    store = _custom_store(definition)
    C = store.types
    bag = tmp_path / 'bag'
    with BagWriter(bag) as w:
        w.add_topic('/arm/joint_states', JS, msgdef=definition)
        msg = C[JS](header=C['std_msgs/msg/Header'](
            stamp=C['builtin_interfaces/msg/Time'](sec=1, nanosec=0), frame_id=''),
            name=['a'], temperature=1.0, velocity=np.zeros(1), effort=np.zeros(1),
            flags=np.zeros(0, np.uint8))
        w.write('/arm/joint_states', 1, bytes(store.serialize_cdr(msg, JS)))
    with BagReader(bag) as r:
        with pytest.raises(BagError) as info:
            r.read_series(['/arm/joint_states'])
    text = str(info.value)
    assert '\n' not in text and '/arm/joint_states' in text and 'position' in text


def _foreign_mcap(path: Path, **writer_options) -> Path:
    """Write a complete MCAP file of 300 joint states with the mcap library's writer."""
    from mcap.writer import IndexType
    from mcap.writer import Writer
    if 'index_types' in writer_options:
        writer_options['index_types'] = getattr(IndexType, writer_options['index_types'])
    text, _ = TS.generate_msgdef(JS, ros_version=2)
    with open(path, 'wb') as fh:
        w = Writer(fh, **writer_options)
        w.start(profile='ros2', library='test')
        sid = w.register_schema(JS, 'ros2msg', text.encode())
        cid = w.register_channel('/joint_states', 'cdr', sid)
        for k in range(300):
            ns = 10**9 + k * 1_000_000
            w.add_message(cid, ns, ser(joint_state(ns, ['a'], [float(k)]), JS), ns)
        w.finish()
    return path


@pytest.mark.parametrize('options, lacks, not_said', [
    ({'use_statistics': False, 'chunk_size': 2000}, 'no statistics record', 'chunk index'),
    ({'use_chunking': False}, 'chunk index', 'statistics'),
    ({'index_types': 'MESSAGE', 'chunk_size': 2000}, 'no chunk index', 'statistics'),
])
def test_complete_files_are_not_called_recovered(tmp_path, options, lacks, not_said):
    path = _foreign_mcap(tmp_path / 'f.mcap', **options)
    with BagReader(path) as r:
        assert r.recovered is False and r.recovered_reason == ''
        note = ' '.join(r.notes)
        assert 'complete file' in note and lacks in note and not_said not in note
        assert len(r.read_series(['/joint_states'])['/joint_states']) == 300
    # a file cut short is recovered, and the reason is in words, not parser text
    raw = path.read_bytes()
    cut = tmp_path / 'cut.mcap'
    cut.write_bytes(raw[:len(raw) - 100])
    with BagReader(cut) as r:
        assert r.recovered and 'no valid footer' in r.recovered_reason
        assert 'McapError' not in r.recovered_reason and 'has length' not in r.recovered_reason


def test_full_disk_error_and_info_say_reindex_makes_it_readable(tmp_path, monkeypatch, capsys):
    """A write error (disk full) leaves an MCAP file without footer: both lines say the fix."""
    import errno

    from manip_control import bag_storage
    from manip_control.bag_io import RecordingError
    from manip_control.bag_tool import main as bag_main
    real = bag_storage._Sink.write
    limit = 200_000

    def write(self, data):
        if self.pos + len(memoryview(data)) > limit:
            raise OSError(errno.ENOSPC, 'No space left on device')
        return real(self, data)
    monkeypatch.setattr(bag_storage._Sink, 'write', write)
    bag = tmp_path / 'full'
    w = BagWriter(bag, chunk_size=20_000).open()
    w.add_topic('/joint_states', JS)
    error = None
    for k in range(5000):
        ns = 10**9 + k * 10**6
        try:
            w.write('/joint_states', ns, ser(joint_state(ns, ['a'], [float(k)]), JS))
        except RecordingError as exc:
            error = error or str(exc)
    with pytest.raises(RecordingError) as info:
        w.close()
    monkeypatch.setattr(bag_storage._Sink, 'write', real)
    for text in (error, str(info.value)):
        assert f'manip-bag reindex {bag}' in text and '\n' not in text
    with pytest.raises(Exception):             # rosbags refuses the file as it is
        with Reader(bag) as r:
            list(r.messages())
    assert bag_main(['info', str(bag)]) == 0
    out = capsys.readouterr().out
    assert f'manip-bag reindex {bag}' in out and 'recovered:' in out
    assert bag_main(['reindex', str(bag)]) == 0
    with Reader(bag) as r:                     # ... and reads it after the reindex
        n = sum(1 for _ in r.messages())
    assert n == yaml.safe_load((bag / 'metadata.yaml').read_text())[
        'rosbag2_bagfile_information']['message_count'] > 100


def test_sqlite_counts_come_from_the_data(tmp_path):
    bag = _state_bag(tmp_path / 'bag', n=500, storage='sqlite3')
    meta = bag / 'metadata.yaml'
    for listed in (0, 100):
        doc = yaml.safe_load(meta.read_text())
        doc['rosbag2_bagfile_information']['topics_with_message_count'][0][
            'message_count'] = listed
        meta.write_text(yaml.safe_dump(doc))
        with BagReader(bag) as r:
            assert r.topics['/joint_states'].count == 500
            assert len(r.read_series(['/joint_states'])['/joint_states']) == 500
            note = ' '.join(r.notes)
            assert f'metadata.yaml lists {listed} messages, the file holds 500' in note


def _unfinished_sqlite(tmp_path: Path) -> Path:
    """Copy of a sqlite3 bag while its writer is still open: .db3 + non-empty -wal + -shm."""
    bag = tmp_path / 'live'
    w = BagWriter(bag, storage='sqlite3').open()
    w.add_topic('/joint_states', JS)
    for k in range(300):
        ns = 10**9 + k * 10**6
        w.write('/joint_states', ns, ser(joint_state(ns, ['a'], [float(k)], [0.0], [0.0]),
                                         JS))
    w.flush()
    copy = tmp_path / 'unfinished'
    copy.mkdir()
    for f in bag.iterdir():
        if f.name != 'metadata.yaml':
            shutil.copyfile(f, copy / f.name)
    w.close()
    return copy


def test_reading_never_changes_an_unfinished_sqlite_bag(tmp_path, capsys):
    from manip_control.bag_analysis import main as analyze_main
    from manip_control.bag_tool import main as bag_main
    bag = _unfinished_sqlite(tmp_path)
    files = sorted(bag.iterdir())
    assert {f.suffix for f in files} == {'.db3', '.db3-wal', '.db3-shm'}
    assert any(f.name.endswith('-wal') and f.stat().st_size > 0 for f in files)
    before = {f.name: f.read_bytes() for f in files}
    assert bag_main(['info', str(bag)]) == 0
    assert 'recovered' in capsys.readouterr().out
    with BagReader(bag) as r:
        assert len(r.read_series(['/joint_states'])['/joint_states']) == 300
    assert analyze_main([str(bag), '--out', str(tmp_path / 'rep'), '--quiet',
                         '--no-plots']) == 0
    after = {f.name: f.read_bytes() for f in sorted(bag.iterdir())}
    assert after == before


def test_info_into_a_closed_pipe_is_not_an_error(tmp_path):
    import subprocess
    import sys
    bag = _state_bag(tmp_path / 'bag', n=50)
    root = Path(__file__).resolve().parents[1]
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, '-m', 'manip_control.bag_tool', 'info',
                                 str(bag)], cwd=root, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.close()                    # like `| head -0`: the reader is gone
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0 and err == ''


def test_two_stored_definitions_of_one_type_each_decode_their_own_channel(tmp_path, capsys):
    """
    An extended JointState on /joint_states and the standard one on /motor_states.

    Both schemas are named ``sensor_msgs/msg/JointState`` (written with the ``mcap``
    library's writer); each channel must be decoded with its own schema: 5000 and 5000.
    """
    from manip_control.bag_analysis import main as analyze_main
    from mcap.writer import Writer
    ext = _custom_store(EXTRA_DEF)
    C = ext.types
    std_text, _ = TS.generate_msgdef(JS, ros_version=2)
    path = tmp_path / 'two_schemas.mcap'
    n = 5000
    with open(path, 'wb') as fh:
        w = Writer(fh, chunk_size=64_000)
        w.start(profile='ros2', library='test')
        s_ext = w.register_schema(JS, 'ros2msg', EXTRA_DEF.encode())
        s_std = w.register_schema(JS, 'ros2msg', std_text.encode())
        c_js = w.register_channel('/joint_states', 'cdr', s_ext)
        c_mo = w.register_channel('/motor_states', 'cdr', s_std)
        for k in range(n):
            ns = 10**9 + k * 1_000_000
            msg = C[JS](header=C['std_msgs/msg/Header'](
                stamp=C['builtin_interfaces/msg/Time'](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id=''), name=['a', 'b'], temperature=30.0,
                position=np.array([1e-4 * k, -0.2]), velocity=np.array([0.1, 0.0]),
                effort=np.array([3.0, 1.0]), flags=np.zeros(1, np.uint8))
            w.add_message(c_js, ns, bytes(ext.serialize_cdr(msg, JS)), ns)
            w.add_message(c_mo, ns + 1000, ser(joint_state(ns, ['a', 'b'], [2.0, -4.0 - k],
                                                           [24.0, 12.0], [2.5, 4.5]), JS),
                          ns + 1000)
        w.finish()
    with BagReader(path) as r:
        assert r.topics['/motor_states'].count == n and r.topics['/joint_states'].count == n
        s = r.read_series(['/joint_states', '/motor_states'])
        assert r.decode_errors == {}
    assert len(s['/joint_states']) == n and len(s['/motor_states']) == n
    np.testing.assert_array_equal(s['/motor_states'].position[:, 1], -4.0 - np.arange(n))
    np.testing.assert_array_equal(s['/joint_states'].position[:, 0], 1e-4 * np.arange(n))
    for extra in ([], ['--motor', '/motor_states']):
        out = tmp_path / f'rep{len(extra)}'
        assert analyze_main([str(path), '--out', str(out), '--quiet', '--no-plots',
                             '--no-model', '--json', *extra]) == 0
        import json
        rep = json.loads(capsys.readouterr().out)
        assert rep['motor']['available'] and rep['motor']['source'] == '/motor_states'
        assert rep['motor']['per_joint']['b']['current_peak_abs'] == pytest.approx(4.0 + n - 1)
    # this package's writer keeps the two definitions apart too
    bag = tmp_path / 'written'
    with BagWriter(bag) as w:
        w.add_topic('/joint_states', JS, msgdef=EXTRA_DEF)
        w.add_topic('/motor_states', JS)
        with BagReader(path) as r:
            for topic, ts, raw in r.raw_messages(['/joint_states', '/motor_states']):
                w.write(topic, ts, raw)
    with BagReader(bag) as r:
        s2 = r.read_series(['/joint_states', '/motor_states'])
        assert r.decode_errors == {}
    for topic in s:
        np.testing.assert_array_equal(s2[topic].position, s[topic].position)


def _split_parts(tmp_path: Path, offsets_ns, cut_last: bool = True,
                 names=('run0.mcap', 'run1.mcap')) -> Path:
    """Folder of bare .mcap files of 5000 states each starting at ``offsets_ns`` (last cut)."""
    folder = tmp_path / 'folder'
    folder.mkdir()
    for i, off in enumerate(offsets_ns):
        src = tmp_path / f'src{i}'
        with BagWriter(src, chunk_size=20_000) as w:
            w.add_topic('/joint_states', JS)
            for k in range(5000):
                ns = off + k * 1_000_000
                w.write('/joint_states', ns, ser(joint_state(ns, ['a'], [float(k)]), JS))
        (f,) = src.glob('*.mcap')
        data = f.read_bytes()
        if cut_last and i == len(offsets_ns) - 1:
            data = data[:len(data) * 2 // 3]
        (folder / names[i]).write_bytes(data)
    return folder


def test_reindex_refuses_two_recordings_and_advises_a_folder_of_its_own(tmp_path, capsys):
    """A cut recording beside a complete one of the same time: nothing is merged or changed."""
    from manip_control.bag_analysis import main as analyze_main
    from manip_control.bag_tool import main as bag_main
    folder = _split_parts(tmp_path, [10**9, 10**9 + 1000])
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert bag_main(['info', str(folder / 'run1.mcap')]) == 0
    out = capsys.readouterr().out
    (advice,) = [x for x in out.splitlines() if x.startswith('repair: ')]
    assert f'manip-bag reindex {folder} ' not in advice
    assert 'run0.mcap' in advice and f'manip-bag reindex {folder / "run1"} ' in advice
    assert bag_main(['reindex', str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('error: ') and '\n' not in err
    assert 'not the parts of one recording' in err and 'overlap in time' in err
    assert 'run0.mcap' in err and 'run1.mcap' in err and 'nothing was changed' in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # read as it is, the folder is not passed off as one recording without a word
    assert analyze_main([str(folder), '--out', str(tmp_path / 'rep'), '--quiet', '--no-plots',
                         '--json']) == 0
    import json
    rep = json.loads(capsys.readouterr().out)
    assert any('not the parts of one recording' in x for x in rep['notes'])


def test_reindex_joins_the_parts_of_one_recording_and_says_so(tmp_path, capsys):
    from manip_control.bag_tool import main as bag_main
    folder = _split_parts(tmp_path, [10**9, 10**9 + 5000 * 1_000_000])
    assert bag_main(['reindex', str(folder)]) == 0
    err = capsys.readouterr().err
    assert 'joining 2 files as the parts of one recording: run0.mcap (5000 messages' in err
    with BagReader(folder) as r:
        assert r.metadata_version == 8 and not any('parts' in x for x in r.notes)
        s = r.read_series(['/joint_states'])['/joint_states']
    assert (np.diff(s.stamp_ns) > 0).all() and len(s) > 5000


def test_file_cut_at_a_record_boundary_says_so_not_zero_bytes_ignored(tmp_path):
    bag = _state_bag(tmp_path / 'bag', n=3000, chunk_size=20_000)
    (f,) = bag.glob('*.mcap')
    from mcap.reader import make_reader
    with open(f, 'rb') as fh:
        summary = make_reader(fh).get_summary()
    cis = sorted(summary.chunk_indexes, key=lambda c: c.chunk_start_offset)
    at = cis[3].chunk_start_offset          # chunks 0-2 and their message indexes before it
    cut = tmp_path / 'cut'
    cut.mkdir()
    (cut / f.name).write_bytes(f.read_bytes()[:at])
    with BagReader(cut) as r:
        why = r.recovered_reason
        n = len(r.read_series(['/joint_states'])['/joint_states'])
    assert n == sum(c.message_end_time // 10**6 - c.message_start_time // 10**6 + 1
                    for c in cis[:3])
    assert 'last 0 bytes' not in why and 'inside a record header' not in why
    assert f'ends at byte {at}, right after a complete record' in why
    assert 'no byte of it is ignored' in why


def test_absolute_times_are_printed_from_integer_nanoseconds(tmp_path, capsys):
    """1733000000.123456789 s: a float64 is 256 ns coarse there; the text must be exact."""
    from manip_control.bag_tool import main as bag_main
    t0 = 1_733_000_000_123_456_789
    bag = tmp_path / 'bag'
    with BagWriter(bag) as w:
        w.add_topic('/joint_states', JS)
        for k in range(3):
            ns = t0 + k * 1_000_000
            w.write('/joint_states', ns, ser(joint_state(ns, ['a'], [0.0]), JS))
    assert f'{t0 / 1e9:.9f}' != '1733000000.123456789'        # the float is off
    assert bag_main(['info', str(bag)]) == 0
    out = capsys.readouterr().out
    assert 'from 1733000000.123456789 s to 1733000000.125456789 s' in out


def test_reindex_refuses_parts_named_after_two_recordings(tmp_path, capsys):
    """rosbag2 names split parts NAME_0, NAME_1: a_0 and b_0 are two recordings."""
    from manip_control.bag_tool import main as bag_main
    folder = _split_parts(tmp_path, [10**9, 10**9 + 5000 * 1_000_000], cut_last=False,
                          names=('a_0.mcap', 'b_0.mcap'))
    assert bag_main(['reindex', str(folder)]) == 2
    err = capsys.readouterr().err
    assert 'their names a_0.mcap, b_0.mcap are of different recordings' in err
    assert not (folder / 'metadata.yaml').exists()
