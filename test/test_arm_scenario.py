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

"""Tests of manip_control.arm_scenario and ``manip-offline --urdf``."""

import dataclasses
import json
import math
from pathlib import Path
import subprocess
import sys
import xml.etree.ElementTree as ET

from manip_control.actuators import joint_torque
from manip_control.arm_model import ArmModelError
from manip_control.arm_model import ArmShapeError
from manip_control.arm_model import JointLimits
from manip_control.arm_model import TwoLinkArm
from manip_control.arm_model import UrdfArm
from manip_control.arm_plant import ArmPlant
from manip_control.arm_plant import run_arm_closed_loop
from manip_control.arm_scenario import gains_from_bandwidth
from manip_control.arm_scenario import motors_sized_for
from manip_control.arm_scenario import reference_within_limits
from manip_control.arm_scenario import run_urdf_closed_loop
from manip_control.arm_scenario import summarize_urdf_run
from manip_control.bag_io import BagReader
from manip_control.control import Controller
from manip_control.control import controller_parameters
from manip_control.friction import friction_torque_scalar
from manip_control.parameters import FrictionParameters
from manip_control.parameters import load_scenario
import numpy as np
import pytest

pytest.importorskip('pinocchio')

URDF_DIR = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf'
PANDA = URDF_DIR / 'panda.urdf'
needs_fixtures = pytest.mark.skipif(not PANDA.is_file(), reason='../shared/fixtures missing')


def test_motors_reach_the_effort_limit_with_margin():
    effort = [87.0, 12.0]
    for m, tau_max in zip(motors_sized_for(effort), effort):
        # peak joint torque of the drive: eta N k_t i_max
        assert m.eta * m.N * m.k_t * m.i_max == pytest.approx(1.2 * tau_max, rel=1e-12)
        # the supply covers R i_max and the back EMF at 2 rad/s with room to spare
        assert m.R * m.i_max + m.k_e * m.N * 2.0 < m.V_max


def test_cli_urdf_without_limits_runs_with_ideal_actuators():
    if not PANDA.is_file():
        pytest.skip('../shared/fixtures missing')
    p = _offline('--urdf', str(URDF_DIR / 'double_pendulum.urdf'), '--duration', '0.3',
                 '--actuator', 'ideal', '--json')
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout, parse_constant=lambda c: pytest.fail(f'not JSON: {c}'))
    assert data['peak_torque_fraction'] == [None, None]
    assert all(0.0 < t < 10.0 for t in data['peak_torque_nm'])


@pytest.mark.parametrize('bad', [math.inf, 0.0, -1.0, math.nan])
def test_motors_refuse_a_missing_effort_limit(bad):
    with pytest.raises(ArmModelError, match='joint wrist: effort limit'):
        motors_sized_for([10.0, bad], names=['elbow', 'wrist'])


def test_reference_stays_inside_the_limits():
    limits = JointLimits(lower=np.array([-2.9, -1.76, -0.1, -math.inf]),
                         upper=np.array([2.9, 1.76, 0.1, math.inf]),
                         velocity=np.array([2.2, 0.1, 2.2, 2.6]),
                         effort=np.array([87.0, 87.0, 12.0, 12.0]))
    traj = reference_within_limits(limits)
    t = np.linspace(0.0, 20.0, 4001)
    q = np.array([traj.sample(x)[0] for x in t])
    qd = np.array([traj.sample(x)[1] for x in t])
    assert np.all(q >= limits.lower) and np.all(q <= limits.upper)
    assert np.all(np.abs(qd) <= 0.5 * limits.velocity + 1e-12)
    # about the middle of each range (0 for the unbounded joint), not a standstill
    assert np.allclose(q.mean(axis=0), [0.0, 0.0, 0.0, 0.0], atol=0.02)
    assert np.all(np.ptp(q, axis=0) > 0.0)


def test_gains_give_the_requested_error_dynamics():
    kp, kd = gains_from_bandwidth(3, omega_n=10.0, zeta=0.7)
    # e'' + kd e' + kp e = 0 has the poles -zeta wn +- j wn sqrt(1 - zeta^2)
    poles = np.roots([1.0, kd[0], kp[0]])
    assert np.allclose(np.abs(poles), 10.0) and np.allclose(-poles.real / 10.0, 0.7)
    with pytest.raises(ArmModelError, match='omega_n'):
        gains_from_bandwidth(3, omega_n=0.0)


@needs_fixtures
def test_the_law_inverts_the_drives_on_the_mesh_torque():
    """
    Through each drive's torque law, the command gives the law's torque plus the friction.

    The Panda with sized drives (one with eta 0.7 / eta_back 0.6), their rotors as armature:
    the rotor torque ``D a`` of the law's acceleration is taken off before the gear loss, as
    the plant charges it (on the mesh torque), in every sign of power flow.
    """
    bare = UrdfArm.from_file(PANDA)
    motors = motors_sized_for(bare.limits.effort)
    motors[6] = dataclasses.replace(motors[6], eta=0.7, eta_back=0.6)
    arm = UrdfArm.from_file(PANDA, armature=[m.Jm * m.N * m.N for m in motors])
    friction = [FrictionParameters(b=0.2, tau_c=0.5, eps=0.02)] * 7
    kp, kd = gains_from_bandwidth(7)
    law = Controller(controller_parameters(arm, kp, kd, [1e6] * 7, friction=friction,
                                           motors=motors), 1e-3, arm)
    rng = np.random.default_rng(3)
    rotor = arm.rotor_matrix()
    for qd_ref in (-1.0, -0.01, 0.0, 0.004, 0.3):
        q = rng.uniform(-1.0, 1.0, 7)
        q_d, qd, qdd_d = q + rng.normal(0.0, 0.05, 7), np.full(7, qd_ref), rng.normal(0, 3, 7)
        u = np.array(law.update(q, qd, q_d, qd, qdd_d).tau)
        a = qdd_d - kp * (q - q_d)              # e_dot = 0: qd is the reference's
        wanted = arm.inverse_dynamics(q, qd, a)
        for j, m in enumerate(motors):
            delivered = joint_torque(u[j] / (m.N * m.k_t), qd_ref, m, friction[j].eps,
                                     rotor[j] @ a)
            f = friction_torque_scalar(qd_ref, friction[j])
            assert delivered == pytest.approx(wanted[j] + f, rel=1e-9, abs=1e-9)


@needs_fixtures
def test_panda_motor_drives_perfect_model_tracks_closely():
    late = {}
    for compensate in (True, False):
        res = run_urdf_closed_loop(str(PANDA), duration=2.0, compensate=compensate)
        late[compensate] = np.array(summarize_urdf_run(res)['late_max_error_rad'])
    # what remains is the current loops' lag; the uncompensated gear loss is 10x that
    assert late[True].max() < 5e-3
    assert late[False].max() > 5.0 * late[True].max()


@needs_fixtures
def test_panda_ideal_perfect_model_follows_the_error_dynamics():
    res = run_urdf_closed_loop(str(PANDA), duration=1.0, actuator='ideal')
    run = res.run
    assert run.q.shape == (1000, 7)
    # the run starts at rest on q_d(0): e(0) = 0, e'(0) = -qd_d(0); critically damped,
    # e(t) = -qd_d(0) t exp(-wn t) (the Panda's URDF friction, 0.003 N·m·s/rad, aside)
    wn = math.sqrt(res.kp[0])
    v0 = run.qd[0] - _ref_velocity(res, 0.0)
    t = run.t[:300]
    expected = v0[None, :] * t[:, None] * np.exp(-wn * t[:, None])
    assert np.abs(run.error[:300] - expected).max() < 2e-4
    summary = summarize_urdf_run(res)
    assert max(summary['late_max_error_rad']) < 5e-4
    assert all(0.0 < f < 1.0 for f in summary['peak_torque_fraction'])


def _ref_velocity(res, t):
    return reference_within_limits(res.arm.limits).sample(t)[1]


@needs_fixtures
def test_panda_mismatch_leaves_a_bounded_error_that_shrinks_with_the_gains():
    late = []
    for wn in (10.0, 20.0):
        res = run_urdf_closed_loop(str(PANDA), duration=2.0, actuator='ideal',
                                   nominal_scale=0.8, omega_n=wn)
        late.append(max(summarize_urdf_run(res)['late_max_error_rad']))
    assert 1e-4 < late[1] < late[0] < 0.2


def _scaled_urdf(text: str, factor: float) -> str:
    """Every link's mass and inertia times ``factor``, edited in the XML."""
    root = ET.fromstring(text)
    for inertial in root.iter('inertial'):
        mass = inertial.find('mass')
        mass.set('value', repr(float(mass.get('value')) * factor))
        inertia = inertial.find('inertia')
        for key in ('ixx', 'ixy', 'ixz', 'iyy', 'iyz', 'izz'):
            inertia.set(key, repr(float(inertia.get(key, '0')) * factor))
    return ET.tostring(root, encoding='unicode')


@needs_fixtures
def test_nominal_urdf_gives_the_controller_that_model(tmp_path):
    """A second URDF with every inertial x0.8 is the same controller as --nominal-scale 0.8."""
    other = tmp_path / 'light.urdf'
    other.write_text(_scaled_urdf(PANDA.read_text(), 0.8))
    a = run_urdf_closed_loop(str(PANDA), duration=0.5, nominal_urdf=str(other))
    b = run_urdf_closed_loop(str(PANDA), duration=0.5, nominal_scale=0.8)
    assert np.abs(a.run.q - b.run.q).max() < 1e-9
    c = run_urdf_closed_loop(str(PANDA), duration=0.5)
    assert np.abs(a.run.q - c.run.q).max() > 1e-6          # and not the perfect model
    p = _offline('--urdf', str(PANDA), '--nominal-urdf', str(other), '--duration', '0.2')
    assert p.returncode == 0 and f'nominal model: rigid body from {other}' in p.stdout, p


def test_motor_torque_is_the_drive_torque_law():
    """ArmPlant.motor_torque against actuators.joint_torque (the 2R's scalar law)."""
    arm = TwoLinkArm.from_plant(load_scenario('default').plant)
    motors = motors_sized_for([40.0, 12.0])
    motors[1] = dataclasses.replace(motors[1], eta=0.7, eta_back=0.6)
    friction = [FrictionParameters(b=0.1, tau_c=0.3, eps=0.02)] * 2
    plant = ArmPlant(arm, friction, motors)
    rng = np.random.default_rng(1)
    qd, i = rng.normal(0.0, 0.05, (50, 2)), rng.normal(0.0, 5.0, (50, 2))
    got = plant.motor_torque(qd, i)
    rotor = rng.normal(0.0, 2.0, (50, 2))           # D qdd: the loss on the mesh torque
    mesh = plant.motor_torque(qd, i, rotor)
    for k in range(50):
        for j in range(2):
            assert got[k, j] == pytest.approx(joint_torque(i[k, j], qd[k, j], motors[j], 0.02),
                                              rel=1e-12, abs=1e-12)
            assert mesh[k, j] == pytest.approx(joint_torque(i[k, j], qd[k, j], motors[j], 0.02,
                                                            rotor[k, j]), rel=1e-12, abs=1e-12)


@needs_fixtures
def test_step_and_loop_refuse_wrong_shapes():
    """The compiled passes index without bounds checks: shapes are checked before them."""
    arm = TwoLinkArm.from_plant(load_scenario('default').plant)
    plant = ArmPlant(arm, motors=motors_sized_for([40.0, 12.0]))
    x = plant.initial_state([0.1, 0.2])
    for bad_x, bad_u in ((x, np.ones(3)), (x[:6], np.ones(2)), (x[:, None], np.ones(2))):
        with pytest.raises(ArmShapeError, match='expected x of shape'):
            plant.step(bad_x, bad_u, 1e-3)
        with pytest.raises(ArmShapeError, match='expected x of shape'):
            plant.rhs(bad_x, bad_u)
    traj = reference_within_limits(arm.limits)
    kp, kd = gains_from_bandwidth(2)
    law = Controller(controller_parameters(arm, kp, kd, plant.torque_limit), 1e-3, arm)
    with pytest.raises(ArmShapeError, match='x0: expected 8 finite values'):
        run_arm_closed_loop(plant, law, traj, 0.1, x0=x[:6])


@needs_fixtures
def test_cli_bag_is_read_back_and_analysed_with_its_urdf(tmp_path):
    bag = tmp_path / 'panda'
    p = _offline('--urdf', str(PANDA), '--duration', '1', '--actuator', 'ideal', '--bag',
                 str(bag))
    assert p.returncode == 0 and f'bag written to {bag}' in p.stdout, p
    res = run_urdf_closed_loop(str(PANDA), duration=1.0, actuator='ideal')
    with BagReader(bag) as r:
        assert r.topics['/joint_states'].count == 1000
        assert r.topics['/robot_description'].count == 1
        js = r.read_series(['/joint_states'])['/joint_states']
    np.testing.assert_array_equal(js.position, res.run.q)
    # effort: the command held up to each tick (the previous tick's)
    np.testing.assert_array_equal(js.effort[1:], res.run.tau[:-1])
    rep = subprocess.run([sys.executable, '-m', 'manip_control.bag_analysis', str(bag),
                          '--out', str(tmp_path / 'rep'), '--json', '--no-plots'],
                         capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    model = json.loads(rep.stdout)['model']
    assert model['source'] == 'URDF recorded on /robot_description in the bag'
    for name, fig in model['per_joint'].items():
        m = fig['measured']
        assert m['residual_rms'] < 0.05, (name, m)
        if m['effort_rms'] > 1.0:
            assert m['residual_fraction'] < 0.02, (name, m)
    # a bag directory that holds something is never written into
    p = _offline('--urdf', str(PANDA), '--duration', '0.1', '--bag', str(bag))
    assert p.returncode == 2 and 'exists and is not an empty directory' in p.stderr


def _offline(*args):
    return subprocess.run([sys.executable, '-m', 'manip_control.offline', *args],
                          capture_output=True, text=True, timeout=300)


@needs_fixtures
def test_cli_urdf_run_prints_every_joint():
    p = _offline('--urdf', str(PANDA), '--duration', '0.5')
    assert p.returncode == 0, p.stderr
    names = UrdfArm.from_file(PANDA).joint_names
    for name in names:
        assert f'  {name} ' in p.stdout
    assert '7 joints, motor drives' in p.stdout and 'real time' in p.stdout
    assert 'drives = the plant, friction from the nominal URDF' in p.stdout
    p = _offline('--urdf', str(PANDA), '--duration', '0.3', '--actuator', 'ideal', '--json',
                 '--nominal-scale', '0.9')
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data['joints'] == list(names) and data['nominal_scale'] == 0.9
    assert len(data['late_max_error_rad']) == 7


@pytest.mark.parametrize('args, pattern', [
    (['--urdf', 'no/such.urdf'], 'no/such.urdf'),
    (['--urdf', str(URDF_DIR / 'double_pendulum.urdf')], 'joint joint1: effort limit'),
    (['--urdf', str(PANDA), '--config', 'default'], '--config and --engine do not apply'),
    (['--urdf', str(PANDA), '--duration', '-1'], 'duration: must be > 0'),
    (['--urdf', str(PANDA), '--nominal-scale', '0'], 'nominal scale: must be > 0'),
    (['--urdf', str(PANDA), '--joints', 'panda_joint1', 'nope'], 'nope'),
    (['--urdf', str(PANDA), '--nominal-urdf', 'no/such/nominal.urdf'], 'no/such/nominal.urdf'),
    (['--urdf', str(PANDA), '--duration', '0.0004'], 'at least 2 are needed'),
    (['--urdf', str(URDF_DIR / 'double_pendulum.urdf'), '--actuator', 'ideal', '--duration',
      '0.3', '--omega-n', '5000'], 'the state is not finite at t = '),
    (['--urdf', str(PANDA), '--nominal-urdf', str(URDF_DIR / 'ur5.urdf')], 'panda_joint1'),
])
def test_cli_urdf_bad_input_is_one_line(args, pattern):
    if not PANDA.is_file():
        pytest.skip('../shared/fixtures missing')
    p = _offline(*args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: ') and pattern in lines[0], p.stderr
    assert 'Traceback' not in p.stderr and p.stdout == ''
