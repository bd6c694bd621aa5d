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
The arm-model interface: the 2R closed form, and any URDF arm through Pinocchio.

References, none of them the code under test:

- the closed-form planar 2R (:mod:`manip_control.dynamics`, itself checked against a
  hand derivation in test_dynamics.py) for the package's own generated 2R URDF;
- conservation of energy of the free arm, integrated with scipy's DOP853 at rtol = atol =
  1e-12 (energy from CRBA + the potential, motion from ABA: different algorithms);
- the Christoffel property ``Mdot = C + C^T`` with ``Mdot`` by central differences of CRBA;
- the closed-form solution of ``e'' + Kd e' + Kp e = 0`` for computed torque with a perfect
  model (continuous-time loop, DOP853 at rtol 1e-11);
- consistency between Pinocchio's independent algorithms (RNEA vs ABA vs CRBA vs the
  Coriolis matrix, the gravity torque vs the gradient of the potential energy).
"""

from __future__ import annotations

import math
from pathlib import Path

from manip_control.arm_model import ArmModelError
from manip_control.arm_model import ArmShapeError
from manip_control.arm_model import JointSelectionError
from manip_control.arm_model import read_urdf_file
from manip_control.arm_model import TwoLinkArm
from manip_control.arm_model import UrdfArm
from manip_control.arm_model import UrdfError
from manip_control.control import computed_torque
from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import load_scenario
from manip_control.urdf import urdf_from_scenario
import numpy as np
import pytest
from scipy.integrate import solve_ivp

pytest.importorskip('pinocchio')

URDF_DIR = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf'
#: fixture -> number of joints of its default model (the trunk of movable joints)
FIXTURES = {'panda': 7, 'ur5': 6, 'z1': 7, 'so100': 6, 'xarm7': 7, 'kinova': 6,
            'asr_twodof': 2, 'double_pendulum': 2}


def _fixture(name: str) -> Path:
    path = URDF_DIR / f'{name}.urdf'
    if not path.is_file():
        pytest.skip(f'fixture {path} absent (shared/ must sit beside the project)')
    return path


_ARMS: dict = {}


def _arm(name: str) -> UrdfArm:
    """Each fixture is parsed once per session; each test gets its own workspace."""
    if name not in _ARMS:
        _ARMS[name] = UrdfArm.from_file(_fixture(name))
    return _ARMS[name].workspace()


def _state(arm, rng, speed=1.0):
    """Draw a position inside the joint limits (away from the stops) and a velocity."""
    lo = np.where(np.isfinite(arm.limits.lower), arm.limits.lower, -math.pi)
    hi = np.where(np.isfinite(arm.limits.upper), arm.limits.upper, math.pi)
    q = lo + (hi - lo) * rng.uniform(0.2, 0.8, arm.n)
    return q, speed * rng.uniform(-1.0, 1.0, arm.n)


def _rel(a, b) -> float:
    """Return max |a - b| / max |b|."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# -- the 2R through the URDF path equals the closed form ---------------------------------------


@pytest.fixture(scope='module')
def two_r():
    """Return the 2R in closed form (rotors, coupling) and from its generated URDF."""
    sc = load_scenario('default')
    plant = sc.plant
    closed = TwoLinkModel(plant.arm, plant.reflected_inertia, plant.rotor_coupling_terms)
    assert plant.rotor_coupling_terms[1] > 0.0     # the coupling is exercised
    urdf = UrdfArm.from_string(urdf_from_scenario(sc), armature=plant.reflected_inertia,
                               rotor_coupling=True)
    return closed, urdf, sc


def test_two_link_urdf_equals_closed_form(two_r):
    closed, urdf, sc = two_r
    assert urdf.joint_names == tuple(sc.joints)
    np.testing.assert_array_equal(urdf.gear_ratio, [m.N for m in sc.plant.motors])
    rng = np.random.default_rng(11)
    for _ in range(50):
        q, qd, qdd = rng.uniform(-math.pi, math.pi, 2), rng.uniform(-3, 3, 2), \
            rng.uniform(-20, 20, 2)
        assert _rel(urdf.mass_matrix(q), closed.inertia_matrix(q)) <= 1e-12
        assert _rel(urdf.gravity(q), closed.gravity_vector(q)) <= 1e-12
        assert _rel(urdf.coriolis_matrix(q, qd), closed.coriolis_matrix(q, qd)) <= 1e-12
        assert _rel(urdf.bias(q, qd), closed.coriolis_vector(q, qd)
                    + closed.gravity_vector(q)) <= 1e-12
        assert _rel(urdf.inverse_dynamics(q, qd, qdd), closed.inverse_dynamics(q, qd, qdd)) \
            <= 1e-12
        tau = rng.uniform(-50, 50, 2)
        assert _rel(urdf.forward_dynamics(q, qd, tau), closed.forward_dynamics(q, qd, tau)) \
            <= 1e-12
        assert abs(urdf.potential_energy(q) - closed.potential_energy(q)) <= \
            1e-12 * (sc.plant.arm.m1 + sc.plant.arm.m2) * 9.81 * 2.0
        assert _rel(urdf.kinetic_energy(q, qd), closed.kinetic_energy(q, qd)) <= 1e-12


def test_two_link_arm_wraps_the_closed_form(two_r):
    closed, urdf, sc = two_r
    arm = TwoLinkArm.from_plant(sc.plant, sc.joints)
    assert arm.n == 2 and arm.joint_names == ('joint1', 'joint2')
    assert not arm.limits.unspecified
    np.testing.assert_array_equal(arm.gravity_field, [0.0, -9.81, 0.0])
    rng = np.random.default_rng(3)
    for _ in range(20):
        q, qd, qdd = (rng.uniform(-3, 3, 2) for _ in range(3))
        np.testing.assert_array_equal(arm.mass_matrix(q), closed.inertia_matrix(q))
        np.testing.assert_array_equal(arm.inverse_dynamics(q, qd, qdd),
                                      closed.inverse_dynamics(q, qd, qdd))
        assert _rel(arm.bias(q, qd), closed.coriolis_vector(q, qd) + closed.gravity_vector(q)) \
            <= 1e-15
        np.testing.assert_allclose(arm.forward_dynamics(q, qd, arm.inverse_dynamics(q, qd, qdd)),
                                   qdd, rtol=1e-12, atol=1e-12)
        # the ArmModel the URDF gives and the wrapper agree through the same interface
        assert _rel(urdf.inverse_dynamics(q, qd, qdd), arm.inverse_dynamics(q, qd, qdd)) \
            <= 1e-12
    nominal = TwoLinkArm.from_nominal(sc.controller.nominal, sc.joints)
    assert nominal.limits.unspecified and nominal.workspace() is nominal
    with pytest.raises(ArmShapeError, match=r'^q: expected 2 values'):
        arm.mass_matrix([0.0, 0.0, 0.0])


def test_two_link_horizontal_plane_is_zero_gravity():
    sc = load_scenario('default')
    text = urdf_from_scenario(sc)
    flat = UrdfArm.from_string(text, gravity=(0.0, 0.0, 0.0))
    q = np.array([0.3, -1.1])
    assert np.all(flat.gravity(q) == 0.0) and flat.potential_energy(q) == 0.0


# -- every fixture arm --------------------------------------------------------------------------


@pytest.mark.parametrize('name', sorted(FIXTURES))
def test_fixture_loads_with_its_joints_and_limits(name):
    arm = _arm(name)
    assert arm.n == FIXTURES[name] == len(arm.joint_names)
    assert arm.pin_model.nq == arm.pin_model.nv == arm.n
    lim = arm.limits
    for field in ('lower', 'upper', 'velocity', 'effort'):
        assert getattr(lim, field).shape == (arm.n,)
    assert np.all(lim.lower <= lim.upper)
    np.testing.assert_array_equal(arm.gravity_field, [0.0, 0.0, -9.81])


def test_panda_trunk_locks_the_fingers_and_reads_its_limits():
    arm = _arm('panda')
    assert arm.joint_names == tuple(f'panda_joint{k}' for k in range(1, 8))
    assert arm.locked_joints == {'panda_finger_joint1': 0.0, 'panda_finger_joint2': 0.0}
    # panda.urdf: joint 1 <limit effort="87" lower="-2.8973" upper="2.8973" velocity="2.175"/>
    assert (arm.limits.lower[0], arm.limits.upper[0], arm.limits.effort[0],
            arm.limits.velocity[0]) == (-2.8973, 2.8973, 87.0, 2.175)
    assert arm.limits.effort[6] == 12.0
    assert not arm.limits.unspecified


def test_kinova_continuous_joints_are_plain_angles():
    """The converted model equals Pinocchio's own (cos, sin) model of the continuous joints."""
    import pinocchio as pin
    path = _fixture('kinova')
    arm = _arm('kinova')
    native = pin.buildModelFromUrdf(str(path))
    assert (native.nq, native.nv) == (9, 6)
    data = native.createData()
    cont = [arm.joint_names.index(f'j2s6s200_joint_{k}') for k in (1, 4, 6)]
    assert np.all(np.isinf(arm.limits.upper[cont])) and np.all(np.isinf(arm.limits.lower[cont]))
    assert {f'j2s6s200_joint_{k}.lower' for k in (1, 4, 6)} <= set(arm.limits.unspecified)
    rng = np.random.default_rng(5)
    for _ in range(10):
        q, qd = _state(arm, rng)
        q[cont] += rng.uniform(-10, 10, 3)          # any number of turns
        qn = np.zeros(native.nq)
        for j, name in enumerate(arm.joint_names):
            jid = native.getJointId(name)
            k = native.idx_qs[jid]
            if native.nqs[jid] == 2:
                qn[k:k + 2] = math.cos(q[j]), math.sin(q[j])
            else:
                qn[k] = q[j]
        m = pin.crba(native, data, qn)
        m = np.triu(m) + np.triu(m, 1).T
        assert _rel(arm.mass_matrix(q), m) <= 1e-12
        assert _rel(arm.bias(q, qd), pin.nonLinearEffects(native, data, qn, qd)) <= 1e-12


def test_reduced_model_equals_the_full_model_with_locked_joints():
    import pinocchio as pin
    sub = UrdfArm.from_file(_fixture('panda'), ['panda_joint1', 'panda_joint2', 'panda_joint4'],
                            locked_positions={'panda_joint3': 0.4, 'panda_joint7': -1.0})
    full = UrdfArm.from_file(_fixture('panda'))
    assert sub.n == 3
    # unnamed locked joints sit at 0 clipped into their limits (joint 6: [-0.0175, 3.7525])
    assert sub.locked_joints['panda_joint3'] == 0.4
    assert sub.locked_joints['panda_joint5'] == 0.0
    assert sub.locked_joints['panda_joint7'] == -1.0
    model = pin.buildModelFromUrdf(str(_fixture('panda')))
    data = model.createData()
    rng = np.random.default_rng(8)
    idx = [0, 1, 3]
    for _ in range(5):
        qs, qds = _state(sub, rng)
        q = np.zeros(model.nq)
        q[:7] = [qs[0], qs[1], 0.4, qs[2], 0.0, 0.0, -1.0]
        qd = np.zeros(model.nv)
        qd[idx] = qds
        m = pin.crba(model, data, q)
        m = np.triu(m) + np.triu(m, 1).T
        assert _rel(sub.mass_matrix(qs), m[np.ix_(idx, idx)]) <= 1e-12
        assert _rel(sub.bias(qs, qds), pin.nonLinearEffects(model, data, q, qd)[idx]) <= 1e-12
    assert full.n == 7


@pytest.mark.parametrize('name', sorted(FIXTURES))
def test_algorithms_agree_with_each_other(name):
    """RNEA vs ABA vs CRBA vs C(q, qd) vs the gradient of V: independent algorithms agree."""
    arm = _arm(name)
    rng = np.random.default_rng(hash(name) % 2**32)
    for _ in range(5):
        q, qd = _state(arm, rng)
        qdd = rng.uniform(-2, 2, arm.n)
        m = arm.mass_matrix(q)
        assert np.allclose(m, m.T, rtol=0, atol=1e-14 * np.abs(m).max())
        assert np.linalg.eigvalsh(m).min() > 0.0
        tau = arm.inverse_dynamics(q, qd, qdd)
        assert _rel(m @ qdd + arm.bias(q, qd), tau) <= 1e-10
        assert _rel(arm.coriolis_matrix(q, qd) @ qd + arm.gravity(q), arm.bias(q, qd)) <= 1e-10
        assert _rel(arm.forward_dynamics(q, qd, tau), qdd) <= 1e-9
        h = 1e-6
        grad = np.array([(arm.potential_energy(q + h * e) - arm.potential_energy(q - h * e))
                         / (2 * h) for e in np.eye(arm.n)])
        g = arm.gravity(q)
        assert np.max(np.abs(grad - g)) <= 1e-7 * max(np.abs(g).max(), 1.0)


@pytest.mark.parametrize('name', sorted(FIXTURES))
def test_christoffel_form_mdot_minus_2c_is_skew(name):
    arm = _arm(name)
    rng = np.random.default_rng(17)
    for _ in range(5):
        q, qd = _state(arm, rng, speed=2.0)
        h = 1e-6
        mdot = (arm.mass_matrix(q + h * qd) - arm.mass_matrix(q - h * qd)) / (2 * h)
        c = arm.coriolis_matrix(q, qd)
        n_mat = mdot - 2.0 * c
        scale = max(np.abs(mdot).max(), np.abs(c).max())
        assert np.abs(n_mat + n_mat.T).max() <= 1e-6 * scale
        assert np.abs(mdot - (c + c.T)).max() <= 1e-6 * scale


@pytest.mark.parametrize('name', sorted(FIXTURES))
def test_free_arm_conserves_energy(name):
    """Zero torque, no friction: ``T + V`` drifts by <= 1e-8 of the swing energy over 5 s."""
    arm = _arm(name)
    rng = np.random.default_rng(23)
    q0, qd0 = _state(arm, rng, speed=0.5)
    n = arm.n
    zero = np.zeros(n)

    def rhs(_t, x):
        return np.concatenate((x[n:], arm.forward_dynamics(x[:n], x[n:], zero)))

    sol = solve_ivp(rhs, (0.0, 5.0), np.concatenate((q0, qd0)), method='DOP853', rtol=1e-12,
                    atol=1e-12, t_eval=np.linspace(0.0, 5.0, 201))
    assert sol.success, sol.message
    energy = np.array([arm.total_energy(x[:n], x[n:]) for x in sol.y.T])
    kinetic = np.array([arm.kinetic_energy(x[:n], x[n:]) for x in sol.y.T])
    swing = kinetic.max()
    assert swing > 1e-3 * max(abs(energy[0]), 1e-6)       # the arm does move
    drift = np.abs(energy - energy[0]).max()
    assert drift <= 1e-8 * swing, f'{name}: drift {drift:.3e} J of a {swing:.3e} J swing'


def test_armature_and_coupling_enter_every_algorithm(two_r):
    """Pinocchio's armature goes into CRBA, RNEA and ABA; the coupling is a constant M term."""
    _closed, urdf, sc = two_r
    bare = UrdfArm.from_string(urdf_from_scenario(sc))
    rng = np.random.default_rng(2)
    jr = np.array(sc.plant.reflected_inertia)
    jm2, n2 = sc.plant.motors[1].Jm, sc.plant.motors[1].N
    extra = np.diag(jr) + np.array([[jm2, jm2 * n2], [jm2 * n2, 0.0]])
    np.testing.assert_allclose(urdf.coupling_matrix, [[jm2, jm2 * n2], [jm2 * n2, 0.0]],
                               rtol=1e-15)
    for _ in range(5):
        q, qd, qdd = (rng.uniform(-2, 2, 2) for _ in range(3))
        assert _rel(urdf.mass_matrix(q) - bare.mass_matrix(q), extra) <= 1e-12
        assert _rel(urdf.inverse_dynamics(q, qd, qdd) - bare.inverse_dynamics(q, qd, qdd),
                    extra @ qdd) <= 1e-10
        tau = urdf.inverse_dynamics(q, qd, qdd)
        assert _rel(urdf.forward_dynamics(q, qd, tau), qdd) <= 1e-12
    # armature alone (no coupling) through ABA
    arm = UrdfArm.from_file(_fixture('ur5'), armature=0.3)
    q, qd = _state(arm, rng)
    qdd = rng.uniform(-1, 1, arm.n)
    plain = UrdfArm.from_file(_fixture('ur5'))
    assert _rel(arm.mass_matrix(q) - plain.mass_matrix(q), 0.3 * np.eye(arm.n)) <= 1e-12
    assert _rel(arm.forward_dynamics(q, qd, arm.inverse_dynamics(q, qd, qdd)), qdd) <= 1e-10


def test_rotor_coupling_refused_where_it_depends_on_q():
    with pytest.raises(ArmModelError, match='panda_joint2: its axis is not parallel') as exc:
        UrdfArm.from_file(_fixture('panda'), armature=0.1, rotor_coupling=True)
    assert '\n' not in str(exc.value)
    # joint 1 has no moving ancestor: its coupling is zero and allowed
    arm = UrdfArm.from_file(_fixture('panda'), armature=0.1,
                            rotor_coupling=[True] + [False] * 6)
    assert not arm.coupling_matrix.any()


# -- computed torque on any arm ----------------------------------------------------------------


def _reference(arm, rng):
    """Return a sinusoid per joint inside the joint limits: t -> (q_d, qd_d, qdd_d)."""
    lo = np.where(np.isfinite(arm.limits.lower), arm.limits.lower, -math.pi)
    hi = np.where(np.isfinite(arm.limits.upper), arm.limits.upper, math.pi)
    mid, amp = 0.5 * (lo + hi), 0.2 * np.minimum(0.5 * (hi - lo), 1.0)
    w = rng.uniform(1.0, 2.0, arm.n)
    ph = rng.uniform(0, 2 * math.pi, arm.n)

    def ref(t):
        s, c = np.sin(w * t + ph), np.cos(w * t + ph)
        return mid + amp * s, amp * w * c, -amp * w * w * s
    return ref


def _closed_loop(plant, nominal, ref, kp, kd, e0, t_end, rtol):
    n = plant.n

    def rhs(t, x):
        q, qd = x[:n], x[n:]
        qr, qdr, qddr = ref(t)
        tau = computed_torque(q, qd, qr, qdr, qddr, nominal, kp, kd)
        return np.concatenate((qd, plant.forward_dynamics(q, qd, tau)))

    qr, qdr, _ = ref(0.0)
    t = np.linspace(0.0, t_end, 301)
    sol = solve_ivp(rhs, (0.0, t_end), np.concatenate((qr + e0, qdr)), method='DOP853',
                    rtol=rtol, atol=rtol * 1e-2, t_eval=t)
    assert sol.success, sol.message
    err = np.array([sol.y[:n, k] - ref(tk)[0] for k, tk in enumerate(t)])
    return t, err


@pytest.mark.parametrize('name', sorted(FIXTURES))
def test_computed_torque_perfect_model_error_dynamics(name):
    """``e'' + Kd e' + Kp e = 0``: e(t) = (e0 + wn e0 t) exp(-wn t) for zeta = 1, e'(0) = 0."""
    plant = _arm(name)
    nominal = plant.workspace()       # the same model, the controller's own scratch data
    rng = np.random.default_rng(31)
    wn = 10.0
    kp, kd = np.full(plant.n, wn * wn), np.full(plant.n, 2.0 * wn)
    e0 = rng.uniform(0.02, 0.05, plant.n) * rng.choice([-1.0, 1.0], plant.n)
    t, err = _closed_loop(plant, nominal, _reference(plant, rng), kp, kd, e0, 2.0, 1e-11)
    expected = (e0[None, :] * (1.0 + wn * t[:, None])) * np.exp(-wn * t[:, None])
    assert np.abs(err - expected).max() <= 1e-8


@pytest.mark.parametrize('name', sorted(FIXTURES))
def test_computed_torque_mismatched_masses_bounded_and_shrinking_with_gains(name):
    plant = _arm(name)
    factors = np.where(np.arange(plant.n) % 2 == 0, 1.2, 0.8)    # masses off by +-20 %
    nominal = plant.with_inertial_scale(factors)
    assert not np.allclose(nominal.mass_matrix(np.zeros(plant.n)),
                           plant.mass_matrix(np.zeros(plant.n)))
    rng = np.random.default_rng(41)
    ref = _reference(plant, rng)
    e0 = np.full(plant.n, 0.03)
    late = []
    for wn in (20.0, 40.0, 80.0):
        t, err = _closed_loop(plant, nominal, ref, np.full(plant.n, wn * wn),
                              np.full(plant.n, 2.0 * wn), e0, 3.0, 1e-7)
        assert np.all(np.isfinite(err)) and np.abs(err).max() <= 0.5      # bounded
        late.append(np.abs(err[t >= 1.5]).max())
    # the ultimate bound scales like 1/wn^2 (ISS gain of the error dynamics): at least
    # halved for each doubling of wn
    assert late[1] < 0.5 * late[0] and late[2] < 0.5 * late[1], late
    assert late[2] > 1e-6                         # the mismatch is visible at all


def test_inertial_scale_scales_mass_and_keeps_the_centre_of_mass():
    arm = _arm('asr_twodof')
    scaled = arm.with_inertial_scale([2.0, 2.0])
    q = np.array([0.3, 0.2])
    assert _rel(scaled.mass_matrix(q), 2.0 * arm.mass_matrix(q)) <= 1e-12
    assert _rel(scaled.gravity(q), 2.0 * arm.gravity(q)) <= 1e-12
    with pytest.raises(ArmModelError, match=r'^factors: must be finite and > 0'):
        arm.with_inertial_scale([1.0, 0.0])
    # mass and rotational inertia apart: the pure-inertia part follows the inertia factor only
    apart = arm.with_inertial_scale([1.0, 1.0], [3.0, 0.5])
    for i in (1, 2):
        a, b = arm.pin_model.inertias[i], apart.pin_model.inertias[i]
        assert b.mass == a.mass and np.array_equal(b.lever, a.lever)
        assert np.allclose(b.inertia, a.inertia * [3.0, 0.5][i - 1], rtol=1e-15, atol=0.0)
    with pytest.raises(ArmModelError, match=r'^inertia_factors: must be finite and > 0'):
        arm.with_inertial_scale(1.0, [1.0, -1.0])


# -- loading, and every refusal in one line ----------------------------------------------------


def _one_line_error(exc_type, pattern, fn, *args, **kwargs):
    with pytest.raises(exc_type, match=pattern) as info:
        fn(*args, **kwargs)
    assert '\n' not in str(info.value)
    return str(info.value)


TINY = """<robot name="tiny">
  <link name="base"/>
  <link name="l1"><inertial><mass value="1"/><origin xyz="0.5 0 0"/>
    <inertia ixx="0.01" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="j1" type="{type}"><parent link="base"/><child link="l1"/>
    <axis xyz="0 1 0"/>{limit}</joint>
</robot>"""


def test_string_file_and_robot_description_give_the_same_arm(tmp_path):
    text = _fixture('ur5').read_text()
    a = UrdfArm.from_string(text)
    b = UrdfArm.from_file(_fixture('ur5'))
    assert a.joint_names == b.joint_names and a.source == 'robot_description'
    q = np.linspace(-1, 1, a.n)
    np.testing.assert_array_equal(a.mass_matrix(q), b.mass_matrix(q))
    assert read_urdf_file(_fixture('ur5')) == text


def test_limits_missing_or_zero_are_infinite_and_listed():
    zero = '<limit effort="0" velocity="0"/>'
    arm = UrdfArm.from_string(TINY.format(type='revolute', limit=zero))
    assert set(arm.limits.unspecified) == {'j1.lower', 'j1.upper', 'j1.velocity', 'j1.effort'}
    assert np.isinf(arm.limits.effort[0])
    # double_pendulum.urdf gives lower = upper = effort = velocity = 0: no limits at all
    dp = _arm('double_pendulum')
    assert np.all(np.isinf(dp.limits.effort)) and len(dp.limits.unspecified) == 8
    over = UrdfArm.from_string(TINY.format(type='revolute', limit=zero),
                               limits={'effort': [5.0], 'velocity': 2.0})
    assert over.limits.effort[0] == 5.0 and over.limits.velocity[0] == 2.0
    assert set(over.limits.unspecified) == {'j1.lower', 'j1.upper'}


def test_prismatic_and_continuous_single_joint():
    lim = '<limit lower="-0.2" upper="0.3" effort="50" velocity="1"/>'
    slider = UrdfArm.from_string(TINY.format(type='prismatic', limit=lim))
    # a slider along y, gravity along -z: no gravity torque; M = the mass
    assert slider.mass_matrix([0.1])[0, 0] == pytest.approx(1.0, rel=1e-15)
    assert slider.gravity([0.1])[0] == 0.0
    wheel = UrdfArm.from_string(TINY.format(type='continuous', limit=''))
    # a pendulum about +y, CoM at x = 0.5: z_c = -0.5 sin q, V = m g0 z_c, g = dV/dq
    q = 0.7
    assert wheel.gravity([q])[0] == pytest.approx(-9.81 * 0.5 * math.cos(q), rel=1e-12)
    assert wheel.mass_matrix([q])[0, 0] == pytest.approx(0.1 + 0.25, rel=1e-12)


@pytest.mark.parametrize('text, pattern', [
    ('<robot', r'^robot_description: not valid XML'),
    ('<model name="x"/>', r'^robot_description: the root element is <model>, not <robot>'),
    ('', r'^robot_description: empty robot description'),
    (TINY.format(type='fixed', limit=''), r'^robot_description: no movable joint'),
    (TINY.format(type='revolute', limit=''),
     r'^robot_description: joint j1: a revolute joint needs <limit effort=\.\.\. velocity'),
    (TINY.format(type='floating', limit=''), r'^robot_description: joint j1 is floating'),
    (TINY.format(type='hinge', limit=''), r'^robot_description: joint j1 has unknown type'),
    (TINY.replace('child link="l1"', 'child link="l9"').format(type='revolute', limit=''),
     r'^robot_description: joint j1 refers to link l9, which is not defined'),
    (TINY.format(type='revolute', limit='<limit lower="a" upper="1" effort="1" velocity="1"/>'),
     r'^robot_description: joint j1: <limit lower="a"> is not a number'),
    (TINY.replace('xyz="0 1 0"', 'xyz="0 0 0"').format(type='continuous', limit=''),
     r'^robot_description: joint j1: <axis xyz="0 0 0"> is not a non-zero 3-vector'),
])
def test_bad_urdf_is_one_line_error(text, pattern):
    _one_line_error(UrdfError, pattern, UrdfArm.from_string, text)


def test_bad_joint_names_and_vectors_are_one_line_errors(tmp_path):
    path = _fixture('panda')
    msg = _one_line_error(JointSelectionError, r'^joints: panda_joint9 not a movable joint',
                          UrdfArm.from_file, path, ['panda_joint1', 'panda_joint9'])
    assert 'panda_finger_joint1' in msg       # lists what exists
    _one_line_error(JointSelectionError, r'^joints: give them in chain order: panda_joint1, '
                    r'panda_joint2', UrdfArm.from_file, path, ['panda_joint2', 'panda_joint1'])
    _one_line_error(JointSelectionError, r'^joints: panda_joint1 named more than once',
                    UrdfArm.from_file, path, ['panda_joint1', 'panda_joint1'])
    _one_line_error(JointSelectionError, r"^locked_positions: 'nope' is not a movable joint",
                    UrdfArm.from_file, path, locked_positions={'nope': 0.0})
    _one_line_error(ArmShapeError, r'^armature: expected 7 values', UrdfArm.from_file, path,
                    armature=[0.1, 0.2])
    _one_line_error(ArmShapeError, r'^limits.effort: expected 7 values', UrdfArm.from_file,
                    path, limits={'effort': [1.0] * 6})
    _one_line_error(ArmModelError, r'^limits.torque: unknown limit', UrdfArm.from_file, path,
                    limits={'torque': [1.0] * 7})
    _one_line_error(ArmModelError, r'^gravity: expected 3', UrdfArm.from_file, path,
                    gravity=(0.0, -9.81))
    _one_line_error(UrdfError, r'no such file$', UrdfArm.from_file, tmp_path / 'none.urdf')
    arm = _arm('panda')
    _one_line_error(ArmShapeError, r'^qd: expected 7 values \(one per joint: panda_joint1, ',
                    arm.bias, np.zeros(7), np.zeros(9))
    _one_line_error(ArmShapeError, r'^tau: expected 7 values', arm.forward_dynamics,
                    np.zeros(7), np.zeros(7), [1.0])
    with pytest.raises(TypeError, match='from_string'):
        UrdfArm()


def test_xacro_file(tmp_path):
    """A .xacro goes through the xacro package (macro + property) to the same arm."""
    pytest.importorskip('xacro')
    src = tmp_path / 'tiny.urdf.xacro'
    src.write_text(
        '<robot name="tiny" xmlns:xacro="http://www.ros.org/wiki/xacro">\n'
        '  <xacro:property name="m" value="1"/>\n'
        '  <xacro:arg name="lc" default="0.5"/>\n'
        '  <link name="base"/>\n'
        '  <link name="l1"><inertial><mass value="${m}"/><origin xyz="$(arg lc) 0 0"/>\n'
        '    <inertia ixx="0.01" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/></inertial>'
        '</link>\n'
        '  <joint name="j1" type="continuous"><parent link="base"/><child link="l1"/>\n'
        '    <axis xyz="0 1 0"/></joint>\n'
        '</robot>\n')
    arm = UrdfArm.from_file(src)
    plain = UrdfArm.from_string(TINY.format(type='continuous', limit=''))
    assert arm.gravity([0.4])[0] == pytest.approx(plain.gravity([0.4])[0], rel=1e-15)
    moved = UrdfArm.from_file(src, xacro_args={'lc': '0.25'})
    assert moved.gravity([0.0])[0] == pytest.approx(-9.81 * 0.25, rel=1e-12)
    bad = tmp_path / 'bad.xacro'
    bad.write_text('<robot xmlns:xacro="http://www.ros.org/wiki/xacro">${undefined_thing}'
                   '</robot>')
    _one_line_error(UrdfError, r'bad.xacro: xacro failed', UrdfArm.from_file, bad)


def test_workspaces_share_the_model_not_the_data():
    arm = _arm('xarm7')
    other = arm.workspace()
    assert other.pin_model is arm.pin_model and other._data is not arm._data
    q1, q2 = np.full(7, 0.1), np.full(7, -0.4)
    m1 = arm.mass_matrix(q1)
    m2 = other.mass_matrix(q2)
    np.testing.assert_array_equal(arm.mass_matrix(q1), m1)   # results are copies, not views
    assert not np.allclose(m1, m2)
    tau = arm.gravity(q1)
    arm.gravity(q2)
    np.testing.assert_array_equal(tau, arm.gravity(q1))
