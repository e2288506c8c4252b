"""Head effects (``interp.experiments.effects``): the fast path (cached residual stream, earlier layers skipped, heads
batched as rows) equals a naive full forward per head to 1e-4 nats, on tiny models and on SmolLM2; the statistics
equal a hand computation; earlier layers really are skipped; the bootstrap interval, the atomic output, the page and
every bad input of the command line (one line, exit 2, before the model loads)."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import interp.models.loaders as loaders
from interp.cli import app
from interp.errors import ConfigError
from interp.cli.common import parse_heads
from interp.experiments.effects import COLUMNS, INTERVENTIONS, EffectsConfig, head_effects, naive_effects, parse_interventions
from interp.experiments.stats import bootstrap_interval
from interp.hooks.heads import head_intervention
from interp.models.arch import decoder_layers
from interp.report.effects_page import write_effects
from tests.conftest import random_tokens

runner = CliRunner()


def _prompts(n=3, length=36):
    return torch.stack([random_tokens(length, seed=10 + s) for s in range(n)])


@pytest.mark.parametrize("rows", [1, 5, None])
def test_fast_path_equals_a_naive_forward_per_head(tiny, rows):
    kinds = INTERVENTIONS if tiny.card.n_rotary_planes >= 3 else tuple(k for k in INTERVENTIONS if not k.startswith("rope_"))
    cfg = EffectsConfig(interventions=kinds, sink=2, window=6, batch_rows=rows, bootstrap=200)
    fast = head_effects(tiny, _prompts(), cfg)
    slow = naive_effects(tiny, _prompts(), cfg)
    assert list(fast.table.columns) == list(COLUMNS)
    assert len(fast.table) == tiny.card.n_layers * tiny.card.n_heads * len(kinds)
    pd.testing.assert_frame_equal(fast.table[["layer", "head", "intervention"]], slow.table[["layer", "head", "intervention"]])
    for c in ("dnll", "dnll_lo", "dnll_hi", "kl"):
        np.testing.assert_allclose(fast.table[c], slow.table[c], atol=1e-4, rtol=0)
    assert fast.table["kl"].min() >= -1e-6 and fast.table["dnll"].abs().max() > 1e-3  # heads do matter in random models
    assert fast.clean_nll == pytest.approx(slow.clean_nll, abs=1e-5)


def test_statistics_equal_a_hand_computation(tiny_llama):
    """One head, zero and streaming: dnll and KL from two plain forwards per prompt, in float64 here."""
    P = _prompts(2, 30)
    res = head_effects(tiny_llama, P, EffectsConfig(interventions=("zero", "streaming"), heads=((1, 2),), sink=1, window=3,
                                                    bootstrap=0))
    for name, kw in (("zero", {}), ("streaming", {"sink": 1, "window": 3})):
        dn, kl = [], []
        for t in P:
            with torch.no_grad():
                lc = torch.log_softmax(tiny_llama.hf(t[None]).logits[0, :-1].double(), -1)
                with head_intervention(tiny_llama, [(1, 2)], name, **kw):
                    li = torch.log_softmax(tiny_llama.hf(t[None]).logits[0, :-1].double(), -1)
            idx = torch.arange(t.numel() - 1)
            dn.append(float((lc[idx, t[1:]] - li[idx, t[1:]]).mean()))
            kl.append(float((lc.exp() * (lc - li)).sum(-1).mean()))
        row = res.table[res.table["intervention"] == name].iloc[0]
        assert row["dnll"] == pytest.approx(np.mean(dn), abs=1e-5)
        assert row["kl"] == pytest.approx(np.mean(kl), abs=1e-5)
        assert row["dnll_lo"] == row["dnll_hi"] == row["dnll"]  # bootstrap 0: the point
    lc_nll = []
    for t in P:
        with torch.no_grad():
            lc_nll.append(float(torch.nn.functional.cross_entropy(tiny_llama.hf(t[None]).logits[0, :-1].double(), t[1:])))
    assert res.clean_nll == pytest.approx(np.mean(lc_nll), abs=1e-5)


def test_heads_of_a_layer_run_from_its_cached_input(tiny_llama):
    """Heads of layer 1 only: layer 0 runs in the clean pass (once per prompt) and never again."""
    calls = [0] * tiny_llama.card.n_layers
    hooks = [m.register_forward_pre_hook(lambda *a, i=i: calls.__setitem__(i, calls[i] + 1))
             for i, m in enumerate(decoder_layers(tiny_llama.hf))]
    try:
        head_effects(tiny_llama, _prompts(2, 20), EffectsConfig(heads=((1, 0), (1, 3)), batch_rows=8))
    finally:
        for h in hooks:
            h.remove()
    assert calls == [2, 2 + 3]  # clean pass: 2 prompts; then one batched forward per intervention (2 prompts x 2 heads)


def test_smollm2_fast_path_equals_the_naive_loop_for_a_few_heads(smollm2):
    from interp import corpus

    P = corpus.prompts(smollm2, "pydoc", 2, 48, 0)
    cfg = EffectsConfig(interventions=("zero", "mean", "streaming", "rope_low"), heads=((0, 4), (12, 1), (29, 8)), sink=2,
                        window=8, bootstrap=100)
    fast, slow = head_effects(smollm2, P, cfg), naive_effects(smollm2, P, cfg)
    for c in ("dnll", "dnll_lo", "dnll_hi", "kl"):
        np.testing.assert_allclose(fast.table[c], slow.table[c], atol=1e-4, rtol=0)


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(4, 12)) + np.arange(4)[:, None]
    lo, hi = bootstrap_interval(v, 2000, seed=3)
    m = v.mean(1)
    assert (lo < m).all() and (m < hi).all()
    se = v.std(1, ddof=1) / np.sqrt(12)  # the percentile interval is close to mean +- 1.96 se for normal data
    np.testing.assert_allclose(hi - lo, 2 * 1.96 * se, rtol=0.25)
    lo2, hi2 = bootstrap_interval(v, 2000, seed=3)
    assert (lo == lo2).all() and (hi == hi2).all()


def test_parsers_and_config_errors():
    assert parse_heads("all") is None and parse_heads("3:1, 0:2") == ((3, 1), (0, 2))
    assert parse_interventions("zero,mean,zero") == ("zero", "mean")
    for bad, match in (("", "--heads is empty"), ("3", "not LAYER:HEAD"), ("a:1", "not LAYER:HEAD"), ("1:-1", "not LAYER:HEAD")):
        with pytest.raises(ConfigError, match=match):
            parse_heads(bad)
    with pytest.raises(ConfigError, match="unknown intervention 'kill'; use one of zero, mean, streaming"):
        parse_interventions("zero,kill")
    with pytest.raises(ConfigError, match="outside the model's grid"):
        EffectsConfig(heads=((2, 0),)).check(2, 4)
    with pytest.raises(ConfigError, match="--sink 50 is larger than the prompt"):
        EffectsConfig(sink=50).check(n_tokens=40)


def test_output_files_are_complete_and_atomic(tiny_llama, tmp_path, monkeypatch):
    res = head_effects(tiny_llama, _prompts(2, 20), EffectsConfig(heads=((0, 1), (1, 2)), bootstrap=50))
    atlas = pd.DataFrame({"layer": [0, 1], "head": [1, 2], "roles": ["sdh;sink", np.nan]})
    paths = write_effects(res, tmp_path / "out", atlas)
    back = pd.read_csv(paths["effects.csv"])
    assert list(back.columns) == list(COLUMNS) and len(back) == 6
    meta = json.loads(paths["effects.json"].read_text())
    assert meta["clean_nll"] == pytest.approx(res.clean_nll) and meta["predictions"] == 2 * 19
    page = paths["effects.html"].read_text()
    assert "roles: sdh;sink" in page and "L1H2" in page
    # a write that dies half-way leaves the previous table, never a partial one, and no temporary file
    import interp.report.effects_page as page_mod

    def dying(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(page_mod, "render_effects", dying)  # dies after effects.json, before the page and the table
    res2 = head_effects(tiny_llama, _prompts(2, 20), EffectsConfig(heads=((0, 1),), bootstrap=50))
    with pytest.raises(KeyboardInterrupt):
        write_effects(res2, tmp_path / "new", None)
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["effects.json"]  # no effects.csv, no temporary file


def test_an_interrupted_run_leaves_no_effects_csv(tmp_path, monkeypatch):
    import interp.experiments.effects as eff

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(eff, "token_stats", interrupted)
    res = runner.invoke(app, ["effects", "tiny-llama", "--prompts", "1", "--tokens", "20", "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    assert not (tmp_path / "o" / "effects.csv").exists()


def test_cli_attribution_writes_linearised_zero_and_mean(tmp_path):
    res = runner.invoke(app, ["effects", "tiny-llama", "--prompts", "2", "--tokens", "20", "--method", "attribution",
                              "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "a" / "effects.csv")
    assert list(t.columns) == list(COLUMNS) and set(t["intervention"]) == {"zero", "mean"} and t["kl"].isna().all()
    assert json.loads((tmp_path / "a" / "effects.json").read_text())["method"] == "attribution"


def test_cli_writes_the_table(tmp_path):
    res = runner.invoke(app, ["effects", "tiny-qwen2", "--prompts", "2", "--tokens", "24", "--heads", "0:1,1:3",
                              "--interventions", "zero,streaming,nope", "--sink", "2", "--window", "4", "--out", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "e" / "effects.csv")
    assert list(t.columns) == list(COLUMNS) and set(t["intervention"]) == {"zero", "streaming", "nope"} and len(t) == 6
    assert "clean NLL" in res.output


@pytest.mark.parametrize("args,message", [
    (["--heads", "2:0"], "head 2:0 is outside the model's grid: layers 0..1, heads 0..3"),
    (["--heads", "0:9"], "head 0:9 is outside"),
    (["--heads", ""], "--heads is empty"),
    (["--heads", "1-2"], "not LAYER:HEAD"),
    (["--window", "0"], "--window must be >= 1"),
    (["--sink", "100"], "--sink 100 is larger than the prompt (32 tokens)"),
    (["--interventions", "zero,ablate"], "unknown intervention 'ablate'; use one of zero, mean, streaming, rope_high"),
    (["--interventions", ""], "no interventions given"),
    (["--method", "fast"], "unknown --method 'fast'"),
    (["--method", "attribution", "--interventions", "zero,streaming"], "linearises zero and mean only, got streaming"),
])
def test_bad_input_is_one_line_and_exit_2_before_the_model_loads(tmp_path, monkeypatch, args, message):
    def no_load(*a, **k):
        raise AssertionError("the model must not load on bad input")

    monkeypatch.setattr(loaders, "load_model", no_load)
    import interp.models as models

    monkeypatch.setattr(models, "load_model", no_load)
    res = runner.invoke(app, ["effects", "tiny-llama", "--tokens", "32", "--out", str(tmp_path / "x"), *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
