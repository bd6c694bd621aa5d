#!/usr/bin/env python3
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
Identification of a URDF arm, closed loop: record -> identify -> re-run, measured.

The arm is the Panda fixture (7 joints, fingers locked). The *true* arm differs from the
URDF (the *nominal* model) by a fixed seed: each body's mass and its rotational inertia about
the centre of mass scaled by independent factors in U[0.8, 1.2] (centres of mass kept), the
armature (0.1 kg m^2 nominal) and the viscous / Coulomb friction of every joint (nominal 0.5
N m s/rad and 0.8 N m on joints 1-4, 0.2 and 0.3 on 5-7; smoothing eps 0.02 rad/s, known)
by U[0.8, 1.2]. The plant is :class:`manip_control.arm_plant.ArmPlant` with ideal torque
actuators (clamped to the URDF efforts), RK4 with 2 sub-steps at 1 kHz.

1. **Record**: computed torque with the nominal model (rigid body + nominal friction fed
   forward, kp = wn^2, kd = 2 wn, wn = 10 rad/s) tracks an excitation trajectory
   (:func:`manip_control.arm_identification.excitation_trajectory`: 5 harmonics of
   1 / 10 s, inside the URDF position limits with 10 % margins and half the velocity limits,
   |qdd| <= 3 rad/s^2) for ``--duration`` s; the ideal measurements and the applied torque
   are written as ``/joint_states`` to an MCAP bag with the URDF on ``/robot_description``,
   with the package plant's contract: the effort stamped ``t_k`` is the command held over
   the period before it, ``u_(k-1)``.
2. **Identify** from the bag (:func:`identify_arm` with ``torque_offset = -T/2``, zero-phase
   filter ``--cutoff`` Hz, default 20) and write the identified URDF + parameters file;
   compare the estimated base parameters with the true arm's base combination.
3. **Re-run** computed torque on the true arm along another excitation (seed + 1, one
   period) with the nominal model and with the identified one (loaded back from the written
   files): tracking-error RMS and max per joint, and their ratio; and with the true model
   (the floor that sampling and the zero-order hold leave).
4. **Noisy data**: the same recording with white noise added to the bag (position 1e-5 rad,
   velocity 0.005 rad/s, torque 0.05 N m), identified with a ``--noisy-cutoff`` (default
   5 Hz) filter; the estimates with their standard errors, and how many of the true base
   parameters lie within 2 standard errors. With ``--noise-seeds K`` the same recording
   with K noise draws: the coverage over all draws, the scatter of the estimates against the
   mean reported standard error, and the bias of their mean in standard errors.

    .venv/bin/python bench/bench_identify_arm.py [--duration 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import sys
import tempfile
import time

from manip_control import arm_identification as ai
from manip_control.arm_model import UrdfArm
from manip_control.arm_plant import ArmPlant
from manip_control.arm_plant import run_arm_closed_loop
from manip_control.control import Controller
from manip_control.control import controller_parameters
from manip_control.identification import read_joint_states
from manip_control.parameters import FrictionParameters
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PANDA = ROOT / '..' / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
EPS = 0.02
ARMATURE = 0.1
FV = np.array([0.5] * 4 + [0.2] * 3)
FC = np.array([0.8] * 4 + [0.3] * 3)
WN = 10.0
NOISE = {'q': 1e-5, 'qd': 0.005, 'tau': 0.05}


def true_arm(seed: int = 7, level: float = 0.2):
    """Return the perturbed Panda (UrdfArm) and its friction (fv, fc) and armature."""
    rng = np.random.default_rng(seed)
    armature = ARMATURE * rng.uniform(1 - level, 1 + level, 7)
    arm = UrdfArm.from_file(PANDA, armature=armature)
    f = rng.uniform(1 - level, 1 + level, (arm.n, 2))       # (mass, inertia) per body
    arm = arm.with_inertial_scale(f[:, 0], f[:, 1])
    fv = FV * rng.uniform(1 - level, 1 + level, 7)
    fc = FC * rng.uniform(1 - level, 1 + level, 7)
    return arm, fv, fc, armature


def nominal_model():
    """Return the URDF as it is, with the nominal armature and friction (a FrictionArm)."""
    return ai.FrictionArm(UrdfArm.from_file(PANDA, armature=ARMATURE), FV, FC, EPS)


def plant_of(arm, fv, fc):
    """Return the simulated true arm: ideal actuators, smooth friction, RK4 x 2."""
    friction = [FrictionParameters(b=float(b), tau_c=float(c), eps=EPS) for b, c in zip(fv, fc)]
    return ArmPlant(arm, friction=friction, motors=None, substeps=2)


def excitation(base, seed: int):
    """Return the excitation of the study (see the module docstring)."""
    return ai.excitation_trajectory(base, period=10.0, harmonics=5, position_margin=0.1,
                                    velocity_fraction=0.5, acceleration_limit=3.0,
                                    candidates=10, samples=400, seed=seed)


def computed_torque(plant, model) -> Controller:
    """Return computed torque (``wn = WN``, critical damping) on ``model``, no feed-forward."""
    return Controller(controller_parameters(model, WN ** 2 * np.ones(7), 2 * WN * np.ones(7),
                                            plant.torque_limit), 1e-3, model)


def tracking(plant, model, traj, duration: float):
    """Return (RMS per joint, max per joint) of the tracking error [rad]."""
    run = run_arm_closed_loop(plant, computed_torque(plant, model), traj, duration)
    e = run.error
    return np.sqrt(np.mean(e ** 2, axis=0)), np.max(np.abs(e), axis=0)


def study(duration: float = 20.0, out: Path | None = None, seed: int = 7,
          noisy: bool = True, verbose: bool = True, cutoff: float = 20.0,
          noisy_cutoff: float = 5.0, noise_seeds: int = 1) -> dict:
    """Run the study; returns the measured figures (see the module docstring)."""
    def say(*a):
        if verbose:
            print(*a, flush=True)
    out = Path(tempfile.mkdtemp(prefix='ident_arm_')) if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text = PANDA.read_text(encoding='utf-8')
    truth, fv, fc, armature = true_arm(seed)
    nominal = nominal_model()
    reg = ai.ArmRegressor(nominal.arm, eps=EPS)
    base = ai.base_parameters(reg)
    beta_true = base.of(reg.parameters(truth, fv=fv, fc=fc, armature=armature))
    beta_nominal = base.of(reg.parameters(fv=FV, fc=FC))
    plant = plant_of(truth, fv, fc)
    exc = excitation(base, seed)
    say(f'excitation: condition number {exc.condition_number:.3g} over one period, '
        f'peak nominal torque {np.array2string(exc.peak_torque, precision=1)} N m')
    t0 = time.perf_counter()
    run = run_arm_closed_loop(plant, computed_torque(plant, nominal), exc.trajectory, duration)
    say(f'recorded {duration:g} s in {time.perf_counter() - t0:.1f} s wall; saturated '
        f'ticks: {int(np.sum(np.abs(run.tau) >= plant.torque_limit - 1e-9))}')
    bag = out / 'excitation_bag'
    # the plant's /joint_states contract: the effort at t_k is u_(k-1) (from tick 1 on)
    rec = (run.t[1:], run.q[1:], run.qd[1:], run.tau[:-1])
    ai.write_arm_bag(bag, rec[0], nominal.joint_names, *rec[1:], description=text)
    data = read_joint_states(bag, nominal.joint_names)
    half = -0.5 * float(np.median(np.diff(data.t)))
    t0 = time.perf_counter()
    ident = ai.identify_arm(base, data.t, data.q, data.qd, data.tau, cutoff_hz=cutoff,
                            torque_offset=half)
    say(f'identified from {bag.name} in {time.perf_counter() - t0:.1f} s: '
        f'{base.rank} base parameters, condition number {ident.fit.condition_number:.3g}, '
        f'relative residual max {np.max(ident.fit.relative_residual):.2e}')
    beta = ident.fit.estimate
    scale = np.linalg.norm(beta_true)
    rel = np.abs(beta - beta_true) / np.abs(beta_true)
    big = np.abs(beta_true) > 1e-3 * np.max(np.abs(beta_true))
    figures = {
        'base_rank': base.rank,
        'condition_number': ident.fit.condition_number,
        'beta_error_norm': float(np.linalg.norm(beta - beta_true) / scale),
        'beta_nominal_error_norm': float(np.linalg.norm(beta_nominal - beta_true) / scale),
        'beta_error_max_rel': float(np.max(rel[big])),
        'beta_error_median_rel': float(np.median(rel[big])),
        'beta_error_max_abs_small': float(np.max(np.abs(beta - beta_true)[~big]) / scale)
        if np.any(~big) else 0.0,
        'significant': int(np.sum(big)),
    }
    say(f'base parameters vs truth: ||error|| / ||beta|| = {figures["beta_error_norm"]:.2e} '
        f'(nominal model: {figures["beta_nominal_error_norm"]:.3f}); relative error of the '
        f'{figures["significant"]} parameters above 1e-3 of the largest: median '
        f'{figures["beta_error_median_rel"]:.2e}, max {figures["beta_error_max_rel"]:.2e}')
    # write the identified model and load it back
    prior = reg.parameters(fv=FV, fc=FC)
    pi = ai.complete_parameters(base, beta, prior, ai.urdf_fixed_parts(text, reg))
    urdf_out = out / 'panda_identified.urdf'
    urdf_out.write_text(ai.identified_urdf(text, reg, pi, 'bench_identify_arm'),
                        encoding='utf-8')
    import yaml
    urdf_out.with_suffix('.yaml').write_text(yaml.safe_dump(
        ai.model_yaml(reg, pi, ident, urdf_out.name, str(bag)), sort_keys=False),
        encoding='utf-8')
    identified = ai.load_identified_model(urdf_out.with_suffix('.yaml'))
    # re-run on another trajectory
    check = excitation(base, seed + 1)
    t0 = time.perf_counter()
    rms_nom, max_nom = tracking(plant, nominal, check.trajectory, check.period)
    rms_id, max_id = tracking(plant, identified, check.trajectory, check.period)
    perfect = ai.FrictionArm(truth, fv, fc, EPS)
    rms_true, max_true = tracking(plant, perfect, check.trajectory, check.period)
    figures.update({'rms_true_model': rms_true, 'max_true_model': max_true,
                    'rms_nominal': rms_nom, 'rms_identified': rms_id, 'max_nominal': max_nom,
                    'max_identified': max_id,
                    'rms_ratio': float(np.linalg.norm(rms_nom) / np.linalg.norm(rms_id)),
                    'max_ratio': float(np.max(max_nom) / np.max(max_id))})
    say(f're-run ({check.period:g} s, another excitation; {time.perf_counter() - t0:.1f} s '
        'wall):')
    fmt = {'float_kind': lambda v: f'{v:.2e}'}
    say(f'  RMS |e| nominal    [rad]: {np.array2string(rms_nom, formatter=fmt)}')
    say(f'  RMS |e| identified [rad]: {np.array2string(rms_id, formatter=fmt)}')
    say(f'  RMS |e| true model [rad]: {np.array2string(rms_true, formatter=fmt)} (the floor: '
        'sampling and zero-order hold)')
    say(f'  max |e| nominal {np.max(max_nom):.3g} rad, identified {np.max(max_id):.3g} rad, '
        f'true model {np.max(max_true):.3g} rad; '
        f'reduction: RMS (norm over joints) {figures["rms_ratio"]:.1f}x, max '
        f'{figures["max_ratio"]:.1f}x')
    if noisy:
        rng = np.random.default_rng(seed + 100)
        noisy_bag = out / 'excitation_noisy_bag'
        ai.write_arm_bag(noisy_bag, rec[0], nominal.joint_names,
                         rec[1] + rng.normal(0, NOISE['q'], rec[1].shape),
                         rec[2] + rng.normal(0, NOISE['qd'], rec[2].shape),
                         rec[3] + rng.normal(0, NOISE['tau'], rec[3].shape))
        data = read_joint_states(noisy_bag, nominal.joint_names)
        fit = ai.identify_arm(base, data.t, data.q, data.qd, data.tau,
                              cutoff_hz=noisy_cutoff, torque_offset=half).fit
        z = (fit.estimate - beta_true) / fit.std_error
        figures.update({'noisy_within_2se': float(np.mean(np.abs(z) <= 2.0)),
                        'noisy_median_abs_z': float(np.median(np.abs(z))),
                        'noisy_max_abs_z': float(np.max(np.abs(z))),
                        'noisy_error_norm': float(np.linalg.norm(fit.estimate - beta_true)
                                                  / scale),
                        'noisy_median_rel_se': float(np.median(
                            fit.std_error[big] / np.abs(fit.estimate[big])))})
        say(f'noisy bag (q {NOISE["q"]:g} rad, qd {NOISE["qd"]:g} rad/s, tau '
            f'{NOISE["tau"]:g} N m white): ||error|| / ||beta|| = '
            f'{figures["noisy_error_norm"]:.2e}; |estimate - truth| <= 2 std errors for '
            f'{100 * figures["noisy_within_2se"]:.0f} % of the {base.rank} parameters '
            f'(median |z| {figures["noisy_median_abs_z"]:.2f}, max '
            f'{figures["noisy_max_abs_z"]:.1f}); median relative std error '
            f'{figures["noisy_median_rel_se"]:.2e}')
        try:
            pi_n = ai.complete_parameters(base, fit.estimate, prior,
                                          ai.urdf_fixed_parts(text, reg))
            pi_n, notes = ai.clamp_joint_parameters(pi_n, nominal.joint_names)
            noisy_urdf = out / 'panda_identified_noisy.urdf'
            noisy_urdf.write_text(ai.identified_urdf(text, reg, pi_n), encoding='utf-8')
            n = reg.n
            model_n = ai.FrictionArm(UrdfArm.from_file(noisy_urdf, armature=pi_n[10 * n:11 * n]),
                                     pi_n[11 * n:12 * n], pi_n[12 * n:13 * n], EPS)
            rms_n, max_n = tracking(plant, model_n, check.trajectory, check.period)
            figures['noisy_rms_ratio'] = float(np.linalg.norm(rms_nom) / np.linalg.norm(rms_n))
            say(f'  re-run with the model identified from the noisy bag: max |e| '
                f'{np.max(max_n):.3g} rad; RMS reduction {figures["noisy_rms_ratio"]:.1f}x'
                + (f' ({"; ".join(notes)})' if notes else ''))
        except ai.ArmIdentificationError as exc:
            figures['noisy_rms_ratio'] = None
            say(f'  no model from the noisy bag: {exc}')
        if noise_seeds > 1:
            # the same recording, other noise draws (arrays; the bag round trip is exact)
            ests, ses = [fit.estimate], [fit.std_error]
            for k in range(1, noise_seeds):
                rng = np.random.default_rng(seed + 100 + k)
                f = ai.identify_arm(base, rec[0], rec[1] + rng.normal(0, NOISE['q'],
                                                                      rec[1].shape),
                                    rec[2] + rng.normal(0, NOISE['qd'], rec[2].shape),
                                    rec[3] + rng.normal(0, NOISE['tau'], rec[3].shape),
                                    cutoff_hz=noisy_cutoff, torque_offset=half).fit
                ests.append(f.estimate)
                ses.append(f.std_error)
            ests, ses = np.array(ests), np.array(ses)
            z = (ests - beta_true) / ses
            spread = np.std(ests, axis=0, ddof=1) / np.mean(ses, axis=0)
            bias = np.abs(np.mean(ests, axis=0) - beta_true) / np.mean(ses, axis=0)
            figures.update({'seeds_within_2se': float(np.mean(np.abs(z) <= 2.0)),
                            'seeds_spread_over_se': float(np.median(spread)),
                            'seeds_bias_over_se': float(np.median(bias)),
                            'seeds_bias_over_se_max': float(np.max(bias))})
            say(f'{noise_seeds} noise draws: {100 * figures["seeds_within_2se"]:.1f} % of '
                f'{ests.size} estimates within 2 std errors of the truth; scatter of the '
                f'estimates / mean reported std error: median {np.median(spread):.2f} '
                f'(range {np.min(spread):.2f}-{np.max(spread):.2f}); |mean - truth| / std '
                f'error: median {np.median(bias):.2f}, max {np.max(bias):.2f}')
    say(f'files in {out}')
    return figures


def main(argv=None) -> int:
    """Command line of the benchmark."""
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--duration', type=float, default=20.0, help='excitation run [s]')
    p.add_argument('--out', type=Path, default=None, help='directory for the bags and files')
    p.add_argument('--seed', type=int, default=7, help='seed of the true arm')
    p.add_argument('--cutoff', type=float, default=20.0, help='filter of the clean data [Hz]')
    p.add_argument('--noisy-cutoff', type=float, default=5.0,
                   help='filter of the noisy data [Hz]')
    p.add_argument('--noise-seeds', type=int, default=1,
                   help='noise draws on the same recording (coverage of the std errors)')
    args = p.parse_args(argv)
    print(f'load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} '
          f'{os.getloadavg()[2]:.2f} (1/5/15 min), {os.cpu_count()} cores')
    study(args.duration, args.out, args.seed, cutoff=args.cutoff,
          noisy_cutoff=args.noisy_cutoff, noise_seeds=args.noise_seeds)
    return 0


if __name__ == '__main__':
    sys.exit(main())
