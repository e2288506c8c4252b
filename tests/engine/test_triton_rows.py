"""interp.engine.kernels.triton_rows: sampled rows' key-0 weight on Triton equals PyTorch's exact rows
(``interp.attention.key_weight_rows``) on every mask type, GQA/MQA, soft-cap, padded head widths and unsorted rows, and
a Triton scan's sampled pre-RoPE counterfactual equals the CPU kernel's. The interpreter runs the kernel on a CPU
(``TRITON_INTERPRET=1``, tests/conftest.py); on a GPU the per-shape choice is checked too."""

import pytest
import torch

from interp.attention import key_weight_rows, stratified_rows
from interp.engine import ScanConfig, kernels, scan
from interp.engine.kernels import triton_attention as ta
from interp.engine.kernels import triton_rows as tr
from interp.models import load_model

pytestmark = pytest.mark.skipif(not ta.available("cpu") and not ta.available("cuda"),
                                reason="Triton is not installed (pip install -e '.[gpu]') or cannot run here")
DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("N, H, KV, D, window, softcap", [
    (200, 4, 2, 16, None, None),  # GQA, full causal
    (150, 6, 3, 32, 40, None),  # sliding window: rows past it give key 0 nothing
    (97, 2, 1, 24, None, 30.0),  # MQA, soft-cap, d_head padded to 32 in the kernel
    (300, 4, 4, 16, 64, 20.0),  # window and soft-cap
])
def test_triton_rows_equal_pytorch_rows(N, H, KV, D, window, softcap):
    g = torch.Generator().manual_seed(N)
    q, k = (torch.randn(N, H, D, generator=g) * 2).to(DEV), (torch.randn(N, KV, D, generator=g) * 2).to(DEV)
    rows, _ = stratified_rows(N, 37, 1)
    shuffled = rows[torch.randperm(rows.numel(), generator=g)]
    for r in (rows, shuffled):
        ref = key_weight_rows(q, k, r.to(DEV), 0.3, window, softcap, rows_host=r)
        got = tr.triton_key_weight_rows(q, k, r.to(DEV), 0.3, window, softcap, rows_host=r, block=16)
        torch.testing.assert_close(got, ref, rtol=0, atol=5e-6)
    if window is not None:
        assert ref[:, r.to(DEV) >= window].abs().max() == 0


def test_triton_scan_with_sampled_counterfactual_rows_equals_the_cpu_kernel(monkeypatch):
    """16 sampled rows of 48-token prompts: the collector's Triton path, not the exact one (prompts <= the sample)."""
    calls, inner = [], tr.key_weight_rows
    monkeypatch.setattr(tr, "key_weight_rows", lambda *a, **kw: calls.append(1) or inner(*a, **kw))
    m = load_model("tiny-llama", device="cpu")
    toks = [torch.randint(0, 200, (48,), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    cfg = ScanConfig(counterfactual_queries=16)
    ref = scan(m, toks, cfg, engine="cpu-kernel" if kernels.available() else "python")
    got = scan(m.to(DEV), toks, cfg, engine="triton")
    m.to("cpu")
    torch.testing.assert_close(got.state["sink_norope"], ref.state["sink_norope"], rtol=1e-4, atol=1e-6)
    assert (ref.heads["sink_weight_norope"] > 0).all()
    assert len(calls) == 2 * m.card.n_layers  # once per layer and prompt


def test_an_unknown_forced_variant_is_refused(monkeypatch):
    monkeypatch.setenv("INTERP_ROWS", "fast")
    q = torch.randn(8, 2, 16)
    with pytest.raises(ValueError, match="INTERP_ROWS='fast' names no variant"):
        tr.key_weight_rows(q, q, torch.arange(4), 1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_cuda_choice_keeps_a_variant_that_agrees_with_pytorch():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4096, 8, 64, generator=g).cuda(), torch.randn(4096, 2, 64, generator=g).cuda()
    rows, _ = stratified_rows(4096, 256, 0)
    got = tr.key_weight_rows(q, k, rows.cuda(), 0.125, rows_host=rows)
    torch.testing.assert_close(got, key_weight_rows(q, k, rows.cuda(), 0.125, rows_host=rows), rtol=0, atol=tr.ROWS_TOL)
    picked = [c for name, c in tr.rows_choices().items() if name.startswith("pos<=4096 h8 kv2 d64 float32 rows 256")]
    assert picked and picked[0]["picked"] in tr.VARIANTS and picked[0]["picked"] in picked[0]["ms"]
