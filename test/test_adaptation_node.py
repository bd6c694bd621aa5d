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
The adaptive law in the controller node, and the model its safety layer holds with.

The node's commands equal the core law's fed the same states (the law adapts in the node),
its runtime commands (``adaptation.freeze / reset / save_to``) act, gains that the law is
built with are refused while adapting, the estimates are published on
``/controller/adaptation`` and summarised in the diagnostics. :class:`AdaptedModel` (what the
safe hold uses) is checked against independent models: the 2R's closed form and Pinocchio.
"""

import dataclasses
import math

from conftest import SHARED_FIXTURES
from manip_control.adaptation import AdaptedModel
from manip_control.adaptation import ADAPTIVE_CHECK_EVERY
from manip_control.adaptation import AdaptiveController
from manip_control.adaptation import AdaptiveLaw
from manip_control.adaptation import true_two_link_parameters
from manip_control.adaptation import two_link_base_regressor
from manip_control.arm_model import TwoLinkArm
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')

from rclpy.parameter import Parameter  # noqa: E402
from test_nodes_controller import _destroy_rigs  # noqa: E402,F401 - the autouse fixture
from test_nodes_controller import Rig  # noqa: E402
from test_nodes_controller import SCENARIO  # noqa: E402

NAMES = ['joint1', 'joint2']


def _adaptive_params(**changes):
    co = SCENARIO.controller
    ad = dataclasses.replace(co.adaptation, enabled=True, **changes)
    return dataclasses.replace(co, adaptation=ad)


def _published(probe) -> dict:
    msgs = probe.msgs['/controller/adaptation']
    return {kv.key: kv.value for kv in msgs[-1].status[0].values}


def test_the_node_runs_the_adaptive_law_and_its_runtime_commands(
        ros_context, executor, probe, spin, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    probe.sub(DiagnosticArray, '/controller/adaptation')
    rig = Rig(ros_context, executor, probe, spin, **{
        'safety.reference_step_limit': 1.0, 'adaptation.enabled': True,
        'adaptation.gamma': 5.0, 'diagnostics_rate': 50.0})
    node = rig.node
    assert node.adaptation is not None
    assert isinstance(node.safety.model, AdaptedModel)
    core = AdaptiveController(_adaptive_params(gamma=5.0), SCENARIO.period,
                              check_every=ADAPTIVE_CHECK_EVERY)       # as the node builds it
    law = core.law
    w = 2.0 * math.pi * 0.5

    def tick(k):
        t = k * SCENARIO.period
        r = [0.3 * math.sin(w * t), -0.2 * math.cos(w * t)]
        rv = [0.3 * w * math.cos(w * t), 0.2 * w * math.sin(w * t)]
        ra = [-0.3 * w * w * math.sin(w * t), 0.2 * w * w * math.cos(w * t)]
        q = [r[0] + 0.05 * math.cos(3 * t), r[1] - 0.04]       # a tracking error to adapt on
        qd = [rv[0] - 0.1, rv[1] + 0.05 * math.sin(2 * t)]
        cmd = rig.tick((k + 1) * 1_000_000, NAMES, q, qd, NAMES, r, rv, ra)
        return list(cmd.effort), list(core.update(q, qd, r, rv, ra).tau)

    for k in range(40):
        got, want = tick(k)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12), k
    moved = node.adaptation.estimates - node.adaptation.nominal
    assert np.any(np.abs(moved) > 0.0)                       # it adapted
    assert node.adaptation.estimates == pytest.approx(law.estimates, rel=1e-12)

    # published and in the diagnostics
    assert spin(executor, 5.0, lambda: probe.msgs['/controller/adaptation'])
    assert spin(executor, 5.0, lambda: float(_published(probe)['adaptation.time_s']) > 0.0)
    pub = _published(probe)
    for k, name in enumerate(law.names):
        assert float(pub[f'nominal.{name}']) == pytest.approx(law.nominal[k], rel=1e-9)
        assert f'estimate.{name}' in pub and f'excited.{name}' in pub
    assert pub['adaptation'] == 'adapting'
    assert node.safety.diagnostics_values()['adaptation'] == 'adapting'

    # freeze: the estimates stay, the commands still follow the (frozen) law
    res = rig.set_params(Parameter('adaptation.freeze', value=True))
    assert res[0].successful, res[0].reason
    law.freeze(True)
    before = node.adaptation.estimates
    for k in range(40, 50):
        got, want = tick(k)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12), k
    assert np.array_equal(node.adaptation.estimates, before)
    assert node.safety.diagnostics_values()['adaptation'] == 'frozen'

    # the gains the law is built with are fixed while adapting; the torque limit is not
    res = rig.set_params(Parameter('kp', value=[30.0, 20.0]))
    assert not res[0].successful and 'fixed while adapting' in res[0].reason, res[0].reason
    res = rig.set_params(Parameter('torque_limit', value=[40.0, 20.0]))
    assert res[0].successful, res[0].reason

    # saved as manip-identify writes a 2R model (a controller section with its nominal)
    out = tmp_path / 'adapted.yaml'
    res = rig.set_params(Parameter('adaptation.save_to', value=str(out)))
    assert res[0].successful, res[0].reason
    from manip_control.parameters import read_yaml
    saved = read_yaml(out)['controller']['nominal']
    assert set(saved) >= {'arm', 'friction', 'rotor_inertia'}
    res = rig.set_params(Parameter('adaptation.save_to',
                                   value=str(tmp_path / 'missing' / 'x.yaml')))
    assert not res[0].successful and res[0].reason.startswith('adaptation.save_to:'), \
        res[0].reason

    # reset: the nominal model again, and the parameter reads false
    res = rig.set_params(Parameter('adaptation.reset', value=True))
    assert res[0].successful, res[0].reason
    assert np.array_equal(node.adaptation.estimates, node.adaptation.nominal)
    assert spin(executor, 5.0, lambda: node.get_parameter('adaptation.reset').value is False)


def test_runtime_commands_without_adaptation_are_refused(ros_context, executor, probe, spin):
    rig = Rig(ros_context, executor, probe, spin)
    assert rig.node.adaptation is None
    res = rig.set_params(Parameter('adaptation.freeze', value=True))
    assert not res[0].successful and 'adaptation is not enabled' in res[0].reason
    res = rig.set_params(Parameter('adaptation.freeze', value=False))
    assert res[0].successful, res[0].reason


def test_adaptive_law_needs_computed_torque_without_integral(ros_context):
    from conftest import make_node
    from manip_control.nodes.controller_node import ControllerNode
    from manip_control.nodes.ros_params import controller_specs
    from manip_control.nodes.ros_params import ros_params_from_scenario
    from manip_control.parameters import ParameterError
    vals = ros_params_from_scenario(SCENARIO)['controller']
    vals.update({'adaptation.enabled': True, 'ki': [1.0, 1.0]})
    with pytest.raises(ParameterError, match='adaptation.enabled.*ki'):
        make_node(ControllerNode, ros_context, controller_specs(), vals)


# --------------------------------------------------------------------------------------------
# the model the safety layer holds with


def test_adapted_model_of_the_2r_equals_the_closed_form_of_the_estimate():
    """The nominal 2R with the base parameters of another 2R is that 2R (closed form)."""
    nominal = SCENARIO.controller.nominal
    other = dataclasses.replace(nominal, arm=dataclasses.replace(
        nominal.arm, m1=nominal.arm.m1 * 1.15, m2=nominal.arm.m2 * 0.9,
        I1=nominal.arm.I1 * 1.1, I2=nominal.arm.I2 * 0.95), rotor_coupling=False)
    nominal = dataclasses.replace(nominal, rotor_coupling=False)
    arm = TwoLinkArm.from_nominal(nominal)
    law = AdaptiveLaw(arm, two_link_base_regressor(nominal), (25.0, 16.0), (10.0, 8.0), 1e-3)
    view = AdaptedModel(law)
    truth = TwoLinkArm.from_nominal(other)
    q, qd = np.array([0.4, -0.7]), np.array([0.8, -1.1])
    assert np.allclose(view.mass_matrix(q), arm.mass_matrix(q), rtol=0, atol=0)  # nominal
    assert law.set_estimate(true_two_link_parameters(other), q)
    for got, want in ((view.mass_matrix(q), truth.mass_matrix(q)),
                      (view.gravity(q), truth.gravity(q)),
                      (view.bias(q, qd), truth.bias(q, qd)),
                      (view.coriolis_matrix(q, qd), truth.coriolis_matrix(q, qd))):
        assert np.allclose(got, want, rtol=1e-10, atol=1e-12), (got, want)
    assert not np.allclose(view.gravity(q), arm.gravity(q))


def test_adapted_model_of_a_urdf_arm_equals_pinocchio_on_the_scaled_arm():
    """Panda with every inertial scaled 1.2: the view of its estimate vs Pinocchio's model."""
    pytest.importorskip('pinocchio')
    from manip_control.arm_identification import adaptive_regressor
    from manip_control.arm_identification import ArmRegressor
    from manip_control.arm_identification import base_parameters
    from manip_control.arm_model import UrdfArm
    arm = UrdfArm.from_file(str(SHARED_FIXTURES / 'urdf' / 'panda.urdf'))
    base = base_parameters(ArmRegressor(arm))
    law = AdaptiveLaw(arm, adaptive_regressor(base), [400.0] * arm.n, [40.0] * arm.n, 1e-3,
                      _adaptive_params().adaptation)
    heavy = arm.with_inertial_scale(1.2)
    theta = base.of(base.regressor.parameters(heavy))
    rng = np.random.default_rng(3)
    q = rng.uniform(arm.limits.lower, arm.limits.upper) * 0.8
    qd = rng.uniform(-1.0, 1.0, arm.n)
    assert law.set_estimate(theta, q), law.fallback_reason
    view = AdaptedModel(law)
    for got, want in ((view.mass_matrix(q), heavy.mass_matrix(q)),
                      (view.gravity(q), heavy.gravity(q)),
                      (view.bias(q, qd), heavy.bias(q, qd)),
                      (view.coriolis_matrix(q, qd) @ qd, heavy.coriolis_matrix(q, qd) @ qd)):
        assert np.allclose(got, want, rtol=1e-8, atol=1e-9), np.max(np.abs(got - want))


def test_a_urdf_arm_adapts_in_lockstep_but_not_in_real_time(ros_context):
    """Real time on a URDF arm is refused by name (measured unsafe); lockstep configures."""
    from conftest import make_node
    from manip_control.nodes.controller_node import ControllerNode
    from manip_control.nodes.ros_params import controller_specs
    from manip_control.parameters import ParameterError
    text = (SHARED_FIXTURES / 'urdf' / 'panda.urdf').read_text()
    vals = {'robot_description': text, 'adaptation.enabled': True, 'mode': 'realtime'}
    with pytest.raises(ParameterError, match='configure failed'):
        make_node(ControllerNode, ros_context, controller_specs(), vals)
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     dict(vals, mode='lockstep'))
    try:
        assert node.adaptation is not None and node.adaptation.regressor.size == 62
        assert isinstance(node.safety.model, AdaptedModel)
    finally:
        node.destroy_node()         # its command publishers leave the graph before the check


def test_adaptation_may_start_frozen_and_commands_are_not_start_values(ros_context):
    """``adaptation.freeze`` at start: a frozen law; save_to / reset at start: refused."""
    from conftest import make_node
    from manip_control.nodes.controller_node import ControllerNode
    from manip_control.nodes.ros_params import controller_specs
    from manip_control.nodes.ros_params import ros_params_from_scenario
    from manip_control.parameters import ParameterError
    vals = ros_params_from_scenario(SCENARIO)['controller']
    vals.update({'adaptation.enabled': True, 'autostart': True})
    for name, value in (('adaptation.save_to', 'x.yaml'), ('adaptation.reset', True)):
        with pytest.raises(ParameterError, match=f'parameter {name} .*runtime command'):
            make_node(ControllerNode, ros_context, controller_specs(), dict(vals, **{name: value}))
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     dict(vals, **{'adaptation.freeze': True}))
    try:
        assert node.adaptation is not None and node.adaptation.frozen
    finally:
        node.destroy_node()
