"""The pre-RoPE counterfactual sink weight: the stratified estimate is its definition, and exact when it covers the prompt."""

import pytest
import torch

import interp
from interp.attention import attention_pattern, stratified_rows
from interp.engine import ScanConfig, scan


@pytest.fixture(scope="module")
def tiny():
    return interp.load_model("tiny-llama", device="cpu")


def test_the_estimate_is_the_weighted_pattern_column_at_the_sampled_rows(tiny):
    """sink_weight_norope = sum_s w_s A_pre[h, row_s, 0] (rows and weights from ``stratified_rows`` seeded by the
    prompt index), with A_pre the materialised pre-RoPE pattern of captured q_pre / k_pre."""
    toks = torch.randint(0, 200, (100,), generator=torch.Generator().manual_seed(1))
    res = scan(tiny, [toks], ScanConfig(counterfactual_queries=16), prompt_ids=[7])
    cap = interp.capture(tiny, toks)
    rows, w = stratified_rows(100, 16, seed=7)
    heads = res.heads.set_index(["layer", "head"])["sink_weight_norope"]
    scale = tiny.card.d_head ** -0.5
    for layer in range(tiny.card.n_layers):
        A = attention_pattern(cap.q_pre[layer].float(), cap.k_pre[layer].float(), scale)
        want = A[:, rows, 0].double() @ w
        got = torch.tensor([heads[(layer, h)] for h in range(tiny.card.n_heads)], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_enough_rows_is_the_exact_mean(tiny):
    prompts = [torch.randint(0, 200, (n,), generator=torch.Generator().manual_seed(n)) for n in (40, 64)]
    exact = scan(tiny, prompts, ScanConfig(counterfactual_queries=0)).heads["sink_weight_norope"]
    sampled = scan(tiny, prompts, ScanConfig(counterfactual_queries=64)).heads["sink_weight_norope"]
    torch.testing.assert_close(torch.tensor(sampled.values), torch.tensor(exact.values), rtol=1e-5, atol=1e-6)


def test_a_bad_row_count_is_one_line():
    with pytest.raises(interp.errors.ConfigError, match="counterfactual_queries must be an integer >= 0"):
        ScanConfig(counterfactual_queries=-1)
