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

The summary ends with the lesson (:func:`manip_control.simulation.lesson`): the late-window
error beside that of a perfect nominal model (one extra run) and the ISS estimate.

Same rates and zero-order-hold semantics as the ROS lockstep simulation. The loop runs in
the compiled kernel when it supports the scenario (``--engine auto``), else in the Python
reference loop; ``--engine python`` forces the latter. The reported wall time includes
loading the compiled code (about 0.3 s in a new process).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from manip_control.parameters import load_scenario
from manip_control.parameters import ParameterError
from manip_control.simulation import ENGINES
from manip_control.simulation import format_lesson
from manip_control.simulation import format_summary
from manip_control.simulation import KernelUnsupported
from manip_control.simulation import lesson
from manip_control.simulation import PlantStateError
from manip_control.simulation import run_closed_loop
from manip_control.simulation import summarize
from manip_control.simulation import use_kernel


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='manip-offline',
                                description=__doc__.strip().splitlines()[0])
    p.add_argument('--config', default='default',
                   help='scenario YAML file or preset name in config/ (default: default)')
    p.add_argument('--duration', type=float, default=None, help='override the duration [s]')
    p.add_argument('--actuator', choices=('motor', 'ideal'), default=None,
                   help='override the plant actuator model')
    p.add_argument('--engine', choices=ENGINES, default='auto',
                   help='closed-loop engine: the compiled kernel when it supports the scenario '
                        '(auto, the default), always the kernel, or the Python reference loop')
    p.add_argument('--json', action='store_true', help='print the summary as JSON')
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        scenario = load_scenario(args.config)
        if args.duration is not None:
            scenario = scenario.with_duration(args.duration, '--duration')
        if args.actuator:
            scenario = dataclasses.replace(
                scenario, plant=dataclasses.replace(scenario.plant, actuator=args.actuator))
    except ParameterError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        engine = 'kernel' if use_kernel(scenario, args.engine) else 'python'
        result = run_closed_loop(scenario, engine=engine)
    except (PlantStateError, KernelUnsupported) as exc:  # diverged / kernel cannot run it
        print(f'error: {exc}', file=sys.stderr)
        return 2
    wall = time.perf_counter() - t0
    summary = summarize(result)
    summary['engine'] = engine
    summary['wall_time_s'] = wall
    summary['real_time_factor'] = summary['duration_s'] / wall
    try:
        data = lesson(scenario, summary['max_error_rad'], summary['duration_s'], engine)
    except PlantStateError as exc:      # the perfect-model run diverged
        print(f'error: {exc}', file=sys.stderr)
        return 2
    if args.json:
        window = data.pop('window')
        summary['lesson'] = dict(data, late_window_periods=window.periods,
                                 reference_period_s=window.period)
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
        rtf = summary['real_time_factor']
        print(f'wall time {wall:.3f} s ({engine}), real-time factor {rtf:.1f}x')
        print(format_lesson(data, scenario.joints))
    return 0


if __name__ == '__main__':
    sys.exit(main())
