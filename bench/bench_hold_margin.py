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
Benchmark: the safe hold's loop-delay margin per arm, computed from the model and measured.

For the package's 2R (``urdf/manip_2r.urdf``) and every fixture URDF, at 1 kHz:

* ``computed``: :func:`manip_control.hold_design.hold_delay_margin` of the hold
  (``hold_kp`` 100 1/s^2, ``hold_kd`` 20 1/s through the nominal mass matrix), the smallest
  over 8 poses across the range and at mid-range, gravity stiffness included [ticks = ms];
* ``measured``: MuJoCo loading the same URDF (the helper of ``test/test_hold_design.py``:
  visual and collision geometry removed, joints the nominal model locks made fixed, no joint
  damping, friction or armature, RK4 at 0.5 ms), the hold at mid-range with ``d`` ticks of
  loop delay after a 0.02 rad/s disturbance, 3 s: the largest ``d`` whose late velocity
  (last 1 s) stays below the early one (first 0.5 s);
* the same two for the former hold sized on the diagonal of ``M`` (``M_kk w^2``,
  ``2 M_kk w``, ``w`` 10 rad/s), at mid-range (``-1``: unstable without delay);
* ``pd_gravity``: the computed margin of the URDF defaults of ``law: pd_gravity``
  (:func:`manip_control.hold_design.pd_gravity_gains`), the smallest over 8 poses.

    .venv/bin/python bench/bench_hold_margin.py [--arms panda.urdf xarm7.urdf ...]
"""

import argparse
from pathlib import Path
import subprocess
import sys

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'test'))

from manip_control.arm_model import UrdfArm  # noqa: E402
from manip_control.arm_scenario import control_defaults  # noqa: E402
from manip_control.hold_design import delay_margin  # noqa: E402
from manip_control.hold_design import gravity_stiffness  # noqa: E402
from manip_control.hold_design import hold_delay_margin  # noqa: E402
from manip_control.hold_design import range_poses  # noqa: E402
import numpy as np  # noqa: E402
import test_hold_design as th  # noqa: E402

W = th.W


def measured(arm, sim, q0, make_law, start: int) -> int:
    """Largest delay [ticks] at which the MuJoCo hold does not grow, searched from start."""
    lim = th.effort(arm)
    d = max(start, 0)
    if th.grows(sim, arm, q0, make_law(arm, q0, lim), d):
        while d >= 0 and th.grows(sim, arm, q0, make_law(arm, q0, lim), d):
            d -= 1
        return d
    while not th.grows(sim, arm, q0, make_law(arm, q0, lim), d + 1):
        d += 1
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--arms', nargs='*', default=['manip_2r.urdf'] + th.FIXTURES)
    args = ap.parse_args()
    print(subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip())
    print('arm | joints | hold computed (min over poses / mid) | hold measured (mid) | '
          'diagonal hold computed / measured (mid) | pd_gravity computed (min)')
    for name in args.arms:
        if name == 'manip_2r.urdf':
            th.URDF_DIR, saved = ROOT / 'urdf', th.URDF_DIR
        arm, sim = th.arm_of(name)
        if name == 'manip_2r.urdf':
            th.URDF_DIR = saved
        q0 = range_poses(arm, 1)[0]
        kp, kd = [W * W] * arm.n, [2.0 * W] * arm.n
        c_min = hold_delay_margin(arm, kp, kd, th.T)
        c_mid = hold_delay_margin(arm, kp, kd, th.T, poses=[q0])
        m_mid = measured(arm, sim, q0, th.mass_hold, c_mid)
        m, g = arm.mass_matrix(q0), gravity_stiffness(arm, q0)
        diag = np.diag(m)
        o_c = delay_margin(m, diag * W * W, 2.0 * W * diag, th.T, stiffness=g)
        o_m = measured(arm, sim, q0, th.diagonal_hold, o_c)
        pd = control_defaults(arm, law='pd_gravity')
        pd_c = min(delay_margin(arm.mass_matrix(q), pd['kp'], pd['kd'], th.T,
                                stiffness=gravity_stiffness(arm, q)) for q in range_poses(arm))
        print(f'{name} | {arm.n} | {c_min} / {c_mid} | {m_mid} | {o_c} / {o_m} | {pd_c}',
              flush=True)
    print(subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip())


if __name__ == '__main__':
    main()
