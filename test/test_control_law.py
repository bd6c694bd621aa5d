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
``Controller.update`` of every model against a plain implementation of the law, tick by tick.

The reference below is written from the equations of :mod:`manip_control.control`'s
docstring on matrices: ``M(q)`` and ``C(q, qd)`` of the model (closed form for the 2R, CRBA
and ``computeCoriolisMatrix`` for a URDF arm -- not the inverse dynamics the controller
calls), the nominal friction, the gear inversion with the rotor matrix built here, the limit
and the integral with anti-windup. Sequences of ticks run through one controller, so the
integral (and its anti-windup) is compared too; both the 2R (its closed-form fast path) and
the 7-joint Panda (the array path) take every input form a caller passes.
"""

import dataclasses
from pathlib import Path
import subprocess
import sys

from manip_control.arm_model import TwoLinkArm
from manip_control.arm_model import UrdfArm
from manip_control.control import ControlBuffer
from manip_control.control import Controller
from manip_control.control import ControlOutput
from manip_control.parameters import ArmParameters
from manip_control.parameters import ControllerParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import NominalModel
import numpy as np
import pytest

PANDA = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
PERIOD = 1e-3
FLOOR = 0.05        # the gear inversion's floor of 1 - kappa (module docstring)


def reference_law(model, params: ControllerParameters, q, qd, q_d, qd_d, qdd_d, z):
    """
    One tick of the law on matrices; returns ``(tau, saturated, z_next)``.

    ``tau = M (qdd_d - Kd e_dot - Kp e - Ki z) + C qd + g`` (computed torque) or
    ``g - Kp e - Kd qd - Ki z`` (PD + gravity), minus ``K e`` (the joint stiffness, clamped
    to +-``joint_stiffness_limit``), plus
    ``f(qd_d)``, through the inverted
    nominal gear, clamped to the limit; the integral advances unless saturated against
    the error, and is clamped.
    """
    nm = params.nominal
    kp, kd, ki = (np.array(v, float) for v in (params.kp, params.kd, params.ki))
    lim, zl = np.array(params.torque_limit, float), np.array(params.integral_limit, float)
    q, qd, q_d, qd_d, qdd_d = (np.array(v, float) for v in (q, qd, q_d, qd_d, qdd_d))
    e = q - q_d
    if params.law == 'computed_torque':
        a = qdd_d - kd * (qd - qd_d) - kp * e - ki * z
        tau = model.mass_matrix(q) @ a + model.coriolis_matrix(q, qd) @ qd + model.gravity(q)
    else:
        a = np.zeros_like(q)
        tau = model.gravity(q) - kp * e - kd * qd - ki * z
    clamp = np.array(params.joint_stiffness_limit, float)
    tau = tau - np.clip(np.array(params.joint_stiffness, float) * e, -clamp, clamp)
    if params.friction_compensation:
        for k, fr in enumerate(nm.friction):
            level = fr.tau_c + fr.tau_s * np.exp(-(qd_d[k] / fr.v_s) ** 2)
            tau[k] += fr.b * qd_d[k] + level * np.tanh(qd_d[k] / fr.eps)
    kf = 1.0 - np.array(nm.eta, float)
    kb = 1.0 / np.array(nm.eta_back, float) - 1.0
    if np.any(kf + kb):
        jr = np.array(nm.rotor_inertia, float)
        rotor = np.diag(jr)
        if nm.rotor_coupling:
            for k in range(1, len(jr)):
                rotor[k, k - 1] = jr[k] / nm.gear_ratio[k]
        ro = rotor @ a
        s = np.tanh(qd_d / np.array([fr.eps for fr in nm.friction]))
        y = tau - ro
        kappa = 1.0 - (0.5 * (kf + kb) * np.where(y >= 0.0, 1.0, -1.0) + 0.5 * (kf - kb) * s) * s
        tau = y / np.maximum(kappa, FLOOR) + ro
    sat = np.abs(tau) > lim
    tau = np.clip(tau, -lim, lim)
    advance = (ki != 0.0) & ~(sat & ((tau < 0.0) == (e > 0.0)))
    z = np.where(advance, np.clip(z + e * PERIOD, -zl, zl), z)
    return tau, sat, z


def two_link(law: str, **kw):
    """Return params and model of a nominal 2R: coupled rotors, Stribeck friction, lossy gear."""
    fr = (FrictionParameters(b=0.5, tau_c=0.8, eps=0.01, tau_s=0.3, v_s=0.1),
          FrictionParameters(b=0.3, tau_c=0.4, eps=0.02))
    nominal = NominalModel(arm=ArmParameters(), friction=fr, rotor_inertia=(0.1, 0.05),
                           rotor_coupling=True, gear_ratio=(100.0, 50.0), eta=(0.85, 0.8),
                           eta_back=(0.85, 0.7))
    base = {'law': law, 'nominal': nominal,
            'kp': (25.0, 16.0) if law == 'computed_torque' else (300.0, 100.0),
            'kd': (10.0, 8.0), 'ki': (40.0, 20.0), 'integral_limit': (0.02, 0.01),
            'joint_stiffness': (0.0, 30.0), 'joint_stiffness_limit': (5.0, 2.0),
            'torque_limit': (60.0, 20.0),
            'friction_compensation': True}
    base.update(kw)
    params = ControllerParameters(**base)
    return params, TwoLinkArm.from_nominal(nominal)


def panda(law: str, **kw):
    """Return params and model of the 7-joint Panda: Stribeck friction on 2 joints, lossy gear."""
    arm = UrdfArm.from_file(PANDA, armature=0.04)
    n = arm.n
    fr = tuple(FrictionParameters(b=0.2 + 0.01 * k, tau_c=0.3, eps=0.02,
                                  tau_s=0.2 if k in (1, 4) else 0.0, v_s=0.05)
               for k in range(n))
    nominal = NominalModel(friction=fr, rotor_inertia=tuple(0.04 + 0.01 * k for k in range(n)),
                           rotor_coupling=True, gear_ratio=(100.0,) * n,
                           eta=(0.9,) * n, eta_back=(0.8,) * n)
    base = {'law': law, 'nominal': nominal,
            'kp': (400.0,) * n if law == 'computed_torque' else (600.0,) * n,
            'kd': (40.0,) * n, 'ki': (100.0,) * n, 'integral_limit': (0.005,) * n,
            'joint_stiffness': tuple(20.0 if k % 2 else 0.0 for k in range(n)),
            'joint_stiffness_limit': (1.5,) * n,
            'torque_limit': tuple(0.5 * float(e) for e in arm.limits.effort),
            'friction_compensation': True}
    base.update(kw)
    return ControllerParameters(**base), arm


ARMS = {'2R': two_link, 'panda': panda}
Q0 = {2: np.array([0.3, -0.5]), 7: np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])}


def inputs(rng, n: int, ticks: int):
    """Random ticks around a pose: errors up to 0.2 rad (some saturate), speeds up to 2."""
    for _ in range(ticks):
        q = Q0[n] + rng.uniform(-0.5, 0.5, n)
        yield (q, rng.uniform(-2.0, 2.0, n), q + rng.uniform(-0.2, 0.2, n),
               rng.uniform(-2.0, 2.0, n), rng.uniform(-20.0, 20.0, n))


def as_kind(row, kind: str):
    """Return the arrays of ``row`` as the tuples, lists or arrays a caller passes."""
    if kind == 'tuple':
        return tuple(tuple(v.tolist()) for v in row)
    if kind == 'list':
        return tuple(v.tolist() for v in row)
    return row


def check_ticks(params, model, kind: str, use_out: bool, ticks: int = 300, seed: int = 3):
    """Run ``ticks`` random ticks through a controller and the reference; return max |diff|."""
    ctrl = Controller(params, PERIOD, model)
    z = np.zeros(model.n)
    rng = np.random.default_rng(seed)
    buf = ctrl.output() if use_out else None
    worst, saturated, integrated = 0.0, 0, 0
    for row in inputs(rng, model.n, ticks):
        tau, sat, z_next = reference_law(model, params, *row, z)
        got = ctrl.update(*as_kind(row, kind), out=buf) if use_out else \
            ctrl.update(*as_kind(row, kind))
        if use_out:
            assert got is buf
        else:
            assert isinstance(got, ControlOutput)
            assert type(got.tau) is tuple and type(got.saturated) is tuple
        assert np.array_equal(np.asarray(got.saturated, bool), sat)
        err = np.abs(np.asarray(got.tau, float) - tau)
        assert np.all(err <= 1e-12 * np.maximum(1.0, np.abs(tau))), (err, tau)
        worst = max(worst, float(err.max()))
        saturated += int(sat.any())
        integrated += int(np.any(z_next != z))
        z = z_next
    # the inputs exercised the limit and the integral (else the comparison proves less)
    assert saturated > ticks // 10 and integrated > ticks // 2
    return worst


@pytest.mark.parametrize('kind,use_out', [('tuple', False), ('list', False), ('array', False),
                                          ('tuple', True), ('array', True)])
@pytest.mark.parametrize('law', ['computed_torque', 'pd_gravity'])
@pytest.mark.parametrize('arm', sorted(ARMS))
def test_update_equals_the_reference_law(arm, law, kind, use_out):
    """Both laws, all options on, every input form, with and without ``out=``."""
    params, model = ARMS[arm](law)
    worst = check_ticks(params, model, kind, use_out)
    print(f'{arm} {law} {kind} out={use_out}: max |tau - reference| {worst:.2e} N m')


@pytest.mark.parametrize('arm', sorted(ARMS))
@pytest.mark.parametrize('variant', ['no_friction_compensation', 'no_integral', 'ideal_gear',
                                     'no_joint_stiffness'])
def test_update_equals_the_reference_law_without_the_options(arm, variant):
    """Each option off (the fast paths skip its arithmetic): still the reference law."""
    params, model = ARMS[arm]('computed_torque')
    n = model.n
    nm = params.nominal
    change = {'no_friction_compensation': {'friction_compensation': False},
              'no_integral': {'ki': (0.0,) * n},
              'no_joint_stiffness': {'joint_stiffness': (0.0,) * n},
              'ideal_gear': {'nominal': dataclasses.replace(nm, eta=(1.0,) * n,
                                                            eta_back=(1.0,) * n)}}[variant]
    params = dataclasses.replace(params, **change)
    ctrl = Controller(params, PERIOD, model)
    rng = np.random.default_rng(5)
    z = np.zeros(n)
    for row in inputs(rng, n, 50):
        tau, sat, z = reference_law(model, params, *row, z)
        got = ctrl.update(*row)
        np.testing.assert_allclose(got.tau, tau, rtol=1e-12, atol=1e-12)
        assert list(got.saturated) == sat.tolist()


@pytest.mark.parametrize('change', ['torque_limit', 'gains'])
@pytest.mark.parametrize('arm', sorted(ARMS))
def test_runtime_changes_reach_the_tick(arm, change):
    """set_torque_limit / set_gains act on the next tick of every path; reset zeroes z."""
    params, model = ARMS[arm]('computed_torque')
    n = model.n
    ctrl = Controller(params, PERIOD, model)
    rng = np.random.default_rng(11)
    rows = list(inputs(rng, n, 20))
    for row in rows:
        ctrl.update(*row)
    ctrl.reset()
    if change == 'torque_limit':
        low = tuple(0.25 * v for v in params.torque_limit)
        ctrl.set_torque_limit(low)
        changed = dataclasses.replace(params, torque_limit=low)
    else:
        ctrl.set_gains((900.0,) * n, (60.0,) * n, (5.0,) * n)
        changed = dataclasses.replace(params, kp=(900.0,) * n, kd=(60.0,) * n, ki=(5.0,) * n)
    assert (ctrl.torque_limit, ctrl.kp, ctrl.kd, ctrl.ki) == (
        changed.torque_limit, changed.kp, changed.kd, changed.ki)
    z = np.zeros(n)
    buf = ctrl.output()
    for row in rows:
        tau, sat, z = reference_law(model, changed, *row, z)
        ctrl.update(*row, out=buf)
        np.testing.assert_allclose(buf.tau, tau, rtol=1e-12, atol=1e-12)
        assert np.all(np.abs(buf.tau) <= np.array(changed.torque_limit))


def test_the_2r_constants_end_in_the_layout_the_kernel_reads():
    """The kernel reads the torque limits and the period from the end of ``law_constants``."""
    from manip_control.kernel import C_PERIOD
    from manip_control.kernel import C_SIZE
    from manip_control.kernel import C_TL1
    from manip_control.kernel import C_TL2
    params, model = two_link('computed_torque')
    k = Controller(params, PERIOD, model).law_constants
    assert len(k) == C_SIZE
    assert (k[C_TL1], k[C_TL2], k[C_PERIOD]) == (*params.torque_limit, PERIOD)
    assert tuple(k[C_TL1 - 4:C_TL1 - 2]) == params.joint_stiffness
    assert tuple(k[C_TL1 - 2:C_TL1]) == params.joint_stiffness_limit


@pytest.mark.parametrize('arm', sorted(ARMS))
def test_the_random_ticks_reach_the_stiffness_clamp(arm):
    """The reference-law tests see ticks where ``|K e|`` exceeds ``joint_stiffness_limit``."""
    params, model = ARMS[arm]('computed_torque')
    k = np.array(params.joint_stiffness)
    clamp = np.array(params.joint_stiffness_limit)
    rows = list(inputs(np.random.default_rng(3), model.n, 300))
    over = sum(bool(np.any(np.abs(k * (np.array(r[0]) - np.array(r[2]))) > clamp))
               for r in rows)
    under = sum(bool(np.any((k > 0) & (np.abs(k * (np.array(r[0]) - np.array(r[2]))) < clamp)))
                for r in rows)
    assert over > 30 and under > 30, (over, under)


def test_the_stiffness_limit_defaults_to_the_torque_limit():
    """Not given, ``joint_stiffness_limit`` is the torque limit: no clamp of its own."""
    params, _ = two_link('computed_torque')
    base = dataclasses.asdict(params)
    del base['joint_stiffness_limit']
    base['nominal'] = params.nominal
    base['adaptation'] = params.adaptation
    assert ControllerParameters(**base).joint_stiffness_limit == params.torque_limit


def test_output_buffer_is_sized_by_the_model():
    """``output()`` gives float64 torques and bool flags, one per joint of the model."""
    for make in ARMS.values():
        params, model = make('computed_torque')
        buf = Controller(params, PERIOD, model).output()
        assert isinstance(buf, ControlBuffer)
        assert buf.tau.shape == (model.n,) and buf.tau.dtype == np.float64
        assert buf.saturated.shape == (model.n,) and buf.saturated.dtype == bool


def test_array_path_compiles_when_built_never_on_a_tick():
    """
    Build, then tick, in a fresh interpreter: nothing compiles after the constructor.

    numba's machine code is there once the constructor returns, and no tick (any input
    form, with or without ``out=``, either law) compiles anything more.
    """
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import numpy as np
import test_control_law as t
from manip_control.control import Controller, _compiled
for law in ('computed_torque', 'pd_gravity'):
    params, model = t.panda(law)
    ctrl = Controller(params, t.PERIOD, model)
    funcs = _compiled()
    built = [len(f.signatures) for f in funcs]
    assert all(built), built
    buf = ctrl.output()
    for row in t.inputs(np.random.default_rng(1), model.n, 5):
        for kind in ('tuple', 'list', 'array'):
            ctrl.update(*t.as_kind(row, kind))
            ctrl.update(*t.as_kind(row, kind), out=buf)
    assert [len(f.signatures) for f in funcs] == built, built
print('ok')
"""
    done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).parents[1])
    assert done.returncode == 0 and done.stdout.strip() == 'ok', done.stderr[-2000:]
