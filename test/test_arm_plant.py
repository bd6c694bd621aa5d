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
The n-joint plant and offline loop against the 2R plant, per-joint functions and scipy.

References: :func:`manip_control.plant.plant_dynamics` (the 2R plant, tested on its own in
test_plant.py), the per-joint reference right-hand side :func:`arm_plant_dynamics`, and
scipy's DOP853 at rtol 1e-11 for the fixed-step integration.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from manip_control.arm_model import ArmModelError
from manip_control.arm_model import ArmShapeError
from manip_control.arm_model import TwoLinkArm
from manip_control.arm_model import UrdfArm
from manip_control.arm_plant import arm_plant_dynamics
from manip_control.arm_plant import ArmPlant
from manip_control.arm_plant import run_arm_closed_loop
from manip_control.control import Controller
from manip_control.control import controller_parameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import load_scenario
from manip_control.parameters import MotorParameters
from manip_control.parameters import ParameterError
from manip_control.plant import plant_dynamics
from manip_control.plant import rotor_matrix
from manip_control.trajectories import Sinusoid
from manip_control.urdf import urdf_from_scenario
import numpy as np
import pytest
from scipy.integrate import solve_ivp

pytest.importorskip('pinocchio')

PANDA = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'


def _computed_torque(plant: ArmPlant, model, kp, kd, period: float = 1e-3) -> Controller:
    """Return computed torque on ``model`` with the plant's torque limit, nothing fed forward."""
    return Controller(controller_parameters(model, kp, kd, plant.torque_limit), period, model)


def _panda(**kwargs) -> UrdfArm:
    if not PANDA.is_file():
        pytest.skip(f'fixture {PANDA} absent (shared/ must sit beside the project)')
    return UrdfArm.from_file(PANDA, **kwargs)


def _panda_motors(arm, eta=0.9, eta_back=0.8):
    """Motors sized so that the peak torque eta N k_t i_max is 1.2x the URDF effort limit."""
    out = []
    for effort in arm.limits.effort:
        k_t = 1.2 * effort / (eta * 100.0 * 10.0)
        out.append(MotorParameters(R=0.5, L=0.4e-3, k_t=k_t, k_e=k_t, N=100.0, eta=eta,
                                   Jm=2e-5, i_max=10.0, V_max=48.0, Kp_i=0.4 * 1885.0e-3,
                                   Ki_i=0.5 * 1885.0, eta_back=eta_back))
    return out


def _motor_arrays(motors) -> tuple:
    """Arrays N, k_t, k_e, R, L, i_max, V_max, Kp_i, Ki_i, k_f = 1 - eta, k_b = 1/eta_back - 1."""
    names = ('N', 'k_t', 'k_e', 'R', 'L', 'i_max', 'V_max', 'Kp_i', 'Ki_i', 'eta', 'eta_back')
    per_joint = [np.array([getattr(m, name) for m in motors]) for name in names]
    return (*per_joint[:9], 1.0 - per_joint[9], 1.0 / per_joint[10] - 1.0)


def _rel(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b)) / max(np.max(np.abs(b)), 1e-300))


def test_two_link_plant_equals_the_2r_plant():
    """
    Check ArmPlant on the 2R (closed form, generated URDF) against plant_dynamics.

    The default scenario's lossy gears (eta 0.85 both ways), charged on the mesh torque with
    rotors coupled: the implicit equation of both plants.
    """
    sc = load_scenario('default')
    p = sc.plant
    assert all(m.eta < 1.0 for m in p.motors) and p.rotor_coupling_terms[1] > 0.0
    closed = ArmPlant(TwoLinkArm.from_plant(p), p.friction, p.motors)
    urdf = ArmPlant(UrdfArm.from_string(urdf_from_scenario(sc), armature=p.reflected_inertia,
                                        rotor_coupling=True), p.friction, p.motors)
    assert closed._mesh and urdf._mesh
    np.testing.assert_array_equal(closed._rotor, rotor_matrix(p))
    np.testing.assert_allclose(urdf._rotor, rotor_matrix(p), rtol=1e-12, atol=0.0)
    rng = np.random.default_rng(1)
    for k in range(50):
        # half the states near rest, where the gear switches and the sign search works
        scale = 2.0 if k % 2 else 0.02
        x = np.concatenate((rng.uniform(-3, 3, 2), rng.uniform(-scale, scale, 2),
                            rng.uniform(-8, 8, 2), rng.uniform(-40, 40, 2)))
        u = rng.uniform(-100, 100, 2)
        ref = plant_dynamics(0.0, x, u, p)
        assert _rel(closed.rhs(x, u), ref) <= 1e-12
        assert _rel(arm_plant_dynamics(0.0, x, u, closed), ref) <= 1e-12
        assert _rel(urdf.rhs(x, u), ref) <= 1e-10


def test_vectorised_rhs_equals_the_per_joint_reference():
    arm = _panda(armature=0.05)
    fr = [FrictionParameters(b=0.3, tau_c=0.5, eps=0.02, tau_s=0.2, v_s=0.05)] * 7
    rng = np.random.default_rng(2)
    for motors in (_panda_motors(arm), None):
        plant = ArmPlant(arm, fr, motors)
        for _ in range(20):
            x = np.concatenate((rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 7),
                                rng.uniform(-12, 12, 7), rng.uniform(-60, 60, 7)))
            u = rng.uniform(-120, 120, 7)
            assert _rel(plant.rhs(x, u), arm_plant_dynamics(0.0, x, u, plant)) <= 1e-12


def test_rk4_step_against_scipy():
    """
    Fixed-step RK4 with the command held, against DOP853 at rtol 1e-11: fourth order.

    Lossless gears: the gear loss has a kink at i = 0 (actuators.py) that costs RK4 its order
    at each current reversal.
    """
    arm = _panda(armature=0.05)
    q0 = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.7])
    period, ticks = 1e-3, 200
    commands = [5.0 * np.sin(3e-3 * k + np.arange(7)) + arm.gravity(q0) for k in range(ticks)]
    errors = []
    for substeps in (4, 8):
        plant = ArmPlant(arm, [FrictionParameters(b=0.2, tau_c=0.3, eps=0.05)] * 7,
                         _panda_motors(arm, 1.0, 1.0), substeps=substeps, method='rk4')
        x = ref = plant.initial_state(q0)
        for k, u in enumerate(commands):
            x = plant.step(x, u, period)
            ref = solve_ivp(lambda _t, y: plant.rhs(y, u), (k * period, (k + 1) * period), ref,
                            method='DOP853', rtol=1e-11, atol=1e-11).y[:, -1]
        errors.append(np.abs(x - ref).reshape(4, 7).max(axis=1))
    assert errors[0][:2].max() <= 1e-6        # q [rad], qd [rad/s] at h = 0.25 ms
    assert np.all(errors[1] < errors[0] / 10.0), errors     # 2^4 = 16 for fourth order


def test_rk4_with_the_mesh_rule_is_fourth_order_where_smooth():
    """
    RK4 on the mesh rule (lossy gears 0.85 / 0.7, rotors) against Radau: fourth order.

    Commands 10 N·m above gravity keep every mesh torque of one sign over the 200 ticks (the
    loss's kink at ``T = 0`` is never crossed; checked), so the physics is smooth. Reference:
    Radau at rtol 1e-10, atol 1e-12 per period on ``rhs`` (itself held to the independent
    equations by test_lossy_gears_against_an_independent_reference). Measured when written:
    q 4.8e-7, 2.5e-8, 1.5e-9 rad at 4, 8, 16 sub-steps (ratios 19, 17; 2^4 = 16).
    """
    arm = _panda(armature=0.05)
    q0 = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.7])
    period, ticks = 1e-3, 200
    commands = [10.0 + 3.0 * np.sin(3e-3 * k + np.arange(7)) + arm.gravity(q0)
                for k in range(ticks)]
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.05)] * 7
    plants = [ArmPlant(arm, fr, _panda_motors(arm, 0.85, 0.7), substeps=sub, method='rk4')
              for sub in (4, 8, 16)]
    assert plants[0]._mesh
    ref = x0 = plants[0].initial_state(q0)
    signs = set()
    for k, u in enumerate(commands):
        ref = solve_ivp(lambda _t, y: plants[0].rhs(y, u), (0.0, period), ref, method='Radau',
                        rtol=1e-10, atol=1e-12).y[:, -1]
        mesh = plants[0]._ktn * ref[14:21] - 0.05 * plants[0].rhs(ref, u)[7:14]
        signs.add(tuple(np.sign(mesh)))
    assert len(signs) == 1, signs
    errors = []
    for plant in plants:
        x = x0
        for u in commands:
            x = plant.step(x, u, period)
        errors.append(np.abs(x[:7] - ref[:7]).max())
    assert errors[0] <= 1e-6, errors
    assert errors[0] / errors[1] > 12.0 and errors[1] / errors[2] > 12.0, errors


def test_energy_balance_with_the_mesh_rule():
    """
    Electrical in - copper - gear - friction = change of stored energy, on the Panda.

    Lossy gears (eta 0.8, eta_back 0.6), rotors, smooth friction; commands held 10 ms each
    that swing the arm both ways. The powers are written here: ``V i``, ``R i^2``, the gear
    loss ``tau_gear(T) qd`` with the mesh torque ``T = N k_t i - Jr qdd`` at the plant's
    accelerations, ``f qd``; stored: ``1/2 qd^T M qd + V(q) + 1/2 L i^2``. Integrated with
    the plant's rhs by Radau (rtol 1e-10, atol 1e-12). The loss charged on ``N k_t i`` does
    not balance. Measured when written: residual 1.9e-13 J (gear loss 0.264 J); with the
    loss on ``N k_t i`` 5.5e-2 J.
    """
    arm = _panda(armature=0.04)
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.02)] * 7
    motors = _panda_motors(arm, 0.8, 0.6)
    plant = ArmPlant(arm, fr, motors)
    assert plant._mesh
    N, k_t, _, R, L, i_max, v_max, kp_i, _, kf, kb = _motor_arrays(motors)
    assert all(m.k_e == m.k_t for m in motors)      # electromagnetic power = k_e N qd i

    def loss(mesh, s):
        return (0.5 * (kf + kb) * np.abs(mesh) + 0.5 * (kf - kb) * mesh * s) * s

    def power_rhs(u):
        def rhs(_t, y):
            x = y[:28]
            dx = plant.rhs(x, u)
            qd, i = x[7:14], x[14:21]
            i_ref = np.clip(u / (N * k_t), -i_max, i_max)
            volt = np.clip(kp_i * (i_ref - i) + x[21:], -v_max, v_max)
            s = np.tanh(qd / 0.02)
            nk = N * k_t * i
            mesh = nk - 0.04 * dx[7:14]
            return np.concatenate((dx, [volt @ i, R @ (i * i), loss(mesh, s) @ qd,
                                        loss(nk, s) @ qd, (0.2 * qd + 0.3 * s) @ qd]))
        return rhs

    def stored(y):
        return (arm.kinetic_energy(y[:7], y[7:14]) + arm.potential_energy(y[:7])
                + 0.5 * L @ (y[14:21] ** 2))

    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    y = np.concatenate((plant.initial_state(q0), np.zeros(5)))
    e0 = stored(y)
    effort = np.asarray(arm.limits.effort)
    worst = worst_old = 0.0
    for k in range(8):
        u = arm.gravity(q0) + 0.3 * effort * np.sin(1.3 * k + np.arange(7))
        y = solve_ivp(power_rhs(u), (0.0, 0.01), y, method='Radau', rtol=1e-10,
                      atol=1e-12).y[:, -1]
        e_el, e_cu, e_gear, e_old, e_fr = y[28:]
        worst = max(worst, abs(e_el - e_cu - e_gear - e_fr - (stored(y) - e0)))
        worst_old = max(worst_old, abs(e_el - e_cu - e_old - e_fr - (stored(y) - e0)))
    print(f'energy balance: worst residual {worst:.2e} J (loss on N k_t i: {worst_old:.2e} '
          f'J); gear loss {y[30]:.3f} J')
    assert y[30] > 0.05, y[28:]                     # the gear really lost energy
    assert worst < 1e-6, (worst, y[28:])
    assert worst_old > 1000.0 * worst, (worst, worst_old)


def test_2r_closed_loop_same_through_closed_form_and_urdf():
    """
    The offline loop on the 2R: closed-form and URDF models equal within 1e-9 rad.

    3 s of the default scenario's full motor plant (10 s pass too, at about 40x the time).
    """
    sc = load_scenario('default')
    p, nm = sc.plant, sc.controller.nominal
    traj = Sinusoid([0.5, 0.3], [0.5, 0.5])
    runs = []
    for kind in ('closed', 'urdf'):
        if kind == 'closed':
            true, nominal = TwoLinkArm.from_plant(p), TwoLinkArm.from_nominal(nm)
        else:
            true = UrdfArm.from_string(urdf_from_scenario(sc), armature=p.reflected_inertia,
                                       rotor_coupling=True)
            nominal = UrdfArm.from_string(urdf_from_scenario(sc, 'nominal'),
                                          armature=nm.rotor_inertia,
                                          gear_ratio=nm.gear_ratio, rotor_coupling=True)
        plant = ArmPlant(true, p.friction, p.motors)
        ctl = _computed_torque(plant, nominal, sc.controller.kp, sc.controller.kd)
        runs.append(run_arm_closed_loop(plant, ctl, traj, 3.0))
    assert np.abs(runs[0].q - runs[1].q).max() <= 1e-9
    assert np.abs(runs[0].error).max() > 1e-3        # the mass mismatch shows


def _2r_pd_run(plant, ticks=3000):
    """
    Run the 2R Plant and ``plant`` (HeldArmPlant) side by side; max |q difference| [rad].

    PD + gravity of the closed form from each plant's own state at the scenario's rate onto
    a sinusoid that reverses every joint, from the 2R plant's initial state.
    """
    from manip_control.arm_plant import HeldArmPlant
    from manip_control.plant import Plant
    sc = load_scenario('default')
    two = Plant(sc.plant, sc.period)
    held = HeldArmPlant(plant, sc.period, two.position)
    held._x = two.state.copy()
    model = TwoLinkArm.from_plant(sc.plant)
    traj = Sinusoid([0.6, 0.8], [1.0, 1.3], offset=np.array(two.position))
    kp, kd = np.array([400.0, 400.0]), np.array([40.0, 40.0])
    worst = 0.0
    for k in range(ticks):
        r, rv, _ = traj.sample(k * sc.period)
        for pl in (two, held):
            q, qd = np.array(pl.position), np.array(pl.velocity)
            pl.step(*(model.gravity(q) - kp * (q - r) - kd * (qd - rv)))
        worst = max(worst, float(np.abs(np.array(two.position) - held.position).max()))
    assert np.abs(np.array(two.velocity)).max() > 0.1
    return worst


def test_2r_through_its_urdf_equals_the_2r_plant_with_lossy_gears():
    """
    The 2R's generated URDF on ArmPlant against the 2R Plant (compiled kernel): 3 s, lossy.

    The default scenario's full motor plant (PI drives, gears of efficiency 0.85 charged on
    the mesh torque, coupled rotors, smooth friction), each plant under PD + gravity from its
    own state. With the 2R plant's integrator (RK4 x 4) the two agree to round-off (measured
    2.2e-16 rad); the default multirate step within its integration error (1.6e-7 rad; it is
    2.1e-8 from the 2R plant at 16 sub-steps). The former rule, the loss on ``N k_t i`` (the
    same plant with the mesh solve switched off), differs by 2.8e-4 rad.
    """
    sc = load_scenario('default')
    p = sc.plant
    assert p.actuator == 'motor' and p.friction_model == 'smooth'
    assert all(m.eta < 1.0 for m in p.motors) and p.rotor_coupling_terms[1] > 0.0
    arm = UrdfArm.from_string(urdf_from_scenario(sc), armature=p.reflected_inertia,
                              rotor_coupling=True)
    same = ArmPlant(arm, p.friction, p.motors, substeps=p.substeps, method='rk4')
    assert same._mesh
    assert _2r_pd_run(same) <= 1e-12
    plant = ArmPlant(arm, p.friction, p.motors)
    assert plant.method == 'multirate'
    assert _2r_pd_run(plant) <= 1e-6
    same._mesh = False                  # the former rule: far outside both tolerances
    assert _2r_pd_run(same) > 1e-4


def test_karnopp_stiction_through_the_2r_urdf_equals_the_2r_plant():
    """
    Karnopp stiction on ArmPlant (the 2R's generated URDF) against the 2R Plant's kernel.

    The default scenario's full motor plant (lossy gears on the mesh torque, coupled rotors)
    with ``friction_model: karnopp`` and Stribeck friction, driven from its own state by
    gravity plus sinusoids below and above the breakaway torques for 1.5 s: the joints stick
    (a velocity of exactly zero at a tick), break away and stop again. RK4 x 4 with the
    events located, both plants: measured when written, 1.1e-18 rad apart (the same count,
    over 100, of ticks with a stuck joint in each); the smooth friction model on the same
    URDF plant differs by 4.7e-4 rad. Karnopp with the multirate step is refused with one
    line.
    """
    from manip_control.arm_plant import HeldArmPlant
    from manip_control.plant import Plant
    sc = load_scenario('default')
    p = sc.plant
    fr = tuple(dataclasses.replace(f, tau_s=0.3, v_s=0.05) for f in p.friction)
    p = dataclasses.replace(p, friction_model='karnopp', friction=fr)
    arm = UrdfArm.from_string(urdf_from_scenario(sc), armature=p.reflected_inertia,
                              rotor_coupling=True)
    model = TwoLinkArm.from_plant(p)
    with pytest.raises(ArmModelError, match=r"^friction_model: 'karnopp' needs method 'rk4'"):
        ArmPlant(arm, fr, p.motors, method='multirate', friction_model='karnopp')
    with pytest.raises(ArmModelError, match=r"^friction_model: must be 'smooth' or 'karnopp'"):
        ArmPlant(arm, fr, p.motors, friction_model='lugre')
    worst = []
    for friction_model in ('karnopp', 'smooth'):
        plant = ArmPlant(arm, fr, p.motors, friction_model=friction_model, method='rk4')
        assert plant.substeps == p.substeps and plant._mesh
        two = Plant(p, sc.period)
        held = HeldArmPlant(plant, sc.period, two.position)
        held._x = two.state.copy()
        stuck = [0, 0]
        diff = 0.0
        for k in range(1500):
            for i, pl in enumerate((two, held)):
                q = np.array(pl.position)
                pl.step(*(model.gravity(q) + np.array([1.6, 0.9])
                          * np.sin(2.0 * np.pi * k * 1e-3 / 0.6 + np.array([0.0, 1.0]))))
                stuck[i] += int(np.any(np.array(pl.velocity) == 0.0))
            diff = max(diff, float(np.abs(np.array(two.position) - held.position).max()))
        worst.append(diff)
        if friction_model == 'karnopp':
            assert stuck[0] > 100 and stuck[1] == stuck[0], stuck
    assert worst[0] <= 1e-12, worst
    assert worst[1] > 1e-4, worst


def test_panda_with_motors_tracks_and_converges_with_a_perfect_model():
    arm = _panda(armature=0.04)
    # lossless gears: the motor lag and the zero-order hold are all that the model misses
    plant = ArmPlant(arm, [FrictionParameters()] * 7, _panda_motors(arm, 1.0, 1.0))
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    traj = Sinusoid(0.2, 1.5, offset=q0, phase=np.arange(7) * 0.5)
    wn = 20.0
    ctl = _computed_torque(plant, arm, np.full(7, wn * wn), np.full(7, 2 * wn))
    run = run_arm_closed_loop(plant, ctl, traj, 1.0)
    assert np.all(np.isfinite(run.q))
    late = np.abs(run.error[run.t >= 0.5]).max()
    assert late <= 1e-3, late
    assert np.all(np.abs(run.tau) <= arm.limits.effort + 1e-12)
    kp, kd = wn * wn, 2 * wn
    for k in (0, 1, 499, 999):          # the logged command is the law at the logged state
        r, rv, ra = traj.sample(run.t[k])
        tau = arm.inverse_dynamics(run.q[k], run.qd[k],
                                   ra - kd * (run.qd[k] - rv) - kp * (run.q[k] - r))
        np.testing.assert_allclose(run.tau[k], np.clip(tau, -plant.torque_limit,
                                                       plant.torque_limit), rtol=1e-12,
                                   atol=1e-9)
        np.testing.assert_allclose(run.q_d[k], r, rtol=0, atol=1e-15)


def test_plant_refusals_are_one_line():
    arm = _panda()
    with pytest.raises(ArmShapeError, match=r'^friction: expected 7 entries'):
        ArmPlant(arm, [FrictionParameters()] * 2)
    with pytest.raises(ArmShapeError, match=r'^motors: expected 7 entries'):
        ArmPlant(arm, motors=[MotorParameters()])
    with pytest.raises(ArmModelError, match=r'^substeps: must be an integer >= 1'):
        ArmPlant(arm, substeps=0)
    with pytest.raises(ArmModelError, match=r"^substeps: must be even for method 'multirate'"):
        ArmPlant(arm, motors=_panda_motors(arm), substeps=5)
    with pytest.raises(ArmModelError, match=r"^method: must be 'multirate' or 'rk4' \(got 'rk5'"):
        ArmPlant(arm, method='rk5')
    plant = ArmPlant(arm)
    with pytest.raises(ParameterError, match=r'^controller.kp: must have 7 elements \(got 1\)'):
        _computed_torque(plant, arm, [1.0], [1.0])
    with pytest.raises(ArmShapeError, match='trajectory 2; the plant has 7'):
        run_arm_closed_loop(plant, _computed_torque(plant, arm, [1.0] * 7, [1.0] * 7),
                            Sinusoid([0.1, 0.1], 1.0), 0.1)
    with pytest.raises(ArmModelError, match=r'^control_rate: 500 Hz, but the controller steps '
                       r'with a period of 0.001 s'):
        run_arm_closed_loop(plant, _computed_torque(plant, arm, [1.0] * 7, [1.0] * 7),
                            Sinusoid([0.1] * 7, 1.0), 0.1, control_rate=500.0)


def test_fused_step_is_rk4_on_rhs():
    """The compiled stages reproduce RK4 written on rhs() bit for bit (ideal and motors)."""
    arm = _panda(armature=0.05)
    rng = np.random.default_rng(9)
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.05, tau_s=0.1, v_s=0.1)] * 7
    for motors in (_panda_motors(arm), None):
        plant = ArmPlant(arm, fr, motors, substeps=3, method='rk4')
        x = plant.initial_state(rng.uniform(-0.5, 0.5, 7), rng.uniform(-0.5, 0.5, 7))
        ref = x.copy()
        h = 1e-3 / 3
        for _ in range(20):
            u = rng.uniform(-30, 30, 7)
            x = plant.step(x, u, 1e-3)
            for _ in range(3):
                k1 = plant.rhs(ref, u)
                k2 = plant.rhs(ref + 0.5 * h * k1, u)
                k3 = plant.rhs(ref + 0.5 * h * k2, u)
                k4 = plant.rhs(ref + h * k3, u)
                ref = ref + (h / 6.0) * (k1 + 2.0 * (k2 + k3) + k4)
        np.testing.assert_array_equal(x, ref)


def _reference_ticks(plant, x0, command, ticks, method='Radau', period=1e-3):
    """
    Integrate with scipy ``method`` at rtol = atol = 1e-10 per period, the command held.

    ``command(k, x)`` gives the torque of tick k from the reference's own state.
    """
    xs, us = [x0], []
    x = x0
    for k in range(ticks):
        u = command(k, x)
        us.append(u)
        x = solve_ivp(lambda _t, y: plant.rhs(y, u), (0.0, period), x, method=method,
                      rtol=1e-10, atol=1e-10).y[:, -1]
        xs.append(x)
    return np.array(xs), us


def _max_errors(xs, ref, n):
    """Max |x - ref| over the ticks per block: q [rad], qd [rad/s], i [A], x_i [V]."""
    return np.abs(np.asarray(xs) - ref).reshape(-1, 4, n).max(axis=(0, 2))


def _steps(plant, x0, us, period=1e-3):
    xs, x = [x0], x0
    for u in us:
        x = plant.step(x, u, period)
        xs.append(x)
    return np.array(xs)


def test_multirate_closed_loop_against_radau():
    """
    The multirate step against Radau (rtol 1e-10): the Panda under computed torque.

    Full plant: motors, PI drives, lossy gears, friction with Stribeck. The loop closes on the
    reference's own state (each tick's command from Radau's state, the same command given to
    the steppers), 150 ticks from equilibrium onto a reference that starts at speed (the
    start transient is the hardest part). Stated tolerance, with the figures measured when
    the test was written: q <= 5e-7 rad (1.4e-7), qd <= 1e-5 rad/s (1.2e-6), i <= 1e-3 A
    (6.6e-5); and no less accurate than RK4 with 4 sub-steps, the former default (q 1.6e-6,
    qd 2.4e-5, i 1.3e-3).
    """
    arm = _panda(armature=0.04)
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.02, tau_s=0.1, v_s=0.05)] * 7
    motors = _panda_motors(arm, 0.9, 0.8)
    multirate = ArmPlant(arm, fr, motors)
    assert (multirate.method, multirate.substeps) == ('multirate', 8)
    rk4 = ArmPlant(arm, fr, motors, substeps=4, method='rk4')
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    traj = Sinusoid(0.2, 1.5, offset=q0, phase=np.arange(7) * 0.5)
    kp, kd = np.full(7, 400.0), np.full(7, 40.0)
    lim = multirate.torque_limit

    def command(k, x):
        r, rv, ra = traj.sample(k * 1e-3)
        tau = arm.inverse_dynamics(x[:7], x[7:14], ra - kd * (x[7:14] - rv) - kp * (x[:7] - r))
        return np.clip(tau, -lim, lim)

    x0 = multirate.initial_state(q0)
    # stiff: the fastest eigenvalue of the Jacobian (central differences) puts RK4 at 1 ms at
    # the edge of its stability region (|lambda| T ~ 2.8 on the negative real axis); the
    # slow modes are the arm's (open loop, some unstable)
    u0 = arm.gravity(q0)
    jac = np.empty((28, 28))
    for c in range(28):
        d = 1e-6 * max(1.0, abs(x0[c]))
        e = np.zeros(28)
        e[c] = d
        jac[:, c] = (multirate.rhs(x0 + e, u0) - multirate.rhs(x0 - e, u0)) / (2.0 * d)
    lam = np.linalg.eigvals(jac)
    fast = lam[np.abs(lam) > 100.0]           # the motors' modes: fast and well damped
    assert 1000.0 < np.abs(lam).max() < 5000.0 and np.all(fast.real < -100.0), lam
    ref, us = _reference_ticks(multirate, x0, command, 150)
    err = _max_errors(_steps(multirate, x0, us), ref, 7)
    err_rk4 = _max_errors(_steps(rk4, x0, us), ref, 7)
    assert err[0] <= 5e-7 and err[1] <= 1e-5 and err[2] <= 1e-3, err
    assert np.all(err[:2] <= err_rk4[:2]), (err, err_rk4)


def test_multirate_with_saturated_drives_against_dop853():
    """
    Commands that clamp the current references and saturate the drive voltages.

    Square waves of 1.5x each joint's URDF effort (open loop, 40 ticks, the Panda swinging at
    up to 5 rad/s): ``i_ref`` is clamped at ``i_max`` and the PI voltage reaches ``V_max``
    (the integrator freezes). Reference: DOP853 at rtol 1e-10 (Radau stalls on the clamp's
    kinks). At the kinks every fixed-step method falls to low order and its error is not
    monotone in the step (where a kink falls in a step decides): the multirate step is as
    accurate there as RK4 with its 8 sub-steps. Measured with the gear loss on the mesh
    torque: q 1.5e-4 rad, qd 9.0e-3 rad/s, as RK4 x 8 (1.5e-4, 9.0e-3), RK4 x 4 7.7e-5,
    4.5e-3 (with the loss on N k_t i it was 5.4e-5, 3.2e-3 against RK4 x 4's 1.2e-4, 7.3e-3).
    """
    arm = _panda(armature=0.04)
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.02, tau_s=0.2, v_s=0.05)] * 7
    motors = _panda_motors(arm, 0.9, 0.9)
    multirate = ArmPlant(arm, fr, motors)
    rk4 = ArmPlant(arm, fr, motors, substeps=8, method='rk4')
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    effort = np.asarray(arm.limits.effort)
    ktn, i_max, v_max, kp_i = (np.array([getattr(m, a) for m in motors])
                               for a in ('torque_per_amp', 'i_max', 'V_max', 'Kp_i'))
    saturated = []

    def command(k, x):
        u = arm.gravity(q0) + 1.5 * effort * np.sign(np.sin(2 * np.pi * k / 40 + np.arange(7)))
        i_ref = np.clip(u / ktn, -i_max, i_max)
        saturated.append(np.abs(kp_i * (i_ref - x[14:21]) + x[21:]) > v_max)
        return u

    x0 = multirate.initial_state(q0)
    ref, us = _reference_ticks(multirate, x0, command, 40, method='DOP853')
    assert np.any(saturated) and np.any(np.abs(np.array(us)) / ktn > i_max)
    err = _max_errors(_steps(multirate, x0, us), ref, 7)
    err_rk4 = _max_errors(_steps(rk4, x0, us), ref, 7)
    assert err[0] <= 2e-4 and err[1] <= 1e-2, err
    assert np.all(err[:2] <= 1.1 * err_rk4[:2]), (err, err_rk4)


def test_multirate_slow_part_is_second_order():
    """
    Where the arm itself moves fast, the rigid-body interpolation sets the error: order 2.

    The Panda with ideal actuators (no stiff terms) and a constant torque 1 N·m above gravity
    swings up to about 30 rad/s in 0.2 s. Against DOP853 (rtol 1e-12): the end error falls
    about 4x per halving of the period (measured 4.7e-6, 1.2e-6, 2.9e-7 rad at 2, 1, 0.5 ms),
    while RK4 (the default for ideal actuators: one step of 1 ms without friction, measured
    9.5e-11 rad; 4 sub-steps with friction) is within 1e-9.
    """
    arm = _panda()
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    x0 = np.concatenate((q0, np.zeros(21)))
    u = arm.gravity(q0) + 1.0
    rk4 = ArmPlant(arm)
    assert (rk4.method, rk4.substeps) == ('rk4', 1)
    assert ArmPlant(arm, [FrictionParameters(tau_c=0.1)] * 7).substeps == 4
    end = solve_ivp(lambda _t, y: rk4.rhs(y, u), (0.0, 0.2), x0, method='DOP853', rtol=1e-12,
                    atol=1e-12).y[:, -1]
    assert np.abs(end[7:14]).max() > 20.0
    errors = []
    for period in (2e-3, 1e-3, 5e-4):
        plant = ArmPlant(arm, method='multirate')
        x = x0
        for _ in range(int(round(0.2 / period))):
            x = plant.step(x, u, period)
        errors.append(np.abs(x[:7] - end[:7]).max())
    assert errors[1] <= 5e-6, errors
    ratios = [errors[0] / errors[1], errors[1] / errors[2]]
    assert all(3.0 < r < 6.0 for r in ratios), (errors, ratios)
    x = x0
    for _ in range(200):
        x = rk4.step(x, u, 1e-3)
    assert np.abs(x[:7] - end[:7]).max() <= 1e-9


def test_held_plant_telemetry_equals_the_2r_plant():
    """
    Check HeldArmPlant (the plant node's n-joint plant) against the 2R Plant on one arm.

    At random states and commands, with the default scenario's lossy gears on the mesh
    torque: the drive voltage, the current reference and the joint torque that the node
    publishes equal the 2R plant's, and one period from the same state (RK4 with the 2R
    plant's substeps) lands on the same state.
    """
    from manip_control.arm_plant import HeldArmPlant
    from manip_control.plant import Plant
    sc = load_scenario('default')
    p = sc.plant
    held = HeldArmPlant(ArmPlant(TwoLinkArm.from_plant(p), p.friction, p.motors,
                                 substeps=p.substeps, method='rk4'), sc.period, (0.0, 0.0))
    two = Plant(p, sc.period)
    rng = np.random.default_rng(4)
    for _ in range(30):
        x = np.concatenate((rng.uniform(-3, 3, 2), rng.uniform(-2, 2, 2),
                            rng.uniform(-8, 8, 2), rng.uniform(-40, 40, 2)))
        u = rng.uniform(-100, 100, 2)
        held._x, two.state = x.copy(), x.copy()
        held.step(*u)
        two.step(*u)
        np.testing.assert_allclose(held.drive_voltage_at(x), two.drive_voltage_at(x),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(held.current_reference(), two.current_reference(),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(held.joint_torque_at(x), two.joint_torque_at(x),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(held._x, two.state, rtol=1e-9, atol=1e-9)
    assert held.position == tuple(held._x[:2]) and held.velocity == tuple(held._x[2:4])


def _documented_rhs(arm, motors, friction, armature, mesh=True):
    """
    Return the plant's documented right-hand side, written here from its docstring alone.

    Drive, gear loss with ``s = tanh(qd / eps)`` on the mesh torque ``T = N k_t i - D qdd``
    (``D = diag(armature)``: the Panda's rotors, uncoupled), smooth friction; the rigid body
    is Pinocchio's CRBA and RNEA on the arm's model. The implicit equation
    ``(M - K D) qdd = (1 - K) N k_t i - f - b`` is solved by a fixed point on the signs of
    ``T`` (start from the signs of ``N k_t i``, re-solve with the signs of the ``T`` found,
    until they repeat), not by the plant's ordered search. ``mesh=False``: the former rule,
    the loss on ``N k_t i`` (``D`` left out of the loss), by ABA. None of the plant's or
    actuators' functions is called, so a change of the gear rule there shows against this.
    """
    import pinocchio as pin
    n = arm.n
    N, k_t, k_e, R, L, i_max, v_max, kp_i, ki_i, k_f, k_b = _motor_arrays(motors)
    b = np.array([f.b for f in friction])
    tau_c = np.array([f.tau_c for f in friction])
    eps = np.array([f.eps for f in friction])
    D = np.diag(np.broadcast_to(np.asarray(armature, dtype=float), (n,)))
    model = arm.pin_model
    data = model.createData()

    def rhs(x, u):
        q, qd, i, xi = x[:n], x[n:2 * n], x[2 * n:3 * n], x[3 * n:]
        i_ref = np.clip(u / (N * k_t), -i_max, i_max)
        v_raw = kp_i * (i_ref - i) + xi
        v = np.clip(v_raw, -v_max, v_max)
        dxi = np.where(np.abs(v_raw) <= v_max, ki_i * (i_ref - i), 0.0)
        di = (v - R * i - k_e * N * qd) / L
        s = np.tanh(qd / eps)
        nk = N * k_t * i
        f = b * qd + tau_c * s
        if not mesh:
            tau_m = nk - (0.5 * (k_f + k_b) * np.abs(nk) + 0.5 * (k_f - k_b) * nk * s) * s
            qdd = pin.aba(model, data, q, qd, tau_m - f)
            return np.concatenate((qd, qdd, di, dxi))
        m = pin.crba(model, data, q)
        m = np.triu(m) + np.triu(m, 1).T
        bias = pin.rnea(model, data, q, qd, np.zeros(n))
        sigma = np.where(nk >= 0.0, 1.0, -1.0)
        for _ in range(20):
            kappa = (0.5 * (k_f + k_b) * sigma + 0.5 * (k_f - k_b) * s) * s
            qdd = np.linalg.solve(m - kappa[:, None] * D, (1.0 - kappa) * nk - f - bias)
            new = np.where(nk - D @ qdd >= 0.0, 1.0, -1.0)
            if np.array_equal(new, sigma):
                break
            sigma = new
        return np.concatenate((qd, qdd, di, dxi))

    return rhs


def _lossy_reference_run(ticks=150):
    """Run the Panda, lossy gears, computed torque closed on the reference's state (Radau)."""
    arm = _panda(armature=0.04)
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.02)] * 7
    motors = _panda_motors(arm, 0.85, 0.7)
    plant = ArmPlant(arm, fr, motors)
    rhs = _documented_rhs(arm, motors, fr, 0.04)
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    traj = Sinusoid(0.2, 1.5, offset=q0, phase=np.arange(7) * 0.5)
    kp, kd = np.full(7, 400.0), np.full(7, 40.0)
    lim = plant.torque_limit
    x0 = plant.initial_state(q0)
    xs_ref, us = [x0], []
    x = x0
    for k in range(ticks):
        r, rv, ra = traj.sample(k * 1e-3)
        tau = arm.inverse_dynamics(x[:7], x[7:14], ra - kd * (x[7:14] - rv) - kp * (x[:7] - r))
        u = np.clip(tau, -lim, lim)
        us.append(u)
        x = solve_ivp(lambda _t, y: rhs(y, u), (0.0, 1e-3), x, method='Radau',
                      rtol=1e-10, atol=1e-12).y[:, -1]
        xs_ref.append(x)
    return arm, fr, motors, plant, x0, us, np.array(xs_ref)


def test_lossy_gears_against_an_independent_reference():
    """
    Lossy gears (eta 0.85 forward, 0.7 back) on the Panda against the documented equations.

    Reference: the equations of the module docstring written in the test (not the plant's
    right-hand side), the gear loss on the mesh torque, integrated by Radau at rtol 1e-10,
    atol 1e-12 over each held period, the loop closed on the reference's own state (computed
    torque, 150 ticks from equilibrium onto a reference that starts at speed, so the joints
    reverse and the gear switches between driving and being driven). The plant's default step
    must agree within the tolerance of the lossless comparison above; the same commands on
    the former rule (the loss on ``N k_t i``) and on swapped efficiencies must not, over the
    first 40 ticks already. Measured when written: q 9.2e-8 rad, qd 1.0e-6 rad/s,
    i 6.7e-5 A; the former rule is 8.1e-3 rad off over the 150 ticks (the commands are
    replayed open loop), the swapped efficiencies 7.1e-2 rad.
    """
    arm, fr, motors, plant, x0, us, ref = _lossy_reference_run()
    assert plant._mesh
    err = _max_errors(_steps(plant, x0, us), ref, 7)
    assert err[0] <= 5e-7 and err[1] <= 1e-5 and err[2] <= 1e-3, err
    # the comparison can tell the gear rule: the former rule and the swapped efficiencies
    # are far outside it
    for rhs in (_documented_rhs(arm, motors, fr, 0.04, mesh=False),
                _documented_rhs(arm, _panda_motors(arm, 0.7, 0.85), fr, 0.04)):
        x = x0
        for u in us[:40]:
            x = solve_ivp(lambda _t, y: rhs(y, u), (0.0, 1e-3), x, method='Radau',
                          rtol=1e-10, atol=1e-12).y[:, -1]
        assert np.abs(x[:7] - ref[40, :7]).max() > 100.0 * max(err[0], 1e-9), err
