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

    i_ref = clamp(tau_cmd / (eta N k_t), +-i_max)             [A]
    V     = clamp(Kp_i (i_ref - i) + x_i, +-V_max)            [V]
    dx_i/dt = Ki_i (i_ref - i)   while V is not saturated     (conditional integration)
    L di/dt = V - R i - k_e N qd                              [V]
    tau_m = eta N k_t i                                       [N·m at the joint]

The ideal actuator applies ``tau_m = clamp(tau_cmd, +-torque_limit)`` directly, for when the
current loop is much faster than the mechanics.
"""

from __future__ import annotations

from manip_control.parameters import MotorParameters


def clamp(x: float, limit: float) -> float:
    """Clamp ``x`` to ``[-limit, limit]``."""
    return limit if x > limit else (-limit if x < -limit else x)


def current_reference(tau_cmd: float, motor: MotorParameters) -> float:
    """Drive current reference ``clamp(tau_cmd / (eta N k_t), +-i_max)`` [A]."""
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
    """Joint torque produced by armature current ``i``: ``eta N k_t i`` [N·m]."""
    return motor.torque_per_amp * i
