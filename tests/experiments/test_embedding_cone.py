"""Layer-0 embedding cone (paper 004 App. B) against direct numpy computations on tiny models and synthetic data."""

import numpy as np
import pytest
import torch

import interp
from interp.errors import InterpError, UnsupportedModelError
from interp.experiments import embedding_cone as ec


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2", "tiny-gemma3"])
def model(request):
    torch.set_num_threads(1)
    return interp.load_model(request.param, device="cpu")


def _r_R(x: np.ndarray, tau=0.95):
    s2 = np.linalg.svd(x, compute_uv=False) ** 2
    r = s2 / s2.sum()
    return r[0], int(np.searchsorted(np.cumsum(r), tau - 1e-12) + 1)


def _numpy_reference(m):
    """Every column, recomputed with numpy from the HF modules' raw tensors (no interp code)."""
    hf, c = m.hf, m.card
    layer = hf.model.layers[0]
    n = min(len(m.tokenizer), hf.model.embed_tokens.weight.shape[0])
    x = hf.model.embed_tokens.weight[:n].detach().double().numpy()
    if "gemma" in c.name:
        x = x * np.sqrt(c.d_model)  # Gemma3TextScaledWordEmbedding
    ln = layer.input_layernorm
    gain = ln.weight.detach().double().numpy()
    gain = 1 + gain if "gemma" in c.name else gain  # Gemma's RMSNorm multiplies by (1 + w)
    eps = ln.variance_epsilon if hasattr(ln, "variance_epsilon") else ln.eps
    h = x / np.sqrt((x**2).mean(1, keepdims=True) + eps) * gain
    attn = layer.self_attn
    Wq = attn.q_proj.weight.detach().double().numpy()  # [H * d_head, d]
    Wk = attn.k_proj.weight.detach().double().numpy()
    bq = None if attn.q_proj.bias is None else attn.q_proj.bias.detach().double().numpy()
    bk = None if attn.k_proj.bias is None else attn.k_proj.bias.detach().double().numpy()
    D = c.d_head
    out = {}
    for kind, W, b, nh in (("q", Wq, bq, c.n_heads), ("k", Wk, bk, c.n_kv_heads)):
        for j in range(nh):
            w = W[j * D:(j + 1) * D].T  # [d, d_head]: q = w^T h
            V, S, _ = np.linalg.svd(w, full_matrices=False)
            coef = h @ V * S
            tot = (coef**2).sum(1, keepdims=True)
            ps = -np.sort(-(coef**2)[tot[:, 0] > 0] / tot[tot[:, 0] > 0], 1)  # tokens with W^T h = 0 have no shares
            R_tok = np.array([np.searchsorted(np.cumsum(row), 0.95 - 1e-12) + 1 for row in ps])
            ls = int(np.argmax((coef**2).sum(0)))
            proj = h @ V[:, ls]
            bj = None if b is None else b[j * D:(j + 1) * D]
            qv = h @ w + (0 if bj is None else bj)
            out[kind, j] = {"r1_tilde": ps[:, 0].mean(), "R95_tilde": R_tok.mean(), "lstar": ls + 1,
                            "rv": proj.std() / abs(proj.mean()), "mean_w_h": np.linalg.norm(h @ w, axis=1).mean(),
                            "bias": np.nan if bj is None else np.linalg.norm(bj),
                            "r1": _r_R(qv)[0], "R95": _r_R(qv)[1],
                            "r1_w": S[0] ** 2 / (S**2).sum(), "R95_w": _r_R(w)[1]}
    return h, out


def test_every_column_matches_numpy(model):
    c = model.card
    tab = ec.embedding_cone_table(model)
    h_ref, ref = _numpy_reference(model)
    h = ec.normed_embeddings(model)
    np.testing.assert_allclose(h.double().numpy(), h_ref, rtol=1e-4, atol=1e-5)
    r1_h, R_h = _r_R(h_ref)
    assert len(tab) == c.n_heads and (tab["layer"] == 0).all() and (tab["n_tokens"] == len(h_ref)).all()
    assert tab["r1_h"].iloc[0] == pytest.approx(r1_h, rel=1e-4) and tab["R95_h"].iloc[0] == R_h
    for _, row in tab.iterrows():
        for kind, j in (("q", int(row["head"])), ("k", int(row["head"]) // c.group_size)):
            r = ref[kind, j]
            assert row["kv_head"] == int(row["head"]) // c.group_size
            assert row[f"r1_tilde_{kind}"] == pytest.approx(r["r1_tilde"], rel=1e-4)
            assert row[f"R95_tilde_{kind}"] == pytest.approx(r["R95_tilde"], abs=0.02)  # a token at the 0.95 edge may flip
            assert row[f"lstar_{kind}"] == r["lstar"]
            assert row[f"rv_{kind}"] == pytest.approx(r["rv"], rel=1e-3)
            assert row[f"mean_w{kind}_h"] == pytest.approx(r["mean_w_h"], rel=1e-4)
            assert row[f"r1_{kind}"] == pytest.approx(r["r1"], rel=1e-4) and row[f"R95_{kind}"] == r["R95"]
            assert row[f"r1_w{kind}"] == pytest.approx(r["r1_w"], rel=1e-6) and row[f"R95_w{kind}"] == r["R95_w"]
            if np.isnan(r["bias"]):
                assert np.isnan(row[f"bias_{kind}"]) and np.isnan(row[f"bias_ratio_{kind}"])
            else:
                assert row[f"bias_{kind}"] == pytest.approx(r["bias"], rel=1e-6)
                assert row[f"bias_ratio_{kind}"] == pytest.approx(r["bias"] / r["mean_w_h"], rel=1e-4)
            if not c.qk_norm:
                assert row[f"r1_{kind}_pre"] == row[f"r1_{kind}"]
    assert tab["bias_q"].notna().all() == c.qk_bias and tab["bias_k"].notna().all() == c.qk_bias


def test_qk_norm_columns_use_the_vectors_rope_rotates():
    """Gemma-3: ``r1_q_pre`` is r1 of q_norm(W_Q^T h), checked against the pre-RoPE queries a capture returns."""
    torch.set_num_threads(1)
    m = interp.load_model("tiny-gemma3", device="cpu")
    tab = ec.embedding_cone_table(m)
    # one prompt holding every token once: layer 0's pre-RoPE queries are per-token (no mixing before attention)
    n = int(tab["n_tokens"].iloc[0])
    cap = interp.capture(m, torch.arange(n))
    for hq in range(m.card.n_heads):
        r1, R = _r_R(cap.q_pre[0][:, hq].double().numpy())
        row = tab[tab["head"] == hq].iloc[0]
        assert row["r1_q_pre"] == pytest.approx(r1, rel=1e-4) and row["R95_q_pre"] == R
    r1, R = _r_R(cap.k_pre[0][:, 0].double().numpy())
    assert tab["r1_k_pre"].iloc[0] == pytest.approx(r1, rel=1e-4) and tab["R95_k_pre"].iloc[0] == R


def test_relative_variation_closed_form_on_a_synthetic_cone():
    """h = a * e_0 + noise on e_1 only: projections on e_0 are constant (RV 0); on (e_0 + e_1)/sqrt 2 RV = sigma / a."""
    n, d, a = 4000, 6, 3.0
    noise = np.where(np.arange(n) < n // 2, 0.5, -0.5)  # mean exactly 0, population std exactly 0.5
    h = np.zeros((n, d))
    h[:, 0], h[:, 1] = a, noise
    h = torch.tensor(h)
    assert ec.relative_variation(h, torch.eye(d, dtype=torch.float64)[0]) == pytest.approx(0.0, abs=1e-7)
    v = torch.tensor([1.0, 1.0, 0, 0, 0, 0]) * 7.0  # any scale
    assert ec.relative_variation(h, v) == pytest.approx(0.5 / a, rel=1e-6)
    assert ec.relative_variation(h, -v) == pytest.approx(0.5 / a, rel=1e-6)
    both = ec.relative_variation(h, torch.stack([v, torch.eye(d)[1] + 1e-3 * torch.eye(d)[0]]))
    # e_1 (+ a tiny e_0 part): mean 1e-3 * a, std 0.5 -> 0.5 / 3e-3
    assert both.tolist() == pytest.approx([0.5 / a, 0.5 / 3e-3], rel=1e-4)


def test_tilde_metrics_and_dominant_direction_by_hand():
    """W = diag(3, 2, 1) in the first 3 of 4 channels: powers (sigma_l v_l^T h)^2 computed by hand."""
    w = torch.zeros(4, 3, dtype=torch.float64)
    w[0, 0], w[1, 1], w[2, 2] = 3.0, 2.0, 1.0
    h = torch.tensor([[1.0, 0, 0, 5.0], [1.0, 1.0, 1.0, 0], [0, 0, 1.0, 0]], dtype=torch.float64)
    coef, S, V = ec.token_powers(h, w)
    assert S.tolist() == pytest.approx([3.0, 2.0, 1.0])
    np.testing.assert_allclose(coef.abs().numpy(), [[3, 0, 0], [3, 2, 1], [0, 0, 1]], atol=1e-6)
    r1, R = ec.tilde_r1_R(coef, 0.95)
    assert r1.tolist() == pytest.approx([1.0, 9 / 14, 1.0])
    assert R.tolist() == [1, 3, 1]  # 9/14 + 4/14 = 13/14 < 0.95
    assert ec.dominant_direction(coef) == 0  # 9 + 9 + 0 against 4 and 2


def test_bias_ratio_by_hand(monkeypatch):
    """Set a known bias on tiny-qwen2's layer 0: bias_k = its norm, ratio = norm / mean ||W_K^T h||."""
    torch.set_num_threads(1)
    m = interp.load_model("tiny-qwen2", device="cpu")
    k_proj = m.hf.model.layers[0].self_attn.k_proj
    b = torch.zeros_like(k_proj.bias)
    b[0], b[m.card.d_head + 1] = 3.0, 4.0  # kv head 0: norm 3; kv head 1: norm 4
    monkeypatch.setattr(k_proj, "bias", torch.nn.Parameter(b))
    tab = ec.embedding_cone_table(m)
    h = ec.normed_embeddings(m).double()
    for j, norm in ((0, 3.0), (1, 4.0)):
        w = k_proj.weight[j * m.card.d_head:(j + 1) * m.card.d_head].double()
        mean = float((h @ w.detach().T).norm(dim=1).mean())
        row = tab[tab["kv_head"] == j].iloc[0]
        assert row["bias_k"] == pytest.approx(norm)
        assert row["mean_wk_h"] == pytest.approx(mean, rel=1e-5)
        assert row["bias_ratio_k"] == pytest.approx(norm / mean, rel=1e-5)


def test_fused_projection_raises_a_one_line_interp_error():
    torch.set_num_threads(1)
    m = interp.load_model("tiny-phi3", device="cpu")
    with pytest.raises(UnsupportedModelError, match="q_proj/k_proj") as e:
        ec.layer0_weights(m)
    assert isinstance(e.value, InterpError) and "\n" not in str(e.value)


def test_figure_bars():
    from interp.report.geometry_figures import embedding_cone_figure

    torch.set_num_threads(1)
    tabs = [ec.embedding_cone_table(interp.load_model(n, device="cpu")) for n in ("tiny-llama", "tiny-qwen2")]
    import pandas as pd

    fig = embedding_cone_figure(pd.concat(tabs))
    names = [t.name for t in fig.data]
    assert names[:3] == ["RV(v_Q)", "RV(v_K)", "RV(v_rand)"] and "||b_K||" in names
    assert list(fig.data[0].x) == ["tiny-llama", "tiny-qwen2"]
    assert fig.data[0].y[0] == pytest.approx(100 * tabs[0]["rv_q"].mean())
    bk = next(t for t in fig.data if t.name == "||b_K||")
    assert list(bk.x) == ["tiny-qwen2"] and bk.y[0] == pytest.approx(tabs[1]["bias_k"].mean())
