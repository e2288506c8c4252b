"""Shape of attention: entropy, vertical mass (heavy hitters), A-shape and vertical-slash coverage with MInference's
last-64-query estimate and its error, and streaming vs retrieval heads by distant mass (optional: ``shape=True``,
``interp scan --measure shape``).

Notation: ``A`` is one head's attention on one prompt of ``N`` tokens (rows = queries ``i``, columns = keys ``j``,
each row sums to 1, the model's scale, soft-cap, causal and sliding-window masks). Every share below is a share of
the head's total attention ``sum_ij A[i, j] = N``, computed per prompt, then averaged over prompts. All values are
exact (no sampling): they come from the engine's tile products ``entropy``, ``key_mass``, ``lag``, ``lse``
(``interp.measures.PRODUCTS``) and from small exact materialisations rebuilt from ``q_rot``, ``k_rot`` and the row
log-sum-exp (``interp.attention.row_probs`` / ``column_probs``: ``A[i, j] = exp(logit_ij - lse_i)``).

- **Entropy** (``entropy``, ``entropy_norm``): mean over queries of ``-sum_j A[i, j] log A[i, j]`` (nats), and the mean
  over the queries that see at least two keys of that divided by ``log(#visible keys)`` (1 = uniform over what the
  query sees, 0 = one key). Issue 19; the usual attention-entropy definition (e.g. Zhai et al. 2023, "Stabilizing
  transformer training by preventing attention entropy collapse", eq. 2).
- **Vertical mass** (heavy hitters; H2O, Zhang et al. 2023, rank keys by accumulated attention): key ``j`` receives
  ``m_j = sum_i A[i, j]`` from the ``n_j`` queries that see it (``n_j = N - j``, at most the window). Over prompts
  the state keeps ``sum m_j`` and ``sum n_j`` per position; ``vertical_top_key`` is the key other than the sinks
  (positions ``>= skip``, 0..3) with the largest mean ``sum m_j / sum n_j`` among keys seen by at least
  ``VERTICAL_MIN_QUERIES`` queries (or half the layer's largest count, under a small sliding window; the last keys are
  seen by a handful only, whose means are noise), and
  ``vertical_top_key_weight`` that mean. ``vertical_top1pct``: per prompt, the share of attention on the
  ``ceil(1% of (N - skip))`` keys other than the sinks that receive the most (largest ``m_j``). Which tokens the
  heavy hitters are: ``heavy_hitters(scan_of_one_prompt, tokens, tokenizer)`` names each head's top keys' tokens.
  Over many prompts, ``interp.measures.heavy_hitters`` (``--measure heavy_hitters``) pools keys by token id.
- **A-shape coverage** (StreamingLLM, Xiao et al. 2024: sink + local window; MInference, Jiang et al. 2024,
  ``stream_llm`` pattern): the share of attention on ``{j < S} | {i - j < W}``, exact:
  ``sum_{j<S} m_j + sum_{delta<W} lag_delta - corner`` with ``lag_delta = sum_i A[i, i - delta]`` (every key) and
  ``corner`` the ``(S + W) x S`` block counted twice. ``ashape_coverage`` uses MInference's ``stream_llm`` budget
  ``(S, W) = (100, 800)`` (``minference/modules/minference_forward.py``, ``search_pattern``: ``vs_list = [(100, 800)]``;
  its mask ``triu(tril(ones), -800)`` keeps lags 0..800, one more than ``i - j < W`` here).
- **Vertical-slash coverage** (MInference's ``vertical_and_slash`` pattern, default budget ``(v, s) = (1000, 6096)``,
  ``best_pattern.get(head_id, ("vertical_and_slash", 1000, 6096, 1))`` in the same file): ``vs_coverage`` is the
  exact share of attention on the best ``v`` key columns (largest ``m_j``) and ``s`` lags (largest ``lag_delta``),
  chosen separately as MInference chooses them, less the ``v x s`` points on both. MInference does not compute
  the pattern; it estimates it from the last 64 queries (``last_q = 64``): softmax of the last 64 rows, column sums
  ``vertical`` with the first 30 keys always kept (``vertical[..., :30] = inf``), per-diagonal sums ``slash`` with
  lags 0..29 always kept (``slash[..., -30:] = inf``), top ``v`` and top ``s`` (``vertical_and_slash_kernel``;
  budgets floored with ``max(vertical_size, 30)``, ``max(slash_size, 50)``). ``vs_est_coverage`` is the coverage of
  the picked columns and lags among those 64 queries (what the estimate sees), ``vs_picked_coverage`` the exact
  coverage of the same picks over all queries, and ``vs_est_error = vs_est_coverage - vs_picked_coverage`` the
  estimate's error (positive: the last 64 queries promise more than the picks deliver).
- **Distant mass** (streaming vs retrieval heads, training-free; DuoAttention, Xiao et al. 2025, streaming heads
  keep ``S = 128`` sink and ``W = 256`` recent tokens; the distant-mass split of mlx-lm PR 1522,
  ``classify_retrieval_heads``): ``distant_mass = 1 - A-shape coverage at (S, W)``, the share of attention outside
  the first ``S`` and the last ``W`` keys of each query. ``is_streaming``: ``distant_mass < streaming_threshold``.
  A prompt of ``N <= S + W`` tokens (68 at the floors below) has no query with a distant key: it is left out of the
  mean (``distant_mass`` is the mean over the prompts that have one), and with no such prompt ``distant_mass`` is NaN
  and no head is streaming (a 0 there would label every head streaming).
  Default threshold 0.3: on the zoo (8 pydoc prompts x 1024 tokens, ``analyses/atlas/shape_zoo.py``,
  ``figures/shape_zoo_summary.csv``) the distribution is not bimodal (a peak of local / sink heads near 0, then a
  broad spread); Otsu's cut is 0.32 (SmolLM2-135M), 0.28 (Gemma-3-270M), 0.26 (Qwen2.5-Coder-0.5B),
  0.285 pooled, rounded to 0.3 (mlx-lm's ``min_distant_ratio`` is 0.35). At 0.3, 60% of the zoo's heads are
  streaming. The split is a choice on a continuum: read the distribution before relying on the label.

Budgets on short prompts (interp's choice, stated): the sources use their budgets on long prompts. Each budget ``b``
applies as published from ``REF_LEN = 32768`` tokens on; on a prompt of ``N < REF_LEN`` tokens it keeps its share of
the prompt, ``max(floor, round(b * N / REF_LEN))``, capped at ``N``: floors are MInference's own (30 columns, 50
lags; also for ``stream_llm``) and, for DuoAttention's budget, mlx-lm's short-prompt defaults (4 sink, 64 recent
tokens). At ``N = 1024``: vertical-slash ``(31, 190)``, A-shape ``(30, 50)``, distant mass ``(4, 64)``
(``budgets(N)``). MInference's 30 always-kept keys and lags become ``min(30, budget)``.
"""

from __future__ import annotations

import math

import torch

from interp.attention import column_probs, row_probs
from interp.measures.base import Column, Entry, Measure, Option, prompt_count

REF_LEN = 32768  # prompts at least this long use the published budgets unscaled
MINF_VS = (1000, 6096)  # MInference vertical_and_slash default (verticals, slashes)
MINF_STREAM = (100, 800)  # MInference stream_llm search budget (sink keys, local window)
MINF_FLOOR = (30, 50)  # MInference: max(vertical_size, 30), max(slash_size, 50)
MINF_FORCED = 30  # MInference keeps the first 30 keys and lags 0..29 in its estimate
MINF_LAST_Q = 64  # MInference's last_q
DUO = (128, 256)  # DuoAttention streaming heads: sink, recent tokens
DUO_FLOOR = (4, 64)  # mlx-lm PR 1522 classify_retrieval_heads: sink_tokens=4, recent_tokens=64
VERTICAL_MIN_QUERIES = 32  # a key ranks for vertical_top_key only when at least this many queries (over prompts) see it
STREAMING_THRESHOLD = 0.3  # default of streaming_threshold: the zoo's pooled Otsu threshold, rounded (figures/shape_zoo_summary.csv)
COVERAGE = ("ashape_coverage", "vs_coverage", "vs_est_coverage", "vs_picked_coverage", "distant_mass")


def scaled(budget: int, n_pos: int, floor: int) -> int:
    """A budget of the sources on a prompt of ``n_pos`` tokens: as published from ``REF_LEN`` on, else its share of the
    prompt, ``max(floor, round(budget * n_pos / REF_LEN))``; never more than ``n_pos``."""
    b = budget if n_pos >= REF_LEN else max(floor, round(budget * n_pos / REF_LEN))
    return max(1, min(b, n_pos))


def budgets(n_pos: int) -> dict[str, tuple[int, int]]:
    """The budgets used on a prompt of ``n_pos`` tokens: ``vs`` (verticals, slashes), ``ashape`` and ``distant``
    (sink keys, local window)."""
    return {"vs": (scaled(MINF_VS[0], n_pos, MINF_FLOOR[0]), scaled(MINF_VS[1], n_pos, MINF_FLOOR[1])),
            "ashape": (scaled(MINF_STREAM[0], n_pos, MINF_FLOOR[0]), scaled(MINF_STREAM[1], n_pos, MINF_FLOOR[1])),
            "distant": (scaled(DUO[0], n_pos, DUO_FLOOR[0]), scaled(DUO[1], n_pos, DUO_FLOOR[1]))}


def seen_counts(n_pos: int, window: int | None) -> torch.Tensor:
    """``[pos]`` float64: how many queries see key ``j``: ``N - j``, at most ``window``."""
    n = n_pos - torch.arange(n_pos, dtype=torch.float64)
    return n.clamp(max=window) if window is not None else n


def all_lag_sums(x, lse: torch.Tensor) -> torch.Tensor:
    """``[head, pos]`` float64: ``sum_i A[i, i - delta]`` at every lag over *every* key: the engine's ``lag`` product
    (keys ``>= skip``) plus the ``skip x N`` entries on keys ``0..skip-1``, rebuilt from q, k and ``lse``."""
    N, skip = x.n_pos, min(x.config.skip, x.n_pos)
    lag = x.products["lag"].double().clone()
    if skip:
        dev = x.q_rot.device
        rows = torch.arange(N, device=dev)
        A = row_probs(x.q_rot, x.k_rot[:skip], lse, rows, x.scale, x.window, x.softcap)  # [head, N, skip]
        lag_idx = (rows[:, None] - torch.arange(skip, device=dev)[None, :]).clamp(min=0)  # future keys hold A = 0
        lag.scatter_add_(1, lag_idx.reshape(1, -1).expand(A.shape[0], -1), A.reshape(A.shape[0], -1))
    return lag


def corner(x, lse: torch.Tensor, S: int, W: int) -> torch.Tensor:
    """``[head]`` float64: attention on the keys ``j < S`` that are also within the local window (``i - j < W``), from the
    ``(S + W) x S`` block of queries ``0..S+W-1`` and keys ``0..S-1`` (materialised exactly from q, k and ``lse``)."""
    N, dev = x.n_pos, x.q_rot.device
    if not S:
        return torch.zeros(x.q_rot.shape[1], dtype=torch.float64, device=dev)
    rows = torch.arange(min(N, S + W), device=dev)
    A = row_probs(x.q_rot, x.k_rot[:S], lse, rows, x.scale, x.window, x.softcap)
    lag = rows[:, None] - torch.arange(S, device=dev)[None, :]
    return (A * (lag < W)).sum((1, 2))


def ashape_mass(x, lse, key_mass, lag_all, S: int, W: int) -> torch.Tensor:
    """``[head]``: total attention on ``{j < S} | {i - j < W}`` (A-shape), exact."""
    return key_mass[:, :S].sum(-1) + lag_all[:, :W].sum(-1) - corner(x, lse, S, W)


def overlap(x, lse: torch.Tensor, keys: torch.Tensor, lags: torch.Tensor) -> torch.Tensor:
    """``[head]``: attention on the points that are both on a chosen column and a chosen lag: ``A[j + delta, j]`` for
    ``j`` in ``keys [head, v]`` and ``delta`` in ``lags [head, s]`` (the ``v x s`` points per head), from the chosen
    columns ``A[:, keys]`` (``interp.attention.column_probs``, ``N x v`` per head)."""
    N = x.n_pos
    cols = column_probs(x.q_rot, x.k_rot, lse, keys, x.scale, x.window, x.softcap)  # [head, N, v]
    on_lag = torch.zeros(keys.shape[0], N, dtype=torch.bool, device=keys.device).scatter_(1, lags, True)
    lag = (torch.arange(N, device=keys.device)[None, :, None] - keys[:, None, :]).clamp(min=0)  # [head, N, v]
    return (cols * on_lag.gather(1, lag.reshape(keys.shape[0], -1)).reshape(lag.shape)).sum((1, 2))


def vs_mass(x, lse, key_mass, lag_all, keys, lags) -> torch.Tensor:
    """``[head]``: exact total attention on the chosen columns ``keys [head, v]`` and lags ``lags [head, s]``."""
    return key_mass.gather(1, keys).sum(-1) + lag_all.gather(1, lags).sum(-1) - overlap(x, lse, keys, lags)


def minference_estimate(x, lse: torch.Tensor, v: int, s: int):
    """MInference's vertical-slash estimate from the last ``min(64, N)`` queries (module docstring).

    Returns:
        ``(keys [head, v], lags [head, s], estimate [head])``: the picked columns and lags, and their coverage among
        those queries.
    """
    N, dev = x.n_pos, x.q_rot.device
    L = min(MINF_LAST_Q, N)
    rows = torch.arange(N - L, N, device=dev)
    A = row_probs(x.q_rot, x.k_rot, lse, rows, x.scale, x.window, x.softcap)  # [head, L, N]
    vertical = A.sum(1)
    vertical[:, : min(MINF_FORCED, v)] = math.inf
    lag_idx = (rows[:, None] - torch.arange(N, device=dev)[None, :]).clamp(min=0)  # [L, N]; future keys hold A = 0
    slash = torch.zeros_like(vertical).scatter_add_(1, lag_idx.reshape(1, -1).expand(A.shape[0], -1), A.reshape(A.shape[0], -1))
    slash[:, : min(MINF_FORCED, s)] = math.inf
    keys, lags = vertical.topk(v, -1).indices, slash.topk(s, -1).indices
    on_key = torch.zeros_like(vertical, dtype=torch.bool).scatter_(1, keys, True)  # [head, N]
    on_lag = torch.zeros_like(vertical, dtype=torch.bool).scatter_(1, lags, True)
    covered = on_key[:, None, :] | on_lag[:, lag_idx]  # [head, L, N]
    return keys, lags, (A * covered).sum((1, 2)) / L


class Shape(Measure):
    """Entropy, vertical mass, A-shape and vertical-slash coverage (with MInference's estimate), distant mass (module
    docstring)."""

    name = "shape"
    summary = ("entropy, heavy-hitter keys, A-shape and vertical-slash coverage with MInference's last-64 estimate and "
               "its error, distant mass (streaming vs retrieval heads)")
    options = (Option("shape", False, "also the shape of attention: entropy, vertical mass, A-shape / vertical-slash "
                      "coverage and MInference's estimate, distant mass (interp.measures.shape)"),
               Option("streaming_threshold", STREAMING_THRESHOLD, "a head is streaming when its distant mass (share of "
                      "attention outside the sink and recent keys) is below this",
                      check=lambda v: None if 0 <= v <= 1 else f"streaming_threshold must be in [0, 1], got {v}"))
    switch = "shape"
    products = ("lse", "entropy", "key_mass", "lag")

    def columns(self, cfg):
        return [
            Column("entropy", "mean over queries of -sum_j A log A (nats), mean over prompts"),
            Column("entropy_norm", "the same over log(#visible keys), queries seeing >= 2 keys (1 = uniform)"),
            Column("vertical_top_key", "position (>= skip) with the largest mean attention from the queries that see it "
                   "(H2O heavy hitter)"),
            Column("vertical_top_key_weight", "that key's mean attention over the queries that see it, pooled over prompts"),
            Column("vertical_top1pct", "share of attention on the top 1% of keys other than the sinks (largest column sums)",
                   compare=True),
            Column("ashape_coverage", "exact share of attention on sink + local window at MInference stream_llm budgets "
                   "(100, 800), scaled"),
            Column("vs_coverage", "exact share on the best v key columns + s lags, MInference budgets (1000, 6096) scaled"),
            Column("vs_est_coverage", "MInference's estimate: coverage of its picks from the last 64 queries, among them"),
            Column("vs_picked_coverage", "exact coverage over all queries of the columns and lags MInference picks "
                   "from the last 64"),
            Column("vs_est_error", "error of MInference's last-64 estimate: vs_est_coverage - vs_picked_coverage"),
            Column("distant_mass", "share of attention outside the first S and last W keys (DuoAttention 128 / 256, "
                   "scaled)", compare=True),
            Column("is_streaming", "streaming head (DuoAttention; training-free): distant_mass < streaming_threshold",
                   heatmap=False),
        ]

    def entries(self, dims, cfg):
        L, H, N = dims.n_layers, dims.n_heads, dims.n_pos
        return [Entry("shape_entropy", (L, H, 2)),
                Entry("vertical_mass", (L, H, N), per_position=True),
                Entry("vertical_seen", (L, N), per_position=True),
                Entry("vertical_top1pct_sum", (L, H)),
                Entry("shape_coverage", (L, H, len(COVERAGE))),
                Entry("shape_distant_prompts", (L, H))]  # prompts with a distant key: distant_mass's denominator

    def update(self, x):
        N, skip, P = x.n_pos, min(x.config.skip, x.n_pos), x.products
        lse, km = P["lse"], P["key_mass"].double()
        n_multi = N - 1 if (x.window is None or x.window > 1) else 0  # rows with >= 2 visible keys
        ent = P["entropy"].double()
        entropy = torch.stack([ent[:, 0] / N, ent[:, 1] / max(n_multi, 1)], -1)
        rest = km[:, skip:]
        n_top = max(1, math.ceil(0.01 * rest.shape[1])) if rest.shape[1] else 0
        top1 = rest.topk(n_top, -1).values.sum(-1) / N if n_top else km.new_zeros(km.shape[0])
        lag_all = all_lag_sums(x, lse)
        b = budgets(N)
        v, s = b["vs"]
        best = vs_mass(x, lse, km, lag_all, km.topk(v, -1).indices, lag_all.topk(s, -1).indices)
        keys, lags, estimate = minference_estimate(x, lse, v, s)
        picked = vs_mass(x, lse, km, lag_all, keys, lags)
        has_distant = N > sum(b["distant"])  # some query has a key outside the first S and its last W
        distant = 1 - ashape_mass(x, lse, km, lag_all, *b["distant"]) / N if has_distant else torch.zeros_like(best)
        cov = torch.stack([ashape_mass(x, lse, km, lag_all, *b["ashape"]) / N, best / N, estimate, picked / N, distant], -1)
        return {"shape_entropy": entropy, "vertical_mass": km, "vertical_seen": seen_counts(N, x.window).to(km.device),
                "vertical_top1pct_sum": top1, "shape_coverage": cov,
                "shape_distant_prompts": torch.full_like(top1, float(has_distant), dtype=torch.float64)}

    def compute(self, s):
        P, cfg, st = prompt_count(s), s.config, s.state
        ent = st["shape_entropy"] / P
        cov = st["shape_coverage"] / P
        key, weight = top_keys(s, k=1)
        out = {"entropy": ent[..., 0], "entropy_norm": ent[..., 1], "vertical_top_key": key[..., 0].double(),
               "vertical_top_key_weight": weight[..., 0], "vertical_top1pct": st["vertical_top1pct_sum"] / P}
        out.update({name: cov[..., i] for i, name in enumerate(COVERAGE)})
        out["vs_est_error"] = out["vs_est_coverage"] - out["vs_picked_coverage"]
        n_distant = st["shape_distant_prompts"]
        out["distant_mass"] = st["shape_coverage"][..., COVERAGE.index("distant_mass")] / n_distant  # 0 / 0: NaN
        out["is_streaming"] = out["distant_mass"] < cfg.streaming_threshold  # NaN: False
        return {c.name: out[c.name] for c in self.columns(cfg)}


def top_keys(s, k: int = 5, min_queries: int = VERTICAL_MIN_QUERIES):
    """The ``k`` keys other than the sinks with the largest mean attention from the queries that see them, per head.

    Args:
        s: a scan with the ``shape`` measure on (``ScanResult`` or any ``Summed``).
        k: keys per head; min_queries: rank only keys that at least this many queries (pooled over prompts) see, or
            half the most any key of the layer is seen by, if less (sliding-window layers).

    Returns:
        ``(positions [layer, head, k] long, weights [layer, head, k] float64)``: positions ``>= skip``; where fewer
        than ``k`` keys qualify, positions are -1 and weights NaN.
    """
    mass, seen = s.state["vertical_mass"], s.state["vertical_seen"]  # [L, H, pos], [L, pos]
    mean = mass / seen[:, None, :].clamp(min=1)
    ok = seen >= torch.minimum(torch.full_like(seen[:, :1], float(min_queries)), seen.max(-1, keepdim=True).values / 2)
    ok[:, : s.config.skip] = False
    mean = mean.masked_fill(~ok[:, None, :], -math.inf)
    k_eff = min(k, mean.shape[-1])
    top = mean.topk(k_eff, -1)
    pos, w = top.indices, top.values
    bad = torch.isinf(w)
    pos, w = pos.masked_fill(bad, -1), w.masked_fill(bad, math.nan)
    if k_eff < k:
        pad = k - k_eff
        pos = torch.nn.functional.pad(pos, (0, pad), value=-1)
        w = torch.nn.functional.pad(w, (0, pad), value=math.nan)
    return pos, w


def heavy_hitters(result, tokens: torch.Tensor, tokenizer, k: int = 5, min_queries: int = VERTICAL_MIN_QUERIES):
    """Which tokens each head's heavy hitters are: on a scan of *one* prompt with ``shape=True`` (positions are then that
    prompt's tokens), each head's top ``k`` keys other than the sinks (``top_keys``) with their token text.

    Example: ``heavy_hitters(interp.scan(model, [toks], ScanConfig(shape=True)), toks, model.tokenizer)``.

    Args:
        result: the scan (``ScanResult``); tokens: the prompt's ``[pos]`` token ids; tokenizer: decodes one id.

    Returns:
        DataFrame with ``layer, head, rank, position, token, weight`` (``weight``: mean attention the key receives from
        the queries that see it), ``k`` rows per head, for the report and the atlas.

    Raises:
        ValueError: the scan summed more than one prompt (positions would mix tokens of different prompts).
    """
    import pandas as pd

    if float(prompt_count(result)) != 1:
        raise ValueError(f"heavy_hitters needs a scan of one prompt; this one summed {int(prompt_count(result))}")
    pos, w = top_keys(result, k, min_queries)
    L, H, _ = pos.shape
    rows = []
    for layer in range(L):
        for head in range(H):
            for r in range(k):
                p = int(pos[layer, head, r])
                rows.append({"layer": layer, "head": head, "rank": r, "position": p,
                             "token": tokenizer.decode([int(tokens[p])]) if p >= 0 else "",
                             "weight": float(w[layer, head, r])})
    return pd.DataFrame(rows)
