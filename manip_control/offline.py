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
``manip-offline``: run a scenario's closed loop without ROS and print the summary.

The summary ends with the lesson (:func:`manip_control.lesson.lesson`): the late-window
error beside that of a perfect nominal model (one extra run) and the ISS estimate.

Same rates and zero-order-hold semantics as the ROS lockstep simulation. The loop runs in
the compiled kernel when it supports the scenario (``--engine auto``), else in the Python
reference loop; ``--engine python`` forces the latter. The reported wall time includes
loading the compiled code (about 0.3 s in a new process).

``--urdf FILE`` runs any serial arm from its URDF (or xacro) instead: computed torque from the
arm's own model (or one with every link's mass and inertia scaled, ``--nominal-scale``) on the
n-joint plant, with drives, friction, reference and gains chosen from the description
(:mod:`manip_control.arm_scenario`), and prints per-joint figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
import sys
import time

from manip_control.adaptation import true_two_link_parameters
from manip_control.arm_identification import write_arm_bag
from manip_control.arm_model import ArmModelError
from manip_control.arm_model import UrdfError
from manip_control.arm_scenario import joint_effort
from manip_control.arm_scenario import run_urdf_closed_loop
from manip_control.arm_scenario import summarize_urdf_run
from manip_control.lesson import format_lesson
from manip_control.lesson import lesson
from manip_control.parameters import AdaptationParameters
from manip_control.parameters import load_scenario
from manip_control.parameters import ParameterError
from manip_control.parameters import payload_from_dict
from manip_control.parameters import PayloadParameters
from manip_control.simulation import ClosedLoop
from manip_control.simulation import ENGINES
from manip_control.simulation import format_summary
from manip_control.simulation import KernelUnsupported
from manip_control.simulation import PlantStateError
from manip_control.simulation import run_closed_loop
from manip_control.simulation import run_closed_loop_python
from manip_control.simulation import summarize
from manip_control.simulation import truth_nominal
from manip_control.simulation import use_kernel


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='manip-offline',
                                description=__doc__.strip().splitlines()[0])
    p.add_argument('--config', default=None,
                   help='scenario YAML file or preset name in config/ (default: default)')
    p.add_argument('--duration', type=float, default=None, help='override the duration [s]')
    p.add_argument('--actuator', choices=('motor', 'ideal'), default=None,
                   help='override the plant actuator model')
    p.add_argument('--engine', choices=ENGINES, default='auto',
                   help='closed-loop engine: the compiled kernel when it supports the scenario '
                        '(auto, the default), always the kernel, or the Python reference loop')
    p.add_argument('--adapt', action='store_true',
                   help='adaptive computed torque over the nominal base parameters '
                        '(controller.adaptation.enabled; the Python loop; with --urdf, default '
                        "gains): prints the estimates beside the plant's true base parameters")
    p.add_argument('--json', action='store_true', help='print the summary as JSON')
    p.add_argument('--payload', default=None, metavar='MASS@TIME',
                   help='the plant picks up a point mass of MASS kg at TIME s (simulated) at '
                        'the tool: the tip of link 2 for the 2R (overrides plant.payload), '
                        'the last modelled link with --urdf; the controller is not told')
    arm = p.add_argument_group('any arm from its URDF (instead of a scenario)')
    arm.add_argument('--urdf', default=None, metavar='FILE',
                     help='.urdf or .xacro file: computed torque on that arm (default duration '
                          '5 s; --actuator motor: drives sized from the effort limits)')
    arm.add_argument('--joints', nargs='+', default=None, metavar='NAME',
                     help='modelled joints (default: the movable joints of the trunk)')
    arm.add_argument('--nominal-scale', type=float, default=1.0, metavar='F',
                     help="the controller's link masses and inertias times F (default 1: "
                          'the perfect model)')
    arm.add_argument('--nominal-urdf', default=None, metavar='FILE',
                     help="the controller's model from another URDF of the same joints, e.g. "
                          'the one manip-identify --urdf wrote (default: --urdf)')
    arm.add_argument('--omega-n', type=float, default=20.0, metavar='RAD_S',
                     help='closed-loop bandwidth: Kp = wn^2, Kd = 2 zeta wn (default 20)')
    arm.add_argument('--zeta', type=float, default=1.0, help='closed-loop damping (default 1)')
    arm.add_argument('--bag', default=None, metavar='DIR',
                     help='record /joint_states (effort: the actuator torque) and the URDF on '
                          '/robot_description into a new bag (for manip-analyze, '
                          'manip-identify --urdf-from-bag)')
    arm.add_argument('--excitation', action='store_true',
                     help='track the identification excitation (a Fourier series inside the '
                          'limits, period 10 s) instead of the default sinusoid: with --bag, '
                          'the recording for manip-identify --urdf')
    arm.add_argument('--payload-offset', type=float, nargs=3, default=None,
                     metavar=('X', 'Y', 'Z'),
                     help="with --payload: the payload's position in the last modelled "
                          "link's frame [m] (default: its origin)")
    arm.add_argument('--no-compensation', action='store_true',
                     help="the rigid-body law alone: no inversion of the drives' gear loss, "
                          'no friction feed-forward')
    return p


def parse_payload(text: str | None, path: str = '--payload') -> PayloadParameters | None:
    """
    ``MASS@TIME`` (kg, s) -> :class:`PayloadParameters`; None for None.

    Raises
    ------
    ParameterError
        Not ``MASS@TIME``, or a mass or time that is not finite, negative or implausible.

    """
    if text is None:
        return None
    mass, sep, at_time = text.partition('@')
    values = {}
    for name, value in (('mass', mass), ('at_time', at_time)):
        try:
            values[name] = float(value)
        except ValueError:
            values[name] = None
    if not sep or None in values.values():
        raise ParameterError(f'{path}: expected MASS@TIME, e.g. 2@1.5 (kg@s) (got {text!r})')
    return payload_from_dict(values, path)


def run_urdf(args) -> int:
    """``manip-offline --urdf``: one URDF run, its per-joint summary."""
    if args.config is not None or args.engine != 'auto':
        print('error: --urdf runs the n-joint plant: --config and --engine do not apply',
              file=sys.stderr)
        return 2
    duration = 5.0 if args.duration is None else args.duration
    try:
        payload = parse_payload(args.payload)
    except ParameterError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    if args.payload_offset is not None and (payload is None or not all(
            math.isfinite(v) for v in args.payload_offset)):
        print('error: --payload-offset: needs --payload and 3 finite numbers [m] (got '
              f'{args.payload_offset})', file=sys.stderr)
        return 2
    if args.bag is not None:
        bag = Path(args.bag)
        if bag.exists() and (not bag.is_dir() or any(bag.iterdir())):
            print(f'error: --bag {bag}: exists and is not an empty directory', file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    try:
        res = run_urdf_closed_loop(args.urdf, duration=duration,
                                   actuator=args.actuator or 'motor',
                                   nominal_scale=args.nominal_scale, omega_n=args.omega_n,
                                   zeta=args.zeta, joints=args.joints,
                                   compensate=not args.no_compensation,
                                   nominal_urdf=args.nominal_urdf,
                                   excitation=args.excitation, payload=payload,
                                   payload_offset=args.payload_offset,
                                   adaptation=AdaptationParameters(enabled=True)
                                   if args.adapt else None)
    except (ArmModelError, UrdfError, ParameterError, OSError) as exc:
        print(f'error: {" ".join(str(exc).split())}', file=sys.stderr)
        return 2
    wall = time.perf_counter() - t0
    if args.bag is not None:
        if bag.is_dir():
            bag.rmdir()                 # empty (checked above): the writer creates it
        try:
            write_arm_bag(bag, res.run.t, res.arm.joint_names, res.run.q, res.run.qd,
                          joint_effort(res), description=res.urdf)
        except Exception as exc:  # noqa: BLE001 - any write error: one line, no traceback
            print(f'error: --bag {bag}: {" ".join(str(exc).split())}', file=sys.stderr)
            return 2
    summary = summarize_urdf_run(res)
    summary.update(urdf=str(args.urdf), nominal_urdf=args.nominal_urdf,
                   actuator=args.actuator or 'motor',
                   nominal_scale=args.nominal_scale, compensation=not args.no_compensation,
                   reference='excitation' if args.excitation else 'sinusoid',
                   payload=(None if payload is None else
                            {'mass_kg': payload.mass, 'at_time_s': payload.at_time,
                             'offset_m': list(args.payload_offset or (0.0, 0.0, 0.0))}),
                   kp=res.kp.tolist(), kd=res.kd.tolist(),
                   wall_time_s=wall, real_time_factor=summary['duration_s'] / wall)
    if res.law is not None:
        summary['adaptation'] = adaptation_summary(res.law, res.true_base)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{args.urdf}: {len(summary['joints'])} joints, {summary['actuator']} drives, "
          f'computed torque Kp {res.kp[0]:g} Kd {res.kd[0]:g}; nominal model: rigid body '
          + (f'from {args.nominal_urdf}' if args.nominal_urdf else '= the plant')
          + ('' if args.nominal_scale == 1.0
             else f' with masses and inertias x{args.nominal_scale:g}')
          + ('; drives and friction not compensated' if args.no_compensation
             else '; drives = the plant, friction from the nominal URDF')
          + ('; reference: the identification excitation' if args.excitation else '')
          + ('' if payload is None or payload.mass == 0.0
             else f'; payload {payload.mass:g} kg picked up at t = {payload.at_time:g} s (the '
             'plant only)'))
    print(f"{summary['duration_s']:.3f} s simulated in {wall:.2f} s wall "
          f"({summary['real_time_factor']:.2f}x real time, model loading included)")
    w = max(16, 2 + max(len(name) for name in summary['joints']))
    print(f"  {'joint':<{w}}{'max |e| [rad]':>14}{'late max |e|':>14}{'RMS e [rad]':>13}"
          f"{'peak |tau| [N·m]':>18}{'of limit':>10}")
    for j, name in enumerate(summary['joints']):
        print(f"  {name:<{w}}{summary['max_error_rad'][j]:>14.4g}"
              f"{summary['late_max_error_rad'][j]:>14.4g}{summary['rms_error_rad'][j]:>13.4g}"
              f"{summary['peak_torque_nm'][j]:>18.4g}"
              + (f"{summary['peak_torque_fraction'][j] * 100:>9.1f}%"
                 if summary['peak_torque_fraction'][j] is not None else '  no limit'))
    print('  (late: the second half of the run)')
    if args.bag is not None:
        print(f'bag written to {bag} (/joint_states, /robot_description)')
    if res.law is not None:
        print(format_adaptation(res.law, res.true_base))
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.urdf is not None:
        return run_urdf(args)
    if args.excitation:
        print('error: --excitation needs --urdf FILE (the excitation is sized by its limits)',
              file=sys.stderr)
        return 2
    if args.payload_offset is not None:
        print('error: --payload-offset needs --urdf FILE (the 2R carries its payload at the '
              'tip of link 2)', file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.config or 'default')
        if args.duration is not None:
            scenario = scenario.with_duration(args.duration, '--duration')
        if args.actuator:
            scenario = dataclasses.replace(
                scenario, plant=dataclasses.replace(scenario.plant, actuator=args.actuator))
        payload = parse_payload(args.payload)
        if payload is not None:
            scenario = dataclasses.replace(
                scenario, plant=dataclasses.replace(scenario.plant, payload=payload))
        if args.adapt:
            ctrl = scenario.controller
            scenario = dataclasses.replace(scenario, controller=dataclasses.replace(
                ctrl, adaptation=dataclasses.replace(ctrl.adaptation, enabled=True)))
    except ParameterError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        engine = 'kernel' if use_kernel(scenario, args.engine) else 'python'
        adaptive = scenario.controller.adaptation.enabled
        loop = ClosedLoop(scenario, compiled=False) if adaptive else None
        result = (run_closed_loop_python(scenario, loop=loop) if adaptive
                  else run_closed_loop(scenario, engine=engine))
    except (PlantStateError, KernelUnsupported) as exc:  # diverged / kernel cannot run it
        print(f'error: {exc}', file=sys.stderr)
        return 2
    wall = time.perf_counter() - t0
    summary = summarize(result)
    summary['engine'] = engine
    summary['wall_time_s'] = wall
    summary['real_time_factor'] = summary['duration_s'] / wall
    try:
        # the perfect-model baseline has no adaptation: the kernel may run it
        data = lesson(scenario, summary['max_error_rad'], summary['duration_s'],
                      args.engine if adaptive else engine)
    except PlantStateError as exc:      # the perfect-model run diverged
        print(f'error: {exc}', file=sys.stderr)
        return 2
    law = loop.controller.law if adaptive else None
    truth = true_two_link_parameters(truth_nominal(scenario)) if adaptive else None
    if args.json:
        window = data.pop('window')
        summary['lesson'] = dict(data, late_window_periods=window.periods,
                                 reference_period_s=window.period)
        if adaptive:
            summary['adaptation'] = adaptation_summary(law, truth)
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
        rtf = summary['real_time_factor']
        print(f'wall time {wall:.3f} s ({engine}), real-time factor {rtf:.1f}x')
        print(format_lesson(data, scenario.joints))
        if adaptive:
            print(format_adaptation(law, truth))
    return 0


def adaptation_summary(law, truth) -> dict:
    """Return the adaptive run's estimates as plain data (``--json``)."""
    return {'names': list(law.names), 'units': list(law.units),
            'nominal': law.nominal.tolist(), 'estimate': law.estimates.tolist(),
            'true': truth.tolist(), 'excited': law.excited.tolist(),
            'fallbacks': law.fallbacks, 'fallback_reason': law.fallback_reason}


def format_adaptation(law, truth) -> str:
    """Return the adaptive run's lines: its estimates beside the plant's true base parameters."""
    lines = [f'adaptive computed torque ("this run" above): base parameters after '
             f'{law.ticks * law.period:g} s (excited: eigenvalue of the information matrix '
             f'above {law.params.excitation_threshold:g} of the largest)', law.table(truth)]
    lines.append('  fallbacks: none' if not law.fallbacks else
                 f'  fallbacks: {law.fallbacks}, the last: {law.fallback_reason}')
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
