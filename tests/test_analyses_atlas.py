"""analyses/atlas/head_atlas.py and analyses/benchmarks/atlas_cost.py in quick mode (tiny model): they run and their tables hold
what they say (role counts equal the atlas table's flags; ratios are the timings' quotients)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1] / "analyses"


def test_quick_head_atlas(tmp_path):
    mod = load_script(ROOT / "atlas/head_atlas.py")
    summary = mod.main(["--quick", "--out", str(tmp_path)])
    t = pd.read_csv(tmp_path / "atlas_tiny-llama.csv")
    assert list(summary.model) == ["tiny-llama"] and summary.heads[0] == len(t) == 8
    for role in ("sdh", "sink", "induction", "streaming"):
        assert summary[role][0] == int(t[f"role_{role}"].sum())
    roles = pd.read_csv(tmp_path / "atlas_roles.csv")
    assert list(roles.columns[:5]) == ["model", "role", "heads", "share", "dominant"] and roles["dominant"].sum() <= 8
    mod.main(["--quick", "--out", str(tmp_path)])  # a second run replaces its model's rows, keeps nothing twice
    assert len(pd.read_csv(tmp_path / "atlas_summary.csv")) == 1


def test_quick_atlas_cost(tmp_path):
    mod = load_script(ROOT / "benchmarks" / "atlas_cost.py")
    df = mod.main(["--quick", "--out", str(tmp_path)]).set_index("run")
    assert df.loc["plain", "ratio"] == 1.0
    # the whole atlas is its two passes; each cpu_s is rounded to 4 decimals, so the sum may differ by 1.5e-4
    assert df.loc["atlas", "cpu_s"] == pytest.approx(df.loc["atlas_text", "cpu_s"] + df.loc["atlas_rr", "cpu_s"], rel=1e-3, abs=1.5e-4)
    assert df.loc["atlas_text", "ratio"] == pytest.approx(df.loc["atlas_text", "cpu_s"] / df.loc["plain", "cpu_s"], rel=0.02)


def test_atlas_spread_counts_against_the_committed_atlas(tmp_path):
    """atlas_spread.py: quick mode writes one row per role and prompt set; given the same prompt set's own atlas as the
    committed one, every labelled head is labelled in both (the overlap column counts heads, not totals)."""
    import interp
    from interp.experiments.atlas import AtlasConfig, run_atlas

    mod = load_script(ROOT / "atlas" / "atlas_spread.py")
    df = mod.main(["--quick", "--out", str(tmp_path)])
    assert set(df["corpus"]) == {"pydoc", "stdlib"} and "retrieval" not in set(df["role"])
    assert (tmp_path / "atlas_spread.csv").exists()
    model = interp.load_model("tiny-llama", device="cpu")
    same = run_atlas(model, AtlasConfig(corpus="pydoc", prompts=2, tokens=48, ablate=False, inp=False, support=0)).table
    same.loc[same.index[:3], "role_sink"] = True  # make some role non-empty on the tiny model
    rows = mod.spread_rows(model, "tiny-llama", "pydoc", 48, 2, same)
    for r in rows:
        assert r["labelled_both"] <= min(r["labelled"], r["labelled_pydoc1024"])
        if r["role"] != "sink":
            assert r["labelled_both"] == r["labelled"] == r["labelled_pydoc1024"]
    sink = next(r for r in rows if r["role"] == "sink")
    assert sink["labelled_pydoc1024"] >= 3 and sink["labelled_both"] == sink["labelled"]


def test_atlas_null_with_shuffled_positions(tmp_path):
    """atlas_null.py --null positions: the atlas of the same prompts with RoPE's positions shuffled differs from the
    plain atlas in its positional scores, the model is restored afterwards, and the table names the input."""
    import interp
    from interp.experiments.atlas import AtlasConfig, run_atlas

    mod = load_script(ROOT / "atlas" / "atlas_null.py")
    model = interp.load_model("tiny-llama", device="cpu")
    cfg = AtlasConfig(prompts=2, tokens=48, ablate=False, inp=False, support=0)
    plain = run_atlas(model, cfg).table
    shuffled = mod.shuffled_positions_table(model, 2, 48)
    assert not np.allclose(plain["prev_token_score"], shuffled["prev_token_score"])
    np.testing.assert_allclose(run_atlas(model, cfg).table["prev_token_score"], plain["prev_token_score"], rtol=0, atol=1e-7)
    df = mod.main(["--quick", "--null", "positions", "--out", str(tmp_path)])
    assert set(df["input"]) == {"shuffled positions"}
    assert set(df.loc[df["null"], "role"]) <= {"previous_token", "sdh"}
