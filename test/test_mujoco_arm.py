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
The MuJoCo arm against Pinocchio (the package's ``UrdfArm``): two independent engines.

MuJoCo's mass matrix (``mj_fullM``) and bias force at rest (``qfrc_bias``) must equal
Pinocchio's CRBA and generalized gravity on every fixture arm and on the package's own 2R
URDF; a torque held from rest must give Pinocchio's ``M^-1 (tau - g)``; friction, damping,
armature and the mass scale must act as documented; a description MuJoCo cannot load is
refused in one line.
"""

from __future__ import annotations

import math
from pathlib import Path

from manip_control.arm_model import ArmModelError
from manip_control.arm_model import UrdfArm
from manip_control.arm_model import UrdfError
from manip_control.mujoco_arm import MujocoArm
from manip_control.mujoco_arm import MujocoLoadError
from manip_control.parameters import load_scenario
from manip_control.urdf import urdf_from_scenario
import numpy as np
import pytest

pytest.importorskip('pinocchio')
pytest.importorskip('mujoco')

ROOT = Path(__file__).resolve().parents[1]
URDF_DIR = ROOT.parent / 'shared' / 'fixtures' / 'urdf'
FIXTURES = sorted(p.stem for p in URDF_DIR.glob('*.urdf'))
OWN_2R = ROOT / 'urdf' / 'manip_2r.urdf'
TOL = 1e-5


def _rel(a, b) -> float:
    """Return max |a - b| / max |b|."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _states(arm: UrdfArm, rng, count: int):
    lo = np.where(np.isfinite(arm.limits.lower), arm.limits.lower, -math.pi)
    hi = np.where(np.isfinite(arm.limits.upper), arm.limits.upper, math.pi)
    return [lo + (hi - lo) * rng.uniform(0.1, 0.9, arm.n) for _ in range(count)]


def _sources():
    assert len(FIXTURES) >= 8, f'fixtures missing in {URDF_DIR}'
    return [URDF_DIR / f'{name}.urdf' for name in FIXTURES] + [OWN_2R, 'manip-urdf']


def _load(source, **kwargs):
    if source == 'manip-urdf':
        text = urdf_from_scenario(load_scenario('default'))
        return MujocoArm.from_urdf(text, **kwargs), UrdfArm.from_string(text)
    return MujocoArm.from_urdf(source, **kwargs), UrdfArm.from_file(source)


@pytest.mark.parametrize('source', _sources(), ids=lambda s: Path(str(s)).stem)
def test_mass_matrix_and_gravity_equal_pinocchio(source):
    mj, pin = _load(source)
    assert mj.joint_names == pin.joint_names and mj.n == pin.n
    rng = np.random.default_rng(26)
    for q in _states(pin, rng, 20):
        m_pin = pin.mass_matrix(q)
        assert _rel(mj.mass_matrix(q), m_pin) <= TOL, (q, mj.mass_matrix(q), m_pin)
        assert _rel(mj.gravity(q), pin.gravity(q)) <= TOL, (q, mj.gravity(q), pin.gravity(q))


def test_the_comparison_can_fail():
    """A 1 % heavier MuJoCo link 3 is seen by the same comparison (the check is not blind)."""
    path = URDF_DIR / 'panda.urdf'
    scale = np.ones(7)
    scale[2] = 1.01
    mj, pin = MujocoArm.from_urdf(path, mass_scale=scale), UrdfArm.from_file(path)
    q = _states(pin, np.random.default_rng(1), 1)[0]
    assert _rel(mj.mass_matrix(q), pin.mass_matrix(q)) > 10 * TOL
    assert _rel(mj.gravity(q), pin.gravity(q)) > 10 * TOL


@pytest.mark.parametrize('name', ['panda', 'xarm7', 'kinova'])
def test_armature_and_mass_scale_equal_pinocchio(name):
    path = URDF_DIR / f'{name}.urdf'
    pin = UrdfArm.from_file(path)
    rng = np.random.default_rng(3)
    scale, arma = rng.uniform(0.7, 1.3, pin.n), rng.uniform(0.0, 0.2, pin.n)
    mj = MujocoArm.from_urdf(path, mass_scale=scale, armature=arma)
    ref = UrdfArm.from_file(path, armature=arma).with_inertial_scale(scale)
    for q in _states(pin, rng, 5):
        assert _rel(mj.mass_matrix(q), ref.mass_matrix(q)) <= TOL
        assert _rel(mj.gravity(q), ref.gravity(q)) <= TOL


@pytest.mark.parametrize('name', ['panda', 'ur5', 'double_pendulum'])
def test_held_torque_gives_pinocchio_acceleration_from_rest(name):
    path = URDF_DIR / f'{name}.urdf'
    pin = UrdfArm.from_file(path)
    mj = MujocoArm.from_urdf(path, integrator='RK4')
    rng = np.random.default_rng(7)
    q0 = _states(pin, rng, 1)[0]
    tau = pin.gravity(q0) + rng.uniform(-1.0, 1.0, pin.n)
    qdd = np.linalg.solve(pin.mass_matrix(q0), tau - pin.gravity(q0))
    mj.set_state(q0)
    duration = 2e-3
    mj.step(tau, duration)
    assert mj.time == pytest.approx(duration, abs=1e-12)
    np.testing.assert_array_equal(mj.tau, tau)
    # over 2 ms the acceleration changes by O(qdd^2 T^2 / q-scale): 1e-3 relative covers it
    assert _rel(mj.qd / duration, qdd) <= 1e-3
    assert _rel((mj.q - q0) / (0.5 * duration ** 2), qdd) <= 2e-3


def test_dry_friction_and_damping_act_as_documented():
    path = URDF_DIR / 'double_pendulum.urdf'
    pin = UrdfArm.from_file(path)
    q0 = np.array([0.3, -0.4])
    # gravity compensated plus 0.5 N m: held still by 1 N m of dry friction, moved by 0.4 N m
    held = MujocoArm.from_urdf(path, frictionloss=1.0)
    held.set_state(q0)
    for _ in range(200):
        held.step(pin.gravity(held.q) + 0.5)
    # a soft constraint: it creeps (2e-4 rad here), it does not slide (0.4 rad below)
    assert np.max(np.abs(held.q - q0)) < 1e-3
    moved = MujocoArm.from_urdf(path, frictionloss=0.4)
    moved.set_state(q0)
    for _ in range(200):
        moved.step(pin.gravity(moved.q) + 0.5)
    assert np.max(np.abs(moved.q - q0)) > 0.1
    # damping: the same push from rest is slower with b = 5 N m s/rad
    free, damped = MujocoArm.from_urdf(path), MujocoArm.from_urdf(path, damping=5.0)
    for arm in (free, damped):
        arm.set_state(q0)
        arm.step(pin.gravity(q0) + 0.5, 0.05)
    assert np.all(np.abs(damped.qd) < np.abs(free.qd))


def test_urdf_dynamics_are_read_on_request_and_added_to():
    path = URDF_DIR / 'xarm7.urdf'       # <dynamics damping="10|5|2" friction="1">
    assert MujocoArm.from_urdf(path).model.dof_damping.max() == 0.0
    mj = MujocoArm.from_urdf(path, urdf_dynamics=True, damping=0.5, frictionloss=0.25)
    damping = [float(j.find('dynamics').get('damping')) for j in _joints(path, mj.joint_names)]
    friction = [float(j.find('dynamics').get('friction')) for j in _joints(path, mj.joint_names)]
    np.testing.assert_allclose(mj.model.dof_damping, np.add(damping, 0.5), rtol=1e-12)
    np.testing.assert_allclose(mj.model.dof_frictionloss, np.add(friction, 0.25), rtol=1e-12)


def _joints(path, names):
    import xml.etree.ElementTree as ET
    by_name = {j.get('name'): j for j in ET.parse(path).getroot().findall('joint')}
    return [by_name[name] for name in names]


def test_extra_joints_are_locked_like_urdf_arm():
    mj = MujocoArm.from_urdf(URDF_DIR / 'panda.urdf')
    assert mj.n == 7 and mj.model.nv == 7
    assert 'panda_finger_joint1' in mj.notes[0]
    assert 'visual' in mj.notes[0] and '\n' not in mj.notes[0]


def test_divergence_is_reported_not_silently_reset(tmp_path, monkeypatch):
    """Raise on divergence: MuJoCo itself resets the simulation to q = 0 and goes on."""
    monkeypatch.chdir(tmp_path)         # MuJoCo writes its warnings to ./MUJOCO_LOG.TXT
    from manip_control.mujoco_arm import MujocoDivergedError
    mj = MujocoArm.from_urdf(URDF_DIR / 'double_pendulum.urdf')
    mj.set_state([0.3, -0.4])
    mj.step([0.0, 0.0])
    with pytest.raises(MujocoDivergedError, match='diverged'):
        mj.step([1e300, -1e300])
    mj.set_state([0.3, -0.4])          # a new start clears it
    mj.step([0.0, 0.0])


@pytest.mark.parametrize('integrator, diverges', [('implicitfast', False), ('RK4', True)])
def test_xarm7_with_its_urdf_damping_stays_stable_by_default(
        integrator, diverges, tmp_path, monkeypatch):
    """Effort-limited torques from mid-range: the default never diverges, RK4 does."""
    monkeypatch.chdir(tmp_path)         # MuJoCo writes its warnings to ./MUJOCO_LOG.TXT
    from manip_control.mujoco_arm import MujocoDivergedError
    path = URDF_DIR / 'xarm7.urdf'
    pin = UrdfArm.from_file(path)
    lim = pin.limits
    q0 = np.where(np.isfinite(lim.lower) & np.isfinite(lim.upper),
                  0.5 * (lim.lower + lim.upper), 0.0)
    kwargs = {} if integrator == 'implicitfast' else {'integrator': integrator}
    mj = MujocoArm.from_urdf(path, urdf_dynamics=True, **kwargs)
    rng = np.random.default_rng(1)
    bad = 0
    for _ in range(10):
        tau = rng.uniform(-1.0, 1.0, 7) * lim.effort
        mj.set_state(q0)
        try:
            for _ in range(20):
                mj.step(tau)
        except MujocoDivergedError:
            bad += 1
    assert (bad > 0) == diverges, bad


def _massless_leaf(tmp_path) -> Path:
    text = (URDF_DIR / 'double_pendulum.urdf').read_text()
    pin = UrdfArm.from_string(text)
    # a third revolute joint carrying a link with no inertial at all: nothing for MuJoCo to move
    extra = ('<joint name="extra" type="revolute"><parent link="{}"/><child link="ghost"/>'
             '<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/>'
             '</joint><link name="ghost"/></robot>')
    import xml.etree.ElementTree as ET
    root = ET.fromstring(text)
    tip = [j.find('child').get('link') for j in root.findall('joint')
           if j.get('name') == pin.joint_names[-1]][0]
    path = tmp_path / 'ghost.urdf'
    path.write_text(text.replace('</robot>', extra.format(tip)))
    return path


def test_unloadable_urdf_is_refused_in_one_line(tmp_path):
    path = _massless_leaf(tmp_path)
    with pytest.raises(UrdfError) as err:
        MujocoArm.from_urdf(path)
    msg = str(err.value)
    assert msg.startswith(str(path)) and '\n' not in msg, msg
    if isinstance(err.value, MujocoLoadError):
        assert 'MuJoCo cannot load it: ' in msg and 'mass' in msg, msg
    for bad in (tmp_path / 'absent.urdf', '<robot name="x"><link name="a"/></robot>',
                '<robot name="x"'):
        with pytest.raises(UrdfError) as err:
            MujocoArm.from_urdf(bad)
        assert '\n' not in str(err.value)


def test_bad_options_are_named():
    path = URDF_DIR / 'double_pendulum.urdf'
    for kwargs, name in (({'mass_scale': 0.0}, 'mass_scale'), ({'damping': -1}, 'damping'),
                         ({'frictionloss': [1, 2, 3]}, 'frictionloss'),
                         ({'armature': math.nan}, 'armature'), ({'timestep': 0}, 'timestep'),
                         ({'integrator': 'leapfrog'}, 'integrator')):
        with pytest.raises(ArmModelError, match=f'^{name}: '):
            MujocoArm.from_urdf(path, **kwargs)
    mj = MujocoArm.from_urdf(path)
    mj.set_state([0.1, 0.2])
    with pytest.raises(ArmModelError, match='^tau: '):
        mj.step([1.0, math.inf])
    with pytest.raises(ArmModelError, match='^duration: '):
        mj.step([0.0, 0.0], 1.5e-3)
    with pytest.raises(ArmModelError, match='^q: '):
        mj.set_state([0.0])
