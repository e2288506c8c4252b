"""The head atlas (``interp.experiments.atlas``): its table joins the two passes exactly, its roles follow their stated
rules, its co-occurrence and band attribution are the counts and medians they claim, the page renders escaped."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from interp.engine import ScanConfig
from interp.experiments.atlas import (BANDS, ROLE_NAMES, ROLE_SHARE, RR_COLUMNS, AtlasConfig, atlas_config, atlas_table,
                                      attainable, band_attribution, chance, cooccurrence, role_summary, run_atlas)
from interp.measures.token_match import COLUMNS
from interp.report.atlas_page import render_atlas, write_atlas


@pytest.fixture(scope="module")
def atlas(tiny_llama):
    return run_atlas(tiny_llama, AtlasConfig(prompts=2, tokens=48, ablate=True, n_remove=2,
                                             scan=ScanConfig(block_size=8, map_size=8, kappa=0.05)))  # low kappa: SDHs in a random model


def test_attainable_shares_closed_form():
    r = torch.arange(10, 30)  # 20 distinct tokens
    p = torch.cat([torch.tensor([1]), r, r])  # BOS, r, r: 41 tokens
    a = attainable([p])
    assert a["previous_token"] == pytest.approx(40 / 41)
    assert a["duplicate_token"] == a["induction"] == pytest.approx(20 / 41)  # the second copy's queries
    assert a["echo"] == pytest.approx(20 / 41)
    assert attainable([torch.arange(40)])["echo"] == 0.0  # no period: no echo key


def test_chance_is_the_score_of_uniform_attention():
    """``chance`` equals TransformerLens-style scores of a materialised uniform causal pattern (A[i, j] = 1 / (i + 1)),
    computed here from the definition with explicit loops, on BOS, r, r and on a two-letter alphabet (where a uniform
    head scores about 1/2 on duplicate tokens)."""
    def by_hand(t):
        N = len(t)
        prev = sum(1 / (i + 1) for i in range(1, N)) / N
        dup = sum(sum(t[j] == t[i] for j in range(i)) / (i + 1) for i in range(N)) / N
        ind = sum(sum(t[j - 1] == t[i] for j in range(1, i + 1)) / (i + 1) for i in range(N)) / N
        return prev, dup, ind

    r = torch.arange(10, 30)
    rr = torch.cat([torch.tensor([1]), r, r])
    bits = torch.cat([torch.tensor([1]), torch.randint(2, 4, (59,), generator=torch.Generator().manual_seed(0))])
    for p in (rr, bits):
        c = chance([p], chunk=7)  # chunks that do not divide pos
        assert (c["previous_token"], c["duplicate_token"], c["induction"]) == pytest.approx(by_hand(p.tolist()), rel=1e-12)
    # echo pairs of BOS, r, r: query 21 + k sees its echo key 1 + k among 22 + k keys
    assert chance([rr])["echo"] == pytest.approx(sum(1 / (22 + k) for k in range(20)) / 41, rel=1e-12)
    assert chance([torch.arange(40)])["echo"] == 0.0
    assert 0.4 < chance([bits])["duplicate_token"] < 0.6


def test_table_joins_the_passes(atlas):
    t, rr = atlas.table, atlas.rr.heads
    assert len(t) == 2 * 4 and list(t[["layer", "head"]].itertuples(index=False)) == list(rr[["layer", "head"]].itertuples(index=False))
    for col, src in zip(RR_COLUMNS, (*COLUMNS, "echo_score")):
        np.testing.assert_array_equal(t[col].to_numpy(), rr[src].to_numpy())
    np.testing.assert_array_equal(t["prev_token_score"].to_numpy(), atlas.text.heads["prev_token_score"].to_numpy())
    assert t["rr_echo_score"].notna().all() and t["entropy"].notna().all() and t["inp_active_high"].notna().all()
    for b in BANDS:  # ablated token scores come from the same scans' variant state
        assert f"rr_induction_score_{b}" in t and f"slash_score_{b}" in t and t[f"prev_token_score_{b}"].notna().all()


def test_roles_follow_their_rules():
    """A hand-made table: each role flips exactly at its threshold."""
    shares = {"previous_token": 0.9, "duplicate_token": 0.5, "rr_induction": 0.5, "rr_echo": 0.25}
    base = dict(kv_head=0, is_sdh=False, has_sink=False, is_streaming=False, slash_score=0.0, sink_weight=0.0, distant_mass=1.0,
                prev_token_score=0.0, duplicate_token_score=0.0, induction_score=0.0, rr_echo_score=0.0)
    rows = [dict(base, layer=0, head=0, prev_token_score=ROLE_SHARE * 0.9 + 1e-9),
            dict(base, layer=0, head=1, prev_token_score=ROLE_SHARE * 0.9 - 1e-9, is_sdh=True, has_sink=True),
            dict(base, layer=1, head=0, rr_induction=ROLE_SHARE * 0.5, rr_echo=ROLE_SHARE * 0.25),
            dict(base, layer=1, head=1, duplicate_token_score=0.21, is_streaming=True)]

    class Fake:
        def __init__(self, heads):
            self.heads, self.card, self.config = heads, type("C", (), {"name": "m", "n_heads": 2})(), ScanConfig()

    text = pd.DataFrame(rows).drop(columns=["rr_induction", "rr_echo"], errors="ignore")
    rrh = text[["layer", "head", "kv_head"]].copy()
    rrh["prev_token_score"], rrh["duplicate_token_score"] = 0.0, 0.0
    rrh["induction_score"] = [0, 0, ROLE_SHARE * 0.5, 0.1]
    rrh["echo_score"] = [0, 0, ROLE_SHARE * 0.25 - 1e-9, 0]
    t = atlas_table(Fake(text), Fake(rrh), shares)
    assert list(t["roles"]) == ["previous_token", "sdh;sink", "induction", "duplicate_token;streaming"]
    assert list(t["role"]) == ["previous_token", "sdh", "induction", "duplicate_token"]
    co = cooccurrence(t)
    assert (co.to_numpy() == co.to_numpy().T).all() and co.loc["sdh", "sink"] == 1 and co.loc["induction", "induction"] == 1
    assert list(np.diag(co)) == [int(t[f"role_{n}"].sum()) for n in ROLE_NAMES]
    s = role_summary(t, shares)
    assert list(s["role"]) == list(ROLE_NAMES) and s.set_index("role").loc["previous_token", "threshold"] == pytest.approx(0.36)
    # measured from chance: threshold = c + ROLE_SHARE (a - c); the head just above 0.36 no longer passes at c = 0.1
    t2 = atlas_table(Fake(text), Fake(rrh), {**shares, "previous_token_chance": 0.1})
    assert list(t2["role_previous_token"]) == [False, False, False, False]
    s2 = role_summary(t2, {**shares, "previous_token_chance": 0.1}).set_index("role")
    assert s2.loc["previous_token", "threshold"] == pytest.approx(0.1 + ROLE_SHARE * 0.8) and s2.loc["previous_token", "chance"] == 0.1


def test_band_attribution_is_the_median_over_the_roles_heads(atlas):
    t, attr = atlas.table, band_attribution(atlas.table)
    assert len(attr) and "sdh" in set(attr["role"])  # not an empty comparison
    for r in attr.itertuples():
        sel = t[t[f"role_{r.role}"]]
        assert r.heads == len(sel) and r.original == pytest.approx(np.nanmedian(sel[r.score]))
        assert r.ratio_wo_high == pytest.approx(np.nanmedian(sel[f"{r.score}_wo_high"] / sel[r.score]))
    assert band_attribution(atlas.table.drop(columns=[c for c in t if c.endswith(BANDS)])).empty


def test_page_and_files(atlas, tmp_path):
    paths = write_atlas(atlas, tmp_path / "a")
    for name in ("atlas.csv", "atlas_roles.csv", "atlas_cooccurrence.csv", "atlas_ablation.csv", "atlas.html"):
        assert paths[name].exists()
    assert (tmp_path / "a" / "heads.csv").exists() and (tmp_path / "a" / "report.html").exists()
    assert (tmp_path / "a" / "rr" / "state" / "state.pt").exists()
    page = (tmp_path / "a" / "atlas.html").read_text()
    for frag in ('id="atlas-grid"', 'id="atlas-r1"', 'id="atlas-ablation"', 'href="report.html"', "Role co-occurrence"):
        assert frag in page
    back = pd.read_csv(paths["atlas.csv"])
    assert {"rr_prev_token_score", "rr_duplicate_token_score", "rr_induction_score", "rr_echo_score", "role", "roles"} <= set(back.columns)
    atlas.text.card.name, name = "<script>x</script>", atlas.text.card.name
    try:
        assert "<script>x</script>" not in render_atlas(atlas)
    finally:
        atlas.text.card.name = name


def test_text_pass_refuses_a_random_corpus(tiny_llama):
    from interp.errors import ConfigError

    with pytest.raises(ConfigError, match="needs a text corpus"):
        run_atlas(tiny_llama, AtlasConfig(corpus="random", prompts=1, tokens=16))


def test_text_prompts_replace_the_corpus(tiny_llama):
    """A lab model's own task inputs as the text pass: the atlas's text columns are those of a scan of these prompts."""
    from interp import corpus
    from interp.engine import scan
    from interp.experiments.atlas import atlas_config

    cfg = AtlasConfig(prompts=1, tokens=24, inp=False, scan=ScanConfig(block_size=8, map_size=8))
    given = corpus.prompts(tiny_llama, "random", 2, 20, seed=3)  # a corpus the text pass would refuse by name
    res = run_atlas(tiny_llama, cfg, text_prompts=given)
    want = scan(tiny_llama, given, atlas_config(cfg)[0]).heads
    for col in ("prev_token_score", "duplicate_token_score", "slash_score", "entropy"):
        np.testing.assert_allclose(res.table[col].to_numpy(), want[col].to_numpy(), rtol=1e-6, atol=1e-9)
    assert res.rr.heads.shape[0] == res.table.shape[0] and res.text.meta["corpus"] == "given"
    with pytest.raises(ValueError, match=r"\[prompt, pos\] int64"):
        run_atlas(tiny_llama, cfg, text_prompts=given[0])


def test_report_links_to_the_atlas_and_names_heavy_hitters(atlas, tiny_llama, tmp_path):
    write_atlas(atlas, tmp_path / "b", tiny_llama.tokenizer)
    report = (tmp_path / "b" / "report.html").read_text()
    assert 'href="atlas.html"' in report and "ids shown" not in report  # the tokenizer reached the heavy-hitter section
    assert "hh_sketch" in atlas.text.state  # the text pass ran the heavy-hitter measure


def test_retrieval_pass_joins_its_scores(tiny_llama):
    from interp.experiments.retrieval import RetrievalConfig

    res = run_atlas(tiny_llama, AtlasConfig(prompts=1, tokens=32, inp=False, scan=ScanConfig(block_size=8, map_size=8),
                                            retrieval=RetrievalConfig(lengths=(200,), depths=(0.5,), max_new_tokens=4)))
    assert "retrieval" in res.seconds and res.retrieval is not None
    want = res.retrieval.heads.set_index(["layer", "head"])["retrieval_score"]
    got = res.table.set_index(["layer", "head"])["retrieval_score"]
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index(), check_names=False)
    assert list(res.table["role_retrieval"]) == list((res.table["retrieval_score"] > 0.1).fillna(False))


SUPPORT_SCAN = ScanConfig(block_size=8, map_size=8, kappa=0.05)


def test_reweighted_parts_are_the_scan_of_the_reweighted_prompts(tiny_llama):
    """``reweighted`` with weights 1 is the merged scan; a prompt counted twice gives the same means as the prompt once
    (every head column), since each state entry is a sum over prompts."""
    from interp.engine import merge_results, scan
    from interp.experiments.atlas import reweighted

    p = tiny_llama_prompts(tiny_llama, 3)
    parts = [scan(tiny_llama, p[i:i + 1], SUPPORT_SCAN, prompt_ids=[i]) for i in range(3)]
    merged = merge_results(parts)
    pd.testing.assert_frame_equal(reweighted(parts, np.ones(3, int)).heads, merged.heads)
    pd.testing.assert_frame_equal(reweighted(parts, np.array([2, 0, 0])).heads, parts[0].heads)
    with pytest.raises(ValueError, match="non-negative integer"):
        reweighted(parts, np.array([0.5, 1, 1]))


def tiny_llama_prompts(model, n):
    from interp import corpus

    return corpus.prompts(model, "pydoc", n, 40, 0)


def test_role_support_is_certain_when_every_prompt_is_the_same(tiny_llama):
    """Three copies of one prompt per pass: every bootstrap resample is that prompt, so each head's support is exactly
    1 for the roles the table gives it and 0 for the others."""
    from interp import corpus
    from interp.engine import scan
    from interp.experiments.atlas import role_support

    cfg = AtlasConfig(prompts=1, tokens=40, scan=SUPPORT_SCAN, inp=False)
    one = run_atlas(tiny_llama, cfg)
    text_cfg, rr_cfg = atlas_config(cfg)
    tp = corpus.prompts(tiny_llama, "pydoc", 1, 40, 0).repeat(3, 1)
    rp = corpus.prompts(tiny_llama, "repeated-random", 1, 40, 0, repeats=2).repeat(3, 1)
    tparts = [scan(tiny_llama, tp[i:i + 1], text_cfg, prompt_ids=[i]) for i in range(3)]
    rparts = [scan(tiny_llama, rp[i:i + 1], rr_cfg, prompt_ids=[i]) for i in range(3)]
    sup = role_support(tparts, rparts, list(tp), list(rp), resamples=5)
    for n in ROLE_NAMES:
        np.testing.assert_array_equal(sup[f"support_{n}"].to_numpy(), one.table[f"role_{n}"].to_numpy(float), err_msg=n)


def test_atlas_with_support_keeps_the_table_of_the_joint_scan(tiny_llama):
    """With ``support`` the passes scan prompt by prompt; the merged scans give the same table as one joint scan (float32
    forwards of one prompt against a batch, sums in another order: to float32 rounding), and every support is a share in [0, 1] that agrees with the role where it is 0 or 1
    only if the role does."""
    cfg = AtlasConfig(prompts=3, tokens=40, scan=SUPPORT_SCAN, inp=False)
    joint = run_atlas(tiny_llama, cfg)
    with_sup = run_atlas(tiny_llama, replace(cfg, support=20))
    t, s = joint.table, with_sup.table
    num = [c for c in t.columns if pd.api.types.is_float_dtype(t[c])]
    np.testing.assert_allclose(s[num].to_numpy(float), t[num].to_numpy(float), rtol=1e-5, atol=1e-6)
    assert list(s["roles"]) == list(t["roles"]) and "support" in with_sup.seconds
    for n in ROLE_NAMES:
        v = s[f"support_{n}"].to_numpy()
        assert ((v >= 0) & (v <= 1)).all() and np.isclose(v * 20, np.round(v * 20)).all(), n
    from interp.report.atlas_page import role_grid

    held = s[s["roles"] != ""].iloc[0]  # the grid's hover gives the support of the head's roles
    first = held["roles"].split(";")[0]
    hover = role_grid(s).data[0].text[held["layer"], held["head"]]
    assert f"(support: {first} " in hover
