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

"""2R rigid-body dynamics against the seed-004 numbers and independent derivations."""

import math

from manip_control.dynamics import coriolis_matrix
from manip_control.dynamics import forward_dynamics
from manip_control.dynamics import gravity_vector
from manip_control.dynamics import inertia_matrix
from manip_control.dynamics import inverse_dynamics
from manip_control.dynamics import ShapeError
from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import ArmParameters
import numpy as np
import pytest

SEED004 = ArmParameters(m1=1.0, m2=1.0, l1=1.0, l2=1.0, lc1=0.5, lc2=0.5, I1=1 / 12, I2=1 / 12)
SEED001 = ArmParameters(m1=3.0, m2=2.0, l1=1.0, l2=1.0, lc1=0.5, lc2=0.5, I1=0.2, I2=0.1)
ODD = ArmParameters(m1=1.7, m2=0.9, l1=0.8, l2=0.6, lc1=0.3, lc2=0.45, I1=0.05, I2=0.02)
RNG = np.random.default_rng(4)
CONFIGS = [RNG.uniform(-np.pi, np.pi, 2) for _ in range(25)]


def test_seed004_inertia_matrix_at_zero():
    np.testing.assert_allclose(inertia_matrix([0, 0], SEED004),
                               [[8 / 3, 5 / 6], [5 / 6, 1 / 3]], rtol=0, atol=1e-12)


def test_seed004_gravity_at_zero():
    np.testing.assert_allclose(gravity_vector([0, 0], SEED004), [19.62, 4.905], atol=1e-12)


def test_seed004_torque_for_unit_acceleration():
    tau = inverse_dynamics([0, 0], [0, 0], [1, 0], SEED004)
    np.testing.assert_allclose(tau, [22.2866667, 5.7383333], atol=5e-7)


def _lagrangian_terms(q, qd, arm):
    """
    M, c, g from point-mass + rod kinematics (independent of the closed form).

    Kinetic energy from the CoM velocities (Jacobians) and the link rotations; c from the
    Christoffel symbols of M differentiated numerically; g from the potential by
    differentiation.
    """
    def M_of(q):
        q1, q2 = q
        jv1 = np.array([[-arm.lc1 * math.sin(q1), 0.0], [arm.lc1 * math.cos(q1), 0.0]])
        jv2 = np.array([[-arm.l1 * math.sin(q1) - arm.lc2 * math.sin(q1 + q2),
                         -arm.lc2 * math.sin(q1 + q2)],
                        [arm.l1 * math.cos(q1) + arm.lc2 * math.cos(q1 + q2),
                         arm.lc2 * math.cos(q1 + q2)]])
        jw1 = np.array([[1.0, 0.0]])
        jw2 = np.array([[1.0, 1.0]])
        return (arm.m1 * jv1.T @ jv1 + arm.m2 * jv2.T @ jv2 + arm.I1 * jw1.T @ jw1
                + arm.I2 * jw2.T @ jw2)

    def V_of(q):
        y1 = arm.lc1 * math.sin(q[0])
        y2 = arm.l1 * math.sin(q[0]) + arm.lc2 * math.sin(q[0] + q[1])
        return arm.g0 * (arm.m1 * y1 + arm.m2 * y2)

    h = 1e-6
    dM = []
    g = np.zeros(2)
    for k in range(2):
        dq = np.zeros(2)
        dq[k] = h
        dM.append((M_of(q + dq) - M_of(q - dq)) / (2 * h))
        g[k] = (V_of(q + dq) - V_of(q - dq)) / (2 * h)
    c = np.zeros(2)
    for i in range(2):
        for j in range(2):
            for k in range(2):
                c[i] += 0.5 * (dM[k][i, j] + dM[j][i, k] - dM[i][j, k]) * qd[j] * qd[k]
    return M_of(q), c, g


@pytest.mark.parametrize('arm', [SEED001, ODD])
@pytest.mark.parametrize('q', CONFIGS[:8])
def test_closed_form_matches_lagrangian_derivation(arm, q):
    qd = RNG.uniform(-2, 2, 2)
    M, c, g = _lagrangian_terms(q, qd, arm)
    model = TwoLinkModel(arm)
    np.testing.assert_allclose(model.inertia_matrix(q), M, atol=1e-12)
    np.testing.assert_allclose(model.coriolis_vector(q, qd), c, atol=1e-7)
    np.testing.assert_allclose(model.gravity_vector(q), g, atol=1e-7)


@pytest.mark.parametrize('q', CONFIGS)
def test_inertia_matrix_is_symmetric_positive_definite(q):
    for rotor in ((0.0, 0.0), (0.1, 0.05)):
        M = inertia_matrix(q, ODD, rotor)
        assert np.allclose(M, M.T)
        assert np.all(np.linalg.eigvalsh(M) > 0)


def test_rotor_inertia_adds_to_the_diagonal_only():
    q = [0.3, -1.1]
    diff = inertia_matrix(q, SEED001, (0.1, 0.05)) - inertia_matrix(q, SEED001)
    np.testing.assert_allclose(diff, [[0.1, 0.0], [0.0, 0.05]], atol=1e-15)


JM = (1.0e-5, 5.0e-6)   # rotor inertias at the motor shafts [kg m^2]
NG = (100.0, 80.0)      # gear ratios


def _body_kinetic_energy(q, qd, arm):
    """
    Kinetic energy [J] of the two links and the two rotors as separate rigid bodies.

    Rotor 1 sits on the base and turns at N1 qd1; rotor 2 sits on link 1 at the elbow and
    turns at N2 qd2 relative to link 1, so at qd1 + N2 qd2 in the inertial frame.
    """
    def positions(qq):
        c1 = np.array([arm.lc1 * math.cos(qq[0]), arm.lc1 * math.sin(qq[0])])
        c2 = np.array([arm.l1 * math.cos(qq[0]) + arm.lc2 * math.cos(qq[0] + qq[1]),
                       arm.l1 * math.sin(qq[0]) + arm.lc2 * math.sin(qq[0] + qq[1])])
        return c1, c2
    h = 1e-6  # centre-of-mass velocities by central differences along qd
    p_plus = positions(np.asarray(q) + h * np.asarray(qd))
    p_minus = positions(np.asarray(q) - h * np.asarray(qd))
    v1, v2 = ((a - b) / (2 * h) for a, b in zip(p_plus, p_minus))
    links = (0.5 * arm.m1 * v1 @ v1 + 0.5 * arm.I1 * qd[0] ** 2
             + 0.5 * arm.m2 * v2 @ v2 + 0.5 * arm.I2 * (qd[0] + qd[1]) ** 2)
    rotors = (0.5 * JM[0] * (NG[0] * qd[0]) ** 2
              + 0.5 * JM[1] * (qd[0] + NG[1] * qd[1]) ** 2)
    return links + rotors


@pytest.mark.parametrize('q', CONFIGS[:8])
def test_inertia_with_rotor_coupling_matches_body_kinetic_energy(q):
    """M_ij = d^2 T / dqd_i dqd_j of the hand-built bodies (T is quadratic in qd)."""
    model = TwoLinkModel(ODD, (JM[0] * NG[0] ** 2, JM[1] * NG[1] ** 2),
                         (JM[1], JM[1] * NG[1]))
    hess = np.empty((2, 2))
    e = np.eye(2)
    s = 0.5
    for i in range(2):
        for j in range(2):
            hess[i, j] = (_body_kinetic_energy(q, s * (e[i] + e[j]), ODD)
                          - _body_kinetic_energy(q, s * (e[i] - e[j]), ODD)
                          - _body_kinetic_energy(q, s * (e[j] - e[i]), ODD)
                          + _body_kinetic_energy(q, -s * (e[i] + e[j]), ODD)) / (4 * s * s)
    np.testing.assert_allclose(model.inertia_matrix(q), hess, rtol=1e-8, atol=1e-9)
    # the coupling is really there: without it M12 misses Jm2 N2 = 4e-4 kg m^2
    diag_only = TwoLinkModel(ODD, (JM[0] * NG[0] ** 2, JM[1] * NG[1] ** 2))
    assert abs(diag_only.inertia_matrix(q)[0, 1] - hess[0, 1]) > 1e-4
    # and the kinetic energy of the model is the bodies' for any velocity
    qd = RNG.uniform(-3, 3, 2)
    assert model.kinetic_energy(q, qd) == pytest.approx(_body_kinetic_energy(q, qd, ODD),
                                                        rel=1e-8)


@pytest.mark.parametrize('q', CONFIGS[:6])
def test_rotor_coupling_keeps_mdot_minus_2c_skew_and_c_unchanged(q):
    coupling = (JM[1], JM[1] * NG[1])
    model = TwoLinkModel(ODD, (0.1, 0.05), coupling)
    qd = RNG.uniform(-3, 3, 2)
    h = 1e-6
    mdot = (model.inertia_matrix(q + h * qd) - model.inertia_matrix(q - h * qd)) / (2 * h)
    n = mdot - 2 * model.coriolis_matrix(q, qd)
    np.testing.assert_allclose(n, -n.T, atol=1e-8)
    np.testing.assert_allclose(model.coriolis_matrix(q, qd), coriolis_matrix(q, qd, ODD),
                               rtol=0, atol=0)
    # inverse and forward dynamics use the coupled M
    qdd = RNG.uniform(-5, 5, 2)
    tau = model.inverse_dynamics(q, qd, qdd)
    np.testing.assert_allclose(tau, model.inertia_matrix(q) @ qdd
                               + model.coriolis_vector(q, qd) + model.gravity_vector(q),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.forward_dynamics(q, qd, tau), qdd, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize('q', CONFIGS)
def test_forward_inverts_inverse_dynamics(q):
    qd = RNG.uniform(-3, 3, 2)
    qdd = RNG.uniform(-10, 10, 2)
    tau = inverse_dynamics(q, qd, qdd, ODD, (0.2, 0.1))
    np.testing.assert_allclose(forward_dynamics(q, qd, tau, ODD, (0.2, 0.1)), qdd,
                               rtol=1e-10, atol=1e-10)
    # and against a direct linear solve with the matrices
    model = TwoLinkModel(ODD, (0.2, 0.1))
    rhs = tau - model.coriolis_matrix(q, qd) @ qd - model.gravity_vector(q)
    np.testing.assert_allclose(np.linalg.solve(model.inertia_matrix(q), rhs), qdd, atol=1e-9)


@pytest.mark.parametrize('q', CONFIGS[:10])
def test_mdot_minus_2c_is_skew_symmetric(q):
    qd = RNG.uniform(-3, 3, 2)
    h = 1e-6
    Mdot = (inertia_matrix(q + h * qd, ODD) - inertia_matrix(q - h * qd, ODD)) / (2 * h)
    N = Mdot - 2 * coriolis_matrix(q, qd, ODD)
    np.testing.assert_allclose(N, -N.T, atol=1e-8)
    # a non-Christoffel factorisation with the same c = C qd is not skew: the test can fail
    C_alt = coriolis_matrix(q, qd, ODD)
    h2 = -ODD.m2 * ODD.l1 * ODD.lc2 * math.sin(q[1])
    C_alt = np.array([[2 * h2 * qd[1], h2 * qd[1]], [-h2 * qd[0], 0.0]])
    np.testing.assert_allclose(C_alt @ qd, coriolis_matrix(q, qd, ODD) @ qd, atol=1e-12)
    N_alt = Mdot - 2 * C_alt
    if abs(math.sin(q[1]) * qd[1]) > 1e-3:
        assert not np.allclose(N_alt, -N_alt.T, atol=1e-6)


def test_horizontal_plane_has_no_gravity():
    arm = ArmParameters(plane='horizontal')
    np.testing.assert_array_equal(gravity_vector([0.4, 0.2], arm), [0.0, 0.0])


def test_shapes_are_checked():
    with pytest.raises(ShapeError, match='q: expected shape'):
        inertia_matrix([0.0, 0.0, 0.0], SEED001)
    with pytest.raises(ShapeError, match='qdd'):
        inverse_dynamics([0, 0], [0, 0], [[1, 0]], SEED001)
