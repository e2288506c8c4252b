"""Every notebook runs top to bottom in a real Jupyter kernel (nbclient), as a user would run it."""

from pathlib import Path

import pytest

from interp.models import is_installed

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path):
    import nbformat
    from nbclient import NotebookClient

    if not is_installed("smollm2-135m"):
        pytest.skip("the notebooks use smollm2-135m")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")]
    assert shown, "a tutorial notebook shows its results"
