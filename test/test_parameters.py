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

"""Tests of manip_control.parameters: presets, default motor sizing, validation, round trip."""

import copy
import dataclasses
import math
from pathlib import Path

from manip_control.parameters import ArmParameters
from manip_control.parameters import controller_from_dict
from manip_control.parameters import ControllerParameters
from manip_control.parameters import DEFAULT_MOTORS
from manip_control.parameters import FrictionParameters
from manip_control.parameters import gains_from_frequency
from manip_control.parameters import load_scenario
from manip_control.parameters import MotorParameters
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
from manip_control.parameters import PlantParameters
from manip_control.parameters import PLAUSIBLE_RANGES
from manip_control.parameters import Scenario
from manip_control.parameters import scenario_from_dict
from manip_control.parameters import SensorParameters
from manip_control.parameters import yaml_load
import pytest
import yaml

CONFIG_DIR = Path(__file__).resolve().parent.parent / 'config'
CORE_KEYS = {'scenario', 'plant', 'controller', 'trajectory'}
G0 = 9.81


def _has_ros_parameters(doc):
    if isinstance(doc, dict):
        return 'ros__parameters' in doc or any(_has_ros_parameters(v) for v in doc.values())
    if isinstance(doc, list):
        return any(_has_ros_parameters(v) for v in doc)
    return False


def _core_presets():
    core = []
    for path in sorted(CONFIG_DIR.glob('*.yaml')):
        doc = yaml.safe_load(path.read_text())
        if _has_ros_parameters(doc):
            continue
        if isinstance(doc, dict) and CORE_KEYS & set(doc):
            core.append(path)
    return core


CORE_PRESETS = _core_presets()


# --------------------------------------------------------------------------------------------
# presets


def test_known_core_presets_are_found():
    names = {p.stem for p in CORE_PRESETS}
    assert {'default', 'seed001', 'seed004'} <= names


@pytest.mark.parametrize('path', CORE_PRESETS, ids=lambda p: p.name)
def test_core_preset_loads_by_path_and_by_name(path):
    by_path = load_scenario(path)
    by_name = load_scenario(path.stem)
    assert isinstance(by_path, Scenario)
    assert by_path == by_name
    doc = yaml.safe_load(path.read_text())
    # the values written in the file are the ones loaded
    if 'scenario' in doc:
        for key, value in doc['scenario'].items():
            got = getattr(by_path, key)
            assert (list(got) if isinstance(got, tuple) else got) == value
    if 'plant' in doc and 'arm' in doc['plant']:
        for key, value in doc['plant']['arm'].items():
            assert getattr(by_path.plant.arm, key) == value
    if 'trajectory' in doc:
        assert by_path.trajectory == doc['trajectory']


def test_load_none_is_default_preset():
    assert load_scenario() == load_scenario(CONFIG_DIR / 'default.yaml')


# --------------------------------------------------------------------------------------------
# default motors can hold the arm horizontally with margin


def _static_horizontal_gravity(arm):
    """Gravity torque at q1 = q2 = 0 (links along +x) [N·m], from masses and lengths."""
    g1 = (arm.m1 * arm.lc1 + arm.m2 * (arm.l1 + arm.lc2)) * G0
    g2 = arm.m2 * arm.lc2 * G0
    return g1, g2


def _motor_sets():
    default_doc = yaml.safe_load((CONFIG_DIR / 'default.yaml').read_text())
    preset = scenario_from_dict(default_doc).plant
    return [('PlantParameters()', PlantParameters()), ('config/default.yaml', preset)]


@pytest.mark.parametrize('name,plant', _motor_sets(), ids=['PlantParameters', 'default.yaml'])
def test_default_motors_hold_arm_horizontally_with_margin(name, plant):
    assert plant.actuator == 'motor'
    gravity = _static_horizontal_gravity(plant.arm)
    # the default arm: 44.1 and 9.81 N·m
    assert gravity[0] == pytest.approx((3.0 * 0.5 + 2.0 * 1.5) * 9.81)
    assert gravity[1] == pytest.approx(2.0 * 0.5 * 9.81)
    for motor, g in zip(plant.motors, gravity):
        peak = motor.eta * motor.N * motor.k_t * motor.i_max
        assert peak >= 1.5 * g, f'{name}: peak torque {peak} < 1.5 x {g}'
        assert motor.peak_torque == pytest.approx(peak)
        # the drive can push i_max through the locked (stalled) armature
        assert motor.i_max * motor.R <= motor.V_max
        # current needed for 1.5x the load is within the limit
        assert 1.5 * g / (motor.eta * motor.N * motor.k_t) <= motor.i_max


def test_default_motor_pi_gains_are_pole_zero_cancelled_at_300_hz():
    wc = 2.0 * math.pi * 300.0
    for motor in DEFAULT_MOTORS:
        assert motor.Kp_i == pytest.approx(motor.L * wc, rel=1e-3)
        assert motor.Ki_i == pytest.approx(motor.R * wc, rel=1e-3)


# --------------------------------------------------------------------------------------------
# invalid documents

BASE_DOC = {
    'scenario': {'name': 'base', 'duration': 2.0, 'control_rate': 500.0,
                 'late_window_start': 1.0, 'joints': ['a', 'b']},
    'plant': {
        'arm': {'m1': 3.0, 'm2': 2.0, 'l1': 1.0, 'l2': 0.8, 'lc1': 0.5, 'lc2': 0.4,
                'I1': 0.2, 'I2': 0.1},
        'actuator': 'motor',
        'friction': [{'b': 0.5, 'tau_c': 0.8, 'eps': 0.01},
                     {'b': 0.3, 'tau_c': 0.4, 'eps': 0.01}],
        'motors': [
            {'R': 0.3, 'L': 0.0003, 'k_t': 0.07, 'k_e': 0.07, 'N': 100.0, 'eta': 0.85,
             'Jm': 1.0e-5, 'i_max': 15.0, 'V_max': 48.0, 'Kp_i': 0.5655, 'Ki_i': 565.5},
            {'R': 0.8, 'L': 0.0005, 'k_t': 0.05, 'k_e': 0.05, 'N': 100.0, 'eta': 0.85,
             'Jm': 5.0e-6, 'i_max': 6.0, 'V_max': 48.0, 'Kp_i': 0.9425, 'Ki_i': 1508.0}],
        'torque_limit': [89.0, 25.0],
        'sensors': {'encoder_counts': 4096, 'position_noise_std': 1e-4},
        'substeps': 4,
    },
    'controller': {
        'law': 'computed_torque',
        'nominal': {'arm': {'m1': 2.5, 'm2': 1.5, 'l1': 1.0, 'l2': 0.8, 'lc1': 0.5,
                            'lc2': 0.4, 'I1': 0.2, 'I2': 0.1}},
        'kp': [25.0, 16.0],
        'kd': [10.0, 8.0],
        'torque_limit': [89.0, 25.0],
    },
    'trajectory': {'type': 'quintic', 'start': [0.0, 0.0], 'goal': [0.5, -0.5],
                   'duration': 1.0},
}

_DELETE = object()


def _edit(path, value):
    """Return a document edit: set (or delete, with _DELETE) the entry at ``path``."""
    def apply(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return doc
    return apply


# (id, edit, parameter path expected in the message, reason word expected in the message)
INVALID = [
    ('nan', _edit(('plant', 'arm', 'm1'), math.nan), 'plant.arm.m1', 'finite'),
    ('inf', _edit(('plant', 'motors', 0, 'R'), math.inf), 'plant.motors[0].R', 'finite'),
    ('-inf', _edit(('controller', 'kd'), [10.0, -math.inf]), 'controller.kd[1]', 'finite'),
    ('string', _edit(('plant', 'arm', 'l1'), '1.0'), 'plant.arm.l1', 'number'),
    ('bool', _edit(('plant', 'motors', 1, 'k_t'), True), 'plant.motors[1].k_t', 'number'),
    ('m=0', _edit(('plant', 'arm', 'm2'), 0.0), 'plant.arm.m2', '> 0'),
    ('m<0', _edit(('controller', 'nominal', 'arm', 'm1'), -1.0),
     'controller.nominal.arm.m1', '> 0'),
    ('I<0', _edit(('plant', 'arm', 'I2'), -1e-3), 'plant.arm.I2', '>= 0'),
    ('lc=0', _edit(('plant', 'arm', 'lc1'), 0.0), 'plant.arm.lc1', '(0, l1]'),
    ('lc>l', _edit(('plant', 'arm', 'lc2'), 0.81), 'plant.arm.lc2', '(0, l2]'),
    ('eps=0', _edit(('plant', 'friction', 1, 'eps'), 0.0), 'plant.friction[1].eps', '> 0'),
    ('eps<0', _edit(('plant', 'friction', 0, 'eps'), -0.01), 'plant.friction[0].eps',
     '> 0'),
    ('eta=0', _edit(('plant', 'motors', 0, 'eta'), 0.0), 'plant.motors[0].eta', '(0, 1]'),
    ('eta>1', _edit(('plant', 'motors', 1, 'eta'), 1.01), 'plant.motors[1].eta', '(0, 1]'),
    ('L=0', _edit(('plant', 'motors', 1, 'L'), 0.0), 'plant.motors[1].L', '> 0'),
    ('L<0', _edit(('plant', 'motors', 0, 'L'), -1e-4), 'plant.motors[0].L', '> 0'),
    ('R=0', _edit(('plant', 'motors', 1, 'R'), 0.0), 'plant.motors[1].R', '> 0'),
    ('N<1', _edit(('plant', 'motors', 0, 'N'), 0.99), 'plant.motors[0].N', '>= 1'),
    ('i_max=0', _edit(('plant', 'motors', 1, 'i_max'), 0.0), 'plant.motors[1].i_max', '> 0'),
    ('i_max<0', _edit(('plant', 'motors', 0, 'i_max'), -5.0), 'plant.motors[0].i_max',
     '> 0'),
    ('unknown-top', _edit(('plants',), {}), 'plants', 'unknown'),
    ('unknown-scenario', _edit(('scenario', 'rate'), 100.0), 'scenario.rate', 'unknown'),
    ('unknown-plant', _edit(('plant', 'gravity'), 9.81), 'plant.gravity', 'unknown'),
    ('unknown-arm', _edit(('plant', 'arm', 'm3'), 1.0), 'plant.arm.m3', 'unknown'),
    ('unknown-motor', _edit(('plant', 'motors', 1, 'Kd_i'), 1.0), 'plant.motors[1].Kd_i',
     'unknown'),
    ('unknown-controller', _edit(('controller', 'kv'), [1.0, 1.0]), 'controller.kv',
     'unknown'),
    ('unknown-nominal-arm', _edit(('controller', 'nominal', 'arm', 'mass'), 1.0),
     'controller.nominal.arm.mass', 'unknown'),
    ('unknown-sensors', _edit(('plant', 'sensors', 'bias'), 0.1), 'plant.sensors.bias',
     'unknown'),
    ('unknown-non-str-keys', lambda d: _edit(('plant', 'zz'), 1.0)(_edit(('plant', 7), 1.0)(d)),
     'plant.7', 'unknown'),
    ('missing-m1', _edit(('plant', 'arm', 'm1'), _DELETE), 'plant.arm.m1', 'missing'),
    ('missing-kp', _edit(('controller', 'kp'), _DELETE), 'controller.kp', 'missing'),
    ('missing-motor-V_max', _edit(('plant', 'motors', 1, 'V_max'), _DELETE),
     'plant.motors[1].V_max', 'missing'),
    ('missing-scenario-duration', _edit(('scenario', 'duration'), _DELETE),
     'scenario.duration', 'missing'),
    ('torque_limit-3', _edit(('plant', 'torque_limit'), [1.0, 2.0, 3.0]),
     'plant.torque_limit', '2 elements'),
    ('controller-torque_limit-1', _edit(('controller', 'torque_limit'), [1.0]),
     'controller.torque_limit', '2 elements'),
    ('motors-3', _edit(('plant', 'motors'), [{}, {}, {}]), 'plant.motors', '2 entries'),
    ('kp-and-wn', _edit(('controller', 'wn'), [5.0, 4.0]), 'controller', 'not both'),
    ('wn-without-zeta', lambda d: _edit(('controller', 'wn'), [5.0, 4.0])(
        _edit(('controller', 'kd'), _DELETE)(_edit(('controller', 'kp'), _DELETE)(d))),
     'controller.zeta', 'missing'),
    ('kp<=0', _edit(('controller', 'kp'), [25.0, 0.0]), 'controller.kp[1]', '> 0'),
    ('bad-law', _edit(('controller', 'law'), 'lqr'), 'controller.law', 'one of'),
    ('bad-counts', _edit(('plant', 'sensors', 'encoder_counts'), 4096.5),
     'plant.sensors.encoder_counts', 'integer'),
    ('duration<=0', _edit(('scenario', 'duration'), 0.0), 'scenario.duration', '> 0'),
    ('joints-equal', _edit(('scenario', 'joints'), ['a', 'a']), 'scenario.joints',
     'distinct'),
    ('arm-not-mapping', _edit(('plant', 'arm'), [1.0, 2.0]), 'plant.arm', 'mapping'),
    ('trajectory-duration', _edit(('trajectory', 'duration'), -1.0),
     'trajectory.duration', '> 0'),
    ('trajectory-type', _edit(('trajectory', 'type'), 'spline'), 'trajectory.type',
     'unknown'),
    ('trajectory-length', _edit(('trajectory', 'goal'), [0.5, -0.5, 0.1]),
     'trajectory.goal', '2'),
]


def test_base_document_is_valid():
    sc = scenario_from_dict(copy.deepcopy(BASE_DOC))
    assert sc.name == 'base' and sc.control_rate == 500.0 and sc.joints == ('a', 'b')
    assert sc.plant.arm.l2 == 0.8 and sc.plant.motors[1].R == 0.8
    assert sc.plant.sensors.encoder_counts == 4096
    assert sc.controller.nominal.arm.m1 == 2.5


@pytest.mark.parametrize('edit,param,reason', [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_invalid_document_raises_parameter_error_naming_parameter(edit, param, reason):
    doc = edit(copy.deepcopy(BASE_DOC))
    with pytest.raises(ParameterError) as info:
        scenario_from_dict(doc)
    message = str(info.value)
    # the message starts with the parameter's path, then the reason
    assert message.startswith(param), message
    assert reason in message, message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize('cls,kwargs,param', [
    (ArmParameters, {'lc1': 1.5}, 'lc1'),
    (ArmParameters, {'I1': math.nan}, 'I1'),
    (FrictionParameters, {'eps': 0.0}, 'eps'),
    (MotorParameters, {'eta': 0.0}, 'eta'),
    (MotorParameters, {'L': -1.0}, 'L'),
    (SensorParameters, {'velocity_source': 'kalman'}, 'velocity_source'),
    (ControllerParameters, {'kp': (1.0, 2.0, 3.0)}, 'kp'),
])
def test_dataclass_constructor_validates(cls, kwargs, param):
    with pytest.raises(ParameterError, match=rf'\.{param}\b'):
        cls(**kwargs)


def test_invalid_yaml_syntax_raises_parameter_error(tmp_path):
    path = tmp_path / 'broken.yaml'
    path.write_text('plant:\n  arm: {m1: 3.0, m2: [2.0\n')
    with pytest.raises(ParameterError, match='YAML'):
        load_scenario(path)


def test_yaml_that_is_not_a_mapping_raises_parameter_error(tmp_path):
    path = tmp_path / 'list.yaml'
    path.write_text('- 1\n- 2\n')
    with pytest.raises(ParameterError, match='mapping'):
        load_scenario(path)


@pytest.mark.parametrize('name', ['no_such_preset_zz', 'no_such_preset_zz.yaml',
                                  '/nonexistent/dir/scenario.yaml'])
def test_nonexistent_preset_raises_parameter_error(name):
    with pytest.raises(ParameterError, match='no such file or preset'):
        load_scenario(name)


# --------------------------------------------------------------------------------------------
# round trip and gains


def _custom_scenario():
    doc = copy.deepcopy(BASE_DOC)
    doc['plant']['sensors'] = {'encoder_counts': 8192, 'position_noise_std': 2e-4,
                               'velocity_noise_std': 1e-3,
                               'velocity_source': 'filtered_difference',
                               'velocity_cutoff_hz': 50.0, 'seed': 3}
    doc['plant']['friction'][0]['tau_s'] = 0.2
    doc['plant']['initial_position'] = [0.1, -0.2]
    doc['plant']['rotor_inertia'] = False
    doc['controller'] = {
        'law': 'pd_gravity',
        'nominal': {'arm': doc['plant']['arm'], 'rotor_inertia': [0.1, 0.05]},
        'wn': [6.0, 5.0], 'zeta': [0.9, 1.0], 'ki': [1.0, 0.5],
        'torque_limit': [50.0, 20.0], 'friction_compensation': False}
    return scenario_from_dict(doc)


@pytest.mark.parametrize('make', [
    Scenario,
    lambda: scenario_from_dict({}),
    _custom_scenario,
] + [(lambda p=p: load_scenario(p)) for p in CORE_PRESETS],
    ids=['Scenario()', 'empty-doc', 'custom'] + [p.stem for p in CORE_PRESETS])
def test_to_dict_round_trips(make, tmp_path):
    sc = make()
    data = sc.to_dict()
    assert set(data) <= CORE_KEYS
    again = scenario_from_dict(copy.deepcopy(data))
    assert again == sc
    # and through a YAML file on disk
    path = tmp_path / 'roundtrip.yaml'
    path.write_text(yaml.safe_dump(data))
    assert load_scenario(path) == sc


def test_round_trip_detects_a_difference():
    sc = _custom_scenario()
    data = sc.to_dict()
    data['plant']['motors'][1]['L'] = 0.0006
    assert scenario_from_dict(data) != sc


def test_gains_from_frequency():
    kp, kd = gains_from_frequency([3.0, 7.0], [0.7, 1.2])
    assert kp == pytest.approx((9.0, 49.0), rel=1e-15)
    assert kd == pytest.approx((4.2, 16.8), rel=1e-15)


def test_controller_wn_zeta_sets_kp_kd():
    co = controller_from_dict({'law': 'computed_torque', 'nominal': {'arm': {
        'm1': 1.0, 'm2': 1.0, 'l1': 1.0, 'l2': 1.0, 'lc1': 0.5, 'lc2': 0.5, 'I1': 0.1,
        'I2': 0.1}}, 'wn': [4.0, 10.0], 'zeta': [1.0, 0.5], 'torque_limit': [10.0, 10.0]})
    assert co.kp == pytest.approx((16.0, 100.0))
    assert co.kd == pytest.approx((8.0, 10.0))


@pytest.mark.parametrize('wn,zeta', [([0.0, 1.0], [1.0, 1.0]), ([1.0, 1.0], [1.0, -1.0]),
                                     ([1.0], [1.0, 1.0])])
def test_gains_from_frequency_rejects_invalid(wn, zeta):
    with pytest.raises(ParameterError):
        gains_from_frequency(wn, zeta)


# --------------------------------------------------------------------------------------------
# configuration refusals: plausible ranges, rates, durations, empty files, YAML 1.2 floats

IMPLAUSIBLE = [
    ('l1', _edit(('plant', 'arm', 'l1'), 1e9), 'plant.arm.l1: must be in [0.001, 5] m'),
    ('m1', _edit(('plant', 'arm', 'm1'), 1e300), 'plant.arm.m1: must be in [0.001, 1000] kg'),
    ('tiny-m', _edit(('controller', 'nominal', 'arm', 'm2'), 1e-9),
     'controller.nominal.arm.m2: must be in [0.001, 1000] kg'),
    ('I', _edit(('plant', 'arm', 'I1'), 1e5), 'plant.arm.I1: must be in [0, 10000] kg m^2'),
    ('g0', _edit(('plant', 'arm', 'g0'), 98.1), 'plant.arm.g0: must be in [0, 25] m/s^2'),
    ('V_max', _edit(('plant', 'motors', 0, 'V_max'), 1e12),
     'plant.motors[0].V_max: must be in [0.1, 1000] V'),
    ('eps', _edit(('plant', 'friction', 1, 'eps'), 1e-300),
     'plant.friction[1].eps: must be in [1e-05, 10] rad/s'),
    ('N', _edit(('plant', 'motors', 1, 'N'), 1e5), 'plant.motors[1].N: must be in [1, 1000]'),
    ('i_max', _edit(('plant', 'motors', 1, 'i_max'), 1e6),
     'plant.motors[1].i_max: must be in [0.001, 1000] A'),
    ('kp', _edit(('controller', 'kp'), [1e12, 16.0]), 'controller.kp[0]: must be in [0, 1e+06]'),
    ('torque_limit', _edit(('controller', 'torque_limit'), [89.0, 1e9]),
     'controller.torque_limit[1]: must be in [0.001, 10000] N m'),
    ('initial_position', _edit(('plant', 'initial_position'), [0.0, 1e6]),
     'plant.initial_position[1]: must be in [-100, 100] rad'),
    ('substeps', _edit(('plant', 'substeps'), 10 ** 6), 'plant.substeps: must be in [1, 1000]'),
    ('noise', _edit(('plant', 'sensors', 'position_noise_std'), 10.0),
     'plant.sensors.position_noise_std: must be in [0, 1] rad'),
    ('rate-low', _edit(('scenario', 'control_rate'), 1e-3),
     'scenario.control_rate: must be in [10, 20000] Hz'),
    ('rate-high', _edit(('scenario', 'control_rate'), 1e6),
     'scenario.control_rate: must be in [10, 20000] Hz'),
    ('duration-long', _edit(('scenario', 'duration'), 1e6),
     'scenario.duration: must be in [0, 86400] s'),
    ('duration-short', _edit(('scenario', 'duration'), 0.0004),
     'scenario.duration: must be at least one control period (0.002 s at 500 Hz)'),
]


@pytest.mark.parametrize('edit, expected', [c[1:] for c in IMPLAUSIBLE],
                         ids=[c[0] for c in IMPLAUSIBLE])
def test_implausible_magnitudes_are_refused_naming_the_parameter(edit, expected):
    with pytest.raises(ParameterError) as info:
        scenario_from_dict(edit(copy.deepcopy(BASE_DOC)))
    assert str(info.value).startswith(expected), str(info.value)
    assert 'plausible range' in str(info.value) or 'one control period' in str(info.value)


def test_wn_zeta_are_checked_against_their_ranges():
    with pytest.raises(ParameterError, match=r'^controller.wn\[0\]: must be in \[0, 1000\]'):
        controller_from_dict({'law': 'computed_torque', 'wn': [1e4, 4.0], 'zeta': [1.0, 1.0],
                              'torque_limit': [89.0, 25.0]})


def test_every_numeric_field_has_a_plausible_range():
    """A new magnitude of the core needs its documented plausible range (parameters.py)."""
    unbounded_by_design = {('arm', 'lc1'), ('arm', 'lc2'), ('sensors', 'seed')}  # lc <= l
    for section, cls in (('arm', ArmParameters), ('friction', FrictionParameters),
                         ('motors', MotorParameters), ('sensors', SensorParameters),
                         ('plant', PlantParameters), ('controller', ControllerParameters),
                         ('nominal', NominalModel)):
        for f in dataclasses.fields(cls):
            value = getattr(cls(), f.name)
            items = value if isinstance(value, tuple) else (value,)
            numeric = items and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                    for v in items)
            if numeric and (section, f.name) not in unbounded_by_design:
                assert f.name in PLAUSIBLE_RANGES[section], (section, f.name)


def test_constructors_accept_extreme_values_given_in_code():
    # only files and ROS parameters are held to the plausible ranges (a locked test arm)
    arm = ArmParameters(I1=1e9, I2=1e9)
    assert arm.I1 == 1e9


def test_duration_override_is_checked_against_the_period():
    sc = load_scenario('default')
    assert sc.with_duration(0.001).n_ticks == 1
    for bad, reason in ((0.0004, 'at least one control period'), (0.0, '> 0'),
                        (math.inf, 'finite'), (1e6, 'must be in [0, 86400] s')):
        with pytest.raises(ParameterError) as info:
            sc.with_duration(bad)
        assert str(info.value).startswith('--duration: ') and reason in str(info.value)
    with pytest.raises(ParameterError, match='scenario.duration: must be at least one'):
        dataclasses.replace(sc, duration=0.0004)      # the dataclass refuses zero ticks


@pytest.mark.parametrize('text', ['', '\n\n', '# a comment only\n', '---\n# nothing\n'])
def test_empty_or_comment_only_file_is_refused(tmp_path, text):
    path = tmp_path / 'empty.yaml'
    path.write_text(text)
    with pytest.raises(ParameterError, match=r'empty \(no settings'):
        load_scenario(path)


@pytest.mark.parametrize('text, value', [
    ('1.0e9', 1.0e9), ('1e-3', 1e-3), ('2E+5', 2e5), ('-3.5e2', -350.0), ('.5e1', 5.0),
    ('1.5', 1.5), ('1.0e+9', 1e9), ('12', 12), ('1_000', 1000), ('1.0e9x', '1.0e9x'),
    ('e9', 'e9'), ('.inf', math.inf),
])
def test_yaml_12_floats_are_numbers(text, value):
    got = yaml_load(f'x: {text}\n')['x']
    assert got == value and type(got) is type(value), (text, got)


def test_scenario_file_with_unsigned_exponents_loads(tmp_path):
    path = tmp_path / 'e.yaml'
    path.write_text('scenario: {name: e, duration: 1.0e0, control_rate: 1.0e3}\n'
                    'trajectory: {type: sinusoid, amplitude: [5e-1, 3e-1], '
                    'omega: [5e-1, 5e-1]}\n')
    sc = load_scenario(path)
    assert sc.control_rate == 1000.0 and sc.trajectory['amplitude'] == [0.5, 0.3]


def test_simulation_stops_on_a_non_finite_state():
    from manip_control.simulation import PlantStateError
    from manip_control.simulation import run_closed_loop
    sc = dataclasses.replace(load_scenario('default'), control_rate=100.0, duration=0.5)
    with pytest.raises(PlantStateError, match=r'plant state not finite at t = 0\.0'):
        run_closed_loop(sc, engine='python')
