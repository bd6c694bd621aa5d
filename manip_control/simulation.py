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

Two engines run this loop: the compiled kernel (:mod:`manip_control.kernel`, the default
whenever it supports the scenario) and the Python objects of :class:`ClosedLoop` (the
reference, and the fallback for any option the kernel does not implement). They agree to
round-off (tested within 1e-12; bit for bit on the sinusoid scenarios). :func:`run_batch`
simulates many parameter sets at once on all cores.
"""

from __future__ import annotations

from concurrent.futures import as_completed
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import ThreadPoolExecutor
import dataclasses
from dataclasses import dataclass
from fractions import Fraction
import json
import math
import multiprocessing
import os
from typing import Callable, Sequence

from manip_control.adaptation import AdaptiveController
from manip_control.control import Controller
from manip_control.parameters import NominalModel
from manip_control.parameters import Scenario
from manip_control.plant import initial_state
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

    @property
    def tau_joint_meas(self) -> np.ndarray:
        """
        Actuator torque at the joints when the state of each tick is sampled [N·m].

        What ``/joint_states`` effort carries at ``t_k``: the torque before the command of
        tick k is applied (the state is published before that command exists). Motor:
        ``N k_t i_k - tau_gear(T_k, qd_k)``, the gear loss on the mesh torque
        ``T = N k_t i - D qdd`` (:mod:`manip_control.plant`), equal to ``tau_joint`` (the
        current, hence the accelerations, are continuous at ``t_k``);
        ideal actuator: the clamped command held over the previous period, i.e.
        ``tau_joint`` of tick k - 1, and zero at tick 0 (the plant starts with a zero input).
        """
        if self.scenario.plant.actuator != 'ideal':
            return self.tau_joint
        out = np.zeros_like(self.tau_joint)
        out[1:] = self.tau_joint[:-1]
        return out


class ClosedLoop:
    """
    Plant, sensors, controller and trajectory of one scenario, stepped tick by tick.

    The ROS lockstep nodes and :func:`run_closed_loop` both drive these same objects.
    ``compiled=False`` makes the plant use its Python step (see :class:`Plant`).
    """

    def __init__(self, scenario: Scenario, compiled: bool = True):
        self.scenario = scenario
        period = scenario.period
        self.plant = Plant(scenario.plant, period, compiled=compiled)
        self.sensors = JointSensors(scenario.plant.sensors, period)
        # the adaptive law (controller.adaptation.enabled) runs on this Python path only
        self.controller = (AdaptiveController(scenario.controller, period)
                           if scenario.controller.adaptation.enabled
                           else Controller(scenario.controller, period))
        self.trajectory = trajectory_from_config(dict(scenario.trajectory), 2)


ENGINES = ('auto', 'kernel', 'python')


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ValueError(f'engine: must be one of {", ".join(ENGINES)} (got {engine!r})')


def use_kernel(scenario: Scenario, engine: str = 'auto') -> bool:
    """
    Whether ``engine`` runs ``scenario`` in the compiled kernel.

    ``'auto'``: the kernel when it supports the scenario, else Python; ``'python'``: always
    Python; ``'kernel'``: the kernel, or :class:`KernelUnsupported` naming the reason.
    """
    from manip_control import kernel    # numba: about 1 s to import
    _check_engine(engine)
    if engine == 'python':
        return False
    reason = kernel.unsupported(scenario)
    if reason is None:
        return True
    if engine == 'kernel':
        raise KernelUnsupported(f'engine kernel: {reason}')
    return False


class KernelUnsupported(ValueError):
    """The compiled kernel was requested for a scenario it does not implement."""


def run_closed_loop(scenario: Scenario, duration: float | None = None,
                    engine: str = 'auto') -> SimulationResult:
    """
    Simulate ``scenario`` for ``duration`` seconds (default: the scenario's).

    Parameters
    ----------
    scenario : Scenario
        Plant, controller, trajectory, rates.
    duration : float, optional
        Simulated time [s]; ``round(duration / T)`` ticks.
    engine : str
        ``'auto'`` (compiled kernel when it supports the scenario, else Python),
        ``'kernel'`` or ``'python'``.

    Returns
    -------
    SimulationResult

    """
    from manip_control import kernel    # numba: about 1 s to import
    if use_kernel(scenario, engine):
        rec, stats = kernel.closed_loop(scenario, duration)
        return _result(scenario, rec, stats[kernel.ST_FINAL:kernel.ST_FINAL + 8].copy())
    return run_closed_loop_python(scenario, duration)


def run_closed_loop_python(scenario: Scenario, duration: float | None = None,
                           loop: ClosedLoop | None = None) -> SimulationResult:
    """
    Simulate ``scenario`` tick by tick with the Python objects of :class:`ClosedLoop`.

    The reference implementation of the loop (and the fallback of :func:`run_closed_loop`),
    with the plant's Python step. ``loop``: a new ``ClosedLoop(scenario, compiled=False)``
    of the caller's, to read its controller afterwards (e.g. the adaptive law's estimates).
    """
    from manip_control import kernel    # numba: about 1 s to import
    loop = ClosedLoop(scenario, compiled=False) if loop is None else loop
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
        (y1, y2), (w1, w2) = measure((x[0], x[1]), (x[2], x[3]))
        r, rv, ra = sample(t)
        # Python floats are several times faster than numpy scalars in the scalar hot path.
        r, rv, ra = r.tolist(), rv.tolist(), ra.tolist()
        out = update((y1, y2), (w1, w2), r, rv, ra)
        t1, t2 = out.tau
        step(t1, t2)
        # Actuator torque and drive voltage at t_k+ (with the new command applied).
        tj = plant.joint_torque_at(x)
        v1, v2 = plant.drive_voltage_at(x) if motor else (0.0, 0.0)
        append((t, x[0], x[1], x[2], x[3], y1, y2, w1, w2, r[0], r[1], rv[0], rv[1],
                ra[0], ra[1], t1, t2, tj[0], tj[1], x[4], x[5], v1, v2))
    rec = np.array(rec, dtype=float).reshape(n, kernel.REC_SIZE)
    return _result(scenario, rec, plant.state)


class PlantStateError(RuntimeError):
    """The simulated state became non-finite (the integration diverged); says when."""


def _check_finite(scenario: Scenario, rec: np.ndarray, final_state: np.ndarray) -> None:
    """Raise PlantStateError at the first tick whose q, qd or current is not finite."""
    if (np.isfinite(rec[:, 1:5]).all() and np.isfinite(rec[:, 19:21]).all()
            and np.isfinite(final_state).all()):
        return
    bad = ~np.isfinite(rec[:, 1:5]).all(axis=1) | ~np.isfinite(rec[:, 19:21]).all(axis=1)
    k = int(np.argmax(bad)) if bad.any() else len(rec)
    step = scenario.period / scenario.plant.substeps
    raise PlantStateError(
        f'plant state not finite at t = {k * scenario.period:.6f} s (tick {k}): the '
        f'integration diverged (RK4 step {step:.3g} s = 1 / (scenario.control_rate '
        'plant.substeps)); raise the rate or plant.substeps, or check the motor and friction '
        'parameters')


def _result(scenario: Scenario, rec: np.ndarray, final_state: np.ndarray) -> SimulationResult:
    """Build the result from the per-tick record columns (PlantStateError if it diverged)."""
    _check_finite(scenario, rec, final_state)
    sat = np.abs(rec[:, 15:17]) >= np.asarray(scenario.controller.torque_limit)
    return SimulationResult(
        scenario=scenario, t=rec[:, 0], q=rec[:, 1:3], qd=rec[:, 3:5], q_meas=rec[:, 5:7],
        qd_meas=rec[:, 7:9], q_d=rec[:, 9:11], qd_d=rec[:, 11:13], qdd_d=rec[:, 13:15],
        tau_cmd=rec[:, 15:17], tau_joint=rec[:, 17:19], current=rec[:, 19:21],
        voltage=rec[:, 21:23], saturated=sat, final_state=final_state)


def reference_period(trajectory: dict, max_ratio: int = 64) -> float | None:
    """
    Return the common period [s] of a periodic reference, or None (not periodic, constant).

    Sinusoids (``omega``) and sums of sinusoids (``omegas``): the smallest ``P`` with every
    non-zero ``omega P`` a multiple of ``2 pi`` (terms with zero amplitude do not count),
    when the ratios of the omegas are fractions with denominators up to ``max_ratio``.
    """
    kind = trajectory.get('type')
    if kind == 'sinusoid':
        amp, om = np.broadcast_arrays(np.atleast_1d(np.asarray(trajectory['amplitude'], float)),
                                      np.atleast_1d(np.asarray(trajectory['omega'], float)))
        omegas = [float(w) for a, w in zip(amp, om) if a != 0.0 and w != 0.0]
    elif kind == 'sum_of_sinusoids':
        omegas = [float(w) for ra, rw in zip(trajectory['amplitudes'], trajectory['omegas'])
                  for a, w in zip(ra, rw) if a != 0.0 and w != 0.0]
    else:
        return None
    if not omegas:
        return None
    base = min(omegas)
    denominators = []
    for w in omegas:
        ratio = Fraction(w / base).limit_denominator(max_ratio)
        if abs(float(ratio) - w / base) > 1e-5 * w / base:    # configs round to ~6 digits
            return None
        denominators.append(ratio)
    # omega_i = base p_i / q_i: the fundamental is base gcd(p_i / q_i) = base gcd(p) / lcm(q)
    num = math.gcd(*[r.numerator for r in denominators])
    den = math.lcm(*[r.denominator for r in denominators])
    return 2.0 * math.pi / (base * num / den)


@dataclass(frozen=True)
class LateWindow:
    """
    The late window ``[start, end]`` [s] of a run and how it relates to the reference.

    ``periods`` whole periods of ``period`` [s] (0 and the configured start when the
    reference is not periodic or no whole period fits after the configured start).
    """

    start: float
    end: float
    periods: int
    period: float | None

    def describe(self) -> str:
        """Return e.g. ``t in [5, 10] s = 1 whole period (5 s) of the reference``."""
        span = f't in [{self.start:.4g}, {self.end:.4g}] s'
        if self.periods:
            return (f'{span} = {self.periods} whole period{"s" if self.periods > 1 else ""} '
                    f'({self.period:.4g} s) of the reference')
        if self.period is None:
            return f'{span} (the reference is not periodic)'
        return f'{span} (shorter than one period of the reference, {self.period:.4g} s)'


def late_window(scenario: Scenario, duration: float | None = None) -> LateWindow:
    """
    Late window of a run of ``scenario`` lasting ``duration`` s (default: the scenario's).

    For a periodic reference (:func:`reference_period`) it is the largest whole number of
    periods that ends with the run and starts at or after ``scenario.late_window_start``,
    so that the figures do not depend on where in a cycle the window happens to start
    (e.g. only while the arm is lowered); otherwise ``[late_window_start, duration]``.
    """
    end = scenario.duration if duration is None else float(duration)
    start0 = scenario.late_window_start
    period = reference_period(scenario.trajectory)
    if period is not None and end > start0:
        k = int(math.floor((end - start0) / period + 1e-9))
        if k >= 1:
            # round-off may put the start a hair before start0: never before it
            return LateWindow(max(start0, end - k * period), end, k, period)
    return LateWindow(start0, end, 0, period)


def summarize(result: SimulationResult, late_window_start: float | None = None) -> dict:
    """
    Tracking and effort figures of a run, per joint (lists of 2), as plain data.

    The "late window" is ``t >= late_window_start``, after the initial transient: RMS and
    max |e| there are the figures the lessons' bounds talk about. Default: the whole
    periods of a periodic reference that end with the run and start at or after the
    scenario's ``late_window_start`` (:func:`late_window`), else that start.
    """
    sc = result.scenario
    start = (late_window(sc, len(result.t) * sc.period).start if late_window_start is None
             else late_window_start)
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


def truth_nominal(scenario: Scenario) -> NominalModel:
    """
    Return the controller's nominal model with the plant's truth wherever the plant has it.

    Arm, friction, reflected rotor inertia, rotor coupling, gear ratios and gear efficiencies
    (ideal gears for the ideal actuator, which has no gear loss) are the plant's; options of
    the nominal model the plant has no counterpart of stay as configured.
    """
    plant = scenario.plant
    motor = plant.actuator == 'motor'
    return dataclasses.replace(
        scenario.controller.nominal, arm=plant.arm, friction=tuple(plant.friction),
        rotor_inertia=tuple(plant.reflected_inertia),
        rotor_coupling=bool(plant.rotor_inertia and plant.rotor_coupling),
        gear_ratio=tuple(float(m.N) for m in plant.motors),
        eta=tuple(float(m.eta) if motor else 1.0 for m in plant.motors),
        eta_back=tuple(float(m.eta_back) if motor else 1.0 for m in plant.motors))


@dataclass
class BatchResult:
    """
    Figures of many closed-loop runs, one row per run, as :func:`summarize` computes them.

    Attributes
    ----------
    scenarios : list of Scenario
    late_max_error, late_rms_error : ndarray, shape (N, 2)
        Late-window max |e| and RMS e [rad].
    max_error_whole_run : ndarray, shape (N, 2)
        Max |e| over the whole run [rad].
    peak_torque_cmd, rms_torque_cmd : ndarray, shape (N, 2)
        Max |tau_cmd| and RMS tau_cmd [N·m].
    peak_current, peak_voltage : ndarray, shape (N, 2)
        Max |i| [A] and max |V| [V].
    saturation_time : ndarray, shape (N, 2)
        Time with the command at its limit [s].
    saturated : ndarray of bool, shape (N,)
        Whether the command reached a limit at any tick.
    final_state : ndarray, shape (N, 8)
        Plant state at the end of each run.
    n_ticks : ndarray of int, shape (N,)
        Control ticks of each run.

    """

    scenarios: list
    late_max_error: np.ndarray
    late_rms_error: np.ndarray
    max_error_whole_run: np.ndarray
    peak_torque_cmd: np.ndarray
    rms_torque_cmd: np.ndarray
    peak_current: np.ndarray
    peak_voltage: np.ndarray
    saturation_time: np.ndarray
    saturated: np.ndarray
    final_state: np.ndarray
    n_ticks: np.ndarray

    def __len__(self) -> int:
        return len(self.scenarios)

    def summary(self, i: int) -> dict:
        """Run ``i``'s figures in the layout of :func:`summarize`."""
        sc = self.scenarios[i]
        n = int(self.n_ticks[i])
        return {
            'scenario': sc.name,
            'duration_s': float(n * sc.period),
            'ticks': n,
            'late_window_start_s': float(sc.late_window_start),
            'joints': list(sc.joints),
            'rms_error_rad': self.late_rms_error[i].tolist(),
            'max_error_rad': self.late_max_error[i].tolist(),
            'max_error_whole_run_rad': self.max_error_whole_run[i].tolist(),
            'peak_torque_cmd_Nm': self.peak_torque_cmd[i].tolist(),
            'rms_torque_cmd_Nm': self.rms_torque_cmd[i].tolist(),
            'peak_current_A': self.peak_current[i].tolist(),
            'peak_voltage_V': self.peak_voltage[i].tolist(),
            'saturation_time_s': self.saturation_time[i].tolist(),
        }


def _with_late_window(scenario: Scenario, duration: float) -> Scenario:
    """``scenario`` with ``late_window_start`` at the start of :func:`late_window`."""
    start = late_window(scenario, duration).start
    if start == scenario.late_window_start:
        return scenario
    return dataclasses.replace(scenario, late_window_start=start)


def _figures(result: SimulationResult) -> np.ndarray:
    """Compute the kernel's per-run figures (``kernel.ST_*``) from a run's records."""
    from manip_control import kernel    # numba: about 1 s to import
    sc = result.scenario
    st = np.zeros(kernel.ST_SIZE)
    late = result.t >= sc.late_window_start
    if not np.any(late):
        late = np.ones_like(result.t, dtype=bool)
    err = np.abs(result.error)
    st[kernel.ST_LATE_MAX1:kernel.ST_LATE_MAX2 + 1] = err[late].max(axis=0)
    st[kernel.ST_LATE_SQ1:kernel.ST_LATE_SQ2 + 1] = (err[late] ** 2).sum(axis=0)
    st[kernel.ST_LATE_N] = late.sum()
    st[kernel.ST_MAX1:kernel.ST_MAX2 + 1] = err.max(axis=0)
    st[kernel.ST_TAU_MAX1:kernel.ST_TAU_MAX2 + 1] = np.abs(result.tau_cmd).max(axis=0)
    st[kernel.ST_TAU_SQ1:kernel.ST_TAU_SQ2 + 1] = (result.tau_cmd ** 2).sum(axis=0)
    st[kernel.ST_I_MAX1:kernel.ST_I_MAX2 + 1] = np.abs(result.current).max(axis=0)
    st[kernel.ST_V_MAX1:kernel.ST_V_MAX2 + 1] = np.abs(result.voltage).max(axis=0)
    st[kernel.ST_SAT1:kernel.ST_SAT2 + 1] = result.saturated.sum(axis=0)
    st[kernel.ST_SAT_ANY] = float(result.saturated.any())
    st[kernel.ST_FINAL:kernel.ST_FINAL + 8] = result.final_state
    return st


def _python_figures(args) -> np.ndarray:
    """Process-pool worker: one run on the Python path, as kernel figures."""
    scenario, duration = args
    return _figures(run_closed_loop_python(scenario, duration))


def _group_key(scenario: Scenario, n: int) -> str:
    """Return the key of runs that share references, noise and timing (one kernel batch)."""
    return json.dumps([scenario.control_rate, n, scenario.late_window_start,
                       scenario.trajectory, dataclasses.asdict(scenario.plant.sensors)],
                      sort_keys=True, default=_plain_json)


def _plain_json(value):
    """Return JSON-able data for values json does not know (numpy arrays and scalars)."""
    if hasattr(value, 'tolist'):
        return value.tolist()
    raise TypeError(f'cannot compare trajectory values of type {type(value).__name__}')


def run_batch(scenarios: Sequence[Scenario], duration: float | None = None,
              jobs: int | None = None, progress: Callable[[int, int], None] | None = None,
              engine: str = 'auto') -> BatchResult:
    """
    Simulate many scenarios (parameter sets) at once, on ``jobs`` cores.

    Each run is the closed loop of :func:`run_closed_loop` for its scenario, and its
    figures are exactly those :func:`summarize` computes from that run (late window of
    :func:`late_window`; the returned scenarios carry its start; the kernel
    accumulates them tick by tick; sums may differ from numpy's in the last bits). Runs
    that share the trajectory, rate, duration and sensors share one precomputed reference
    and noise sequence; the kernel runs in threads that release the GIL. Scenarios the
    kernel does not support (or ``engine='python'``) run on the Python path in processes.

    Parameters
    ----------
    scenarios : sequence of Scenario
        The parameter sets (true arm, friction, motors, nominal model, gains, ...).
    duration : float, optional
        Simulated time of every run [s] (default: each scenario's).
    jobs : int, optional
        Threads / processes (default: the number of CPUs, at most 8).
    progress : callable, optional
        ``progress(done, total)`` is called from the calling thread as runs finish.
    engine : str
        ``'auto'``, ``'kernel'`` or ``'python'`` (see :func:`run_closed_loop`).

    Returns
    -------
    BatchResult

    """
    from manip_control import kernel    # numba: about 1 s to import
    _check_engine(engine)
    scenarios = list(scenarios)
    total = len(scenarios)
    jobs = max(1, int(jobs or min(8, os.cpu_count() or 1)))
    stats = np.zeros((total, kernel.ST_SIZE))
    ticks = np.array([int(round((sc.duration if duration is None else duration) / sc.period))
                      for sc in scenarios], dtype=np.int64)
    # the late window of summarize(): whole periods of the reference
    scenarios = [_with_late_window(sc, int(n) * sc.period) for sc, n in zip(scenarios, ticks)]
    fast = [i for i, sc in enumerate(scenarios) if use_kernel(sc, engine)]
    slow = sorted(set(range(total)) - set(fast))
    done = 0

    def report(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    if progress is not None:
        progress(0, total)
    groups: dict[str, list[int]] = {}
    for i in fast:
        groups.setdefault(_group_key(scenarios[i], int(ticks[i])), []).append(i)
    tasks = []
    for idx in groups.values():
        shared = kernel.Packed(scenarios[idx[0]], duration)
        x0s = np.array([initial_state(scenarios[i].plant) for i in idx])
        plants = np.array([kernel.pack_plant(scenarios[i].plant, scenarios[i].period)
                           for i in idx])
        ctrls = np.array([kernel.pack_controller(scenarios[i].controller, scenarios[i].period)
                          for i in idx])
        size = max(1, min(16, len(idx) // (20 * jobs)))
        for a in range(0, len(idx), size):
            sel = idx[a:a + size]
            tasks.append((sel, x0s[a:a + size], plants[a:a + size], ctrls[a:a + size],
                          shared))
    if tasks:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(kernel.closed_loop_many, x0, pl, ct, sh): sel
                       for sel, x0, pl, ct, sh in tasks}
            for fut in as_completed(futures):
                stats[futures[fut]] = fut.result()
                report(len(futures[fut]))
    if slow:
        work = [(scenarios[i], duration) for i in slow]
        if jobs <= 1 or len(slow) == 1:
            for i, w in zip(slow, work):
                stats[i] = _python_figures(w)
                report(1)
        else:
            ctx = multiprocessing.get_context('spawn')
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                for i, st in zip(slow, pool.map(_python_figures, work)):
                    stats[i] = st
                    report(1)
    late_n = np.maximum(stats[:, kernel.ST_LATE_N], 1.0)[:, None]
    period = np.array([sc.period for sc in scenarios])[:, None]

    def pair(a: int) -> np.ndarray:
        return stats[:, a:a + 2].copy()

    return BatchResult(
        scenarios=scenarios,
        late_max_error=pair(kernel.ST_LATE_MAX1),
        late_rms_error=np.sqrt(pair(kernel.ST_LATE_SQ1) / late_n),
        max_error_whole_run=pair(kernel.ST_MAX1),
        peak_torque_cmd=pair(kernel.ST_TAU_MAX1),
        rms_torque_cmd=np.sqrt(pair(kernel.ST_TAU_SQ1) / np.maximum(ticks, 1)[:, None]),
        peak_current=pair(kernel.ST_I_MAX1),
        peak_voltage=pair(kernel.ST_V_MAX1),
        saturation_time=pair(kernel.ST_SAT1) * period,
        saturated=stats[:, kernel.ST_SAT_ANY] != 0.0,
        final_state=stats[:, kernel.ST_FINAL:kernel.ST_FINAL + 8].copy(),
        n_ticks=ticks)


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
