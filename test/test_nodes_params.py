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


def test_only_gains_limits_and_adaptation_commands_are_runtime_changeable():
    writable = {s.name for s in rp.controller_specs() if not s.read_only}
    assert writable == set(rp.RUNTIME_GAINS) | set(rp.ADAPTATION_COMMANDS)
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
    ('trajectory', 'trajectory', '{type: sinusoid, amplitude: [0.5], omega: 1.0}',
     'parameter trajectory.amplitude (node trajectory)'),
    ('trajectory', 'trajectory', '{type: sinusoid, amplitude: [4.0, 0.1], omega: 1.0}',
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
        assert d.floating_point_range[0].from_value == 0.001     # plausible range
        assert d.floating_point_range[0].to_value == 1000.0
        assert node.describe_parameter('substeps').integer_range[0].from_value == 1
    finally:
        node.destroy_node()


@pytest.mark.parametrize('overrides, expected', [
    ({'arm.mass1': 3.0}, 'parameter arm.mass1 (node plant): unknown parameter'),
    ({'arm.m1': 'heavy'}, 'parameter arm.m1 (node plant): must be a number (double) '
                          "(got 'heavy')"),
    ({'friction.b': 'x'}, 'parameter friction.b (node plant): must be a list of numbers'),
    ({'arm.m1': -1.0}, 'parameter arm.m1 (node plant): must be in [0.001, 1000.0]'),
    ({'arm.l1': 1.0e9}, 'parameter arm.l1 (node plant): must be in [0.001, 5.0]'),
    ({'control_rate': 1.0e-3}, 'parameter control_rate (node plant): must be in [10.0, 20000.0]'),
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


# --------------------------------------------------------------------------------------------
# configuration refusals of the ROS values (no rclpy needed)

@pytest.mark.parametrize('node, values, expected', [
    ('plant', {'control_rate': 1e-3},
     'parameter control_rate (node plant): must be in [10, 20000] Hz'),
    ('controller', {'control_rate': 1e6},
     'parameter control_rate (node controller): must be in [10, 20000] Hz'),
    ('plant', {'duration': 0.0004},
     'parameter duration (node plant): must be at least one control period'),
    ('plant', {'duration': 1e6}, 'parameter duration (node plant): must be in [0, 86400] s'),
    ('plant', {'arm.l1': 1e9}, 'parameter arm.l1 (node plant): must be in [0.001, 5] m'),
    ('plant', {'arm.m1': 1e300}, 'parameter arm.m1 (node plant): must be in [0.001, 1000] kg'),
    ('plant', {'motors.V_max': [48.0, 1e12]},
     'parameter motors.V_max[1] (node plant): must be in [0.1, 1000] V'),
    ('plant', {'friction.eps': [1e-300, 0.01]},
     'parameter friction.eps[0] (node plant): must be in [1e-05, 10] rad/s'),
    ('controller', {'kp': [1e12, 16.0]},
     'parameter kp[0] (node controller): must be in [0, 1e+06]'),
    ('controller', {'nominal.arm.l2': 50.0},
     'parameter nominal.arm.l2 (node controller): must be in [0.001, 5] m'),
    ('trajectory', {'control_rate': 5.0},
     'parameter control_rate (node trajectory): must be in [10, 20000] Hz'),
    ('trajectory', {'limits.position_lower': [-1e9, -3.0]},
     'parameter limits.position_lower[0] (node trajectory): must be in [-100, 100] rad'),
    ('trajectory', {'limits.velocity': [5.0, 1e6]},
     'parameter limits.velocity[1] (node trajectory): must be in [0, 100] rad/s'),
])
def test_implausible_values_and_rates_are_refused_naming_the_parameter(node, values, expected):
    build = {'plant': rp.plant_config, 'controller': rp.controller_config,
             'trajectory': rp.trajectory_config}[node]
    with pytest.raises(ParameterError) as err:
        build(values)
    assert str(err.value).startswith(expected), str(err.value)
    assert '\n' not in str(err.value)


def test_plant_duration_zero_means_until_stopped_and_one_period_is_enough():
    assert rp.plant_config({'duration': 0.0}).n_ticks == 0
    assert rp.plant_config({'duration': 0.001}).n_ticks == 1


def test_descriptor_ranges_are_the_core_plausible_ranges():
    specs = {s.name: s for s in rp.plant_specs()}
    assert specs['arm.l1'].range == (0.001, 5.0)
    assert specs['control_rate'].range == (10.0, 20000.0)
    assert specs['substeps'].range == (1, 1000)
    assert 'plausible range [1e-05, 10] rad/s' in specs['friction.eps'].constraints


# --------------------------------------------------------------------------------------------
# params files: YAML 1.2 floats, empty files, mixed lists, namespaces and shared sections

def _write(tmp_path, text, name='params.yaml'):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_params_file_floats_with_an_unsigned_exponent_are_numbers(tmp_path):
    path = _write(tmp_path, '/**/plant:\n  ros__parameters:\n    arm.m1: 3.0e0\n'
                  '    motors.Ki_i: [5.655e2, 1.508e3]\n    arm.l1: 1.0e9\n')
    values = rp.load_params_file(path)['plant']
    assert values['arm.m1'] == 3.0 and values['motors.Ki_i'] == [565.5, 1508.0]
    with pytest.raises(ParameterError, match=r'^parameter arm.l1 \(node plant\): must be in '):
        rp.plant_config(values)          # a number out of range, not "must be a number"


@pytest.mark.parametrize('text', ['', '# only a comment\n\n   \n# another\n'])
def test_empty_or_comment_only_params_file_is_refused(tmp_path, text):
    path = _write(tmp_path, text)
    with pytest.raises(ParameterError, match=r'params file .*: empty \(no settings'):
        rp.load_params_file(path)


@pytest.mark.parametrize('value, got', [
    ("[0.5, 'b']", 'got double and string'),
    ('[1, 2.5]', 'got double and integer'),
    ('[true, 1.0]', 'got bool and double'),
])
def test_mixed_type_list_is_refused_naming_the_parameter(tmp_path, value, got):
    path = _write(tmp_path, f'plant:\n  ros__parameters:\n    friction.b: {value}\n')
    with pytest.raises(ParameterError) as err:
        rp.load_params_file(path)
    msg = str(err.value)
    assert msg.startswith('parameter friction.b (section plant of params file'), msg
    assert got in msg and '\n' not in msg


@pytest.mark.parametrize('key, fqn, applies', [
    ('/**', '/arm1/plant', True),
    ('/**/controller', '/controller', True),
    ('/**/controller', '/arm1/controller', True),
    ('/**/controller', '/a/b/controller', True),
    ('/**/controller', '/arm1/plant', False),
    ('controller', '/controller', True),
    ('controller', '/arm1/controller', False),
    ('/arm1/*', '/arm1/plant', True),
    ('/arm1/*', '/arm2/plant', False),
    ('/*', '/arm1/plant', False),
    ('/arm1/controller', '/arm1/controller', True),
])
def test_section_keys_match_node_names_as_rcl_does(key, fqn, applies):
    assert rp.section_matches(key, fqn) is applies


@pytest.mark.parametrize('name, nodes', [('sim_params.yaml', ('plant', 'controller',
                                                              'trajectory')),
                                         ('hardware_params.yaml', ('controller', 'trajectory'))])
def test_shipped_params_files_apply_under_any_namespace(name, nodes):
    sections = rp.read_params_file(ROOT / 'config' / name)
    for node in nodes:
        for ns in ('', '/arm1', '/cell/arm2'):
            applying = [k for k in sections if rp.section_matches(k, f'{ns}/{node}')]
            assert applying == [f'/**/{node}'], (node, ns, applying)


SHARED = """\
/**:
  ros__parameters:
    control_rate: 500.0
    command_source: effort_commands
    trigger: timer
    limits.velocity: [1.0, 1.0]
/**/controller:
  ros__parameters:
    kp: [30.0, 20.0]
"""


def test_shared_section_keys_of_other_nodes_are_ignored_with_one_warning(tmp_path):
    warnings = []
    values = rp.load_params_file(_write(tmp_path, SHARED), on_warning=warnings.append)
    assert values['plant']['control_rate'] == 500.0
    assert values['plant']['command_source'] == 'effort_commands'
    assert 'trigger' not in values['plant'] and 'limits.velocity' not in values['plant']
    assert values['controller']['trigger'] == 'timer' and values['controller']['kp'][0] == 30.0
    assert 'command_source' not in values['controller']
    assert values['trajectory']['limits.velocity'] == [1.0, 1.0]
    by_node = {w.split(':')[0]: w for w in warnings}
    assert len(warnings) == len(by_node) == 4          # one warning per node
    assert 'limits.velocity (trajectory)' in by_node['node plant']
    assert 'trigger (controller)' in by_node['node plant']
    assert 'command_source (plant)' in by_node['node controller']
    for node in ('plant', 'controller', 'trajectory'):
        getattr(rp, f'{node}_config')(values[node])    # the remaining values are valid


def test_misspelt_key_in_a_shared_section_fails_naming_the_closest_name(tmp_path):
    path = _write(tmp_path, '/**:\n  ros__parameters:\n    contrl_rate: 500.0\n')
    with pytest.raises(ParameterError, match=r'contrl_rate .*did you mean control_rate\?'):
        rp.load_params_file(path, on_warning=lambda text: None)


def test_ros_arguments_are_parsed_per_block():
    argv = ['plant', 'x', '--ros-args', '-r', '__ns:=/a', '--params-file', 'f1', '-p', 'k:=1',
            '--', '--params-file', 'no', '--ros-args', '--params-file', 'f2']
    assert rp.params_files(argv) == ['f1', 'f2']
    assert ('--param', 'k:=1') in rp.ros_arguments(argv)
    assert rp.wants_help(['plant', '--help']) and rp.wants_help(['plant', '-h'])
    assert not rp.wants_help(['plant', '--ros-args', '-p', 'x:=1'])
    assert not rp.wants_help(['--help'])             # argv[0] is the program


def test_node_help_lists_every_parameter_with_type_default_and_description():
    text = rp.node_help('plant', 'Plant node: the simulated arm.', rp.plant_specs())
    for spec in rp.plant_specs():
        assert f'\n  {spec.name} (' in text
    assert '  arm.m1 (double, default 3.0, read-only)' in text
    assert 'link 1 mass [kg]' in text and 'plausible range [0.001, 1000] kg' in text
    assert max(len(line) for line in text.splitlines()) <= 99


# --------------------------------------------------------------------------------------------
# the node executables under a namespace with the shipped params files (separate processes)

BIN = __import__('pathlib').Path(__import__('sys').executable).parent


def _get_parameters(probe, executor, spin, node_fqn, names):
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python
    client = probe.node.create_client(GetParameters, f'{node_fqn}/get_parameters')
    assert spin(executor, 60.0, until=client.service_is_ready), f'{node_fqn} not up'
    for _ in range(6):      # a request sent before discovery completes may go unanswered
        future = client.call_async(GetParameters.Request(names=names))
        if spin(executor, 10.0, until=future.done):
            return dict(zip(names, (parameter_value_to_python(v)
                                    for v in future.result().values)))
        client.remove_pending_request(future)
    pytest.fail(f'{node_fqn}/get_parameters did not answer')


def test_params_files_apply_under_a_namespace(procs, probe, executor, spin, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    shared = _write(tmp_path, '/**:\n  ros__parameters:\n    command_source: effort_commands\n'
                    '    use_sim_time: false\n', 'shared.yaml')
    files = ['--params-file', str(ROOT / 'config' / 'sim_params.yaml'), '--params-file',
             str(shared)]
    probe.sub(DiagnosticArray, '/diagnostics')
    executor.add_node(probe.node)
    ctrl = procs.start('controller', [str(BIN / 'controller'), '--ros-args', '-r',
                                      '__ns:=/arm1', *files])
    plant = procs.start('plant', [str(BIN / 'plant'), '--ros-args', '-r', '__ns:=/arm1',
                                  *files, '-p', 'wait_for_subscribers:=5',
                                  '-p', 'startup_timeout:=60.0'])
    got = _get_parameters(probe, executor, spin, '/arm1/controller',
                          ['safety.state_timeout', 'nominal.arm.m1', 'kp'])
    assert got == {'safety.state_timeout': 5.0, 'nominal.arm.m1': 2.5, 'kp': [25.0, 16.0]}
    got = _get_parameters(probe, executor, spin, '/arm1/plant',
                          ['duration', 'command_source', 'arm.m1'])
    assert got == {'duration': 10.0, 'command_source': 'effort_commands', 'arm.m1': 3.0}
    # the plant's status on the standard topic, as diagnostic_aggregator expects it
    msgs = probe.msgs['/diagnostics']

    def plant_status():
        return [s for m in msgs for s in m.status if s.hardware_id == 'manip_control/arm1/plant']
    assert spin(executor, 10.0, until=plant_status), [m.status for m in msgs]
    assert plant_status()[0].name == 'arm1/plant: simulated 2R arm'
    procs.stop(ctrl)
    procs.stop(plant)
    err = procs.output(ctrl)[1]
    warnings = [line for line in err.splitlines() if 'ignoring' in line]
    assert len(warnings) == 1, err           # one warning naming the other node's key
    assert 'command_source (plant)' in warnings[0] and '[WARN]' in warnings[0]
    assert 'ignoring' not in procs.output(plant)[1]


@pytest.mark.parametrize('text, expected', [
    ('/**/plant:\n  ros__parameters:\n    arm.mm1: 3.0\n',
     'error: parameter arm.mm1 (node plant): unknown parameter (did you mean arm.m1?)'),
    ('/**:\n  ros__parameters:\n    contrl_rate: 500.0\n',
     'error: parameter contrl_rate (node plant, a shared section (/**) of the params file): '
     'unknown parameter (did you mean control_rate?)'),
])
def test_misspelt_key_fails_naming_the_closest_name(procs, tmp_path, text, expected):
    path = _write(tmp_path, text)
    p = procs.start('plant', [str(BIN / 'plant'), '--ros-args', '-r', '__ns:=/arm1',
                              '--params-file', str(path)])
    assert procs.wait(p, 60.0) == 2
    assert procs.output(p)[1].strip() == expected


def test_trajectory_string_parameter_reads_yaml_12_floats():
    cfg = rp.trajectory_config({'trajectory': '{type: hold, position: [1.0e-1, -2e-1]}'})
    assert cfg.trajectory['position'] == [0.1, -0.2]
