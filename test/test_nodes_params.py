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

"""ROS parameters of the nodes: conversion to/from the core, descriptors, error messages."""

import math

from manip_control.nodes import ros_params as rp
from manip_control.parameters import load_scenario
from manip_control.parameters import ParameterError
import pytest
import yaml

ROOT = __import__('pathlib').Path(__file__).resolve().parent.parent


@pytest.mark.parametrize('preset', ['default', 'seed001', 'seed004'])
def test_scenario_round_trip_through_ros_parameters(preset):
    sc = load_scenario(preset)
    values = rp.ros_params_from_scenario(sc, 'lockstep')
    assert rp.scenario_from_ros(values, name=sc.name) == sc
    assert rp.plant_config(values['plant']).plant == sc.plant
    assert rp.controller_config(values['controller']).controller == sc.controller
    assert rp.trajectory_config(values['trajectory']).trajectory == sc.trajectory


def test_sim_params_file_is_the_default_scenario():
    values = rp.load_params_file(ROOT / 'config' / 'sim_params.yaml')
    assert rp.scenario_from_ros(values, name='default') == load_scenario('default')
    for node, specs in (('plant', rp.plant_specs()), ('controller', rp.controller_specs()),
                        ('trajectory', rp.trajectory_specs())):
        known = {s.name for s in specs}
        if node == 'controller':        # the safety layer's parameters (docs/safety.md)
            from manip_control.nodes.controller_safety import safety_specs
            known |= {s.name for s in safety_specs()}
        assert set(values[node]) <= known, set(values[node]) - known


def test_hardware_params_file_is_valid_realtime():
    values = rp.load_params_file(ROOT / 'config' / 'hardware_params.yaml')
    assert rp.controller_config(values['controller']).mode == 'realtime'
    assert rp.trajectory_config(values['trajectory']).mode == 'realtime'
    assert not values['plant']          # no plant against hardware


def test_params_yaml_is_loadable_and_exact():
    values = rp.ros_params_from_scenario(load_scenario('default'))
    data = yaml.safe_load(rp.params_yaml(values))
    for node in ('plant', 'controller', 'trajectory'):
        assert data[node]['ros__parameters'] == values[node]


def test_every_parameter_has_a_description_and_type():
    for specs in rp.SPECS.values():
        names = [s.name for s in specs()]
        assert len(names) == len(set(names))
        for s in specs():
            kinds = ('bool', 'int', 'float', 'str', 'float[]', 'str[]')
            assert s.description and s.kind in kinds
            if s.range is not None:
                assert s.kind in ('int', 'float')
                assert s.range[0] <= s.default <= s.range[1] or s.default == 0


def test_only_gains_and_limits_are_runtime_changeable():
    writable = {s.name for s in rp.controller_specs() if not s.read_only}
    assert writable == set(rp.RUNTIME_GAINS)
    for node in ('plant', 'trajectory'):
        assert all(s.read_only for s in rp.SPECS[node]())


@pytest.mark.parametrize('node, key, value, expected', [
    ('plant', 'motors.R', [0.3, -0.8], 'parameter motors.R[1] (node plant): must be > 0'),
    ('plant', 'friction.b', [0.3], 'parameter friction.b (node plant): must have 2 elements'),
    ('plant', 'arm.lc1', 2.0, 'parameter arm.lc1 (node plant): must be in (0, l1]'),
    ('plant', 'actuator', 'servo', 'parameter actuator (node plant): must be one of'),
    ('plant', 'mode', 'fast', 'parameter mode (node plant): must be one of lockstep'),
    ('plant', 'joints', ['a', 'a'], 'parameter joints (node plant): must be 2 distinct'),
    ('plant', 'sensors.velocity_source', 'x', 'parameter sensors.velocity_source (node plant)'),
    ('plant', 'lockstep_timeout', 0.0, 'parameter lockstep_timeout (node plant): must be > 0'),
    ('controller', 'kp', [-1.0, 2.0], 'parameter kp[0] (node controller): must be > 0'),
    ('controller', 'nominal.friction.eps', [0.01, 0.0],
     'parameter nominal.friction.eps[1] (node controller): must be > 0'),
    ('controller', 'trigger', 'sometimes', 'parameter trigger (node controller)'),
    ('trajectory', 'trajectory', '{type: sinusoid, amplitude: [0.5], frequency: 1.0}',
     'parameter trajectory.amplitude (node trajectory)'),
    ('trajectory', 'trajectory', '{type: sinusoid, amplitude: [4.0, 0.1], frequency: 1.0}',
     'below the lower limit'),
    ('trajectory', 'trajectory', '{type: sin', 'not a valid YAML mapping'),
    ('trajectory', 'limits.velocity', [1.0, 0.0],
     'parameter limits.velocity[1] (node trajectory): must be > 0'),
])
def test_invalid_values_name_the_ros_parameter(node, key, value, expected):
    build = {'plant': rp.plant_config, 'controller': rp.controller_config,
             'trajectory': rp.trajectory_config}[node]
    with pytest.raises(ParameterError) as err:
        build({key: value})
    assert expected in str(err.value)
    assert '\n' not in str(err.value)


def test_yaml_floats_need_a_dot_and_get_one():
    assert rp._yaml_scalar(1e-05) == '1.0e-05'
    assert yaml.safe_load(rp._yaml_scalar(5e-06)) == 5e-06
    assert rp._yaml_scalar(math.inf) == '.inf'


# --------------------------------------------------------------------------------------------
# declaration on a real node (rclpy, no communication)

rclpy = pytest.importorskip('rclpy')


def _node(ctx, overrides):
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    return Node('plant', context=ctx,
                parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])


def test_declared_with_descriptors_and_int_coercion(ros_context):
    node = _node(ros_context, {'arm.m1': 3, 'friction.b': [1, 2], 'substeps': 8})
    try:
        values = rp.declare_parameters(node, rp.plant_specs())
        assert values['arm.m1'] == 3.0 and isinstance(values['arm.m1'], float)
        assert values['friction.b'] == [1.0, 2.0] and values['substeps'] == 8
        d = node.describe_parameter('arm.m1')
        assert 'link 1 mass [kg]' in d.description and d.read_only
        assert d.floating_point_range[0].from_value == 0.0
        assert node.describe_parameter('substeps').integer_range[0].from_value == 1
    finally:
        node.destroy_node()


@pytest.mark.parametrize('overrides, expected', [
    ({'arm.mass1': 3.0}, 'parameter arm.mass1 (node plant): unknown parameter'),
    ({'arm.m1': 'heavy'}, "parameter arm.m1 (node plant): must be a number (double) "
                          "(got 'heavy')"),
    ({'friction.b': 'x'}, 'parameter friction.b (node plant): must be a list of numbers'),
    ({'arm.m1': -1.0}, 'parameter arm.m1 (node plant): must be in [0.0, inf]'),
    ({'rotor_inertia': 1.0}, 'parameter rotor_inertia (node plant): must be true or false'),
])
def test_declaration_errors_name_the_parameter(ros_context, overrides, expected):
    node = _node(ros_context, overrides)
    try:
        with pytest.raises(ParameterError) as err:
            rp.declare_parameters(node, rp.plant_specs())
        assert str(err.value).startswith(expected), str(err.value)
    finally:
        node.destroy_node()


def test_unknown_parameter_suggests_the_closest_name(ros_context):
    node = _node(ros_context, {'arm.mm1': 3.0})
    try:
        with pytest.raises(ParameterError, match='did you mean arm.m1'):
            rp.declare_parameters(node, rp.plant_specs())
    finally:
        node.destroy_node()


def _invalid_value(spec):
    kind = spec.kind
    if kind == 'float':
        return math.nan
    if kind == 'float[]':
        return [spec.default[0], math.nan]
    if kind == 'int':
        return -1
    if kind == 'str':
        return 'no-such-choice'
    return None


@pytest.mark.parametrize('node', ['plant', 'controller'])
def test_every_core_parameter_is_validated_under_its_ros_name(node):
    """Each physical / gain parameter: an invalid value is refused naming that parameter."""
    build = {'plant': rp.plant_config, 'controller': rp.controller_config}[node]
    checked = 0
    for spec in rp.SPECS[node]():
        bad = _invalid_value(spec)
        if spec.core is None or bad is None:
            continue
        with pytest.raises(ParameterError) as err:
            build({spec.name: bad})
        msg = str(err.value)
        assert msg.startswith(f'parameter {spec.name}'), (spec.name, msg)
        assert f'(node {node})' in msg
        checked += 1
    assert checked >= (35 if node == 'plant' else 20)
