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
URDF description of the planar 2R arm, generated from the same parameters as the model.

Frames (REP 103, z up in ``world``): the arm moves in the world x-z plane. ``base_link`` is
``world`` rotated by +90 deg about x (rpy ``pi/2 0 0``), so in ``base_link`` the model's
conventions hold exactly: x right, y up, gravity ``(0, -g0, 0)``, joint axes +z (q
counter-clockwise seen from the front). Chain::

    world --(fixed, rpy pi/2 0 0)--> base_link --joint1 (z)--> link1
          --joint2 (z, at x = l1)--> link2 --(fixed, at x = l2)--> tool0

Each link frame sits at its proximal joint with x along the link. ``<inertial>``: mass
``m``, centre of mass at ``(lc, 0, 0)``, inertia about the centre of mass with
``izz = I`` (the planar inertia of :class:`~manip_control.parameters.ArmParameters`),
``iyy = I`` and ``ixx = I / 100`` (a slender link; the out-of-plane moments do not enter the
planar dynamics and satisfy the triangle inequalities). Joints carry ``<limit>`` (position
range, the drive's peak torque and no-load speed) and ``<dynamics damping= friction=>``
(viscous ``b`` and Coulomb ``tau_c``). The reflected rotor inertia ``Jm N^2`` has no URDF
element; it is given in a comment and the gear ratio in a ``<transmission>``.

``manip-urdf`` writes the file; the shipped ``urdf/manip_2r.urdf`` is
``manip-urdf --config default --out urdf/manip_2r.urdf``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
import math
from pathlib import Path
import sys
from typing import Sequence
from xml.sax.saxutils import quoteattr

from manip_control.parameters import ArmParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import load_scenario
from manip_control.parameters import ParameterError
from manip_control.parameters import PlantParameters
from manip_control.parameters import Scenario

ROBOT_NAME = 'manip_2r'
#: Joint position limits [rad]: joint 1 one full turn, joint 2 stops 0.35 rad short of
#: folding link 2 onto link 1.
POSITION_LIMITS = ((-math.pi, math.pi), (-2.79, 2.79))


@dataclass(frozen=True)
class JointLimit:
    """URDF ``<limit>`` of one joint: position [rad], effort [N m], velocity [rad/s]."""

    lower: float
    upper: float
    effort: float
    velocity: float


def joint_limits(plant: PlantParameters) -> tuple[JointLimit, JointLimit]:
    """
    Limits of the two joints of ``plant``.

    Position: :data:`POSITION_LIMITS`. Motor actuator: effort = peak torque
    ``eta N k_t i_max``, velocity = no-load speed ``V_max / (k_e N)``. Ideal actuator: effort =
    ``torque_limit``, velocity = the motors' no-load speed all the same.
    """
    out = []
    for j, mo in enumerate(plant.motors):
        effort = mo.peak_torque if plant.actuator == 'motor' else plant.torque_limit[j]
        out.append(JointLimit(POSITION_LIMITS[j][0], POSITION_LIMITS[j][1], float(effort),
                              mo.V_max / (mo.k_e * mo.N)))
    return out[0], out[1]


def _f(x: float) -> str:
    """Shortest round-trip float text (exact values in the file)."""
    text = repr(float(x))
    return '0' if text in ('0.0', '-0.0') else (text[:-2] if text.endswith('.0') else text)


def _link(name: str, arm_len: float, mass: float, lc: float, inertia: float, radius: float,
          colour: str) -> str:
    ixx = inertia / 100.0
    return f"""  <link name="{name}">
    <inertial>
      <origin xyz="{_f(lc)} 0 0" rpy="0 0 0"/>
      <mass value="{_f(mass)}"/>
      <inertia ixx="{_f(ixx)}" ixy="0" ixz="0" iyy="{_f(inertia)}" iyz="0" izz="{_f(inertia)}"/>
    </inertial>
    <visual>
      <origin xyz="{_f(arm_len / 2)} 0 0" rpy="0 {_f(math.pi / 2)} 0"/>
      <geometry><cylinder radius="{_f(radius)}" length="{_f(arm_len)}"/></geometry>
      <material name="{colour}"/>
    </visual>
    <collision>
      <origin xyz="{_f(arm_len / 2)} 0 0" rpy="0 {_f(math.pi / 2)} 0"/>
      <geometry><cylinder radius="{_f(radius)}" length="{_f(arm_len)}"/></geometry>
    </collision>
  </link>
"""


def _joint(name: str, parent: str, child: str, x: float, lim: JointLimit,
           fr: FrictionParameters) -> str:
    return f"""  <joint name={quoteattr(name)} type="revolute">
    <parent link="{parent}"/>
    <child link="{child}"/>
    <origin xyz="{_f(x)} 0 0" rpy="0 0 0"/>
    <axis xyz="0 0 1"/>
    <limit lower="{_f(lim.lower)}" upper="{_f(lim.upper)}" effort="{_f(lim.effort)}" \
velocity="{_f(lim.velocity)}"/>
    <dynamics damping="{_f(fr.b)}" friction="{_f(fr.tau_c)}"/>
  </joint>
"""


def _transmission(joint: str, reduction: float) -> str:
    return f"""  <transmission name={quoteattr(joint + '_transmission')}>
    <type>transmission_interface/SimpleTransmission</type>
    <joint name={quoteattr(joint)}>
      <hardwareInterface>hardware_interface/EffortJointInterface</hardwareInterface>
    </joint>
    <actuator name={quoteattr(joint + '_motor')}>
      <mechanicalReduction>{_f(reduction)}</mechanicalReduction>
    </actuator>
  </transmission>
"""


def urdf_string(arm: ArmParameters, friction: Sequence[FrictionParameters],
                limits: Sequence[JointLimit], joints: Sequence[str] = ('joint1', 'joint2'),
                name: str = ROBOT_NAME, gear_ratios: Sequence[float] | None = None,
                rotor_inertia: Sequence[float] = (0.0, 0.0), source: str = '') -> str:
    """
    Build the URDF XML text of the arm.

    Parameters
    ----------
    arm : ArmParameters
        Masses [kg], lengths and CoM distances [m], planar inertias about the CoM [kg m^2].
    friction : sequence of 2 FrictionParameters
        ``b`` -> ``<dynamics damping>`` [N m s/rad], ``tau_c`` -> ``friction`` [N m].
    limits : sequence of 2 JointLimit
        Position [rad], velocity [rad/s] and effort [N m] limits per joint.
    joints : sequence of 2 str
        Joint names (the ``/joint_states`` names).
    name : str
        Robot name.
    gear_ratios : sequence of 2 float, optional
        Adds ``<transmission>`` elements with this mechanical reduction.
    rotor_inertia : sequence of 2 float
        Reflected rotor inertia [kg m^2], documented in a comment (no URDF element).
    source : str
        Where the parameters came from (comment).

    """
    radius = 0.04
    source = source.replace('--', '- -')     # not allowed inside an XML comment
    parts = [
        '<?xml version="1.0"?>\n',
        f'<!-- Planar 2R arm generated by manip-urdf{" from " + source if source else ""}.\n'
        '     The arm moves in the world x-z plane; base_link has the model conventions\n'
        '     (x right, y up, joint axes z). Inertias are about each link centre of mass.\n'
        f'     Reflected rotor inertia Jm N^2 (not representable in URDF): '
        f'{joints[0]} {_f(rotor_inertia[0])}, {joints[1]} {_f(rotor_inertia[1])} kg m^2;\n'
        f'     gravity g0 = {_f(arm.gravity)} m/s^2 along -z of world. -->\n',
        f'<robot name={quoteattr(name)}>\n',
        '  <material name="blue"><color rgba="0.2 0.4 0.8 1"/></material>\n',
        '  <material name="orange"><color rgba="0.9 0.5 0.1 1"/></material>\n',
        '  <material name="grey"><color rgba="0.5 0.5 0.5 1"/></material>\n',
        '  <link name="world"/>\n',
        '  <joint name="world_to_base" type="fixed">\n'
        '    <parent link="world"/>\n'
        '    <child link="base_link"/>\n'
        f'    <origin xyz="0 0 0" rpy="{_f(math.pi / 2)} 0 0"/>\n'
        '  </joint>\n',
        '  <link name="base_link">\n'
        '    <visual>\n'
        '      <geometry><cylinder radius="0.06" length="0.12"/></geometry>\n'
        '      <material name="grey"/>\n'
        '    </visual>\n'
        '  </link>\n',
        _joint(joints[0], 'base_link', 'link1', 0.0, limits[0], friction[0]),
        _link('link1', arm.l1, arm.m1, arm.lc1, arm.I1, radius, 'blue'),
        _joint(joints[1], 'link1', 'link2', arm.l1, limits[1], friction[1]),
        _link('link2', arm.l2, arm.m2, arm.lc2, arm.I2, 0.8 * radius, 'orange'),
        '  <joint name="tool0_joint" type="fixed">\n'
        '    <parent link="link2"/>\n'
        '    <child link="tool0"/>\n'
        f'    <origin xyz="{_f(arm.l2)} 0 0" rpy="0 0 0"/>\n'
        '  </joint>\n',
        '  <link name="tool0"/>\n',
    ]
    if gear_ratios is not None:
        parts += [_transmission(joints[0], gear_ratios[0]),
                  _transmission(joints[1], gear_ratios[1])]
    parts.append('</robot>\n')
    return ''.join(parts)


def urdf_from_scenario(scenario: Scenario, model: str = 'plant', source: str = '') -> str:
    """URDF of a scenario's arm: the simulated (``'plant'``) or the controller's nominal one."""
    plant = scenario.plant
    limits = joint_limits(plant)
    if model == 'plant':
        arm, friction, jr = plant.arm, plant.friction, plant.reflected_inertia
    elif model == 'nominal':
        nm = scenario.controller.nominal
        arm, friction, jr = nm.arm, nm.friction, nm.rotor_inertia
    else:
        raise ParameterError(f"model: must be 'plant' or 'nominal' (got {model!r})")
    gears = tuple(m.N for m in plant.motors) if plant.actuator == 'motor' else None
    return urdf_string(arm, friction, limits, scenario.joints, gear_ratios=gears,
                       rotor_inertia=jr, source=source or f'scenario {scenario.name} ({model})')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='manip-urdf',
        description='Write a URDF of the 2R arm (inertials, joint limits, damping/friction) '
                    'from a scenario file, for robot_state_publisher + RViz.')
    p.add_argument('--config', default='default', metavar='NAME|FILE',
                   help='scenario preset or file (default: default)')
    p.add_argument('--nominal', action='store_true',
                   help="use the controller's nominal model instead of the plant (e.g. a "
                        'scenario written by manip-identify --write-scenario)')
    p.add_argument('--out', metavar='FILE', help='output file (default: stdout)')
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``manip-urdf`` entry point; returns the exit code (2 on any error)."""
    args = build_parser().parse_args(argv)
    try:
        scenario = load_scenario(args.config)
        text = urdf_from_scenario(scenario, 'nominal' if args.nominal else 'plant',
                                  source=f'config {Path(str(args.config)).name} '
                                  f'({"nominal" if args.nominal else "plant"})')
        if args.out:
            out = Path(args.out)
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text, encoding='utf-8')
            except OSError as exc:
                raise ParameterError(f'{out}: cannot write ({exc.strerror})') from None
            print(f'wrote {out}')
        else:
            sys.stdout.write(text)
    except ParameterError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
