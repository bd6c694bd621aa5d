"""Fault-injection tests of the controller's safety (issue 6): real processes, real DDS, an own
ROS_DOMAIN_ID, every process cleaned up.

Run with ``-s`` to see the measured figures::

    .venv/bin/python -m pytest -s test/test_fault_injection.py

Scenarios: kill the plant (time to safe mode, safe command, resume with a new plant), kill the
trajectory source (hold of the last reference), malformed messages on every controller input
(no crash, no NaN out, exact refusal counts), invalid parameter files (one clear line naming
the parameter, exit code 2, nothing published), lifecycle (no command before a fresh state,
zero torque once on deactivate).

This module is also the fake plant / trajectory process used when the package's nodes are not
there: ``python test/test_fault_injection.py plant|trajectory``.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip('rclpy')

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
HERE = Path(__file__).resolve()
PERIOD = 1e-3
STATE_TIMEOUT = 0.02  # the controller's default safety.state_timeout
SCHED_TOLERANCE = 0.015  # [s] Python timers on a shared 2-CPU box run this late at worst
NAN, INF = float('nan'), float('inf')


def _domain_id() -> int:
    return 150 + os.getpid() % 70


def _controller_cmd() -> list[str]:
    """The lifecycle controller executable (package node if it is a lifecycle node)."""
    return [PY, '-m', 'manip_control.nodes.controller_safety']


# --------------------------------------------------------------------------------------------
# process and probe harness


class Procs:
    """Processes started by a test, each in its own process group, always cleaned up."""

    def __init__(self, env, tmp: Path):
        self.env, self.tmp, self.items = env, tmp, []

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        out = open(self.tmp / f'{name}.{len(self.items)}.log', 'w')
        p = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                             cwd=ROOT, start_new_session=True)
        p.log_path = out.name
        self.items.append((p, out))
        return p

    def kill(self, p: subprocess.Popen, sig=signal.SIGKILL) -> None:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)

    def cleanup(self) -> None:
        for p, out in self.items:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGINT)
                    p.wait(3)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    self.kill(p)
            out.close()


def log_of(p) -> str:
    return Path(p.log_path).read_text()


class Probe:
    """An in-test node: records the controller's outputs, publishes test inputs."""

    def __init__(self, domain_id: int, topics=('diag', 'cmds', 'jcmds')):
        from rclpy.executors import SingleThreadedExecutor
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=domain_id)
        self.node = rclpy.create_node('fault_probe', context=self.ctx)
        self.lock = threading.Lock()
        self.diags, self.cmds, self.jcmds, self.states = [], [], [], []
        n = self.node
        # a Python probe cannot keep up with several 1 kHz topics on a loaded machine:
        # subscribe only to what a test reads
        subs = {'diag': (DiagnosticArray, '/controller/diagnostics', self.diags),
                'cmds': (Float64MultiArray, '/effort_controller/commands', self.cmds),
                'jcmds': (JointState, '/joint_commands', self.jcmds),
                'states': (JointState, '/joint_states', self.states)}
        for key in topics:
            typ, topic, lst = subs[key]
            n.create_subscription(typ, topic, lambda m, lst=lst: self._rec(lst, m), 100)
        self.state_pub = n.create_publisher(JointState, '/joint_states', 50)
        self.ref_pub = n.create_publisher(JointTrajectory, '/reference', 50)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(n)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        try:
            while self.ctx.ok():
                self.ex.spin_once(timeout_sec=0.05)
        except Exception:  # noqa: BLE001 - shutdown race
            pass

    def _rec(self, lst, msg):
        with self.lock:
            lst.append((time.monotonic(), msg))

    def clear(self):
        with self.lock:
            for lst in (self.diags, self.cmds, self.jcmds, self.states):
                lst.clear()

    def snapshot(self, lst):
        with self.lock:
            return list(lst)

    def last_diag(self):
        d = self.snapshot(self.diags)
        return diag_dict(d[-1][1]) if d else None

    def wait_for(self, pred, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = pred()
            if r:
                return r
            time.sleep(0.002)
        raise AssertionError(f'timed out after {timeout} s waiting for {what}')

    def close(self):
        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)
        self.thread.join(2)


def diag_dict(msg) -> dict:
    st = msg.status[0]
    d = {kv.key: kv.value for kv in st.values}
    d['_message'] = st.message
    d['_level'] = int.from_bytes(st.level, 'little') if isinstance(st.level, bytes) \
        else int(st.level)
    return d


def first_after(entries, t0, pred):
    for t, m in entries:
        if t >= t0 and pred(m):
            return t, m
    return None


@pytest.fixture
def ros(tmp_path):
    """``procs, probe = ros(topics)``: a process set and a probe on an own ROS_DOMAIN_ID."""
    dom = _domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(dom), PYTHONUNBUFFERED='1',
               ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    procs = Procs(env, tmp_path)
    probes = []

    def make(topics=('diag', 'cmds', 'jcmds')):
        probes.append(Probe(dom, topics))
        return procs, probes[-1]

    try:
        yield make
    finally:
        procs.cleanup()
        for p in probes:
            p.close()


def start_plant(procs, rate=1000.0):
    return procs.start('plant', [PY, str(HERE), 'plant', str(rate)])


def start_trajectory(procs):
    return procs.start('trajectory', [PY, str(HERE), 'trajectory'])


def start_controller(procs, *ros_args):
    return procs.start('controller', _controller_cmd() + [
        '--ros-args', '-p', 'autostart:=true', *ros_args])


def wait_normal(probe, timeout=20.0):
    return probe.wait_for(lambda: (probe.last_diag() or {}).get('mode') == 'normal', timeout,
                          'the controller in normal mode')


def all_finite_outputs(probe):
    for _, m in probe.snapshot(probe.cmds):
        assert all(math.isfinite(v) for v in m.data), m.data
    for _, m in probe.snapshot(probe.jcmds):
        assert all(math.isfinite(v) for v in list(m.effort) + list(m.position)
                   + list(m.velocity)), m


def gravity(q, m1=3.0, m2=2.0, l1=1.0, lc1=0.5, lc2=0.5, g0=9.81):
    """Closed-form gravity of the nominal arm in config/default.yaml (m = 2.5 / 1.5 kg)."""
    c12 = math.cos(q[0] + q[1])
    return ((m1 * lc1 + m2 * l1) * g0 * math.cos(q[0]) + m2 * lc2 * g0 * c12,
            m2 * lc2 * g0 * c12)


# --------------------------------------------------------------------------------------------
# tests


def test_kill_plant_safe_then_resume(ros):
    procs, probe = ros(('diag', 'cmds'))
    plant = start_plant(procs)
    ctrl = start_controller(procs)
    wait_normal(probe)
    time.sleep(0.5)
    figures = []
    for trial in range(3):
        t_kill = time.monotonic()
        procs.kill(plant)
        t_safe, msg = probe.wait_for(
            lambda: first_after(probe.snapshot(probe.diags), t_kill,
                                lambda m: diag_dict(m)['reason'] == 'state_timeout'),
            5.0, 'safe mode after killing the plant')
        detail = diag_dict(msg)['detail']
        age_ms = float(re.search(r'for ([0-9.]+) ms', detail).group(1))
        # the hold command keeps being published at the control rate while the plant is dead
        time.sleep(0.2)
        cmds = [tuple(m.data) for t, m in probe.snapshot(probe.cmds)][-10:]
        assert len(cmds) == 10 and len(set(cmds)) == 1, cmds
        q_last = [float(v) for v in probe.last_diag()['hold_target'].split(',')]
        g = gravity(q_last, m1=2.5, m2=1.5)  # pure gravity hold at the last position
        assert abs(cmds[-1][0] - g[0]) < 1e-3 and abs(cmds[-1][1] - g[1]) < 1e-3, (cmds, g)
        t_restart = time.monotonic()
        plant = start_plant(procs)
        t_norm, _ = probe.wait_for(
            lambda: first_after(probe.snapshot(probe.diags), t_restart,
                                lambda m: diag_dict(m)['mode'] == 'normal'),
            20.0, 'normal mode with a new plant')
        figures.append((age_ms, (t_safe - t_kill) * 1e3, (t_norm - t_restart)))
        # timeout + one period, plus a scheduling tolerance for a loaded (CI) machine; the
        # strict figure is printed
        assert age_ms <= (STATE_TIMEOUT + PERIOD + SCHED_TOLERANCE) * 1e3, detail
        time.sleep(0.3)
    assert ctrl.poll() is None, log_of(ctrl)
    all_finite_outputs(probe)
    print(f'\n[fault] kill plant -> safe (state timeout {STATE_TIMEOUT * 1e3:.0f} ms, '
          f'period {PERIOD * 1e3:.0f} ms):')
    strict = sum(age <= (STATE_TIMEOUT + PERIOD) * 1e3 for age, _, _ in figures)
    print(f'[fault]   {strict} of {len(figures)} trials within timeout + one period')
    for k, (age, kill, resume) in enumerate(figures):
        print(f'[fault]   trial {k}: last state -> safe mode {age:.1f} ms (controller, '
              f'limit {(STATE_TIMEOUT + PERIOD) * 1e3:.0f} ms); kill -> safe diagnostics '
              f'received {kill:.1f} ms (probe); new plant started -> normal {resume:.2f} s')


def test_kill_trajectory_holds_last_reference(ros):
    procs, probe = ros(('diag', 'jcmds'))
    start_plant(procs)
    traj = start_trajectory(procs)
    ctrl = start_controller(procs)
    wait_normal(probe)
    probe.wait_for(lambda: any(m.velocity and m.velocity[0] != 0.0
                               for _, m in probe.snapshot(probe.jcmds)[-10:]), 10.0,
                   'moving reference')
    time.sleep(0.3)
    t_kill = time.monotonic()
    procs.kill(traj)
    t_held, msg = probe.wait_for(
        lambda: first_after(probe.snapshot(probe.diags), t_kill,
                            lambda m: diag_dict(m)['reference_held'] == 'true'),
        5.0, 'held reference')
    age_ms = float(diag_dict(msg)['reference_age_at_hold_ms'])
    time.sleep(0.5)
    last = [m for _, m in probe.snapshot(probe.jcmds)][-20:]
    q_hold = list(last[-1].position)
    assert all(list(m.position) == q_hold and list(m.velocity) == [0.0, 0.0] for m in last)
    assert probe.last_diag()['reference_held'] == 'true'
    assert probe.last_diag()['mode'] == 'normal'
    assert age_ms <= (0.1 + PERIOD + SCHED_TOLERANCE) * 1e3
    assert ctrl.poll() is None
    all_finite_outputs(probe)
    print(f'\n[fault] kill trajectory -> hold of the last reference position '
          f'({q_hold[0]:.4f}, {q_hold[1]:.4f}) with zero velocity: reference age at hold '
          f'{age_ms:.1f} ms (controller, reference_timeout 100 ms); kill -> hold diagnostics '
          f'received {(t_held - t_kill) * 1e3:.1f} ms (probe)')


def _js(names, pos, vel, eff=()):
    m = JointState()
    m.name, m.position, m.velocity, m.effort = list(names), list(pos), list(vel), list(eff)
    return m


def _tr(names, *points):
    m = JointTrajectory()
    m.joint_names = list(names)
    for p in points:
        pt = JointTrajectoryPoint()
        pt.positions = list(p[0])
        pt.velocities = list(p[1]) if len(p) > 1 else []
        pt.accelerations = list(p[2]) if len(p) > 2 else []
        m.points.append(pt)
    return m


J = ['joint1', 'joint2']
# (message, refusal reason or None when it must be accepted)
BAD_STATES = [
    (_js(J, [NAN, 0.0], [0.0, 0.0]), 'non_finite'),
    (_js(J, [0.0, 0.0], [0.0, NAN]), 'non_finite'),
    (_js(J, [INF, 0.0], [0.0, 0.0]), 'non_finite'),
    (_js(J, [0.0, 0.0], [-INF, 0.0]), 'non_finite'),
    (_js(J, [0.0], [0.0, 0.0]), 'length_mismatch'),
    (_js(J, [0.0, 0.0], [0.0]), 'length_mismatch'),
    (_js(J, [0.0, 0.0, 0.0], [0.0, 0.0]), 'length_mismatch'),
    (_js(J, [0.0, 0.0], [0.0, 0.0], [1.0, 2.0, 3.0]), 'length_mismatch'),
    (_js(['joint1'], [0.0], [0.0]), 'missing_joint'),
    (_js(['a', 'b'], [0.0, 0.0], [0.0, 0.0]), 'missing_joint'),
    (_js(['joint1', 'joint1'], [0.0, 0.0], [0.0, 0.0]), 'duplicate_name'),
    (_js([], [], []), 'empty'),
]
GOOD_STATES = [  # accepted: reordered names, extra unknown joint (NaN in it is ignored)
    _js(['joint2', 'joint1'], [0.0, 0.0], [0.0, 0.0]),
    _js(['joint1', 'gripper', 'joint2'], [0.0, NAN, 0.0], [0.0, 0.0, 0.0]),
]
BAD_REFS = [
    (_tr(J, ([NAN, 0.0],)), 'non_finite'),
    (_tr(J, ([0.0, INF],)), 'non_finite'),
    (_tr(J, ([0.0, 0.0], [NAN, 0.0])), 'non_finite'),
    (_tr(J, ([0.0, 0.0], [0.0, 0.0], [0.0, -INF])), 'non_finite'),
    (_tr(J, ([0.0],)), 'length_mismatch'),
    (_tr(J, ([0.0, 0.0, 0.0],)), 'length_mismatch'),
    (_tr(J, ([0.0, 0.0], [0.0])), 'length_mismatch'),
    (_tr(J, ([0.0, 0.0],), ([0.0, 0.0],)), 'length_mismatch'),
    (_tr(['joint1'], ([0.0],)), 'missing_joint'),
    (_tr(['x', 'y'], ([0.0, 0.0],)), 'missing_joint'),
    (_tr(['joint2', 'joint2'], ([0.0, 0.0],)), 'duplicate_name'),
    (_tr(J), 'empty'),
    (_tr([]), 'empty'),
]
GOOD_REFS = [_tr(['joint2', 'joint1'], ([0.1, 0.2],)),
             _tr(['joint1', 'extra', 'joint2'], ([0.1, NAN, 0.2],))]


def _expected(items):
    out = {}
    for _, why in items:
        out[why] = out.get(why, 0) + 1
    return out


def test_malformed_inputs_refused_and_counted(ros):
    procs, probe = ros(('diag', 'cmds'))
    # a slow plant: the controller's reader queue must not overflow, or counts would be short
    start_plant(procs, rate=100.0)
    ctrl = start_controller(procs)
    wait_normal(probe)

    # handshake: one refused message per input until the controller counts it (discovery is
    # asymmetric: our writer may match before their reader does, and the first would be lost)
    def counted(prefix):
        return sum(int(v) for k, v in (probe.last_diag() or {}).items()
                   if k.startswith(prefix))

    for pub, msg, prefix in ((probe.state_pub, BAD_STATES[0][0], 'refused.joint_states.'),
                             (probe.ref_pub, BAD_REFS[0][0], 'refused.reference.')):
        def sent_and_counted():
            pub.publish(msg)
            time.sleep(0.2)
            return counted(prefix) > 0
        probe.wait_for(sent_and_counted, 20.0, f'the controller counting {prefix}')
    time.sleep(0.3)
    base = probe.last_diag()
    for _ in range(3):  # three rounds of every malformed message on every input
        for msg, _why in BAD_STATES:
            probe.state_pub.publish(msg)
            time.sleep(0.003)
        for msg in GOOD_STATES:
            probe.state_pub.publish(msg)
            time.sleep(0.003)
        for msg, _why in BAD_REFS:
            probe.ref_pub.publish(msg)
            time.sleep(0.003)
        for msg in GOOD_REFS:
            probe.ref_pub.publish(msg)
            time.sleep(0.003)
    n_bad = 3 * (len(BAD_STATES) + len(BAD_REFS))
    # the controller's diagnostics may lag on a loaded machine: wait for the total, then
    # check that nothing more arrives and that every reason is counted exactly
    try:
        probe.wait_for(lambda: counted('refused_total') - int(base['refused_total']) >= n_bad,
                       15.0, 'the refusal count')
    except AssertionError:
        pass
    time.sleep(0.5)
    d = probe.last_diag()
    got_s = {k.split('.')[-1]: int(v) - int(base.get(k, 0)) for k, v in d.items()
             if k.startswith('refused.joint_states.')}
    got_r = {k.split('.')[-1]: int(v) - int(base.get(k, 0)) for k, v in d.items()
             if k.startswith('refused.reference.')}
    want_s = {k: 3 * v for k, v in _expected(BAD_STATES).items()}
    want_r = {k: 3 * v for k, v in _expected(BAD_REFS).items()}
    assert (got_s, got_r) == (want_s, want_r), (sorted(base.items()), sorted(d.items()))
    assert int(d['refused_total']) - int(base['refused_total']) == n_bad
    assert ctrl.poll() is None, log_of(ctrl)
    assert 'Traceback' not in log_of(ctrl), log_of(ctrl)
    all_finite_outputs(probe)
    assert probe.snapshot(probe.cmds), 'the controller kept commanding'
    # the error log is throttled: far fewer lines than refusals
    n_lines = log_of(ctrl).count('ignoring joint_states message')
    assert 1 <= n_lines <= 5, n_lines
    print(f'\n[fault] malformed inputs: {sum(want_s.values())} joint states and '
          f'{sum(want_r.values())} references refused and counted exactly '
          f'({len(GOOD_STATES) * 3 + len(GOOD_REFS) * 3} reordered/extra-joint accepted); '
          f'{n_lines} throttled error lines; no NaN published')


BAD_PARAMS = [
    ('safety.state_timeout: 0.0', 'safety.state_timeout: must be > 0'),
    ('safety.state_timeout: -1.0', 'safety.state_timeout: must be > 0'),
    ('safety.reference_timeout: 0.0', 'safety.reference_timeout: must be > 0'),
    ("safety.safe_mode: 'brake'", 'safety.safe_mode: must be one of'),
    ('safety.velocity_limit: [10.0, -1.0]', 'safety.velocity_limit[1]: must be > 0'),
    ('safety.velocity_limit: [10.0]', 'safety.velocity_limit: must have 2'),
    ("safety.velocity_limit: 'fast'", 'safety.velocity_limit: must be a list'),
    ('safety.position_lower: [4.0, -1.0]', 'safety.position_upper[0]: must exceed'),
    ('safety.hold_kp: [0.0, 1.0]', 'safety.hold_kp[0]: must be > 0'),
    ('safety.latch_limits: 3', 'safety.latch_limits: must be true or false'),
    ('safety.bogus: 1.0', 'safety.bogus: unknown parameter'),
    ('speling: 1.0', 'speling: unknown parameter'),
]


def _core_file(path: Path, edit) -> Path:
    """The default scenario with one edit (a function on the dict) written to ``path``."""
    import yaml
    from manip_control.parameters import load_scenario
    data = load_scenario('default').to_dict()
    edit(data)
    path.write_text(yaml.safe_dump(data))
    return path


BAD_CORE = [
    (lambda d: d['controller'].update(kp=[0.0, 16.0]), 'controller.kp[0]: must be > 0'),
    (lambda d: d['plant'].update(actuator='warp'), 'plant.actuator: must be one of'),
    (lambda d: d['scenario'].update(control_rate=-1), 'scenario.control_rate: must be > 0'),
    (lambda d: d['scenario'].update(bogus=1), 'scenario.bogus: unknown parameter'),
    (lambda d: d['controller'].update(kd='fast'), 'controller.kd: must be a list'),
    (lambda d: d['controller']['nominal']['arm'].update(m1=True),
     'controller.nominal.arm.m1: must be a number'),
]


def test_invalid_parameter_files_exit_with_clear_error(ros, tmp_path):
    procs, probe = ros()
    cases = list(BAD_PARAMS)
    for k, (edit, want) in enumerate(BAD_CORE):
        cfg = _core_file(tmp_path / f'bad{k}.yaml', edit)
        cases.append((f"config: '{cfg}'", want))
    running = []
    for k, (line, want) in enumerate(cases):
        pf = tmp_path / f'params{k}.yaml'
        pf.write_text('controller:\n  ros__parameters:\n    ' + line + '\n')
        p = start_controller(procs, '--params-file', str(pf))
        running.append((p, want))
    t0 = time.monotonic()
    for p, want in running:
        rc = p.wait(30)
        out = log_of(p).strip()
        lines = [ln for ln in out.splitlines() if ln.strip()]
        assert rc == 2, (rc, out)
        assert len(lines) == 1 and lines[0].startswith('error: ' + want), out
    time.sleep(0.2)
    assert not probe.snapshot(probe.diags) and not probe.snapshot(probe.cmds) \
        and not probe.snapshot(probe.jcmds), 'a refused configuration published something'
    print(f'\n[fault] {len(cases)} invalid parameter files: exit code 2, one line naming the '
          f'parameter, nothing published (all exited within {time.monotonic() - t0:.1f} s)')


def test_lifecycle_no_command_before_state_zero_on_deactivate(ros):
    procs, probe = ros()
    ctrl = start_controller(procs)
    probe.wait_for(lambda: (probe.last_diag() or {}).get('reason') == 'no_state_yet', 20.0,
                   'the active controller waiting for states')
    time.sleep(0.3)
    assert not probe.snapshot(probe.cmds), 'commanded before any joint state'
    plant = start_plant(procs)
    wait_normal(probe)
    procs.kill(plant)
    probe.wait_for(lambda: (probe.last_diag() or {}).get('reason') == 'state_timeout', 5.0,
                   'state timeout')
    # deactivate through the lifecycle service: one zero command, then silence
    from lifecycle_msgs.srv import ChangeState
    cli = probe.node.create_client(ChangeState, '/controller/change_state')
    assert cli.wait_for_service(10.0)
    req = ChangeState.Request()
    req.transition.id = 4  # deactivate
    t0 = time.monotonic()
    fut = cli.call_async(req)
    probe.wait_for(lambda: fut.done(), 10.0, 'deactivate')
    assert fut.result().success
    time.sleep(0.3)
    after = [m.data.tolist() for t, m in probe.snapshot(probe.cmds) if t > t0]
    assert after and after[-1] == [0.0, 0.0]
    assert after.count([0.0, 0.0]) == 1
    assert probe.last_diag()['reason'] == 'inactive'
    assert ctrl.poll() is None
    print('\n[fault] lifecycle: no command before the first joint state; deactivate sent '
          'zero torque once and stopped commanding')


# --------------------------------------------------------------------------------------------
# fake plant / trajectory processes (only used when the package's nodes are absent)


def _fake_plant(rate: float) -> None:
    from rclpy.executors import ExternalShutdownException
    from manip_control.parameters import load_scenario
    from manip_control.plant import Plant
    import dataclasses
    scenario = load_scenario('default')
    period = 1.0 / rate
    # ideal actuators: the motor's electrical dynamics need the 1 kHz step to stay stable
    plant = Plant(dataclasses.replace(scenario.plant, actuator='ideal'), period)
    rclpy.init()
    node = rclpy.create_node('plant')
    pub = node.create_publisher(JointState, '/joint_states', 10)
    cmd = [0.0, 0.0]

    def on_cmd(m):
        if len(m.data) == 2 and all(math.isfinite(v) for v in m.data):
            cmd[:] = m.data

    node.create_subscription(Float64MultiArray, '/effort_controller/commands', on_cmd, 10)

    def tick():
        q, v = plant.position, plant.velocity
        m = JointState()
        m.header.stamp = node.get_clock().now().to_msg()
        m.name = ['joint1', 'joint2']
        m.position, m.velocity = [float(x) for x in q], [float(x) for x in v]
        pub.publish(m)
        plant.step(cmd[0], cmd[1])

    node.create_timer(period, tick)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


def _fake_trajectory() -> None:
    from rclpy.executors import ExternalShutdownException
    rclpy.init()
    node = rclpy.create_node('trajectory')
    pub = node.create_publisher(JointTrajectory, '/reference', 10)
    t0 = time.monotonic()

    def tick():
        t = time.monotonic() - t0
        m = _tr(J, ([0.5 * math.sin(2.0 * t), 0.3 * math.sin(2.0 * t)],
                    [1.0 * math.cos(2.0 * t), 0.6 * math.cos(2.0 * t)], [0.0, 0.0]))
        pub.publish(m)

    node.create_timer(0.005, tick)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == '__main__':
    if sys.argv[1] == 'plant':
        _fake_plant(float(sys.argv[2]))
    elif sys.argv[1] == 'trajectory':
        _fake_trajectory()
