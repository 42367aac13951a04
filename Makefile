# sysid_ros on a bare machine: everything runs from .venv, no sourced ROS needed.
#
#   make venv    create .venv and install requirements.txt, requirements-docs.txt + this package (editable)
#   make demo    excite a simulated arm over ROS 2 and identify its payload (sysid_output/demo)
#   make test    run the test suite
#   make bench   install requirements-bench.txt and run every bench/*.py
#   make docs    build the manual (doc/) into doc/_build/html, warnings as errors
#   make clean   remove build/test/demo outputs (make distclean also removes .venv)
#
# PYTHON picks the interpreter that creates .venv: make venv PYTHON=python3.12

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
DOCS_STAMP  := $(VENV)/.docs-installed
# The ROS 2 wheels exist for CPython 3.10 to 3.12; requirements.txt pins per version.
MIN_PY := 3.10
MAX_PY := 3.12

# The ros-* wheels ship a .pth hook that re-executes .venv/bin/python with its own
# LD_LIBRARY_PATH, so running .venv/bin/python directly is enough. Keep a sourced ROS
# installation (or a parent process's bootstrap guard) from leaking into that process.
unexport PYTHONPATH PYTHONHOME LD_LIBRARY_PATH AMENT_PREFIX_PATH CMAKE_PREFIX_PATH \
         COLCON_PREFIX_PATH ROS_DISTRO ROS_VERSION ROS_PYTHON_VERSION RMW_IMPLEMENTATION \
         _ROS_WHEELS_BOOTSTRAP_COMPLETE

CHECK_PY = -c 'import sys; v = sys.version_info[:2]; sys.exit(not ((3, 10) <= v <= (3, 12)))'

.PHONY: venv demo test bench docs clean distclean

# the docs requirements too: the test suite builds the manual (test/test_docs.py)
venv: $(STAMP) $(DOCS_STAMP)

$(VPY):
	@$(PYTHON) $(CHECK_PY) 2>/dev/null || { \
	  echo "error: '$(PYTHON)' is missing or not Python $(MIN_PY) to $(MAX_PY)" \
	       "(the range of the ROS 2 wheels); pass one, e.g. make venv PYTHON=python3.12" >&2; exit 1; }
	@echo "$(PYTHON) -m venv $(VENV)"
	@$(PYTHON) -m venv $(VENV) || { \
	  echo "error: '$(PYTHON) -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2; \
	  rm -rf $(VENV); exit 1; }

# Reinstall only when the pins or setup.py change (or .venv was recreated).
$(STAMP): requirements.txt setup.py | $(VPY)
	@$(VPY) $(CHECK_PY) || { \
	  echo "error: $(VENV) is not Python $(MIN_PY) to $(MAX_PY); run 'make distclean' and retry" >&2; exit 1; }
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install -r requirements.txt
	$(VPY) -m pip install -e . --no-deps
	touch $@

# The ROS 2 graph (trajectory_publisher -> mujoco_sim -> identifier) in one process: a 0.5 kg
# payload on the Damiao-driven OpenArm-class arm, identified through /sysid/identify.
demo: venv
	$(VENV)/bin/sysid-sim-identify --model config/robots/openarm_class.xml \
	  --truth-model config/robots/openarm_class_payload.xml --duration 20 --output-dir sysid_output/demo

# pytest exits 5 when it collects no test: that is a failure here too (we always have tests).
test: venv
	@$(VPY) -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; fi; \
	exit $$rc

$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(VPY) -m pip install -r requirements-bench.txt
	touch $@

$(DOCS_STAMP): requirements-docs.txt $(STAMP)
	$(VPY) -m pip install -r requirements-docs.txt
	touch $@

# The manual (doc/), the Sphinx project rosdoc2 also builds; here with requirements-docs.txt's pins.
docs: $(DOCS_STAMP)
	$(VPY) -m sphinx -W --keep-going -b html doc doc/_build/html
	@echo "The manual: doc/_build/html/index.html"

bench: $(BENCH_STAMP)
	@set -e; for f in bench/*.py; do \
	  echo "=== $$f"; \
	  $(VPY) "$$f"; \
	done

clean:
	rm -rf build install log sysid_output .pytest_cache .hypothesis *.egg-info MUJOCO_LOG.TXT doc/_build
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
