# partnd: `make demo` runs the sleep-staging demo, `make test` runs the test suite.
# Both create the virtual environment on a fresh machine first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.partnd-installed
DEMO_OUT ?= runs/demo
DEMO_JOBS ?= 2

.PHONY: install test test-fast demo lint format bench gpu-goals clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install --no-cache-dir torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --no-cache-dir -e ".[vision,braindecode,dask,sleep,dev]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest tests

test-fast: $(STAMP)
	$(PY) -m pytest tests -m "not slow"

demo: $(STAMP)
	$(PY) -m partnd.recipes.sleep_staging all --out $(DEMO_OUT) --jobs $(DEMO_JOBS) --overwrite

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy partnd

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	$(PY) benchmarks/bench_objective_step.py --preset eeg_sleep --steps 3
	$(PY) benchmarks/bench_objective_step.py --preset images_cifar --steps 3
	$(PY) benchmarks/bench_sampler.py
	$(PY) benchmarks/bench_cost_model.py --settings eeg --batch-size 32 --steps 3 --workers 0 1 --validate
	$(PY) benchmarks/bench_preprocessing.py --repeats 3
	$(PY) benchmarks/bench_part_windows_step.py --demo --batch-size 8 --steps 5
	$(PY) benchmarks/bench_sequence.py
	$(PY) benchmarks/bench_ssl_images.py

# every goal of issue 44 (PART's GPU step) in one run on one GPU; `--smoke` runs anywhere
gpu-goals: $(STAMP)
	$(PY) benchmarks/gpu_goals.py --device cuda

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
