"""The architecture matrix: every covered family, as a tiny random model built from its config, is read exactly.

For each family: the card states pairing, rotary width and scaling; recomputed attention equals the
model's own eager attention per layer; pre-RoPE q/k equal the family's projections computed here from
its weights (independent of the taps' unrotation); the scan's statistics equal a materialised pattern;
``interp.models.arch.rope_specs`` reproduces the model's rotation.
"""

import pytest
import torch

from interp import load_model
from interp.models import arch
from interp.models.arch import rope_specs
from interp.hooks.capture import capture, verify_attention
from interp.errors import UnsupportedModelError
from interp.rope import rotate
from interp.engine import ScanConfig, scan
from interp.measures import slash
from interp.models.tiny import TINY
from tests.conftest import random_tokens
from tests.engine.test_scan import _reference

NAMES = list(TINY)

# family, pairing (with partial suffix), rotary_dim, d_head, rope_scaling, windows, softcap
EXPECTED = {
    "tiny-llama": ("Llama", "rotate_half", 16, 16, "default", [None, None], None),
    "tiny-gemma3": ("Gemma-3", "rotate_half", 32, 32, "default", [8, 8, None], None),
    "tiny-qwen2": ("Qwen2", "rotate_half", 16, 16, "default", [None, None], None),
    "tiny-llama3": ("Llama", "rotate_half", 16, 16, "llama3 (factor 8.0)", [None, None], None),
    "tiny-llama-linear": ("Llama", "rotate_half", 16, 16, "linear (factor 4.0)", [None, None], None),
    "tiny-llama-dynamic": ("Llama", "rotate_half", 16, 16, "dynamic (factor 2.0)", [None, None], None),
    "tiny-mistral": ("Mistral", "rotate_half", 16, 16, "default", [8, 8], None),
    "tiny-qwen3": ("Qwen3", "rotate_half", 16, 16, "default", [None, None], None),
    "tiny-gemma2": ("Gemma-2", "rotate_half", 16, 16, "default", [8, None, 8], 5.0),
    "tiny-phi3": ("Phi-3", "rotate_half:8", 8, 16, "default", [None, None], None),
    "tiny-neox": ("GPT-NeoX", "rotate_half:4", 4, 16, "default", [None, None], None),
    "tiny-stablelm": ("StableLM", "rotate_half:4", 4, 16, "default", [None, None], None),
    "tiny-olmo2": ("OLMo-2", "rotate_half", 16, 16, "default", [None, None], None),
    "tiny-cohere": ("Cohere", "interleaved", 16, 16, "default", [None, None], None),
    "tiny-gptj": ("GPT-J", "interleaved", 8, 16, "default", [None, None], None),
}


@pytest.fixture(scope="module", params=NAMES)
def model(request):
    return load_model(request.param, device="cpu")


def test_every_tiny_model_is_in_the_matrix():
    assert set(EXPECTED) == set(TINY)
    assert {e[0] for e in EXPECTED.values()} == {f.name for f in arch.BUILTIN_FAMILIES}


def test_card_states_pairing_rotary_width_and_scaling(model):
    fam, pairing, rot, d, scaling, windows, softcap = EXPECTED[model.card.name]
    c = model.card
    assert (c.family, c.pairing, c.rotary_dim, c.d_head, c.rope_scaling) == (fam, pairing, rot, d, scaling)
    assert c.sliding_window == windows and c.softcap == softcap and c.tested
    assert c.rotary_fraction == rot / d


def test_recomputed_attention_equals_the_models_eager_attention(model):
    df = verify_attention(model, random_tokens(40, seed=1), atol=1e-5)
    assert df.attrs["ok"], df


def _projections(attn, h: torch.Tensor, H: int, K: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-RoPE ``q [pos, head, d]``, ``k [pos, kv_head, d]`` of one layer from its input ``h [pos, d_model]``,
    written out per family from the modeling files (fused projections split, norms where each family applies them)."""
    n = h.shape[0]
    if hasattr(attn, "qkv_proj"):  # Phi-3: [q | k | v] along the output
        qkv = attn.qkv_proj(h)
        return qkv[:, : H * d].view(n, H, d), qkv[:, H * d : (H + K) * d].view(n, K, d)
    if hasattr(attn, "query_key_value"):  # GPT-NeoX: per head [q | k | v]
        q, k, _ = attn.query_key_value(h).view(n, H, 3 * d).chunk(3, dim=-1)
        return q, k
    q, k = attn.q_proj(h), attn.k_proj(h)
    if type(attn).__name__.startswith("Olmo2"):  # norm over the whole projection, then the head split
        return attn.q_norm(q).view(n, H, d), attn.k_norm(k).view(n, K, d)
    q, k = q.view(n, H, d), k.view(n, K, d)
    if hasattr(attn, "q_layernorm"):  # StableLM: per-head norms over [batch, head, pos, d]
        return (attn.q_layernorm(q.transpose(0, 1)[None])[0].transpose(0, 1),
                attn.k_layernorm(k.transpose(0, 1)[None])[0].transpose(0, 1))
    if hasattr(attn, "q_norm"):  # Qwen3, Gemma-3, Cohere: per head, on the last axis
        return attn.q_norm(q), attn.k_norm(k)
    return q, k


def _reference_pre(model, tokens):
    """Per layer pre-RoPE q/k from each attention module's input and its weights."""
    mods = arch.attention_modules(model.hf)
    c = model.card
    inputs = {}
    hooks = [m.register_forward_pre_hook(lambda mod, a, kw, i=i: inputs.__setitem__(i, (a[0] if a else kw["hidden_states"])[0]),
                                         with_kwargs=True) for i, m in enumerate(mods)]
    try:
        with torch.no_grad():
            model.hf.base_model(tokens[None], use_cache=False)
            return [_projections(m, inputs[i], c.n_heads, c.n_kv_heads, c.d_head) for i, m in enumerate(mods)]
    finally:
        for hk in hooks:
            hk.remove()


def test_pre_rope_vectors_equal_the_projections_from_the_weights(model):
    toks = random_tokens(33, seed=2)
    cap = capture(model, toks)
    for layer, (q, k) in enumerate(_reference_pre(model, toks)):
        torch.testing.assert_close(cap.q_pre[layer], q.float(), atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(cap.k_pre[layer], k.float(), atol=2e-5, rtol=1e-5)


def test_rope_specs_reproduce_the_models_rotation(model):
    """Rotating the pre-RoPE vectors with interp's RopeSpec (frequencies, pairing, partial width) gives the model's post-RoPE ones."""
    cap = capture(model, random_tokens(30, seed=3))
    pos = torch.arange(30)
    for layer, spec in enumerate(rope_specs(model.hf)):
        torch.testing.assert_close(rotate(cap.q_pre[layer], pos, spec), cap.q_rot[layer], atol=3e-5, rtol=1e-5)
        torch.testing.assert_close(rotate(cap.k_pre[layer], pos, spec), cap.k_rot[layer], atol=3e-5, rtol=1e-5)


def test_scan_statistics_equal_a_materialised_pattern(model):
    prompts = [random_tokens(37, seed=s) for s in range(2)]
    res = scan(model, prompts, ScanConfig(block_size=8, map_size=12))
    ref = _reference(model, prompts, 12)
    valid = 37 - slash.SKIP
    torch.testing.assert_close(res.scores[..., :valid], torch.stack(ref["slash"]).mean(0)[..., :valid], atol=1e-5, rtol=0)
    L, H = model.card.n_layers, model.card.n_heads
    h = res.heads
    torch.testing.assert_close(torch.tensor(h["sink_weight"].to_numpy()).view(L, H), torch.stack(ref["sink"]).mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(h["sink_weight_norope"].to_numpy()).view(L, H), torch.stack(ref["sink_pre"]).mean(0),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(res.maps(), torch.stack(ref["maps"]).mean(0).double(), atol=1e-5, rtol=0)


def test_dynamic_scaling_tables_follow_the_prompt_length():
    """Beyond the context, dynamic NTK RoPE changes its tables; pre-RoPE vectors still match the weights."""
    m = load_model("tiny-llama-dynamic", device="cpu")
    toks = random_tokens(600, seed=5)
    cap = capture(m, toks, beyond_context=True)
    spec = rope_specs(m.hf)[0]  # the module now holds the stretched frequencies
    assert spec.inv_freq[-1] < rope_specs(load_model("tiny-llama", device="cpu").hf)[0].inv_freq[-1]
    q, k = _reference_pre(m, toks)[1]
    torch.testing.assert_close(cap.q_pre[1], q, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(rotate(cap.k_pre[1], torch.arange(600), spec), cap.k_rot[1], atol=5e-5, rtol=1e-5)


def test_capture_agrees_with_transformer_lens_hooks(tiny):
    """Where TransformerLens' bridge has the hook points, its q/k before and after RoPE equal interp's capture."""
    toks = random_tokens(24, seed=6)
    cap = capture(tiny, toks)
    pre = ("hook_q_normed", "hook_k_normed") if tiny.card.qk_norm else ("hook_q", "hook_k")
    _, cache = tiny.bridge.run_with_cache(toks[None], names_filter=lambda n: n.rsplit(".", 1)[-1] in pre + ("hook_rot_q", "hook_rot_k"))
    for layer in range(tiny.card.n_layers):
        a = f"blocks.{layer}.attn."
        q_pre = cache[a + pre[0]][0]
        q_pre = q_pre.transpose(0, 1) if pre[0].endswith("_normed") else q_pre  # normed hooks are [head, pos, d]
        torch.testing.assert_close(cap.q_pre[layer], q_pre, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(cap.k_rot[layer], cache[a + "hook_rot_k"][0], atol=2e-5, rtol=1e-5)


def test_probed_pairing_agrees_with_the_table(model):
    probed = arch.probe_pairing(arch.attention_modules(model.hf)[0])
    if probed is not None:  # GPT-J names its function rotate_every_two
        assert probed == arch.family(model.hf).pairing


def test_a_model_without_rope_gets_a_clear_error():
    from transformers import GPT2Config, GPT2LMHeadModel

    hf = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(UnsupportedModelError, match="no rotary embedding"):
        arch.family(hf)


def test_the_scan_leaves_the_models_output_unchanged(model):
    from interp.engine.collector import Collector as _Collector, new_state
    from interp.models.taps import attention_taps

    toks = random_tokens(45, seed=7)[None]
    impl = model.hf.config._attn_implementation
    with torch.no_grad():
        ref = model.hf(toks).logits
        with attention_taps(model, _Collector(model.card, ScanConfig(block_size=16), new_state(model.card, 45, ScanConfig()))):
            got = model.hf(toks).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert model.hf.config._attn_implementation == impl  # restored
