"""PCA snapshot (paper 001 Fig. 3) against numpy: uncentred SVD plane, projections, stable ranks."""

import numpy as np
import pytest
import torch

import interp
from interp.hooks.capture import Capture
from interp.errors import ConfigError, ShapeError
from interp.experiments import projection
from tests.conftest import random_tokens


def _numpy_plane(x: np.ndarray) -> np.ndarray:
    """Top two right singular vectors of x (no centring), rows."""
    return np.linalg.svd(x, full_matrices=False)[2][:2]


def _srank(x: np.ndarray) -> float:
    s = np.linalg.svd(x, compute_uv=False)
    return float((s**2).sum() / s[0] ** 2)


@pytest.fixture(scope="module")
def llama_caps():
    torch.set_num_threads(1)
    m = interp.load_model("tiny-llama", device="cpu")
    return m, interp.capture(m, random_tokens(48, seed=1)), interp.capture(m, random_tokens(96, seed=2))


def test_snapshot_matches_numpy_svd_and_stable_rank(llama_caps):
    m, short, long = llama_caps
    g = m.card.group_size
    layer, kv = 1, 1
    snap = projection.pca_snapshot(short, layer, kv, long)
    assert snap.heads == list(range(kv * g, (kv + 1) * g))
    assert [(p.rope, p.n) for p in snap.panels] == [(False, 48), (True, 48), (False, 96), (True, 96)]

    k = short.k_pre[layer][:, kv].double().numpy()
    q = short.q_pre[layer][:, snap.heads].double().numpy()  # [pos, group, d]
    qs = np.concatenate([q[:, j] for j in range(g)])  # head-major
    fit = np.concatenate([k, qs])
    plane = _numpy_plane(fit)
    # the plane: same subspace and, after fixing signs, the same vectors
    signs = np.sign((snap.components * plane).sum(1))
    np.testing.assert_allclose(snap.components * signs[:, None], plane, atol=1e-6)
    np.testing.assert_allclose(snap.singular_values, np.linalg.svd(fit, compute_uv=False)[:2], rtol=1e-6)
    # no centring: the fitted coordinates are x @ plane.T, and the clusters' mean is not at the origin
    for p, cap in zip(snap.panels, (short, short, long, long)):
        kk = (cap.k_rot if p.rope else cap.k_pre)[layer][:, kv].double().numpy()
        qq = (cap.q_rot if p.rope else cap.q_pre)[layer][:, snap.heads].double().numpy()
        qq = np.concatenate([qq[:, j] for j in range(g)])
        np.testing.assert_allclose(p.keys * signs, kk @ plane.T, atol=1e-5)
        np.testing.assert_allclose(p.queries * signs, qq @ plane.T, atol=1e-5)
        assert p.query_head.tolist() == np.repeat(snap.heads, cap.tokens.numel()).tolist()
        assert p.srank_k == pytest.approx(_srank(kk), rel=1e-5)
        assert p.srank_q == pytest.approx(_srank(qq), rel=1e-5)
        assert p.srank_all == pytest.approx(_srank(np.concatenate([kk, qq])), rel=1e-5)
    tab = snap.table()
    assert list(tab["panel"]) == ["pre-RoPE, n = 48", "post-RoPE, n = 48", "pre-RoPE, n = 96", "post-RoPE, n = 96"]
    assert tab["srank_k"].tolist() == [p.srank_k for p in snap.panels]


def test_uncentred_differs_from_centred_pca_on_an_offset_cloud():
    """A cloud far from the origin: the uncentred plane contains the offset direction, centred PCA would not."""
    g = np.random.default_rng(0)
    d = 8
    offset = np.zeros(d)
    offset[3] = 10.0
    x = offset + 0.1 * g.standard_normal((200, d))
    x[:, 0] *= 5  # the largest spread is along channel 0
    svd = projection.fit_projection(torch.tensor(x))
    assert abs(svd.components_[0, 3]) > 0.99  # first uncentred component: the offset
    centred = np.linalg.svd(x - x.mean(0), full_matrices=False)[2][0]
    assert abs(centred[0]) > 0.99


def test_shapes_and_errors(llama_caps):
    m, short, _ = llama_caps
    k, q, heads = projection.group_points(short, 0, 0, rope=True)
    assert k.shape == (48, m.card.d_head) and q.shape == (48, m.card.group_size, m.card.d_head)
    with pytest.raises(ConfigError):
        projection.group_points(short, 5, 0, rope=False)
    with pytest.raises(ConfigError):
        projection.group_points(short, 0, m.card.n_kv_heads, rope=False)
    with pytest.raises(ShapeError):
        projection.fit_projection(torch.zeros(10, 2))
    bad = Capture(tokens=short.tokens, q_pre=[torch.zeros(4, 3, 8)], k_pre=[torch.zeros(4, 2, 8)],
                  q_rot=[torch.zeros(4, 3, 8)], k_rot=[torch.zeros(4, 2, 8)])
    with pytest.raises(ShapeError):
        projection.group_points(bad, 0, 0, rope=False)


def test_mqa_model_groups_every_query_head():
    torch.set_num_threads(1)
    m = interp.load_model("tiny-gemma3", device="cpu")
    cap = interp.capture(m, random_tokens(40, seed=3))
    snap = projection.pca_snapshot(cap, 0, 0)
    assert snap.heads == list(range(m.card.n_heads)) and len(snap.panels) == 2
    assert snap.panels[1].queries.shape == (40 * m.card.n_heads, 2)


def test_figure_has_a_panel_per_view_titled_with_stable_ranks(llama_caps):
    from interp.report.geometry_figures import pca_snapshot_figure

    _, short, long = llama_caps
    snap = projection.pca_snapshot(short, 1, 0, long)
    fig = pca_snapshot_figure(snap, max_points=20)
    titles = [a.text for a in fig.layout.annotations]
    assert len(titles) == 4 and all("srank" in t for t in titles)
    assert f"{snap.panels[3].srank_k:.2f}" in titles[3]
    assert max(len(t.x) for t in fig.data) <= 20
