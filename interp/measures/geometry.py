"""Geometry of the query and key clouds and the sink, as paper 001 plots it against context length.

Per prompt, per layer, with ``q`` ``[pos, head, d_head]`` and ``k`` ``[pos, kv_head, d_head]`` (query
head h reads kv head ``h // group``), each before (``pre``) and after (``rot``) RoPE:

- **Cluster separation** (001 Fig. 11, App. A): silhouette score and Davies-Bouldin index of the two
  clusters {q_i of head h} and {k_j of its kv head} (Euclidean), scikit-learn's definitions
  (``silhouette_score``, ``davies_bouldin_score``) computed for all heads of a layer in one batch of
  float32 matrix products on centred float64 coordinates (within 1e-6 of scikit-learn's float64 scores; tested) on a
  seeded subsample of ``cluster_points / 2`` positions of the prompt (default 200 queries + 200 keys, the same positions
  for q and k; all of them when the prompt is shorter; ``CLUSTER_POINTS`` says how far the subsample's score lies from
  the one over all positions). Lower silhouette / higher Davies-Bouldin = more overlap.
- **Key norm by position** (001 Fig. 5 left): ``||k_j||`` at every position j (RoPE keeps norms).
- **Attention received** (001 Fig. 5 right): the mean score of key j over the queries at and after it,
  ``r_j = (1 / (N - j)) sum_{i >= j} q_i . k_j`` (raw dot products, no scale), computed as
  ``(suffix sum of q) . k_j``. The paper normalises by the largest value over keys (``received_norm``).
- **Maximum q.k per query** (001 Fig. 6 right): ``m_i = max_{j visible from i} q_i . k_j`` (raw dot
  product, the model's causal and sliding-window visibility), averaged over a seeded sample of ``max_qk_queries``
  queries (default 500; the same permutation as the cluster scores' positions, which are among them) (exact per
  sampled query; an unbiased estimate of the mean over all queries at O(sample x pos) cost instead of O(pos^2)).

Every value is summed over prompts in float64 (state entries below), so scans merge by addition;
per-position entries are divided by the number of prompts that reach the position (from the
prompt lengths the scan records, ``meta["tokens"]``), the others by the prompt count.

State entries (``Geometry.entries``; ``L`` layers, ``H`` heads, ``K`` kv heads, ``N`` positions):
``geo_cluster [L, 4, H]`` (silhouette pre, rot; Davies-Bouldin pre, rot), ``geo_key_norm [L, K, N]``,
``geo_received_pre / _rot [L, H, N]``, ``geo_max_qk [L, 2, H]`` (pre, rot; per-prompt means).
"""

from __future__ import annotations

from typing import Sequence

import torch
from jaxtyping import Float

from interp.attention import _visible, check_qk
from interp.measures.base import Column, Entry, Measure, Option, kv_index





def sample_positions(n_pos: int, n_points: int, seed: int) -> torch.Tensor:
    """``[m]`` sorted positions, ``m = min(n_pos, n_points // 2)``, drawn without replacement with ``seed``."""
    m = min(n_pos, max(1, n_points // 2))
    g = torch.Generator().manual_seed(int(seed))
    return torch.randperm(n_pos, generator=g)[:m].sort().values


# pairs whose squared distance from the float32 expansion is below NEAR * (||x_i||^2 + ||y_j||^2) (centred coordinates)
# are recomputed in float64 as ||x_i - y_j||^2: there the expansion loses digits to cancellation (identical tokens
# give identical layer-0 queries), elsewhere its relative error is below ~1e-6 / NEAR
NEAR = 1e-2

# default points per head and prompt for the cluster scores: 200 queries + 200 keys at
# seeded positions. On SmolLM2 (1024-token pydoc prompt, every layer and head, pre and post RoPE) the silhouette of
# 200 + 200 points is within 0.015 of the one over all 1024 + 1024 (0.009 for 500 + 500, the default before issue 23,
# at about 5x the cost); tests/measures/test_geometry.py bounds it. It keeps the sweep's geometry within 1.5x a
# plain scan (figures/sweep_cost.csv).
CLUSTER_POINTS = 400


class _Cloud:
    """Points ``x [batch, m, d]`` (float64, centred by the caller) with the float32 factors of the distance expansion:
    ``(X @ Y^T)_ij = ||x_i||^2 + ||x_j||^2 - 2 x_i . x_j`` for ``X = [x, ||x||^2, 1]``, ``Y = [-2 x, 1, ||x||^2]``, so one
    matrix product gives the squared distances. ``sq`` holds the float64 ``||x_i||^2`` ``[batch, m]``, ``n2`` the
    float32 copy inside ``X``."""

    def __init__(self, x: torch.Tensor, parts=None):
        self.x = x
        if parts is None:
            B, m, d = x.shape
            self.sq = (x * x).sum(-1)
            X, Y = torch.empty(B, m, d + 2), torch.empty(B, m, d + 2)  # filled in place: no concatenation copies
            X[..., :d] = x  # rounds to float32, as x.float()
            torch.mul(X[..., :d], -2.0, out=Y[..., :d])  # exact in float32
            X[..., d], X[..., d + 1], Y[..., d], Y[..., d + 1] = self.sq, 1.0, 1.0, self.sq
            parts = (X, Y, X[..., d])
        self.X, self.Y, self.n2 = parts

    def __getitem__(self, s: slice) -> "_Cloud":
        return _Cloud(self.x[:, s], (self.X[:, s], self.Y[:, s], self.n2[:, s]))

    def __len__(self) -> int:
        return self.x.shape[1]


def _distances(a: _Cloud, b: _Cloud, same: bool = False) -> torch.Tensor:
    """``[batch, m, n]`` float32 Euclidean distances between the points of ``a`` and ``b`` (``same``: ``a is b``, zero diagonal).

    One float32 product for the squared distances (clipped at 0, as scikit-learn's ``euclidean_distances``); the
    few pairs with ``d^2 < NEAR (||x_i||^2 + ||y_j||^2)`` are recomputed in float64 from the differences. Only the rows
    i whose smallest ``d^2`` is below ``NEAR (||x_i||^2 + max_j ||y_j||^2)`` can hold such a pair, so only they are searched.
    """
    d2 = torch.bmm(a.X, b.Y.transpose(1, 2))
    if same:
        d2.diagonal(dim1=1, dim2=2).fill_(float("inf"))
    low = d2.amin(-1)  # [batch, m] row minima
    fb, i = (low < NEAR * (a.n2 + b.n2.amax(-1, keepdim=True))).nonzero(as_tuple=True)  # rows that may hold a near pair
    if len(fb):
        margin = (d2[fb, i] - NEAR * a.n2[fb, i][:, None]).sub_(NEAR * b.n2[fb])  # [row, n]
        r, j = (margin < 0).nonzero(as_tuple=True)
        if len(r):
            bi, ii = fb[r], i[r]
            d2[bi, ii, j] = (a.x[bi, ii] - b.x[bi, j]).square_().sum(-1).float()
    if same:
        d2.diagonal(dim1=1, dim2=2).zero_()
    if bool((low < 0).any()):
        d2.clamp_(min=0)
    return d2.sqrt_()


def _self_distance_sums(c: _Cloud, leaf: int = 256) -> torch.Tensor:
    """``[batch, m]`` float64: ``sum_j ||x_i - x_j||`` over the points of ``c``.

    Splits the points in halves and computes the cross block once for both halves (the distance matrix is
    symmetric), so about half the work of the full ``m x m`` matrix.
    """
    m = len(c)
    if m <= leaf:
        return _distances(c, c, True).sum(-1).double()
    a, b = c[: m // 2], c[m // 2 :]
    ab = _distances(a, b)
    return torch.cat([_self_distance_sums(a, leaf) + ab.sum(-1).double(), _self_distance_sums(b, leaf) + ab.sum(-2).double()], 1)


def cluster_scores(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"],
                   positions: torch.Tensor) -> Float[torch.Tensor, "2 head"]:
    """``[2, head]``: silhouette score and Davies-Bouldin index of {q_i} vs {k_i}, i in ``positions`` (float64).

    The definitions of scikit-learn's ``silhouette_score`` and ``davies_bouldin_score`` (Rousseeuw 1987; Davies and
    Bouldin 1979) for two clusters of ``m`` points, computed for all heads at once: with ``a_i`` the mean distance of
    point i to the other points of its cluster and ``b_i`` the mean distance to the other cluster,
    ``silhouette = mean_i (b_i - a_i) / max(a_i, b_i)`` over the 2m points; with ``S_c`` the mean distance of cluster
    c's points to its centroid ``c``, ``Davies-Bouldin = (S_q + S_k) / ||c_q - c_k||`` (0 when both spreads or the
    centroid distance vanish, as scikit-learn). NaN when fewer than 2 positions.

    Precision and cost: the pairwise distances of the silhouette come from one float32 matrix product per block, on
    coordinates centred in float64 (each cluster on its centroid, the q-k pairs on the midpoint of the two centroids),
    with near pairs recomputed in float64 (``NEAR``); their sums and everything else are float64. The silhouette equals
    scikit-learn's (float64) within 1e-6 and Davies-Bouldin to float64 rounding (``tests/measures/test_geometry.py``,
    on random clouds and on SmolLM2's queries and keys; ``analyses/benchmarks/sweep_cost.py --check``), at about a
    third of the float64 cost. The key-key distances of a kv head are computed once for its whole query group, and
    each symmetric within-cluster matrix only half (``_self_distance_sums``).

    Raises:
        ShapeError: q/k layouts do not match (``interp.attention.check_qk``).
    """
    check_qk(q, k)
    H, K = q.shape[1], k.shape[1]
    g, m = H // K, len(positions)
    out = torch.full((2, H), torch.nan, dtype=torch.float64)
    if m < 2:
        return out
    pts = torch.cat([q[positions.to(q.device)], k[positions.to(k.device)]], 1).double().transpose(0, 1)  # [head + kv_head, m, d]
    cen = pts.mean(1, keepdim=True)  # [head + kv_head, 1, d] centroids: queries' then keys'
    cloud = _Cloud(pts - cen)  # each cluster on its centroid, both clouds in one batch
    within = _self_distance_sums(cloud)  # [head + kv_head, m]
    a = torch.cat([within[:H], within[H:].repeat_interleave(g, dim=0)], 1) / (m - 1)
    c_q, c_k = cen[:H].view(K, g, 1, -1), cen[H:].view(K, 1, 1, -1)  # query heads grouped by the kv head they read
    mid = (c_q + c_k) / 2
    qs, ks = pts[:H].view(K, g, m, -1), pts[H:].view(K, 1, m, -1)
    d_qk = _distances(_Cloud((qs - mid).reshape(H, m, -1)), _Cloud((ks - mid).reshape(H, m, -1)))  # [head, m, m]
    b = torch.cat([d_qk.sum(-1), d_qk.sum(-2)], 1).double() / m
    out[0] = ((b - a) / torch.maximum(a, b)).nan_to_num(nan=0.0).mean(-1).cpu()
    spread = cloud.sq.sqrt().mean(-1)  # [head + kv_head]: mean distance to the centroid
    s_q, s_k = spread[:H], spread[H:].repeat_interleave(g)
    d_c = (c_q - c_k).view(H, -1).norm(dim=-1)
    close = lambda t: torch.isclose(t, torch.zeros_like(t))  # noqa: E731  (numpy's isclose defaults, as scikit-learn)
    db = (s_q + s_k) / d_c
    out[1] = torch.where((close(s_q) & close(s_k)) | close(d_c), torch.zeros_like(db), db).cpu()
    return out


def received(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"]) -> Float[torch.Tensor, "head pos"]:
    """``[head, pos]``: ``r_j = mean_{i >= j} q_i . k_j`` (001 Fig. 5 right, before normalising), float64."""
    check_qk(q, k)
    N, H, d = q.shape
    n_kv, g = k.shape[1], H // k.shape[1]
    f64 = {"dtype": torch.float64, "memory_format": torch.contiguous_format}
    # positions reversed and last (contiguous), so that a prefix sum along the last axis is the suffix sum over queries
    suffix = q.flip(0).permute(1, 2, 0).to(**f64).cumsum_(-1)  # [head, d_head, pos]: sum_{i >= j} q_i at column N-1-j
    k_rev = k.flip(0).permute(1, 2, 0).to(**f64)  # [kv_head, d_head, pos]
    dots = suffix.view(n_kv, g, d, N).mul_(k_rev[:, None]).sum(2).view(H, N).flip(-1)
    count = torch.arange(N, 0, -1, dtype=torch.float64, device=q.device)  # N - j queries at or after j
    return dots / count


def max_qk(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"],
           window: int | None = None, queries: torch.Tensor | None = None, block_size: int = 64) -> Float[torch.Tensor, "head query"]:
    """``[head, query]``: ``max_{j visible from i} q_i . k_j`` for each query i in ``queries`` (default: all, in order).

    Raw dot products in float32; the queries in increasing order, blocks of ``block_size`` against the keys the block
    sees, the causal / window mask applied only to the keys that not every query of the block sees.
    """
    check_qk(q, k)
    idx = torch.arange(q.shape[0]) if queries is None else queries.cpu()
    order = idx.argsort()
    srt = idx[order]
    res = _max_qk_sorted(q[srt.to(q.device)], srt, k, window, block_size)
    out = torch.empty_like(res)
    out[:, order.to(q.device)] = res
    return out


def _max_qk_sorted(qs: torch.Tensor, srt: torch.Tensor, k: torch.Tensor, window: int | None, block_size: int) -> torch.Tensor:
    """``max_qk`` of the query rows ``qs [query, head, d_head]`` at the increasing positions ``srt [query]`` (CPU):
    ``[head, query]`` float32, in the order of ``srt``."""
    H, dev = qs.shape[1], qs.device
    n_kv, g = k.shape[1], H // k.shape[1]
    kt = k.float().permute(1, 2, 0).contiguous()  # [kv, d, pos]: each block's keys a strided slice, no copy
    res = torch.empty(H, len(srt), dtype=torch.float32, device=dev)
    for b0 in range(0, len(srt), block_size):
        rows = srt[b0 : b0 + block_size]
        first, last = int(rows[0]), int(rows[-1]) + 1
        lo = 0 if window is None else max(0, first - window + 1)  # the lowest key the block sees
        lo_all = 0 if window is None else max(0, last - window)  # keys [lo_all, first] are seen by every row
        rd = rows.to(dev)
        qb = qs[b0 : b0 + block_size].float().permute(1, 0, 2).reshape(n_kv, g * len(rows), -1)  # query heads of a kv head side by side
        s = torch.matmul(qb, kt[:, :, lo:last]).view(H, len(rows), last - lo)
        a, b = max(lo_all, lo) - lo, first + 1 - lo  # columns of s seen by every row: [a, b)
        if a < b:
            best = s[..., a:b].amax(-1)
            for c0, c1 in ((0, a), (b, last - lo)):
                if c1 > c0:
                    vis = _visible(rd, torch.arange(lo + c0, lo + c1, device=dev), window)
                    best = torch.maximum(best, s[..., c0:c1].masked_fill_(~vis, float("-inf")).amax(-1))
        else:
            best = s.masked_fill_(~_visible(rd, torch.arange(lo, last, device=dev), window), float("-inf")).amax(-1)
        res[:, b0 : b0 + len(rows)] = best
    return res


def prompt_sums(q_pre, k_pre, q_rot, k_rot, window: int | None, n_points: int, seed: int,
                n_queries: int = 500) -> dict[str, torch.Tensor]:
    """One layer of one prompt: this module's additions, ``{name: tensor}`` without the layer axis.

    Cluster scores on ``sample_positions(pos, n_points, seed)``, max q.k on the queries ``sample_positions(pos,
    2 * n_queries, seed)`` (the same permutation: the cluster positions are among them). Pre- and post-RoPE go through
    ``cluster_scores`` and ``max_qk`` as one batch of ``2 * head`` heads (pre then rot, so query head h still reads kv
    head ``h // group``), with only the sampled query rows copied: the same per-head values as separate calls, at half
    the per-call overhead."""
    H, N = q_pre.shape[1], q_pre.shape[0]
    check_qk(q_pre, k_pre)
    pos = sample_positions(N, n_points, seed)
    qpos = sample_positions(N, 2 * n_queries, seed)  # increasing
    both = lambda x, y, at=None: torch.cat([x, y] if at is None else [x[at], y[at]], 1)  # noqa: E731  [.., 2 head, d_head]
    sil, db = cluster_scores(both(q_pre, q_rot, pos), both(k_pre, k_rot, pos), torch.arange(len(pos)))  # [2 head] each
    dev = q_pre.device
    mq = _max_qk_sorted(both(q_pre, q_rot, qpos.to(dev)), qpos, both(k_pre, k_rot), window, 64)  # [2 head, query]
    return {
        "geo_cluster": torch.stack([sil[:H], sil[H:], db[:H], db[H:]]),
        "geo_key_norm": k_pre.double().norm(dim=-1).T,
        "geo_received_pre": received(q_pre, k_pre), "geo_received_rot": received(q_rot, k_rot),
        "geo_max_qk": mq.double().mean(-1).view(2, H),
    }


def reach(tokens: Sequence[int], n_pos: int) -> torch.Tensor:
    """``[pos]``: how many of the prompts (lengths ``tokens``) reach each of ``n_pos`` positions."""
    return (torch.arange(n_pos)[None, :] < torch.tensor(list(tokens))[:, None]).sum(0).double()


def curves(state, tokens: Sequence[int]) -> dict[str, torch.Tensor]:
    """Per-position means over the prompts that reach each position: ``key_norm [L, K, N]``, ``received_pre/_rot [L, H, N]``
    (raw) and ``received_norm_pre/_rot`` (divided by each head's largest value over positions, as 001 Fig. 5 plots);
    positions no prompt reaches are NaN. ``tokens``: the scanned prompts' lengths (``ScanResult.meta["tokens"]``)."""
    r = reach(tokens, state["geo_key_norm"].shape[-1])
    n = r.clamp(min=1)
    gone = r == 0
    out = {"key_norm": (state["geo_key_norm"] / n).masked_fill(gone, torch.nan)}
    for tag in ("pre", "rot"):
        raw = (state[f"geo_received_{tag}"] / n).masked_fill(gone, torch.nan)
        out[f"received_{tag}"] = raw
        out[f"received_norm_{tag}"] = raw / raw.nan_to_num(nan=-torch.inf).amax(-1, keepdim=True)
    return out


def columns(state, tokens: Sequence[int], kv: torch.Tensor, first: int = 1) -> dict[str, torch.Tensor]:
    """Head-table columns, ``[layer, head]`` each: ``silhouette_pre/_rot``, ``davies_bouldin_pre/_rot``, ``max_qk_pre/_rot``,
    ``key_norm_first`` (mean norm of keys ``0..first-1``) / ``key_norm_rest`` (the others, over positions), and
    ``received_first_pre/_rot`` (raw r_0) with ``received_norm_first_pre/_rot`` (r_0 over the head's largest r_j)."""
    c = state["geo_cluster"] / len(tokens)
    m = state["geo_max_qk"] / len(tokens)
    cur = curves(state, tokens)
    kn = cur["key_norm"][:, kv]  # [L, H, N]
    out = {"silhouette_pre": c[:, 0], "silhouette_rot": c[:, 1], "davies_bouldin_pre": c[:, 2], "davies_bouldin_rot": c[:, 3],
           "max_qk_pre": m[:, 0], "max_qk_rot": m[:, 1],
           "key_norm_first": kn[..., :first].nanmean(-1), "key_norm_rest": kn[..., first:].nanmean(-1)}
    for tag in ("pre", "rot"):
        out[f"received_first_{tag}"] = cur[f"received_{tag}"][..., 0]
        out[f"received_norm_first_{tag}"] = cur[f"received_norm_{tag}"][..., 0]
    return out


# --------------------------------------------------------------------------------------------
# The measure and its accessor
# --------------------------------------------------------------------------------------------


class Geometry(Measure):
    """Cluster separation, key norm and attention received by position, maximum q.k (001 Figs. 5, 6, 11)."""

    name = "geometry"
    summary = "q vs k cluster scores, key norm and attention received by position, max q.k, pre and post RoPE (001 Figs. 5, 6, 11)"
    options = (Option("geometry", False, "also the cloud and sink geometry of paper 001 (interp sweep turns it on)"),
               Option("cluster_points", CLUSTER_POINTS, "points per head and prompt for the cluster scores (half queries, half "
                      "keys, at the same seeded positions; seed = prompt id * 1009 + layer)"),
               Option("max_qk_queries", 500, "queries per head and prompt for max q.k (seeded positions, the same "
                      "permutation as the cluster scores' positions)"))
    switch = "geometry"

    def columns(self, cfg):
        out = []
        for tag, when in (("pre", "pre-RoPE"), ("rot", "post-RoPE")):
            out += [Column(f"silhouette_{tag}", f"silhouette score of {{q_i}} vs {{k_i}} of the head, {when}, seeded subsample (001 Fig. 11)")]
        for tag, when in (("pre", "pre-RoPE"), ("rot", "post-RoPE")):
            out += [Column(f"davies_bouldin_{tag}", f"Davies-Bouldin index of {{q_i}} vs {{k_i}}, {when} (001 Fig. 11, App. A)")]
        out += [Column("max_qk_pre", "mean over sampled queries of max_j visible q_i . k_j, pre-RoPE (001 Fig. 6 right)"),
                Column("max_qk_rot", "the same post-RoPE (001 Fig. 6 right)"),
                Column("key_norm_first", "mean ||k_0|| (001 Fig. 5 left)"),
                Column("key_norm_rest", "mean ||k_j|| over positions j >= 1 (001 Fig. 5 left)")]
        for tag, when in (("pre", "pre-RoPE"), ("rot", "post-RoPE")):
            out += [Column(f"received_first_{tag}", f"score the first key receives: r_0 = mean_i q_i . k_0, raw dot products, {when} (001 Fig. 5 right)"),
                    Column(f"received_norm_first_{tag}", f"score the first key receives over the largest any key receives: r_0 / max_j r_j, {when} (001 Fig. 5 right)")]
        return out

    def entries(self, dims, cfg):
        L, H, K, N = dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.n_pos
        return [Entry("geo_cluster", (L, 4, H)), Entry("geo_key_norm", (L, K, N), per_position=True),
                Entry("geo_received_pre", (L, H, N), per_position=True), Entry("geo_received_rot", (L, H, N), per_position=True),
                Entry("geo_max_qk", (L, 2, H))]

    def update(self, x):
        return prompt_sums(x.q_pre, x.k_pre, x.q_rot, x.k_rot, x.window, x.config.cluster_points, x.prompt_id * 1009 + x.layer,
                           x.config.max_qk_queries)

    def compute(self, s):
        return columns(s.state, s.meta["tokens"], kv_index(s.card))


def position_curves(s) -> dict[str, torch.Tensor]:
    """``curves`` of a summed scan (a ``ScanResult``): key norm and attention received by position."""
    return curves(s.state, s.meta["tokens"])
