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
Joint actuators: brushed DC motor with a PI current drive, and an ideal torque source.

Motor (per joint), with the drive's continuous-time PI current loop::

    i_ref = clamp(tau_cmd / (N k_t), +-i_max)                 [A]
    V     = clamp(Kp_i (i_ref - i) + x_i, +-V_max)            [V]
    dx_i/dt = Ki_i (i_ref - i)   while V is not saturated     (conditional integration)
    L di/dt = V - R i - k_e N qd                              [V]
    tau_m = N k_t i - tau_gear(i, qd)                         [N·m at the joint]

Gearbox with direction-dependent efficiency. The motor's electromagnetic power at the joint
is ``P_m = N k_t i qd``. When the motor drives the load (``P_m > 0``) the gear passes
``eta`` of it, ``tau_m = eta N k_t i``; when the load drives the motor (``P_m < 0``) the
motor receives ``eta_back`` of the load's power, ``tau_m = N k_t i / eta_back``. The loss is
a Coulomb friction proportional to the transmitted torque, smoothed like the joint's Coulomb
friction (``s = tanh(qd / eps)``, ``eps`` of the joint's friction)::

    k_f = 1 - eta,   k_b = 1 / eta_back - 1
    tau_gear = N k_t (1/2 (k_f + k_b) |i| s + 1/2 (k_f - k_b) i s^2)
             = N k_t |i| s (1/2 (k_f + k_b) + 1/2 (k_f - k_b) sign(i) s)

The bracket is a weight between ``k_f`` (``sign(i) s -> 1``: motoring) and ``k_b``
(``-> -1``: back-driven), never negative, so the gear loss power ``tau_gear qd >= 0`` at
every state: the gearbox never creates energy. The switch is smooth (C-infinity in qd,
continuous in i with a kink at i = 0), so fixed-step RK4 keeps its order. At rest the loss
is zero (``s = 0``) as for the smoothed Coulomb friction: a continuous loss that is
dissipative in both directions must vanish at ``qd = 0``. That is why the drive converts the
torque command through the ideal transmission ``N k_t``: a command equal to the load holds
the joint at rest, and moving, the gear loss acts on the arm as a load-dependent friction.

The ideal actuator applies ``tau_m = clamp(tau_cmd, +-torque_limit)`` directly, for when the
current loop is much faster than the mechanics.
"""

from __future__ import annotations

import math

from manip_control.parameters import MotorParameters


def clamp(x: float, limit: float) -> float:
    """Clamp ``x`` to ``[-limit, limit]``."""
    return limit if x > limit else (-limit if x < -limit else x)


def current_reference(tau_cmd: float, motor: MotorParameters) -> float:
    """Drive current reference ``clamp(tau_cmd / (N k_t), +-i_max)`` [A]."""
    return clamp(tau_cmd / motor.torque_per_amp, motor.i_max)


def drive_voltage(i_ref: float, i: float, x_i: float, motor: MotorParameters):
    """
    PI drive output.

    Returns
    -------
    V : float
        Terminal voltage after the ``+-V_max`` clamp [V].
    saturated : bool
        Whether the clamp was active (the integrator is then frozen).

    """
    v = motor.Kp_i * (i_ref - i) + x_i
    return clamp(v, motor.V_max), abs(v) > motor.V_max


def motor_derivatives(i: float, x_i: float, i_ref: float, qd: float, motor: MotorParameters):
    """Time derivatives ``(di/dt [A/s], dx_i/dt [V/s])`` of one joint's motor + drive."""
    v, saturated = drive_voltage(i_ref, i, x_i, motor)
    di = (v - motor.R * i - motor.k_e * motor.N * qd) / motor.L
    dx = 0.0 if saturated else motor.Ki_i * (i_ref - i)
    return di, dx


def current_derivative(i: float, v: float, qd: float, motor: MotorParameters) -> float:
    """Open-loop armature equation ``di/dt = (V - R i - k_e N qd) / L`` [A/s]."""
    return (v - motor.R * i - motor.k_e * motor.N * qd) / motor.L


def motor_torque(i: float, motor: MotorParameters) -> float:
    """Motor torque referred to the joint before the gear loss: ``N k_t i`` [N·m]."""
    return motor.torque_per_amp * i


def gear_loss_torque(i: float, qd: float, motor: MotorParameters, eps: float) -> float:
    """
    Gear loss torque ``tau_gear`` [N·m] at current ``i`` [A] and joint speed ``qd`` [rad/s].

    ``tau_gear = N k_t (1/2 (k_f + k_b) |i| s + 1/2 (k_f - k_b) i s^2)`` with
    ``s = tanh(qd / eps)``, ``k_f = 1 - eta``, ``k_b = 1 / eta_back - 1``; it has the sign
    of ``qd`` (or is zero), so its power ``tau_gear qd`` is never negative.

    Parameters
    ----------
    i : float
        Armature current [A].
    qd : float
        Joint velocity [rad/s].
    motor : MotorParameters
        Gear ratio ``N``, torque constant ``k_t``, efficiencies ``eta``, ``eta_back``.
    eps : float
        Smoothing velocity [rad/s] (the joint friction's ``eps``).

    """
    kf = 1.0 - motor.eta
    kb = 1.0 / motor.eta_back - 1.0
    s = math.tanh(qd / eps)
    return motor.N * motor.k_t * (0.5 * (kf + kb) * abs(i) * s + 0.5 * (kf - kb) * i * s * s)


def joint_torque(i: float, qd: float, motor: MotorParameters, eps: float) -> float:
    """
    Actuator torque at the joint after the gearbox ``N k_t i - tau_gear(i, qd)`` [N·m].

    ``eta N k_t i`` when the motor drives the load fast (``i qd > 0``, ``|qd| >> eps``),
    ``N k_t i / eta_back`` when the load drives the motor, ``N k_t i`` at rest.
    """
    return motor_torque(i, motor) - gear_loss_torque(i, qd, motor, eps)
