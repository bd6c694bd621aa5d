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
Tests of recording (the recorder node and manip-sim --bag).

Recording: a real rosbag2 bag (metadata version 8, MCAP or sqlite3) written from raw CDR,
nothing lost at 1 kHz for 60 s, the resolved parameters beside metadata.yaml, the standalone
recorder node; SIGKILL of manip-sim --bag and of the recorder (recovered, at most the last
second lost, manip-bag reindex); a real file-size limit (exit 1, lost messages counted,
metadata.yaml counts what the file holds).
"""

from dataclasses import replace
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

pytest.importorskip('rclpy')

from conftest import ROOT  # noqa: E402, I100

from manip_control.bag_io import BagReader  # noqa: E402
from manip_control.nodes import sim  # noqa: E402
from manip_control.nodes.ros_params import load_params_file, scenario_from_ros  # noqa: E402
from manip_control.parameters import load_scenario  # noqa: E402

DATA_TOPICS = ('/joint_states', '/motor_states', '/reference', '/joint_commands',
               '/effort_controller/commands')


def _metadata(bag):
    return yaml.safe_load((bag / 'metadata.yaml').read_text())['rosbag2_bagfile_information']


def test_nothing_lost_at_1khz_for_60s(ros_context, tmp_path):
    run_cfg = sim.load_run_config('default', duration=60.0)
    bag = tmp_path / 'long'
    runner = sim.SimRunner(run_cfg, bag=bag, context=ros_context)
    try:
        out = runner.execute()
    finally:
        runner.destroy()
    assert out.ticks == 60000
    for topic in DATA_TOPICS:
        assert out.published[topic] == 60000, (topic, out.published)
        assert out.recorded[topic] == out.published[topic], (topic, out.recorded)
    meta = _metadata(bag)
    assert meta['version'] == 8 and meta['storage_identifier'] == 'mcap'
    counts = {t['topic_metadata']['name']: t['message_count']
              for t in meta['topics_with_message_count']}
    with BagReader(bag) as r:
        for topic in DATA_TOPICS:
            assert counts[topic] == r.topics[topic].count == 60000
        assert r.topics['/joint_states'].msgtype == 'sensor_msgs/msg/JointState'
    # the recorded run can be replayed: params.yaml is the scenario, ros_params.yaml the nodes'
    assert load_scenario(yaml.safe_load((bag / 'params.yaml').read_text())) == \
        run_cfg.scenario
    ros = load_params_file(bag / 'ros_params.yaml')
    assert scenario_from_ros(ros, name='default') == run_cfg.scenario


def test_sqlite3_on_request(ros_context, tmp_path):
    run_cfg = sim.load_run_config('seed001', duration=0.5)
    bag = tmp_path / 'sq'
    runner = sim.SimRunner(run_cfg, bag=bag, storage='sqlite3', context=ros_context)
    try:
        out = runner.execute()
    finally:
        runner.destroy()
    meta = _metadata(bag)
    assert meta['version'] == 8 and meta['storage_identifier'] == 'sqlite3'
    assert list(bag.glob('*.db3'))
    with BagReader(bag) as r:
        js = r.read_series(['/joint_states'])['/joint_states']
    assert len(js) == 500 == out.recorded['/joint_states']


def test_a_recorder_stopped_at_the_end_of_the_run_still_gets_its_last_messages(
        procs, tmp_path, probe, spin, executor):
    """
    The recorder stopped (SIGSTOP) from 100 ms into a 1 s lockstep run until 2 s after its end.

    The plant's publishers hold the whole run (``PUBLISH_DEPTH``) and, at exit, wait for their
    reliable readers for :data:`~manip_control.nodes.common.EXIT_ACK_WAIT` (4 s) over all of
    them: the recorder, resumed 2 s after the run finished, records every tick. When each
    publisher waited 0.5 s the plant was gone before the recorder resumed and the bag held the
    first 100 or so ticks (a CI run lost the last 346 ms of ``/motor_states`` that way).
    """
    from rosgraph_msgs.msg import Clock
    params = str(ROOT / 'config' / 'sim_params.yaml')
    bag = tmp_path / 'stopped_at_end'
    probe.sub(Clock, '/clock', depth=1)
    executor.add_node(probe.node)
    clocks = probe.msgs['/clock']
    rec = procs.node('recorder', 'recorder_node', '-p', f'bag:={bag}', '-p',
                     'use_sim_time:=true', '-p', 'topics:=["/motor_states"]')
    ready = ('-p', 'wait_for_recorder:=recorder/ready')
    plant = procs.node('plant', 'plant_node', '--params-file', params, '-p', 'duration:=1.0',
                       '-p', 'wait_for_subscribers:=2', *ready)
    procs.node('controller', 'controller_node', '--params-file', params, *ready)
    procs.node('trajectory', 'trajectory_node', '--params-file', params, *ready)
    assert spin(executor, 120, until=lambda: clocks and clocks[-1].clock.nanosec >= 100_000_000
                or (clocks and clocks[-1].clock.sec >= 1)), procs.output(plant)
    os.kill(rec.pid, signal.SIGSTOP)
    try:
        while _proc_state(rec.pid) != 'T':
            time.sleep(0.001)
        stopped_at = clocks[-1].clock.sec * 1000 + clocks[-1].clock.nanosec // 1_000_000
        deadline = time.monotonic() + 60
        while 'run finished' not in procs.output(plant)[1] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert 'run finished' in procs.output(plant)[1], procs.output(plant)
        time.sleep(2.0)
        assert _proc_state(rec.pid) == 'T'
        assert plant.poll() is None, 'the plant exited before the recorder was resumed'
    finally:
        os.kill(rec.pid, signal.SIGCONT)
    assert procs.wait(plant, 30) == 0, procs.output(plant)
    assert 'had not acknowledged' not in procs.output(plant)[1], procs.output(plant)
    procs.stop(rec, grace=15.0)
    assert rec.returncode == 0, procs.output(rec)
    with BagReader(bag) as r:
        stamps = r.read_series(['/motor_states'])['/motor_states'].stamp_ns.tolist()
    assert stopped_at < 900, stopped_at             # most of the run came while it was stopped
    assert sorted(set(stamps)) == [k * 1_000_000 for k in range(1000)], (stopped_at, len(stamps))


def test_standalone_recorder_with_separate_nodes(procs, tmp_path):
    params = str(ROOT / 'config' / 'sim_params.yaml')
    bag = tmp_path / 'standalone'
    # the loop's topics (the default list has /controller/adaptation too, which nothing
    # publishes without adaptation: the recorder would never report every topic matched)
    topics = [*DATA_TOPICS, '/controller/diagnostics', '/plant/diagnostics']
    rec = procs.node('recorder', 'recorder_node', '-p', f'bag:={bag}', '-p',
                     'use_sim_time:=true', '-p', f'topics:={json.dumps(topics)}')
    # the plant starts once the controller and the recorder subscribe to joint_states; each
    # node's first message waits until its publishers have matched the recorder (DDS matches
    # the writer's side apart from the recorder's)
    ready = ('-p', 'wait_for_recorder:=recorder/ready')
    plant = procs.node('plant', 'plant_node', '--params-file', params, '-p', 'duration:=2.0',
                       '-p', 'wait_for_subscribers:=2', *ready)
    ctrl = procs.node('controller', 'controller_node', '--params-file', params, *ready)
    traj = procs.node('trajectory', 'trajectory_node', '--params-file', params, *ready)
    assert procs.wait(plant, 90) == 0, procs.output(plant)
    deadline = time.monotonic() + 20
    while 'parameters of trajectory fetched' not in procs.output(rec)[1] and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    # let the last messages arrive: the recorder makes its data durable every second, so the
    # unfinished bag shows what it received. A recorder starved on a loaded machine can be
    # seconds behind: wait for every tick, then until the bag stops growing (re-sent ticks)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with BagReader(bag) as r:
                if r.topics['/joint_states'].count >= 2000:
                    break
        except Exception:  # noqa: BLE001 - the file is being written
            pass
        time.sleep(0.5)
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and time.monotonic() - since < 2.5:
        time.sleep(0.5)
        try:
            with BagReader(bag) as r:
                now = r.topics['/joint_states'].count
        except Exception:  # noqa: BLE001 - the file is being written
            continue
        if now != last:
            last, since = now, time.monotonic()
    procs.stop(rec, grace=15.0)                        # SIGINT: the bag is finished
    assert rec.returncode == 0, procs.output(rec)
    meta = _metadata(bag)
    assert meta['version'] == 8
    with BagReader(bag) as r:
        counts = {t: r.topics[t].count for t in DATA_TOPICS}
        diag = r.read_series(['/plant/diagnostics'])['/plant/diagnostics']
        data = r.read_series(['/joint_commands', '/reference'])
    last = {kv.key: kv.value for kv in diag[-1][1].status[0].values}
    resends = int(last['resends'])
    assert last['ticks'] == '2000' and last['command_timeouts'] == '0'
    # Every node waited for the recorder: every state is there (tick 0 may have been re-sent
    # at start-up), and every tick of the other topics from tick 0 on. The controller may go
    # on commanding a safe hold after the plant has gone (more messages with the last stamp).
    assert counts['/joint_states'] == 2000 + resends
    with BagReader(bag) as r:
        motor = r.read_series(['/motor_states'])['/motor_states'].stamp_ns.tolist()
    for topic, stamps in (('/motor_states', motor),
                          ('/joint_commands', data['/joint_commands'].stamp_ns.tolist()),
                          ('/reference', data['/reference'].stamp_ns.tolist())):
        assert sorted(set(stamps)) == [k * 1_000_000 for k in range(2000)], topic
    assert counts['/motor_states'] == len(motor) == 2000
    assert counts['/effort_controller/commands'] >= 2000
    for p in (ctrl, traj):      # none gave up waiting for the recorder
        assert 'the recorder has not matched' not in procs.output(p)[1], procs.output(p)[1]
    # parameters fetched from the nodes' parameter services
    scenario = load_scenario(yaml.safe_load((bag / 'params.yaml').read_text()))
    assert scenario == replace(load_scenario('default'), name='recorded', duration=2.0)
    assert (bag / 'ros_params.yaml').is_file()


def test_lockstep_output_waits_until_the_recorder_is_matched(ros_context, executor, spin):
    """
    A lockstep node publishes its first message only when the recorder will receive it.

    The trajectory node (``wait_for_recorder``) on a hand-fed ``/clock``: no reference before
    the recorder reports every topic matched; none while its publisher has not matched the
    recorder's subscription (the writer's side of the match, stubbed unmatched); then the
    reference, which the recorder receives.
    """
    from rclpy.node import Node
    from std_msgs.msg import String
    from trajectory_msgs.msg import JointTrajectory
    from conftest import make_node
    from manip_control.nodes import cdr
    from manip_control.nodes.recorder_gate import READY_QOS
    from manip_control.nodes.ros_params import trajectory_specs
    from manip_control.nodes.trajectory_node import TrajectoryNode
    traj = make_node(TrajectoryNode, ros_context, trajectory_specs(),
                     {'wait_for_recorder': 'recorder/ready'})
    rec = Node('recorder', context=ros_context)
    try:
        got = []
        rec.create_subscription(JointTrajectory, '/reference', got.append, 10)
        ready = rec.create_publisher(String, '~/ready', READY_QOS)
        executor.add_node(traj)
        executor.add_node(rec)
        gate = traj._recorder_gate
        tick = cdr.encode_clock(0)
        traj._on_clock(tick)
        assert traj.published == 0 and gate.missing() == ['the recorder readiness report']
        ready.publish(String(data='matched 0/1: '))
        ready.publish(String(data='matched 1/1: /reference'))
        assert spin(executor, 10.0, lambda: gate.recorded == {'/reference'})
        pub = traj._ref_pub
        pub.get_subscription_count = lambda: 0      # the writer has not matched it yet
        spin(executor, 0.5)
        traj._on_clock(tick)
        assert traj.published == 0 and gate.missing() == ['/reference']
        del pub.get_subscription_count
        assert spin(executor, 10.0, lambda: not gate.missing())
        traj._on_clock(tick)
        assert traj.published == 1
        assert spin(executor, 10.0, lambda: len(got) == 1)
    finally:
        rec.destroy_node()


def test_recorder_gate_gives_up_after_its_timeout_with_a_warning(ros_context):
    from conftest import make_node
    from manip_control.nodes.recorder_gate import format_ready
    from manip_control.nodes.recorder_gate import parse_ready
    from manip_control.nodes.recorder_gate import RecorderGate
    from manip_control.nodes.ros_params import trajectory_specs
    from manip_control.nodes.trajectory_node import TrajectoryNode
    assert parse_ready('matched 2/2: /a /b') == {'/a', '/b'}
    # what the recorder writes is what the gate reads
    assert format_ready(['/a', '/b'], 2) == 'matched 2/2: /a /b'
    assert parse_ready(format_ready(['/a', '/b'], 2)) == {'/a', '/b'}
    assert parse_ready(format_ready(['/a'], 2)) is None
    for text in ('matched 1/2: /a', 'matched 0/0: ', 'matched x/2: /a', 'ready', ''):
        assert parse_ready(text) is None, text
    node = make_node(TrajectoryNode, ros_context, trajectory_specs(), {})
    gate = RecorderGate(node, 'nobody/ready', 5.0)
    warnings = []
    node.get_logger().warning = warnings.append
    clock = [100.0]
    assert not gate.ready(lambda: clock[0])
    clock[0] = 105.0
    assert not gate.ready(lambda: clock[0]) and not warnings
    clock[0] = 105.1
    assert gate.ready(lambda: clock[0]) and gate.opened
    assert len(warnings) == 1 and 'the recorder readiness report' in warnings[0]
    assert gate.ready(lambda: clock[0]) and len(warnings) == 1
    gate.destroy()


# ---------------------------------------------------------------------------------------------
# crashes and write errors

def _sim_args(*args):
    return [sys.executable, '-m', 'manip_control.nodes.sim', '--quiet', *args]


def _storage_file(bag):
    files = [p for p in bag.glob('*') if p.suffix in ('.mcap', '.db3')]
    return files[0] if files else None


def _wait_for_data(path_of, seconds):
    """Wait until the storage file holds data (a chunk or a commit), then ``seconds`` more."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        f = path_of()
        if f is not None and f.stat().st_size > 100_000:
            break
        time.sleep(0.1)
    else:
        pytest.fail('the recorder wrote no data within 60 s')
    time.sleep(seconds)


def _kill(p):
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(10)
    return time.time_ns()


def _check_recovered(bag, kill_ns, tmp_path):
    """Check a killed recording: read and analysed (recovered), at most ~1 s lost."""
    with BagReader(bag) as r:
        assert r.metadata_version is None and r.recovered
        assert 'no metadata.yaml' in r.recovered_reason
        js = r.read_series(['/joint_states'])['/joint_states']
        counts = {t: i.count for t, i in r.topics.items()}
    assert len(js) > 500
    # realtime mode: receive stamps are wall-clock time. The writer makes its data durable
    # at least every second (timer every 0.25 s), so what was lost is the last second or so;
    # 1 s of margin for this loaded 2-core machine.
    lost_s = (kill_ns - int(js.recv_ns[-1])) / 1e9
    assert 0.0 <= lost_s < 2.0, lost_s
    assert (np.diff(js.stamp_ns) > 0).all()
    proc = subprocess.run(_analyze_args(bag, tmp_path / 'rep'), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep['bag']['recovered'] is True
    assert rep['notes'][0].startswith('recovered bag: ')
    assert 'the data read ends at' in rep['notes'][0]
    assert rep['timing']['state']['count'] == len(js)
    return counts


def _analyze_args(bag, out):
    return [sys.executable, '-m', 'manip_control.bag_analysis', str(bag), '--out', str(out),
            '--json', '--quiet', '--no-plots']


def _check_reindex(bag, counts):
    """manip-bag reindex: metadata v8 that rosbags (and mcap's reader) accept, same counts."""
    from rosbags.rosbag2 import Reader
    proc = subprocess.run([sys.executable, '-m', 'manip_control.bag_tool', 'reindex',
                           str(bag)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    meta = _metadata(bag)
    assert meta['version'] == 8
    assert {t['topic_metadata']['name']: t['message_count']
            for t in meta['topics_with_message_count']} == counts
    assert meta['message_count'] == sum(counts.values())
    with Reader(bag) as reader:
        assert {c.topic: c.msgcount for c in reader.connections} == counts
        n = sum(1 for c, _, _ in reader.messages() if c.topic == '/joint_states')
    assert n == counts['/joint_states']
    with BagReader(bag) as r:
        assert not r.recovered and r.metadata_version == 8
        js = r.read_series(['/joint_states'])['/joint_states']
    f = _storage_file(bag)
    if f.suffix == '.mcap':
        # decoding check with the mcap library's own ROS 2 decoder
        from mcap.reader import make_reader
        from mcap_ros2.decoder import DecoderFactory
        with open(f, 'rb') as fh:
            reader = make_reader(fh, decoder_factories=[DecoderFactory()])
            assert reader.get_summary().statistics.message_count == sum(counts.values())
            pos = [list(m.position) for _, _, _, m in
                   reader.iter_decoded_messages(topics=['/joint_states'])]
        np.testing.assert_array_equal(np.array(pos), js.position)


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_killed_manip_sim_bag_is_recovered_and_reindexed(procs, tmp_path, storage):
    bag = tmp_path / 'killed'
    p = procs.start('sim', _sim_args('--mode', 'realtime', '--duration', '30', '--bag', str(bag),
                                     '--storage', storage))
    _wait_for_data(lambda: _storage_file(bag), 2.5)
    assert p.poll() is None, procs.output(p)
    kill_ns = _kill(p)
    assert not (bag / 'metadata.yaml').exists()
    counts = _check_recovered(bag, kill_ns, tmp_path)
    _check_reindex(bag, counts)


def test_killed_recorder_process_loses_at_most_the_last_second(procs, tmp_path):
    bag = tmp_path / 'rec'
    sim = procs.start('sim', _sim_args('--mode', 'realtime', '--duration', '60'))
    rec = procs.node('recorder', 'recorder_node', '-p', f'bag:={bag}')
    _wait_for_data(lambda: _storage_file(bag), 2.5)
    assert rec.poll() is None, procs.output(rec)
    kill_ns = _kill(rec)
    procs.stop(sim)
    counts = _check_recovered(bag, kill_ns, tmp_path)
    assert counts['/joint_states'] > 500


# Sets the limit in a fresh interpreter that then execs the command: a preexec_fn would run
# Python in a fork of this multi-threaded (DDS) process, which can deadlock.
_LIMIT_AND_EXEC = (
    'import os, resource, signal, sys; '
    'signal.signal(signal.SIGXFSZ, signal.SIG_IGN); '     # writes fail with EFBIG instead
    'n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); '
    'os.execvp(sys.argv[2], sys.argv[2:])')


def _with_file_size_limit(limit: int, cmd: list) -> list:
    """Return ``cmd`` run under RLIMIT_FSIZE = ``limit`` bytes."""
    return [sys.executable, '-c', _LIMIT_AND_EXEC, str(limit), *map(str, cmd)]


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_file_size_limit_fails_loudly_and_metadata_counts_the_file(procs, tmp_path, storage):
    """A real RLIMIT_FSIZE (EFBIG, as a full disk): exit 1, lost messages counted."""
    bag = tmp_path / 'full'
    p = procs.start('sim', _with_file_size_limit(3_000_000, _sim_args(
        '--duration', '6', '--bag', str(bag), '--storage', storage)))
    code = procs.wait(p, 180)
    out, err = procs.output(p)
    assert code == 1, (out, err)
    assert 'bag written' not in out
    last = err.strip().splitlines()[-1]
    assert last.startswith('error: ') and 'write error' in last, err
    m = re.search(r'(\d+) messages not recorded from bag time ([0-9.]+) s .* holds the (\d+) '
                  r'messages', last)
    assert m, last
    lost, first_lost_s, held = int(m.group(1)), float(m.group(2)), int(m.group(3))
    assert lost > 1000 and held > 1000
    # metadata.yaml counts what the file holds, never more
    meta = _metadata(bag)
    counts = {t['topic_metadata']['name']: t['message_count']
              for t in meta['topics_with_message_count']}
    assert meta['message_count'] == sum(counts.values()) == held
    from manip_control.bag_storage import open_storage_reader
    reader = open_storage_reader(_storage_file(bag))
    try:
        assert {t.topic: t.count for t in reader.topics if t.count} == \
            {t: n for t, n in counts.items() if n}
        assert reader.end_ns / 1e9 <= first_lost_s
    finally:
        reader.close()
    # everything sent was either recorded or counted as lost (6 s at 1 kHz, 5 data topics)
    assert held + lost >= 30_000
    with BagReader(bag) as r:
        js = r.read_series(['/joint_states'])['/joint_states']
    assert len(js) == counts['/joint_states']
    assert js.stamp_ns[-1] / 1e9 <= first_lost_s
    if storage == 'mcap':
        # the file ends without footer: the error line says what makes it readable, and
        # it does (rosbags refuses the file before, reads every held message after)
        assert f'manip-bag reindex {bag} makes it readable' in last, last
        from rosbags.rosbag2 import Reader
        with pytest.raises(Exception):
            with Reader(bag) as r:
                list(r.messages())
        done = subprocess.run([sys.executable, '-m', 'manip_control.bag_tool', 'reindex',
                               str(bag)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        with Reader(bag) as r:
            assert sum(1 for _ in r.messages()) == held


def test_standalone_recorder_exits_nonzero_on_write_error(procs, tmp_path):
    bag = tmp_path / 'rec_full'
    sim = procs.start('sim', _sim_args('--mode', 'realtime', '--duration', '60'))
    rec = procs.start('recorder', _with_file_size_limit(1_000_000, [
        sys.executable, '-m', 'manip_control.nodes.recorder_node',
        '--ros-args', '-p', f'bag:={bag}', '-p', 'storage:=sqlite3']))
    deadline = time.monotonic() + 60
    while 'write error' not in procs.output(rec)[1] and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    procs.stop(rec, grace=15.0)     # SIGINT: the recorder drains (up to 5 s), then finishes
    procs.stop(sim)
    out, err = procs.output(rec)
    assert rec.returncode == 1, (out, err)
    assert re.search(r'error: .*write error .*\d+ messages not recorded from bag time', err), err
    meta = _metadata(bag)
    with BagReader(bag) as r:
        assert {t: i.count for t, i in r.topics.items() if i.count} == \
            {t['topic_metadata']['name']: t['message_count']
             for t in meta['topics_with_message_count'] if t['message_count']}


# -- the recorder in the process of the nodes it records: taps ----------------------------------

def _spin_until(executor, predicate, seconds=10.0):
    end = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < end, 'timed out'
        executor.spin_once(timeout_sec=0.01)


def _bag_payloads(bag, topic):
    with BagReader(bag) as r:
        return [bytes(raw) for _, _, raw in r.raw_messages([topic])]


def test_tap_records_once_and_still_records_publishers_outside_the_tap(ros_context, tmp_path):
    """A tapped topic: its own messages once, another publisher's through a subscription."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from manip_control.nodes.cdr import JointStateEncoder
    from manip_control.nodes.common import data_qos
    from manip_control.nodes.recorder_node import RecorderNode
    topic = '/tap_test/joint_states'
    src = Node('tapped', context=ros_context)
    other = Node('outside', context=ros_context)
    rec = RecorderNode(context=ros_context, parameter_overrides=_rec_params(tmp_path, topic))
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (src, other, rec):
        ex.add_node(n)
    enc = JointStateEncoder(['a'])
    own = src.create_publisher(JointState, topic, data_qos())
    rec.tap(own)
    sent_own, sent_other = [], []
    try:
        for k in range(50):             # the tap alone: no subscription, nothing through DDS
            sent_own.append(bytes(enc.encode(k, [k], [0.0], [0.0])))
            own.publish(sent_own[-1])
        assert rec._taps[topic].shared is None and rec.count_subscribers(topic) == 0
        foreign = other.create_publisher(JointState, topic, data_qos())
        # the watch subscribes once the graph lists a publisher outside the tap
        _spin_until(ex, lambda: rec._taps[topic].shared is not None
                    and rec._taps[topic].shared.get_publisher_count() == 2)
        for k in range(50, 250):
            sent_own.append(bytes(enc.encode(k, [k], [1.0], [0.0])))
            own.publish(sent_own[-1])
            sent_other.append(bytes(enc.encode(k, [k], [2.0], [0.0])))
            foreign.publish(sent_other[-1])
            # the same bytes from outside are another message, recorded as well
            if k % 50 == 0:
                own.publish(sent_own[-1])
                sent_own.append(sent_own[-1])
                foreign.publish(sent_own[-1])
                sent_other.append(sent_own[-1])
            ex.spin_once(timeout_sec=0)
        _spin_until(ex, lambda: rec.counts()[topic] == len(sent_own) + len(sent_other))
        end = time.monotonic() + 0.3       # nothing more comes (no copy recorded twice)
        while time.monotonic() < end:
            ex.spin_once(timeout_sec=0.01)
        assert rec.counts()[topic] == len(sent_own) + len(sent_other)
        assert rec._taps[topic].dropped == 200 + 4      # each tapped copy taken once
    finally:
        rec.destroy_node()
    got = _bag_payloads(tmp_path / 'bag', topic)
    assert sorted(got) == sorted(sent_own + sent_other)


def _rec_params(tmp_path, *topics):
    from rclpy.parameter import Parameter
    return [Parameter('bag', value=str(tmp_path / 'bag')),
            Parameter('topics', value=list(topics))]


def test_tap_moves_to_the_new_publisher_of_a_reconfigured_controller(ros_context, tmp_path):
    """A controller configured again makes new command publishers: the tap follows them."""
    from rclpy.lifecycle import TransitionCallbackReturn as R
    runner = sim.SimRunner(sim.load_run_config('default', duration=0.2), bag=tmp_path / 'bag',
                           context=ros_context)
    try:
        c = runner.controller
        taps = runner.recorder._taps
        first = c._cmd_pub
        assert taps['/joint_commands'].publisher is first
        assert taps['/effort_controller/commands'].publisher is c._array_pub
        assert c.trigger_deactivate() == R.SUCCESS and c.trigger_cleanup() == R.SUCCESS
        assert c.trigger_configure() == R.SUCCESS and c.trigger_activate() == R.SUCCESS
        assert c._cmd_pub is not first
        assert taps['/joint_commands'].publisher is c._cmd_pub
        assert taps['/effort_controller/commands'].publisher is c._array_pub
        out = runner.execute()
    finally:
        runner.destroy()
    assert out.ticks == 200
    for topic in DATA_TOPICS:
        assert out.recorded[topic] == out.published[topic] == 200, (topic, out.recorded)


def test_tapped_messages_are_stamped_with_the_tick_they_belong_to(ros_context, tmp_path):
    """In lockstep the receive stamp of every loop message is the sim time of its tick."""
    runner = sim.SimRunner(sim.load_run_config('default', duration=0.3), bag=tmp_path / 'bag',
                           context=ros_context)
    try:
        assert runner.recorder.tapped_topics == set(DATA_TOPICS)
        runner.execute()
    finally:
        runner.destroy()
    ticks = [k * 1_000_000 for k in range(300)]
    with BagReader(tmp_path / 'bag') as r:
        for topic in DATA_TOPICS:
            assert [t for _, t, _ in r.raw_messages([topic])] == ticks, topic


# ---------------------------------------------------------------------------------------------
# a standalone recorder that the host does not run for a while


def _proc_state(pid: int) -> str:
    """State letter of ``pid`` in /proc (``T``: stopped)."""
    with open(f'/proc/{pid}/stat') as fh:
        return fh.read().rsplit(') ', 1)[-1][:1]


def test_stopped_standalone_recorder_loses_nothing(ros2_ws, ros2_procs, tmp_path, probe, spin,
                                                   executor):
    """
    ``sim.launch.py bag:=...`` (separate processes): the recorder stopped for 200 and 500 ms.

    SIGSTOP / SIGCONT of the recorder process stands for a host that does not run it (a
    loaded machine) for a stated time, while the lockstep loop goes on. Every tick the plant
    counted must be in the bag, on every topic: the publishers still hold what the recorder
    missed and send it again.
    """
    from rosgraph_msgs.msg import Clock
    from test_launch_integration import _node_pids, launch_args, read_bag, stamped_efforts
    from test_launch_integration import text_of
    bag = tmp_path / 'stopped'
    duration = 8.0
    probe.sub(Clock, '/clock', depth=1)
    executor.add_node(probe.node)
    clocks = probe.msgs['/clock']

    def now_ms():
        return clocks[-1].clock.sec * 1000 + clocks[-1].clock.nanosec // 1_000_000

    p = ros2_procs.start('sim_launch', launch_args(ros2_ws, 'sim.launch.py',
                                                   f'duration:={duration}', f'bag:={bag}'))
    assert spin(executor, 120, until=lambda: clocks and now_ms() >= 300), \
        text_of(ros2_procs, p)[-4000:]
    rec = _node_pids(text_of(ros2_procs, p))['recorder']
    paused = []
    try:
        for seconds in (0.2, 0.5):
            spin(executor, 0.3)
            before = now_ms()
            os.kill(rec, signal.SIGSTOP)
            t0 = time.monotonic()
            while _proc_state(rec) != 'T':
                time.sleep(0.001)
            spin(executor, seconds - (time.monotonic() - t0))
            assert _proc_state(rec) == 'T'
            os.kill(rec, signal.SIGCONT)
            spin(executor, 0.05)
            paused.append((seconds, now_ms() - before))
    finally:
        os.kill(rec, signal.SIGCONT)
    text = text_of(ros2_procs, p)
    assert 'run finished' not in text, 'the run ended before the recorder was stopped'
    assert ros2_procs.wait(p, 180) == 0, text_of(ros2_procs, p)[-5000:]
    # the loop went on while the recorder was stopped (else the test shows nothing)
    for seconds, ticks in paused:
        assert ticks >= 100 * seconds, paused
    counts, diag = read_bag(bag)
    ticks, resends = int(diag['ticks']), int(diag['resends'])
    assert ticks == int(duration * 1000)
    assert counts['/joint_states'] == ticks + resends, (counts, paused)
    assert counts['/motor_states'] == ticks, (counts, paused)
    assert ticks <= counts['/reference'] <= ticks + resends, (counts, paused)
    assert counts['/joint_commands'] == counts['/effort_controller/commands'], counts
    # every command the plant took is in the bag: one per tick but for the ticks whose
    # command did not come within the lockstep timeout (a starved host can delay the
    # controller too), plus the late (stale) ones, which the bag keeps as well; and last the
    # controller's zero at exit, stamped with the last tick, after the plant ended
    timeouts, stale = int(diag['command_timeouts']), int(diag['stale_commands'])
    efforts = stamped_efforts(bag, '/joint_commands')
    last_ns = (ticks - 1) * 1_000_000
    assert efforts[-1][0] == last_ns and not any(efforts[-1][1]), efforts[-3:]
    assert len(efforts) - 1 == ticks - timeouts + stale, (dict(counts), diag, paused)
    stamps = {s for s, _ in efforts}
    all_ticks = {k * 1_000_000 for k in range(ticks)}
    assert stamps <= all_ticks and len(all_ticks - stamps) <= timeouts, (counts, diag, paused)
    print(f'\n[recorder] stopped for {", ".join(f"{s * 1e3:.0f} ms" for s, _ in paused)} '
          f'while the loop ran {", ".join(f"{t} ticks" for _, t in paused)}: {counts}, '
          f'{timeouts} lockstep timeouts')
