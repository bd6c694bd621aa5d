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

"""CDR codec of the hot-path messages against rclpy's own serialization, both directions."""

import math
import random

from manip_control.nodes import cdr
import pytest

pytest.importorskip('rclpy')

from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, MultiArrayDimension  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402


def _rand_names(rng, n):
    return [''.join(rng.choice('abcdefgh_xyz') for _ in range(rng.randint(1, 9)))
            for _ in range(n)]


def _rand_vec(rng, n):
    return [rng.uniform(-1e3, 1e3) for _ in range(n)]


@pytest.mark.parametrize('seed', range(20))
def test_joint_state_both_directions(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 5)
    names = _rand_names(rng, n)
    pos, vel = _rand_vec(rng, n), _rand_vec(rng, rng.choice([0, n]))
    eff = _rand_vec(rng, rng.choice([0, n]))
    frame = rng.choice(['', 'base', 'a'])
    stamp = rng.randint(0, 2 ** 31 - 1) * 1_000_000_000 + rng.randint(0, 999_999_999)
    # ours -> rclpy
    m = deserialize_message(cdr.encode_joint_state(stamp, names, pos, vel, eff, frame),
                            JointState)
    assert m.header.stamp.sec * 10 ** 9 + m.header.stamp.nanosec == stamp
    assert (m.header.frame_id, list(m.name)) == (frame, names)
    assert (list(m.position), list(m.velocity), list(m.effort)) == (pos, vel, eff)
    # rclpy -> ours
    ref = JointState(name=names, position=pos, velocity=vel, effort=eff)
    ref.header.frame_id = frame
    ref.header.stamp.sec, ref.header.stamp.nanosec = divmod(stamp, 10 ** 9)
    got, reason = cdr.decode_joint_state(serialize_message(ref))
    assert reason is None
    assert got == (stamp, names, tuple(pos), tuple(vel), tuple(eff))


def test_joint_state_template_encoder_equals_generic():
    enc = cdr.JointStateEncoder(['joint1', 'joint2'])
    raw = enc.encode(1_500_000_001, (0.1, -0.2), (1.0, 2.0), (3.0, -4.0))
    assert raw == cdr.encode_joint_state(1_500_000_001, ['joint1', 'joint2'], [0.1, -0.2],
                                         [1.0, 2.0], [3.0, -4.0])
    m = deserialize_message(raw, JointState)
    assert list(m.position) == [0.1, -0.2] and list(m.effort) == [3.0, -4.0]
    assert (m.header.stamp.sec, m.header.stamp.nanosec) == (1, 500_000_001)


def test_float64_array_both_directions():
    raw = cdr.Float64ArrayEncoder(3).encode([1.5, -2.5, 1e-300])
    assert list(deserialize_message(raw, Float64MultiArray).data) == [1.5, -2.5, 1e-300]
    msg = Float64MultiArray(data=[4.0, 5.0])
    msg.layout.dim = [MultiArrayDimension(label='joints', size=2, stride=2)]
    msg.layout.data_offset = 0
    assert cdr.decode_float64_array(serialize_message(msg)) == ((4.0, 5.0), None)


def test_reference_both_directions():
    names = ['joint1', 'joint2']
    raw = cdr.ReferenceEncoder(names).encode(7_000_000_123, [0.1, 0.2], [0.3, 0.4],
                                             [0.5, 0.6])
    m = deserialize_message(raw, JointTrajectory)
    assert list(m.joint_names) == names and len(m.points) == 1
    p = m.points[0]
    assert (list(p.positions), list(p.velocities), list(p.accelerations)) == \
        ([0.1, 0.2], [0.3, 0.4], [0.5, 0.6])
    assert (m.header.stamp.sec, m.header.stamp.nanosec) == (7, 123)
    t = JointTrajectory(joint_names=['b', 'a'])
    t.points = [JointTrajectoryPoint(positions=[1.0, 2.0]),
                JointTrajectoryPoint(positions=[3.0, 4.0])]
    expected = ((0, ['b', 'a'], (1.0, 2.0), (), ()), None)
    assert cdr.decode_reference(serialize_message(t)) == expected


def test_clock_both_directions():
    c = Clock()
    c.clock.sec, c.clock.nanosec = 12, 34
    assert cdr.decode_clock(serialize_message(c)) == (12_000_000_034, None)
    m = deserialize_message(cdr.encode_clock(12_000_000_034), Clock)
    assert (m.clock.sec, m.clock.nanosec) == (12, 34)


def test_equal_messages_give_equal_bytes():
    enc = cdr.JointStateEncoder(['j1', 'j2'], frame_id='abc')
    a = enc.encode(5, (1.0, 2.0), (3.0, 4.0), (5.0, 6.0))
    b = cdr.JointStateEncoder(['j1', 'j2'], frame_id='abc').encode(5, (1.0, 2.0), (3.0, 4.0),
                                                                   (5.0, 6.0))
    assert a == b


@pytest.mark.parametrize('decode', [cdr.decode_joint_state, cdr.decode_float64_array,
                                    cdr.decode_reference, cdr.decode_clock])
def test_malformed_input_never_raises(decode):
    rng = random.Random(1)
    good = cdr.encode_joint_state(1, ['joint1', 'joint2'], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    samples = [b'', b'\x00', b'\x01\x00\x00\x00', good[:10], good[:-3],
               b'\x00\x01\x00\x00' + b'\xff' * 40]
    for _ in range(300):
        raw = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        samples.append(bytes(raw[:rng.randint(0, len(raw))]))
    for raw in samples:
        value, reason = decode(raw)
        assert (value is None) != (reason is None)


def test_nan_passes_the_codec_and_is_caught_later():
    raw = cdr.encode_joint_state(0, ['joint1', 'joint2'], [math.nan, 0.0], [0.0, 0.0], [])
    (stamp, names, pos, vel, eff), reason = cdr.decode_joint_state(raw)
    assert reason is None and math.isnan(pos[0])


def test_layout_cache_never_mixes_shapes():
    """
    Check that the cached fast path agrees with rclpy on a stream of mixed shapes.

    The fast path (same shape as a cached message) agrees with rclpy for every message of
    a stream that mixes names, name orders, array lengths and values of equal byte length.
    """
    rng = random.Random(5)
    shapes = [(['ab', 'cd'], 2, 2, 2), (['xy', 'zw'], 2, 2, 2), (['cd', 'ab'], 2, 2, 2),
              (['ab', 'cd'], 2, 0, 2), (['ab', 'cd'], 2, 2, 0), (['a', 'b', 'c'], 3, 3, 0),
              (['joint1', 'joint2'], 2, 2, 2)]
    for _ in range(400):
        names, npos, nvel, neff = rng.choice(shapes)
        m = JointState(name=names, position=_rand_vec(rng, npos),
                       velocity=_rand_vec(rng, nvel), effort=_rand_vec(rng, neff))
        m.header.stamp.sec = rng.randint(0, 1000)
        raw = rng.choice([serialize_message(m),
                          cdr.encode_joint_state(m.header.stamp.sec * 10 ** 9, names,
                                                 m.position, m.velocity, m.effort)])
        (stamp, got_names, pos, vel, eff), reason = cdr.decode_joint_state(raw)
        assert reason is None and got_names == list(m.name)
        assert (list(pos), list(vel), list(eff)) == (list(m.position), list(m.velocity),
                                                     list(m.effort))
        t = JointTrajectory(joint_names=names)
        t.points = [JointTrajectoryPoint(positions=_rand_vec(rng, len(names)),
                                         velocities=_rand_vec(rng, rng.choice([0, len(names)])))]
        (_, rn, rp, rv, ra), reason = cdr.decode_reference(serialize_message(t))
        assert reason is None and rn == names and list(rp) == list(t.points[0].positions)
        assert list(rv) == list(t.points[0].velocities) and ra == ()
