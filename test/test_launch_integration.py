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
The launch files run with the real ``ros2 launch`` on a colcon install of this working tree.

The workspace is built once per session (conftest ``ros2_ws``: ``colcon build
--symlink-install``, ``source install/setup.bash``), so ``ros2 launch manip_control ...`` and
``FindPackageShare`` resolve as on a ROS machine. No test races the start of a run: the sim
run is checked from its bag (the plant waits for the recorder before tick 0) and from the
launch output; the hardware test's probe subscribes before the controller starts. Skipped,
with the reason, where the ``ros2`` tools or colcon are missing.
"""

from __future__ import annotations

from collections import Counter
import json
import math
import os
from pathlib import Path
import re
import signal
import subprocess
import time

from conftest import Processes, which
import pytest
import yaml

#: simulated seconds of the launch runs (short: the suite must stay fast)
DURATION = 3.0
TICKS = 3000
#: lines that must never appear in the output of a launch run
FORBIDDEN = ('Traceback', '[FATAL]', 'KeyboardInterrupt', 'process has died')
DATA_TOPICS = ('/joint_states', '/motor_states', '/joint_commands',
               '/effort_controller/commands', '/reference')


def text_of(procs: Processes, p) -> str:
    """Stdout and stderr of ``p`` so far, as one text."""
    out, err = procs.output(p)
    return out + '\n' + err


def wait_for_text(procs: Processes, p, needle: str, timeout: float) -> str:
    """Wait until ``needle`` appears in the output of ``p``; return the output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = text_of(procs, p)
        if needle in text:
            return text
        if p.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f'{p.name}: no {needle!r} within {timeout} s\n{text_of(procs, p)[-4000:]}')


def assert_clean(text: str, allow_errors: bool = False) -> None:
    """No traceback, no FATAL line, no process that died (and no ERROR line, unless allowed)."""
    for bad in FORBIDDEN + (() if allow_errors else ('[ERROR]',)):
        assert bad not in text, f'{bad!r} in the output:\n{text[-5000:]}'


def finished_cleanly(text: str, names) -> None:
    """Every process in ``names`` was reported by launch as finished cleanly (exit 0)."""
    for name in names:
        assert re.search(rf'\[INFO\] \[{name}-\d+\]: process has finished cleanly', text), \
            f'{name} did not finish cleanly:\n{text[-5000:]}'


def read_bag(path: Path) -> tuple[Counter, dict]:
    """Message counts per topic, read back from the bag, and the last plant diagnostics."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    counts: Counter = Counter()
    diag: dict = {}
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        for conn, _, raw in reader.messages():
            counts[conn.topic] += 1
            if conn.topic.endswith('plant/diagnostics'):
                msg = reader.deserialize(raw, conn.msgtype)
                diag = {kv.key: kv.value for kv in msg.status[0].values}
    meta = yaml.safe_load((path / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    in_meta = {t['topic_metadata']['name']: t['message_count']
               for t in meta['topics_with_message_count']}
    assert dict(counts) == {k: v for k, v in in_meta.items() if v}, (counts, in_meta)
    return counts, diag


def tick_counts(path: Path, topics) -> Counter:
    """
    Ticks per topic in the bag: distinct header stamps (a tick sent again counts once).

    Before the controller's first command the plant sends tick 0 again every 0.1 s (and the
    trajectory its reference), which a starved start repeats tens of times.
    ``/effort_controller/commands`` has no header: its messages, less the repeats of
    ``/joint_commands`` (the controller publishes the two together).
    """
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    stamps: dict = {t: [] for t in topics}
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        conns = [c for c in reader.connections if c.topic in stamps]
        for conn, _, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            h = getattr(msg, 'header', None)
            stamps[conn.topic].append(None if h is None else h.stamp.sec * 10 ** 9
                                      + h.stamp.nanosec)
    out = Counter({t: len(set(v)) if v and v[0] is not None else len(v)
                   for t, v in stamps.items()})
    for t, v in stamps.items():
        if v and v[0] is None and t.endswith('effort_controller/commands'):
            cmds = stamps.get(t.replace('effort_controller/commands', 'joint_commands'), [])
            out[t] -= len(cmds) - len(set(cmds))
    return out


def stamped_efforts(path: Path, topic: str) -> list[tuple[int, list[float]]]:
    """(header stamp [ns], effort) of every JointState on ``topic``, in bag order."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    out = []
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        for conn, _, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            out.append((msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec,
                        [float(x) for x in msg.effort]))
    return out


def bag_tracking(path: Path) -> dict:
    """Tracking figures computed from the bag: e = q - q_d matched by stamp, peak command."""
    import numpy as np
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    q, qd, tau = {}, {}, []
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        for conn, _, raw in reader.messages():
            if conn.topic not in ('/joint_states', '/reference', '/joint_commands'):
                continue
            msg = reader.deserialize(raw, conn.msgtype)
            stamp = msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec
            if conn.topic == '/joint_states':
                q.setdefault(stamp, np.array(msg.position, dtype=float))
            elif conn.topic == '/reference':
                qd.setdefault(stamp, np.array(msg.points[0].positions, dtype=float))
            else:
                tau.append(np.array(msg.effort, dtype=float))
    stamps = sorted(set(q) & set(qd))
    err = np.array([q[s] - qd[s] for s in stamps])
    return {'samples': len(stamps), 'rms': np.sqrt(np.mean(err ** 2, axis=0)),
            'max': np.abs(err).max(axis=0), 'peak_tau': np.abs(np.array(tau)).max(axis=0)}


def launch_args(ros2_ws, file: str, *args: str) -> list[str]:
    """``ros2 launch manip_control FILE ARGS...``."""
    return [ros2_ws.ros2, 'launch', 'manip_control', file, *args]


# --------------------------------------------------------------------------------------------
# sim.launch.py, finite duration, with a bag: one run, several checks


@pytest.fixture(scope='module')
def sim_run(ros2_ws, tmp_path_factory):
    """
    ``ros2 launch manip_control sim.launch.py duration:=3.0 bag:=runs/r1`` run to its end.

    Started as the README's ROS route does: ``source install/setup.bash`` in the workspace,
    then ``ros2 launch``.
    """
    tmp = tmp_path_factory.mktemp('sim_launch')
    bag = ros2_ws.path / 'runs' / 'r1'
    assert not bag.exists()
    procs = Processes(ros2_ws.env, tmp)
    try:
        cmd = (f'source install/setup.bash && ros2 launch manip_control sim.launch.py '
               f'duration:={DURATION} bag:=runs/r1')
        p = procs.start('sim_launch', ['bash', '-c', cmd], cwd=str(ros2_ws.path))
        rc = procs.wait(p, 180)
        yield {'rc': rc, 'text': text_of(procs, p), 'bag': bag}
    finally:
        procs.stop_all()


def test_sim_launch_ends_by_itself_with_every_process_clean(sim_run):
    text = sim_run['text']
    assert sim_run['rc'] == 0, text[-5000:]
    assert f'run finished: {TICKS} ticks, 0 command timeouts, 0 refused commands' in text, text
    finished_cleanly(text, ('plant', 'controller', 'trajectory', 'recorder'))
    assert_clean(text)


def test_sim_launch_bag_holds_every_published_message(sim_run):
    counts, diag = read_bag(sim_run['bag'])
    ticks, resends = int(diag['ticks']), int(diag['resends'])
    assert ticks == TICKS
    # the plant publishes one state per tick (+ re-sends of tick 0 until its command came)
    assert counts['/joint_states'] == ticks + resends, counts
    assert counts['/motor_states'] == ticks, counts
    # one reference per /clock (re-sent ticks may be answered again)
    assert ticks <= counts['/reference'] <= ticks + resends, counts
    # one command per tick, on both command topics; when the launch shuts down the controller
    # may still publish its zero-torque command (stamp of the last state) before the recorder
    # closes: counted by the recorder like any other
    assert counts['/joint_commands'] == counts['/effort_controller/commands'], counts
    commands = stamped_efforts(sim_run['bag'], '/joint_commands')
    stamps = [s for s, _ in commands]
    assert sorted(set(stamps)) == [k * 1_000_000 for k in range(ticks)]
    extra = len(commands) - ticks
    assert 0 <= extra <= resends + 1, (extra, resends)
    if len(commands) > ticks + resends:
        assert commands[-1] == ((ticks - 1) * 1_000_000, [0.0, 0.0]), commands[-3:]
    assert counts['/controller/diagnostics'] > 0 and counts['/plant/diagnostics'] > 0
    assert (sim_run['bag'] / 'params.yaml').is_file()


def test_sim_launch_equals_manip_offline(sim_run):
    """The separate-process lockstep run reproduces the offline loop of the same scenario."""
    off = subprocess.run([which('manip-offline'), '--config', 'default', '--duration',
                          str(DURATION), '--json'], capture_output=True, text=True,
                         timeout=120, check=True)
    offline = json.loads(off.stdout)
    got = bag_tracking(sim_run['bag'])
    assert got['samples'] == offline['ticks'] == TICKS
    for j in range(2):
        assert math.isclose(got['rms'][j], offline['rms_error_rad'][j], rel_tol=0,
                            abs_tol=1e-9), (got, offline)
        assert math.isclose(got['max'][j], offline['max_error_whole_run_rad'][j], rel_tol=0,
                            abs_tol=1e-9), (got, offline)
        assert math.isclose(got['peak_tau'][j], offline['peak_torque_cmd_Nm'][j], rel_tol=0,
                            abs_tol=1e-9), (got, offline)


# --------------------------------------------------------------------------------------------
# sim.launch.py until stopped: Ctrl-C and SIGTERM


def _node_pids(text: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r'\[INFO\] \[(\w+)-\d+\]: process started with pid \[(\d+)\]',
                                 text)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f'/proc/{pid}/stat') as fh:
            return fh.read().split(') ')[-1][:1] != 'Z'
    except OSError:
        return False


@pytest.mark.parametrize('how', ['ctrl-c', 'sigterm'])
def test_sim_launch_until_stopped_ends_cleanly(how, ros2_ws, ros2_procs, tmp_path, probe, spin,
                                               executor):
    """
    ``duration:=0`` runs until stopped; both ways of stopping close every node cleanly.

    ctrl-c: SIGINT to the process group of ``ros2 launch`` (what a terminal sends).
    sigterm: SIGTERM to ``ros2 launch`` alone (``kill PID``, a container stop): launch exits
    at once (upstream behaviour) and the nodes, started with MANIP_STOP_WITH_PARENT=1, get
    SIGTERM from the kernel and close cleanly themselves.
    """
    from rosgraph_msgs.msg import Clock
    bag = tmp_path / 'bag'
    probe.sub(Clock, '/clock')
    executor.add_node(probe.node)
    p = ros2_procs.start('sim_launch', launch_args(ros2_ws, 'sim.launch.py', 'duration:=0',
                                                   f'bag:={bag}'))
    clocks = probe.msgs['/clock']
    assert spin(executor, 90, until=lambda: any(c.clock.sec >= 1 for c in clocks)), \
        text_of(ros2_procs, p)[-4000:]
    pids = _node_pids(text_of(ros2_procs, p))
    assert set(pids) == {'plant', 'controller', 'trajectory', 'recorder'}, pids
    if how == 'ctrl-c':
        os.killpg(p.pid, signal.SIGINT)
        rc = ros2_procs.wait(p, 60)
        text = text_of(ros2_procs, p)
        assert rc == 0, text[-5000:]
        finished_cleanly(text, pids)
        assert_clean(text)
    else:
        os.kill(p.pid, signal.SIGTERM)
        ros2_procs.wait(p, 60)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in pids.values()), 'nodes left running'
        # launch is gone: the nodes' own log files tell how they ended
        logs = ''.join(f.read_text(errors='replace')
                       for f in Path(ros2_ws.env['ROS_LOG_DIR']).glob('*.log')
                       if any(f'_{pid}_' in f.name for pid in pids.values()))
        assert 'bag ' in logs and ' messages' in logs, logs[-3000:]   # the recorder closed it
        assert_clean(logs)
    read_bag(bag)                                      # readable, counts as in metadata
    ticks = tick_counts(bag, DATA_TOPICS)
    assert ticks['/joint_states'] >= 1000, ticks
    # every node stops at once: the last few ticks in flight may miss the bag
    for topic in DATA_TOPICS:
        assert abs(ticks['/joint_states'] - ticks[topic]) <= 10, ticks


# --------------------------------------------------------------------------------------------
# namespace


def test_sim_launch_under_a_namespace(ros2_ws, ros2_procs):
    """``namespace:=arm``: the loop closes under /arm and the params file applies there."""
    p = ros2_procs.start('sim_launch', launch_args(ros2_ws, 'sim.launch.py', 'namespace:=arm',
                                                   f'duration:={DURATION}'))
    rc = ros2_procs.wait(p, 180)
    text = text_of(ros2_procs, p)
    assert rc == 0, text[-5000:]
    assert 'commands from /arm/joint_commands' in text, text
    assert f'run finished: {TICKS} ticks, 0 command timeouts' in text, text
    # the file's lockstep watchdog (5 s), not the node's default (20 ms): its section applied
    assert 'state timeout 5000 ms' in text, text
    finished_cleanly(text, ('plant', 'controller', 'trajectory'))
    assert_clean(text)


RECORDED_RUNS = 3


def test_namespaced_launch_records_every_topic_from_the_first_tick(ros2_ws, ros2_procs,
                                                                   tmp_path):
    """
    ``namespace:=arm bag:=...``, several runs: every topic holds every tick in the bag.

    The plant starts only when the recorder has matched every recorded topic (its own
    ``motor_states`` included); before, the namespaced launch lost the first 423-472
    ``/arm/motor_states`` ticks in half of the runs.
    """
    for run in range(RECORDED_RUNS):
        bag = tmp_path / f'ns{run}'
        p = ros2_procs.start(f'sim_launch_ns{run}', launch_args(
            ros2_ws, 'sim.launch.py', 'namespace:=arm', 'duration:=2.0', f'bag:={bag}'))
        rc = ros2_procs.wait(p, 180)
        text = text_of(ros2_procs, p)
        assert rc == 0, text[-5000:]
        counts, diag = read_bag(bag)
        ticks, resends = int(diag['ticks']), int(diag['resends'])
        assert ticks == 2000, (run, counts)
        assert counts['/arm/motor_states'] == ticks, (run, counts)
        assert counts['/arm/joint_states'] == ticks + resends, (run, counts)
        assert ticks <= counts['/arm/reference'] <= ticks + resends, (run, counts)
        for topic in ('/arm/joint_commands', '/arm/effort_controller/commands'):
            assert ticks <= counts[topic] <= ticks + resends + 1, (run, topic, counts)
        stamps = sorted({s for s, _ in stamped_efforts(bag, '/arm/joint_commands')})
        assert stamps == [k * 1_000_000 for k in range(ticks)], run
        assert counts['/arm/controller/diagnostics'] > 0
        assert counts['/arm/plant/diagnostics'] > 0
        assert 'every recorded topic matched' in text, text[-5000:]


# --------------------------------------------------------------------------------------------
# sim.launch.py composed:=true: the same nodes in one process


def composed_summary(text: str) -> dict[str, tuple[int, int]]:
    """``{topic: (recorded, published)}`` from the summary line of the composed process."""
    m = re.search(r'\[composed\]: plant, controller, trajectory, recorder in one process: '
                  r'(\d+) ticks.*?recorded/published into \S+: (.*)', text)
    assert m, text[-5000:]
    return {t: (int(a), int(b)) for t, a, b in re.findall(r'(/\S+) (\d+)/(\d+)', m.group(2))}


def assert_every_tick_recorded(counts: Counter, diag: dict, ns: str = '') -> None:
    """Check that a finished lockstep run holds exactly one message per tick per topic."""
    ticks, resends = int(diag['ticks']), int(diag['resends'])
    assert ticks == TICKS
    assert counts[f'{ns}/joint_states'] == ticks + resends, counts
    assert counts[f'{ns}/motor_states'] == ticks, counts
    assert ticks <= counts[f'{ns}/reference'] <= ticks + resends, counts
    for topic in ('/joint_commands', '/effort_controller/commands'):
        # + at most the controller's zero-torque command at shutdown
        assert ticks <= counts[f'{ns}{topic}'] <= ticks + resends + 1, counts
    assert counts[f'{ns}/controller/diagnostics'] > 0 and counts[f'{ns}/plant/diagnostics'] > 0


@pytest.mark.parametrize('composed', [False, True], ids=['processes', 'composed'])
def test_sim_launch_urdf_arm_records_every_tick(ros2_ws, ros2_procs, composed):
    """
    ``ros2 launch manip_control sim.launch.py urdf:=panda.urdf duration:=3.0 bag:=runs/p1``.

    A 7-joint arm from its URDF, simulated with sized drives and friction, ends by itself
    with every process clean and every tick recorded; the arm follows its reference. The same
    with ``composed:=true`` (one process).
    """
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    name = 'p2' if composed else 'p1'
    bag = ros2_ws.path / 'runs' / name
    assert not bag.exists()
    cmd = (f'source install/setup.bash && ros2 launch manip_control sim.launch.py '
           f'urdf:={PANDA} duration:={DURATION} bag:=runs/{name}'
           + (' composed:=true' if composed else ''))
    p = ros2_procs.start('urdf_sim_launch', ['bash', '-c', cmd], cwd=str(ros2_ws.path))
    rc = ros2_procs.wait(p, 240)
    text = text_of(ros2_procs, p)
    assert rc == 0, text[-5000:]
    assert f'run finished: {TICKS} ticks, 0 command timeouts, 0 refused commands' in text, text
    if composed:
        assert set(_node_pids(text)) == {'composed'}, text[-5000:]
        finished_cleanly(text, ('composed',))
    else:
        finished_cleanly(text, ('plant', 'controller', 'trajectory', 'recorder'))
    assert_clean(text)
    counts, diag = read_bag(bag)
    assert_every_tick_recorded(counts, diag)
    # 7 joints on every topic; the tracking error of the last second is small
    states, refs = {}, {}
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        conns = [c for c in reader.connections if c.topic in ('/joint_states', '/reference')]
        for conn, _, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            stamp = msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec
            if conn.topic == '/joint_states':
                assert len(msg.name) == 7 and len(msg.position) == 7
                states[stamp] = list(msg.position)
            else:
                refs[stamp] = list(msg.points[0].positions)
    late = [k for k in states if k >= (TICKS - 1000) * 1_000_000 and k in refs]
    assert len(late) >= 900
    err = max(abs(a - b) for k in late for a, b in zip(states[k], refs[k]))
    assert err < 0.01, err
    params = yaml.safe_load((bag / 'ros_params.yaml').read_text())
    ctrl = next(v for k, v in params.items() if k.endswith('controller'))
    recorded = ctrl['ros__parameters']['robot_description']     # the URDF through xacro
    assert recorded.count('<joint ') == PANDA.read_text().count('<joint ') > 7, recorded[:300]
    print(f'\n[launch] sim.launch.py urdf:=panda.urdf{" composed:=true" * composed}: {TICKS} '
          f'ticks recorded on every topic, 7 joints; max |q - q_d| over the last second '
          f'{err:.2e} rad')


@pytest.fixture(scope='module')
def composed_run(ros2_ws, tmp_path_factory):
    """``ros2 launch manip_control sim.launch.py composed:=true duration:=3.0 bag:=runs/c1``."""
    tmp = tmp_path_factory.mktemp('composed_launch')
    bag = ros2_ws.path / 'runs' / 'c1'
    assert not bag.exists()
    procs = Processes(ros2_ws.env, tmp)
    try:
        cmd = (f'source install/setup.bash && ros2 launch manip_control sim.launch.py '
               f'composed:=true duration:={DURATION} bag:=runs/c1')
        p = procs.start('composed_launch', ['bash', '-c', cmd], cwd=str(ros2_ws.path))
        rc = procs.wait(p, 180)
        yield {'rc': rc, 'text': text_of(procs, p), 'bag': bag}
    finally:
        procs.stop_all()


def test_composed_launch_ends_by_itself_in_one_process(composed_run):
    text = composed_run['text']
    assert composed_run['rc'] == 0, text[-5000:]
    assert f'run finished: {TICKS} ticks, 0 command timeouts, 0 refused commands' in text, text
    # one process: launch started the composed executable and nothing else
    assert set(_node_pids(text)) == {'composed'}, text[-5000:]
    finished_cleanly(text, ('composed',))
    assert_clean(text)
    # the four nodes, under their own names, in it
    for node in ('plant', 'controller', 'trajectory', 'recorder'):
        assert f'] [{node}]: ' in text, node


def test_composed_launch_records_every_tick(composed_run):
    counts, diag = read_bag(composed_run['bag'])
    assert_every_tick_recorded(counts, diag)
    # what the process published, topic by topic, is what the bag holds
    for topic, (recorded, published) in composed_summary(composed_run['text']).items():
        assert recorded == published, (topic, recorded, published)
        if topic not in ('/joint_commands', '/effort_controller/commands'):
            assert counts[topic] == published, (topic, counts[topic], published)
    stamps = [s for s, _ in stamped_efforts(composed_run['bag'], '/joint_commands')]
    assert sorted(set(stamps)) == [k * 1_000_000 for k in range(TICKS)]
    # the resolved parameters beside the bag: the launch's values reached their nodes
    params = yaml.safe_load((composed_run['bag'] / 'ros_params.yaml').read_text())
    plant = params['plant']['ros__parameters']
    assert plant['duration'] == DURATION and plant['wait_for_subscribers'] == 2, plant
    assert params['controller']['ros__parameters']['mode'] == 'lockstep', params
    assert 'state timeout 5000 ms' in composed_run['text']     # the file's controller section


def test_composed_launch_equals_manip_offline(composed_run):
    """The same nodes and parameters in one process: the offline loop, bit for bit."""
    off = subprocess.run([which('manip-offline'), '--config', 'default', '--duration',
                          str(DURATION), '--json'], capture_output=True, text=True,
                         timeout=120, check=True)
    offline = json.loads(off.stdout)
    got = bag_tracking(composed_run['bag'])
    assert got['samples'] == offline['ticks'] == TICKS
    for j in range(2):
        assert math.isclose(got['rms'][j], offline['rms_error_rad'][j], rel_tol=0,
                            abs_tol=1e-9), (got, offline)
        assert math.isclose(got['max'][j], offline['max_error_whole_run_rad'][j], rel_tol=0,
                            abs_tol=1e-9), (got, offline)
        assert math.isclose(got['peak_tau'][j], offline['peak_torque_cmd_Nm'][j], rel_tol=0,
                            abs_tol=1e-9), (got, offline)


@pytest.mark.parametrize('how', ['ctrl-c', 'sigterm'])
def test_composed_launch_until_stopped_ends_cleanly(how, ros2_ws, ros2_procs, tmp_path, probe,
                                                    spin, executor):
    """
    ``composed:=true duration:=0`` until stopped: the process ends cleanly, the bag is closed.

    As for the separate processes: Ctrl-C to the process group of ``ros2 launch``, or SIGTERM
    to ``ros2 launch`` alone (the process gets SIGTERM from the kernel when launch is gone).
    Everything published before the stop is in the bag.
    """
    from rosgraph_msgs.msg import Clock
    bag = tmp_path / 'bag'
    probe.sub(Clock, '/clock')
    executor.add_node(probe.node)
    p = ros2_procs.start('composed_launch', launch_args(
        ros2_ws, 'sim.launch.py', 'composed:=true', 'duration:=0', f'bag:={bag}'))
    clocks = probe.msgs['/clock']
    assert spin(executor, 90, until=lambda: any(c.clock.sec >= 1 for c in clocks)), \
        text_of(ros2_procs, p)[-4000:]
    pids = _node_pids(text_of(ros2_procs, p))
    assert set(pids) == {'composed'}, pids
    if how == 'ctrl-c':
        os.killpg(p.pid, signal.SIGINT)
        rc = ros2_procs.wait(p, 60)
        text = text_of(ros2_procs, p)
        assert rc == 0, text[-5000:]
        finished_cleanly(text, pids)
        assert_clean(text)
    else:
        os.kill(p.pid, signal.SIGTERM)
        ros2_procs.wait(p, 60)
        deadline = time.monotonic() + 30
        while _alive(pids['composed']) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pids['composed']), 'the composed process was left running'
        # launch is gone: the process's own log file tells how it ended
        text = ''.join(f.read_text(errors='replace')
                       for f in Path(ros2_ws.env['ROS_LOG_DIR']).glob('*.log')
                       if f'_{pids["composed"]}_' in f.name)
        assert_clean(text)
    assert 'bag ' in text and ' messages' in text, text[-3000:]   # the recorder closed it
    counts, _ = read_bag(bag)
    assert counts['/joint_states'] >= 1000, counts
    # one process: what was published before the stop was taken from the queues
    for topic, (recorded, published) in composed_summary(text).items():
        assert recorded == published == counts[topic], (topic, recorded, published, counts)


def test_composed_launch_under_a_namespace(ros2_ws, ros2_procs, tmp_path):
    """``composed:=true namespace:=arm``: every node and topic under /arm, the file applies."""
    bag = tmp_path / 'bag'
    p = ros2_procs.start('composed_launch', launch_args(
        ros2_ws, 'sim.launch.py', 'composed:=true', 'namespace:=arm', f'duration:={DURATION}',
        f'bag:={bag}'))
    rc = ros2_procs.wait(p, 180)
    text = text_of(ros2_procs, p)
    assert rc == 0, text[-5000:]
    assert 'commands from /arm/joint_commands' in text, text
    assert f'run finished: {TICKS} ticks, 0 command timeouts' in text, text
    assert 'state timeout 5000 ms' in text, text      # the file's /**/controller section
    for node in ('plant', 'controller', 'trajectory', 'recorder'):
        assert f'] [arm.{node}]: ' in text, node
    finished_cleanly(text, ('composed',))
    assert_clean(text)
    counts, diag = read_bag(bag)
    assert all(t.startswith('/arm/') for t in counts), counts
    assert_every_tick_recorded(counts, diag, ns='/arm')


# --------------------------------------------------------------------------------------------
# hardware.launch.py against a driver-like process


def _watchdog(diag) -> str | None:
    """``watchdog_active`` of a plant DiagnosticArray ('True' / 'False')."""
    for st in diag.status:
        for kv in st.values:
            if kv.key == 'watchdog_active':
                return kv.value
    return None


@pytest.mark.parametrize('namespace', ['', 'arm'])
def test_hardware_launch_against_a_driver(namespace, ros2_ws, ros2_procs, probe, spin,
                                          executor):
    """
    The controller and trajectory of hardware.launch.py drive a real-time plant.

    The driver stand-in is the plant node in real-time mode taking Float64MultiArray efforts
    (what ros2_control's ForwardCommandController takes), as its own process. Without a
    namespace the topics are given as in docs/ros.md; with ``namespace:=arm`` the driver runs
    under /arm and the launch's relative topic defaults follow the namespace.
    """
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Float64MultiArray
    share = Path(ros2_ws.run([ros2_ws.ros2, 'pkg', 'prefix', 'manip_control']).stdout.strip())
    sim_params = share / 'share' / 'manip_control' / 'config' / 'sim_params.yaml'
    ns = f'/{namespace}' if namespace else ''
    probe.sub(Float64MultiArray, f'{ns}/effort_controller/commands')
    probe.sub(DiagnosticArray, f'{ns}/plant/diagnostics')
    executor.add_node(probe.node)
    driver = ros2_procs.start('driver', [
        ros2_ws.ros2, 'run', 'manip_control', 'plant', '--ros-args', '--params-file',
        str(sim_params), '-p', 'mode:=realtime', '-p', 'command_source:=effort_commands',
        '-p', 'duration:=0.0'] + (['-r', f'__ns:={ns}'] if ns else []))
    diags = probe.msgs[f'{ns}/plant/diagnostics']
    assert spin(executor, 60, until=lambda: diags), text_of(ros2_procs, driver)[-3000:]
    args = ([f'namespace:={namespace}'] if namespace else
            ['joint_states_topic:=/joint_states', 'command_topic:=/effort_controller/commands'])
    args.append(f'state_publisher:={ns}/plant')     # the driver stand-in's node
    p = ros2_procs.start('hardware_launch', launch_args(ros2_ws, 'hardware.launch.py', *args))
    cmds = probe.msgs[f'{ns}/effort_controller/commands']
    assert spin(executor, 90, until=lambda: len(cmds) >= 300), text_of(ros2_procs, p)[-4000:]
    assert all(len(c.data) == 2 and all(math.isfinite(x) for x in c.data) for c in cmds)
    assert any(abs(x) > 1.0 for c in cmds for x in c.data)      # holding the arm up
    # the driver takes them: its watchdog is off while commands flow
    n = len(diags)
    assert spin(executor, 10, until=lambda: any(
        _watchdog(d) == 'False' for d in diags[n:])), [d.status[0].message for d in diags]
    os.killpg(p.pid, signal.SIGINT)                      # Ctrl-C
    rc = ros2_procs.wait(p, 60)
    text = text_of(ros2_procs, p)
    assert rc == 0, text[-5000:]
    finished_cleanly(text, ('controller', 'trajectory'))
    # safe-mode ERROR lines may appear on a loaded machine (20 ms state timeout); no crash
    assert_clean(text, allow_errors=True)
    # without commands the driver's watchdog zeroes the torque
    n = len(diags)
    assert spin(executor, 10, until=lambda: any(_watchdog(d) == 'True' for d in diags[n:]))
    ros2_procs.stop(driver)
    assert driver.returncode == 0
    assert_clean(text_of(ros2_procs, driver), allow_errors=True)


PANDA = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
FAKE_DRIVER = Path(__file__).resolve().parent / 'fake_driver.py'


def _driver_log(path: Path, n: int):
    """``(cmds, states)`` of a fake-driver log: ``[(t, tau...)]``, ``[(t, q..., qd...)]``."""
    cmds, states = [], []
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts[0] == 'cmd' and len(parts) == 2 + n:
            cmds.append(tuple(float(v) for v in parts[1:]))
        elif parts[0] == 'state' and len(parts) == 2 + 2 * n:
            states.append(tuple(float(v) for v in parts[1:]))
    return cmds, states


def test_hardware_launch_urdf_arm_against_a_driver(ros2_ws, ros2_procs, probe, spin, executor,
                                                   tmp_path):
    """
    ``hardware.launch.py urdf:=panda.urdf`` drives a 7-joint arm through a driver.

    The driver is ``test/fake_driver.py --urdf``: the Panda with ideal actuators, holding
    the last Float64MultiArray forever (ForwardCommandController), brakes on until the first
    command. Without a trajectory node the controller holds the arm where it is; a
    JointTrajectory on /reference moves it; Ctrl-C ends with a zero command the driver holds.
    """
    import sys

    import numpy as np
    from std_msgs.msg import Float64MultiArray
    from trajectory_msgs.msg import JointTrajectory
    from trajectory_msgs.msg import JointTrajectoryPoint
    joints = [f'panda_joint{k}' for k in range(1, 8)]
    q0 = [0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.5]
    log = tmp_path / 'driver.log'
    probe.sub(Float64MultiArray, '/effort_controller/commands')
    ref_pub = probe.pub(JointTrajectory, '/reference')
    executor.add_node(probe.node)
    driver = ros2_procs.start('driver', [
        sys.executable, str(FAKE_DRIVER), '--urdf', str(PANDA), '--rate', '500', '--brake',
        '--extra-joints', '0', '--log', str(log), '--q0', *map(str, q0)])
    p = ros2_procs.start('hardware_launch', launch_args(
        ros2_ws, 'hardware.launch.py', f'urdf:={PANDA}', 'joint_states_topic:=/joint_states',
        'command_topic:=/effort_controller/commands', 'state_publisher:=/fake_driver'))
    cmds = probe.msgs['/effort_controller/commands']
    assert spin(executor, 90, until=lambda: len(cmds) >= 1000), text_of(ros2_procs, p)[-4000:]
    assert all(len(c.data) == 7 and all(math.isfinite(x) for x in c.data) for c in cmds)
    assert max(abs(x) for x in cmds[-1].data) > 5.0               # holding a real arm up
    # held where it is (no trajectory node): the arm has not moved from q0
    _, states = _driver_log(log, 7)
    q_now = np.array(states[-1][1:8])
    assert np.abs(q_now - q0).max() < 0.02, q_now
    # a reference moves it: 0.2 rad on joint 1, re-planned from the measured position
    target = list(q0)
    target[0] += 0.2
    msg = JointTrajectory(joint_names=joints,
                          points=[JointTrajectoryPoint(positions=target,
                                                       velocities=[0.0] * 7)])
    end = time.monotonic() + 20.0
    reached = None
    while reached is None and time.monotonic() < end:
        ref_pub.publish(msg)
        spin(executor, 0.1)
        _, states = _driver_log(log, 7)
        if states and np.abs(np.array(states[-1][1:8]) - target).max() < 0.005:
            reached = states[-1]
    assert reached is not None, (states[-1] if states else None, text_of(ros2_procs, p)[-3000:])
    os.killpg(p.pid, signal.SIGINT)                      # Ctrl-C
    rc = ros2_procs.wait(p, 60)
    text = text_of(ros2_procs, p)
    assert rc == 0, text[-5000:]
    finished_cleanly(text, ('controller',))
    assert_clean(text, allow_errors=True)
    time.sleep(0.5)
    ros2_procs.stop(driver)
    logged, _ = _driver_log(log, 7)
    assert logged[-1][1:] == (0.0,) * 7, logged[-3:]   # the driver holds a zero command
    print(f'\n[launch] hardware.launch.py urdf:=panda.urdf: {len(logged)} commands of 7 '
          f'joints; joint 1 moved 0.2 rad to within 5 mrad; the last command zero')


# --------------------------------------------------------------------------------------------
# arguments of every launch file, through the real launch library


@pytest.mark.parametrize('file', ['sim.launch.py', 'hardware.launch.py', 'display.launch.py'])
def test_launch_arguments_are_described(ros2_ws, file):
    done = ros2_ws.run(launch_args(ros2_ws, file, '--show-args'), timeout=60)
    assert done.returncode == 0, done.stderr
    names = re.findall(r"^    '(\w+)':$", done.stdout, re.M)
    expected = {'sim.launch.py': {'params_file', 'duration', 'namespace', 'headless', 'bag',
                                  'autostart', 'sigterm_timeout', 'log_level', 'composed',
                                  'urdf'},
                'hardware.launch.py': {'params_file', 'joint_states_topic', 'command_topic',
                                       'joint_commands_topic', 'reference_topic', 'namespace',
                                       'headless', 'autostart', 'sigterm_timeout',
                                       'log_level', 'state_publisher', 'urdf', 'trajectory',
                                       'mujoco'},
                'display.launch.py': {'model', 'use_sim_time'}}[file]
    assert set(names) == expected, done.stdout
    assert 'no description given' not in done.stdout, done.stdout


def _installed(ros2_ws, package: str) -> bool:
    return ros2_ws.run([ros2_ws.ros2, 'pkg', 'prefix', package], timeout=60).returncode == 0


def test_display_launch(ros2_ws, ros2_procs):
    """display.launch.py (and sim.launch.py headless:=false) need robot_state_publisher, rviz2."""
    missing = [p for p in ('robot_state_publisher', 'rviz2') if not _installed(ros2_ws, p)]
    if missing:
        pytest.skip(f'{" and ".join(missing)} not installed here (no ROS 2 distribution): '
                    'display.launch.py and sim.launch.py headless:=false are only checked '
                    'for their arguments (test_launch_arguments_are_described)')
    if not os.environ.get('DISPLAY'):
        pytest.skip('no DISPLAY for rviz2')
    p = ros2_procs.start('display', launch_args(ros2_ws, 'display.launch.py'))
    wait_for_text(ros2_procs, p, 'process started', 60)
    time.sleep(5)
    assert p.poll() is None, text_of(ros2_procs, p)
    os.killpg(p.pid, signal.SIGINT)
    ros2_procs.wait(p, 60)
    assert_clean(text_of(ros2_procs, p), allow_errors=True)
