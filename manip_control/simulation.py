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
Offline closed loop: plant + controller + trajectory without ROS.

The semantics are those of the ROS lockstep mode (see DEVELOPERS.md): at tick k,
``t_k = k T``, the sensors measure ``y_k``, the trajectory gives ``r_k = r(t_k)``, the
controller computes ``u_k`` and the plant integrates over ``[t_k, t_k + T]`` with ``u_k``
held. Tick records are taken at ``t_k`` (before the step).
"""

from __future__ import annotations

from dataclasses import dataclass

from manip_control.control import Controller
from manip_control.parameters import Scenario
from manip_control.plant import Plant
from manip_control.sensors import JointSensors
from manip_control.trajectories import trajectory_from_config
import numpy as np


@dataclass
class SimulationResult:
    """
    Per-tick records of a closed-loop run (arrays of shape (n,) or (n, 2)).

    Attributes
    ----------
    t : time [s]; q, qd : true state; q_meas, qd_meas : measured state;
    q_d, qd_d, qdd_d : reference; tau_cmd : command after limits [N·m];
    tau_joint : actual actuator torque at the joint [N·m]; current : motor current [A];
    voltage : drive voltage [V]; saturated : command at its limit (bool).

    """

    scenario: Scenario
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    q_meas: np.ndarray
    qd_meas: np.ndarray
    q_d: np.ndarray
    qd_d: np.ndarray
    qdd_d: np.ndarray
    tau_cmd: np.ndarray
    tau_joint: np.ndarray
    current: np.ndarray
    voltage: np.ndarray
    saturated: np.ndarray
    final_state: np.ndarray

    @property
    def error(self) -> np.ndarray:
        """Tracking error ``q - q_d`` of the true position [rad]."""
        return self.q - self.q_d


class ClosedLoop:
    """
    Plant, sensors, controller and trajectory of one scenario, stepped tick by tick.

    The ROS lockstep nodes and :func:`run_closed_loop` both drive these same objects.
    """

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        period = scenario.period
        self.plant = Plant(scenario.plant, period)
        self.sensors = JointSensors(scenario.plant.sensors, period)
        self.controller = Controller(scenario.controller, period)
        self.trajectory = trajectory_from_config(dict(scenario.trajectory), 2)


def run_closed_loop(scenario: Scenario, duration: float | None = None) -> SimulationResult:
    """
    Simulate ``scenario`` for ``duration`` seconds (default: the scenario's).

    Returns
    -------
    SimulationResult

    """
    loop = ClosedLoop(scenario)
    plant, sensors, ctrl, traj = loop.plant, loop.sensors, loop.controller, loop.trajectory
    period = scenario.period
    n = int(round((scenario.duration if duration is None else duration) / period))
    rec = []
    append = rec.append
    sample = traj.sample
    update = ctrl.update
    measure = sensors.measure
    step = plant.step
    motor = scenario.plant.actuator == 'motor'
    for k in range(n):
        t = k * period
        x = plant._x
        y1, y2, w1, w2 = measure(x[0], x[1], x[2], x[3])
        r, rv, ra = sample(t)
        # Python floats are several times faster than numpy scalars in the scalar hot path.
        r, rv, ra = r.tolist(), rv.tolist(), ra.tolist()
        out = update(y1, y2, w1, w2, r[0], r[1], rv[0], rv[1], ra[0], ra[1])
        step(out.tau1, out.tau2)
        # Actuator torque and drive voltage at t_k+ (with the new command applied).
        tj = plant.joint_torque_at(x)
        v1, v2 = plant.drive_voltage_at(x) if motor else (0.0, 0.0)
        append((t, x[0], x[1], x[2], x[3], y1, y2, w1, w2, r[0], r[1], rv[0], rv[1],
                  ra[0], ra[1], out.tau1, out.tau2, tj[0], tj[1], x[4], x[5], v1, v2))
    rec = np.array(rec, dtype=float).reshape(n, 23)
    sat = np.abs(rec[:, 15:17]) >= np.asarray(ctrl.torque_limit)
    return SimulationResult(
        scenario=scenario, t=rec[:, 0], q=rec[:, 1:3], qd=rec[:, 3:5], q_meas=rec[:, 5:7],
        qd_meas=rec[:, 7:9], q_d=rec[:, 9:11], qd_d=rec[:, 11:13], qdd_d=rec[:, 13:15],
        tau_cmd=rec[:, 15:17], tau_joint=rec[:, 17:19], current=rec[:, 19:21],
        voltage=rec[:, 21:23], saturated=sat, final_state=plant.state)


def summarize(result: SimulationResult, late_window_start: float | None = None) -> dict:
    """
    Tracking and effort figures of a run, per joint (lists of 2), as plain data.

    The "late window" is ``t >= late_window_start`` (default: the scenario's), after the
    initial transient: RMS and max |e| there are the figures the lessons' bounds talk about.
    """
    sc = result.scenario
    start = sc.late_window_start if late_window_start is None else late_window_start
    late = result.t >= start
    if not np.any(late):
        late = np.ones_like(result.t, dtype=bool)
    err = result.error[late]
    period = sc.period
    return {
        'scenario': sc.name,
        'duration_s': float(len(result.t) * period),
        'ticks': int(len(result.t)),
        'late_window_start_s': float(start),
        'joints': list(sc.joints),
        'rms_error_rad': np.sqrt(np.mean(err ** 2, axis=0)).tolist(),
        'max_error_rad': np.abs(err).max(axis=0).tolist(),
        'max_error_whole_run_rad': np.abs(result.error).max(axis=0).tolist(),
        'peak_torque_cmd_Nm': np.abs(result.tau_cmd).max(axis=0).tolist(),
        'rms_torque_cmd_Nm': np.sqrt(np.mean(result.tau_cmd ** 2, axis=0)).tolist(),
        'peak_current_A': np.abs(result.current).max(axis=0).tolist(),
        'peak_voltage_V': np.abs(result.voltage).max(axis=0).tolist(),
        'saturation_time_s': (result.saturated.sum(axis=0) * period).tolist(),
    }


def format_summary(summary: dict) -> str:
    """Human-readable table of :func:`summarize`'s figures."""
    rows = [
        ('RMS |e| (late) [rad]', 'rms_error_rad', '{:.3e}'),
        ('max |e| (late) [rad]', 'max_error_rad', '{:.3e}'),
        ('max |e| (whole) [rad]', 'max_error_whole_run_rad', '{:.3e}'),
        ('peak torque cmd [N·m]', 'peak_torque_cmd_Nm', '{:.2f}'),
        ('RMS torque cmd [N·m]', 'rms_torque_cmd_Nm', '{:.2f}'),
        ('peak current [A]', 'peak_current_A', '{:.2f}'),
        ('peak voltage [V]', 'peak_voltage_V', '{:.2f}'),
        ('time saturated [s]', 'saturation_time_s', '{:.3f}'),
    ]
    joints = summary['joints']
    lines = [f"scenario {summary['scenario']}: {summary['duration_s']:.3f} s, "
             f"{summary['ticks']} ticks, late window t >= {summary['late_window_start_s']} s",
             f"{'':24}" + ''.join(f'{j:>14}' for j in joints)]
    for label, key, fmt in rows:
        lines.append(f'{label:24}' + ''.join(f'{fmt.format(v):>14}' for v in summary[key]))
    return '\n'.join(lines)
