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
ROS parameters of the nodes: specs with descriptors, and ROS <-> core conversion.

Every node parameter is declared from a :class:`ParamSpec` (type from the default, a
description with the unit and the allowed values, a range where ROS can express one,
read-only unless it may change at runtime). The physical parameters are flat ROS names over
the core's nested layout; per-joint entries are double arrays in ``joints`` order:

=============================  ==========================================
ROS parameter                  core scenario key
=============================  ==========================================
``arm.m1`` (plant)             ``plant.arm.m1``
``friction.b: [b1, b2]``       ``plant.friction[0].b``, ``plant.friction[1].b``
``motors.R: [R1, R2]``         ``plant.motors[j].R``
``sensors.seed``               ``plant.sensors.seed``
``torque_limit``               ``plant.torque_limit`` (resp. ``controller.torque_limit``)
``nominal.arm.m1`` (ctrl)      ``controller.nominal.arm.m1``
``nominal.friction.b``         ``controller.nominal.friction[j].b``
``trajectory`` (string)        ``trajectory`` (a YAML/JSON flow mapping)
=============================  ==========================================

The nested dicts are then built into the core dataclasses with
:func:`manip_control.parameters.plant_from_dict` / :func:`controller_from_dict` /
:func:`manip_control.trajectories.trajectory_from_config`, so the core's validation is the
only validation, and its messages are translated to the ROS names
(``plant.motors[1].R: must be > 0`` -> ``parameter motors.R[1] (node plant): must be > 0``).

This module imports rclpy lazily (only :func:`declare_parameters` and helpers that build
``rclpy.parameter.Parameter`` objects need it), so the conversion can be tested without ROS.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields
import math
from pathlib import Path
import re
from typing import Any, Mapping, Sequence

from manip_control.parameters import ArmParameters
from manip_control.parameters import controller_from_dict
from manip_control.parameters import ControllerParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import MotorParameters
from manip_control.parameters import ParameterError
from manip_control.parameters import plant_from_dict
from manip_control.parameters import PlantParameters
from manip_control.parameters import Scenario
from manip_control.parameters import scenario_from_dict
from manip_control.parameters import SensorParameters
import yaml

N_JOINTS = 2
MODES = ('lockstep', 'realtime')
COMMAND_SOURCES = ('joint_commands', 'effort_commands')
TRIGGERS = ('state', 'timer')
STORAGES = ('mcap', 'sqlite3')
INF = math.inf

#: Topics the recorder subscribes to by default, with their types.
DEFAULT_RECORD_TOPICS = {
    '/joint_states': 'sensor_msgs/msg/JointState',
    '/effort_controller/commands': 'std_msgs/msg/Float64MultiArray',
    '/joint_commands': 'sensor_msgs/msg/JointState',
    '/reference': 'trajectory_msgs/msg/JointTrajectory',
    '/motor_states': 'sensor_msgs/msg/JointState',
    '/controller/diagnostics': 'diagnostic_msgs/msg/DiagnosticArray',
    '/plant/diagnostics': 'diagnostic_msgs/msg/DiagnosticArray',
}

#: Parameters every rclpy node declares itself; never "unknown".
_BUILTIN_PARAMETERS = ('use_sim_time', 'start_type_description_service')


@dataclass(frozen=True)
class ParamSpec:
    """
    One declared ROS parameter.

    Attributes
    ----------
    name : str
        ROS parameter name (dots for namespaces).
    default : bool, int, float, str or list
        Default value; its Python type is the ROS type (list of float = double array).
    description : str
        What it is, with the unit.
    constraints : str
        Allowed values in words (descriptor ``additional_constraints``).
    range : (lo, hi) or None
        Inclusive range for scalar numbers (descriptor ``floating_point_range`` /
        ``integer_range``); the core still checks the open bounds.
    read_only : bool
        Only settable at start (``--ros-args -p``, ``--params-file``).
    core : str or None
        Path into the core section dict, ``[]`` marking a per-joint list
        (``friction[].b``); None for node-only parameters.

    """

    name: str
    default: Any
    description: str
    constraints: str = ''
    range: tuple | None = None
    read_only: bool = True
    core: str | None = None

    @property
    def kind(self) -> str:
        """``bool``, ``int``, ``float``, ``str``, ``float[]``, ``str[]``."""
        d = self.default
        if isinstance(d, bool):
            return 'bool'
        if isinstance(d, int):
            return 'int'
        if isinstance(d, float):
            return 'float'
        if isinstance(d, str):
            return 'str'
        if isinstance(d, (list, tuple)) and d and all(isinstance(v, str) for v in d):
            return 'str[]'
        return 'float[]'


# --------------------------------------------------------------------------------------------
# descriptions of the core fields (unit, allowed values)

_ARM_DOC = {
    'm1': ('link 1 mass [kg]', '> 0', (0.0, INF)),
    'm2': ('link 2 mass [kg]', '> 0', (0.0, INF)),
    'l1': ('link 1 length [m]', '> 0', (0.0, INF)),
    'l2': ('link 2 length [m]', '> 0', (0.0, INF)),
    'lc1': ('joint 1 to the link-1 centre of mass [m]', 'in (0, l1]', (0.0, INF)),
    'lc2': ('joint 2 to the link-2 centre of mass [m]', 'in (0, l2]', (0.0, INF)),
    'I1': ('link 1 inertia about its centre of mass [kg m^2]', '>= 0', (0.0, INF)),
    'I2': ('link 2 inertia about its centre of mass [kg m^2]', '>= 0', (0.0, INF)),
    'g0': ('gravity magnitude [m/s^2]', '>= 0', (0.0, INF)),
    'plane': ('plane of motion', 'vertical (gravity along -y) or horizontal (no gravity)',
              None),
}
_FRICTION_DOC = {
    'b': ('viscous friction per joint [N m s/rad]', 'each >= 0'),
    'tau_c': ('Coulomb friction level per joint [N m]', 'each >= 0'),
    'eps': ('tanh smoothing velocity of the Coulomb term per joint [rad/s]', 'each > 0'),
    'tau_s': ('extra Stribeck breakaway torque per joint [N m] (0 = off)', 'each >= 0'),
    'v_s': ('Stribeck velocity per joint [rad/s]', 'each > 0'),
}
_MOTOR_DOC = {
    'R': ('armature resistance per joint [ohm]', 'each > 0'),
    'L': ('armature inductance per joint [H]', 'each > 0'),
    'k_t': ('torque constant per joint [N m/A]', 'each > 0'),
    'k_e': ('back-EMF constant per joint [V s/rad]', 'each > 0'),
    'N': ('gear ratio per joint (motor turns per joint turn)', 'each >= 1'),
    'eta': ('gearbox efficiency per joint', 'each in (0, 1]'),
    'Jm': ('rotor inertia at the motor shaft per joint [kg m^2]', 'each >= 0'),
    'i_max': ('drive current limit per joint [A]', 'each > 0'),
    'V_max': ('drive voltage limit (bus) per joint [V]', 'each > 0'),
    'Kp_i': ('current-loop proportional gain per joint [V/A]', 'each > 0'),
    'Ki_i': ('current-loop integral gain per joint [V/(A s)]', 'each >= 0'),
}
_SENSOR_DOC = {
    'encoder_counts': ('encoder counts per joint revolution (0 = no quantization)', '>= 0',
                       (0, 2 ** 31 - 1)),
    'position_noise_std': ('standard deviation of the position noise [rad]', '>= 0',
                           (0.0, INF)),
    'velocity_noise_std': ('standard deviation of the velocity noise [rad/s]', '>= 0',
                           (0.0, INF)),
    'velocity_source': ('measured velocity', "'true' (simulated + noise) or "
                        "'filtered_difference' (low-passed backward difference)", None),
    'velocity_cutoff_hz': ('cutoff of the velocity low-pass [Hz]', '> 0', (0.0, INF)),
    'seed': ('seed of the sensor noise generator', '>= 0', (0, 2 ** 31 - 1)),
}
_PLANT_DOC = {
    'actuator': ('actuator model', "'motor' (DC motor + PI current drive) or 'ideal' "
                 '(joint torque = command clamped to torque_limit)', None),
    'torque_limit': ('ideal-actuator torque clamp per joint [N m]', 'each > 0', None),
    'rotor_inertia': ('add the reflected rotor inertia Jm N^2 to the inertia diagonal', '',
                      None),
    'initial_position': ('initial joint position [rad]', 'finite', None),
    'initial_velocity': ('initial joint velocity [rad/s]', 'finite', None),
    'substeps': ('RK4 integrator sub-steps per control period', '>= 1', (1, 100000)),
}
_CONTROLLER_DOC = {
    'law': ('feedback law', "'computed_torque' or 'pd_gravity'", None, True),
    'kp': ('proportional gain per joint (computed_torque: 1/s^2, pd_gravity: N m/rad); '
           'changeable at runtime, takes effect on the next tick', 'each > 0', None, False),
    'kd': ('derivative gain per joint (computed_torque: 1/s, pd_gravity: N m s/rad); '
           'changeable at runtime', 'each > 0', None, False),
    'ki': ('integral gain per joint (computed_torque: 1/s^3, pd_gravity: N m/(rad s)); '
           '0 = off; changeable at runtime', 'each >= 0', None, False),
    'integral_limit': ('anti-windup clamp of the error integral per joint [rad s]',
                       'each >= 0', None, True),
    'torque_limit': ('command saturation per joint [N m]; changeable at runtime',
                     'each > 0', None, False),
    'friction_compensation': ('add the nominal friction to the command', '', None, True),
}

#: Controller parameters that ``ros2 param set`` may change while running.
RUNTIME_GAINS = ('kp', 'kd', 'ki', 'torque_limit')


def _joint_specs(prefix: str, core_prefix: str, cls, docs: Mapping,
                 per_joint: Sequence) -> list[ParamSpec]:
    """Double-array specs for the fields of a per-joint core dataclass (friction, motors)."""
    out = []
    for f in fields(cls):
        desc, cons = docs[f.name]
        default = [float(getattr(d, f.name)) for d in per_joint]
        out.append(ParamSpec(f'{prefix}{f.name}', default, desc, cons, None, True,
                             f'{core_prefix}[].{f.name}'))
    return out


def _arm_specs(prefix: str, core_prefix: str, arm: ArmParameters, what: str) -> list[ParamSpec]:
    specs = []
    for f in fields(ArmParameters):
        desc, cons, rng = _ARM_DOC[f.name]
        value = getattr(arm, f.name)
        value = value if isinstance(value, str) else float(value)
        specs.append(ParamSpec(f'{prefix}{f.name}', value, f'{what}: {desc}', cons, rng, True,
                               f'{core_prefix}.{f.name}'))
    return specs


def _node_common(joints_doc: str) -> list[ParamSpec]:
    return [
        ParamSpec('joints', ['joint1', 'joint2'], joints_doc,
                  '2 distinct non-empty names'),
        ParamSpec('mode', 'lockstep',
                  'time mode: lockstep (simulation; the plant owns /clock and steps only when '
                  'the command of the tick has arrived) or realtime (wall clock, free-running)',
                  'lockstep or realtime'),
        ParamSpec('control_rate', 1000.0, 'control rate [Hz] (period of the plant zero-order '
                  'hold, of the controller and of the reference samples)', '> 0',
                  (0.0, 1.0e6)),
    ]


def _plant_physical_specs(pl: PlantParameters) -> list[ParamSpec]:
    specs = _arm_specs('arm.', 'arm', pl.arm, 'true arm')
    specs += _joint_specs('friction.', 'friction', FrictionParameters, _FRICTION_DOC,
                          pl.friction)
    specs += _joint_specs('motors.', 'motors', MotorParameters, _MOTOR_DOC, pl.motors)
    for name in ('actuator', 'torque_limit', 'rotor_inertia', 'initial_position',
                 'initial_velocity', 'substeps'):
        desc, cons, rng = _PLANT_DOC[name]
        value = getattr(pl, name)
        if isinstance(value, tuple):
            value = [float(v) for v in value]
        specs.append(ParamSpec(name, value, desc, cons, rng, True, name))
    for f in fields(SensorParameters):
        desc, cons, rng = _SENSOR_DOC[f.name]
        value = getattr(pl.sensors, f.name)
        if isinstance(value, float) or f.name.endswith(('_std', '_hz')):
            value = float(value)
        specs.append(ParamSpec(f'sensors.{f.name}', value, f'sensors: {desc}', cons, rng,
                               True, f'sensors.{f.name}'))
    return specs


def plant_specs() -> list[ParamSpec]:
    """Parameters of the plant node (defaults: the core's PlantParameters defaults)."""
    specs = _node_common('joint names, order of every per-joint parameter, of /joint_states '
                         'and of the Float64MultiArray commands')
    specs += [
        ParamSpec('duration', 0.0, 'simulated time to run [s]; 0 = until stopped',
                  '>= 0', (0.0, INF)),
        ParamSpec('command_source', 'joint_commands',
                  'command input: joint_commands (sensor_msgs/JointState on joint_commands, '
                  'matched by name, stamped) or effort_commands (std_msgs/Float64MultiArray '
                  'on effort_controller/commands in joints order)',
                  'joint_commands or effort_commands'),
        ParamSpec('lockstep_timeout', 0.5,
                  'lockstep: wall time to wait for the command of a tick before holding the '
                  'last command and going on [s] (after a miss, later ticks wait at most '
                  '10 ms until commands come back)', '> 0', (0.0, INF)),
        ParamSpec('startup_timeout', 10.0,
                  'lockstep: wall time to wait at start for the subscribers and for the '
                  'first command [s]', '>= 0', (0.0, INF)),
        ParamSpec('wait_for_subscribers', 1,
                  'lockstep: number of joint_states subscribers to wait for before the first '
                  'tick (e.g. 2 for controller + recorder)', '>= 0', (0, 1000)),
        ParamSpec('command_timeout', 0.05,
                  'realtime: drive watchdog [s]; no valid command for this long means zero '
                  'torque command (zero current)', '> 0', (0.0, INF)),
    ]
    return specs + _plant_physical_specs(PlantParameters())


def controller_specs() -> list[ParamSpec]:
    """Parameters of the controller node (defaults: the core's ControllerParameters)."""
    co = ControllerParameters()
    specs = _node_common('joint names: order of the commands (Float64MultiArray data, '
                         'JointState names) and of every per-joint parameter')
    specs.append(ParamSpec(
        'trigger', 'state',
        'realtime only: state (one tick per received joint state, with the latest reference: '
        'the lowest state-to-command latency) or timer (a free-running wall timer at '
        'control_rate using the latest joint state and reference; latency up to one period)',
        'state or timer'))
    for name in ('law', 'kp', 'kd', 'ki', 'integral_limit', 'torque_limit',
                 'friction_compensation'):
        desc, cons, rng, ro = _CONTROLLER_DOC[name]
        value = getattr(co, name)
        if isinstance(value, tuple):
            value = [float(v) for v in value]
        specs.append(ParamSpec(name, value, desc, cons, rng, ro, name))
    specs += _arm_specs('nominal.arm.', 'nominal.arm', co.nominal.arm, 'nominal model')
    specs += _joint_specs('nominal.friction.', 'nominal.friction', FrictionParameters,
                          {k: (f'nominal model: {v[0]}', v[1])
                           for k, v in _FRICTION_DOC.items()}, co.nominal.friction)
    specs.append(ParamSpec('nominal.rotor_inertia', [float(v) for v in co.nominal.rotor_inertia],
                           'nominal model: reflected rotor inertia Jm N^2 per joint [kg m^2]',
                           'each >= 0', None, True, 'nominal.rotor_inertia'))
    return specs


DEFAULT_TRAJECTORY = Scenario().trajectory


def trajectory_specs() -> list[ParamSpec]:
    """Parameters of the trajectory node."""
    specs = _node_common('joint names of /reference and of the goals (goals are matched by '
                         'name)')
    specs += [
        ParamSpec('trajectory', flow_yaml(DEFAULT_TRAJECTORY),
                  'initial reference: a YAML/JSON flow mapping as the trajectory section of a '
                  'scenario file, e.g. {type: sinusoid, amplitude: [0.5, 0.3], '
                  'frequency: [0.5, 0.5]} (types sinusoid, sum_of_sinusoids, quintic, '
                  'waypoints, hold; frequencies in rad/s)', 'a mapping with a type key'),
        ParamSpec('limits.position_lower', [-math.pi, -math.pi],
                  'lower position limit per joint [rad]; goals and the initial trajectory '
                  'beyond it are rejected', 'each < limits.position_upper'),
        ParamSpec('limits.position_upper', [math.pi, math.pi],
                  'upper position limit per joint [rad]', 'each > limits.position_lower'),
        ParamSpec('limits.velocity', [5.0, 5.0],
                  'speed limit per joint [rad/s]; goals whose path exceeds it are rejected',
                  'each > 0'),
    ]
    return specs


def recorder_specs() -> list[ParamSpec]:
    """Parameters of the recorder node."""
    return [
        ParamSpec('bag', '', 'output bag directory (must not exist, or be empty); '
                  "'' = runs/bag_<date>_<time>", 'a path'),
        ParamSpec('storage', 'mcap', 'rosbag2 storage plugin', 'mcap or sqlite3'),
        ParamSpec('topics', list(DEFAULT_RECORD_TOPICS),
                  'topics to record; types of the default topics are known, others are taken '
                  'from the ROS graph when their publisher appears', 'absolute topic names'),
        ParamSpec('params_from', ['plant', 'controller', 'trajectory'],
                  'nodes whose parameters are fetched (parameter services) to write the '
                  'resolved run parameters (params.yaml) beside metadata.yaml',
                  'node names'),
        ParamSpec('qos_depth', 1000, 'subscription history depth (reliable, keep last)',
                  '>= 1', (1, 1000000)),
    ]


SPECS = {
    'plant': plant_specs,
    'controller': controller_specs,
    'trajectory': trajectory_specs,
    'recorder': recorder_specs,
}


# --------------------------------------------------------------------------------------------
# YAML helpers

def flow_yaml(data: Any) -> str:
    """One-line YAML flow text of ``data`` (what the ``trajectory`` string parameter holds)."""
    return yaml.safe_dump(data, default_flow_style=True, width=10 ** 9, sort_keys=False).strip()


def parse_flow_mapping(text: str, name: str) -> dict:
    """Parse a YAML/JSON mapping held in a string parameter; ParameterError naming ``name``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else 'syntax error'
        raise ParameterError(f'{name}: not a valid YAML mapping ({first})') from None
    if not isinstance(data, dict):
        raise ParameterError(f'{name}: must be a YAML mapping with a type key '
                             f'(got {text!r})')
    return data


# --------------------------------------------------------------------------------------------
# conversion: ROS values <-> core dicts

def _check_joint_array(name: str, value: Any, n: int = N_JOINTS) -> list:
    if not isinstance(value, (list, tuple)):
        raise ParameterError(f'{name}: must be a list with one value per joint '
                             f'(got {value!r})')
    if len(value) != n:
        raise ParameterError(f'{name}: must have {n} elements, one per joint '
                             f'(got {len(value)})')
    return list(value)


def _set_path(tree: dict, path: str, value: Any) -> None:
    parts = path.split('.')
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _get_path(tree: Mapping, path: str) -> Any:
    node = tree
    for p in path.split('.'):
        node = node[p]
    return node


def values_to_core(specs: Sequence[ParamSpec], values: Mapping[str, Any]) -> dict:
    """
    Nested core section dict from ROS values (only specs with a ``core`` path).

    Per-joint arrays (``friction[].b``) are transposed into one mapping per joint; their
    length is checked here (the core only sees complete joint entries).
    """
    tree: dict = {}
    for spec in specs:
        if spec.core is None or spec.name not in values:
            continue
        value = values[spec.name]
        if '[]' in spec.core:
            head, _, tail = spec.core.partition('[].')
            arr = _check_joint_array(spec.name, value)
            lst = _get_or_make_list(tree, head)
            for j in range(N_JOINTS):
                lst[j][tail] = arr[j]
        else:
            if isinstance(value, tuple):
                value = list(value)
            _set_path(tree, spec.core, value)
    return tree


def _get_or_make_list(tree: dict, path: str) -> list:
    parts = path.split('.')
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if parts[-1] not in node:
        node[parts[-1]] = [{} for _ in range(N_JOINTS)]
    return node[parts[-1]]


def core_to_values(specs: Sequence[ParamSpec], section: Mapping) -> dict[str, Any]:
    """ROS values (typed as the specs) from a nested core section dict (e.g. to_dict())."""
    out = {}
    for spec in specs:
        if spec.core is None:
            continue
        if '[]' in spec.core:
            head, _, tail = spec.core.partition('[].')
            try:
                items = _get_path(section, head)
            except KeyError:
                continue
            out[spec.name] = [_typed(spec, item[tail], scalar=True) for item in items]
        else:
            try:
                value = _get_path(section, spec.core)
            except KeyError:
                continue
            out[spec.name] = _typed(spec, value)
    return out


def _num(value: Any) -> Any:
    """int -> float (bool and other types unchanged: the declaration rejects them)."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _typed(spec: ParamSpec, value: Any, scalar: bool = False) -> Any:
    """``value`` with ints turned into floats where the spec is a double (array)."""
    kind = spec.kind
    if kind == 'float' or (scalar and kind == 'float[]'):
        return _num(value)
    if kind == 'float[]' and isinstance(value, (list, tuple)):
        return [_num(v) for v in value]
    if isinstance(value, tuple):
        return list(value)
    return value


_INDEX_RE = re.compile(r'(\w+)\[(\d+)\]\.(\w+)')


def ros_parameter_error(node: str, exc: Exception, prefix: str = '') -> ParameterError:
    """
    Translate a core error message to the ROS parameter names of ``node``.

    ``P.motors[1].R: must be > 0`` (prefix ``P``) -> ``parameter motors.R[1] (node plant):
    must be > 0``.
    """
    msg = str(exc)
    if prefix and msg.startswith(prefix + '.'):
        msg = msg[len(prefix) + 1:]
    name, sep, reason = msg.partition(': ')
    if not sep:
        return ParameterError(f'node {node}: {msg}')
    name = _INDEX_RE.sub(r'\1.\3[\2]', name)
    return ParameterError(f'parameter {name} (node {node}): {reason}')


def with_defaults(specs: Sequence[ParamSpec], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` completed with the spec defaults."""
    out = {s.name: s.default for s in specs}
    out.update(values)
    return out


def _common_checks(node: str, values: Mapping[str, Any]) -> None:
    joints = values.get('joints')
    if joints is not None:
        if (len(joints) != N_JOINTS or not all(isinstance(j, str) and j for j in joints)
                or len(set(joints)) != len(joints)):
            raise ParameterError(f'parameter joints (node {node}): must be {N_JOINTS} '
                                 f'distinct non-empty names (got {list(joints)!r})')
    mode = values.get('mode')
    if mode is not None and mode not in MODES:
        raise ParameterError(f'parameter mode (node {node}): must be one of '
                             f'{", ".join(MODES)} (got {mode!r})')
    rate = values.get('control_rate')
    if rate is not None and not (math.isfinite(rate) and rate > 0.0):
        raise ParameterError(f'parameter control_rate (node {node}): must be > 0 '
                             f'(got {rate})')


@dataclass
class PlantConfig:
    """Resolved plant-node configuration."""

    joints: tuple
    mode: str
    control_rate: float
    duration: float
    command_source: str
    lockstep_timeout: float
    startup_timeout: float
    wait_for_subscribers: int
    command_timeout: float
    plant: PlantParameters

    @property
    def period(self) -> float:
        return 1.0 / self.control_rate

    @property
    def n_ticks(self) -> int:
        """Ticks to run (0 = unlimited)."""
        return int(round(self.duration * self.control_rate))


def plant_config(values: Mapping[str, Any], node: str = 'plant') -> PlantConfig:
    """
    Validate the plant node's ROS values (core validation, ROS names in messages).

    Missing values take the spec defaults.
    """
    values = with_defaults(plant_specs(), values)
    _common_checks(node, values)
    if values['command_source'] not in COMMAND_SOURCES:
        raise ParameterError(f'parameter command_source (node {node}): must be one of '
                             f'{", ".join(COMMAND_SOURCES)} (got {values["command_source"]!r})')
    for name, strict in (('duration', False), ('lockstep_timeout', True),
                         ('startup_timeout', False), ('command_timeout', True)):
        v = values[name]
        if not math.isfinite(v) or v < 0.0 or (strict and v == 0.0):
            raise ParameterError(f'parameter {name} (node {node}): must be '
                                 f'{"> 0" if strict else ">= 0"} (got {v})')
    specs = plant_specs()
    try:
        tree = values_to_core(specs, values)
        plant = plant_from_dict(tree, 'P')
    except ParameterError as exc:
        raise ros_parameter_error(node, exc, 'P') from None
    return PlantConfig(tuple(values['joints']), values['mode'], float(values['control_rate']),
                       float(values['duration']), values['command_source'],
                       float(values['lockstep_timeout']), float(values['startup_timeout']),
                       int(values['wait_for_subscribers']), float(values['command_timeout']),
                       plant)


@dataclass
class ControllerConfig:
    """Resolved controller-node configuration."""

    joints: tuple
    mode: str
    control_rate: float
    trigger: str
    controller: ControllerParameters

    @property
    def period(self) -> float:
        return 1.0 / self.control_rate


def controller_config(values: Mapping[str, Any], node: str = 'controller') -> ControllerConfig:
    """Validate the controller node's ROS values (missing ones take the defaults)."""
    values = with_defaults(controller_specs(), values)
    _common_checks(node, values)
    if values['trigger'] not in TRIGGERS:
        raise ParameterError(f'parameter trigger (node {node}): must be one of '
                             f'{", ".join(TRIGGERS)} (got {values["trigger"]!r})')
    try:
        tree = values_to_core(controller_specs(), values)
        co = controller_from_dict(tree, 'C')
    except ParameterError as exc:
        raise ros_parameter_error(node, exc, 'C') from None
    return ControllerConfig(tuple(values['joints']), values['mode'],
                            float(values['control_rate']), values['trigger'], co)


@dataclass
class TrajectoryConfig:
    """Resolved trajectory-node configuration."""

    joints: tuple
    mode: str
    control_rate: float
    trajectory: dict
    position_limits: list
    velocity_limits: list

    @property
    def period(self) -> float:
        return 1.0 / self.control_rate


def trajectory_config(values: Mapping[str, Any], node: str = 'trajectory') -> TrajectoryConfig:
    """Validate the trajectory node's ROS values (the trajectory against the limits too)."""
    from manip_control.trajectories import trajectory_from_config
    from manip_control.trajectories import TrajectoryError
    from manip_control.trajectories import validate_limits
    values = with_defaults(trajectory_specs(), values)
    _common_checks(node, values)
    lower = values['limits.position_lower']
    upper = values['limits.position_upper']
    vel = values['limits.velocity']
    for name, arr in (('limits.position_lower', lower), ('limits.position_upper', upper),
                      ('limits.velocity', vel)):
        try:
            arr = _check_joint_array(name, arr)
        except ParameterError as exc:
            raise ros_parameter_error(node, exc) from None
        for j, v in enumerate(arr):
            if math.isnan(v) or (name == 'limits.velocity' and not v > 0.0):
                raise ParameterError(f'parameter {name}[{j}] (node {node}): must be '
                                     f'{"> 0" if name == "limits.velocity" else "a number"} '
                                     f'(got {v})')
    for j in range(N_JOINTS):
        if not lower[j] < upper[j]:
            raise ParameterError(f'parameter limits.position_lower[{j}] (node {node}): must be '
                                 f'< limits.position_upper[{j}] (got {lower[j]} >= {upper[j]})')
    try:
        cfg = parse_flow_mapping(values['trajectory'], 'trajectory')
        traj = trajectory_from_config(cfg, N_JOINTS)
        validate_limits(traj, [[lower[j], upper[j]] for j in range(N_JOINTS)], vel,
                        joint_names=list(values['joints']))
    except (ParameterError, TrajectoryError) as exc:
        raise ros_parameter_error(node, exc) from None
    return TrajectoryConfig(tuple(values['joints']), values['mode'],
                            float(values['control_rate']), cfg,
                            [[float(lower[j]), float(upper[j])] for j in range(N_JOINTS)],
                            [float(v) for v in vel])


# --------------------------------------------------------------------------------------------
# scenario <-> ROS parameters of the three nodes

NODE_NAMES = ('plant', 'controller', 'trajectory')


def ros_params_from_scenario(scenario: Scenario, mode: str = 'lockstep') -> dict[str, dict]:
    """
    ROS parameter values of the plant, controller and trajectory nodes for a scenario.

    Returns ``{'plant': {name: value}, 'controller': {...}, 'trajectory': {...}}``.
    The plant's ``duration`` is the scenario's.
    """
    if mode not in MODES:
        raise ParameterError(f'mode: must be one of {", ".join(MODES)} (got {mode!r})')
    data = scenario.to_dict()
    top = data.get('scenario', data)
    common = {'joints': [str(j) for j in top['joints']], 'mode': mode,
              'control_rate': float(top['control_rate'])}
    plant = dict(common)
    plant['duration'] = float(top['duration'])
    plant.update(core_to_values(plant_specs(), data['plant']))
    controller = dict(common)
    controller.update(core_to_values(controller_specs(), data['controller']))
    trajectory = dict(common)
    trajectory['trajectory'] = flow_yaml(data['trajectory'])
    return {'plant': plant, 'controller': controller, 'trajectory': trajectory}


def scenario_from_ros(values: Mapping[str, Mapping[str, Any]], name: str = 'ros',
                      late_window_start: float | None = None) -> Scenario:
    """
    A core Scenario from the ROS values of the plant, controller and trajectory nodes.

    Missing nodes or parameters take the node defaults. ``duration`` is the plant's (the
    scenario default if the plant runs unlimited).
    """
    full = {}
    for node in NODE_NAMES:
        specs = SPECS[node]()
        vals = {s.name: s.default for s in specs}
        vals.update(values.get(node, {}) or {})
        full[node] = vals
    pl, co, tr = full['plant'], full['controller'], full['trajectory']
    top = {'name': name, 'duration': pl['duration'] if pl['duration'] > 0 else
           Scenario().duration, 'control_rate': pl['control_rate'], 'joints': list(pl['joints'])}
    if late_window_start is not None:
        top['late_window_start'] = late_window_start
    data = {
        'scenario': top,
        'plant': values_to_core(plant_specs(), pl),
        'controller': values_to_core(controller_specs(), co),
        'trajectory': parse_flow_mapping(tr['trajectory'], 'trajectory'),
    }
    return scenario_from_dict(data)


def params_yaml(node_values: Mapping[str, Mapping[str, Any]], header: str = '') -> str:
    """``node_name: ros__parameters: {...}`` YAML text (flow lists, one parameter a line)."""
    lines = [f'# {h}' if h else '#' for h in header.splitlines()] if header else []
    for node, values in node_values.items():
        lines.append(f'{node}:')
        lines.append('  ros__parameters:')
        for key, value in values.items():
            lines.append(f'    {key}: {_yaml_scalar(value)}')
    return '\n'.join(lines) + '\n'


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, str):
        return yaml.safe_dump(value, default_style="'", width=10 ** 9).strip().removesuffix(
            '\n...').strip()
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(_yaml_scalar(v) for v in value) + ']'
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, float):
        if math.isinf(value):
            return '.inf' if value > 0 else '-.inf'
        if math.isnan(value):
            return '.nan'
        text = repr(value)
        mantissa, e, exponent = text.partition('e')
        if e and '.' not in mantissa:   # YAML 1.1 reads 1e-05 as a string; 1.0e-05 is a float
            text = f'{mantissa}.0e{exponent}'
        return text
    return str(value)


def load_params_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """
    Per-node ROS values of a ``node: ros__parameters:`` file (nested keys flattened).

    A ``/**`` section applies to every node (node sections win). Keys are node names without
    a leading slash.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ParameterError(f'params file {path}: not valid YAML ({exc})') from None
    except OSError as exc:
        raise ParameterError(f'params file {path}: cannot read ({exc.strerror})') from None
    if not is_params_document(data):
        raise ParameterError(f'params file {path}: expected node_name: ros__parameters: '
                             'sections')
    out: dict[str, dict] = {}
    wildcard: dict = {}
    for node, section in data.items():
        params = section.get('ros__parameters', {}) if isinstance(section, dict) else None
        if not isinstance(params, dict):
            raise ParameterError(f'params file {path}: {node}.ros__parameters must be a '
                                 'mapping')
        flat = _flatten(params)
        key = str(node).lstrip('/')
        if key in ('**', '*'):
            wildcard.update(flat)
        else:
            out.setdefault(key, {}).update(flat)
    for node in set(out) | set(NODE_NAMES):
        merged = dict(wildcard)
        merged.update(out.get(node, {}))
        out[node] = merged
    return out


def is_params_document(data: Any) -> bool:
    """True for a ``node: ros__parameters:`` mapping (a ROS params file)."""
    return isinstance(data, dict) and bool(data) and any(
        isinstance(v, dict) and 'ros__parameters' in v for v in data.values())


def _flatten(tree: Mapping, prefix: str = '') -> dict:
    out = {}
    for k, v in tree.items():
        name = f'{prefix}{k}'
        if isinstance(v, dict):
            out.update(_flatten(v, name + '.'))
        else:
            out[name] = v
    return out


# --------------------------------------------------------------------------------------------
# rclpy side: declaration with descriptors

def descriptor(spec: ParamSpec):
    """The rcl_interfaces ParameterDescriptor of a spec."""
    from rcl_interfaces.msg import FloatingPointRange
    from rcl_interfaces.msg import IntegerRange
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.parameter import Parameter

    types = {'bool': Parameter.Type.BOOL, 'int': Parameter.Type.INTEGER,
             'float': Parameter.Type.DOUBLE, 'str': Parameter.Type.STRING,
             'float[]': Parameter.Type.DOUBLE_ARRAY, 'str[]': Parameter.Type.STRING_ARRAY}
    d = ParameterDescriptor(name=spec.name, type=types[spec.kind].value,
                            description=spec.description,
                            additional_constraints=spec.constraints,
                            read_only=spec.read_only)
    if spec.range is not None and spec.kind == 'float':
        d.floating_point_range = [FloatingPointRange(
            from_value=float(spec.range[0]), to_value=float(spec.range[1]), step=0.0)]
    elif spec.range is not None and spec.kind == 'int':
        d.integer_range = [IntegerRange(from_value=int(spec.range[0]),
                                        to_value=int(spec.range[1]), step=1)]
    return d


def coerce_parameter(spec: ParamSpec, param):
    """Integer (array) given for a double (array) parameter -> the double equivalent."""
    from rclpy.parameter import Parameter
    if spec.kind == 'float' and param.type_ == Parameter.Type.INTEGER:
        return Parameter(param.name, Parameter.Type.DOUBLE, float(param.value))
    if spec.kind == 'float[]' and param.type_ == Parameter.Type.INTEGER_ARRAY:
        return Parameter(param.name, Parameter.Type.DOUBLE_ARRAY,
                         [float(v) for v in param.value])
    return param


_TYPE_WORDS = {'bool': 'true or false', 'int': 'an integer', 'float': 'a number (double)',
               'str': 'a string', 'float[]': 'a list of numbers (double array)',
               'str[]': 'a list of strings'}


def declare_parameters(node, specs: Sequence[ParamSpec], *,
                       reject_unknown: bool = True) -> dict[str, Any]:
    """
    Declare ``specs`` on ``node`` and return their values.

    Integer overrides of double parameters are accepted (converted). Raises ParameterError
    naming the parameter for a wrong type, a value outside the descriptor range, or (with
    ``reject_unknown``) an override that names no declared parameter.
    """
    from rclpy.exceptions import InvalidParameterTypeException
    from rclpy.exceptions import InvalidParameterValueException
    overrides = getattr(node, '_parameter_overrides', None)
    name = node.get_name()
    by_name = {s.name: s for s in specs}
    if isinstance(overrides, dict):
        for key, param in list(overrides.items()):
            if key in by_name:
                overrides[key] = coerce_parameter(by_name[key], param)
    if reject_unknown and isinstance(overrides, dict):
        unknown = sorted(k for k in overrides if k not in by_name
                         and k not in _BUILTIN_PARAMETERS and not k.startswith('qos_overrides.'))
        if unknown:
            close = _closest(unknown[0], by_name)
            hint = f' (did you mean {close}?)' if close else ''
            raise ParameterError(f'parameter {unknown[0]} (node {name}): unknown parameter'
                                 f'{hint}')
    values = {}
    for spec in specs:
        try:
            param = node.declare_parameter(spec.name, spec.default, descriptor(spec))
        except InvalidParameterTypeException:
            given = overrides.get(spec.name) if isinstance(overrides, dict) else None
            got = f' (got {given.value!r})' if given is not None else ''
            raise ParameterError(f'parameter {spec.name} (node {name}): must be '
                                 f'{_TYPE_WORDS[spec.kind]}{got}') from None
        except InvalidParameterValueException as exc:
            given = overrides.get(spec.name) if isinstance(overrides, dict) else None
            got = f' (got {given.value!r})' if given is not None else ''
            lo, hi = spec.range if spec.range else (None, None)
            reason = (f'must be in [{lo}, {hi}]' if spec.range else str(exc))
            raise ParameterError(f'parameter {spec.name} (node {name}): {reason}{got}') \
                from None
        value = param.value
        if spec.kind in ('float[]', 'str[]') and value is not None:
            value = list(value)
        values[spec.name] = value
    return values


def _closest(name: str, known: Mapping) -> str | None:
    import difflib
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return match[0] if match else None


def parameter_overrides(specs: Sequence[ParamSpec], values: Mapping[str, Any]) -> list:
    """rclpy Parameter objects for ``values`` typed as the specs (unknown names kept as is)."""
    from rclpy.parameter import Parameter
    by_name = {s.name: s for s in specs}
    out = []
    for key, value in values.items():
        spec = by_name.get(key)
        if spec is not None:
            value = _typed(spec, value)
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, list) and not value and spec is not None:
            ptype = (Parameter.Type.STRING_ARRAY if spec.kind == 'str[]'
                     else Parameter.Type.DOUBLE_ARRAY)
            out.append(Parameter(key, ptype, []))   # an empty list has no inferable type
            continue
        out.append(Parameter(key, value=value))
    return out
