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
The simulated URDF arm's controller inverts the drives the plant has, unless told otherwise.

``config/arm_sim_params.yaml`` leaves ``nominal.drives`` out: manip-sim takes it from the
plant section (``actuator: ideal`` -> no drives to invert; motors -> the sized drives).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip('pinocchio')
pytest.importorskip('rclpy')

from manip_control.arm_scenario import run_urdf_closed_loop  # noqa: E402, I100
from manip_control.arm_scenario import summarize_urdf_run  # noqa: E402
from manip_control.nodes import sim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
URDF_DIR = ROOT.parent / 'shared' / 'fixtures' / 'urdf'
PANDA = URDF_DIR / 'panda.urdf'
if not PANDA.is_file():
    pytest.fail(f'fixture {PANDA} absent (../shared must sit beside the project)',
                pytrace=False)
SHIPPED = (ROOT / 'config' / 'arm_sim_params.yaml').read_text()


def _params(tmp_path, plant: str = '', controller: str = '') -> Path:
    """Write the shipped arm_sim_params.yaml with lines added to the plant / controller."""
    text = SHIPPED.replace('    command_source: joint_commands',
                           plant + '    command_source: joint_commands', 1)
    text = text.replace('    law: computed_torque', controller + '    law: computed_torque', 1)
    path = tmp_path / 'params.yaml'
    path.write_text(text)
    return path


@pytest.mark.parametrize('plant, controller, urdf, drives', [
    ('', '', 'panda', 'sized'),                                   # the plant's sized motors
    ('    actuator: motor\n', '', 'panda', 'sized'),
    ('    actuator: ideal\n', '', 'panda', 'ideal'),
    # explicit nominal.drives wins over the plant
    ('    actuator: ideal\n', '    nominal.drives: sized\n', 'panda', 'sized'),
    ('', '    nominal.drives: ideal\n', 'panda', 'ideal'),
    # no effort limits: the plant cannot size drives and has ideal actuators
    ('    torque_limit: [5.0, 5.0]\n', '    torque_limit: [5.0, 5.0]\n', 'double_pendulum',
     'ideal'),
])
def test_nominal_drives_follow_the_plant_unless_given(tmp_path, plant, controller, urdf,
                                                      drives):
    cfg = sim.load_run_config(str(_params(tmp_path, plant, controller)), None, 0.1,
                              str(URDF_DIR / f'{urdf}.urdf'))
    assert cfg.values['controller']['nominal.drives'] == drives


def test_ideal_plant_alone_tracks_at_the_perfect_model_floor(tmp_path, capfd):
    """
    Plant switched to ideal actuators, nothing else: the perfect-model floor, not 0.047 rad.

    The floor is the offline closed loop of the same arm, reference and gains with ideal
    actuators and the plant's own model as the controller's (arm_scenario, no ROS): what is
    left there is the zero-order hold. Inverting drives the plant does not have (gear loss,
    armature) left 0.047 rad.
    """
    duration = 2.0
    floor = summarize_urdf_run(run_urdf_closed_loop(str(PANDA), duration=duration,
                                                    actuator='ideal'))
    floor = np.array(floor['late_max_error_rad'])
    assert floor.max() < 2e-4, floor
    code, out = sim.run(['--urdf', str(PANDA), '--config',
                         str(_params(tmp_path, '    actuator: ideal\n')), '--duration',
                         str(duration), '--quiet'])
    assert code == 0, capfd.readouterr().err
    late = sim.tracking_summary(out)['late_max_abs']
    assert out.ticks == 2000 and late.shape == (7,)
    np.testing.assert_array_less(late, 1.5 * floor + 1e-6)


@pytest.mark.parametrize('plant, controller, urdf, drives', [
    ('    actuator: ideal\n', '', PANDA, 'ideal'),
    ('', '', PANDA, 'sized'),
    ('    actuator: ideal\n', '    nominal.drives: sized\n', PANDA, 'sized'),
    ('', '', '', None),                                 # the 2R: nominal.drives not declared
])
def test_sim_launch_gives_the_controller_the_plants_drives(tmp_path, plant, controller, urdf,
                                                           drives):
    """sim.launch.py urdf:=FILE: the params files the controller gets, in the order given."""
    import importlib.util
    from launch import LaunchContext
    from launch_ros.actions import Node
    from launch_ros.parameter_descriptions import ParameterFile
    from launch_ros.utilities import evaluate_parameters
    from manip_control.nodes.ros_params import load_params_file
    spec = importlib.util.spec_from_file_location('sim_launch', ROOT / 'launch' / 'sim.launch.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    nodes = [e for e in module.generate_launch_description().entities if isinstance(e, Node)]
    context = LaunchContext()
    context.launch_configurations.update(
        params_file=str(_params(tmp_path, plant, controller)), urdf=str(urdf))
    for executable in ('controller', 'composed'):
        (node,) = [n for n in nodes if n.node_executable == executable]
        files = [p for p in node._Node__parameters if isinstance(p, ParameterFile)]
        values = {}
        for path in evaluate_parameters(context, files):
            values.update(load_params_file(path, on_warning=lambda _t: None)['controller'])
        assert values.get('nominal.drives') == drives, executable
