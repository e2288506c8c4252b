"""The intervention layer (``interp.hooks.edit`` on ``interp.hooks.sites``): every site reads what an independent
path computes (capture's taps, the model's hidden states, hand-registered hooks in this test), edits have their
closed-form effects, selections touch nothing else, the model is restored bitwise (also after an exception), bad
edits fail before anything is installed, and no code outside the layer touches a model."""

import re
from pathlib import Path

import pytest
import torch

from interp.errors import ConfigError
from interp.hooks.capture import capture
from interp.hooks.edit import Edit, apply, cache, edit, record, replace, scale, start_at, zero
from interp.hooks.sites import SITES, parse_site, site_map, sites_table
from tests.conftest import random_tokens

N = 20


def _logits(model, toks):
    with torch.no_grad():
        return model.hf(toks.to(model.device)[None] if toks.dim() == 1 else toks, use_cache=False).logits


def _all_sites(model):
    L = model.card.n_layers
    return [f"{n}[{l}]" for n in SITES if n != "logits" for l in range(L)] + ["logits"]


def test_sites_record_what_independent_paths_compute(tiny):
    """q/k before and after RoPE and v equal capture()'s (the engine's taps); resid_pre[0] is the embedding and each
    resid_pre the previous layer's resid_post; logits equal the forward's output; pattern equals the model's eager
    attention."""
    toks = random_tokens(N, seed=3)
    cap = capture(tiny, toks, patterns=True)
    with cache(tiny, _all_sites(tiny)) as c:
        logits = _logits(tiny, toks)
    # (output_hidden_states=True would leave transformers' own capture hooks on the shared fixture)
    with torch.no_grad():
        emb = tiny.hf.get_input_embeddings()(toks[None])
    assert torch.equal(c["resid_pre[0]"], emb)
    for l in range(tiny.card.n_layers):
        for name in ("q_pre", "k_pre", "q_rot", "k_rot", "v"):
            got = c[f"{name}[{l}]"][0].float()
            assert torch.allclose(got, getattr(cap, name)[l], atol=1e-5), (name, l)
        if l:
            assert torch.equal(c[f"resid_pre[{l}]"], c[f"resid_post[{l - 1}]"])
        assert torch.allclose(c[f"pattern[{l}]"][0], cap.patterns[l], atol=1e-5)
    assert torch.equal(c["logits"], logits)
    assert c["head_out[0]"].shape == (1, N, tiny.card.n_heads, site_map(tiny).head_width)


def test_residual_stream_adds_up(tiny_llama):
    """Llama's sequential residual: resid_post = resid_pre + attn_out + mlp_out, and resid_post[l] = resid_pre[l+1]."""
    toks = random_tokens(N, seed=4)
    with cache(tiny_llama, _all_sites(tiny_llama)) as c:
        _logits(tiny_llama, toks)
    for l in range(tiny_llama.card.n_layers):
        total = c[f"resid_pre[{l}]"] + c[f"attn_out[{l}]"] + c[f"mlp_out[{l}]"]
        assert torch.allclose(c[f"resid_post[{l}]"], total, atol=1e-6)
        if l + 1 < tiny_llama.card.n_layers:
            assert torch.equal(c[f"resid_post[{l}]"], c[f"resid_pre[{l + 1}]"])


def test_head_out_is_the_output_projection_input(tiny):
    toks = random_tokens(N, seed=5)
    sm = site_map(tiny)
    got = {}
    h = sm.out_proj[1].register_forward_pre_hook(lambda m, a: got.__setitem__("x", a[0].detach()))  # the test's own hook
    try:
        with cache(tiny, ["head_out[1]"]) as c:
            _logits(tiny, toks)
    finally:
        h.remove()
    assert torch.equal(c["head_out[1]"].flatten(-2), got["x"])


def test_restored_bitwise_after_every_site_and_after_an_exception(tiny):
    """Edits on every site, then logits equal the ones before, bit for bit; the same when the block raises."""
    toks = random_tokens(N, seed=6)
    before = _logits(tiny, toks)
    L = tiny.card.n_layers
    edits = [scale(f"{n}[{l}]", 0.5) for n in SITES if n not in ("logits", "rope", "scores", "pattern") for l in range(L)]
    edits += [apply(f"scores[{L - 1}]", lambda x, ctx: x * 0.5), apply(f"pattern[0]", lambda x, ctx: x.flip(-1)),
              apply("rope[0]", lambda c, s, ctx: (c, -s)), scale("logits", 2.0)]
    with edit(tiny, *edits):
        changed = _logits(tiny, toks)
    assert not torch.allclose(changed, before)
    assert torch.equal(_logits(tiny, toks), before)
    assert tiny.hf.config._attn_implementation != "interp_edit"
    with pytest.raises(RuntimeError, match="inside"):
        with edit(tiny, *edits):
            _logits(tiny, toks)
            raise RuntimeError("inside")
    assert torch.equal(_logits(tiny, toks), before)


def test_identity_edits_change_nothing(tiny):
    """Replacing q before RoPE by its own value (undone and redone with the model's tables) and recomputing a head's
    attention explicitly with an identity pattern edit both keep the logits (to float rounding)."""
    toks = random_tokens(N, seed=7)
    before = _logits(tiny, toks)
    with cache(tiny, ["q_pre[1]"]) as c:
        _logits(tiny, toks)
    with edit(tiny, replace("q_pre[1]", c["q_pre[1]"] + 0.0)):
        assert torch.allclose(_logits(tiny, toks), before, atol=1e-5)
    with edit(tiny, apply("pattern[1]", lambda x, ctx: x, heads=[0])):
        assert torch.allclose(_logits(tiny, toks), before, atol=1e-5)


def test_pattern_on_key_zero_outputs_value_zero(tiny):
    """A pattern edit that puts all weight on key 0: the head's output is its kv head's value at position 0, at every
    query (closed form); the other heads keep their outputs bit for bit."""
    toks = random_tokens(N, seed=8)
    sm = site_map(tiny)
    h = sm.n_heads - 1

    def on_first(x, _ctx):
        y = torch.zeros_like(x)
        y[..., 0] = 1.0
        return y

    with cache(tiny, ["head_out[0]", "v[0]"]) as base:
        _logits(tiny, toks)
    with edit(tiny, apply("pattern[0]", on_first, heads=[h])), cache(tiny, ["head_out[0]"]) as got:
        _logits(tiny, toks)
    v0 = base["v[0]"][0, 0, sm.kv_head(h)]
    if sm.head_width == sm.d_head:
        assert torch.allclose(got["head_out[0]"][0, :, h], v0.expand(N, -1), atol=1e-6)
    others = [i for i in range(sm.n_heads) if i != h]
    assert torch.equal(got["head_out[0]"][0, :, others], base["head_out[0]"][0, :, others])


def test_selections_touch_only_what_they_name(tiny):
    """positions: logits before the edited position are bitwise clean; rows: the other batch row is bitwise clean;
    per-query-head keys: the GQA siblings keep their outputs."""
    toks = random_tokens(N, seed=9)
    before = _logits(tiny, toks)
    with edit(tiny, zero("head_out[0]", heads=[0], positions=[7])):
        got = _logits(tiny, toks)
    assert torch.equal(got[:, :7], before[:, :7]) and not torch.allclose(got[:, 7:], before[:, 7:])
    two = toks[None].expand(2, -1)
    clean2 = _logits(tiny, two)
    with edit(tiny, zero("head_out[0]", rows=[1])):
        got = _logits(tiny, two)
    assert torch.equal(got[0], clean2[0]) and not torch.allclose(got[1], clean2[1])
    sm = site_map(tiny)
    if sm.n_heads > sm.n_kv_heads:
        with cache(tiny, ["head_out[0]"]) as base:
            _logits(tiny, toks)
        with edit(tiny, Edit("k_rot[0]", "scale", 0.0, heads=[0], per_query_head=True)), cache(tiny, ["head_out[0]"]) as c:
            _logits(tiny, toks)
        sib = [h for h in range(sm.n_heads) if h != 0]
        assert torch.equal(c["head_out[0]"][0, :, sib], base["head_out[0]"][0, :, sib])
        assert not torch.allclose(c["head_out[0]"][0, :, 0], base["head_out[0]"][0, :, 0])


def test_edits_nest_and_unwind(tiny_llama):
    toks = random_tokens(N, seed=10)
    before = _logits(tiny_llama, toks)
    with edit(tiny_llama, zero("head_out[0]", heads=[0])):
        one = _logits(tiny_llama, toks)
        with edit(tiny_llama, zero("head_out[0]", heads=[1]), apply("scores[1]", lambda x, c: x * 0.1)):
            both = _logits(tiny_llama, toks)
        assert torch.equal(_logits(tiny_llama, toks), one)
    with edit(tiny_llama, zero("head_out[0]", heads=[0, 1]), apply("scores[1]", lambda x, c: x * 0.1)):
        assert torch.equal(_logits(tiny_llama, toks), both)
    assert torch.equal(_logits(tiny_llama, toks), before)


def test_start_at_runs_the_rest_of_the_model(tiny):
    toks = random_tokens(N, seed=11)
    before = _logits(tiny, toks)
    l = tiny.card.n_layers - 1
    with cache(tiny, [f"resid_pre[{l}]"]) as c:
        _logits(tiny, toks)
    with torch.no_grad(), start_at(tiny, l):
        got = tiny.hf(inputs_embeds=c[f"resid_pre[{l}]"], use_cache=False).logits
    assert torch.allclose(got, before, atol=1e-5)
    assert torch.equal(_logits(tiny, toks), before)


@pytest.mark.parametrize("bad, match", [
    (zero("nonsense[0]"), "unknown site"),
    (zero("head_out[99]"), "layer outside"),
    (zero("head_out"), "needs a layer"),
    (zero("resid_pre[0]", heads=[0]), "no head axis"),
    (zero("head_out[0]", heads=[99]), "heads of head_out"),
    (Edit("head_out[0]", "replace"), "needs a value"),
    (Edit("head_out[0]", "explode", 1.0), "unknown edit operation"),
    (Edit("q_rot[0]", "zero", per_query_head=True), "per_query_head"),
])
def test_bad_edits_fail_before_anything_is_installed(tiny_llama, bad, match):
    toks = random_tokens(N, seed=12)
    before = _logits(tiny_llama, toks)
    with pytest.raises(ConfigError, match=match):
        with edit(tiny_llama, zero("head_out[1]"), bad):
            pass
    assert torch.equal(_logits(tiny_llama, toks), before)


def test_rows_beyond_the_batch_fail_at_the_forward(tiny_llama):
    with edit(tiny_llama, zero("head_out[0]", rows=[3])), pytest.raises(ConfigError, match="rows of head_out"):
        _logits(tiny_llama, random_tokens(N))


def test_scan_refuses_edits_it_cannot_honour(tiny_llama):
    from interp import ScanConfig, scan

    with edit(tiny_llama, apply("scores[0]", lambda x, c: x)), pytest.raises(ConfigError, match="did not run"):
        scan(tiny_llama, [random_tokens(N)], ScanConfig())


def test_site_names_parse_and_table():
    assert parse_site("head_out[3]") == parse_site("head_out.3") == parse_site(("head_out", 3))
    assert str(parse_site("logits")) == "logits"
    assert all(f"`{n}`" in sites_table() for n in SITES)


def test_no_model_is_touched_outside_the_intervention_layer():
    """Hook registration, sys.modules patching and attention-implementation switches live in interp/hooks/ only
    (the engine's taps and the loaders in interp/models/ may keep theirs)."""
    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"register_forward_(pre_)?hook|register_full_backward|register_module_forward|"
                         r"setattr\(sys\.modules|sys\.modules\[[^\]]+\]\.\w+\s*=|set_attn_implementation\(")
    allowed = {"interp/models/taps.py", "interp/models/loaders.py"}
    bad = []
    for folder in ("interp", "analyses"):
        for p in (root / folder).rglob("*.py"):
            rel = p.relative_to(root).as_posix()
            if rel.startswith("interp/hooks/") or rel in allowed:
                continue
            for i, line in enumerate(p.read_text().splitlines(), 1):
                if pattern.search(line) and "f\"" not in line and "call hf." not in line:
                    bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "model touched outside interp/hooks/:\n" + "\n".join(bad)


def test_edit_context_has_the_tokens_of_a_forward_through_the_decoder_body_alone(tiny):
    """``EditContext.tokens`` holds the forward's input ids whether the caller runs the whole model or only its decoder
    body (``hf.base_model(input_ids=...)``, e.g. for hidden states), and None from ``inputs_embeds``."""
    toks = random_tokens(N, seed=12)[None].to(tiny.device)
    seen = []
    with edit(tiny, record("rope[0]", lambda x, ctx: seen.append(ctx.tokens))), torch.no_grad():
        tiny.hf(toks, use_cache=False)
        tiny.hf.base_model(input_ids=toks, use_cache=False)
        tiny.hf.base_model(inputs_embeds=tiny.hf.get_input_embeddings()(toks), use_cache=False)
    assert len(seen) == 3 and torch.equal(seen[0], toks) and torch.equal(seen[1], toks) and seen[2] is None
