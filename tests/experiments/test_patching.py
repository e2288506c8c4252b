"""Activation and path patching (``interp.experiments.patching``): the fast path equals a plain one-hook-per-head loop
written here with torch hooks (tiny models and SmolLM2) and the naive loop; closed forms (clean == corrupt changes
nothing, handing over the whole residual stream recovers exactly 1, denoise and noise mirror each other, positions
before the first difference do nothing); attribution equals exact where the metric is linear in the head; path
patching equals a hand-computed two-step run."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interp.errors import ConfigError
from interp.experiments.patch_tasks import Pair, induction_pairs
from interp.experiments.path_patching import PATH_COLUMNS, path_patch
from interp.experiments.patching import (COLUMNS, POS_COLUMNS, PatchConfig, attribution_patch_heads, naive_patch_heads,
                                         patch_heads, patch_sites)
from interp.hooks.edit import cache, edit, replace
from interp.models import load_model
from interp.models.arch import attention_modules
from tests.conftest import load_script


def _pairs(model, n=4, half=5, seed=0):
    return induction_pairs(model.tokenizer, n, seed, half=half)


def _ld(model, ids, pair, hooks=()):
    """LD of one prompt under plain torch forward pre-hooks ``(module, fn)``, in float64."""
    handles = [m.register_forward_pre_hook(fn) for m, fn in hooks]
    try:
        with torch.no_grad():
            last = model.hf(torch.tensor([ids])).logits[0, -1].double()
    finally:
        for h in handles:
            h.remove()
    return float(last[pair.answer] - last[pair.wrong])


def hook_loop(model, pairs, heads, direction="denoise"):
    """The reference written without the intervention layer: ``[head, pair]`` patched LD and ``[pair]`` clean / corrupt
    LD, one full forward per head and pair with a pre-hook on the output projection that overwrites the head's slice."""
    projs = [a.o_proj for a in attention_modules(model.hf)]
    d = projs[0].in_features // model.card.n_heads
    out = np.zeros((len(heads), len(pairs)))
    clean, corrupt = np.zeros(len(pairs)), np.zeros(len(pairs))
    for p, pair in enumerate(pairs):
        base, src = (pair.corrupt, pair.clean) if direction == "denoise" else (pair.clean, pair.corrupt)
        seen = {}
        keep = [(m, lambda mod, args, l=l: seen.__setitem__(l, args[0].detach().clone())) for l, m in enumerate(projs)]
        s_ld = _ld(model, src, pair, keep)
        b_ld = _ld(model, base, pair)
        clean[p], corrupt[p] = (s_ld, b_ld) if direction == "denoise" else (b_ld, s_ld)
        for r, (l, h) in enumerate(heads):
            def put(mod, args, l=l, h=h):
                x = args[0].clone()
                x[..., h * d:(h + 1) * d] = seen[l][..., h * d:(h + 1) * d]
                return (x,)
            out[r, p] = _ld(model, base, pair, [(projs[l], put)])
    return out, clean, corrupt


def _grid(model):
    return [(l, h) for l in range(model.card.n_layers) for h in range(model.card.n_heads)]


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_fast_path_equals_a_plain_hook_per_head_loop(tiny, direction):
    pairs = _pairs(tiny)
    res = patch_heads(tiny, pairs, PatchConfig(direction=direction, bootstrap=0, batch_rows=5))
    ref, clean, corrupt = hook_loop(tiny, pairs, _grid(tiny), direction)
    assert list(res.table.columns) == list(COLUMNS) and (res.table["direction"] == direction).all()
    assert list(zip(res.table["layer"], res.table["head"])) == _grid(tiny)
    np.testing.assert_allclose(res.per_pair, ref, atol=1e-4, rtol=0)
    np.testing.assert_allclose(res.clean, clean, atol=1e-4)
    np.testing.assert_allclose(res.corrupt, corrupt, atol=1e-4)
    np.testing.assert_allclose(res.table["ld"], ref.mean(1), atol=1e-4)
    rec = (ref.mean(1) - corrupt.mean()) / (clean.mean() - corrupt.mean())
    np.testing.assert_allclose(res.table["recovered"], rec, atol=1e-3)
    assert np.abs(ref - (corrupt if direction == "denoise" else clean)).max() > 1e-3  # the patches do something


def test_fast_path_equals_the_naive_loop_per_position_and_for_nll(tiny_llama):
    pairs = _pairs(tiny_llama, n=3, half=4)
    for cfg in (PatchConfig(positions="each", bootstrap=50), PatchConfig(metric="nll", direction="noise", bootstrap=50)):
        fast, slow = patch_heads(tiny_llama, pairs, cfg), naive_patch_heads(tiny_llama, pairs, cfg)
        assert list(fast.table.columns) == list(POS_COLUMNS if cfg.positions == "each" else COLUMNS)
        pd.testing.assert_frame_equal(fast.table, slow.table, atol=1e-4, check_exact=False)
        np.testing.assert_allclose(fast.per_pair, slow.per_pair, atol=1e-4)
    # nll without answers: the clean prompt's last token, read one position earlier, in every run
    bare = [Pair(p.clean, p.corrupt, None, None, p.line) for p in pairs]
    res = patch_heads(tiny_llama, bare, PatchConfig(metric="nll", bootstrap=0, heads=((1, 0),)))
    with torch.no_grad():
        lp = torch.log_softmax(tiny_llama.hf(torch.tensor([pairs[0].corrupt])).logits[0, -2].double(), -1)
    assert res.corrupt[0] == pytest.approx(-float(lp[pairs[0].clean[-1]]), abs=1e-5)


def test_clean_equal_to_corrupt_changes_nothing(tiny_gemma):
    pairs = [Pair(p.clean, p.clean, p.answer, p.wrong, p.line) for p in _pairs(tiny_gemma)]
    for fn in (patch_heads, attribution_patch_heads):
        res = fn(tiny_gemma, pairs, PatchConfig(bootstrap=20))
        np.testing.assert_allclose(res.per_pair, np.broadcast_to(res.clean, res.per_pair.shape), atol=1e-5)
        assert res.table["recovered"].isna().all() and res.table["recovered_lo"].isna().all()
    paths = path_patch(tiny_gemma, pairs, [(0, 2)], PatchConfig(bootstrap=0))
    np.testing.assert_allclose(paths.per_pair, np.broadcast_to(paths.clean, paths.per_pair.shape), atol=1e-5)


def test_handing_over_the_residual_stream_recovers_exactly_one(tiny):
    pairs = _pairs(tiny)
    L = tiny.card.n_layers
    sites = [f"resid_pre[{l}]" for l in range(L)] + [f"resid_post[{L - 1}]"]
    for direction in ("denoise", "noise"):
        res = patch_sites(tiny, pairs, sites, PatchConfig(direction=direction, bootstrap=100))
        src = res.clean if direction == "denoise" else res.corrupt
        np.testing.assert_allclose(res.per_pair, np.broadcast_to(src, res.per_pair.shape), atol=1e-5)
        np.testing.assert_allclose(res.table["recovered"], 1.0 if direction == "denoise" else 0.0, atol=1e-5)
        np.testing.assert_allclose(res.table["recovered_lo"], res.table["recovered_hi"], atol=1e-5)


def test_denoise_and_noise_mirror_each_other(tiny_llama):
    """Denoising pair (A, B) runs B with A's head; noising (B, A) runs the same: equal LD, recovered r and 1 - r."""
    pairs = _pairs(tiny_llama)
    swapped = [Pair(p.corrupt, p.clean, p.answer, p.wrong, p.line) for p in pairs]
    d = patch_heads(tiny_llama, pairs, PatchConfig(direction="denoise", bootstrap=0))
    n = patch_heads(tiny_llama, swapped, PatchConfig(direction="noise", bootstrap=0))
    np.testing.assert_allclose(d.per_pair, n.per_pair, atol=1e-6)
    np.testing.assert_allclose(n.table["recovered"], 1 - d.table["recovered"], atol=1e-6)


def test_positions_before_the_first_difference_change_nothing():
    tiny_qwen2 = load_model("tiny-qwen2", device="cpu")
    half = 5
    pairs = _pairs(tiny_qwen2, n=3, half=half)
    first_diff = 1 + half  # BOS, r: shared
    res = patch_heads(tiny_qwen2, pairs, PatchConfig(positions="each", bootstrap=0))
    t = res.table
    early = t[t["pos"] < first_diff]
    assert len(early) == tiny_qwen2.card.n_layers * tiny_qwen2.card.n_heads * first_diff
    np.testing.assert_allclose(early["ld"], res.corrupt.mean(), atol=1e-5)
    assert t[t["pos"] >= first_diff]["ld"].sub(res.corrupt.mean()).abs().max() > 1e-3


@pytest.fixture(scope="module")
def linear_llama():
    """tiny-llama with the final norm an identity and the last layer's MLP silenced: LD is linear in the last
    layer's head outputs."""
    m = load_model("tiny-llama", device="cpu")
    m.hf.model.norm = torch.nn.Identity()
    with torch.no_grad():
        m.hf.model.layers[-1].mlp.down_proj.weight.zero_()
    return m


def test_attribution_equals_exact_where_the_metric_is_linear_in_the_head(linear_llama):
    """The patch's effect on LD (patched - corrupt), attributed vs exact: equal to float rounding (relative 1e-4) for
    the last layer's heads, where LD is linear in them; for layer 0's, whose output feeds layer 1's attention, the
    first-order estimate is off by more than that (3% here), so the check can tell the two apart."""
    pairs = _pairs(linear_llama)

    def rel_err(heads, positions):
        cfg = PatchConfig(heads=heads, positions=positions, bootstrap=0)
        exact, attr = patch_heads(linear_llama, pairs, cfg), attribution_patch_heads(linear_llama, pairs, cfg)
        de, da = exact.per_pair - exact.corrupt, attr.per_pair - attr.corrupt
        assert np.abs(de).max() > 1e-4  # the patches move LD
        return np.abs(de - da).max() / np.abs(de).max()

    H = linear_llama.card.n_heads
    last = tuple((linear_llama.card.n_layers - 1, h) for h in range(H))
    assert rel_err(last, "all") < 1e-4 and rel_err(last, "each") < 1e-4
    assert rel_err(tuple((0, h) for h in range(H)), "all") > 1e-3


def _two_step(model, pair, sender, receiver, via, direction="denoise"):
    """Path patching of one pair, by full forwards written out: step 1 with every head_out frozen at the base value
    but the sender's (source), recording the receiver's input; step 2 with only that input replaced."""
    L = model.card.n_layers
    base, src = (pair.corrupt, pair.clean) if direction == "denoise" else (pair.clean, pair.corrupt)
    names = [f"head_out[{l}]" for l in range(L)]
    with torch.no_grad():
        with cache(model, names) as zb:
            model.hf(torch.tensor([base]))
        with cache(model, names) as zs:
            model.hf(torch.tensor([src]))
        ls, hs = sender
        frozen = []
        for l in range(L):
            z = zb[f"head_out[{l}]"].clone()
            if l == ls:
                z[:, :, hs] = zs[f"head_out[{l}]"][:, :, hs]
            frozen.append(replace(("head_out", l), z))
        lr, hr = receiver
        site = {"q": "q_rot", "k": "k_rot", "v": "v"}[via]
        with edit(model, *frozen), cache(model, [f"{site}[{lr}]"]) as got:
            model.hf(torch.tensor([base]))
        x = got[f"{site}[{lr}]"]
        col = hr if via == "q" else hr // (model.card.n_heads // model.card.n_kv_heads)
        with edit(model, replace((site, lr), x[:, :, [col]], heads=[hr], per_query_head=via != "q")):
            last = model.hf(torch.tensor([base])).logits[0, -1].double()
    return float(last[pair.answer] - last[pair.wrong])


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_path_patching_equals_a_hand_computed_two_step_run(name):
    model = load_model(name, device="cpu")
    pairs = _pairs(model, n=2)
    receivers = ((1, 0), (1, 3), (model.card.n_layers - 1, 2))
    res = path_patch(model, pairs, [(0, 1)], PatchConfig(heads=receivers, bootstrap=0, batch_rows=4))
    assert list(res.table.columns) == list(PATH_COLUMNS) and len(res.table) == len(set(receivers)) * 3
    for r, row in enumerate(res.table.itertuples(index=False)):
        for p, pair in enumerate(pairs):
            want = _two_step(model, pair, (0, 1), (row.receiver_layer, row.receiver_head), row.via)
            assert res.per_pair[r, p] == pytest.approx(want, abs=1e-4)
    assert np.abs(res.per_pair - res.corrupt).max() > 1e-4
    rec = (res.per_pair.mean(1) - res.corrupt.mean()) / (res.clean.mean() - res.corrupt.mean())
    np.testing.assert_allclose(res.table["recovered"], rec, atol=1e-6)


def test_settings_and_pairs_are_checked(tiny_llama):
    pairs = _pairs(tiny_llama, n=2)
    for cfg, match in ((PatchConfig(direction="up"), "unknown --direction 'up'"), (PatchConfig(positions="some"), "--positions"),
                       (PatchConfig(metric="kl"), "unknown --metric 'kl'"), (PatchConfig(heads=((2, 0),)), "outside the model's grid"),
                       (PatchConfig(bootstrap=-1), "--bootstrap"), (PatchConfig(heads=()), "no heads given")):
        with pytest.raises(ConfigError, match=match):
            patch_heads(tiny_llama, pairs, cfg)
    with pytest.raises(ConfigError, match="needs answer and wrong tokens"):
        patch_heads(tiny_llama, [Pair(pairs[0].clean, pairs[0].corrupt, None, None, 7)])
    with pytest.raises(ConfigError, match="one template"):
        patch_heads(tiny_llama, pairs + _pairs(tiny_llama, n=1, half=3), PatchConfig(positions="each"))
    with pytest.raises(ConfigError, match="no receiver after the senders 1:0"):
        path_patch(tiny_llama, pairs, [(1, 0)])
    with pytest.raises(ConfigError, match="--positions all"):
        path_patch(tiny_llama, pairs, [(0, 0)], PatchConfig(positions="each"))
    with pytest.raises(ConfigError, match="no pairs"):
        patch_heads(tiny_llama, [])


def test_pairs_of_several_lengths_run_in_buckets(tiny_llama):
    pairs = _pairs(tiny_llama, n=2, half=4) + _pairs(tiny_llama, n=2, half=6, seed=1)
    res = patch_heads(tiny_llama, pairs, PatchConfig(bootstrap=0, heads=((0, 2), (1, 1))))
    ref, _, _ = hook_loop(tiny_llama, pairs, [(0, 2), (1, 1)])
    np.testing.assert_allclose(res.per_pair, ref, atol=1e-4)
    assert res.meta["tokens"] == [8, 12]


@pytest.mark.slow
def test_smollm2_fast_path_equals_a_plain_hook_loop_on_ioi(smollm2):
    from interp.experiments.patch_tasks import ioi_pairs

    pairs = ioi_pairs(smollm2.tokenizer, 4, seed=0)
    heads = [(0, 4), (9, 1), (14, 3), (29, 8)]
    res = patch_heads(smollm2, pairs, PatchConfig(heads=tuple(heads), bootstrap=0))
    ref, clean, corrupt = hook_loop(smollm2, pairs, heads)
    np.testing.assert_allclose(res.per_pair, ref, atol=1e-4, rtol=0)
    np.testing.assert_allclose(res.clean, clean, atol=1e-4)
