"""PCA snapshot of one kv head's keys and its query heads' queries (paper 001, Sec. 3.1.1, Fig. 3 and App. A.11).

Paper 001 projects the pre-RoPE key and query clouds of one kv head (keys) and its query heads (queries)
on a 2-D plane fitted at one length, then draws the *same* projection for the post-RoPE points and for a
longer input, to show that rotation frays the clusters, more so beyond the training length. Here:

- **Fit**: scikit-learn ``TruncatedSVD(n_components=2)`` on the stacked pre-RoPE points of the short
  prompt (the kv head's keys ``[pos, d_head]`` and every query of its query heads ``[pos * group, d_head]``).
  TruncatedSVD does *not* subtract the mean, so the plane passes through the origin and a cluster that sits
  away from the origin stays away from it ("uncentred PCA", the paper's "variance relative to origin").
  The plane is spanned by the top two right singular vectors of the stacked matrix ``X = [K; Q]``.
- **Reuse**: the fitted components (never refitted) project post-RoPE points of the short prompt and the
  pre- and post-RoPE points of the long prompt. Coordinates are ``x @ components.T`` (``TruncatedSVD.transform``).
- **Stable rank** of each panel's clouds in the full ``d_head`` space (not of the 2-D projection), with the
  project's definition ``srank(X) = ||X||_F^2 / ||X||_2^2 = 1 / r_1`` (``interp.measures.spectrum``; paper 001
  Sec. 3.1.2): for the keys, for the queries of all the group's heads stacked, and for keys and queries together.

Panels, in the paper's order ("in the first and third views, points form tight clusters"): pre-RoPE short,
post-RoPE short, pre-RoPE long, post-RoPE long (the last two only when a long capture is given).
Points come from ``interp.capture`` (``Capture.q_pre/k_pre/q_rot/k_rot``), one prompt per length; all
positions are kept (token 0, the sink, included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from sklearn.decomposition import TruncatedSVD

from interp.hooks.capture import Capture
from interp.errors import ConfigError, ShapeError
from interp.measures import spectrum

__all__ = ["PcaPanel", "PcaSnapshot", "group_points", "stable_rank", "fit_projection", "project", "pca_snapshot"]


@dataclass
class PcaPanel:
    """One panel of a PCA snapshot: the 2-D coordinates of a key cloud and its queries, and their stable ranks.

    Attributes:
        rope: False for pre-RoPE points, True for post-RoPE.
        n: prompt length (tokens).
        keys: ``[pos, 2]`` projected keys of the kv head (units of the model's key vectors).
        queries: ``[pos * group, 2]`` projected queries, query head by query head (head-major order).
        query_head: ``[pos * group]`` the query head (model index) of each row of ``queries``.
        srank_k, srank_q, srank_all: stable rank (dimensionless, between 1 and d_head) of the keys, of the
            group's queries stacked, and of keys and queries stacked, in the full d_head space.
    """

    rope: bool
    n: int
    keys: np.ndarray
    queries: np.ndarray
    query_head: np.ndarray
    srank_k: float
    srank_q: float
    srank_all: float

    @property
    def label(self) -> str:
        """``"pre-RoPE, n = 1024"`` / ``"post-RoPE, n = 8192"``."""
        return f"{'post' if self.rope else 'pre'}-RoPE, n = {self.n}"


@dataclass
class PcaSnapshot:
    """A PCA snapshot (paper 001, Fig. 3): one fitted projection and its panels.

    Attributes:
        layer, kv_head: the key head drawn; ``heads`` its query heads (``h // group == kv_head``).
        components: ``[2, d_head]`` the fitted plane (rows: top two right singular vectors of the stacked
            pre-RoPE points of the short prompt, scikit-learn's sign convention).
        singular_values: ``[2]`` the top two singular values of that stacked matrix.
        fit_n: length of the prompt the projection was fitted on.
        panels: pre-RoPE short, post-RoPE short, then (if a long prompt was given) pre-RoPE long, post-RoPE long.
    """

    layer: int
    kv_head: int
    heads: list[int]
    components: np.ndarray
    singular_values: np.ndarray
    fit_n: int
    panels: list[PcaPanel] = field(default_factory=list)

    def table(self) -> pd.DataFrame:
        """One row per panel: ``layer, kv_head, panel, rope, n, srank_k, srank_q, srank_all`` and the mean
        projected key / query coordinates ``k_pc1, k_pc2, q_pc1, q_pc2`` (cluster centres on the fitted plane)."""
        rows = []
        for p in self.panels:
            rows.append({"layer": self.layer, "kv_head": self.kv_head, "panel": p.label, "rope": p.rope, "n": p.n,
                         "srank_k": p.srank_k, "srank_q": p.srank_q, "srank_all": p.srank_all,
                         "k_pc1": float(p.keys[:, 0].mean()), "k_pc2": float(p.keys[:, 1].mean()),
                         "q_pc1": float(p.queries[:, 0].mean()), "q_pc2": float(p.queries[:, 1].mean())})
        return pd.DataFrame(rows)


def group_points(cap: Capture, layer: int, kv_head: int, rope: bool) -> tuple[
        Float[torch.Tensor, "pos d_head"], Float[torch.Tensor, "pos head d_head"], list[int]]:
    """Keys of ``kv_head`` and the queries of its query heads in ``layer`` of one capture.

    Args:
        cap: from ``interp.capture(model, tokens)``.
        layer, kv_head: which key head (query head h reads kv head ``h // (n_heads // n_kv_heads)``).
        rope: False for ``k_pre``/``q_pre``, True for ``k_rot``/``q_rot``.

    Returns:
        ``keys [pos, d_head]``, ``queries [pos, group, d_head]`` (float32) and the group's query head indices.

    Raises:
        ConfigError: layer or kv head out of range.
        ShapeError: the capture's query heads are not a multiple of its kv heads.
    """
    if not 0 <= layer < cap.n_layers:
        raise ConfigError(f"layer {layer} out of range: the capture has {cap.n_layers} layers")
    q = (cap.q_rot if rope else cap.q_pre)[layer]
    k = (cap.k_rot if rope else cap.k_pre)[layer]
    H, KV = q.shape[1], k.shape[1]
    if H % KV:
        raise ShapeError(f"layer {layer}: {H} query heads is not a multiple of {KV} kv heads")
    if not 0 <= kv_head < KV:
        raise ConfigError(f"kv_head {kv_head} out of range: layer {layer} has {KV} kv heads")
    g = H // KV
    heads = list(range(kv_head * g, (kv_head + 1) * g))
    return k[:, kv_head].float(), q[:, heads].float(), heads


def stable_rank(x: Float[torch.Tensor, "pos d_head"]) -> float:
    """``srank(X) = ||X||_F^2 / ||X||_2^2`` (paper 001, Sec. 3.1.2), via ``interp.measures.spectrum``.

    Not mean-centred; dimensionless, in ``[1, d_head]``. Computed from the Gram matrix ``X^T X`` (float64 eigenvalues).
    """
    return float(spectrum.spectrum_metrics(spectrum.gram(x[:, None, :]))["srank"][0])


def fit_projection(points: Float[torch.Tensor, "pos d_head"], seed: int = 0) -> TruncatedSVD:
    """Fit the uncentred 2-D projection: ``TruncatedSVD(n_components=2, algorithm="arpack")`` on ``points``.

    ARPACK gives the exact top two singular vectors (to its tolerance), so the plane does not depend on a
    randomised solver's iterations; ``seed`` fixes ARPACK's start vector.

    Raises:
        ShapeError: fewer than 3 channels (ARPACK needs n_components < d_head) or fewer than 2 points.
    """
    x = points.detach().double().cpu().numpy()
    if x.ndim != 2 or x.shape[1] < 3 or x.shape[0] < 2:
        raise ShapeError(f"expected points [pos >= 2, d_head >= 3]; got {tuple(x.shape)}")
    return TruncatedSVD(n_components=2, algorithm="arpack", random_state=seed).fit(x)


def project(svd: TruncatedSVD, points: Float[torch.Tensor, "pos d_head"]) -> np.ndarray:
    """``[pos, 2]`` coordinates ``points @ svd.components_.T`` on a fitted plane (no centring)."""
    return svd.transform(points.detach().double().cpu().numpy())


def _panel(svd: TruncatedSVD, cap: Capture, layer: int, kv_head: int, rope: bool) -> PcaPanel:
    k, q, heads = group_points(cap, layer, kv_head, rope)
    n, g, d = q.shape
    qs = q.transpose(0, 1).reshape(g * n, d)  # head-major: all positions of the first query head, then the next
    return PcaPanel(rope=rope, n=int(n), keys=project(svd, k), queries=project(svd, qs),
                    query_head=np.repeat(np.array(heads), n),
                    srank_k=stable_rank(k), srank_q=stable_rank(qs), srank_all=stable_rank(torch.cat([k, qs])))


def pca_snapshot(short: Capture, layer: int, kv_head: int, long: Capture | None = None, seed: int = 0) -> PcaSnapshot:
    """Paper 001 Fig. 3: fit an uncentred 2-D projection on pre-RoPE points of ``short``, reuse it for the rest.

    Args:
        short: capture of the prompt the projection is fitted on (paper: 4096 tokens, within training length).
        layer, kv_head: the key head (paper: layer 21, 3rd key head of Llama3-8B).
        long: optional capture of a longer prompt (paper: 65536 tokens), drawn with the same projection.
        seed: ARPACK start vector.

    Returns:
        ``PcaSnapshot`` with panels pre/post-RoPE at the short length, then pre/post-RoPE at the long one.

    Raises:
        ConfigError, ShapeError: see ``group_points``, ``fit_projection``; ShapeError if the two captures'
            layers have different head counts or d_head.
    """
    k, q, heads = group_points(short, layer, kv_head, rope=False)
    if long is not None:
        k2, q2, _ = group_points(long, layer, kv_head, rope=False)
        if q2.shape[1:] != q.shape[1:]:
            raise ShapeError(f"short and long captures differ at layer {layer}: {tuple(q.shape[1:])} vs {tuple(q2.shape[1:])}")
    svd = fit_projection(torch.cat([k, q.transpose(0, 1).reshape(-1, q.shape[-1])]), seed)
    snap = PcaSnapshot(layer=layer, kv_head=kv_head, heads=heads, components=svd.components_.copy(),
                       singular_values=svd.singular_values_.copy(), fit_n=int(k.shape[0]))
    for cap in (short, long):
        if cap is not None:
            snap.panels += [_panel(svd, cap, layer, kv_head, rope=False), _panel(svd, cap, layer, kv_head, rope=True)]
    return snap
