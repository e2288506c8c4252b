"""Head interventions (``head_intervention``): each kind against a reference computed here from the captured q, k, v
and the output projection's weights, the model restored bit-identically, GQA siblings untouched, per-head RoPE
ablation of a whole layer equal to the layer-wide ``rope_intervention``, batch rows, every family of the
architecture matrix, and one clear error per bad argument."""

import pytest
import torch

from interp import load_model
from interp.errors import ConfigError, UnsupportedModelError
from interp.hooks.capture import capture
from interp.hooks.heads import head_intervention, head_means, output_projections
from interp.hooks.intervene import rope_intervention
from interp.models.arch import attention_modules
from interp.models.tiny import TINY
from interp.rope import PlaneAblation, band_planes
from tests.conftest import random_tokens

KINDS = ("zero", "mean", "streaming", "rope_band", "nope")


def _kw(kind, toks):
    return {"prompts": [toks]} if kind == "mean" else {"sink": 2, "window": 5} if kind == "streaming" else {}


def _attn_out(model, toks, layer):
    """``[pos, d_model]`` output of attention module ``layer`` (after its output projection), one forward."""
    got = {}
    h = attention_modules(model.hf)[layer].register_forward_hook(lambda m, a, o: got.__setitem__("o", o[0][0].detach().double()))
    try:
        with torch.no_grad():
            model.hf(toks[None], use_cache=False)
    finally:
        h.remove()
    return got["o"]


def _proj_in(model, toks, layer):
    """``[pos, head * d_head]`` input of the output projection of ``layer`` (what the heads hand it), one forward."""
    got = {}
    h = output_projections(model.hf)[layer].register_forward_hook(lambda m, a, o: got.__setitem__("x", a[0][0].detach().clone()))
    try:
        with torch.no_grad():
            model.hf(toks[None], use_cache=False)
    finally:
        h.remove()
    return got["x"]


def _reference_heads(model, toks, layer, sink=None, window=None):
    """``[pos, head, d_head]`` float64: every head's output at ``layer`` from the captured post-RoPE q, k, v, softmax
    materialised here with the model's scale, causal mask, sliding window and soft-cap; with ``sink``/``window`` the
    A-shape (keys < sink or i - j < window) is applied on top."""
    cap = capture(model, toks)
    c = model.card
    q, k, v = cap.q_rot[layer].double(), cap.k_rot[layer].double(), cap.v[layer].double()
    g = c.n_heads // c.n_kv_heads
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    logits = torch.einsum("ihd,jhd->hij", q, k) * c.attn_scale[layer]
    if c.softcap is not None:
        logits = c.softcap * torch.tanh(logits / c.softcap)
    n = toks.numel()
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    vis = j <= i
    if c.sliding_window[layer] is not None:
        vis &= (i - j) < c.sliding_window[layer]
    if sink is not None:
        vis &= (j < sink) | ((i - j) < window)
    p = torch.softmax(logits.masked_fill(~vis, float("-inf")), -1)
    return torch.einsum("hij,jhd->ihd", p, v)


def _w_head(model, layer, h):
    """``[d_model, d_head]`` columns of the output projection that read head ``h``."""
    d = model.card.d_head
    return output_projections(model.hf)[layer].weight.detach().double()[:, h * d:(h + 1) * d]


@pytest.mark.parametrize("kind", KINDS)
def test_exit_restores_the_model_bitwise(tiny, kind):
    toks = random_tokens(30, seed=1)
    impl = tiny.hf.config._attn_implementation
    with torch.no_grad():
        before = tiny.hf(toks[None]).logits
        with head_intervention(tiny, [(0, 1), (tiny.card.n_layers - 1, 2)], kind, **_kw(kind, toks)):
            during = tiny.hf(toks[None]).logits
        after = tiny.hf(toks[None]).logits
    assert (during - before).abs().max() > 1e-4  # it really ran differently
    assert torch.equal(after, before)
    assert tiny.hf.config._attn_implementation == impl
    mods = attention_modules(tiny.hf) + output_projections(tiny.hf)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in mods)


@pytest.mark.parametrize("kind", ["zero", "mean", "streaming"])
def test_layer_output_equals_the_hand_computed_change(tiny, kind):
    """At the intervened layer (its input is clean), the attention output changes by (new - old head output) times
    the head's columns of the output projection; new = 0, the mean over the prompts, or the A-shape attention."""
    toks = random_tokens(33, seed=2)
    other = random_tokens(33, seed=3)
    layer, h = tiny.card.n_layers - 1, 1
    clean = _reference_heads(tiny, toks, layer)
    if kind == "zero":
        new = torch.zeros_like(clean[:, h])
        kw = {}
    elif kind == "mean":
        new = ((_reference_heads(tiny, toks, layer)[:, h].sum(0) + _reference_heads(tiny, other, layer)[:, h].sum(0)) / 66).expand_as(clean[:, h])
        kw = {"prompts": [toks, other]}
    else:
        new = _reference_heads(tiny, toks, layer, sink=2, window=5)[:, h]
        kw = {"sink": 2, "window": 5}
    base = _attn_out(tiny, toks, layer)
    with head_intervention(tiny, [(layer, h)], kind, **kw):
        got = _attn_out(tiny, toks, layer)
    want = base + (new - clean[:, h]) @ _w_head(tiny, layer, h).T
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    assert (got - base).abs().max() > 1e-3


def test_head_means_equal_the_captured_head_outputs(tiny):
    prompts = [random_tokens(20, seed=s) for s in range(3)]
    got = head_means(tiny, prompts)
    for layer in range(tiny.card.n_layers):
        want = torch.stack([_reference_heads(tiny, p, layer) for p in prompts]).mean((0, 1))  # [head, d]
        torch.testing.assert_close(got[layer].double(), want, atol=2e-5, rtol=1e-5)


def test_streaming_with_a_window_covering_the_prompt_changes_nothing_and_window_1_returns_the_value(tiny_llama):
    toks = random_tokens(25, seed=4)
    with torch.no_grad():
        before = tiny_llama.hf(toks[None]).logits
        with head_intervention(tiny_llama, [(0, 0), (1, 3)], "streaming", sink=0, window=25):
            same = tiny_llama.hf(toks[None]).logits
    torch.testing.assert_close(same, before, atol=1e-5, rtol=1e-5)
    # sink 0, window 1: the query sees only itself, so the head's output is its own value vector
    v = capture(tiny_llama, toks).v[1]  # [pos, kv_head, d]
    with head_intervention(tiny_llama, [(1, 3)], "streaming", sink=0, window=1):
        x = _proj_in(tiny_llama, toks, 1)
    d = tiny_llama.card.d_head
    torch.testing.assert_close(x[:, 3 * d:4 * d], v[:, 3 // 2], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kind", ["streaming", "nope", "rope_band", "zero"])
def test_gqa_siblings_keep_their_outputs_bitwise(tiny_llama, kind):
    """tiny-llama: 4 query heads on 2 kv heads. Changing head 0 leaves head 1 (same kv head) and heads 2, 3 bit-identical."""
    toks = random_tokens(30, seed=5)
    d = tiny_llama.card.d_head
    base = _proj_in(tiny_llama, toks, 1)
    with head_intervention(tiny_llama, [(1, 0)], kind, **_kw(kind, toks)):
        got = _proj_in(tiny_llama, toks, 1)
    assert torch.equal(got[:, d:], base[:, d:])
    assert (got[:, :d] - base[:, :d]).abs().max() > 1e-3


@pytest.mark.parametrize("kind,band", [("nope", None), ("rope_band", "high"), ("rope_band", "low")])
def test_every_head_of_a_layer_equals_the_layer_wide_rope_intervention(tiny, kind, band):
    """Two code paths: per-head unrotation in the attention function vs the layer's replaced cos/sin tables."""
    toks = random_tokens(31, seed=6)
    c = tiny.card
    n = c.n_rotary_planes
    planes = tuple(range(n)) if kind == "nope" else tuple(band_planes(n, band, 6).tolist())
    layer = c.n_layers - 1
    heads = [(layer, h) for h in range(c.n_heads)]
    with torch.no_grad():
        with rope_intervention(tiny, PlaneAblation("x", planes), layers=[layer]):
            want = tiny.hf(toks[None]).logits
        with head_intervention(tiny, heads, kind, **({"band": band} if band else {})):
            got = tiny.hf(toks[None]).logits
        # one head of a layer: its slice equals the layer-wide variant's, the rest is clean
        with rope_intervention(tiny, PlaneAblation("x", planes), layers=[layer]):
            ref = _proj_in(tiny, toks, layer)
        with head_intervention(tiny, [(layer, 1)], kind, **({"band": band} if band else {})):
            one = _proj_in(tiny, toks, layer)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    d = c.d_head
    torch.testing.assert_close(one[:, d:2 * d], ref[:, d:2 * d], atol=2e-5, rtol=1e-5)
    assert torch.equal(one[:, :d], _proj_in(tiny, toks, layer)[:, :d])


@pytest.mark.parametrize("kind", ["zero", "streaming", "nope"])
def test_rows_change_only_their_batch_rows(tiny, kind):
    toks = torch.stack([random_tokens(24, seed=s) for s in range(3)])
    with torch.no_grad():
        clean = tiny.hf(toks).logits
        with head_intervention(tiny, [(0, 1)], kind, **_kw(kind, toks[0])):
            alone = tiny.hf(toks[1:2]).logits
        with head_intervention(tiny, [(0, 1), (0, 2)], kind, rows=[[1], slice(2, 3)], **_kw(kind, toks[0])):
            mixed = tiny.hf(toks).logits
        with head_intervention(tiny, [(0, 2)], kind, **_kw(kind, toks[0])):
            two = tiny.hf(toks[2:3]).logits
    torch.testing.assert_close(mixed[0], clean[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mixed[1], alone[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mixed[2], two[0], atol=1e-5, rtol=1e-5)


def test_nested_interventions_add_up_and_unwind(tiny_gemma):
    toks = random_tokens(26, seed=7)
    with torch.no_grad():
        before = tiny_gemma.hf(toks[None]).logits
        with head_intervention(tiny_gemma, [(1, 2)], "nope"):
            inner_only = tiny_gemma.hf(toks[None]).logits
        with head_intervention(tiny_gemma, [(0, 0), (2, 1)], "streaming", sink=1, window=3):
            with head_intervention(tiny_gemma, [(1, 2)], "nope"), head_intervention(tiny_gemma, [(0, 3)], "zero"):
                both = tiny_gemma.hf(toks[None]).logits
            outer = tiny_gemma.hf(toks[None]).logits
        with head_intervention(tiny_gemma, [(0, 0), (2, 1)], "streaming", sink=1, window=3):
            again = tiny_gemma.hf(toks[None]).logits
        after = tiny_gemma.hf(toks[None]).logits
    assert torch.equal(outer, again)
    assert not torch.allclose(both, outer, atol=1e-4) and not torch.allclose(both, inner_only, atol=1e-4)
    assert torch.equal(after, before)


@pytest.fixture(scope="module", params=list(TINY))
def any_family(request):
    return load_model(request.param, device="cpu")


def test_every_family_of_the_matrix(any_family):
    """Zero equals the hand-computed change (head h = channels h*d..(h+1)*d of the output projection's input in every
    family's layout); every kind restores the model; GPT-J (no attention interface) refuses the attention-level kinds."""
    m = any_family
    toks = random_tokens(28, seed=8)
    layer, h = m.card.n_layers - 1, m.card.n_heads - 1
    clean = _reference_heads(m, toks, layer)
    base = _attn_out(m, toks, layer)
    with head_intervention(m, [(layer, h)], "zero"):
        got = _attn_out(m, toks, layer)
    torch.testing.assert_close(got, base - clean[:, h] @ _w_head(m, layer, h).T, atol=3e-5, rtol=1e-5)
    with torch.no_grad():
        before = m.hf(toks[None]).logits
    for kind in KINDS:
        if m.card.family == "GPT-J" and kind not in ("zero", "mean"):
            with pytest.raises(UnsupportedModelError, match="AttentionInterface"):
                with head_intervention(m, [(0, 0)], kind):
                    pass
            continue
        if kind == "rope_band" and m.card.n_rotary_planes < 3:  # GPT-NeoX, StableLM here: 2 rotating planes
            with pytest.raises(ConfigError, match="needs at least 3"):
                with head_intervention(m, [(0, 0)], kind):
                    pass
            continue
        with torch.no_grad(), head_intervention(m, [(0, 0), (layer, h)], kind, **_kw(kind, toks)):
            during = m.hf(toks[None]).logits
        assert (during - before).abs().max() > 1e-5, kind
    with torch.no_grad():
        assert torch.equal(m.hf(toks[None]).logits, before)
    if m.card.family != "GPT-J":  # streaming against the materialised A-shape, sliding windows and soft-caps included
        new = _reference_heads(m, toks, layer, sink=2, window=5)[:, h]
        with head_intervention(m, [(layer, h)], "streaming", sink=2, window=5):
            got = _attn_out(m, toks, layer)
        torch.testing.assert_close(got, base + (new - clean[:, h]) @ _w_head(m, layer, h).T, atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("args,kw,match", [
    ([(0, 0)], {"kind": "drop"}, "unknown head intervention 'drop'; use one of zero, mean"),
    ([], {"kind": "zero"}, "no heads given"),
    ([(2, 0)], {"kind": "zero"}, "head 2:0 is outside the model's grid: layers 0..1, heads 0..3"),
    ([(0, 4)], {"kind": "zero"}, "head 0:4 is outside"),
    ([(0, 0)], {"kind": "streaming", "window": 0}, "window must be >= 1"),
    ([(0, 0)], {"kind": "streaming", "sink": -1}, "sink must be >= 0"),
    ([(0, 0)], {"kind": "rope_band", "band": "mid"}, "unknown band 'mid'"),
    ([(0, 0)], {"kind": "mean"}, "needs the reference means"),
    ([(0, 0)], {"kind": "mean", "means": torch.zeros(2, 4, 3)}, r"means must have shape"),
    ([(0, 0)], {"kind": "zero", "rows": [[0], [1]]}, "one entry per head"),
])
def test_bad_arguments_are_one_clear_error(tiny_llama, args, kw, match):
    kind = kw.pop("kind")
    with pytest.raises(ConfigError, match=match):
        with head_intervention(tiny_llama, args, kind, **kw):
            pass


def test_a_scan_inside_an_attention_level_intervention_is_refused_and_zero_reaches_it(tiny_llama):
    """interp.scan's engine computes attention itself: a streaming edit would silently not run, so it raises; the
    output-projection hooks of zero do reach the scan's forward (layer 1's input changes, so do its statistics)."""
    from interp.engine import ScanConfig, scan

    toks = random_tokens(30, seed=9)
    with head_intervention(tiny_llama, [(0, 1)], "streaming", sink=1, window=2):
        with pytest.raises(ConfigError, match="did not run"):
            scan(tiny_llama, [toks], ScanConfig())
        with torch.no_grad():  # and the block still works for plain forwards afterwards
            tiny_llama.hf(toks[None])
    base = scan(tiny_llama, [toks], ScanConfig())
    with head_intervention(tiny_llama, [(0, 1)], "zero"):
        zeroed = scan(tiny_llama, [toks], ScanConfig())
    torch.testing.assert_close(zeroed.scores[0], base.scores[0], atol=0, rtol=0, equal_nan=True)  # lags beyond the prompt: NaN
    ok = ~base.scores[1].isnan()
    assert (zeroed.scores[1][ok] - base.scores[1][ok]).abs().max() > 1e-6


def test_capture_inside_streaming_sees_the_changed_head(tiny_gemma):
    """capture() without patterns calls the model's attention function: the values it records are the layer's inputs,
    and the next layer's queries change because the streamed head's output did."""
    toks = random_tokens(30, seed=10)
    base = capture(tiny_gemma, toks)
    with head_intervention(tiny_gemma, [(0, 2)], "streaming", sink=1, window=2):
        got = capture(tiny_gemma, toks)
    assert torch.equal(got.q_rot[0], base.q_rot[0]) and not torch.allclose(got.q_rot[1], base.q_rot[1], atol=1e-5)


@pytest.mark.parametrize("pe", ["rope", "alibi"])
def test_lab_models_plugin_family(pe):
    """interp.lab's decoder (a registered plugin family): zero equals the hand-computed change, with ALiBi's two extra
    call channels dropped before the output projection (head slices are d_model / n_heads wide there); the attention
    kinds run (on ALiBi, which rotates nothing, rope_band and nope leave the model as it is) and every kind restores
    the model."""
    from interp.lab.loaded import lab_loaded
    from interp.lab.model import LabConfig, LabForCausalLM
    from interp.lab.vocab import Vocab

    torch.manual_seed(0)
    vocab = Vocab([f"s{i}" for i in range(20)])
    hf = LabForCausalLM(LabConfig(vocab_size=23, n_layers=2, n_heads=4, d_model=32, d_mlp=64, pe=pe, initializer_range=0.3))
    m = lab_loaded(hf, vocab)
    toks = torch.randint(3, 23, (24,), generator=torch.Generator().manual_seed(1))
    layer, h, w = 1, 2, 32 // 4
    x = _proj_in(m, toks, layer)
    base = _attn_out(m, toks, layer)
    with head_intervention(m, [(layer, h)], "zero"):
        got = _attn_out(m, toks, layer)
    W = output_projections(m.hf)[layer].weight.detach().double()[:, h * w:(h + 1) * w]
    torch.testing.assert_close(got, base - x[:, h * w:(h + 1) * w].double() @ W.T, atol=2e-5, rtol=1e-5)
    with torch.no_grad():
        before = m.hf(toks[None]).logits
        for kind in KINDS:
            with head_intervention(m, [(layer, h)], kind, **_kw(kind, toks)):
                during = m.hf(toks[None]).logits
            change = float((during - before).abs().max())
            if pe == "alibi" and kind in ("rope_band", "nope"):  # no rotation to undo: the same model up to rounding
                assert change < 1e-5, kind
            else:
                assert change > 1e-4, kind
        assert torch.equal(m.hf(toks[None]).logits, before)
