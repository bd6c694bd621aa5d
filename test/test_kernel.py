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
Compiled kernel against the Python reference: RHS, period step, closed loop, fallback.

The reference is the pure-Python ``plant_dynamics`` (numpy vector API, ``np.linalg.solve``)
and the tick-by-tick Python loop; the kernel must agree within 1e-12 for every actuator,
friction, rotor, sensor and controller option.
"""

import dataclasses
import itertools
import os
from pathlib import Path
import shutil
import subprocess
import sys

from manip_control import kernel
from manip_control import simulation
from manip_control.parameters import FrictionParameters
from manip_control.parameters import load_scenario
from manip_control.parameters import MotorParameters
from manip_control.parameters import PlantParameters
from manip_control.plant import Plant
from manip_control.plant import plant_dynamics
from manip_control.sensors import JointSensors
from manip_control.simulation import run_closed_loop
from manip_control.simulation import run_closed_loop_python
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason='numba is not importable')


def _friction(stribeck: bool) -> tuple:
    extra = {'v_stick': 2e-3}
    if stribeck:
        return (FrictionParameters(b=0.5, tau_c=0.8, eps=0.01, tau_s=0.6, v_s=0.05, **extra),
                FrictionParameters(b=0.3, tau_c=0.4, eps=0.02, tau_s=0.3, v_s=0.1, **extra))
    return (FrictionParameters(b=0.5, tau_c=0.8, eps=0.01, **extra),
            FrictionParameters(b=0.3, tau_c=0.4, eps=0.02, **extra))


def _motors(eta_back: float | None) -> tuple:
    m1 = MotorParameters()
    m2 = MotorParameters(R=0.8, L=0.5e-3, k_t=0.05, k_e=0.05, N=80.0, eta=0.8, Jm=5.0e-6,
                         i_max=6.0, V_max=24.0, Kp_i=0.9425, Ki_i=1508.0)
    if eta_back is not None:
        m1 = dataclasses.replace(m1, eta_back=eta_back)
        m2 = dataclasses.replace(m2, eta_back=eta_back * 0.9)
    return (m1, m2)


def plant_options():
    """Every combination of the plant's options present in this version."""
    for actuator, stribeck, model, rotor, coupling, eta_back, plane in itertools.product(
            ('motor', 'ideal'), (False, True), ('smooth', 'karnopp'), (True, False),
            (True, False), (0.6, 1.0), ('vertical', 'horizontal')):
        pl = PlantParameters(actuator=actuator, friction=_friction(stribeck),
                             motors=_motors(eta_back), rotor_inertia=rotor,
                             rotor_coupling=coupling, friction_model=model,
                             torque_limit=(60.0, 20.0))
        pl = dataclasses.replace(pl, arm=dataclasses.replace(pl.arm, plane=plane))
        yield pytest.param(pl, id=f'{actuator}-{"stribeck" if stribeck else "coulomb"}-'
                                  f'{model}-rotor{int(rotor)}-coupling{coupling}-'
                                  f'eta_back{eta_back}-{plane}')


def _random_points(rng, n):
    """States and torque commands spanning slow/fast joints, saturating drives and limits."""
    x = np.empty((n, 8))
    x[:, 0:2] = rng.uniform(-np.pi, np.pi, (n, 2))
    scale = rng.choice([1e-4, 1e-3, 0.05, 1.0, 5.0], (n, 2))   # inside / outside stick bands
    x[:, 2:4] = rng.uniform(-1.0, 1.0, (n, 2)) * scale
    x[:, 4:6] = rng.uniform(-20.0, 20.0, (n, 2))
    x[:, 6:8] = rng.uniform(-60.0, 60.0, (n, 2))                # some beyond V_max
    tau = rng.uniform(-120.0, 120.0, (n, 2))                    # some beyond the limits
    return x, tau


@pytest.mark.parametrize('params', plant_options())
def test_rhs_equals_plant_dynamics_at_random_states(params):
    rng = np.random.default_rng(12)
    packed = kernel.pack_plant(params, 1e-3)
    xs, taus = _random_points(rng, 300)
    for x, tau in zip(xs, taus):
        ref = plant_dynamics(0.0, x, tau, params)
        fast = kernel.plant_rhs(x, tau, packed)
        np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=1e-12 * (1.0 + np.abs(ref).max()),
                                   err_msg=f'x={x.tolist()} tau={tau.tolist()}')


@pytest.mark.parametrize('params', [p for k, p in enumerate(plant_options()) if k % 3 == 0])
def test_period_step_equals_plant_step(params):
    rng = np.random.default_rng(5)
    packed = kernel.pack_plant(params, 1e-3)
    plant = Plant(params, 1e-3, compiled=False)
    xs, taus = _random_points(rng, 40)
    for x, tau in zip(xs, taus):
        plant.state = x
        plant.step(tau[0], tau[1])
        fast = kernel.plant_step(x, tau[0], tau[1], packed)
        np.testing.assert_allclose(fast, plant.state, rtol=1e-12,
                                   atol=1e-12 * (1.0 + np.abs(plant.state).max()))


def _scenario(name, duration=1.5, **changes):
    sc = dataclasses.replace(load_scenario(name), duration=duration)
    plant = changes.pop('plant', {})
    ctrl = changes.pop('controller', {})
    if plant:
        sc = dataclasses.replace(sc, plant=dataclasses.replace(sc.plant, **plant))
    if ctrl:
        sc = dataclasses.replace(sc, controller=dataclasses.replace(sc.controller, **ctrl))
    return dataclasses.replace(sc, **changes)


def closed_loop_cases():
    from manip_control.parameters import SensorParameters
    noisy = SensorParameters(encoder_counts=4096, position_noise_std=1e-4,
                             velocity_noise_std=2e-3, velocity_source='filtered_difference',
                             velocity_cutoff_hz=50.0, seed=7)
    yield pytest.param(_scenario('default'), id='default')
    yield pytest.param(_scenario('seed001'), id='seed001-ideal')
    yield pytest.param(_scenario('seed004'), id='seed004-pd-gravity')
    yield pytest.param(_scenario('default', plant={'sensors': noisy},
                                 controller={'ki': (5.0, 5.0)}), id='noisy-sensors-integral')
    yield pytest.param(_scenario('default', plant={'sensors': SensorParameters(
        velocity_noise_std=1e-2, seed=3)}), id='velocity-noise-only')
    yield pytest.param(_scenario('default', controller={'torque_limit': (30.0, 8.0),
                                                        'ki': (40.0, 40.0)}),
                       id='saturated-integral-antiwindup')
    yield pytest.param(_scenario('default', plant={'friction': _friction(True)},
                                 controller={'friction_compensation': False}),
                       id='stribeck-no-compensation')
    stiff = (FrictionParameters(b=0.5, tau_c=3.0, eps=0.01, tau_s=1.0, v_s=0.05),
             FrictionParameters(b=0.3, tau_c=2.0, eps=0.01, tau_s=0.5))
    yield pytest.param(_scenario('default', plant={'friction_model': 'karnopp',
                                                   'friction': stiff},
                                 trajectory={'type': 'hold', 'position': [0.3, -0.2]}),
                       id='karnopp-hold')
    yield pytest.param(_scenario('default', plant={'friction_model': 'karnopp',
                                                   'friction': stiff}),
                       id='karnopp-sinusoid')
    yield pytest.param(_scenario('default', plant={'start_in_equilibrium': False,
                                                   'rotor_coupling': False}),
                       id='start-at-zero-current-no-coupling')
    yield pytest.param(_scenario('default', controller={'nominal': dataclasses.replace(
        load_scenario('default').controller.nominal, rotor_coupling=True)}),
        id='nominal-rotor-coupling')


@pytest.mark.parametrize('scenario', closed_loop_cases())
def test_closed_loop_kernel_equals_python_loop(scenario):
    fast = run_closed_loop(scenario, engine='kernel')
    ref = run_closed_loop_python(scenario)
    for name in ('t', 'q', 'qd', 'q_meas', 'qd_meas', 'q_d', 'qd_d', 'qdd_d', 'tau_cmd',
                 'tau_joint', 'current', 'voltage', 'final_state'):
        a, b = getattr(fast, name), getattr(ref, name)
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=0.0, atol=1e-12 * (1.0 + np.abs(b).max()),
                                   err_msg=name)
    np.testing.assert_array_equal(fast.saturated, ref.saturated)


def test_sensor_noise_is_the_tick_by_tick_sequence():
    from manip_control.parameters import SensorParameters
    for kw in ({'position_noise_std': 1e-3, 'velocity_noise_std': 2e-2},
               {'position_noise_std': 1e-3}, {'velocity_noise_std': 2e-2}):
        params = SensorParameters(seed=11, **kw)
        noise = kernel.sensor_noise(params, 50)
        sensors = JointSensors(params, 1e-3)
        for k in range(50):
            q, qd = sensors.measure((0.0, 0.0), (0.0, 0.0))
            y = (*q, *qd)
            np.testing.assert_array_equal(y, noise[k], err_msg=str(kw))


def test_unsupported_scenario_falls_back_to_python(monkeypatch):
    sc = _scenario('seed001', duration=0.2)
    ref = run_closed_loop_python(sc)
    monkeypatch.setattr(kernel, 'unsupported', lambda scenario: 'option X is not ported')

    def fail(*args, **kwargs):
        raise AssertionError('the kernel ran an unsupported scenario')

    monkeypatch.setattr(kernel, 'closed_loop', fail)
    monkeypatch.setattr(kernel, 'closed_loop_many', fail)
    res = run_closed_loop(sc)
    np.testing.assert_array_equal(res.q, ref.q)
    batch = simulation.run_batch([sc], jobs=1)
    assert batch.late_max_error[0].tolist() == simulation.summarize(ref)['max_error_rad']
    with pytest.raises(simulation.KernelUnsupported, match='option X is not ported'):
        run_closed_loop(sc, engine='kernel')


def test_engine_is_checked():
    with pytest.raises(ValueError, match='engine: must be one of auto, kernel, python'):
        run_closed_loop(_scenario('seed001', duration=0.01), engine='fast')


@pytest.mark.parametrize('params', [p for k, p in enumerate(plant_options()) if k % 5 == 0])
def test_stepper_follows_plant_step(params):
    """The compiled step offered to ``Plant`` (same inputs as its Python step)."""
    step = kernel.stepper(params, 1e-3)
    plant = Plant(params, 1e-3, compiled=False)
    x = list(plant.state)
    for tau in ([40.0, 9.0], [-80.0, 30.0], [0.0, 0.0]):
        u = plant.input_for(*tau)
        plant.step(*tau)
        x = list(step(x, u[0], u[1]))
        ref = plant.state
        np.testing.assert_allclose(x, ref, rtol=1e-12, atol=1e-12 * (1.0 + np.abs(ref).max()))


def test_plant_uses_the_compiled_step_unless_told_not_to():
    params = load_scenario('default').plant
    fast, slow = Plant(params, 1e-3), Plant(params, 1e-3, compiled=False)
    assert fast._compiled_step is not None and slow._compiled_step is None
    for tau in ([40.0, 9.0], [-80.0, 30.0]):
        fast.step(*tau)
        slow.step(*tau)
        np.testing.assert_allclose(fast.state, slow.state, rtol=1e-12, atol=1e-12)
        assert (fast.time, fast.steps, fast.current_reference()) == (
            slow.time, slow.steps, slow.current_reference())


def test_environment_switch_disables_the_kernel(monkeypatch):
    monkeypatch.setenv('MANIP_CONTROL_KERNEL', '0')
    sc = _scenario('seed001', duration=0.01)
    assert kernel.unsupported(sc) == 'disabled by MANIP_CONTROL_KERNEL=0'
    assert Plant(sc.plant, 1e-3)._compiled_step is None
    assert not simulation.use_kernel(sc)


_CACHE_CHECK = """
import dataclasses
import numpy as np
from manip_control.arm_model import TwoLinkArm
from manip_control.parameters import FrictionParameters, load_scenario
from manip_control.plant import Plant
from manip_control.simulation import run_closed_loop, run_closed_loop_python
sc = load_scenario('default')
stiff = (FrictionParameters(b=0.5, tau_c=3.0, eps=0.01, tau_s=1.0, v_s=0.05),) * 2
plant = dataclasses.replace(sc.plant, friction_model='karnopp', friction=stiff, actuator='ideal')
model = TwoLinkArm.from_plant(plant)
for engine, compiled in (('kernel', True), ('python', False)):
    tau = run_closed_loop(sc, 0.2, engine=engine).tau_cmd[-1]
    pl = Plant(plant, 1e-3, compiled=compiled)
    assert (pl._compiled_step is not None) == compiled
    for k in range(600):   # swings that stop the joints (zero-velocity events, stick band)
        pl.step(*(model.gravity(np.array(pl.position)) + np.array([30.0, 15.0])
                  * np.sin(2 * np.pi * k * 1e-3 / 0.2 + np.array([0.0, 1.0]))))
    print(*tau, *pl.state[:4])
"""


@pytest.mark.parametrize('source, old, new', [
    ('control.py', '    return t1, t2, sat1, sat2, z1, z2\n',
     '    return 2.0 * t1, t2, sat1, sat2, z1, z2\n'),
    ('friction.py', 'MAX_EVENTS = 4\n', 'MAX_EVENTS = 0\n'),
], ids=['control-law', 'karnopp-events'])
def test_cached_loop_follows_a_change_of_the_code_it_compiles_from(tmp_path, source, old, new):
    """
    The compiled loop runs control.py's law and friction.py's events as they are now.

    numba's cache checks only the stamp of the cached function's own file (kernel.py), but
    the kernel compiles ``control.two_link_law`` and ``friction.karnopp_substep_over`` into
    its loop. A copy of the package runs the kernel once (compiled, cached), then the law
    (the first joint's command doubled) or the events (none located) are changed, and a new
    process must see the change in the kernel as the Python loop does (the default closed
    loop's command after 0.2 s; a Karnopp plant's state after 0.6 s of swings, compiled step
    against Python step).
    """
    for name in ('manip_control', 'config'):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns('__pycache__'))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    def run() -> np.ndarray:
        out = subprocess.run([sys.executable, '-c', _CACHE_CHECK], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return np.loadtxt(out.stdout.splitlines())      # rows: kernel, Python

    before = run()
    path = tmp_path / 'manip_control' / source
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    after = run()
    np.testing.assert_allclose(before[0], before[1], rtol=1e-9, atol=1e-12)
    assert np.abs(after[1] - before[1]).max() > 1e-6            # the change shows in Python
    np.testing.assert_allclose(after[0], after[1], rtol=1e-9, atol=1e-12)   # and compiled
