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
Monte Carlo robustness of computed-torque tracking against nominal-model errors.

Each run draws relative errors ``delta ~ U[-s, s]`` for the nominal ``m1, m2, I1, I2`` (the
lengths, CoM distances, rotor inertia and friction are the plant's), simulates the scenario
offline and records the late-window maximum tracking error ``max |q - q_d|``. Runs are
seeded (``numpy.random.SeedSequence``) and simulated together by
:func:`manip_control.simulation.run_batch` (the compiled kernel on every core); the same
parameter draws are used for every gain set.

ISS-style prediction. With computed torque ``tau = M^ v + c^ + g^`` and
``v = qdd_d - Kd e_dot - Kp e``, the error obeys per joint::

    e_dd + kd e_dot + kp e = eta,   eta = M^-1 (M~ v + c~ + g~),   (~ = nominal - true)

so ``e`` is a stable second-order filter ``h(s) = 1 / (s^2 + kd s + kp)`` of ``eta`` and after
the transient ``|e_j| <= ||h_j||_1 sup |eta_j|``. ``||h||_1`` is computed from the impulse
response (``1 / kp`` for ``zeta >= 1``). Evaluating ``eta`` along the reference (``q = q_d``,
``v = qdd_d``, first order in the error) gives the predicted bound of each run: linear in the
size of the parameter errors, and divided by ``S^2`` when the gains are scaled to
``wn -> S wn`` (``kp -> S^2 kp``, ``kd -> S kd``).

The prediction covers the inertial mismatch only: with a motor plant (e.g. ``--scenario
default``) the drives' gear losses, which no nominal model here compensates, add a tracking
error of their own, and the measured/predicted ratio exceeds 1 at small mismatch.

``manip-robustness`` shows a progress bar on stderr (when it is a terminal; ``--quiet``
hides it), prints a table (per gain set and mismatch level: runs, median and max
late-window error, max predicted bound, measured/predicted ratio) and writes
``robustness.png`` (error and bound vs mismatch size, two gain sets) and ``robustness.csv``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
from dataclasses import dataclass
import functools
import math
from pathlib import Path
import sys
import time
from typing import Callable, Sequence, TextIO

from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import ControllerParameters
from manip_control.parameters import load_scenario
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
from manip_control.parameters import Scenario
from manip_control.plant import plant_model
from manip_control.trajectories import trajectory_from_config
import numpy as np

PERTURBED = ('m1', 'm2', 'I1', 'I2')
DEFAULT_LEVELS = (0.05, 0.1, 0.15, 0.2)
DEFAULT_RUNS = 10
DEFAULT_GAIN_SCALE = 2.0


@dataclass(frozen=True)
class RunSpec:
    """One Monte Carlo run: gain set, level and relative errors of :data:`PERTURBED`."""

    gain_set: str
    level: float
    index: int
    delta: tuple
    kp: tuple
    kd: tuple

    @property
    def mismatch(self) -> float:
        """Size of the parameter error ``max |delta|``."""
        return float(np.max(np.abs(self.delta)))


@dataclass
class RunResult:
    spec: RunSpec
    error: tuple
    """Late-window max |e| per joint [rad]."""
    predicted: tuple
    """ISS-style predicted bound per joint [rad]."""
    saturated: bool


def perturbed_nominal(scenario: Scenario, delta: Sequence[float]) -> NominalModel:
    """
    Return the plant's true model with ``m1, m2, I1, I2`` scaled by ``1 + delta``.

    Lengths, CoM distances, friction, rotor inertia and rotor coupling are the plant's.
    """
    plant = scenario.plant
    arm = plant.arm
    values = {name: getattr(arm, name) * (1.0 + d) for name, d in zip(PERTURBED, delta)}
    return NominalModel(arm=dataclasses.replace(arm, **values), friction=plant.friction,
                        rotor_inertia=plant.reflected_inertia,
                        rotor_coupling=bool(plant.rotor_inertia and plant.rotor_coupling),
                        gear_ratio=tuple(float(m.N) for m in plant.motors))


@functools.lru_cache(maxsize=64)
def h_l1_norm(kp: float, kd: float) -> float:
    """``||h||_1`` of ``h(s) = 1 / (s^2 + kd s + kp)`` (= 1/kp when critically/overdamped)."""
    zeta = kd / (2.0 * math.sqrt(kp))
    if zeta >= 1.0:
        return 1.0 / kp
    wn = math.sqrt(kp)
    wd = wn * math.sqrt(1.0 - zeta * zeta)
    t = np.linspace(0.0, 40.0 / (zeta * wn), 400001)
    h = np.exp(-zeta * wn * t) * np.sin(wd * t) / wd
    return float(np.sum(np.abs(h)) * (t[1] - t[0]))


def predicted_bound(scenario: Scenario, nominal: NominalModel, kp, kd,
                    n_samples: int = 2000, reference=None) -> np.ndarray:
    """
    Per-joint ISS-style bound ``||h_j||_1 max_t |eta_j(t)|`` along the reference [rad].

    ``eta = M^-1 (M~ qdd_d + c~ + g~)`` at ``q = q_d``, ``qd = qd_d`` over the late window.
    ``reference`` may pass the samples ``(q, qd, qdd)`` of :func:`late_reference` (they
    depend on the scenario only).
    """
    plant = scenario.plant
    true = plant_model(plant)
    nom = TwoLinkModel(nominal.arm, nominal.rotor_inertia, nominal.rotor_coupling_terms)
    q, qd, qdd = late_reference(scenario, n_samples) if reference is None else reference
    eta = _mismatch_acceleration(nom, true, q, qd, qdd)
    norms = np.array([h_l1_norm(float(kp[j]), float(kd[j])) for j in range(2)])
    return norms * np.abs(eta).max(axis=0)


def late_reference(scenario: Scenario, n_samples: int = 2000):
    """``(q_d, qd_d, qdd_d)`` at ``n_samples`` times over the late window, shapes (n, 2)."""
    from manip_control.simulation import late_window
    traj = trajectory_from_config(dict(scenario.trajectory), 2)
    window = late_window(scenario)
    t = np.linspace(window.start, window.end, n_samples)
    return traj.sample_many(t)


def _matrices(m: TwoLinkModel, q, qd):
    """M (N, 2, 2), c (N, 2), g (N, 2) of the closed form, vectorised over samples."""
    c2, s2 = np.cos(q[:, 1]), np.sin(q[:, 1])
    m12 = m.d12 + m.b * c2
    mm = np.empty((len(q), 2, 2))
    mm[:, 0, 0] = m.a + 2.0 * m.b * c2
    mm[:, 0, 1] = mm[:, 1, 0] = m12
    mm[:, 1, 1] = m.d22
    h = -m.b * s2
    c = np.column_stack([h * (2.0 * qd[:, 0] * qd[:, 1] + qd[:, 1] ** 2), -h * qd[:, 0] ** 2])
    c12 = np.cos(q[:, 0] + q[:, 1])
    g = np.column_stack([m.g1 * np.cos(q[:, 0]) + m.g2 * c12, m.g2 * c12])
    return mm, c, g


def _mismatch_acceleration(nom: TwoLinkModel, true: TwoLinkModel, q, qd, qdd) -> np.ndarray:
    """``eta = M^-1 (M~ qdd + c~ + g~)`` per sample, shape (N, 2)."""
    m_n, c_n, g_n = _matrices(nom, q, qd)
    m_t, c_t, g_t = _matrices(true, q, qd)
    rhs = np.einsum('nij,nj->ni', m_n - m_t, qdd) + (c_n - c_t) + (g_n - g_t)
    return np.linalg.solve(m_t, rhs[..., None])[..., 0]


def run_scenario(scenario: Scenario, nominal: NominalModel, kp, kd) -> Scenario:
    """``scenario`` with the controller's nominal model and gains replaced."""
    ctrl = dataclasses.replace(scenario.controller, nominal=nominal, kp=tuple(kp),
                               kd=tuple(kd))
    return dataclasses.replace(scenario, controller=ctrl)


def single_run(scenario: Scenario, nominal: NominalModel, kp, kd) -> tuple:
    """
    One run on its own (:func:`run_closed_loop`): late-window max |e| per joint, saturated.

    The study computes the same figures for all runs at once with
    :func:`manip_control.simulation.run_batch`; this is the one-run reference.
    """
    from manip_control.simulation import late_window
    from manip_control.simulation import run_closed_loop
    result = run_closed_loop(run_scenario(scenario, nominal, kp, kd))
    late = result.t >= late_window(scenario).start
    err = np.abs(result.error[late]).max(axis=0)
    return tuple(float(e) for e in err), bool(result.saturated.any())


def gain_sets(controller: ControllerParameters, scale: float) -> dict[str, tuple]:
    """Gain set ``A`` (the scenario's) and ``B`` (``wn`` scaled by ``scale``)."""
    kp, kd = tuple(controller.kp), tuple(controller.kd)
    return {'A': (kp, kd),
            'B': (tuple(scale * scale * k for k in kp), tuple(scale * k for k in kd))}


def make_specs(levels: Sequence[float], runs: int, seed: int,
               gains: dict[str, tuple]) -> list[RunSpec]:
    """All runs: for each level and run index one seeded draw, shared by all gain sets."""
    specs = []
    for li, level in enumerate(levels):
        for r in range(runs):
            rng = np.random.default_rng(np.random.SeedSequence([seed, li, r]))
            delta = tuple(float(x) for x in rng.uniform(-level, level, len(PERTURBED)))
            for name, (kp, kd) in gains.items():
                specs.append(RunSpec(name, float(level), r, delta, kp, kd))
    return specs


def run_study(scenario: Scenario, levels: Sequence[float] = DEFAULT_LEVELS,
              runs: int = DEFAULT_RUNS, seed: int = 0, jobs: int | None = None,
              gain_scale: float = DEFAULT_GAIN_SCALE,
              progress: Callable[[int, int], None] | None = None) -> list[RunResult]:
    """
    Run the Monte Carlo study (see the module docstring); deterministic for a seed.

    Parameters
    ----------
    scenario : Scenario
        Computed-torque scenario; its plant is the truth around which the nominal is drawn.
    levels : sequence of float
        Mismatch levels ``s`` in (0, 1): relative errors drawn from ``U[-s, s]``.
    runs : int
        Runs per level (and per gain set).
    seed : int
        Base seed.
    jobs : int, optional
        Threads running the compiled kernel, or processes on the Python path (default:
        number of CPUs, at most 8). Results do not depend on it.
    gain_scale : float
        ``S`` of gain set B (``wn -> S wn``).
    progress : callable, optional
        ``progress(done, total)`` as runs finish.

    """
    from manip_control.simulation import run_batch

    if scenario.controller.law != 'computed_torque':
        raise ParameterError('controller.law: the robustness study needs computed_torque '
                             f'(got {scenario.controller.law})')
    if not levels or any(not 0.0 < s < 1.0 for s in levels):
        raise ParameterError(f'levels: each must be in (0, 1) (got {list(levels)})')
    if runs < 1:
        raise ParameterError(f'runs: must be >= 1 (got {runs})')
    if not gain_scale > 0.0:
        raise ParameterError(f'gain_scale: must be > 0 (got {gain_scale})')
    if jobs is not None and jobs < 1:
        raise ParameterError(f'jobs: must be >= 1 (got {jobs})')
    specs = make_specs(levels, runs, seed, gain_sets(scenario.controller, gain_scale))
    nominals = [perturbed_nominal(scenario, s.delta) for s in specs]
    batch = run_batch([run_scenario(scenario, nm, s.kp, s.kd)
                       for s, nm in zip(specs, nominals)], jobs=jobs, progress=progress)
    reference = late_reference(scenario)
    results = []
    for i, (spec, nm) in enumerate(zip(specs, nominals)):
        pred = predicted_bound(scenario, nm, spec.kp, spec.kd, reference=reference)
        results.append(RunResult(spec, tuple(float(e) for e in batch.late_max_error[i]),
                                 tuple(float(p) for p in pred), bool(batch.saturated[i])))
    return results


class ProgressBar:
    """
    A one-line progress bar ``[#####.....] done/total runs, elapsed, ETA`` on a stream.

    Silent when ``enabled`` is false or the stream is not a terminal. Use as
    ``progress(done, total)`` and call :meth:`close` at the end.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool = True,
                 width: int = 30, min_interval: float = 0.1):
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, 'isatty', None)
        self.enabled = bool(enabled and isatty is not None and isatty())
        self.width = width
        self.min_interval = min_interval
        self._t0 = time.perf_counter()
        self._last = -math.inf
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        """Redraw for ``done`` of ``total`` runs (throttled to ``min_interval``)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if done < total and now - self._last < self.min_interval:
            return
        self._last = now
        elapsed = now - self._t0
        frac = done / total if total else 1.0
        fill = int(round(frac * self.width))
        eta = f', ETA {elapsed / frac - elapsed:4.0f} s' if 0 < done < total else ''
        self.stream.write(f'\r[{"#" * fill}{"." * (self.width - fill)}] {done}/{total} runs, '
                          f'{elapsed:5.1f} s{eta}   ')
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the bar's line."""
        if self._shown:
            self.stream.write('\n')
            self.stream.flush()
            self._shown = False


@dataclass
class LevelSummary:
    gain_set: str
    level: float
    runs: int
    median_error: float
    max_error: float
    max_predicted: float

    @property
    def ratio(self) -> float:
        """Measured max / predicted max (<= 1 when the prediction bounds the runs)."""
        return self.max_error / self.max_predicted if self.max_predicted > 0 else math.inf


def summarize(results: Sequence[RunResult]) -> list[LevelSummary]:
    """Per gain set and level: median / max of ``max_j e_j`` and max predicted bound."""
    out = []
    keys = sorted({(r.spec.gain_set, r.spec.level) for r in results})
    for gs, level in keys:
        sel = [r for r in results if r.spec.gain_set == gs and r.spec.level == level]
        err = np.array([max(r.error) for r in sel])
        pred = np.array([max(r.predicted) for r in sel])
        out.append(LevelSummary(gs, level, len(sel), float(np.median(err)), float(err.max()),
                                float(pred.max())))
    return out


def format_table(summary: Sequence[LevelSummary], gains: dict[str, tuple]) -> str:
    lines = [f'{"gains":<24} {"mismatch":>8} {"runs":>5} {"median |e|":>11} {"max |e|":>10} '
             f'{"bound":>10} {"max/bound":>9}']
    for s in summary:
        kp, kd = gains[s.gain_set]
        label = f'{s.gain_set} kp={"/".join(f"{k:g}" for k in kp)} ' \
                f'kd={"/".join(f"{k:g}" for k in kd)}'
        lines.append(f'{label:<24} {100 * s.level:7.1f}% {s.runs:5d} {s.median_error:11.4g} '
                     f'{s.max_error:10.4g} {s.max_predicted:10.4g} {s.ratio:9.2f}')
    return '\n'.join(lines)


def write_csv(path: Path, results: Sequence[RunResult]) -> None:
    with path.open('w', newline='') as fh:
        w = csv.writer(fh)
        w.writerow(['gain_set', 'level', 'run', *[f'delta_{n}' for n in PERTURBED],
                    'mismatch', 'error_joint1', 'error_joint2', 'bound_joint1', 'bound_joint2',
                    'saturated'])
        for r in results:
            s = r.spec
            w.writerow([s.gain_set, s.level, s.index, *[f'{d:.6g}' for d in s.delta],
                        f'{s.mismatch:.6g}', *[f'{e:.6g}' for e in r.error],
                        *[f'{p:.6g}' for p in r.predicted], int(r.saturated)])


def plot(path: Path, results: Sequence[RunResult], gains: dict[str, tuple],
         title: str) -> None:
    """
    Plot the late-window error and predicted bound vs mismatch size to a PNG.

    Dots: error per run; rings: predicted bound per run; per gain set, with the per-level
    maxima joined by lines.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    colours = {'A': 'tab:blue', 'B': 'tab:red'}
    for gs, (kp, kd) in gains.items():
        sel = [r for r in results if r.spec.gain_set == gs]
        if not sel:
            continue
        c = colours.get(gs, None)
        x = np.array([100 * r.spec.mismatch for r in sel])
        ax.plot(x, [max(r.error) for r in sel], 'o', ms=4, color=c, alpha=0.6)
        ax.plot(x, [max(r.predicted) for r in sel], 'o', ms=6, mfc='none', color=c, alpha=0.5)
        levels = sorted({r.spec.level for r in sel})
        emax = [max(max(r.error) for r in sel if r.spec.level == lv) for lv in levels]
        pmax = [max(max(r.predicted) for r in sel if r.spec.level == lv) for lv in levels]
        lv = [100 * v for v in levels]
        gl = f'kp={"/".join(f"{k:g}" for k in kp)}, kd={"/".join(f"{k:g}" for k in kd)}'
        ax.plot([0] + lv, [0] + emax, '-', color=c, label=f'{gs} ({gl}): max measured')
        ax.plot([0] + lv, [0] + pmax, '--', color=c, label=f'{gs}: max predicted bound')
    ax.set_xlabel('nominal-parameter error  max |delta| over m1, m2, I1, I2  [%]')
    ax.set_ylabel('late-window max |q - q_d|  [rad]')
    ax.set_title(title)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc='upper left')
    fig.text(0.01, 0.01, 'dots: measured per run; rings: ISS-style bound '
             '||h||_1 max|eta| per run', fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _levels(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(',') if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f'not a comma-separated list of numbers: {text!r}')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='manip-robustness',
        description='Monte Carlo over nominal-parameter errors (m1, m2, I1, I2 ~ U[-s, s] '
                    'relative) for computed-torque tracking: late-window error vs the '
                    'ISS-style bound, for the scenario gains and scaled gains.')
    p.add_argument('--scenario', default='seed001', metavar='NAME|FILE',
                   help='computed-torque scenario; its plant is the truth (default seed001)')
    p.add_argument('--levels', type=_levels, default=list(DEFAULT_LEVELS),
                   help='mismatch levels s, comma-separated (default 0.05,0.1,0.15,0.2)')
    p.add_argument('--runs', type=int, default=DEFAULT_RUNS,
                   help=f'runs per level and gain set (default {DEFAULT_RUNS})')
    p.add_argument('--seed', type=int, default=0, help='base seed (default 0)')
    p.add_argument('--jobs', type=int, default=None,
                   help='parallel workers (default: CPU count, at most 8)')
    p.add_argument('--gain-scale', type=float, default=DEFAULT_GAIN_SCALE,
                   help='gain set B scales wn by this (kp by its square; default 2)')
    p.add_argument('--out', default='robustness', metavar='DIR',
                   help='output directory for robustness.png and robustness.csv '
                        '(default ./robustness)')
    p.add_argument('--quiet', action='store_true',
                   help='no progress bar (it is shown only when stderr is a terminal)')
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``manip-robustness`` entry point; returns the exit code (2 on any error)."""
    args = build_parser().parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
        if args.jobs is not None and args.jobs < 1:
            raise ParameterError(f'--jobs: must be >= 1 (got {args.jobs})')
        gains = gain_sets(scenario.controller, args.gain_scale)
        n = len(args.levels) * args.runs * len(gains)
        print(f'{scenario.name}: {n} runs ({args.runs} per level and gain set), '
              f'{scenario.duration:g} s each, late window from {scenario.late_window_start:g} s')
        t0 = time.perf_counter()
        bar = ProgressBar(sys.stderr, enabled=not args.quiet)
        try:
            results = run_study(scenario, args.levels, args.runs, args.seed, args.jobs,
                                args.gain_scale, progress=bar)
        finally:
            bar.close()
        elapsed = time.perf_counter() - t0
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_csv(out / 'robustness.csv', results)
            plot(out / 'robustness.png', results, gains,
                 f'{scenario.name}: computed torque under nominal-parameter error')
        except OSError as exc:
            raise ParameterError(f'{out}: cannot write ({exc.strerror})') from None
        print(format_table(summarize(results), gains))
        sat = sum(r.saturated for r in results)
        if sat:
            print(f'note: {sat} runs hit the torque limit (the bound assumes no saturation)')
        print(f'{n} runs in {elapsed:.1f} s; wrote {out / "robustness.png"}, '
              f'{out / "robustness.csv"}')
    except ParameterError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
