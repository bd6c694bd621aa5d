"""Joint friction: viscous + smoothed Coulomb, with an optional Stribeck term.

``f(qd) = b qd + (tau_c + tau_s exp(-(qd / v_s)^2)) tanh(qd / eps)``  [N·m]

The tanh smoothing (width ``eps`` [rad/s]) keeps the model C-infinity and odd, so fixed-step
integrators see no discontinuity at zero velocity.
"""

from __future__ import annotations

import math

import numpy as np

from manip_control.parameters import FrictionParameters


def friction_torque_scalar(qd: float, fr: FrictionParameters) -> float:
    """Friction torque of one joint [N·m] at joint velocity ``qd`` [rad/s]."""
    level = fr.tau_c
    if fr.tau_s:
        level += fr.tau_s * math.exp(-(qd / fr.v_s) ** 2)
    return fr.b * qd + level * math.tanh(qd / fr.eps)


def friction_torque(qd, friction) -> np.ndarray:
    """Friction torque per joint [N·m].

    Parameters
    ----------
    qd : array_like, shape (n,)
        Joint velocities [rad/s].
    friction : sequence of n FrictionParameters
    """
    qd = np.asarray(qd, dtype=float)
    if qd.shape != (len(friction),):
        raise ValueError(f'qd: expected shape ({len(friction)},), got {qd.shape}')
    return np.array([friction_torque_scalar(v, fr) for v, fr in zip(qd, friction)])
