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
Model-based analysis of a recorded run: how well the arm model explains the measured torques.

For an :class:`~manip_control.arm_model.ArmModel` and the recorded motion ``q(t_k)``, the
inverse-dynamics torque::

    tau_model = M(q) qdd + C(q, qd) qd + g(q) + f(qd)                          [N·m]

(``f`` the friction the model knows: viscous + Coulomb of the 2R plant parameters, the URDF
``<dynamics damping friction>`` when asked for, else none) is compared per joint with the
measured effort and, when recorded, the commanded effort held between commands.

Differentiation (no delay). The samples are put on a uniform grid of period ``h`` (kept as
recorded when the period jitter is below 1 %; otherwise linearly interpolated onto the median
period). ``F`` is a zero-phase Gaussian low-pass: the symmetric FIR kernel
``w_i = exp(-(i h)^2 / (2 sigma^2))`` (normalised to unit sum, ``|i h| <= 4 sigma``) with
``sigma = sqrt(ln 2) / (2 pi fc)``, so that its gain ``exp(-(2 pi f sigma)^2 / 2)`` is
``1/sqrt(2)`` at the cutoff ``fc``. A symmetric kernel has zero phase at every frequency: no
delay, nothing to compensate (a causal filter of the same bandwidth would lag by about
``sigma``). The convolution runs through numpy's FFT, the ends are padded by an odd
extension. ``D`` is the second-order central difference (``numpy.gradient``)::

    q_f = F q,   qd_f = D q_f,   qdd_f = D qd_f

and every torque it is compared with gets the same filter, ``F tau``, so both sides have the
same bandwidth and the same gain (the Gaussian's passband droop, 1.3 % at ``fc / 5``, cancels):
for the linear part of the dynamics ``ID(F q) = F ID(q)`` up to the difference error, the
nonlinear terms agree to second order in what the filter removes. The Coulomb term, sharp at
velocity reversals, is filtered too: ``F f(qd_f)``. The first and last ``4 sigma + 2 h``
(where the padding reaches) are left out of every figure. The filter needs numpy only (no
import of ``scipy.signal``, which alone costs more than the whole analysis).

Figures per joint: ``residual = F tau - tau_model``, its RMS and max |.| [N·m] and its RMS
as a fraction of the RMS of ``F tau``; the same against the held command when there is one.
A velocity check compares ``qd_f`` with ``F qd`` of the recorded velocity.

Gravity fit. The gravity torque is linear in the gravity vector ``g_vec`` of the base frame:
``g(q) = G(q) g_vec`` with ``G``'s columns the gravity torques for unit gravity along x, y, z.
:func:`fit_gravity` solves ``min || F tau - ID_0(q_f, qd_f, qdd_f) - G(q_f) g_vec ||`` over
the kept samples (``ID_0`` the dynamics without gravity): the gravity field that best explains
the efforts, e.g. to find that a simulator ran without gravity.

Inverse dynamics over many samples: :func:`batch_inverse_dynamics` uses the closed form,
vectorised over samples, for the 2R, and for URDF arms Pinocchio's RNEA once per sample in a
tight loop (about 2-5 µs each for 7 joints).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Sequence
import xml.etree.ElementTree as ET

from manip_control.arm_model import ArmModel
from manip_control.arm_model import TwoLinkArm
from manip_control.arm_model import UrdfArm
import numpy as np

DEFAULT_CUTOFF_HZ = 10.0
#: Gaussian kernel half-width in standard deviations.
KERNEL_SIGMAS = 4.0
#: Figures are taken at >= this many samples per second per Hz of cutoff (decimation).
DECIMATED_RATE = 20.0
#: Sampling is "uniform" when every period is within this fraction of the median.
UNIFORM_TOLERANCE = 0.01

__all__ = ['ModelAnalysisError', 'Motion', 'JointFriction', 'filter_motion',
           'batch_inverse_dynamics', 'gravity_basis', 'model_torque', 'compare',
           'fit_gravity', 'urdf_friction', 'DEFAULT_CUTOFF_HZ']


class ModelAnalysisError(ValueError):
    """The data cannot be analysed with the model; the message says why in one line."""


@dataclass
class JointFriction:
    """
    Per-joint friction ``f = b qd + (tau_c + tau_s exp(-(qd/v_s)^2)) tanh(qd / eps)`` [N·m].

    Arrays of shape (n,): ``b`` viscous [N·m·s/rad], ``tau_c`` Coulomb level [N·m], ``eps``
    smoothing [rad/s], ``tau_s`` Stribeck excess [N·m] over ``v_s`` [rad/s] (the smooth
    friction law of :mod:`manip_control.friction`); ``source`` says where they come from.
    """

    b: np.ndarray
    tau_c: np.ndarray
    eps: np.ndarray
    source: str
    tau_s: np.ndarray | None = None
    v_s: np.ndarray | None = None

    def torque(self, qd: np.ndarray) -> np.ndarray:
        """Friction torque [N·m] at velocities ``qd`` of shape (N, n)."""
        level = self.tau_c
        if self.tau_s is not None and np.any(self.tau_s):
            level = self.tau_c + self.tau_s * np.exp(-(qd / self.v_s) ** 2)
        return self.b * qd + level * np.tanh(qd / self.eps)

    @property
    def nonzero(self) -> bool:
        """Tell whether any term is non-zero."""
        return bool(np.any(self.b) or np.any(self.tau_c))


@dataclass
class Motion:
    """
    Filtered motion on a uniform grid.

    Attributes
    ----------
    t : ndarray, shape (N,)
        Times [s] of the figures: every :attr:`step`-th sample of the uniform grid
        (transients included; see :attr:`keep`).
    q, qd, qdd : ndarray, shape (N, n)
        ``F q`` [rad], ``D F q`` [rad/s], ``D D F q`` [rad/s^2] (computed at the full rate).
    period : float
        Period of :attr:`t` [s] (``step`` times the grid period).
    cutoff_hz : float
        Cutoff (-3 dB) of the Gaussian low-pass [Hz].
    sigma : float
        Its standard deviation in time [s].
    resampled : bool
        True if the recorded samples were interpolated onto the grid (jitter > 1 %).
    keep : slice
        The samples outside the transients.
    trim_s : float
        Time left out at each end [s].
    step : int
        Decimation of the figures: ``fs / step >= 20 fc``; the filtered signals have no
        content left near the decimated Nyquist frequency (gain < 1e-30 at ``10 fc``).

    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    period: float
    cutoff_hz: float
    sigma: float
    resampled: bool
    keep: slice
    trim_s: float
    _kernel: Any = None
    _src_t: np.ndarray | None = None
    _full_t: np.ndarray | None = None
    _full_qd: np.ndarray | None = None
    step: int = 1

    def smooth(self, t: np.ndarray, values: np.ndarray) -> np.ndarray:
        """
        Put ``values`` sampled at ``t`` on the grid and apply the same zero-phase filter ``F``.

        Returns the filtered values at the (decimated) grid times :attr:`t`. NaN samples are
        filled by linear interpolation in time first (a column with no finite value stays
        NaN).
        """
        return self._smooth_full(t, values)[::self.step]

    def _smooth_full(self, t: np.ndarray, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=float)
        grid = self._full_t
        same = (not self.resampled and t.shape == grid.shape and np.array_equal(t, self._src_t))
        out = np.empty((grid.size, values.shape[1]))
        finite = np.isfinite(values)
        for j in range(values.shape[1]):
            ok = finite[:, j]
            if same and ok.all():
                out[:, j] = values[:, j]
            elif not ok.any():
                out[:, j] = np.nan
            else:
                out[:, j] = np.interp(grid, t[ok], values[ok, j])
        good = np.isfinite(out).all(axis=0)
        if good.all():
            return _convolve(out, self._kernel)
        if good.any():
            out[:, good] = _convolve(out[:, good], self._kernel)
        return out

    def smooth_of_velocity(self, func) -> np.ndarray:
        """Return ``F func(qd_f)`` at the times :attr:`t` (computed and filtered at full rate)."""
        return _convolve(func(self._full_qd), self._kernel)[::self.step]


def _convolve(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Zero-phase FIR filter of the columns of ``x`` (odd extension at both ends; FFT)."""
    half = kernel.size // 2
    n = x.shape[0]
    pad = min(half, n - 1)
    head = 2.0 * x[:1] - x[pad:0:-1]
    tail = 2.0 * x[-1:] - x[-2:-pad - 2:-1]
    ext = np.concatenate([head, x, tail]) if pad else x
    if pad < half:                       # a very short series: pad with its end values
        ext = np.concatenate([np.repeat(ext[:1], half - pad, axis=0), ext,
                              np.repeat(ext[-1:], half - pad, axis=0)])
    size = ext.shape[0] + kernel.size - 1
    nfft = 1 << (size - 1).bit_length()
    cols = np.ascontiguousarray(ext.T)          # one contiguous row per signal
    spec = np.fft.rfft(cols, nfft, axis=1) * np.fft.rfft(kernel, nfft)
    full = np.fft.irfft(spec, nfft, axis=1)
    return full[:, 2 * half:2 * half + n].T


def _grid(t: np.ndarray) -> tuple[np.ndarray, float, bool]:
    dt = np.diff(t)
    if dt.size == 0 or np.any(dt <= 0.0):
        raise ModelAnalysisError('model analysis: the joint-state times must be strictly '
                                 'increasing')
    h = float(np.median(dt))
    if np.max(np.abs(dt - h)) <= UNIFORM_TOLERANCE * h:
        return t, h, False
    n = int(math.floor((t[-1] - t[0]) / h + 1e-9)) + 1
    return t[0] + h * np.arange(n), h, True


def filter_motion(t: Sequence[float], q: np.ndarray, *,
                  cutoff_hz: float = DEFAULT_CUTOFF_HZ) -> Motion:
    """
    Zero-phase filtered position and its first two derivatives (module docstring).

    Parameters
    ----------
    t : array_like, shape (N,)
        Sample times [s], strictly increasing.
    q : array_like, shape (N, n)
        Joint positions [rad or m]; NaN samples are interpolated.
    cutoff_hz : float
        Cutoff (-3 dB) of the Gaussian low-pass [Hz], below the Nyquist frequency.

    Raises
    ------
    ModelAnalysisError
        Times not increasing, cutoff out of range, or too few samples after the transients.

    """
    t = np.asarray(t, dtype=float)
    q = np.asarray(q, dtype=float)
    if not (math.isfinite(cutoff_hz) and cutoff_hz > 0.0):
        raise ModelAnalysisError(f'--cutoff: must be a positive frequency [Hz] (got {cutoff_hz})')
    grid, h, resampled = _grid(t)
    fs = 1.0 / h
    if not cutoff_hz < 0.5 * fs:
        raise ModelAnalysisError(f'--cutoff: {cutoff_hz:g} Hz must be below the Nyquist '
                                 f'frequency {0.5 * fs:g} Hz of the {fs:g} Hz joint states')
    sigma = math.sqrt(math.log(2.0)) / (2.0 * math.pi * cutoff_hz)
    half = max(1, int(math.ceil(KERNEL_SIGMAS * sigma / h)))
    kernel = np.exp(-0.5 * (np.arange(-half, half + 1) * h / sigma) ** 2)
    kernel /= kernel.sum()
    trim = half + 2
    if grid.size - 2 * trim < 10:
        raise ModelAnalysisError(
            f'model analysis: the run ({t[-1] - t[0]:.3g} s) is too short for a {cutoff_hz:g} '
            f'Hz filter ({trim * h:.3g} s of transient at each end); raise --cutoff')
    # the filtered signals hold nothing above ~4 fc (gain exp(-(2 pi 4 fc sigma)^2 / 2)
    # = 2e-5 there): every figure is taken on every step-th sample, >= DECIMATED_RATE fc
    # samples per second (the gain at that Nyquist frequency, 10 fc, is below 1e-30)
    step = max(1, int(fs / (DECIMATED_RATE * cutoff_hz) + 1e-6))
    motion = Motion(grid, q, q, q, h, float(cutoff_hz), sigma, resampled,
                    slice(-(-trim // step), (grid.size - trim - 1) // step + 1), trim * h,
                    kernel, t, grid, None, step)
    q_f = motion._smooth_full(t, q)
    if not np.isfinite(q_f).all():
        raise ModelAnalysisError('model analysis: a joint has no position sample')
    qd = np.gradient(q_f, h, axis=0)
    motion._full_qd = qd
    motion.t = grid[::step]
    motion.q = q_f[::step]
    motion.qd = qd[::step]
    motion.qdd = np.gradient(qd, h, axis=0)[::step]
    motion.period = h * step
    return motion


# ------------------------------------------------------------------------------------------
# inverse dynamics over many samples


def _two_link_batch(arm: TwoLinkArm, q, qd, qdd, gravity: bool = True) -> np.ndarray:
    """Closed-form 2R inverse dynamics vectorised over samples (:mod:`dynamics` equations)."""
    m = arm.model
    c2, s2 = np.cos(q[:, 1]), np.sin(q[:, 1])
    h = -m.b * s2
    m11 = m.a + 2.0 * m.b * c2
    m12 = m.d12 + m.b * c2
    out = np.empty_like(q)
    out[:, 0] = m11 * qdd[:, 0] + m12 * qdd[:, 1] + h * (2.0 * qd[:, 0] * qd[:, 1]
                                                         + qd[:, 1] ** 2)
    out[:, 1] = m12 * qdd[:, 0] + m.d22 * qdd[:, 1] - h * qd[:, 0] ** 2
    if gravity:
        c12 = np.cos(q[:, 0] + q[:, 1])
        out[:, 0] += m.g1 * np.cos(q[:, 0]) + m.g2 * c12
        out[:, 1] += m.g2 * c12
    return out


def batch_inverse_dynamics(model: ArmModel, q: np.ndarray, qd: np.ndarray,
                           qdd: np.ndarray) -> np.ndarray:
    """
    ``tau_k = M(q_k) qdd_k + C(q_k, qd_k) qd_k + g(q_k)`` [N·m] for every sample k.

    Parameters
    ----------
    model : ArmModel
        The arm (:class:`TwoLinkArm`: closed form vectorised over samples; :class:`UrdfArm`:
        Pinocchio's RNEA per sample, armature and rotor coupling included; any other
        model: its :meth:`~ArmModel.inverse_dynamics` per sample).
    q, qd, qdd : ndarray, shape (N, n)
        Positions [rad], velocities [rad/s], accelerations [rad/s^2] in model joint order.

    Returns
    -------
    ndarray, shape (N, n)

    """
    q, qd, qdd = (np.ascontiguousarray(x, dtype=float) for x in (q, qd, qdd))
    if q.ndim != 2 or q.shape[1] != model.n or qd.shape != q.shape or qdd.shape != q.shape:
        raise ModelAnalysisError(f'inverse dynamics: expected arrays of shape (N, {model.n}), '
                                 f'got {q.shape}, {qd.shape}, {qdd.shape}')
    if isinstance(model, TwoLinkArm):
        return _two_link_batch(model, q, qd, qdd)
    out = np.empty_like(q)
    if isinstance(model, UrdfArm):
        import pinocchio as pin
        pm = model.pin_model
        data = pm.createData()
        rnea = pin.rnea
        for k in range(q.shape[0]):
            out[k] = rnea(pm, data, q[k], qd[k], qdd[k])
        if np.any(model.coupling_matrix):
            out += qdd @ model.coupling_matrix.T
        return out
    for k in range(q.shape[0]):
        out[k] = model.inverse_dynamics(q[k], qd[k], qdd[k])
    return out


def gravity_basis(model: ArmModel, q: np.ndarray) -> np.ndarray:
    """
    Gravity torques per unit gravity along the base axes: ``G[k, :, i]`` for ``e_i`` [N·m/(m/s^2)].

    ``g(q) = G(q) g_vec`` for any gravity vector ``g_vec`` [m/s^2] of the base frame.

    Raises
    ------
    ModelAnalysisError
        For a model whose gravity direction is fixed (the 2R moves in its vertical plane).

    """
    q = np.ascontiguousarray(q, dtype=float)
    out = np.empty((q.shape[0], model.n, 3))
    if isinstance(model, TwoLinkArm):
        # planar: gravity along -y of the base frame only; its magnitude scales g1, g2
        g0 = float(np.linalg.norm(model.gravity_field))
        zero = np.zeros_like(q)
        with_g = _two_link_batch(model, q, zero, zero)
        out[:] = 0.0
        if g0 > 0.0:
            out[:, :, 1] = -with_g / g0
        return out
    if not isinstance(model, UrdfArm):
        raise ModelAnalysisError('gravity fit: needs a URDF or 2R model')
    import pinocchio as pin
    pm = model.pin_model.copy()
    data = pm.createData()
    for i in range(3):
        e = np.zeros(3)
        e[i] = 1.0
        pm.gravity.linear = e
        for k in range(q.shape[0]):
            out[k, :, i] = pin.computeGeneralizedGravity(pm, data, q[k])
    return out


def urdf_friction(urdf: str, joint_names: Sequence[str], eps: float = 0.01) -> JointFriction:
    """
    Joint friction from the URDF's ``<dynamics damping="b" friction="tau_c">`` elements.

    ``damping`` is viscous [N·m·s/rad], ``friction`` the Coulomb level [N·m] (URDF
    specification); a missing element or attribute is 0. ``eps`` [rad/s] smooths the sign.
    """
    try:
        root = ET.fromstring(urdf)
    except ET.ParseError as exc:
        raise ModelAnalysisError(f'URDF: not valid XML ({exc})') from None
    by_name = {j.get('name'): j for j in root.findall('joint')}
    b, tc = [], []
    for name in joint_names:
        dyn = by_name[name].find('dynamics') if name in by_name else None
        vals = []
        for attr in ('damping', 'friction'):
            try:
                vals.append(float(dyn.get(attr, 0.0)) if dyn is not None else 0.0)
            except ValueError:
                raise ModelAnalysisError(f'URDF: joint {name}: <dynamics {attr}="'
                                         f'{dyn.get(attr)}"> is not a number') from None
        b.append(vals[0])
        tc.append(vals[1])
    n = len(joint_names)
    return JointFriction(np.array(b), np.array(tc), np.full(n, float(eps)),
                         'URDF <dynamics damping friction>')


def model_torque(model: ArmModel, motion: Motion,
                 friction: JointFriction | None = None) -> np.ndarray:
    """
    ``tau_model = ID(q_f, qd_f, qdd_f) + F f(qd_f)`` [N·m] on the motion's grid, shape (N, n).

    The friction term (sharp at reversals for a small ``eps``) is filtered like the measured
    torques it is compared with.
    """
    tau = batch_inverse_dynamics(model, motion.q, motion.qd, motion.qdd)
    if friction is not None and friction.nonzero:
        tau += motion.smooth_of_velocity(friction.torque)
    return tau


def compare(reference: np.ndarray, model: np.ndarray, keep: slice) -> list[dict]:
    """
    Per-joint residual figures of ``reference - model`` over the samples ``keep``.

    Returns, per joint, ``{'effort_rms', 'model_rms', 'residual_rms', 'residual_max_abs',
    'residual_mean', 'residual_fraction'}`` [N·m] (fraction: residual RMS / effort RMS,
    None when the effort RMS is 0); None for a joint without data.
    """
    out = []
    ref, mod = reference[keep], model[keep]
    for j in range(ref.shape[1]):
        r = ref[:, j]
        if not np.isfinite(r).all():
            out.append(None)
            continue
        res = r - mod[:, j]
        eff = float(np.sqrt(np.mean(r ** 2)))
        rms = float(np.sqrt(np.mean(res ** 2)))
        out.append({'effort_rms': eff, 'model_rms': float(np.sqrt(np.mean(mod[:, j] ** 2))),
                    'residual_rms': rms, 'residual_max_abs': float(np.max(np.abs(res))),
                    'residual_mean': float(np.mean(res)),
                    'residual_fraction': rms / eff if eff > 0.0 else None})
    return out


def fit_gravity(model: ArmModel, motion: Motion, effort_f: np.ndarray,
                friction: JointFriction | None = None, max_samples: int = 4000) -> dict | None:
    """
    Gravity vector of the base frame that best explains the filtered efforts (least squares).

    Solves ``min || F tau - ID_0 - F f - G(q_f) g_vec ||^2`` over the kept samples
    (decimated to at most ``max_samples``), ``ID_0`` the inverse dynamics without gravity.
    Returns ``{'vector', 'magnitude', 'angle_to_model_deg', 'residual_rms',
    'residual_rms_model_gravity', 'samples'}`` (residuals per joint [N·m]) or None when no
    joint has effort data. For the planar 2R only the magnitude along its -y axis is fitted.
    """
    idx = np.arange(motion.t.size)[motion.keep]
    if idx.size > max_samples:
        idx = idx[np.linspace(0, idx.size - 1, max_samples).round().astype(int)]
    cols = np.isfinite(effort_f[idx]).all(axis=0)
    if not cols.any():
        return None
    q, qd, qdd = motion.q[idx], motion.qd[idx], motion.qdd[idx]
    basis = gravity_basis(model, q)
    g_model = np.asarray(model.gravity_field, float)
    full = batch_inverse_dynamics(model, q, qd, qdd)
    no_g = full - np.einsum('kji,i->kj', basis, g_model)
    rhs = effort_f[idx] - no_g
    if friction is not None and friction.nonzero:
        rhs -= motion.smooth_of_velocity(friction.torque)[idx]
    a = basis[:, cols, :].reshape(-1, 3)
    b = rhs[:, cols].reshape(-1)
    use = [1] if isinstance(model, TwoLinkArm) else [0, 1, 2]
    sol, *_ = np.linalg.lstsq(a[:, use], b, rcond=None)
    g = np.zeros(3)
    g[use] = sol
    res_fit = rhs - np.einsum('kji,i->kj', basis, g)
    res_model = rhs - np.einsum('kji,i->kj', basis, g_model)
    mag = float(np.linalg.norm(g))
    gm = float(np.linalg.norm(g_model))
    angle = None
    if mag > 0.0 and gm > 0.0:
        angle = math.degrees(math.acos(max(-1.0, min(1.0, float(g @ g_model) / (mag * gm)))))

    def rms(x):
        return [float(np.sqrt(np.mean(x[:, j] ** 2))) if cols[j] else None
                for j in range(x.shape[1])]
    return {'vector': g.tolist(), 'magnitude': mag, 'angle_to_model_deg': angle,
            'model_vector': g_model.tolist(), 'residual_rms': rms(res_fit),
            'residual_rms_model_gravity': rms(res_model), 'samples': int(idx.size)}
