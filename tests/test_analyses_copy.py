"""analyses/p000_copy/copy_attempts.py and copy_2d_rope.py's per-seed updates (issue 22): quick runs and the merge rules."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


@pytest.fixture(scope="module")
def c2d():
    return load_script(ROOT / "p000_copy/copy_2d_rope.py")


def test_quick_attempts_write_their_curves_and_replace_only_their_own_rows(tmp_path):
    mod = load_script(ROOT / "p000_copy/copy_attempts.py")
    stale = pd.DataFrame(dict(recipe=["base", "thr08"], seed=[0, 0], step=[5, 5], exact_match=[0.5, 0.25]))
    stale.to_csv(tmp_path / "copy_attempts.csv", index=False)
    ev = mod.main(["--quick", "--out", str(tmp_path), "--jobs", "1"])
    on_disk = pd.read_csv(tmp_path / "copy_attempts.csv")
    assert len(on_disk) == len(ev)
    # the quick recipes (base, wide) replaced base's stale row; thr08's, not run, is kept untouched
    assert on_disk[on_disk.recipe == "thr08"].exact_match.tolist() == [0.25]
    assert on_disk[on_disk.recipe == "base"].step.tolist() == [10, 20]      # 20 steps, evaluated every 10
    assert on_disk.exact_match.between(0, 1).all()
    curves = pd.read_csv(tmp_path / "copy_attempts_loss.csv")
    assert set(curves.recipe) == {"base", "wide"} and (curves.loss > 0).all() and len(curves) == 2 * 2
    # the settings columns say what each recipe changed
    wide = on_disk[on_disk.recipe == "wide"].iloc[0]
    assert (wide.d_model, wide.heads, wide.lr) == (64, 4, 1e-3)
    assert not (tmp_path / "copy_attempts.lock").exists()
    # the committed tables have the quick run's columns (the script and its output cannot drift apart)
    fig = ROOT.parent / "figures"
    for name in ("copy_attempts.csv", "copy_attempts_loss.csv"):
        assert list(pd.read_csv(fig / name, nrows=1).columns) == list(pd.read_csv(tmp_path / name, nrows=1).columns)


def test_recipe_settings_fill_in_the_base_recipe():
    mod = load_script(ROOT / "p000_copy/copy_attempts.py")
    s = {"d_model": 128, "d_mlp": 128, "batch": 32}
    base = mod.settings(mod.RECIPES["base"], s)
    assert base == dict(heads=4, d_model=128, d_mlp=128, rope_base=1e4, lr=2e-3, batch=32, curriculum=True, threshold=0.9)
    fast = mod.settings(mod.RECIPES["fast"], s)
    assert {k for k in base if base[k] != fast[k]} == {"rope_base", "threshold"}
    assert np.isnan(mod.settings(mod.RECIPES["nocurr"], s)["threshold"])
    assert mod.spec("b64", mod.RECIPES["b64"], 100, s)[7] == {"batch": 64}


def test_merge_replaces_the_models_and_seeds_trained_and_keeps_the_rest(c2d, tmp_path):
    cols = ["pe", "layers", "train_distribution", "seed", "exact_match"]
    old = pd.DataFrame([("rope2d", 1, "imbalanced", 0, 1.0), ("rope", 2, "imbalanced", 0, 0.3), ("rope", 1, "imbalanced", 0, 0.1)],
                       columns=cols)
    old.to_csv(tmp_path / "t.csv", index=False)
    new = pd.DataFrame([("rope", 2, "imbalanced", 0, 0.9), ("rope", 2, "imbalanced", 1, 0.8)], columns=cols)
    out = c2d._merge(tmp_path / "t.csv", new)
    # rows stay in the file's model order, seeds ascending within a model; rope-2 seed 0 is the new one
    assert list(zip(out.pe, out.layers, out.seed, out.exact_match)) == [("rope2d", 1, 0, 1.0), ("rope", 2, 0, 0.9),
                                                                         ("rope", 2, 1, 0.8), ("rope", 1, 0, 0.1)]
    assert c2d._merge(tmp_path / "absent.csv", new) is new


def test_only_names_must_be_models_of_the_script(c2d, tmp_path):
    with pytest.raises(SystemExit, match="unknown model"):
        c2d.main(["--quick", "--out", str(tmp_path), "--only", "rope-3-imbalanced"])


def test_summary_is_the_mean_and_sample_sd_over_seeds(c2d):
    rows = [("rope", 2, "imbalanced", "uniform", 1, 64, 0.2, s) for s in (0,)] + \
           [("rope", 2, "imbalanced", "imbalanced", 1, 64, em, s) for em, s in ((0.3, 0), (0.5, 1), (0.1, 2))]
    table = pd.DataFrame(rows, columns=["pe", "layers", "train_distribution", "distribution", "length_lo", "length_hi",
                                        "exact_match", "seed"])
    out = c2d.summary(table).set_index("distribution")
    assert out.loc["imbalanced", "seeds"] == 3 and out.loc["imbalanced", "mean"] == pytest.approx(0.3)
    assert out.loc["imbalanced", "sd"] == pytest.approx(np.std([0.3, 0.5, 0.1], ddof=1))
    assert (out.loc["imbalanced", "min"], out.loc["imbalanced", "max"]) == (0.1, 0.5)
    assert out.loc["uniform", "seeds"] == 1 and np.isnan(out.loc["uniform", "sd"])


def test_model_names_carry_their_recipe(c2d):
    names = [c2d._key(m) for m in c2d.FULL_MODELS]
    assert len(names) == len(set(names))                       # --only can name every model
    assert "rope-1-imbalanced" in names and "rope-2-imbalanced-fast" in names and "nope-2-imbalanced-wide_long" in names
    assert c2d.ATTENTION_MODEL in names


def test_merge_from_joins_split_runs_into_the_tables(c2d, tmp_path):
    cols = c2d.COLUMNS
    def run(name, pe, seed, em):
        d = tmp_path / name
        d.mkdir()
        pd.DataFrame([(pe, 2, "imbalanced", 1, 8, em, seed, "imbalanced", 20, 8, "wide_long")], columns=cols).to_csv(d / "copy.csv", index=False)
        pd.DataFrame([(pe, 2, "imbalanced", seed, "wide_long", 10, 0.5, em, 8)], columns=c2d.LOSS_COLUMNS).to_csv(d / "copy_loss.csv", index=False)
        return d
    out = tmp_path / "out"
    out.mkdir()
    # an earlier table without the recipe column: its rows read as the base recipe and stay
    pd.DataFrame([("rope", 2, "imbalanced", 1, 8, 0.3, 0, "imbalanced", 20, 8)], columns=cols[:-1]).to_csv(out / "copy.csv", index=False)
    c2d.main(["--quick", "--out", str(out), "--merge-from", str(run("a", "rope", 0, 1.0)), str(run("b", "nope", 1, 0.25))])
    table = pd.read_csv(out / "copy.csv")
    assert list(zip(table.pe, table.recipe, table.seed, table.exact_match)) == [("rope", "base", 0, 0.3), ("rope", "wide_long", 0, 1.0),
                                                                                 ("nope", "wide_long", 1, 0.25)]
    summ = pd.read_csv(out / "copy_summary.csv")
    assert len(summ) == 3 and set(summ.recipe) == {"base", "wide_long"}
    assert (out / "copy.html").exists() and len(pd.read_csv(out / "copy_loss.csv")) == 2  # PNG only where kaleido is
    with pytest.raises(SystemExit, match="no copy.csv"):
        c2d.main(["--quick", "--out", str(out), "--merge-from", str(tmp_path / "absent")])
