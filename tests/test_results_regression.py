"""Regression tests on the committed results (issue 21, item 3).

Two kinds:

- **Schema**: an analysis re-run in its quick mode writes tables with exactly the columns (same names, same order)
  of the committed tables of the same name in ``figures/``, so a script and its committed output cannot drift apart.
- **Same computation, smaller**: where a piece of a committed number can be recomputed exactly in seconds (one
  prompt of the causal ablation, the 512-token prefix of the key-norm sweep, the seed-0 copier against copy.csv),
  the test recomputes it and compares within a stated numerical tolerance: the rounding of the CSV plus float32
  differences between BLAS thread counts. The tolerances are not fitted to the results; each is far below the
  spread it guards (stated beside it). Quick runs on other models or sizes are not compared numerically: they are
  not the same computation.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interp.models import is_installed
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
FIG = ROOT / "figures"
ANALYSES = ROOT / "analyses"

pytestmark = pytest.mark.slow

# script -> the committed tables its quick mode writes (same file names)
SCHEMA = {
    "p004_slash/band_ablation.py": ["band_ablation_heads.csv", "band_ablation_table5.csv", "band_ablation_summary.csv", "band_ablation_causal.csv",
                         "band_ablation_causal_prompts.csv"],
    "p001_frayed/key_norm_length.py": ["key_norm_length.csv"],
    "p000_copy/copy_2d_rope_seeds.py": ["copy_2d_rope_seeds.csv", "copy_2d_rope_heads.csv", "copy_2d_rope_seeds_summary.csv"],
    "p004_slash/ood_ratio.py": ["ood_ratio.csv", "ood_ratio_summary.csv"],
    "atlas/compare_zoo.py": ["compare_zoo.csv", "compare_zoo_summary.csv"],
    "p001_frayed/frayed_rope.py": ["frayed_rope_summary.csv"],
    "p000_copy/copy_2d_rope.py": ["copy.csv", "copy_summary.csv", "copy_loss.csv", "copy_attention.csv", "copy_atlas.csv",
                       "copy_atlas_roles.csv"],
    "p003_sparsity/ppc_scratchpad.py": ["ppc.csv", "ppc_summary.csv"],
    "atlas/head_atlas.py": ["atlas_summary.csv", "atlas_roles.csv", "atlas_cooccurrence.csv"],
}
NEEDS = {"p004_slash/band_ablation.py": "smollm2-135m", "p004_slash/ood_ratio.py": "smollm2-135m", "atlas/compare_zoo.py": "smollm2-135m"}
# committed tables written by an older version of their script, with the command that regenerates them; the schema
# test xfails on these (and fails once they match, so the entry must then go)
PENDING_REGEN: dict[str, str] = {}


@pytest.mark.parametrize("script", sorted(SCHEMA))
def test_quick_run_writes_the_committed_schema(script, tmp_path):
    if script in NEEDS and not is_installed(NEEDS[script]):
        pytest.skip(f"{NEEDS[script]} not installed")
    load_script(ANALYSES / script).main(["--quick", "--out", str(tmp_path)])
    pending = []
    for name in SCHEMA[script]:
        committed = pd.read_csv(FIG / name, nrows=1)
        quick = pd.read_csv(tmp_path / name, nrows=1)
        same = list(quick.columns) == list(committed.columns)
        if name in PENDING_REGEN:
            assert not same, f"{name} now matches its script: remove it from PENDING_REGEN"
            pending.append(f"{name}: {PENDING_REGEN[name]}")
            continue
        assert same, f"{script}: {name} columns differ from the committed table"
    if pending:
        pytest.xfail("; ".join(pending))


@pytest.mark.skipif(not is_installed("smollm2-135m"), reason="smollm2-135m not installed")
def test_causal_nll_of_one_prompt_matches_the_committed_table():
    """Prompt 0 of the committed smollm2-135m causal ablation (8 pydoc prompts x 1024 tokens), recomputed: the NLL with
    and without each band. Tolerance 2e-4 nats: the CSV's 5 decimals plus float32 logits under another thread count;
    the committed deltas differ between bands by >= 5e-3 nats and their bootstrap intervals are wider than 2e-4."""
    import interp

    ba = load_script(ANALYSES / "p004_slash/band_ablation.py")
    model = interp.load_model("smollm2-135m", device="cpu")
    p = interp.corpus.prompts(model, "pydoc", 8, 1024)
    from interp.experiments.ablation import band_variants

    got = ba.causal_nll(model, [p[0]], band_variants(model.card.n_rotary_planes)).iloc[0]
    ref = pd.read_csv(FIG / "band_ablation_causal_prompts.csv")
    ref = ref[(ref["model"] == "smollm2-135m") & (ref["prompt"] == 0)].iloc[0]
    for col in ["original", *ba.BANDS]:
        assert got[col] == pytest.approx(ref[col], abs=2e-4), col


def test_causal_table_is_the_mean_of_its_prompts():
    """``band_ablation_causal.csv`` is the per-prompt table's mean (equal-length prompts), interval around the point."""
    c = pd.read_csv(FIG / "band_ablation_causal.csv")
    per = pd.read_csv(FIG / "band_ablation_causal_prompts.csv")
    for r in c.itertuples():
        p = per[per["model"] == r.model]
        assert len(p) == r.prompts
        assert r.nll_original == pytest.approx(p["original"].mean(), abs=2e-5)
        assert r.delta_nll == pytest.approx((p[r.band] - p["original"]).mean(), abs=2e-5)
        assert r.delta_lo <= r.delta_nll <= r.delta_hi


def test_band_ablation_summary_reads_the_heads_table():
    """The committed summary's medians are the medians of the committed per-head ratios (same run, 4-5 decimals),
    and each bootstrap interval (where the table has them) contains its point estimate."""
    heads = pd.read_csv(FIG / "band_ablation_heads.csv")
    s = pd.read_csv(FIG / "band_ablation_summary.csv")
    for r in s.itertuples():
        h = heads[(heads["model"] == r.model) & (heads["layer_type"] == r.layer_type)]
        assert len(h) == r.sdh
        assert r.median_ratio == pytest.approx(h[f"ratio_{r.band}"].median(), abs=1e-4)
        if "median_lo" in s.columns:  # written since issue 21 (see PENDING_REGEN)
            assert r.median_lo - 1e-4 <= r.median_ratio <= r.median_hi + 1e-4


@pytest.mark.skipif(not is_installed("smollm2-135m"), reason="smollm2-135m not installed")
def test_key_norm_at_512_tokens_matches_the_committed_sweep():
    """The committed key_norm_length.csv row at 512 tokens is the 512-token prefix of the same 16384-token prompts:
    recomputed from one 512-token forward per prompt. Tolerance 2e-4: the CSV's 4 decimals plus float32 keys; the
    quoted values (5.57 / 16.9) are printed at 2-3 digits, and the length trend they show is 0.9 over 512..16384."""
    import interp

    kn = load_script(ANALYSES / "p001_frayed/key_norm_length.py")
    from interp.measures.base import kv_index

    model = interp.load_model("smollm2-135m", device="cpu")
    ref = pd.read_csv(FIG / "key_norm_length.csv")
    ref = ref[(ref["model"] == "smollm2-135m") & (ref["length"] == 512)].set_index("measure")
    drawn = int(ref["prompt_tokens"].iloc[0])
    p = interp.corpus.prompts(model, "pydoc", int(ref["prompts"].iloc[0]), drawn, beyond_context=True)
    norms = np.stack([kn.key_norms(model, t[:512]) for t in p])
    first, rest = kn.per_head(norms, kv_index(model.card).numpy(), 512)
    assert np.median(first) == pytest.approx(ref.loc["key_norm_first", "median"], abs=2e-4)
    assert np.median(rest) == pytest.approx(ref.loc["key_norm_rest", "median"], abs=2e-4)


def test_copier_seed_0_is_the_committed_copy_run():
    """copy_2d_rope_seeds.py trains the 2D-RoPE copier exactly as copy_2d_rope.py does: its seed 0 rows equal copy.csv's
    (same seeded training and test strings; exact match is a count over 50-200 strings, compared exactly)."""
    seeds = pd.read_csv(FIG / "copy_2d_rope_seeds.csv")
    copy = pd.read_csv(FIG / "copy.csv")
    copy = copy[(copy["pe"] == "rope2d") & (copy["train_distribution"] == "imbalanced") & (copy["seed"] == 0)]
    keys = ["distribution", "length_lo", "length_hi"]
    m = seeds[seeds["seed"] == 0].merge(copy, on=keys, suffixes=("", "_copy"))
    assert len(m) == len(copy) > 0
    np.testing.assert_array_equal(m["exact_match"].to_numpy(), m["exact_match_copy"].to_numpy())


def test_loo_summary_is_the_summary_of_loo_csv():
    """leave_one_out.summarise on the committed per-window table gives the committed summary, bootstrap intervals
    included (same seeded computation: compared to 1e-9), and each interval contains its point estimate."""
    mod = load_script(ANALYSES / "p003_sparsity/leave_one_out.py")
    df = pd.read_csv(FIG / "loo.csv")
    ref = pd.read_csv(FIG / "loo_summary.csv").iloc[0]
    got = mod.summarise(df[df["model"] == ref["model"]].reset_index(drop=True)).iloc[0]
    for col in got.index:
        assert got[col] == pytest.approx(ref[col], rel=1e-9, abs=1e-12), col
    for k in ("pearson_sparse", "pearson_random", "pearson_diff", "recovered_sparse"):
        assert ref[f"{k}_lo"] <= ref[k] <= ref[f"{k}_hi"]


def test_dyck_layer_ablation_is_derived_from_the_counting_table():
    mod = load_script(ANALYSES / "p002_dyck/dyck_depth.py")
    got = mod.layer_ablation(pd.read_csv(FIG / "dyck_counting.csv")).round(4)
    ref = pd.read_csv(FIG / "dyck_layer_ablation.csv")
    assert list(got.columns) == list(ref.columns)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), ref, check_dtype=False, atol=1e-4)


def test_atlas_text_pass_is_the_committed_zoo_scan():
    """The atlas's text pass (8 x 1024 pydoc, seed 0) and compare_zoo.py's scan are the same computation, run
    separately: every head's slash score and r1 agree to the CSVs' printing (6 significant digits), and the SDH
    counts equal sdh_count_bootstrap.csv's."""
    boot = pd.read_csv(FIG / "sdh_count_bootstrap.csv").set_index("model")
    summary = pd.read_csv(FIG / "atlas_summary.csv").set_index("model")
    zoo = pd.read_csv(FIG / "compare_zoo.csv")
    for model in summary.index:
        assert summary.loc[model, "sdh"] == boot.loc[model, "sdh_count"], model
        atlas = pd.read_csv(FIG / f"atlas_{model}.csv").set_index(["layer", "head"])
        z = zoo[zoo["model"] == model].set_index(["layer", "head"])
        assert len(z) == len(atlas), f"compare_zoo.csv lacks {model}"
        for col in ("slash_score", "r1_q", "r1_k", "sink_weight"):
            np.testing.assert_allclose(atlas[col].to_numpy(), z.loc[atlas.index, col].to_numpy(), rtol=1e-5, atol=1e-7,
                                       err_msg=f"{model} {col}")


def test_variable_assignment_ppc_seed_0_lands_in_the_seed_spread():
    """003 Fig. 1c at lab scale: retraining the depth-2 PPC model of seed 0 (the full budget, about 2.5 min of one
    core) lands, in every length bin, within 3 sample sds of the committed mean over seeds plus one test point (1/64):
    a change that breaks PPC's learning or its length reach fails here. The tolerance comes from the committed seed
    spread, not from this run."""
    import torch

    mod = load_script(ANALYSES / "p003_sparsity/ppc_scratchpad.py")
    summ = pd.read_csv(FIG / "ppc_summary.csv")
    summ = summ[(summ.task == "va") & (summ.method == "ppc") & (summ.jump_or_depth == 2)].set_index("length_lo")
    threads = torch.get_num_threads()
    try:
        rows, _ = mod.run_job(("va", "ppc", 2, 0), mod.FULL)
    finally:
        torch.set_num_threads(threads)  # run_job pins one thread for its worker process
    got = rows.set_index("length_lo")["exact_match"]
    assert (summ["n"] >= 3).all() and set(got.index) == set(summ.index)
    tol = 3 * summ["std"] + 1 / 64
    assert ((got - summ["mean"]).abs() <= tol).all(), pd.DataFrame({"got": got, "mean": summ["mean"], "tol": tol})


def test_sweep_extra_rows_equal_the_separate_cluster_and_key_norm_tables():
    """frayed_rope_summary.csv's Davies-Bouldin and key-norm rows (the geometry measure inside a length sweep) equal
    cluster_length.csv and key_norm_length.csv (the same prompts' clouds and keys from one forward per prompt, computed
    by other code) at every length: to 1e-4, the 4-decimal rounding of the two side tables."""
    sweep = pd.read_csv(FIG / "frayed_rope_summary.csv")
    for name, prefix in (("cluster_length.csv", "davies_bouldin"), ("key_norm_length.csv", "key_norm")):
        side = pd.read_csv(FIG / name)
        m = sweep[sweep["measure"].str.startswith(prefix)].merge(side, on=["model", "length", "measure"], suffixes=("", "_side"))
        assert len(m) == len(side[side["measure"].str.startswith(prefix)]) >= 12, name
        np.testing.assert_allclose(m["median"], m["median_side"], atol=1e-4, err_msg=name)
