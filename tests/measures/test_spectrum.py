"""r1, R_tau, stable rank, FSV ratio against numpy SVDs."""

import math

import numpy as np
import pytest
import torch

from interp.rope import RopeSpec, default_inv_freq, rotate
from interp.measures import spectrum


def _x(n=300, d=16, seed=0):
    g = np.random.default_rng(seed)
    u, _ = np.linalg.qr(g.standard_normal((n, d)))
    v, _ = np.linalg.qr(g.standard_normal((d, d)))
    s = np.geomspace(10, 0.01, d)
    return u @ np.diag(s) @ v.T, s


def test_r1_R_and_stable_rank_match_numpy_svd():
    x, s = _x()
    G = spectrum.gram(torch.tensor(x)[:, None, :])
    m = spectrum.spectrum_metrics(G, tau=0.95)
    sv = np.linalg.svd(x, compute_uv=False)
    r = sv**2 / (sv**2).sum()
    assert float(m["r1"][0]) == pytest.approx(r[0], rel=1e-5)
    assert int(m["R"][0]) == int(np.searchsorted(np.cumsum(r), 0.95) + 1)
    assert float(m["srank"][0]) == pytest.approx((sv**2).sum() / sv[0] ** 2, rel=1e-5)
    assert float(m["spec_norm"][0]) == pytest.approx(sv[0], rel=1e-5)


def test_fsv_ratio_and_lemma1_on_long_rank_one_input():
    """Paper 001, Lemma 1: for X = 1 v^T rotated by RoPE over many positions, ||R(X)||/||X|| -> max_k alpha_k / sqrt 2."""
    d, n = 16, 20000
    v = torch.zeros(d, dtype=torch.float64)
    v[0], v[8] = 3.0, 4.0  # all energy in plane 0 (rotate_half pairs 0 and 8): alpha_0 = 1
    x = v.expand(n, 1, d).clone()
    spec = RopeSpec(default_inv_freq(1e4, d))
    xr = rotate(x, torch.arange(n), spec)
    pre = spectrum.spectrum_metrics(spectrum.gram(x))["spec_norm"]
    rot = spectrum.spectrum_metrics(spectrum.gram(xr))["spec_norm"]
    ratio = float(rot / pre)
    direct = np.linalg.svd(xr[:, 0].numpy(), compute_uv=False)[0] / np.linalg.svd(x[:, 0].numpy(), compute_uv=False)[0]
    assert ratio == pytest.approx(direct, rel=1e-6)
    assert ratio == pytest.approx(1 / math.sqrt(2), abs=0.01)
    assert float(spectrum.fsv_prediction(spectrum.gram(x))[0]) == pytest.approx(1 / math.sqrt(2), rel=1e-6)


def test_fast_gram_is_the_plain_one_off_a_gpu():
    from interp.measures.spectrum import gram

    x = torch.randn(50, 3, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(gram(x, fast=True), gram(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_fast_gram_on_cuda_tensor_cores_is_close_to_float64():
    """bf16 inputs: exact products, float32 accumulation (float32's error); float32 inputs: TF32 (2^-11 per input)."""
    from interp.measures.spectrum import gram

    x = torch.randn(4096, 4, 64, generator=torch.Generator().manual_seed(0)).cuda()
    xb = x.to(torch.bfloat16)
    ref_b = torch.einsum("phd,phe->hde", xb.double(), xb.double())
    ref = torch.einsum("phd,phe->hde", x.double(), x.double())
    scale = lambda r: r.diagonal(dim1=-2, dim2=-1).sqrt()  # noqa: E731
    err = lambda g, r: ((g - r).abs() / (scale(r)[..., :, None] * scale(r)[..., None, :])).max()  # noqa: E731
    before = torch.backends.cuda.matmul.fp32_precision
    assert err(gram(xb, fast=True), ref_b) < 1e-5
    assert err(gram(x, fast=True), ref) < 2**-10
    assert torch.backends.cuda.matmul.fp32_precision == before  # TF32 only inside the Gram
