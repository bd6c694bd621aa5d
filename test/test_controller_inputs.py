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
What the controller node says about inputs that cannot work (in-process nodes).

* an empty ``robot_description`` is refused unless the node is meant to be the planar 2R;
* joint states whose names cannot match the configured joints: one error naming the missing
  and the unexpected joints, and the diagnostics say it;
* real time without ``state_publisher``: one warning at configure, and the diagnostics say,
  that any single publisher of the joint states is trusted.
"""

from __future__ import annotations

from pathlib import Path
import time

import pytest

pytest.importorskip('rclpy')

from conftest import make_node  # noqa: E402, I100
from manip_control.nodes.controller_node import ControllerNode  # noqa: E402
from manip_control.nodes.ros_params import controller_specs  # noqa: E402
from manip_control.parameters import ParameterError  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

URDF = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf'
PANDA = URDF / 'panda.urdf'
PANDA_JOINTS = [f'panda_joint{k}' for k in range(1, 8)]


class _Logger:
    """Stands in for the node's logger: records ``(level, text)``."""

    def __init__(self):
        self.lines = []

    def _log(self, level, text):
        self.lines.append((level, str(text)))

    def debug(self, text, **kwargs):
        self._log('debug', text)

    def info(self, text, **kwargs):
        self._log('info', text)

    def warning(self, text, **kwargs):
        self._log('warning', text)

    warn = warning

    def error(self, text, **kwargs):
        self._log('error', text)

    def fatal(self, text, **kwargs):
        self._log('fatal', text)

    def at(self, level):
        return [t for k, t in self.lines if k == level]


def _recorded(node) -> _Logger:
    log = _Logger()
    node.get_logger = lambda: log
    return log


def _state(names, n_values=None, stamp_ns=None):
    m = JointState()
    t = time.time_ns() if stamp_ns is None else stamp_ns
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(t, 1_000_000_000)
    k = len(names) if n_values is None else n_values
    m.name, m.position, m.velocity = list(names), [0.1] * k, [0.0] * k
    return serialize_message(m)


# --------------------------------------------------------------------------------------------
# an empty robot_description


@pytest.mark.parametrize('text', ['', '  \n '])
def test_empty_description_is_refused_unless_the_2r_is_given(ros_context, text):
    """
    ``robot_description`` set but empty is refused by name (no silent 2R).

    The planar 2R runs when ``robot_description`` is not set at all, or when it is empty and
    the 2R's geometry (``nominal.arm.*``) is among the start values, as in the 2R params files
    that the launch files pass with their ``robot_description: ''``.
    """
    with pytest.raises(ParameterError, match=r'^parameter robot_description \(node '
                                             r'controller\): empty') as err:
        make_node(ControllerNode, ros_context, controller_specs(),
                  {'robot_description': text, 'mode': 'realtime'})
    assert '\n' not in str(err.value)
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'robot_description': text, 'nominal.arm.m1': 2.5, 'mode': 'realtime'},
                     node_name='controller_2r')
    assert node.arm is None and node.joints == ['joint1', 'joint2']
    node = make_node(ControllerNode, ros_context, controller_specs(), {'mode': 'realtime'},
                     node_name='controller_default')
    assert node.arm is None and node.joints == ['joint1', 'joint2']


def test_empty_description_exits_with_one_error_line(ros_env):
    """The executable: ``error: ...`` naming robot_description, exit code 2, no traceback."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, '-m', 'manip_control.nodes.controller_node',
                          '--ros-args', '-p', "robot_description:=''"], env=ros_env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: parameter robot_description'), lines
    assert 'Traceback' not in out.stderr


# --------------------------------------------------------------------------------------------
# joint states that cannot match the configured joints


@pytest.mark.parametrize('names', [['joint1', 'joint2', 'extra0'],
                                   PANDA_JOINTS[:5] + ['gripper']])
def test_unmatched_joint_states_are_named_once(ros_context, names):
    """
    A driver whose states cannot match the description: one error naming both lists.

    The Panda description against a 2R driver (no name in common) and against a driver
    that lacks two of the joints: every state is refused (``missing_joint``), the first one
    gives a single error that names the missing joints and the names that are not
    configured, the diagnostics (ERROR ``joint_names``) say the same; a matching state
    clears it.
    """
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'robot_description': PANDA.read_text(), 'mode': 'realtime',
                      'trigger': 'state', 'autostart': False})
    log = _recorded(node)
    node.trigger_configure()
    node.trigger_activate()
    for _ in range(200):
        node.on_joint_state(_state(names), None)
    missing = [j for j in PANDA_JOINTS if j not in names]
    unexpected = [n for n in names if n not in PANDA_JOINTS]
    named = [t for t in log.at('error') if 'missing' in t and all(j in t for j in missing)
             and all(n in t for n in unexpected)]
    assert len(named) == 1, log.at('error')
    d = node.safety.diagnostics_values()
    assert d['refused.joint_states.missing_joint'] == '200', d
    assert d['level'] == 'ERROR' and d['reason'] == 'joint_names', d
    assert all(j in d['detail'] for j in missing + unexpected), d['detail']
    assert all(j in d['joint_names_mismatch'] for j in missing + unexpected), d
    node.on_joint_state(_state(PANDA_JOINTS + ['gripper']), None)
    d = node.safety.diagnostics_values()
    assert d['reason'] != 'joint_names' and not d.get('joint_names_mismatch'), d


def test_a_refusal_while_discovery_lags_is_news_and_a_rogue_an_error(ros_context):
    """
    States before discovery lists their publisher: INFO; a refusal of a listed rogue: ERROR.

    Both through the node's real rclpy logger first (it refuses one call site that logs at
    two severities: the controller then stopped on its first rogue), then recorded.
    """
    from manip_control.safety import RefusalReason
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'mode': 'realtime', 'trigger': 'state', 'autostart': False})
    node.trigger_configure()
    for waiting, source in ((True, 'joint_states'), (False, 'reference'),
                            (True, 'reference'), (False, 'joint_states')):
        node.safety.refusals.reset()                        # every one is logged
        node.safety.refuse(source, RefusalReason.SECOND_SOURCE, 'not taken', waiting)
    log = _recorded(node)
    node.safety.refusals.reset()
    node.safety.refuse('joint_states', RefusalReason.SECOND_SOURCE, 'not taken', True)
    node.safety.refusals.reset()
    node.safety.refuse('joint_states', RefusalReason.SECOND_SOURCE, 'not taken', False)
    assert [k for k, _ in log.lines] == ['info', 'error'], log.lines
    assert all('ignoring joint_states message: second_source: not taken' in t
               for _, t in log.lines), log.lines


def test_a_long_mismatch_is_named_in_one_bounded_line(ros_context):
    """200 configured joints none of which the driver names: one line, the lists shortened."""
    links = ''.join(f'<link name="l{k}"><inertial><mass value="1"/><inertia ixx="0.01" '
                    f'iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>'
                    for k in range(201))
    joints = ''.join(f'<joint name="j{k}" type="revolute"><parent link="l{k}"/><child '
                     f'link="l{k + 1}"/><origin xyz="0 0 0.01"/><axis xyz="0 1 0"/><limit '
                     f'lower="-1" upper="1" effort="10" velocity="1"/></joint>'
                     for k in range(200))
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'robot_description': f'<robot name="c">{links}{joints}</robot>',
                      'mode': 'realtime', 'trigger': 'state', 'autostart': False})
    log = _recorded(node)
    node.trigger_configure()
    node.trigger_activate()
    for _ in range(20):
        node.on_joint_state(_state(['joint1', 'joint2']), None)
    named = [t for t in log.at('error') if 'missing' in t and 'j0' in t and 'joint1' in t]
    assert len(named) == 1, log.at('error')
    assert '200' in named[0] and len(named[0]) < 600, named[0]


# --------------------------------------------------------------------------------------------
# any single publisher is trusted without state_publisher


@pytest.mark.parametrize('mode, publisher, warned', [('realtime', '', True),
                                                     ('realtime', '/fake_driver', False),
                                                     ('lockstep', '', False)])
def test_any_single_publisher_is_trusted_is_said(ros_context, mode, publisher, warned):
    """
    Real time without ``state_publisher``: one warning at configure, and the diagnostics.

    Any single publisher of the joint states is taken for the driver (a rogue that starts
    before it is trusted); with ``state_publisher`` the diagnostics name that node; lockstep
    (the plant is the clock, the simulation's own domain check) says nothing.
    """
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'mode': mode, 'state_publisher': publisher, 'autostart': False})
    log = _recorded(node)
    node.trigger_configure()
    lines = [t for t in log.at('warning') if 'state_publisher' in t]
    assert len(lines) == (1 if warned else 0), log.lines
    if warned:
        assert 'any single publisher' in lines[0] and '\n' not in lines[0], lines
    d = node.safety.diagnostics_values()
    trusted = d.get('sources.joint_states.trusted', '')
    if warned:
        assert 'any single publisher' in trusted, d
    elif publisher:
        assert trusted == f'only {publisher}', d


# --------------------------------------------------------------------------------------------
# a new reader of the commands after the states stopped: a restarted driver


def _on_hand_clock(ros_context):
    """Return an active real-time controller whose safety runs on a hand clock and count."""
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'mode': 'realtime', 'trigger': 'state', 'autostart': False})
    _recorded(node)
    node.trigger_configure()
    node.trigger_activate()
    # the test is the only clock and the only caller: the control thread, which would run
    # the watchdog concurrently on the same hand clock, is stopped, and waited for past the
    # node's own 2 s (a thread starved in a tick on a loaded host finishes it later)
    thread = node._loop_thread
    node._stop_control_thread()
    if thread is not None:
        thread.join(60.0)
        assert not thread.is_alive(), 'the control thread did not stop'
    safety = node.safety
    clock = [1000.0]
    safety.now = lambda: clock[0]
    readers = [2]
    safety.readers = lambda: readers[0]
    return node, safety, clock, readers


def test_a_new_reader_after_the_states_stopped_gets_zero_first(ros_context):
    """
    The take-up of a restarted driver, driven by hand (steady clock, reader count).

    The states stop; the watchdog sends the gravity hold, ramped up through the rate limit.
    A new reader of the commands 0.1 s after the last state (a late driver, a starved host):
    nothing changes. A new reader 1 s after it (a restarted driver; its predecessor's readers
    are still matched): the next command is exactly zero, zero for 0.1 s, then the hold ramps
    up from zero within the rate limit.
    """
    node, safety, clock, readers = _on_hand_clock(ros_context)
    sent = []
    safety.publish = lambda tau, stamp, hold: sent.append(tuple(tau))
    safety.activate()                       # re-armed on the hand clock, 2 readers seen
    node.on_joint_state(_state(['joint1', 'joint2']), None)
    assert safety.supervisor.last_state_time is not None
    t0 = safety.supervisor.last_state_time
    period = safety.period
    rate = safety.cmd.torque_rate_limit

    def run(until):
        while clock[0] < until:
            clock[0] += period
            safety.watchdog_tick()

    run(t0 + 0.1)                           # stale: the hold ramps up toward g(q)
    assert safety.stale and sent and abs(sent[-1][0]) > 10.0, sent[-3:]
    readers[0] = 4                          # a reader 0.1 s after the last state
    k = len(sent)
    run(t0 + 0.2)
    assert safety.counts.get('driver_take_ups', 0) == 0
    assert abs(sent[k][0] - sent[k - 1][0]) <= rate[0] * 2 * period + 1e-9
    run(t0 + 1.0)
    hold = sent[-1]
    readers[0] = 6                          # a restarted driver, 1 s after the last state
    k = len(sent)
    run(t0 + 1.0 + period)
    assert sent[k] == (0.0, 0.0) and abs(hold[0]) > 10.0, (hold, sent[k])
    assert safety.counts['driver_take_ups'] == 1
    run(t0 + 1.09)
    assert all(c == (0.0, 0.0) for c in sent[k:]), sent[k:]
    run(t0 + 1.3)
    after = sent[k:]
    assert any(abs(c[0]) > 1.0 for c in after)         # the hold again, from zero
    assert all(abs(b[j] - a[j]) <= rate[j] * 2 * period + 1e-9
               for a, b in zip(after, after[1:]) for j in (0, 1))


@pytest.mark.parametrize('rate, ticks', [(1000.0, 200), (4000.0, 50)])
def test_the_state_trigger_paces_ticks_by_the_drivers_stamps(ros_context, rate, ticks):
    """
    ``trigger: state`` ticks at most once per control period of the driver's stamps.

    States of a driver at ``rate``, stamped ``1 / rate`` apart, arrive in bursts of two
    (1 kHz) or four (4 kHz), each burst when the wall clock reaches its newest stamp (a host
    that delivers late, then at once): a 1 kHz driver gets a tick on each state, one command
    per driver tick (pacing by arrival skipped the second state of every burst); a 4 kHz
    driver is sampled: every fourth state, the others counted (200 states once the state
    period is measured).
    """
    node, safety, clock, _ = _on_hand_clock(ros_context)
    # the host's wall clock by hand too: each burst is delivered exactly when the wall clock
    # reaches its newest stamp, whatever this host's scheduling (a sleep overshoots by
    # milliseconds on a starved host, and the states would then be refused as old)
    wall = [0.0]
    safety.wall = lambda: wall[0]
    names = ['joint1', 'joint2']
    step = int(round(1e9 / rate))
    burst = 2 if rate == 1000.0 else 4
    t0 = time.time_ns()
    for k in range(240):
        if k == 40:         # the state period is measured by now
            before, sampled = node.ticks, node.sampled_states
        stamp = t0 + k * step
        if k % burst == 0:
            wall[0] = (stamp + (burst - 1) * step) * 1e-9
        clock[0] += step * 1e-9
        node.on_joint_state(_state(names, stamp_ns=stamp),
                            {'publication_sequence_number': k + 1})
    assert node.ticks - before == ticks
    assert node.sampled_states - sampled == 200 - ticks
    assert safety.diagnostics_values()['sampled_states'] == str(node.sampled_states)


@pytest.mark.parametrize('case', ['restarted', 'reader_seen_before', 'same_sequence'])
def test_a_driver_whose_states_come_before_its_reader_is_taken_up(ros_context, case):
    """
    A restarted driver whose states arrive before its reader of the commands matched.

    The states stop for 1 s (the gravity hold), then resume from a new publisher (a sequence
    that continues none heard: a new process) and the controller commands on them; 0.3 s
    later the new driver's reader matches. ``restarted``: a reader never seen, the next
    command is exactly zero and the commands then ramp up from zero within the rate limit.
    ``reader_seen_before`` (a driver that only re-created its state publisher; its reader
    matched again) and ``same_sequence`` (a stalled driver that goes on): that driver still
    applies the last command, so nothing is taken up and no step to zero comes.
    """
    from manip_control.nodes.controller_safety import RESTART_WINDOW
    node, safety, clock, readers = _on_hand_clock(ros_context)
    sent = []
    node.publish_command = lambda stamp, out, ref, emergency=False: sent.append(
        (clock[0], tuple(out.tau)))
    ids = [frozenset({b'old'})]
    safety.reader_ids = lambda: ids[0]
    safety.activate()
    period = safety.period
    names = ['joint1', 'joint2']
    seq = [100]

    def state():
        seq[0] += 1
        # every state ticks: a period of the driver's clock passes between its states
        time.sleep(period)
        node.on_joint_state(_state(names), {'publication_sequence_number': seq[0]})

    def run(until, states=False):
        while clock[0] < until:
            clock[0] += period
            if states:
                state()
            safety.watchdog_tick()

    run(clock[0] + 0.5, states=True)            # normal, on the driver's states
    t0 = clock[0]
    run(t0 + 1.0)                               # silent: the hold
    assert safety.stale and abs(sent[-1][1][0]) > 10.0, sent[-3:]
    if case != 'same_sequence':
        seq[0] = 0                              # a new publisher: its sequence starts at 1
    run(t0 + 1.3, states=True)                  # its states, before its reader
    assert not safety.stale
    k = len(sent)
    readers[0] += 1
    ids[0] = ids[0] | {b'new' if case == 'restarted' else b'old'}
    if case == 'reader_seen_before':
        ids[0] = frozenset({b'old'})
    run(t0 + 1.6, states=True)
    after = [c for _, c in sent[k:]]
    rate = safety.cmd.torque_rate_limit
    steps = [abs(b[j] - a[j]) for a, b in zip(after, after[1:]) for j in (0, 1)]
    if case == 'restarted':
        assert after[0] == (0.0, 0.0) and abs(sent[k - 1][1][0]) > 10.0, (sent[k - 1], after[:2])
        assert safety.counts['late_reader_take_ups'] == 1
        assert max(steps) <= max(rate) * 2 * period + 1e-9
        assert any(abs(c[0]) > 1.0 for c in after)     # from zero back to the hold
    else:
        assert safety.counts.get('late_reader_take_ups', 0) == 0
        assert all(abs(c[0]) > 10.0 for c in after), after[:3]
    assert safety.counts.get('state_source_restarts', 0) == (case != 'same_sequence')
    # the window closes: a new reader long after is nobody's restart
    run(t0 + 1.3 + RESTART_WINDOW + 0.1, states=True)
    k = len(sent)
    readers[0] += 1
    ids[0] = ids[0] | {b'later'}
    run(clock[0] + 0.1, states=True)
    assert all(abs(c[0]) > 10.0 for _, c in sent[k:])


def test_a_reader_that_matches_during_a_send_gets_zero_at_once(ros_context):
    """
    The DDS match of a restarted driver's reader completes while a hold command is sent.

    DDS cannot publish to "the readers matched now": a reader that matches between the
    count and the send receives that command. The count is read again right after the send,
    and the zero follows at once, in the same watchdog tick (not one control period later),
    then the hold ramps up from zero within the rate limit.
    """
    from manip_control.nodes.controller_safety import RESTART_SILENCE
    node, safety, clock, readers = _on_hand_clock(ros_context)
    got = []
    matched = [False]

    def publish(tau, stamp, hold):
        if matched[0]:
            got.append((clock[0], tuple(tau)))      # what the new reader receives
    safety.publish = publish
    safety.activate()
    node.on_joint_state(_state(['joint1', 'joint2']), None)
    t0 = safety.supervisor.last_state_time
    period = safety.period

    def run(until):
        while clock[0] < until:
            clock[0] += period
            safety.watchdog_tick()

    run(t0 + RESTART_SILENCE + 0.5)         # silent: the gravity hold

    def count_then_match():
        n = readers[0]
        if not matched[0]:
            matched[0] = True               # matched just after the count was read
            readers[0] += 2
        return n
    safety.readers = count_then_match
    run(t0 + RESTART_SILENCE + 0.8)
    assert len(got) > 2 and abs(got[0][1][0]) > 10.0, got[:3]     # the send it matched in
    assert got[1] == (got[0][0], (0.0, 0.0)), got[:3]             # zero in the same tick
    assert safety.counts['driver_take_ups'] == 1
    assert safety.counts['reader_matched_during_send'] == 1
    rate = safety.cmd.torque_rate_limit
    after = [c for _, c in got[1:]]
    assert all(abs(b[j] - a[j]) <= rate[j] * 2 * period + 1e-9
               for a, b in zip(after, after[1:]) for j in (0, 1))
    assert any(abs(c[0]) > 1.0 for c in after)     # the hold again, from zero


@pytest.mark.parametrize('mode', ['realtime', 'lockstep'])
def test_the_controller_takes_no_matched_or_lost_events(ros_context, mode):
    """
    No DDS matched or message-lost event handler on the inputs and the command publishers.

    rmw_fastrtps (Jazzy) deadlocks when the executor takes such an event while a DDS thread
    reports one on the same endpoint (seen: 2 of 89 controller starts under load froze, the
    executor and every DDS thread of the process stopped). The controller polls the matched
    counts instead: a reader of the commands is counted within the poll period.
    """
    from rclpy.event_handler import QoSPublisherEventType
    from rclpy.event_handler import QoSSubscriptionEventType
    from rclpy.node import Node
    from std_msgs.msg import Float64MultiArray
    from manip_control.nodes.controller_node import MATCH_POLL_PERIOD
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'mode': mode, 'autostart': False})
    node.trigger_configure()
    node.trigger_activate()
    # (the two enums share values: each endpoint kind is checked against its own)
    forbidden = [(node._subs, {QoSSubscriptionEventType.RCL_SUBSCRIPTION_MATCHED,
                               QoSSubscriptionEventType.RCL_SUBSCRIPTION_MESSAGE_LOST}),
                 ((node._array_pub, node._cmd_pub), {QoSPublisherEventType.RCL_PUBLISHER_MATCHED})]
    assert len(node._subs) == 2
    for endpoints, kinds in forbidden:
        for endpoint in endpoints:
            taken = {h.event_type for h in endpoint.event_handlers}
            assert not taken & kinds, (endpoint.topic_name, taken)
    driver = Node('driver', context=ros_context)
    try:
        driver.create_subscription(Float64MultiArray, '/effort_controller/commands',
                                   lambda m: None, 10)
        deadline = time.monotonic() + 10.0
        while node._readers['array'] < 1 and time.monotonic() < deadline:
            time.sleep(MATCH_POLL_PERIOD)
            if mode == 'lockstep':      # polled by the graph check (the executor's timer)
                node.check_graph()
        assert node._readers['array'] == 1
    finally:
        driver.destroy_node()


@pytest.mark.parametrize('state_after_stall', [True, False])
def test_a_stall_of_the_controller_is_not_judged_as_the_drivers(ros_context, state_after_stall):
    """
    The first watchdog run after this process was not scheduled for 47 ms does not judge.

    A host that stops the control thread (RT throttling, seen in CI: 47 ms) stops the DDS
    threads that deliver the states too; the driver's states of the stall arrive a moment
    after the thread runs again. The late run counts ``watchdog_late`` and declares nothing;
    a state before the next run keeps the controller normal; without one the next run,
    one period later, declares the state timeout.
    """
    node, safety, clock, _ = _on_hand_clock(ros_context)
    names = ['joint1', 'joint2']
    period = safety.period
    seq = [0]

    def state():
        seq[0] += 1
        node.on_joint_state(_state(names), {'publication_sequence_number': seq[0]})

    for _ in range(100):                    # normal, a state each period
        clock[0] += period
        state()
        safety.watchdog_tick()
    assert not safety.stale and safety.supervisor.mode.value == 'normal'
    clock[0] += 0.047                       # the stall
    safety.watchdog_tick()
    assert safety.counts.get('watchdog_late') == 1
    assert not safety.stale and safety.supervisor.mode.value == 'normal'
    clock[0] += period
    if state_after_stall:
        state()
    safety.watchdog_tick()
    assert safety.stale != state_after_stall
    entries = {k: v for k, v in safety.diagnostics_values().items()
               if k.startswith('safe_entries.')}
    assert entries == ({} if state_after_stall else {'safe_entries.state_timeout': '1'})
