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
    tau_m = N k_t i - tau_gear(T, qd)                         [N·m at the joint]
    T     = N (k_t i - Jm ddtheta_m)                          (mesh torque, joint side)

Gearbox with direction-dependent efficiency. The rotor sits upstream of the gear: of the
motor's electromagnetic torque ``k_t i`` the part ``Jm ddtheta_m`` accelerates the rotor
(``ddtheta_m`` its angular acceleration, ``N qdd`` for a rotor on the base) and the rest
crosses the gear mesh, which therefore carries ``T = N (k_t i - Jm ddtheta_m)`` at the joint
side. The loss is charged on that mesh torque. The mesh power is ``P = T qd``: when the
motor drives the load (``P > 0``) the gear passes ``eta`` of it to the link, when the load
drives the motor (``P < 0``) the motor side receives ``eta_back`` of the load's power, so
the link feels ``T / eta_back``. The loss is a Coulomb friction proportional to the mesh
torque, smoothed like the joint's Coulomb friction (``s = tanh(qd / eps)``, ``eps`` of the
joint's friction)::

    k_f = 1 - eta,   k_b = 1 / eta_back - 1
    tau_gear = 1/2 (k_f + k_b) |T| s + 1/2 (k_f - k_b) T s^2
             = |T| s (1/2 (k_f + k_b) + 1/2 (k_f - k_b) sign(T) s)

The bracket is a weight between ``k_f`` (``sign(T) s -> 1``: motoring) and ``k_b``
(``-> -1``: back-driven), never negative, so the gear loss power ``tau_gear qd >= 0`` at
every state: the gearbox never creates energy. The switch is smooth (C-infinity in qd,
continuous in T with a kink at T = 0), so fixed-step RK4 keeps its order. At rest the loss
is zero (``s = 0``) as for the smoothed Coulomb friction: a continuous loss that is
dissipative in both directions must vanish at ``qd = 0``. That is why the drive converts the
torque command through the ideal transmission ``N k_t``: a command equal to the load holds
the joint at rest, and moving, the gear loss acts on the arm as a load-dependent friction.

Because ``ddtheta_m`` depends on the joint accelerations, which depend on the loss, the
plant solves the equation of motion and the loss together (:mod:`manip_control.plant`):
for a given sign of each mesh torque the loss is linear in ``T``, so the accelerations
follow from one linear solve, and the sign is then checked. The rotor inertia itself is
part of the arm's inertia matrix (:mod:`manip_control.dynamics`), so the torque the
actuator applies to the arm-plus-rotors system is ``tau_m = N k_t i - tau_gear(T, qd)``.

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


def gear_loss_torque(mesh: float, qd: float, motor: MotorParameters, eps: float) -> float:
    """
    Gear loss torque ``tau_gear`` [N·m] at mesh torque ``T`` [N·m] and joint speed ``qd``.

    ``tau_gear = 1/2 (k_f + k_b) |T| s + 1/2 (k_f - k_b) T s^2`` with ``s = tanh(qd / eps)``,
    ``k_f = 1 - eta``, ``k_b = 1 / eta_back - 1``; it has the sign of ``qd`` (or is zero),
    so its power ``tau_gear qd`` is never negative.

    Parameters
    ----------
    mesh : float
        Torque carried by the gear mesh, referred to the joint,
        ``T = N (k_t i - Jm ddtheta_m)`` [N·m].
    qd : float
        Joint velocity [rad/s].
    motor : MotorParameters
        Efficiencies ``eta``, ``eta_back``.
    eps : float
        Smoothing velocity [rad/s] (the joint friction's ``eps``).

    """
    kf = 1.0 - motor.eta
    kb = 1.0 / motor.eta_back - 1.0
    s = math.tanh(qd / eps)
    return (0.5 * (kf + kb) * abs(mesh) + 0.5 * (kf - kb) * mesh * s) * s


def joint_torque(i: float, qd: float, motor: MotorParameters, eps: float,
                 rotor_torque: float = 0.0) -> float:
    """
    Actuator torque on the arm (with its rotors) ``N k_t i - tau_gear(T, qd)`` [N·m].

    ``T = N k_t i - rotor_torque`` is the mesh torque, ``rotor_torque = N Jm ddtheta_m``
    [N·m] the part of the motor torque (referred to the joint) that accelerates the rotor.
    Moving fast (``|qd| >> eps``) the link receives ``eta T`` when the motor drives it
    (``T qd > 0``) and ``T / eta_back`` when it drives the motor; at rest ``N k_t i``.
    """
    nk = motor_torque(i, motor)
    return nk - gear_loss_torque(nk - rotor_torque, qd, motor, eps)


def gear_loss_weights(motor: MotorParameters) -> tuple[float, float]:
    """
    Gear loss weights ``(wa, wb) = ((k_f + k_b) / 2, (k_f - k_b) / 2)`` (dimensionless).

    ``tau_gear = (wa |T| + wb T s) s`` with ``k_f = 1 - eta``, ``k_b = 1 / eta_back - 1``;
    ``wa >= |wb|``, and ``wa = 0`` only for a lossless gear.
    """
    kf = 1.0 - motor.eta
    kb = 1.0 / motor.eta_back - 1.0
    return 0.5 * (kf + kb), 0.5 * (kf - kb)
