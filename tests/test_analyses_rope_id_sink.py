"""analyses/p001_frayed/rope_id_sink.py: the sweep's per-head sink weights equal ``interp.scan`` of the same trained model
on the same prompts; the tables and verdicts follow the sink definition (importance of token 0 above 0.3)."""

from argparse import Namespace

import numpy as np
import pandas as pd
import pytest
import torch

import interp
from analyses.p001_frayed.rope_id_sink import main, state, sweep_prompts, tables, verdict
from analyses.p001_frayed.sink_beyond import MEASURES
from interp.lab import text_lm


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out, models = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("models")
    verdicts = main(["--quick", "--out", str(out), "--models-dir", str(models)])
    return out, models, verdicts


@pytest.mark.parametrize("pe", ["rope", "rope-id"])
def test_swept_sink_weights_equal_a_scan_of_the_saved_model(quick, pe):
    """At 1x and 2x the training length, the per-head means over the swept prompts equal ``interp.scan``'s
    ``sink_weight`` and exact ``sink_weight_norope`` of the saved model on those prompts' prefixes (every row exact)."""
    out, models, _ = quick
    heads = pd.read_csv(out / "rope_id_sink_heads.csv")
    args = Namespace(factors=[1, 2], train_length=32, select=2, prompts=3)
    swept = sweep_prompts(text_lm.split_text("pydoc")[1], args)[args.select:]
    model = interp.load_model(f"local:{models / pe}", device="cpu")
    cfg = interp.ScanConfig(counterfactual_queries=0)
    for n in (32, 64):
        scan = interp.scan(model, swept[:, :n], cfg, beyond_context=True).heads.sort_values(["layer", "head"])
        got = heads[(heads.pe == pe) & (heads.length == n)].sort_values(["layer", "head"])
        for col in ("sink_weight", "sink_weight_norope"):
            np.testing.assert_allclose(got[col].to_numpy(), scan[col].to_numpy(), rtol=1e-4, atol=1e-6, err_msg=f"{col} at {n}")
    # the sink heads are those whose weight on the selection prompts at n exceeds the sink threshold
    at_n = heads[(heads.pe == pe) & (heads.factor == 1)]
    assert (at_n.sink_head == (at_n.select_weight > 0.3)).all()


def test_quick_run_without_a_sink_says_so(quick):
    """The quick models (30 steps, width 32) put about the uniform share on token 0: no head passes 0.3."""
    out, _, verdicts = quick
    assert list(verdicts.pe) == ["rope", "rope-id"] and (verdicts.sink_heads == 0).all()
    assert (verdicts.verdict == "no sink formed").all()
    assert list(pd.read_csv(out / "rope_id_sink_verdict.csv").verdict) == list(verdicts.verdict)


def _means(weights: np.ndarray, select: int) -> np.ndarray:
    """``head_means``-shaped ``[prompt, length, measure, layer=1, head]`` with ``weights`` ``[prompt, length, head]`` as
    the sink weight and every other measure 0."""
    P, K, H = weights.shape
    m = np.zeros((P, K, len(MEASURES), 1, H))
    m[:, :, MEASURES.index("sink_weight"), 0, :] = weights
    return m


def test_tables_take_the_median_over_sink_heads_selected_on_other_prompts():
    """Head 0 is a sink on the selection prompts (0.9) and head 1 is not (0.1); the swept value is head 0's alone, its
    interval over prompts against 0.3 gives the state, and the verdict follows the states beyond 1x."""
    rng = np.random.default_rng(0)
    P, S = 6, 2
    w = np.zeros((S + P, 3, 2))
    w[:, :, 1] = 0.1
    w[:S, 0, 0] = 0.9
    w[S:, :, 0] = np.array([0.8, 0.5, 0.1]) + rng.uniform(-0.02, 0.02, (P, 3))  # kept at 1x and 2x, lost at 4x
    args = Namespace(train_length=32, select=S, factors=[1, 2, 4], boot=500)
    t = tables({"rope-id": _means(w, S)}, args)
    s = t["summary"][t["summary"].measure == "sink_weight"].set_index("factor")
    np.testing.assert_allclose(s["value"].to_numpy(), w[S:, :, 0].mean(0))
    assert list(s["state"]) == ["kept", "kept", "lost"] and (s["sink_heads"] == 1).all()
    np.testing.assert_allclose(s.loc[4, "change"], (w[S:, 2, 0] - w[S:, 0, 0]).mean())
    assert verdict(dict(zip(s.index, s["state"])), 1) == "in part"


def test_verdict_words():
    assert verdict({1: "kept", 2: "kept", 8: "kept"}, 3) == "reproduced"
    assert verdict({1: "kept", 2: "unclear", 8: "lost"}, 3) == "not reproduced"
    assert verdict({1: "kept", 2: "kept", 8: "lost"}, 3) == "in part"
    assert verdict({1: "unclear", 2: "kept"}, 3) == "no sink formed"  # the sink does not replicate on the swept prompts
    assert verdict({}, 0) == "no sink formed"
    assert (state(0.31, 0.5), state(0.1, 0.29), state(0.2, 0.4)) == ("kept", "lost", "unclear")


def test_bad_options_end_with_one_line_and_a_cpu_machine_runs_nothing(tmp_path, capsys):
    """Shared with copy_finetune (analyses/benchmarks/_device.py): factors must start at 1 and increase; --device cuda
    without a GPU is refused; full mode on a CPU machine (make_all's) says it needs a GPU and writes nothing."""
    for argv, says in ((["--factors", "2,4"], "start at 1"), (["--factors", "1,x"], "whole multiples"),
                       (["--device", "cuda"], "no CUDA GPU")):
        if says == "no CUDA GPU" and torch.cuda.is_available():
            continue
        with pytest.raises(SystemExit) as e:
            main([*argv, "--out", str(tmp_path)])
        assert e.value.code == 2 and says in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["--out", str(tmp_path)]).empty and "sized for a CUDA GPU" in capsys.readouterr().out
        assert not list(tmp_path.glob("*.csv"))


def test_the_device_run_model_has_its_heads_and_rope_id_planes():
    """The default GPU model: 8 heads of width 64 per layer (rope_id_lm's lab_config has 2), RoPE-ID rotating the 16
    fastest of 32 planes at wavelengths 8..128 tokens (n / 2 for n = 256); the derived widths follow the head count."""
    from analyses.p001_frayed.rope_id_sink import model_config
    from interp.lab import LabForCausalLM
    from interp.lab.model import lab_inv_freq

    cfg = model_config("rope-id", Namespace(train_length=256, d_model=512, layers=4, heads=8))
    assert (cfg.n_heads, cfg.proj_dim, cfg.head_dim, cfg.n_layers) == (8, 64, 64, 4)
    f = lab_inv_freq(cfg)
    rotated = f[f > 0]
    assert len(f) == 32 and len(rotated) == 16
    np.testing.assert_allclose(sorted((2 * np.pi / rotated).tolist())[::15], [8.0, 128.0], rtol=1e-5)
    q = LabForCausalLM(cfg).model.layers[0].self_attn.q_proj
    assert q.weight.shape == (512, 512)
