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
A payload picked up during a run: the plants (2R, URDF arm, MuJoCo) and the ways to ask for it.

References: Pinocchio models built fresh from URDF text in which the payload is a link of its
own on a fixed joint at the tool (Pinocchio merges it into the last body itself; the code under
test adds the point mass to the body's inertia directly, or, for the 2R, uses the closed form
with link 2's m, lc, I changed by the parallel-axis theorem).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
import re
import time

from manip_control.arm_model import ArmModelError
from manip_control.arm_model import TwoLinkArm
from manip_control.arm_model import UrdfArm
from manip_control.arm_plant import ArmPlant
from manip_control.arm_plant import HeldArmPlant
from manip_control.arm_scenario import reference_within_limits
from manip_control.arm_scenario import run_urdf_closed_loop
from manip_control.dynamics import TwoLinkModel
from manip_control.nodes.ros_params import arm_plant_defaults
from manip_control.nodes.ros_params import held_urdf_plant
from manip_control.nodes.ros_params import plant_config
from manip_control.offline import main as offline_main
from manip_control.parameters import load_scenario
from manip_control.parameters import loaded_arm
from manip_control.parameters import ParameterError
from manip_control.parameters import payload_from_dict
from manip_control.parameters import PayloadParameters
from manip_control.parameters import scenario_from_dict
from manip_control.plant import Plant
from manip_control.urdf import urdf_from_scenario
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PANDA = ROOT.parent / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
ARM = {'m1': 3.0, 'm2': 2.0, 'l1': 1.0, 'l2': 0.8, 'lc1': 0.5, 'lc2': 0.3, 'I1': 0.2,
       'I2': 0.1}
PANDA_POSES = ([0.1, -0.5, 0.2, -2.0, 0.3, 1.5, 0.7], [-1.2, 0.4, -0.8, -1.1, 2.0, 3.0, -2.2],
               [0.0, 0.0, 0.0, -0.1, 0.0, 0.0, 0.0])


def with_payload_link(urdf: str, parent: str, mass: float, xyz=(0.0, 0.0, 0.0)) -> str:
    """URDF text with a point mass as a link of its own, fixed to ``parent`` at ``xyz``."""
    xyz_text = ' '.join(repr(float(v)) for v in xyz)
    extra = (f'<link name="test_payload"><inertial><origin xyz="0 0 0"/>'
             f'<mass value="{mass!r}"/><inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" '
             f'izz="0"/></inertial></link>'
             f'<joint name="test_payload_joint" type="fixed"><parent link="{parent}"/>'
             f'<child link="test_payload"/><origin xyz="{xyz_text}" rpy="0 0 0"/></joint>')
    head, sep, tail = urdf.rpartition('</robot>')
    assert sep, 'not a URDF'
    return head + extra + sep + tail


def fresh_pinocchio(urdf: str):
    """Build the full Pinocchio model of ``urdf`` (every movable joint; gravity -9.81 z)."""
    pin = pytest.importorskip('pinocchio')
    model = pin.buildModelFromXML(urdf)
    return pin, model, model.createData()


def pin_terms(urdf: str, names, q):
    """``M(q)`` and ``g(q)`` of the joints ``names`` (others at 0) by a fresh Pinocchio model."""
    pin, model, data = fresh_pinocchio(urdf)
    qf = pin.neutral(model)
    idx_q = [model.idx_qs[model.getJointId(n)] for n in names]
    idx_v = [model.idx_vs[model.getJointId(n)] for n in names]
    qf[idx_q] = q
    mass = pin.crba(model, data, qf)
    mass = np.triu(mass) + np.triu(mass, 1).T
    grav = pin.computeGeneralizedGravity(model, data, qf)
    return mass[np.ix_(idx_v, idx_v)], grav[idx_v]


# -- the 2R --------------------------------------------------------------------------------


@pytest.mark.parametrize('mass', [0.5, 2.0, 7.5])
def test_2r_payload_closed_form_equals_pinocchio_with_a_fixed_payload_link(mass):
    scenario = load_scenario('default')
    arm = scenario.plant.arm
    # the package's URDF of the 2R (its tool0 is the tip of link 2), the mass fixed there
    text = with_payload_link(urdf_from_scenario(scenario), 'tool0', mass)
    model = TwoLinkModel(loaded_arm(arm, mass))
    for q in ([0.0, 0.0], [0.3, -1.1], [2.5, 1.7], [-0.7, 3.0]):
        m_ref, g_ref = pin_terms(text, ['joint1', 'joint2'], q)
        np.testing.assert_allclose(model.inertia_matrix(np.array(q)), m_ref, rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(model.gravity_vector(np.array(q)), g_ref, rtol=1e-12,
                                   atol=1e-11)
    # the same through the ArmModel interface (rotors do not enter g)
    two = TwoLinkArm.from_plant(scenario.plant).with_payload(mass)
    np.testing.assert_allclose(two.gravity([0.3, -1.1]),
                               pin_terms(text, ['joint1', 'joint2'], [0.3, -1.1])[1],
                               rtol=1e-12, atol=1e-11)
    # the unloaded arm differs: the reference sees the payload
    assert not np.allclose(TwoLinkModel(arm).gravity_vector(np.array([0.3, -1.1])),
                           pin_terms(text, ['joint1', 'joint2'], [0.3, -1.1])[1], atol=1e-3)


def _held_2r(at_time: float) -> tuple:
    """Return a 2R plant with ideal actuators, no friction, a 3 kg payload at ``at_time``."""
    scenario = scenario_from_dict({'plant': {
        'arm': ARM, 'actuator': 'ideal', 'torque_limit': [500.0, 500.0],
        'friction': [{'b': 0.0, 'tau_c': 0.0, 'eps': 0.01}] * 2,
        'initial_position': [0.4, -0.9], 'payload': {'mass': 3.0, 'at_time': at_time}}})
    return scenario, Plant(scenario.plant, scenario.period, compiled=True)


def test_2r_plant_picks_the_payload_up_at_its_tick_and_holds_still_on_the_loaded_gravity():
    """Gravity of the arm before, of a fresh Pinocchio model with the payload after: at rest."""
    scenario, plant = _held_2r(0.0505)      # between ticks: the pick-up is at t = 0.051 s
    assert plant._compiled_step is None     # the kernel does not implement it: Python step
    q0 = np.array(scenario.plant.initial_position)
    text = with_payload_link(urdf_from_scenario(scenario), 'tool0', 3.0)
    g_loaded = pin_terms(text, ['joint1', 'joint2'], q0)[1]
    g_bare = TwoLinkModel(scenario.plant.arm).gravity_vector(q0)
    assert np.linalg.norm(g_loaded - g_bare) > 1.0
    for k in range(120):
        tau = g_bare if k < 51 else g_loaded
        assert plant.payload_attached == (k > 51)
        plant.step(*tau)
        if k == 51:
            assert plant.payload_attached
        assert np.max(np.abs(plant.velocity)) < 1e-9, (k, plant.velocity)
    # a pick-up one tick off moves the arm (what the assertion above would catch)
    _, late = _held_2r(0.0515)
    for k in range(60):
        late.step(*(g_bare if k < 51 else g_loaded))
    assert np.max(np.abs(late.velocity)) > 1e-4
    plant.reset()                           # detached again
    assert not plant.payload_attached


def test_kernel_names_the_payload_and_the_offline_run_uses_python(capsys):
    from manip_control import kernel
    scenario, _ = _held_2r(1.0)
    assert 'payload' in (kernel.unsupported(scenario) or '')
    assert offline_main(['--duration', '1', '--payload', '2@0.5', '--json']) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary['engine'] == 'python'
    assert offline_main(['--duration', '1', '--payload', '2@0.5', '--engine', 'kernel']) == 2
    assert 'error: engine kernel: plant.payload' in capsys.readouterr().err


# -- URDF arms -----------------------------------------------------------------------------


def test_urdf_plant_gravity_after_the_payload_equals_a_fresh_model_with_a_fixed_link():
    arm = UrdfArm.from_file(PANDA)
    nominal = arm.workspace()
    offset = (0.02, -0.01, 0.21)
    plant = ArmPlant(arm)
    loaded = plant.with_payload(2.0, offset)
    text = with_payload_link(PANDA.read_text(), 'panda_link7', 2.0, offset)
    for q in PANDA_POSES:
        m_ref, g_ref = pin_terms(text, arm.joint_names, q)
        np.testing.assert_allclose(loaded.model.gravity(q), g_ref, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(loaded.model.mass_matrix(q), m_ref, rtol=1e-10,
                                   atol=1e-10)
        # the plant it came from and the controller's model are unchanged
        m_bare, g_bare = pin_terms(PANDA.read_text(), arm.joint_names, q)
        np.testing.assert_allclose(plant.model.gravity(q), g_bare, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(nominal.gravity(q), g_bare, rtol=1e-10, atol=1e-10)
        assert np.max(np.abs(g_ref - g_bare)) > 1.0
    # the loaded plant's dynamics use the loaded body: at rest under the loaded gravity
    q = np.array(PANDA_POSES[0])
    x = np.concatenate([q, np.zeros(3 * arm.n)])
    g_ref = pin_terms(text, arm.joint_names, q)[1]
    assert np.max(np.abs(loaded.rhs(x, g_ref)[arm.n:2 * arm.n])) < 1e-8
    assert np.max(np.abs(plant.rhs(x, g_ref)[arm.n:2 * arm.n])) > 1.0
    after = loaded.step(x, g_ref, 1e-3)
    assert np.max(np.abs(after[arm.n:2 * arm.n])) < 1e-8


def test_urdf_plant_with_drives_multirate_holds_still_on_the_loaded_gravity():
    """The multirate step (its own rigid-body evaluations) uses the loaded body too."""
    from manip_control.arm_scenario import motors_sized_for
    bare = UrdfArm.from_file(PANDA)
    motors = motors_sized_for(bare.limits.effort, names=bare.joint_names)
    arm = UrdfArm.from_file(PANDA, armature=[m.Jm * m.N * m.N for m in motors])
    plant = ArmPlant(arm, None, motors)
    assert plant.method == 'multirate'
    loaded = plant.with_payload(2.0)
    q = np.array(PANDA_POSES[0])
    g_ref = pin_terms(with_payload_link(PANDA.read_text(), 'panda_link7', 2.0),
                      arm.joint_names, q)[1]
    cur = g_ref / np.array([m.N * m.k_t for m in motors])   # the drives hold g_ref
    x = np.concatenate([q, np.zeros(arm.n), cur, np.array([m.R for m in motors]) * cur])
    for _ in range(3):
        x = loaded.step(x, g_ref, 1e-3)
    assert np.max(np.abs(x[arm.n:2 * arm.n])) < 1e-7
    moved = plant.step(x, g_ref, 1e-3)
    assert np.max(np.abs(moved[arm.n:2 * arm.n])) > 1e-3


def test_2r_payload_goes_through_the_ros_parameters_and_back():
    from manip_control.nodes import ros_params as rp
    scenario, _ = _held_2r(1.25)
    values = rp.ros_params_from_scenario(scenario)
    assert values['plant']['payload.mass'] == 3.0 and values['plant']['payload.at_time'] == 1.25
    assert rp.scenario_from_ros(values).plant.payload == PayloadParameters(3.0, 1.25)
    assert plant_config(values['plant']).plant.payload == PayloadParameters(3.0, 1.25)


def test_plant_node_configuration_of_a_urdf_arm_attaches_the_payload_at_its_tick():
    """ROS values payload.* -> ArmPlantConfig -> HeldArmPlant: the loaded body from tick k."""
    text = PANDA.read_text()
    arm = UrdfArm.from_string(text)
    defaults = arm_plant_defaults(arm, text)
    offset = [0.0, 0.01, 0.16]                  # 5 cm beyond the Panda's flange
    cfg = plant_config({'payload.mass': 2.0, 'payload.at_time': 0.01, 'control_rate': 1000.0,
                        'payload.offset': offset}, 'plant', defaults)
    assert cfg.plant.payload == PayloadParameters(2.0, 0.01)
    held = held_urdf_plant(text, arm.joint_names, cfg.plant, cfg.period, 'plant')
    q = np.array(cfg.plant.initial_position)
    ref = with_payload_link(text, 'panda_link7', 2.0, offset)
    with pytest.raises(ParameterError, match=re.escape(
            'parameter payload.offset (node plant): expected 3 finite values [m]')):
        plant_config({'payload.offset': [0.0, math.nan, 0.0]}, 'plant', defaults)
    g_ref = pin_terms(ref, arm.joint_names, q)[1]
    for k in range(12):
        body = held.plant.model
        loaded = k >= 10
        assert held.payload_attached == (k > 10)
        held.step(*np.zeros(arm.n))
        assert held.payload_attached == loaded
        np.testing.assert_allclose(held.plant.model.gravity(q), g_ref if loaded
                                   else arm.gravity(q), rtol=1e-10, atol=1e-10)
        assert body is held.plant.model or k == 10


def test_panda_payload_makes_a_step_into_an_offset_that_perfect_computed_torque_keeps():
    """
    2 kg picked up at t = 2 s by the Panda under a perfect-model computed torque (ideal drives).

    The runs are identical until the pick-up; the error then rises within ~0.2 s (the error
    dynamics at omega_n = 20 rad/s) to the quasi-static offset ``Kp e = -M^-1 (tau_loaded -
    tau_nominal)(q, qd, qdd_d)`` (a fresh model with the payload as a fixed link) and stays
    there: the law has no integral or adaptation, so it does not recover.
    """
    bare = run_urdf_closed_loop(str(PANDA), duration=4.0, actuator='ideal')
    run = run_urdf_closed_loop(str(PANDA), duration=4.0, actuator='ideal',
                               payload=PayloadParameters(2.0, 2.0))
    t = run.run.t
    before = t < 2.0 + 1e-9
    np.testing.assert_array_equal(run.run.q[before], bare.run.q[before])
    e = np.abs(run.run.error)
    pre = e[(t >= 1.0) & before].max()
    post = e[t >= 2.0].max()
    assert post > 100.0 * pre, (post, pre)
    assert post > 0.02
    loaded = UrdfArm.from_string(with_payload_link(PANDA.read_text(), 'panda_link7', 2.0))
    trajectory = reference_within_limits(run.arm.limits)
    worst, scale = 0.0, 0.0
    for k in np.flatnonzero(t >= 3.0)[::50]:
        q, qd = run.run.q[k], run.run.qd[k]
        qdd_d = trajectory.sample(t[k])[2]
        delta = (loaded.inverse_dynamics(q, qd, qdd_d)
                 - run.nominal.inverse_dynamics(q, qd, qdd_d))
        predicted = -np.linalg.solve(run.nominal.mass_matrix(q), delta) / run.kp
        worst = max(worst, np.max(np.abs(run.run.error[k] - predicted)))
        scale = max(scale, np.max(np.abs(predicted)))
    assert scale > 0.02
    assert worst < 0.2 * scale, (worst, scale)


# -- MuJoCo --------------------------------------------------------------------------------


def test_mujoco_payload_gravity_and_mass_matrix_equal_pinocchio_with_a_fixed_link():
    from manip_control.mujoco_arm import MujocoArm
    arm = MujocoArm.from_urdf(PANDA)
    offset = (0.03, 0.01, 0.18)
    q0 = np.array(PANDA_POSES[1])
    arm.set_state(q0, np.full(arm.n, 0.1))
    arm.add_payload(2.0, offset)
    # the state is untouched (mj_setConst ran on the scratch data)
    np.testing.assert_array_equal(arm.q, q0)
    np.testing.assert_array_equal(arm.qd, np.full(arm.n, 0.1))
    text = with_payload_link(PANDA.read_text(), 'panda_link7', 2.0, offset)
    for q in PANDA_POSES:
        m_ref, g_ref = pin_terms(text, arm.joint_names, q)
        np.testing.assert_allclose(arm.gravity(q), g_ref, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(arm.mass_matrix(q), m_ref, rtol=1e-9, atol=1e-9)
    # and the same mass through the package's Pinocchio model
    np.testing.assert_allclose(arm.gravity(q0), UrdfArm.from_file(PANDA).with_payload(
        2.0, offset).gravity(q0), rtol=1e-9, atol=1e-9)


def test_mujoco_driver_adds_the_payload_at_its_tick(procs, tmp_path):
    """The driver's run equals MujocoArm stepped offline with the payload at the same tick."""
    from manip_control.mujoco_arm import MujocoArm
    from manip_control.nodes.mujoco_driver_node import _two_link_description
    summary = tmp_path / 'driver.json'
    p = procs.node('driver', 'mujoco_driver_node', '-p', 'brake:=false', '-p',
                   'payload.mass:=3.0', '-p', 'payload.at_time:=0.2', '-p',
                   'initial_position:=[0.3, 0.2]', '-p', f'summary_file:={summary}')
    deadline = 60.0
    while deadline > 0.0:
        out, err = procs.output(p)
        if 'payload: 3 kg added' in out + err or p.poll() is not None:
            break
        time.sleep(0.2)
        deadline -= 0.2
    procs.stop(p)
    out, err = procs.output(p)
    assert 'payload: 3 kg added to the last link at t = 0.200 s' in out + err, (out, err)
    assert 'Traceback' not in err
    s = json.loads(summary.read_text())
    assert s['payload_added_at_tick'] == 200
    assert s['ticks'] > 200
    text, defaults = _two_link_description()
    arm = MujocoArm.from_urdf(text, armature=defaults['armature'], urdf_dynamics=True)
    arm.set_state([0.3, 0.2])
    for k in range(s['ticks']):
        if k == 200:
            arm.add_payload(3.0)
        arm.step(np.zeros(arm.n))
    np.testing.assert_allclose(arm.q, s['final_position'], rtol=0, atol=1e-9)


@pytest.mark.parametrize('arm', ['2r', 'panda'])
def test_plant_node_picks_the_payload_up_at_its_simulated_time(arm, procs):
    args = ['-p', 'mode:=realtime', '-p', 'duration:=0.3', '-p', 'payload.mass:=2.0', '-p',
            'payload.at_time:=0.1']
    if arm == 'panda':
        args += ['-p', f'robot_description:={PANDA.read_text()}', '-p',
                 'payload.offset:=[0.0, 0.0, 0.157]']
    p = procs.node('plant', 'plant_node', *args)
    rc = procs.wait(p, 120)
    out, err = procs.output(p)
    assert rc == 0, (out, err)
    assert 'payload: 2 kg picked up at t = 0.100 s (the plant only)' in out + err, (out, err)
    assert 'run finished: 300 ticks' in out + err


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize('data, needle', [
    ({'mass': -1.0, 'at_time': 1.0}, 'plant.payload.mass: must be >= 0 (got -1.0)'),
    ({'mass': 2.0, 'at_time': math.nan}, 'plant.payload.at_time: must be finite (got nan)'),
    ({'mass': 2.0, 'at_time': math.inf}, 'plant.payload.at_time: must be finite (got inf)'),
    ({'mass': 2.0, 'at_time': -0.5}, 'plant.payload.at_time: must be >= 0'),
    ({'mass': 5000.0}, 'plant.payload.mass: must be in [0, 1000] kg'),
    ({'mass': 'heavy'}, "plant.payload.mass: must be a number (got 'heavy')"),
    ({'mass': 1.0, 'when': 2.0}, 'plant.payload.when: unknown parameter'),
])
def test_bad_payload_in_a_scenario_names_the_parameter(data, needle):
    with pytest.raises(ParameterError) as exc:
        scenario_from_dict({'plant': {'arm': ARM, 'actuator': 'ideal', 'payload': data}})
    assert str(exc.value).startswith(needle), str(exc.value)


@pytest.mark.parametrize('param, needle', [
    ('payload.mass:=-1.0', 'payload.mass (node joint_state_broadcaster): must be in [0.0, 1000'),
    ('payload.at_time:=nan', 'payload.at_time (node joint_state_broadcaster): must be in [0.0, '),
    ('payload.offset:=[0.0, 1.0]', 'payload.offset (node joint_state_broadcaster): expected 3 '),
])
def test_bad_payload_driver_parameter_is_one_line_and_exit_2(param, needle, procs):
    p = procs.node('driver', 'mujoco_driver_node', '-p', param)
    rc = procs.wait(p, 120)
    out, err = procs.output(p)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (out, err)
    assert len(lines) == 1 and lines[0].startswith('error: parameter ' + needle), err


@pytest.mark.parametrize('values, needle', [
    ({'payload.mass': -1.0}, 'parameter payload.mass (node plant): must be >= 0'),
    ({'payload.at_time': math.nan}, 'parameter payload.at_time (node plant): must be finite'),
])
def test_bad_payload_ros_parameter_names_it(values, needle):
    with pytest.raises(ParameterError) as exc:
        plant_config(values)
    assert str(exc.value).startswith(needle), str(exc.value)


@pytest.mark.parametrize('args, needle', [
    (['--payload=-1@2'], 'error: --payload.mass: must be >= 0 (got -1.0)'),
    (['--payload', '2@nan'], 'error: --payload.at_time: must be finite (got nan)'),
    (['--payload', '2'], 'error: --payload: expected MASS@TIME'),
    (['--payload', '2@1', '--payload-offset', '0', '0', '0.1'],
     'error: --payload-offset needs --urdf FILE'),
    (['--urdf', str(PANDA), '--payload', '2@inf'],
     'error: --payload.at_time: must be finite (got inf)'),
    (['--urdf', str(PANDA), '--payload', '1@1', '--payload-offset', '0', 'nan', '0'],
     'error: --payload-offset: needs --payload and 3 finite numbers'),
])
def test_bad_payload_option_is_one_error_line_and_exit_2(args, needle, capsys):
    assert offline_main(args) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(needle), err


def test_bad_payload_in_the_models_is_an_arm_model_error():
    from manip_control.mujoco_arm import MujocoArm
    arm = UrdfArm.from_file(PANDA)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ArmModelError, match=re.escape('payload mass: must be a finite')):
            arm.with_payload(bad)
    with pytest.raises(ArmModelError, match='offset: expected 3 finite numbers'):
        arm.with_payload(1.0, (0.0, 0.1))
    mj = MujocoArm.from_urdf(PANDA)
    with pytest.raises(ArmModelError, match='payload mass: must be a finite'):
        mj.add_payload(math.nan)
    with pytest.raises(ArmModelError, match='offset: expected 3 finite numbers'):
        mj.add_payload(1.0, (0.0, math.inf, 0.0))
    two = TwoLinkArm.from_plant(load_scenario('default').plant)
    with pytest.raises(ArmModelError, match='the 2R carries its payload at the tip'):
        two.with_payload(1.0, (0.0, 0.0, 0.1))
    with pytest.raises(ArmModelError, match='payload mass: must be a finite'):
        two.with_payload(-2.0)
    assert payload_from_dict({}) == PayloadParameters(0.0, 0.0)
    held = HeldArmPlant(ArmPlant(arm), 1e-3, np.zeros(arm.n), payload=PayloadParameters())
    assert not held.payload_attached and held._loaded is None      # 0 kg: no payload
