"""The geometry and precision analysis scripts in quick mode (tiny model): they run and their tables hold what they say."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_quick_frayed_rope_summarises_the_sweep(tmp_path):
    df = load_script(ROOT / "p001_frayed/frayed_rope.py").main(["--quick", "--out", str(tmp_path)])
    assert set(df["length"]) == {64, 128} and {"max_qk_rot", "silhouette_pre", "srank_k_rot"} <= set(df["measure"])
    assert (df["q25"] <= df["median"] + 1e-12).all() and (df["median"] <= df["q75"] + 1e-12).all()
    assert (tmp_path / "frayed_rope_tiny-llama.html").exists() and (tmp_path / "frayed_rope_fig5_tiny-llama.html").exists()


def test_quick_dtype_error_measures_both_dtypes(tmp_path):
    df = load_script(ROOT / "benchmarks" / "dtype_error.py").main(["--quick", "--out", str(tmp_path)])
    assert list(df["dtype"]) == ["bfloat16", "float16"]
    assert (df["max_abs_slash"] < 1e-2).all() and np.isfinite(df["time_ratio"]).all()


def test_make_all_lists_every_analysis_script_and_runs_them(tmp_path):
    mod = load_script(ROOT / "make_all.py")
    listed = {mod.path_of(m).resolve() for m in {**mod.SCRIPTS, **mod.OPTIONAL, **mod.BENCHMARKS}.values()}
    assert all(p.is_file() for p in listed), [p for p in listed if not p.is_file()]
    on_disk = {p.resolve() for p in ROOT.glob("*/*.py")
               if p.name != "scan_speed.py" and not p.name.startswith("_")}  # scan_speed: one process per mode; _*.py: helpers
    assert not [p.name for p in ROOT.glob("*.py") if p.name not in ("__init__.py", "_common.py", "make_all.py")], \
        "scripts go in a group folder"
    assert on_disk <= listed, on_disk - listed
    times = mod.main(["--quick", "--only", "frayed_rope", "--out", str(tmp_path)])
    assert set(times) == {"frayed_rope"} and (tmp_path / "frayed_rope_summary.csv").exists()


def test_make_all_runs_a_second_study_of_one_script_with_its_arguments(tmp_path):
    """``ARGV``: ``induction_textrepeat`` is induction_text.py with the positive control's arguments (quick here)."""
    mod = load_script(ROOT / "make_all.py")
    assert set(mod.ARGV) <= set(mod.SCRIPTS)
    mod.main(["--quick", "--only", "induction_textrepeat", "--out", str(tmp_path)])
    runs = pd.read_csv(tmp_path / "emergence_textrepeat_runs.csv")
    assert runs["repeat_frac"].iloc[0] == 0.25 and not (tmp_path / "emergence_text_runs.csv").exists()


def test_frayed_bootstrap_changes_pair_each_prompt_with_itself():
    mod = load_script(ROOT / "p001_frayed/frayed_bootstrap.py")
    rng = np.random.default_rng(0)
    vals = rng.normal(size=(4, 3))  # [prompt, length]
    per = pd.DataFrame([{"model": "m", "prompt": p, "length": n, "context": 100, "measure": "x", "median": vals[p, k]}
                        for p in range(4) for k, n in enumerate((64, 128, 256))])
    out = mod.changes(per, 500).set_index("length_to")
    for k, n in ((1, 128), (2, 256)):
        d = vals[:, k] - vals[:, 0]
        assert out.loc[n, "change"] == np.float64(d.mean()).item() and out.loc[n, "positive"] == (d > 0).sum()
        assert out.loc[n, "change_lo"] <= d.mean() <= out.loc[n, "change_hi"]
    assert list(out["beyond_context"]) == [True, True]
    # lengths past the context: the changes from the longest length inside it come too (001 Fig. 6's break)
    both = mod.changes(per.assign(context=128), 500)
    past = both[both["length_from"] == 128].set_index("length_to")
    d = vals[:, 2] - vals[:, 1]
    assert list(both["length_from"]) == [64, 64, 128] and past.loc[256, "change"] == np.float64(d.mean()).item()
    assert past.loc[256, "beyond_context"] and past.loc[256, "value_from"] == vals[:, 1].mean()


def test_quick_frayed_bootstrap_medians_equal_a_scan_of_each_prompt(tmp_path):
    import interp

    mod = load_script(ROOT / "p001_frayed/frayed_bootstrap.py")
    mod.main(["--quick", "--out", str(tmp_path)])
    per = pd.read_csv(tmp_path / "frayed_bootstrap_prompts.csv")
    model = interp.load_model("tiny-llama")
    prompts = interp.corpus.prompts(model, "random", 3, 128, beyond_context=True)
    heads = interp.scan(model, prompts[1:2, :64], interp.ScanConfig(geometry=True, cluster_points=100, counterfactual_queries=0)).heads
    got = per[(per["prompt"] == 1) & (per["length"] == 64)].set_index("measure")["median"]
    for m in ("srank_k_rot", "sink_weight_norope", "max_qk_rot"):
        assert np.isclose(got[m], heads[m].median(), rtol=1e-6), m
    assert np.isclose(got["srank_k_ratio"], (heads["srank_k_rot"] / heads["srank_k_pre"]).median(), rtol=1e-6)
    summary = pd.read_csv(tmp_path / "frayed_bootstrap.csv")
    assert set(summary["measure"]) == {*mod.MEASURES, "srank_k_ratio"} and (summary["prompts"] == 3).all()
