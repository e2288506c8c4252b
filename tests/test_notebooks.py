"""Every notebook runs top to bottom (code cells executed in one namespace; no Jupyter kernel needed)."""

import json
from pathlib import Path

import pytest

from interp.models import is_installed

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path):
    if not is_installed("smollm2-135m"):
        pytest.skip("the notebooks use smollm2-135m")
    cells = json.loads(path.read_text())["cells"]
    namespace: dict = {}
    for i, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
        exec(compile("".join(cell["source"]), f"{path.name}[{i}]", "exec"), namespace)
