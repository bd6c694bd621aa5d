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
URDF generation: the inertial data of the URDF reproduce the model's M(q) and g(q).

The reference parses the URDF with xml.etree and recomputes M and g with generic 3-D rigid-body
kinematics (homogeneous transforms along the joint chain, geometric Jacobians of every link's
centre of mass, ``M = sum m Jv^T Jv + Jw^T R I R^T Jw``, ``g = -sum m Jv^T g_world``), with
no use of the planar closed form.
"""

from __future__ import annotations

import math
from pathlib import Path
import xml.etree.ElementTree as ET

from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import ArmParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import load_scenario
from manip_control.urdf import joint_limits
from manip_control.urdf import main
from manip_control.urdf import urdf_from_scenario
from manip_control.urdf import urdf_string
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / 'urdf' / 'manip_2r.urdf'


# -- independent reference ------------------------------------------------------------------


def _rpy(r, p, y):
    cr, sr, cp, sp, cy, sy = (math.cos(r), math.sin(r), math.cos(p), math.sin(p),
                              math.cos(y), math.sin(y))
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def _axis_angle(axis, q):
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(q) * kx + (1 - math.cos(q)) * kx @ kx


def _origin(el):
    o = el.find('origin') if el is not None else None
    xyz = [float(v) for v in (o.get('xyz', '0 0 0') if o is not None else '0 0 0').split()]
    rpy = [float(v) for v in (o.get('rpy', '0 0 0') if o is not None else '0 0 0').split()]
    t = np.eye(4)
    t[:3, :3] = _rpy(*rpy)
    t[:3, 3] = xyz
    return t


class UrdfModel:
    """Tree of the URDF: links with inertials, joints with origins and axes."""

    def __init__(self, text: str):
        root = ET.fromstring(text)
        self.links = {}
        for link in root.findall('link'):
            inert = link.find('inertial')
            if inert is None:
                self.links[link.get('name')] = None
                continue
            m = float(inert.find('mass').get('value'))
            i = inert.find('inertia').attrib
            tensor = np.array([[float(i['ixx']), float(i['ixy']), float(i['ixz'])],
                               [float(i['ixy']), float(i['iyy']), float(i['iyz'])],
                               [float(i['ixz']), float(i['iyz']), float(i['izz'])]])
            self.links[link.get('name')] = (m, _origin(inert), tensor)
        self.joints = []
        for j in root.findall('joint'):
            axis = j.find('axis')
            self.joints.append({
                'name': j.get('name'), 'type': j.get('type'),
                'parent': j.find('parent').get('link'), 'child': j.find('child').get('link'),
                'origin': _origin(j),
                'axis': [float(v) for v in axis.get('xyz').split()] if axis is not None
                else [1.0, 0.0, 0.0],
                'limit': j.find('limit'), 'dynamics': j.find('dynamics')})
        children = {j['child'] for j in self.joints}
        roots = [name for name in self.links if name not in children]
        assert len(roots) == 1
        self.root = roots[0]
        self.movable = [j['name'] for j in self.joints if j['type'] in ('revolute',
                                                                        'continuous')]

    def frames(self, q):
        """World pose of every link, world origin and axis of every movable joint."""
        qmap = dict(zip(self.movable, q))
        poses = {self.root: np.eye(4)}
        axes = {}
        pending = list(self.joints)
        while pending:
            for j in list(pending):
                if j['parent'] not in poses:
                    continue
                t = poses[j['parent']] @ j['origin']
                if j['name'] in qmap:
                    axis = np.asarray(j['axis'], float)
                    axes[j['name']] = (t[:3, 3].copy(), t[:3, :3] @ axis)
                    rot = np.eye(4)
                    rot[:3, :3] = _axis_angle(j['axis'], qmap[j['name']])
                    t = t @ rot
                poses[j['child']] = t
                pending.remove(j)
        return poses, axes

    def ancestors(self, link):
        """Movable joints between the root and ``link``."""
        by_child = {j['child']: j for j in self.joints}
        out = []
        while link in by_child:
            j = by_child[link]
            if j['name'] in self.movable:
                out.append(j['name'])
            link = j['parent']
        return out

    def mass_matrix_and_gravity(self, q, g0):
        poses, axes = self.frames(q)
        n = len(self.movable)
        m_mat = np.zeros((n, n))
        g_vec = np.zeros(n)
        gravity = np.array([0.0, 0.0, -g0])
        for name, inert in self.links.items():
            if inert is None:
                continue
            mass, t_in, tensor = inert
            pose = poses[name] @ t_in
            p_c, rot = pose[:3, 3], pose[:3, :3]
            jv = np.zeros((3, n))
            jw = np.zeros((3, n))
            for jname in self.ancestors(name):
                k = self.movable.index(jname)
                o, z = axes[jname]
                jv[:, k] = np.cross(z, p_c - o)
                jw[:, k] = z
            i_world = rot @ tensor @ rot.T
            m_mat += mass * jv.T @ jv + jw.T @ i_world @ jw
            g_vec -= mass * jv.T @ gravity
        return m_mat, g_vec


# -- tests ------------------------------------------------------------------------------------


def _check_model(text, arm, rng, n=25):
    model = UrdfModel(text)
    ref = TwoLinkModel(arm)
    for _ in range(n):
        q = rng.uniform(-math.pi, math.pi, 2)
        m_urdf, g_urdf = model.mass_matrix_and_gravity(q, arm.gravity)
        np.testing.assert_allclose(m_urdf, ref.inertia_matrix(q), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g_urdf, ref.gravity_vector(q), rtol=1e-12, atol=1e-11)


def test_shipped_urdf_reproduces_default_plant():
    scenario = load_scenario('default')
    text = SHIPPED.read_text()
    _check_model(text, scenario.plant.arm, np.random.default_rng(1))


def test_shipped_urdf_is_up_to_date():
    scenario = load_scenario('default')
    assert SHIPPED.read_text() == urdf_from_scenario(scenario, source='config default (plant)')


def test_asymmetric_arm_reproduces_m_and_g():
    arm = ArmParameters(m1=2.3, m2=1.1, l1=0.7, l2=0.45, lc1=0.21, lc2=0.4, I1=0.037,
                        I2=0.011)
    fr = (FrictionParameters(b=0.2, tau_c=0.1), FrictionParameters(b=0.05, tau_c=0.02))
    limits = joint_limits(load_scenario('default').plant)
    text = urdf_string(arm, fr, limits, joints=('shoulder', 'elbow'))
    _check_model(text, arm, np.random.default_rng(2))
    model = UrdfModel(text)
    assert model.movable == ['shoulder', 'elbow']


def test_joint_elements_limits_and_friction():
    scenario = load_scenario('default')
    model = UrdfModel(SHIPPED.read_text())
    plant = scenario.plant
    for j, name in enumerate(scenario.joints):
        joint = next(x for x in model.joints if x['name'] == name)
        lim = joint['limit']
        mo = plant.motors[j]
        assert float(lim.get('effort')) == pytest.approx(mo.eta * mo.N * mo.k_t * mo.i_max)
        assert float(lim.get('velocity')) == pytest.approx(mo.V_max / (mo.k_e * mo.N))
        assert float(lim.get('lower')) < 0.0 < float(lim.get('upper'))
        assert float(joint['dynamics'].get('damping')) == plant.friction[j].b
        assert float(joint['dynamics'].get('friction')) == plant.friction[j].tau_c
    # every inertia tensor is physically valid (positive, triangle inequalities)
    for inert in model.links.values():
        if inert is None:
            continue
        ev = np.linalg.eigvalsh(inert[2])
        assert ev.min() >= 0.0
        assert ev[0] + ev[1] >= ev[2] - 1e-15


def test_gravity_points_down_in_world():
    """Arm horizontal (q = 0): the tool is at world x = l1 + l2, z = 0; q1 = pi/2 lifts it."""
    model = UrdfModel(SHIPPED.read_text())
    poses, _ = model.frames([0.0, 0.0])
    np.testing.assert_allclose(poses['tool0'][:3, 3], [2.0, 0.0, 0.0], atol=1e-12)
    poses, _ = model.frames([math.pi / 2, 0.0])
    np.testing.assert_allclose(poses['tool0'][:3, 3], [0.0, 0.0, 2.0], atol=1e-12)


def test_cli_writes_file_and_nominal(tmp_path, capsys):
    out = tmp_path / 'arm.urdf'
    assert main(['--config', 'seed001', '--nominal', '--out', str(out)]) == 0
    text = out.read_text()
    nominal = load_scenario('seed001').controller.nominal.arm
    _check_model(text, nominal, np.random.default_rng(3), n=5)
    assert main(['--config', 'no_such_preset']) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and 'Traceback' not in err
