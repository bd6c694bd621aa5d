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

import dataclasses
from dataclasses import dataclass
from dataclasses import fields
import difflib
import hashlib
import math
from pathlib import Path
import re
import sys
import tempfile
import textwrap
from typing import Any, Mapping, Sequence

from manip_control.arm_model import ArmModelError
from manip_control.arm_model import read_urdf_file
from manip_control.arm_model import UrdfArm
from manip_control.parameters import _int
from manip_control.parameters import _positive
from manip_control.parameters import _sensors_from_dict
from manip_control.parameters import _validate_friction
from manip_control.parameters import _validate_motor
from manip_control.parameters import _vector
from manip_control.parameters import ArmParameters
from manip_control.parameters import build_joint_list
from manip_control.parameters import check_duration
from manip_control.parameters import check_plausible
from manip_control.parameters import controller_from_dict
from manip_control.parameters import ControllerParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import MotorParameters
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
from manip_control.parameters import payload_from_dict
from manip_control.parameters import PayloadParameters
from manip_control.parameters import plant_from_dict
from manip_control.parameters import PlantParameters
from manip_control.parameters import PLAUSIBLE_RANGES
from manip_control.parameters import read_yaml
from manip_control.parameters import Scenario
from manip_control.parameters import scenario_from_dict
from manip_control.parameters import SensorParameters
from manip_control.parameters import yaml_load
from manip_control.safety import hard_limit_defaults
from manip_control.safety import HARD_LIMIT_DOC
from manip_control.safety import HARD_LIMIT_PREFIX
from manip_control.safety import RUNTIME_SAFETY
from manip_control.safety import safety_from_dict
from manip_control.safety import SafetyParameters
from manip_control.supervision import COMMAND_SAFETY_FIELDS
from manip_control.supervision import command_safety_from_dict
from manip_control.supervision import CommandSafetyParameters
from manip_control.trajectories import trajectory_from_config
from manip_control.trajectories import TrajectoryError
from manip_control.trajectories import validate_limits
import yaml

#: joints of the arm without a robot_description: the planar 2R (the closed-form default)
PLANAR_2R_JOINTS = 2
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
    '/controller/adaptation': 'diagnostic_msgs/msg/DiagnosticArray',
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
    range: tuple | None = None  # noqa: A003 - the descriptor field name
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
    'v_stick': ('stick band of the Karnopp friction model per joint [rad/s]', 'each > 0'),
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
    'eta_back': ('gearbox efficiency per joint when the load drives the motor', 'each in (0, 1]'),
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
    'rotor_coupling': ('with rotor_inertia: also the kinetic coupling of rotor 2, which rides '
                       'on link 1', '', None),
    'friction_model': ('joint friction model', "'smooth' (tanh-smoothed Coulomb) or 'karnopp' "
                       '(stiction with breakaway)', None),
    'start_in_equilibrium': ("motor plants: start the currents and the drives' PI integrators "
                             'at the values that hold the initial pose against gravity', '',
                             None),
}
_PAYLOAD_DOC = {
    'mass': ('payload picked up by the tool at payload.at_time [kg] (the 2R: at the tip of '
             'link 2; an arm from its URDF: at the origin of the last modelled link); the '
             'plant only, never the controller; 0 = none', '>= 0', (0.0, INF)),
    'at_time': ('simulated time of the payload pick-up [s] (the first control tick at or after '
                'it)', '>= 0', (0.0, INF)),
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
    'joint_stiffness': ('position stiffness per joint in torque units [N m/rad], added to '
                        'either law (-K e) for joints whose own viscous damping dominates '
                        'their inertia (default for an arm from robot_description: b omega on '
                        'those joints, docs/theory.md)', 'each >= 0', None, True),
    'joint_stiffness_limit': ('largest torque the joint stiffness adds per joint [N m] '
                              '(|K e| clamped to it; default for an arm from '
                              'robot_description: b times a quarter of the velocity limit '
                              'on the stiff joints, so that it drives them at that speed at '
                              'most, docs/theory.md; otherwise the torque limit)',
                              'each > 0', None, True),
    'torque_limit': ('command saturation per joint [N m]; changeable at runtime',
                     'each > 0', None, False),
    'friction_compensation': ('add the nominal friction to the command', '', None, True),
}

#: Controller parameters that ``ros2 param set`` may change while running.
RUNTIME_GAINS = ('kp', 'kd', 'ki', 'torque_limit')

#: ``adaptation.*`` of the controller (docs/adaptation.md): (description, constraints); the
#: ranges are the core's plausible ones. Fixed at start.
_ADAPTATION_DOC = {
    'enabled': ("adaptive computed torque: the nominal model's base parameters estimated "
                'online (Slotine-Li law; needs law computed_torque and ki 0)', ''),
    'gamma': ('adaptation gain [1/(N m rad)], scaled per parameter by its nominal magnitude',
              '>= 0'),
    'bound_fraction': ('each estimate stays within theta0 +- bound_fraction x its scale',
                       '> 0'),
    'sigma': ('sigma-modification toward the nominal values [N m rad/s]', '>= 0'),
    'dead_zone': ('no adaptation while max |s| is below this [rad/s] (0: off)', '>= 0'),
    'max_rate': ('largest change of an estimate per second, in units of its scale [1/s]',
                 '> 0'),
    'forgetting_time': ('forgetting time constant of the excitation analysis [s]', '> 0'),
    'excitation_threshold': ('a direction is excited above this fraction of the largest '
                             'eigenvalue of the information matrix', 'in (0, 1)'),
    'friction': ('adapt the viscous and Coulomb friction too', ''),
    'payload_mass': ('largest payload [kg] to learn, at most payload_radius from the tool: '
                     'the box grows by what it changes (0: off)', '>= 0'),
    'payload_radius': ("that payload's largest distance from the tool (a URDF arm's last "
                       "link's frame origin, the 2R's tip along link 2) [m]", '> 0'),
}
#: Runtime commands of the adaptive law (``ros2 param set``; node-only, not core values).
ADAPTATION_COMMANDS = ('adaptation.freeze', 'adaptation.reset', 'adaptation.save_to')


def adaptation_specs(ad) -> list[ParamSpec]:
    """``adaptation.*`` specs of the controller: the law's settings and its runtime commands."""
    specs = []
    for name, (desc, cons) in _ADAPTATION_DOC.items():
        cons, rng = _bounded('adaptation', name, cons, None)
        specs.append(ParamSpec(f'adaptation.{name}', getattr(ad, name), desc, cons, rng, True,
                               f'adaptation.{name}'))
    specs += [
        ParamSpec('adaptation.freeze', False, 'hold the estimates where they are (the law '
                  'keeps commanding with them); changeable at runtime', '', None, False),
        ParamSpec('adaptation.reset', False, 'set true: the estimates return to the nominal '
                  'model at the next tick (the parameter then reads false again); changeable '
                  'at runtime', '', None, False),
        ParamSpec('adaptation.save_to', '', 'set to a file path (.urdf for a URDF arm, .yaml '
                  'for the 2R): the current estimates are written there as manip-identify '
                  'writes an identified model; refused with the reason if it cannot be written',
                  'a writable path', None, False)]
    return specs


def _bounded(section: str, name: str, cons: str, rng: tuple | None) -> tuple[str, tuple | None]:
    """Constraint text and descriptor range with the core's plausible range added."""
    bounds = PLAUSIBLE_RANGES.get(section, {}).get(name)
    if bounds is None:
        return cons, rng
    lo, hi, unit = bounds
    text = f'plausible range [{lo:g}, {hi:g}]' + (f' {unit}' if unit else '')
    cons = f'{cons}; {text}' if cons else text
    if rng is not None:
        rng = (max(rng[0], lo), min(rng[1], hi))
    return cons, rng


def _doc(docs: Mapping, name: str, cls) -> tuple:
    """Entry of a description table; a core field not described yet gets a generic one."""
    if name in docs:
        return docs[name]
    return (f'{name} per joint (see manip_control.parameters.{cls.__name__})', '')


def _joint_specs(prefix: str, core_prefix: str, cls, docs: Mapping,
                 per_joint: Sequence, section: str = '') -> list[ParamSpec]:
    """Array specs for the fields of a per-joint core dataclass (friction, motors)."""
    out = []
    for f in fields(cls):
        desc, cons = _doc(docs, f.name, cls)
        cons, _ = _bounded(section, f.name, cons, None)
        values = [getattr(d, f.name) for d in per_joint]
        default = values if all(isinstance(v, str) for v in values) else [
            float(v) for v in values]
        out.append(ParamSpec(f'{prefix}{f.name}', default, desc, cons, None, True,
                             f'{core_prefix}[].{f.name}'))
    return out


def _arm_specs(prefix: str, core_prefix: str, arm: ArmParameters, what: str) -> list[ParamSpec]:
    specs = []
    for f in fields(ArmParameters):
        desc, cons, rng = _ARM_DOC[f.name]
        cons, rng = _bounded('arm', f.name, cons, rng)
        value = getattr(arm, f.name)
        value = value if isinstance(value, str) else float(value)
        specs.append(ParamSpec(f'{prefix}{f.name}', value, f'{what}: {desc}', cons, rng, True,
                               f'{core_prefix}.{f.name}'))
    return specs


#: Lockstep: the longest the controller and the trajectory hold their first output for a
#: recorder that has not matched them (then they go on, warned) [s]; below the plant's
#: startup_timeout default, which it waits for the command of tick 0.
RECORDER_WAIT = 5.0


def _node_common(joints_doc: str) -> list[ParamSpec]:
    return [
        ParamSpec('joints', ['joint1', 'joint2'], joints_doc,
                  '2 distinct non-empty names'),
        ParamSpec('mode', 'lockstep',
                  'time mode: lockstep (simulation; the plant owns /clock and steps only when '
                  'the command of the tick has arrived) or realtime (wall clock, free-running)',
                  'lockstep or realtime'),
        ParamSpec('control_rate', 1000.0, 'control rate [Hz] (period of the plant zero-order '
                  'hold, of the controller and of the reference samples)',
                  *_bounded('scenario', 'control_rate', '', (0.0, INF))),
        ParamSpec('wait_for_recorder', '',
                  'lockstep: readiness topic of a recorder in another process (e.g. '
                  "'recorder/ready'); the node publishes its first message (plant: tick 0; "
                  'controller: the first command; trajectory: the first reference) only when '
                  'the recorder reports every recorded topic matched and each of its own '
                  'publishers of a recorded topic has matched the recorder (plant: up to '
                  f'startup_timeout; others: up to {RECORDER_WAIT:g} s, then warned); '
                  "'' = do not wait", 'a topic name or empty'),
    ]


def _plant_physical_specs(pl: PlantParameters) -> list[ParamSpec]:
    specs = _arm_specs('arm.', 'arm', pl.arm, 'true arm')
    specs += _joint_specs('friction.', 'friction', FrictionParameters, _FRICTION_DOC,
                          pl.friction, 'friction')
    specs += _joint_specs('motors.', 'motors', MotorParameters, _MOTOR_DOC, pl.motors,
                          'motors')
    for name in ('actuator', 'torque_limit', 'rotor_inertia', 'rotor_coupling', 'friction_model',
                 'start_in_equilibrium', 'initial_position', 'initial_velocity', 'substeps'):
        if not hasattr(pl, name):       # a plant option this version of the core lacks
            continue
        desc, cons, rng = _PLANT_DOC[name]
        cons, rng = _bounded('plant', name, cons, rng)
        value = getattr(pl, name)
        if isinstance(value, tuple):
            value = [float(v) for v in value]
        specs.append(ParamSpec(name, value, desc, cons, rng, True, name))
    return specs + _sensor_specs(pl.sensors) + _payload_specs(pl.payload)


def _arm_plant_physical_specs(pd: Mapping[str, Any]) -> list[ParamSpec]:
    """Physical parameters of a plant from a URDF: friction, drives, limits, start, sensors."""
    n = len(pd['joints'])
    specs = _joint_specs('friction.', 'friction', FrictionParameters, _FRICTION_DOC,
                         pd['friction'], 'friction')
    motors = pd['motors']
    actuator = 'motor' if motors is not None else 'ideal'
    if motors is None:      # no effort limit to size drives: the default motors of the 2R
        motors = (MotorParameters(),) * n
    specs += _joint_specs('motors.', 'motors', MotorParameters, _MOTOR_DOC, motors, 'motors')
    values = {'actuator': actuator, 'torque_limit': pd['torque_limit'],
              'initial_position': pd['initial_position'], 'initial_velocity': [0.0] * n,
              'start_in_equilibrium': True, 'substeps': 8}
    for name, value in values.items():
        desc, cons, rng = _PLANT_DOC[name]
        cons, rng = _bounded('plant', name, cons, rng)
        specs.append(ParamSpec(name, value, desc, cons, rng, True, name))
    specs += _sensor_specs(SensorParameters()) + _payload_specs(PayloadParameters())
    return specs + [ParamSpec('payload.offset', [0.0, 0.0, 0.0],
                              "the payload's position in the last modelled link's frame [m]",
                              '3 finite values')]


def _payload_specs(pa: PayloadParameters) -> list[ParamSpec]:
    specs = []
    for f in fields(PayloadParameters):
        desc, cons, rng = _PAYLOAD_DOC[f.name]
        cons, rng = _bounded('payload', f.name, cons, rng)
        specs.append(ParamSpec(f'payload.{f.name}', float(getattr(pa, f.name)), desc, cons,
                               rng, True, f'payload.{f.name}'))
    return specs


def _sensor_specs(se: SensorParameters) -> list[ParamSpec]:
    specs = []
    for f in fields(SensorParameters):
        desc, cons, rng = _SENSOR_DOC[f.name]
        cons, rng = _bounded('sensors', f.name, cons, rng)
        value = getattr(se, f.name)
        if isinstance(value, float) or f.name.endswith(('_std', '_hz')):
            value = float(value)
        specs.append(ParamSpec(f'sensors.{f.name}', value, f'sensors: {desc}', cons, rng,
                               True, f'sensors.{f.name}'))
    return specs


def plant_specs(plant_defaults: Mapping[str, Any] | None = None) -> list[ParamSpec]:
    """
    Parameters of the plant node (defaults: the core's PlantParameters defaults).

    ``plant_defaults``: for an arm from a ``robot_description``,
    :func:`manip_control.arm_scenario.plant_defaults` (joints, friction, sized drives,
    limits, start); the 2R geometry (``arm.*``, rotor terms, friction model) is then not
    declared.
    """
    specs = _node_common('joint names, order of every per-joint parameter, of /joint_states '
                         'and of the Float64MultiArray commands')
    specs.append(ParamSpec('robot_description', '', ROBOT_DESCRIPTION_DOC.replace(
        'nominal rigid-body model', 'simulated rigid body').replace(
        'torque_limit, safety envelope, gains', 'friction from <dynamics>, drives sized from '
        'the effort limits, start at mid-range').replace('of nominal.arm.*', 'of arm.*'),
        'URDF text or empty'))
    if plant_defaults is not None:
        specs[0] = ParamSpec('joints', list(plant_defaults['joints']), specs[0].description,
                             'distinct movable joints of robot_description (default: all, in '
                             'chain order)')
    specs += [
        ParamSpec('duration', 0.0, 'simulated time to run [s]; 0 = until stopped',
                  '0, or at least one control period; at most 86400 s',
                  (0.0, PLAUSIBLE_RANGES['scenario']['duration'][1])),
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
    if plant_defaults is not None:
        return specs + _arm_plant_physical_specs(plant_defaults)
    return specs + _plant_physical_specs(PlantParameters())


ROBOT_DESCRIPTION_DOC = (
    'URDF of the arm (the text, as robot_state_publisher and ros2_control take it): the '
    'nominal rigid-body model comes from it (Pinocchio), joints default to its movable joints '
    'in chain order and the per-joint defaults (torque_limit, safety envelope, gains) to its '
    "limits; '' = the closed-form planar 2R of nominal.arm.*; read-only")


def arm_from_description(node, planar_2r: str = ''):
    """
    Return ``(arm, urdf)`` from a node's ``robot_description``, ``(None, '')`` without.

    Read from the node's start values (before its parameters are declared: the arm sizes their
    defaults). The arm has the URDF's movable joints in chain order, or those ``joints``
    names; ``urdf`` is the text.

    With ``planar_2r`` (the prefix of the planar 2R's geometry parameters, e.g.
    ``'nominal.arm.'``), a ``robot_description`` that is set but empty (or blank) means the
    2R only when a ``<planar_2r>*`` start value is given too (the 2R params files, which the
    launch files pass with ``robot_description: ''``); alone it is refused: an empty
    description is a failed ``xacro`` or a placeholder, not a request for the 2R. Not set at
    all: the 2R.

    Raises
    ------
    ParameterError
        Naming ``robot_description`` and what is wrong with it (or with ``joints``).

    """
    overrides = getattr(node, '_parameter_overrides', None) or {}
    given = overrides.get('robot_description')
    text = given.value if given is not None else ''
    name = node.get_name()
    if isinstance(text, str) and not text.strip():
        if (given is not None and planar_2r
                and not any(k.startswith(planar_2r) for k in overrides)):
            raise ParameterError(
                f'parameter robot_description (node {name}): empty; give the URDF text of the '
                f'arm, or for the closed-form planar 2R leave robot_description unset (or give '
                f'its {planar_2r}* parameters)')
        return None, ''
    if not isinstance(text, str):
        raise ParameterError(f'parameter robot_description (node {name}): must be the URDF '
                             f'text (got {type(text).__name__})')
    joints = overrides.get('joints')
    joints = list(joints.value) if joints is not None and joints.value else None
    try:
        return UrdfArm.from_string(text, joints), text
    except ArmModelError as exc:
        raise ParameterError(f'parameter robot_description (node {name}): {exc}') from None


def arm_control_defaults(node, arm, urdf: str) -> dict:
    """
    Return :func:`manip_control.arm_scenario.control_defaults` for a node's URDF arm.

    With the node's start values of ``nominal.drives`` (``ideal`` when not given), ``law``
    (read-only; the gains' units and sizes depend on it), and, for the ``joint_stiffness``
    default, ``control_rate`` and ``nominal.friction.b`` (the damping it leans on).
    """
    from manip_control.arm_scenario import control_defaults
    overrides = getattr(node, '_parameter_overrides', None) or {}
    given = overrides.get('nominal.drives')
    drives = given.value if given is not None else 'ideal'
    given = overrides.get('law')
    law = given.value if given is not None else 'computed_torque'
    if law not in ('computed_torque', 'pd_gravity'):
        law = 'computed_torque'         # refused with its name by the law's validation
    # a bad value is refused with its name by the parameters' own validation
    given = overrides.get('control_rate')
    rate = given.value if given is not None else None
    period = (1.0 / float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool)
              and math.isfinite(rate) and rate > 0.0 else 1e-3)
    given = overrides.get('nominal.friction.b')
    damping = list(given.value) if given is not None and isinstance(
        given.value, (list, tuple)) and len(given.value) == arm.n else None
    if damping is not None and not all(isinstance(v, (int, float)) and math.isfinite(v)
                                       for v in damping):
        damping = None
    try:
        return {**control_defaults(arm, urdf, drives, law=law, period=period,
                                   damping=damping), 'drives': drives}
    except ArmModelError as exc:
        raise ParameterError(f'parameter {exc} (node {node.get_name()})') from None


def nominal_urdf_arm(urdf: str, joints, rotor_inertia, node: str):
    """Return the controller's nominal URDF arm with the nominal rotors as armature."""
    try:
        return UrdfArm.from_string(urdf, list(joints), armature=[float(v) for v in
                                                                 rotor_inertia])
    except ArmModelError as exc:
        raise ParameterError(f'parameter robot_description (node {node}): {exc}') from None


def arm_plant_defaults(arm, urdf: str) -> dict:
    """:func:`manip_control.arm_scenario.plant_defaults` (imported only for a URDF arm)."""
    from manip_control.arm_scenario import plant_defaults
    return plant_defaults(arm, urdf)


def held_urdf_plant(urdf: str, joints, cfg: ArmPlantConfig, period: float, node: str):
    """
    Return the plant node's simulated arm from its URDF and validated configuration.

    :func:`manip_control.arm_scenario.urdf_plant` held at the initial state
    (:class:`manip_control.arm_plant.HeldArmPlant`).
    """
    from manip_control.arm_plant import HeldArmPlant
    from manip_control.arm_scenario import urdf_plant
    try:
        plant = urdf_plant(urdf, joints, cfg.friction, cfg.motors, cfg.torque_limit,
                           cfg.substeps)
        return HeldArmPlant(plant, period, cfg.initial_position, cfg.start_in_equilibrium,
                            cfg.initial_velocity, payload=cfg.payload,
                            payload_offset=cfg.payload_offset)
    except ArmModelError as exc:
        raise ParameterError(f'parameter robot_description (node {node}): {exc}') from None


def nominal_drives_spec(default: str = 'ideal') -> ParamSpec:
    """Return the spec of ``nominal.drives`` (declared for an arm from its URDF only)."""
    return ParamSpec(
        'nominal.drives', default,
        'with robot_description only: which drives the defaults of nominal.rotor_inertia, '
        'nominal.gear_ratio, nominal.eta and nominal.eta_back describe: ideal (none: no '
        'rotors, ideal gears) or sized (the drives sized from the effort limits, as the '
        'simulated plant of the same URDF has); a given nominal.* value wins', 'ideal or sized')


def drives_following_plant(plant: Mapping[str, Any], source: str) -> str:
    """
    Return the ``nominal.drives`` that describe a simulated URDF plant's actuators.

    ``plant`` is the plant node's parameter values (``robot_description``, optionally
    ``joints`` and ``actuator``): ``actuator: ideal`` gives ``'ideal'`` (no drives to invert),
    ``motor`` gives ``'sized'`` (the drives the plant sizes from the effort limits), no
    ``actuator`` the plant's own default (sized drives when every joint has an effort limit,
    else ideal actuators; :func:`manip_control.arm_scenario.plant_defaults`).

    Raises
    ------
    ParameterError
        The description cannot be loaded (one line, naming ``source`` and what is wrong).

    """
    from manip_control.arm_scenario import plant_defaults
    actuator = plant.get('actuator')
    joints = plant.get('joints') or None
    try:
        arm = UrdfArm.from_string(plant['robot_description'],
                                  list(joints) if joints else None, source=source)
    except ArmModelError as exc:
        raise ParameterError(str(exc)) from None
    if actuator == 'ideal':
        return 'ideal'
    if actuator == 'motor':
        return 'sized'
    return 'ideal' if plant_defaults(arm, plant['robot_description'])['motors'] is None \
        else 'sized'


def drives_params_file(params_file: str, urdf: str) -> str:
    """
    Return a params file that gives sim.launch.py's controller the plant's ``nominal.drives``.

    With ``urdf`` (the launch's ``urdf:=``) and no ``nominal.drives`` for the controller in
    ``params_file``: ``/**/controller: nominal.drives`` of :func:`drives_following_plant` on
    the plant's section. Otherwise, or when the description cannot be loaded (the nodes then
    refuse it in one line), a file that sets only ``mode: lockstep``, which the launch gives
    the controller anyway. Written in the temporary directory, one file per content.
    """
    values = {'mode': 'lockstep'}
    if urdf:
        try:
            sections = load_params_file(params_file, on_warning=lambda _text: None)
            if 'nominal.drives' not in sections.get('controller', {}):
                plant = dict(sections.get('plant', {}), robot_description=read_urdf_file(urdf))
                values['nominal.drives'] = drives_following_plant(plant, urdf)
        except (ArmModelError, ParameterError, OSError):
            pass
    text = yaml.safe_dump({'/**/controller': {'ros__parameters': values}})
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f'manip_control_drives_{digest}.yaml'
    if not path.is_file():
        path.write_text(text, encoding='utf-8')
    return str(path)


def controller_specs(arm_defaults: Mapping[str, Any] | None = None) -> list[ParamSpec]:
    """
    Parameters of the controller node (defaults: the core's ControllerParameters).

    ``arm_defaults``: for an arm from a ``robot_description``, the per-joint defaults of
    :func:`manip_control.arm_scenario.control_defaults` (``joints`` included); the nominal
    2R geometry (``nominal.arm.*``) is then not declared.
    """
    co = ControllerParameters()
    given: dict[str, Any] = {}
    if arm_defaults is not None:
        n = len(arm_defaults['joints'])
        # no rotors, ideal gears, no friction: what a URDF says of the drives
        ad = arm_defaults
        co = ControllerParameters(
            kp=(1.0,) * n, kd=(1.0,) * n, ki=(0.0,) * n, integral_limit=(0.5,) * n,
            joint_stiffness=(0.0,) * n, joint_stiffness_limit=(1.0,) * n,
            torque_limit=(1.0,) * n,
            nominal=NominalModel(friction=tuple(ad['nominal_friction']),
                                 rotor_inertia=tuple(ad['rotor_inertia']),
                                 gear_ratio=tuple(ad['gear_ratio']), eta=tuple(ad['eta']),
                                 eta_back=tuple(ad['eta_back'])))
        given = {k: [float(v) for v in arm_defaults[k]]
                 for k in ('kp', 'kd', 'joint_stiffness', 'joint_stiffness_limit',
                           'torque_limit')}
    specs = _node_common('joint names: order of the commands (Float64MultiArray data, '
                         'JointState names) and of every per-joint parameter')
    if arm_defaults is not None:
        specs[0] = ParamSpec('joints', list(arm_defaults['joints']), specs[0].description,
                             'distinct movable joints of robot_description (default: all, in '
                             'chain order)')
    specs.append(ParamSpec('robot_description', '', ROBOT_DESCRIPTION_DOC.replace(
        'nominal.arm.*;', "nominal.arm.* (set to '', only with nominal.arm.* given: '' alone "
        'is refused);'), 'URDF text or empty'))
    specs.append(ParamSpec(
        'trigger', 'state',
        'realtime only: state (one tick per received joint state, with the latest reference: '
        'the lowest state-to-command latency) or timer (a free-running wall timer at '
        'control_rate using the latest joint state and reference; latency up to one period)',
        'state or timer'))
    specs.append(ParamSpec(
        'realtime.priority', 50,
        'realtime only: SCHED_FIFO priority of the control thread (which takes the joint '
        'states and references and ticks; services and parameters are served by another '
        'thread); 0: normal scheduling. Where the OS refuses it: one warning, normal '
        'scheduling', '0 to 99', (0, 99)))
    specs.append(ParamSpec(
        'realtime.lock_memory', True,
        'realtime only: lock the process memory at configure (mlockall), so that no page '
        'fault delays a tick. Where the OS refuses it: one warning', ''))
    for name in ('law', 'kp', 'kd', 'ki', 'integral_limit', 'joint_stiffness',
                 'joint_stiffness_limit', 'torque_limit', 'friction_compensation'):
        desc, cons, rng, ro = _CONTROLLER_DOC[name]
        cons, rng = _bounded('controller', name, cons, rng)
        value = given.get(name, getattr(co, name))
        if isinstance(value, tuple):
            value = [float(v) for v in value]
        specs.append(ParamSpec(name, value, desc, cons, rng, ro, name))
    specs += adaptation_specs(co.adaptation)
    if arm_defaults is None:
        specs += _arm_specs('nominal.arm.', 'nominal.arm', co.nominal.arm, 'nominal model')
    else:
        specs.append(nominal_drives_spec(arm_defaults.get('drives', 'ideal')))
    specs += _joint_specs('nominal.friction.', 'nominal.friction', FrictionParameters,
                          {k: (f'nominal model: {v[0]}', v[1])
                           for k, v in _FRICTION_DOC.items()}, co.nominal.friction,
                          'friction')
    specs.append(ParamSpec('nominal.rotor_inertia', [float(v) for v in co.nominal.rotor_inertia],
                           'nominal model: reflected rotor inertia Jm N^2 per joint [kg m^2]',
                           _bounded('nominal', 'rotor_inertia', 'each >= 0', None)[0], None,
                           True, 'nominal.rotor_inertia'))
    if hasattr(co.nominal, 'rotor_coupling'):
        specs.append(ParamSpec('nominal.rotor_coupling', bool(co.nominal.rotor_coupling),
                               'nominal model: include the coupling of rotor 2 riding on link 1 '
                               '(uses nominal.gear_ratio)', '', None, True,
                               'nominal.rotor_coupling'))
    if hasattr(co.nominal, 'gear_ratio'):
        specs.append(ParamSpec('nominal.gear_ratio', [float(v) for v in co.nominal.gear_ratio],
                               'nominal model: gear ratio per joint (for nominal.rotor_coupling)',
                               _bounded('nominal', 'gear_ratio', 'each >= 1', None)[0], None,
                               True, 'nominal.gear_ratio'))
    for name, what in (('eta', 'forward (motor drives the load)'),
                       ('eta_back', 'backward (load drives the motor)')):
        if hasattr(co.nominal, name):
            value = [float(v) for v in getattr(co.nominal, name)]
            specs.append(ParamSpec(f'nominal.{name}', value,
                                   f'nominal model: gear efficiency {what} per joint, '
                                   'inverted by the command (1 = ideal gear)',
                                   _bounded('nominal', name, 'each in (0, 1]', None)[0], None,
                                   True, f'nominal.{name}'))
    return specs


def hard_limit_specs(defaults: Mapping[str, Any]) -> list[ParamSpec]:
    """
    Read-only ``hard_limits.*`` specs of the controller (:data:`safety.HARD_LIMIT_DOC`).

    ``defaults`` maps each name (without the prefix) to its default, computed from the start
    configuration by :func:`manip_control.safety.hard_limit_defaults`.
    """
    return [ParamSpec(HARD_LIMIT_PREFIX + name, defaults[name],
                      f'{desc}; read-only: runtime changes cannot cross it', cons, None, True)
            for name, (desc, cons) in HARD_LIMIT_DOC.items()]


DEFAULT_TRAJECTORY = Scenario().trajectory


def trajectory_specs(arm_defaults: Mapping[str, Any] | None = None) -> list[ParamSpec]:
    """
    Parameters of the trajectory node.

    ``arm_defaults``: as :func:`controller_specs`; the joints, the limits and the initial
    reference (a sinusoid inside the limits) then come from the arm.
    """
    specs = _node_common('joint names of /reference and of the goals (goals are matched by '
                         'name)')
    specs.append(ParamSpec('robot_description', '', ROBOT_DESCRIPTION_DOC.replace(
        'nominal rigid-body model comes from it (Pinocchio), ', '').replace(
        'torque_limit, safety envelope, gains', 'limits.*, trajectory: a sinusoid inside them'
    ).replace('closed-form planar 2R of nominal.arm.*', 'planar 2R'), 'URDF text or empty'))
    lower, upper, vel = [-math.pi, -math.pi], [math.pi, math.pi], [5.0, 5.0]
    reference = DEFAULT_TRAJECTORY
    if arm_defaults is not None:
        specs[0] = ParamSpec('joints', list(arm_defaults['joints']), specs[0].description,
                             'distinct movable joints of robot_description (default: all, in '
                             'chain order)')
        lower, upper = arm_defaults['position_lower'], arm_defaults['position_upper']
        vel, reference = arm_defaults['velocity_limit'], arm_defaults['reference']
    specs += [
        ParamSpec('trajectory', flow_yaml(reference),
                  'initial reference: a YAML/JSON flow mapping as the trajectory section of a '
                  'scenario file, e.g. {type: sinusoid, amplitude: [0.5, 0.3], '
                  'omega: [0.5, 0.5]} (types sinusoid, sum_of_sinusoids, quintic, '
                  'waypoints, hold; omega in rad/s)', 'a mapping with a type key'),
        ParamSpec('limits.position_lower', [float(v) for v in lower],
                  'lower position limit per joint [rad]; goals and the initial trajectory '
                  'beyond it are rejected', 'each < limits.position_upper'),
        ParamSpec('limits.position_upper', [float(v) for v in upper],
                  'upper position limit per joint [rad]', 'each > limits.position_lower'),
        ParamSpec('limits.velocity', [float(v) for v in vel],
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
        ParamSpec('qos_depth', 10000, 'subscription history depth (reliable, keep last)',
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
        data = yaml_load(text)      # YAML 1.2 floats, as in the files
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else 'syntax error'
        raise ParameterError(f'{name}: not a valid YAML mapping ({first})') from None
    if not isinstance(data, dict):
        raise ParameterError(f'{name}: must be a YAML mapping with a type key '
                             f'(got {text!r})')
    return data


# --------------------------------------------------------------------------------------------
# conversion: ROS values <-> core dicts

def _check_joint_array(name: str, value: Any, n: int = PLANAR_2R_JOINTS) -> list:
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
    joints = values.get('joints')
    n = len(joints) if isinstance(joints, (list, tuple)) and joints else PLANAR_2R_JOINTS
    for spec in specs:
        if spec.core is None or spec.name not in values:
            continue
        value = values[spec.name]
        if '[]' in spec.core:
            head, _, tail = spec.core.partition('[].')
            arr = _check_joint_array(spec.name, value, n)
            lst = _get_or_make_list(tree, head, n)
            for j in range(n):
                lst[j][tail] = arr[j]
        else:
            if isinstance(value, tuple):
                value = list(value)
            _set_path(tree, spec.core, value)
    return tree


def _get_or_make_list(tree: dict, path: str, n: int = PLANAR_2R_JOINTS) -> list:
    parts = path.split('.')
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if parts[-1] not in node:
        node[parts[-1]] = [{} for _ in range(n)]
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
    """Return an int as a float (bool and other types unchanged: the declaration refuses them)."""
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


def _common_checks(node: str, values: Mapping[str, Any], n: int = PLANAR_2R_JOINTS) -> None:
    joints = values.get('joints')
    if joints is not None:
        if (len(joints) != n or not all(isinstance(j, str) and j for j in joints)
                or len(set(joints)) != len(joints)):
            raise ParameterError(f'parameter joints (node {node}): must be {n} '
                                 f'distinct non-empty names (got {list(joints)!r})')
    mode = values.get('mode')
    if mode is not None and mode not in MODES:
        raise ParameterError(f'parameter mode (node {node}): must be one of '
                             f'{", ".join(MODES)} (got {mode!r})')
    ready = values.get('wait_for_recorder')
    if ready:
        from rclpy.exceptions import InvalidTopicNameException
        from rclpy.validate_topic_name import validate_topic_name
        try:
            validate_topic_name(ready)
        except (InvalidTopicNameException, TypeError):
            raise ParameterError(f'parameter wait_for_recorder (node {node}): must be a topic '
                                 f'name or empty (got {ready!r})') from None
    rate = values.get('control_rate')
    if rate is not None:
        try:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (
                    math.isfinite(rate) and rate > 0.0):
                raise ParameterError(f'control_rate: must be > 0 (got {rate!r})')
            check_plausible('control_rate', rate, 'scenario', 'control_rate')
        except ParameterError as exc:
            raise ros_parameter_error(node, exc) from None


@dataclass
class ArmPlantConfig:
    """The physical configuration of a plant from a URDF (per-joint tuples of n)."""

    friction: tuple
    motors: tuple | None
    """None: ideal actuators."""
    torque_limit: tuple
    initial_position: tuple
    initial_velocity: tuple
    start_in_equilibrium: bool
    substeps: int
    sensors: SensorParameters
    payload: PayloadParameters = PayloadParameters()
    payload_offset: tuple = (0.0, 0.0, 0.0)
    """Where the payload sits in the last modelled link's frame [m]."""


def _arm_plant_config(tree: Mapping[str, Any], n: int, path: str) -> ArmPlantConfig:
    """Validate the core tree of a URDF plant (the core's checks, per-joint lists of n)."""
    actuator = tree.get('actuator', 'motor')
    if actuator not in ('motor', 'ideal'):
        raise ParameterError(f"{path}.actuator: must be 'motor' or 'ideal' (got {actuator!r})")
    friction = build_joint_list(FrictionParameters, _validate_friction, 'friction',
                                tree['friction'], f'{path}.friction', n)
    motors = None
    if actuator == 'motor':
        motors = build_joint_list(MotorParameters, _validate_motor, 'motors', tree['motors'],
                                  f'{path}.motors', n)
    limit = _vector(f'{path}.torque_limit', tree['torque_limit'], n, check=_positive)
    q0 = _vector(f'{path}.initial_position', tree['initial_position'], n)
    qd0 = _vector(f'{path}.initial_velocity', tree['initial_velocity'], n)
    if not isinstance(tree['start_in_equilibrium'], bool):
        raise ParameterError(f'{path}.start_in_equilibrium: must be true or false')
    substeps = _int(f'{path}.substeps', tree['substeps'], minimum=2)
    if substeps % 2:
        raise ParameterError(f'{path}.substeps: must be even (the integrator needs the '
                             f'mid-period state; got {substeps})')
    sensors = _sensors_from_dict(tree.get('sensors', {}), f'{path}.sensors')
    payload = payload_from_dict(tree.get('payload', {}), f'{path}.payload')
    return ArmPlantConfig(friction, motors, limit, q0, qd0, tree['start_in_equilibrium'],
                          substeps, sensors, payload)


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
    plant: PlantParameters | ArmPlantConfig

    @property
    def period(self) -> float:
        return 1.0 / self.control_rate

    @property
    def n_ticks(self) -> int:
        """Ticks to run (0 = unlimited)."""
        return int(round(self.duration * self.control_rate))


def plant_config(values: Mapping[str, Any], node: str = 'plant',
                 plant_defaults: Mapping[str, Any] | None = None) -> PlantConfig:
    """
    Validate the plant node's ROS values (core validation, ROS names in messages).

    Missing values take the spec defaults. ``plant_defaults``: as :func:`plant_specs`, for an
    arm from a ``robot_description`` (the result's ``plant`` is then an
    :class:`ArmPlantConfig`).
    """
    specs = plant_specs(plant_defaults)
    values = with_defaults(specs, values)
    n = PLANAR_2R_JOINTS if plant_defaults is None else len(plant_defaults['joints'])
    _common_checks(node, values, n)
    if values['command_source'] not in COMMAND_SOURCES:
        raise ParameterError(f'parameter command_source (node {node}): must be one of '
                             f'{", ".join(COMMAND_SOURCES)} (got {values["command_source"]!r})')
    for name, strict in (('duration', False), ('lockstep_timeout', True),
                         ('startup_timeout', False), ('command_timeout', True)):
        v = values[name]
        if not math.isfinite(v) or v < 0.0 or (strict and v == 0.0):
            raise ParameterError(f'parameter {name} (node {node}): must be '
                                 f'{"> 0" if strict else ">= 0"} (got {v})')
    if values['duration'] != 0.0:   # 0 = until stopped; else at least one tick
        try:
            check_duration('duration', values['duration'], float(values['control_rate']))
        except ParameterError as exc:
            raise ros_parameter_error(node, exc) from None
    try:
        tree = values_to_core(specs, values)
        plant = (plant_from_dict(tree, 'P') if plant_defaults is None
                 else _arm_plant_config(tree, n, 'P'))
    except ParameterError as exc:
        raise ros_parameter_error(node, exc, 'P') from None
    if plant_defaults is not None:
        offset = values['payload.offset']
        if (len(offset) != 3 or not all(isinstance(v, (int, float)) and math.isfinite(v)
                                        for v in offset)):
            raise ParameterError(f'parameter payload.offset (node {node}): expected 3 finite '
                                 f'values [m] (got {list(offset)})')
        plant.payload_offset = tuple(float(v) for v in offset)
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


def controller_config(values: Mapping[str, Any], node: str = 'controller',
                      arm_defaults: Mapping[str, Any] | None = None) -> ControllerConfig:
    """
    Validate the controller node's ROS values (missing ones take the defaults).

    ``arm_defaults``: as :func:`controller_specs`, for an arm from a ``robot_description``.
    """
    specs = controller_specs(arm_defaults)
    values = with_defaults(specs, values)
    n = PLANAR_2R_JOINTS if arm_defaults is None else len(arm_defaults['joints'])
    _common_checks(node, values, n)
    if values['trigger'] not in TRIGGERS:
        raise ParameterError(f'parameter trigger (node {node}): must be one of '
                             f'{", ".join(TRIGGERS)} (got {values["trigger"]!r})')
    try:
        tree = values_to_core(specs, values)
        if arm_defaults is not None:    # the rigid body is the URDF's: no 2R geometry used
            tree.setdefault('nominal', {})['arm'] = dataclasses.asdict(ArmParameters())
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


def trajectory_config(values: Mapping[str, Any], node: str = 'trajectory',
                      arm_defaults: Mapping[str, Any] | None = None) -> TrajectoryConfig:
    """
    Validate the trajectory node's ROS values (the trajectory against the limits too).

    ``arm_defaults``: as :func:`trajectory_specs`, for an arm from a ``robot_description``.
    """
    values = with_defaults(trajectory_specs(arm_defaults), values)
    n = PLANAR_2R_JOINTS if arm_defaults is None else len(arm_defaults['joints'])
    _common_checks(node, values, n)
    lower = values['limits.position_lower']
    upper = values['limits.position_upper']
    vel = values['limits.velocity']
    for name, arr in (('limits.position_lower', lower), ('limits.position_upper', upper),
                      ('limits.velocity', vel)):
        try:
            arr = _check_joint_array(name, arr, n)
        except ParameterError as exc:
            raise ros_parameter_error(node, exc) from None
        for j, v in enumerate(arr):
            if math.isnan(v) or (name == 'limits.velocity' and not v > 0.0):
                raise ParameterError(f'parameter {name}[{j}] (node {node}): must be '
                                     f'{"> 0" if name == "limits.velocity" else "a number"} '
                                     f'(got {v})')
        try:
            check_plausible(name, arr, 'trajectory', 'velocity_limit' if name ==
                            'limits.velocity' else 'position_limit')
        except ParameterError as exc:
            raise ros_parameter_error(node, exc) from None
    for j in range(n):
        if not lower[j] < upper[j]:
            raise ParameterError(f'parameter limits.position_lower[{j}] (node {node}): must be '
                                 f'< limits.position_upper[{j}] (got {lower[j]} >= {upper[j]})')
    try:
        cfg = parse_flow_mapping(values['trajectory'], 'trajectory')
        traj = trajectory_from_config(cfg, n)
        validate_limits(traj, [[lower[j], upper[j]] for j in range(n)], vel,
                        joint_names=list(values['joints']))
    except (ParameterError, TrajectoryError) as exc:
        raise ros_parameter_error(node, exc) from None
    return TrajectoryConfig(tuple(values['joints']), values['mode'],
                            float(values['control_rate']), cfg,
                            [[float(lower[j]), float(upper[j])] for j in range(n)],
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
    Build a core Scenario from the ROS values of the plant, controller and trajectory nodes.

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


#: Prefix of the controller's safety parameters (``safety.state_timeout``).
SAFETY_PREFIX = 'safety.'
#: Fields of :class:`~manip_control.safety.SafetyParameters` declared as ``safety.<field>``.
SAFETY_FIELDS = tuple(SafetyParameters.__dataclass_fields__)
_SAFETY_DOC = {
    'safe_mode': ('safe-mode command: hold (gravity-compensated hold with damping at the last '
                  'measured position; pure gravity hold while states are stale) or zero '
                  '(zero torque)', 'hold or zero'),
    'state_timeout': ('joint-state watchdog [s]: older states mean safe mode', '> 0'),
    'reference_timeout': ('reference watchdog [s]: an older reference is brought to rest '
                          'from its last position and velocity at '
                          'reference_acceleration_limit, then held', '> 0'),
    'position_lower': ('lower position limit per joint [rad]; below it means safe mode',
                       'finite, upper - lower > 4 position_margin'),
    'position_upper': ('upper position limit per joint [rad]; above it means safe mode',
                       'finite, upper - lower > 4 position_margin'),
    'velocity_limit': ('speed limit per joint [rad/s]; |qd| above it means safe mode',
                       'each > 0'),
    'position_margin': ('hysteresis [rad]: after a position fault, resume once every joint is '
                        'this far inside the limits (the hold target is 2x inside)', '>= 0'),
    'velocity_margin': ('hysteresis [rad/s]: after a velocity fault, resume once every |qd| '
                        '<= velocity_limit - velocity_margin', '>= 0, < velocity_limit'),
    'hold_kp': ('hold stiffness per joint through the nominal mass matrix [1/s^2] (tau = '
                'g(q) + M(q) (hold_kp e - hold_kd qd), scaled into torque_limit)', 'each > 0'),
    'hold_kd': ('hold damping per joint through the nominal mass matrix [1/s]', 'each > 0'),
    'latch_limits': ('position / velocity faults stay latched until the next activation',
                     ''),
    'stamp_age': ('real time: a joint state is fresh only when its age from the header stamp '
                  "(this host's wall clock with safety.clock_offset) is within state_timeout; "
                  'false: the age counts from the arrival (a driver whose clock cannot be '
                  "related to this host's; stamps must still advance)", ''),
    'after_hold': ('what follows a hold longer than safety.hold_timeout: zero (zero torque '
                   'through the torque-rate limit, latched until re-activation) or gravity '
                   '(the gravity torque of the last good pose, open loop, for at most '
                   'safety.gravity_hold_timeout, then zero; fresh states meanwhile resume '
                   'through the resume path); read-only', 'zero or gravity'),
    'gravity_hold_timeout': ('longest gravity hold after the hold timeout [s] (safety.'
                             'after_hold: gravity); at most hard_limits.gravity_hold_timeout',
                             '> 0, <= 3600'),
}
#: Declared ranges of ``safety.*`` fields (descriptor ranges; the core checks the open bounds).
_SAFETY_RANGES = {'gravity_hold_timeout': (0.0, 3600.0)}
#: Command-supervision parameters (read-only: fixed at start): description, rule, range.
_COMMAND_SAFETY_DOC = {
    'clock_offset': ("driver stamp clock minus this host's wall clock [s] (0: synchronized "
                     'clocks or the same host); a state is fresh when its stamp advances and '
                     'now - (stamp - clock_offset) <= state_timeout', 'finite, |x| <= 1e6',
                     (-1.0e6, 1.0e6)),
    'max_clock_error': ('tolerance of the clock offset [s]: states stamped further in the '
                        'future are refused', '> 0', (0.0, 3600.0)),
    'resume_states': ('consecutive fresh, advancing, in-envelope joint states needed to leave '
                      'safe mode after a fault', '>= 1', (1, 100000)),
    'hold_timeout': ('longest safe hold [s]; then zero torque, latched until re-activation',
                     '> 0', (0.0, 3600.0)),
    'stop_time': ('deactivate ramp [s]: current command -> hold (first half) -> zero torque '
                  '(second half)', '> 0', (0.0, 60.0)),
    'torque_rate_limit': ('real time: largest torque change per joint [N m/s] on every '
                          'command', 'each > 0', None),
    'reference_acceleration_limit': (
        'largest reference acceleration used per joint [rad/s^2]; larger ones are clamped '
        'and counted', 'each > 0', None),
    'reference_step_limit': ('a requested reference position further than this from the '
                             'reference in use (or from the measured position at a start / '
                             'resume) is re-planned [rad]', '> 0', (0.0, 10.0)),
    'replan_velocity': ('peak speed of a re-plan blend [rad/s]', '> 0', (0.0, 100.0)),
    'replan_acceleration': ('peak acceleration of a re-plan blend [rad/s^2]', '> 0',
                            (0.0, 1000.0)),
    'state_timeout_periods': ('real time: the state timeout in periods of the measured '
                              'state rate: max(state_timeout, min(n P, state_timeout_max))',
                              '>= 1', (1.0, 1000.0)),
    'state_timeout_max': ('real time: ceiling of the rate-derived state timeout [s]', '> 0',
                          (0.0, 10.0)),
    'clock_step_states': ('real time: consecutive consistent joint states that confirm a '
                          "step of the driver's clock (the offset is then re-estimated, "
                          'reported once); 0: never re-estimate', '>= 0', (0, 100000)),
    'max_clock_step': ('real time: largest driver clock step re-estimated [s]; larger ones '
                       'stay refused', '> 0', (0.0, 10.0)),
}


def safety_specs(arm_defaults: Mapping[str, Any] | None = None) -> list:
    """
    Return the ROS parameter specs of the safety layer.

    :class:`manip_control.nodes.ros_params.ParamSpec` of ``safety.<field>`` of
    :class:`SafetyParameters` (changeable at runtime, validated), of
    :class:`~manip_control.supervision.CommandSafetyParameters` (read-only),
    ``diagnostics_rate`` and ``autostart`` (read-only). ``arm_defaults``: the per-joint
    defaults of an arm from a ``robot_description``
    (:func:`manip_control.arm_scenario.control_defaults`).
    """
    defaults = SafetyParameters()
    given = {} if arm_defaults is None else arm_defaults
    specs = []
    for name in SAFETY_FIELDS:
        value = given.get(name, getattr(defaults, name))
        if isinstance(value, tuple):
            value = [float(v) for v in value]
        desc, cons = _SAFETY_DOC.get(name, (name.replace('_', ' '), ''))
        runtime = name in RUNTIME_SAFETY
        specs.append(ParamSpec(SAFETY_PREFIX + name, value,
                               desc + ('; changeable at runtime' if runtime else ''), cons,
                               _SAFETY_RANGES.get(name), not runtime))
    cmd_defaults = CommandSafetyParameters()
    for name in COMMAND_SAFETY_FIELDS:
        value = given.get(name, getattr(cmd_defaults, name))
        if isinstance(value, tuple):
            value = [float(v) for v in value]
        desc, cons, rng = _COMMAND_SAFETY_DOC[name]
        specs.append(ParamSpec(SAFETY_PREFIX + name, value, desc + '; read-only', cons, rng, True))
    specs.append(ParamSpec('diagnostics_rate', 10.0,
                           'rate of the periodic /controller/diagnostics [Hz] (transitions '
                           'are published at once)', '> 0', (0.0, 1.0e4)))
    specs.append(ParamSpec('state_publisher', '',
                           'fully qualified node that must publish the joint states (e.g. '
                           '/joint_state_broadcaster): states of any other publisher are '
                           'refused and counted; empty: any single publisher (more than one '
                           'matched: no command, ramp to zero torque); read-only',
                           "'' or /node_name (/ns/node)"))
    specs.append(ParamSpec('autostart', True,
                           'configure and activate at start (lifecycle); false: wait for '
                           '`ros2 lifecycle set` (hardware bring-up by hand)', ''))
    return specs


def plain_value(value: Any) -> Any:
    """Return a ROS parameter value with arrays and lists as tuples (as the core takes them)."""
    if isinstance(value, (list, tuple)) or type(value).__name__ in ('array', 'ndarray'):
        return tuple(value)
    return value


def safety_from_values(values: Mapping[str, Any], node: str = 'controller'
                       ) -> SafetyParameters:
    """
    Return the validated :class:`SafetyParameters` from the node's ROS values.

    Raises
    ------
    ParameterError
        ``parameter safety.velocity_limit[1] (node controller): must be > 0 (got -1.0)``.

    """
    rate = values.get('diagnostics_rate', 10.0)
    if not (isinstance(rate, (int, float)) and not isinstance(rate, bool)
            and math.isfinite(rate) and rate > 0.0):
        raise ParameterError(f'parameter diagnostics_rate (node {node}): must be > 0 '
                             f'(got {rate!r})')
    return _safety_section(values, SAFETY_FIELDS, safety_from_dict, node)


def command_safety_from_values(values: Mapping[str, Any], node: str = 'controller'
                               ) -> CommandSafetyParameters:
    """
    Return the validated command-supervision parameters from the node's ROS values.

    Raises
    ------
    ParameterError
        ``parameter safety.hold_timeout (node controller): must be > 0 (got -1.0)``.

    """
    return _safety_section(values, COMMAND_SAFETY_FIELDS, command_safety_from_dict, node)


def _safety_section(values: Mapping[str, Any], fields, from_dict, node: str):
    """Return ``from_dict`` of the set ``safety.*`` values in ``fields``, errors named for ROS."""
    data = {name: plain_value(values[SAFETY_PREFIX + name]) for name in fields
            if values.get(SAFETY_PREFIX + name) is not None}
    joints = values.get('joints')
    n = len(joints) if isinstance(joints, (list, tuple)) and joints else None
    try:
        return from_dict(data, 'safety', n)
    except ParameterError as exc:
        raise ros_parameter_error(node, exc) from None


#: Nodes of this package that a params file may configure (section names in our files).
PACKAGE_NODES = ('plant', 'controller', 'trajectory', 'recorder')


def controller_all_specs() -> list[ParamSpec]:
    """
    Return every parameter the controller declares: its own, the safety layer's, the limits.

    The defaults of the read-only ``hard_limits.*`` are the ones of the default configuration
    (the node computes them from its start values); ``nominal.drives`` is declared with a
    ``robot_description`` only.
    """
    co = ControllerParameters()
    defaults = hard_limit_defaults(co.kp, co.kd, co.ki, co.torque_limit,
                                   safety_from_values({}, 'controller'))
    return (controller_specs() + [nominal_drives_spec()] + safety_specs()
            + hard_limit_specs(defaults))


def node_parameter_names(node: str) -> set[str]:
    """Return every parameter name the package's node ``node`` declares (2R or URDF arm)."""
    if node == 'controller':
        return {s.name for s in controller_all_specs()}
    return {s.name for s in SPECS[node]()} if node in SPECS else set()


def _is_ignorable(name: str) -> bool:
    """Parameters every node may receive: rclpy's own, QoS overrides."""
    return name in _BUILTIN_PARAMETERS or name.startswith('qos_overrides.')


def section_matches(key: str, fqn: str) -> bool:
    """
    Tell whether the params-file section ``key`` (a node name pattern) applies to ``fqn``.

    As rcl matches them: a key without a leading slash is absolute (``controller`` is
    ``/controller``), ``/*`` stands for one name token and ``/**`` for any number of them, so
    ``/**/controller`` applies to a node named controller under any namespace and ``/**`` to
    every node.
    """
    pattern = key if key.startswith('/') else '/' + key
    regex = re.escape(pattern).replace(r'/\*\*', r'(?:/\w+)*').replace(r'/\*', r'(?:/\w+)')
    return re.fullmatch(regex, fqn) is not None


def is_shared_section(key: str) -> bool:
    """Tell whether a section names no node (``/**``, ``/*``, ``/arm1/*``, ...)."""
    return key.rstrip('/').rsplit('/', 1)[-1] in ('*', '**')


def _value_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a ROS parameter value (as rcl's parser decides), or None."""
    if isinstance(value, dict):
        return 'must be a value, not a mapping'
    if not isinstance(value, (list, tuple)):
        return None if isinstance(value, (bool, int, float, str)) else (
            f'must be a bool, number, string or list (got {value!r})')
    if not value:
        return None
    kinds = {('bool' if isinstance(v, bool) else 'integer' if isinstance(v, int)
              else 'double' if isinstance(v, float) else 'string' if isinstance(v, str)
              else type(v).__name__) for v in value}
    if len(kinds) > 1 or not kinds <= {'bool', 'integer', 'double', 'string'}:
        hint = ' (write integers as 1.0 in a list of doubles)' if kinds == {
            'integer', 'double'} else ''
        return f'a list must hold values of one type, got {" and ".join(sorted(kinds))} ' \
               f'in {list(value)!r}{hint}'
    return None


def read_params_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """
    Read the sections of a params file: ``{section key: {flat name: value}}``.

    Read with :func:`manip_control.parameters.read_yaml` (YAML 1.2 floats such as ``1.0e9``;
    an empty or comment-only file is refused). Nested keys are flattened with dots. Every
    value is checked as rcl would: a list of mixed types is refused naming the parameter.
    """
    path = Path(path)
    data = read_yaml(path, 'params file')
    if not is_params_document(data):
        raise ParameterError(f'params file {path}: expected node_name: ros__parameters: '
                             'sections')
    out: dict[str, dict] = {}
    for node, section in data.items():
        params = section.get('ros__parameters', {}) if isinstance(section, dict) else None
        if not isinstance(params, dict):
            raise ParameterError(f'params file {path}: {node}.ros__parameters must be a '
                                 'mapping')
        flat = _flatten(params)
        for name, value in flat.items():
            problem = _value_problem(value)
            if problem:
                raise ParameterError(f'parameter {name} (section {node} of params file '
                                     f'{path}): {problem}')
        out.setdefault(str(node), {}).update(flat)
    return out


def _applying(sections: Mapping[str, Mapping], fqn: str) -> dict:
    """Return the sections that apply to node ``fqn``, in file order."""
    return {k: v for k, v in sections.items() if section_matches(k, fqn)}


def shared_only_keys(sections: Mapping[str, Mapping], fqn: str) -> set[str]:
    """Keys that reach node ``fqn`` only through shared sections (``/**``, ``/arm1/*``)."""
    shared, own = set(), set()
    for key, flat in _applying(sections, fqn).items():
        (shared if is_shared_section(key) else own).update(flat)
    return shared - own


def shared_key_report(node: str, own: set, shared, where: str) -> str | None:
    """
    Decide about the keys of a shared section (``/**``) that ``node`` does not declare.

    ``own`` is the set of the node's parameter names. A key of another node of the package
    is ignored (the returned warning names it and its node); a key close to one of the
    node's own names (difflib) is a misspelling and raises ParameterError naming the closest
    name; any other key is ignored too (it may belong to another package's node).

    Returns
    -------
    str or None
        The one warning for all ignored keys, None when there are none.

    """
    others = {n: node_parameter_names(n) for n in PACKAGE_NODES}
    ignored = []
    for key in sorted(shared):
        if key in own or _is_ignorable(key):
            continue
        owners = [n for n, names in others.items() if key in names]
        if not owners:
            close = _closest(key, own)
            if close:
                raise ParameterError(f'parameter {key} (node {node}, {where}): unknown '
                                     f'parameter (did you mean {close}?)')
        ignored.append(f'{key} ({"/".join(owners)})' if owners else key)
    if not ignored:
        return None
    return (f'node {node}: ignoring {len(ignored)} key(s) of {where} that are not its '
            f'parameters: {", ".join(ignored)}')


def load_params_file(path: str | Path, on_warning=None) -> dict[str, dict[str, Any]]:
    """
    Per-node ROS values of a params file for the package's nodes in the root namespace.

    Sections apply as rcl applies them (:func:`section_matches`: ``plant``, ``/plant``,
    ``/**/plant`` and ``/**`` all apply to the plant), later sections overriding earlier ones.
    Keys of a shared section (``/**``) that a node does not declare are handled by
    :func:`shared_key_report` (ignored with one warning per node through ``on_warning``,
    default: printed to stderr, or refused when misspelt). Sections that apply to none of the
    package's nodes are returned under their key without the leading slash (the caller
    decides whether that is an error).
    """
    sections = read_params_file(path)
    warn = on_warning or (lambda text: print(f'warning: {text}', file=sys.stderr))
    out: dict[str, dict] = {}
    for node in PACKAGE_NODES:
        merged: dict = {}
        for flat in _applying(sections, '/' + node).values():
            merged.update(flat)
        shared = shared_only_keys(sections, '/' + node)
        if shared:
            message = shared_key_report(node, node_parameter_names(node), shared,
                                        f'a shared section of {path}')
            for key in shared:
                if key not in node_parameter_names(node) and not _is_ignorable(key):
                    merged.pop(key, None)
            if message:
                warn(message)
        out[node] = merged
    for key in sections:
        if not any(section_matches(key, '/' + n) for n in PACKAGE_NODES):
            out[key.lstrip('/')] = dict(sections[key])
    return out


def is_params_document(data: Any) -> bool:
    """Tell whether ``data`` is a ``node: ros__parameters:`` mapping (a ROS params file)."""
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
# --help of the node executables (no rclpy.init: nothing starts)

def wants_help(argv: Sequence[str] | None = None) -> bool:
    """
    Tell whether ``-h`` or ``--help`` is among the arguments outside ``--ros-args`` blocks.

    ``argv`` is a full command line (program name first, as for ``rclpy.init``); default
    ``sys.argv``.
    """
    argv = list(sys.argv if argv is None else argv)[1:]
    inside = False
    for arg in argv:
        if arg == '--ros-args':
            inside = True
        elif arg == '--':
            inside = False
        elif not inside and arg in ('-h', '--help'):
            return True
    return False


def _format_default(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return _yaml_scalar(value)


def node_help(executable: str, doc: str, specs: Sequence[ParamSpec], width: int = 99) -> str:
    """
    Return the ``--help`` text of a node executable, from its parameter declarations.

    Lists every parameter with its ROS type, default, whether it may change at runtime, its
    description and its allowed values (the same texts as ``ros2 param describe``).
    """
    summary = ' '.join((doc or '').strip().split('\n\n')[0].split())
    summary = re.sub(r':\w+:`~?([^`]+)`', r'\1', summary).replace('``', '')
    types = {'bool': 'bool', 'int': 'integer', 'float': 'double', 'str': 'string',
             'float[]': 'double array', 'str[]': 'string array'}
    lines = [
        f'usage: {executable} [-h] [--ros-args [-p NAME:=VALUE]... [--params-file FILE]... '
        '[-r FROM:=TO]...]',
        '',
        textwrap.fill(summary, width),
        '',
        textwrap.fill(
            'Run as a ROS 2 node: ros2 run manip_control ' + executable + ' --ros-args ... '
            '(or the executable itself). Parameters are set with -p NAME:=VALUE or a params '
            'file (node: ros__parameters: sections; /**/' + executable + ' applies under any '
            'namespace); an invalid value stops the node with one error line naming it (exit '
            'code 2).', width),
        '',
        'options:',
        '  -h, --help  show this help and exit (nothing is started)',
        '',
        f'parameters ({len(specs)}):',
    ]
    for spec in specs:
        access = 'read-only' if spec.read_only else 'changeable at runtime'
        lines.append(f'  {spec.name} ({types[spec.kind]}, default '
                     f'{_format_default(spec.default)}, {access})')
        text = spec.description.rstrip('.') + '.'
        if spec.constraints:
            text += f' Allowed: {spec.constraints}.'
        lines.append(textwrap.fill(text, width, initial_indent='      ',
                                   subsequent_indent='      '))
    return '\n'.join(lines) + '\n'


def print_node_help(executable: str, doc: str, specs: Sequence[ParamSpec]) -> int:
    """Print :func:`node_help` to stdout and return exit code 0."""
    sys.stdout.write(node_help(executable, doc, specs))
    sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------------------------
# rclpy side: declaration with descriptors

def descriptor(spec: ParamSpec):
    """Return the rcl_interfaces ParameterDescriptor of a spec."""
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
        unknown = sorted(k for k in overrides if k not in by_name and not _is_ignorable(k))
        shared = set()
        if unknown:    # keys of shared params-file sections (/**) may belong to other nodes
            shared = shared_only_keys(_command_line_sections(), node.get_fully_qualified_name())
            shared -= set(_command_line_overrides())
        own = [k for k in unknown if k not in shared]
        if own:
            close = _closest(own[0], by_name)
            hint = f' (did you mean {close}?)' if close else ''
            raise ParameterError(f'parameter {own[0]} (node {name}): unknown parameter'
                                 f'{hint}')
        message = shared_key_report(name, set(by_name), [k for k in unknown if k in shared],
                                    'a shared section (/**) of the params file')
        if message:
            node.get_logger().warning(message)
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


def ros_arguments(argv: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """
    ``(flag, value)`` pairs of the ``--ros-args`` blocks of ``argv`` (default ``sys.argv``).

    Flags are normalised to their long form (``--params-file``, ``--param``, ``--remap``);
    a block ends at ``--`` or at the next ``--ros-args``.
    """
    argv = list(sys.argv if argv is None else argv)
    long = {'-p': '--param', '-r': '--remap', '-e': '--enclave'}
    out, inside, k = [], False, 0
    while k < len(argv):
        arg = argv[k]
        if arg == '--ros-args':
            inside = True
        elif arg == '--':
            inside = False
        elif inside and arg in ('--params-file', '-p', '--param', '-r', '--remap'):
            if k + 1 < len(argv):
                out.append((long.get(arg, arg), argv[k + 1]))
            k += 1
        k += 1
    return out


def params_files(argv: Sequence[str] | None = None) -> list[str]:
    """Return the ``--params-file`` paths of the ROS arguments, in order."""
    return [v for f, v in ros_arguments(argv) if f == '--params-file']


def check_params_files(argv: Sequence[str] | None = None) -> None:
    """
    Read every ``--params-file`` of ``argv`` as :func:`read_params_file` does.

    Called before ``rclpy.init`` so that a bad file (empty, invalid YAML, a list of mixed
    types) is refused in one line naming the parameter, instead of rcl's parser error.
    """
    for path in params_files(argv):
        read_params_file(path)


def _command_line_sections() -> dict:
    """Sections of every params file on this process's command line, merged by key."""
    sections: dict = {}
    for path in params_files():
        try:
            for key, flat in read_params_file(path).items():
                sections.setdefault(key, {}).update(flat)
        except ParameterError:      # refused before rclpy.init (check_params_files)
            continue
    return sections


def _command_line_overrides() -> list[str]:
    """Names given with ``-p name:=value`` on the command line (always the node's own)."""
    return [v.split(':=', 1)[0].rsplit(':', 1)[-1] for f, v in ros_arguments()
            if f == '--param' and ':=' in v]


def _closest(name: str, known: Mapping) -> str | None:
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return match[0] if match else None


def parameter_overrides(specs: Sequence[ParamSpec], values: Mapping[str, Any]) -> list:
    """Return rclpy Parameters for ``values`` typed as the specs (unknown names kept as is)."""
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
