"""Exact attention recomputed from captured queries and keys: full patterns and query blocks.

Both paths apply what the model applies: its scale (``module.scaling``; Gemma-3 uses
``query_pre_attn_scalar ** -0.5``), optional logit soft-capping ``c * tanh(x / c)``, the causal mask
and a sliding window (key j visible from query i iff ``0 <= i - j < window``), and the GQA/MQA
mapping (query head h reads kv head ``h // (n_heads // n_kv_heads)``).

The block path never holds a ``[head, pos, pos]`` tensor: each block of ``B`` queries sees keys
``0..i1-1`` and its rows are normalised exactly (softmax over the whole visible row). Keys are
laid out *reversed* inside a block (column m holds key ``i1 - 1 - m``) so that a constant lag is a
constant-stride line, which makes per-lag sums a strided view instead of a gather (see ``lag_sums``).
The scan's fused CPU kernel (``interp.engine.kernels``) uses the same layout and arithmetic; this block path
is its reference in the tests and its fallback (GPU, no compiler).

Leaf module.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator

import torch
from jaxtyping import Float

from interp.errors import ShapeError


def expand_kv(k: Float[torch.Tensor, "pos kv_head d_head"], n_heads: int) -> Float[torch.Tensor, "pos head d_head"]:
    """Repeat each kv head for the query heads that read it (h -> h // (n_heads // n_kv_heads)).

    Raises:
        ShapeError: ``k`` is not 3-D or ``n_heads`` is not a multiple of its kv heads.
    """
    if k.dim() != 3 or n_heads % k.shape[1]:
        raise ShapeError(f"expand_kv expects [pos, kv_head, d_head] with n_heads % kv_head == 0; got {tuple(k.shape)}, n_heads={n_heads}")
    return k.repeat_interleave(n_heads // k.shape[1], dim=1)


def _visible(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """``[q_pos, k_pos]`` bool: causal and (if set) sliding-window visibility."""
    lag = q_pos[:, None] - k_pos[None, :]
    ok = lag >= 0
    if window is not None:
        ok &= lag < window
    return ok


def _logits(q, k, scale: float, softcap: float | None, out: torch.Tensor | None = None):
    """``[kv_head, group*B, K]`` logits from q ``[kv_head, group*B, d]`` and k^T ``[kv_head, d, K]``, into ``out`` if given.

    The scale goes on q (B*d multiplies, not B*K); soft-capping ``c * tanh(x / c)`` is applied in place.
    """
    s = torch.matmul(q * scale, k, out=out)
    if softcap:
        s.div_(softcap).tanh_().mul_(softcap)
    return s


def _grouped(q: torch.Tensor, n_kv: int) -> torch.Tensor:
    """``[B, head, d]`` -> ``[kv_head, group*B, d]`` (query heads of one kv head side by side)."""
    B, H, D = q.shape
    return q.permute(1, 0, 2).reshape(n_kv, (H // n_kv) * B, D)


def check_qk(q: torch.Tensor, k: torch.Tensor) -> None:
    """Raise ShapeError unless q is ``[pos, head, d]`` and k ``[pos, kv_head, d]`` with matching pos/d and head % kv_head == 0."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2] or q.shape[1] % k.shape[1]:
        raise ShapeError(
            f"expected q [pos, head, d_head] and k [pos, kv_head, d_head] with equal pos and d_head and head % kv_head == 0; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )


def attention_pattern(
    q: Float[torch.Tensor, "pos head d_head"],
    k: Float[torch.Tensor, "pos kv_head d_head"],
    scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> Float[torch.Tensor, "head q_pos k_pos"]:
    """Full attention probabilities of every head (materialised; for short prompts and tests).

    Rows are queries, columns keys; masked entries are exactly 0 and each row sums to 1.
    """
    check_qk(q, k)
    N, H, _ = q.shape
    n_kv = k.shape[1]
    s = _logits(_grouped(q, n_kv), k.permute(1, 2, 0), scale, softcap).reshape(H, N, N)
    pos = torch.arange(N, device=q.device)
    s = s.masked_fill(~_visible(pos, pos, window), float("-inf"))
    return torch.softmax(s, dim=-1)


@dataclass
class Block:
    """One query block of exact attention.

    Attributes:
        i0, i1: the block's queries are positions ``i0..i1-1`` (``B = i1 - i0``); keys are ``0..i1-1``.
        probs_rev: ``[head, B, i1]`` probabilities with keys reversed: column m is key ``i1 - 1 - m``.
        lse: ``[head, B]`` row log-sum-exp of the scaled, soft-capped, masked logits (``attention_blocks(lse=True)``),
            so that ``A[i, j] = exp(logit_ij - lse_i)``; None when not asked for.
    """

    i0: int
    i1: int
    probs_rev: torch.Tensor
    lse: torch.Tensor | None = None

    def key_column(self, j: int) -> torch.Tensor:
        """``[head, B]`` attention of each query in the block to key ``j``."""
        return self.probs_rev[:, :, self.i1 - 1 - j]


def _block_logits(q, k_rev, n_kv, i0, i1, scale, window, softcap, buf):
    """Masked logits ``[head, B, i1]`` of queries i0..i1-1 against keys i1-1..0 (reversed), written into ``buf``."""
    N, H = q.shape[0], q.shape[1]
    B = i1 - i0
    s = _logits(_grouped(q[i0:i1], n_kv), k_rev[:, N - i1 :].transpose(-1, -2), scale, softcap,
                out=buf[: H * B * i1].view(n_kv, (H // n_kv) * B, i1))
    s = s.view(H, B, i1)  # [kv, g, B] rows are query heads in order
    if window is not None and i1 > window:  # the window can hide any column: mask the whole row
        q_pos = torch.arange(i0, i1, device=q.device)
        s.masked_fill_(~_visible(q_pos, torch.arange(i1 - 1, -1, -1, device=q.device), window), float("-inf"))
    else:  # only the diagonal block (the first B reversed columns) holds future keys: column c > row r's key iff c < B-1-r
        s[:, :, :B].masked_fill_(_future(B, q.device), float("-inf"))
    return s


@functools.lru_cache(maxsize=8)
def _future(B: int, device: torch.device) -> torch.Tensor:
    """``[B, B]`` True where reversed column c of row r is a future key (the same for every block of B queries)."""
    return torch.ones(B, B, dtype=torch.bool, device=device).triu(1).flip(-1)


def _softmax_(s: torch.Tensor) -> torch.Tensor:
    """Row softmax written over ``s`` on CPU (no new buffer: big allocations page-fault on every block)."""
    if s.is_cuda:  # the caching allocator makes a fresh tensor cheap; in-place aliasing is not promised there
        return torch.softmax(s, dim=-1)
    return torch.ops.aten._softmax.out(s, -1, False, out=s)


def attention_blocks(
    q: Float[torch.Tensor, "pos head d_head"],
    k: Float[torch.Tensor, "pos kv_head d_head"],
    scale: float,
    window: int | None = None,
    softcap: float | None = None,
    block_size: int = 32,
    v: Float[torch.Tensor, "pos kv_head d_head"] | None = None,
    out: Float[torch.Tensor, "pos head d_head"] | None = None,
    lse: bool = False,
) -> Iterator[Block]:
    """Yield exact attention one query block at a time, all heads at once.

    Each row is normalised over its whole visible row (all keys ``0..i``), so probabilities are
    exact, not online estimates. If ``v`` and ``out`` are given, the attention output ``P @ V`` of
    each block is written into ``out[i0:i1]`` (the same probabilities serve the model's forward and
    the statistics). Memory: one ``head * block_size * pos`` buffer, reused by every block, so a
    yielded ``Block.probs_rev`` is valid only until the next block is produced. ``lse=True`` also gives each
    block's row log-sum-exp (``Block.lse``, one more pass over the logits).
    """
    check_qk(q, k)
    N, H, D = q.shape
    n_kv = k.shape[1]
    g = H // n_kv
    # [kv, N, d] contiguous (a strided layout slows both matmuls by ~30%); row m = key N-1-m
    k_rev = k.flip(0).permute(1, 0, 2).contiguous()
    v_rev = None if v is None else v.flip(0).permute(1, 0, 2).contiguous()
    buf = q.new_empty(H * min(block_size, N) * N)
    for i0 in range(0, N, block_size):
        i1 = min(N, i0 + block_size)
        B = i1 - i0
        s = _block_logits(q, k_rev, n_kv, i0, i1, scale, window, softcap, buf)
        row_lse = torch.logsumexp(s, dim=-1) if lse else None
        p = _softmax_(s)
        if v_rev is not None and out is not None:
            o = torch.matmul(p.view(n_kv, g * B, i1), v_rev[:, N - i1 :])  # [kv, g*B, d]
            out[i0:i1] = o.view(n_kv, g, B, D).reshape(H, B, D).permute(1, 0, 2)
        yield Block(i0, i1, p, row_lse)


def key_weight(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"], scale: float,
               window: int | None = None, softcap: float | None = None, block_size: int = 32, key: int = 0,
               ) -> Float[torch.Tensor, "head pos"]:
    """Attention of every query to one key (``A[:, i, key]``, 0 where masked), block-wise and exact."""
    out = q.new_zeros(q.shape[1], q.shape[0])
    for b in attention_blocks(q, k, scale, window, softcap, block_size):
        if key < b.i1:
            out[:, b.i0 : b.i1] = b.key_column(key)
    return out


def stratified_rows(n_pos: int, n_rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded stratified sample of query positions and the weights that make a weighted sum the mean over all.

    ``[0, n_pos)`` is cut into ``n_rows`` strata of equal size (within one position); one position is drawn uniformly
    in each. ``sum_s weight_s * x[row_s]`` is an unbiased estimate of ``mean_i x[i]`` (stratified sampling, Cochran
    1977, ch. 5), exact when ``n_pos <= n_rows`` (every position, weight ``1 / n_pos``).

    Returns:
        ``(rows [n] int64 sorted, weights [n] float64 summing to 1)`` on the CPU.

    Raises:
        ValueError: ``n_pos < 1`` or ``n_rows < 1``.
    """
    if n_pos < 1 or n_rows < 1:
        raise ValueError(f"stratified_rows needs n_pos >= 1 and n_rows >= 1, got {n_pos}, {n_rows}")
    if n_pos <= n_rows:
        return torch.arange(n_pos), torch.full((n_pos,), 1.0 / n_pos, dtype=torch.float64)
    edges = torch.div(torch.arange(n_rows + 1) * n_pos, n_rows, rounding_mode="floor")
    size = edges[1:] - edges[:-1]
    g = torch.Generator().manual_seed(int(seed))
    rows = edges[:-1] + (torch.rand(n_rows, generator=g, dtype=torch.float64) * size).long().clamp(max=size - 1)
    return rows, size.double() / n_pos


def key_weight_rows(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"],
                    rows: torch.Tensor, scale: float, window: int | None = None, softcap: float | None = None,
                    key: int = 0, max_elements: int = 1 << 25, rows_host: torch.Tensor | None = None,
                    chunk: int = 32) -> Float[torch.Tensor, "head row"]:
    """Attention of the queries at positions ``rows`` to one key: ``A[h, rows[r], key]`` (0 where masked), exact.

    Each row is normalised over its whole visible row (causal, window, soft-cap as the model), computed in float32
    from q and k, ``chunk`` sorted rows at a time (fewer when a chunk's logits would pass ``max_elements`` floats),
    each chunk against the keys up to its last row only, in place (logits, mask, shift, exp: no softmax buffer).
    Cost ``O(len(rows) * pos * head * d_head / 2)``: with a few hundred rows, a small fraction of one ``Q K^T``.
    ``rows_host``: the same rows on the CPU when ``rows`` is on a GPU (chunk bounds are read there, so no call
    waits for the GPU).

    Raises:
        ShapeError: q, k not ``[pos, head|kv_head, d_head]`` (``check_qk``).
    """
    check_qk(q, k)
    N, H, D = q.shape
    n_kv = k.shape[1]
    host = rows_host if rows_host is not None else rows.cpu()  # chunk bounds are read on the host: no GPU sync
    order = None if bool((host[1:] >= host[:-1]).all()) else torch.argsort(host)  # stratified rows come sorted
    ends = (host if order is None else host[order]).tolist()
    rows = rows.to(q.device) if order is None else rows.to(q.device)[order.to(q.device)]
    out = torch.zeros(H, rows.numel(), dtype=torch.float32, device=q.device)
    kt = k.float().permute(1, 2, 0)  # [kv, d, pos]
    step = max(1, min(chunk, max_elements // max(1, H * N)))
    for r0 in range(0, rows.numel(), step):
        r = rows[r0 : r0 + step]
        hi = max(ends[r0 : r0 + step]) + 1
        if key >= hi:
            continue
        s = _logits(_grouped(q[r].float(), n_kv), kt[..., :hi], scale, softcap).view(H, r.numel(), hi)
        s.masked_fill_(~_visible(r, torch.arange(hi, device=q.device), window), float("-inf"))
        s_key = s[..., key].clone()
        m = s.amax(-1, keepdim=True)  # every row sees itself: finite
        lse = m[..., 0] + s.sub_(m).exp_().sum(-1).log()
        out[:, r0 : r0 + step] = torch.exp(s_key - lse)  # exp(-inf) = 0 where the key is masked
    return out if order is None else out[:, torch.argsort(order).to(q.device)]


def _shear_sum(x: torch.Tensor) -> torch.Tensor:
    """``[head, B, K]`` reversed-key rows -> ``[head, K - B + 1]``: sum over r of ``x[:, r, delta + B - 1 - r]``."""
    H, B, K = x.shape
    n = K - B + 1
    view = x.as_strided((H, B, n), (x.stride(0), x.stride(1) - 1, 1), storage_offset=x.storage_offset() + B - 1)
    return view.sum(dim=1)


def lag_sums(probs_rev: torch.Tensor) -> Float[torch.Tensor, "head delta"]:
    """Sum over a block's queries of ``A[i, i - delta]`` for every lag ``delta = 0..i1-1``.

    With keys reversed, entry (r, delta) sits at column ``delta + B - 1 - r`` of row r: along a
    lag the flat offset grows by ``row_stride - 1`` per row, so a strided view summed over rows
    gives all lags at once with no copy. Lags up to ``i0`` stay inside every row; the few larger
    lags (keys ``0..B-2``) come from a zero-padded copy of the last ``B - 1`` columns.
    """
    H, B, K = probs_rev.shape
    i0 = K - B
    out = probs_rev.new_zeros(H, K)
    out[:, : i0 + 1] = _shear_sum(probs_rev)
    if B > 1:
        tail = torch.nn.functional.pad(probs_rev[:, :, K - B + 1 :], (0, B - 1))  # keys B-2..0, then zeros
        out[:, i0 + 1 :] = _shear_sum(tail)[:, : B - 1]
    return out


TOKEN_MATCHES = ("prev", "dup", "ind")  # order of the token-match sums (``token_match_masks``)


def token_match_masks(tokens: torch.Tensor, i0: int, i1: int) -> torch.Tensor:
    """``[3, B, i1]`` bool, keys reversed like ``Block.probs_rev`` (column m is key ``j = i1 - 1 - m``), for queries
    ``i = i0..i1-1``: the detection patterns of TransformerLens' ``head_detector`` (``TOKEN_MATCHES`` order):

    - ``prev``: ``j == i - 1`` (previous-token head);
    - ``dup``: ``j < i`` and ``tokens[j] == tokens[i]`` (duplicate-token head);
    - ``ind``: ``1 <= j <= i`` and ``tokens[j - 1] == tokens[i]`` (induction head: the key right after an earlier
      occurrence of the query's token; ``j == i`` counts when ``tokens[i - 1] == tokens[i]``, as in TransformerLens).

    Raises:
        ShapeError: ``tokens`` is not 1-D or shorter than ``i1``.
    """
    if tokens.dim() != 1 or tokens.numel() < i1:
        raise ShapeError(f"token_match_masks expects [pos] token ids covering queries up to {i1}; got {tuple(tokens.shape)}")
    t = tokens.to(torch.long)
    i = torch.arange(i0, i1, device=t.device)[:, None]  # [B, 1]
    j = torch.arange(i1 - 1, -1, -1, device=t.device)[None, :]  # [1, i1] reversed keys
    tq = t[i0:i1, None]
    prev = j == i - 1
    dup = (j < i) & (t[j] == tq)
    ind = (j >= 1) & (j <= i) & (t[(j - 1).clamp(min=0)] == tq)
    return torch.stack([prev, dup, ind])


def token_match_sums(block: Block, tokens: torch.Tensor) -> Float[torch.Tensor, "head 3"]:
    """``[head, 3]`` float64: sum over the block's queries of the attention on the keys each detection pattern of
    ``token_match_masks`` marks (``sum_i sum_j A[i, j] D[i, j]``; TransformerLens' "mul" score is this over ``pos``)."""
    m = token_match_masks(tokens.to(block.probs_rev.device), block.i0, block.i1).to(block.probs_rev.dtype)
    return torch.einsum("hbk,tbk->ht", block.probs_rev, m).double()


def visible_counts(i0: int, i1: int, window: int | None, device=None) -> torch.Tensor:
    """``[B]`` number of keys each query ``i0..i1-1`` sees: ``i + 1``, or ``min(i + 1, window)`` with a sliding window."""
    n = torch.arange(i0 + 1, i1 + 1, device=device)
    return n.clamp(max=window) if window is not None else n


def entropy_sums(block: Block, window: int | None) -> Float[torch.Tensor, "head 2"]:
    """``[head, 2]`` float64 over the block's queries: sum of the row entropy ``-sum_j A log A`` (nats, ``0 log 0 = 0``)
    and sum of the entropy over ``log(#visible keys)`` (rows with one visible key add 0)."""
    ent = torch.special.entr(block.probs_rev).sum(-1).double()  # [head, B]
    n = visible_counts(block.i0, block.i1, window, ent.device).double()
    norm = torch.where(n > 1, ent / n.log().clamp(min=1e-300), torch.zeros_like(ent))
    return torch.stack([ent.sum(-1), norm.sum(-1)], -1)


def key_mass_sums(block: Block) -> Float[torch.Tensor, "head k_pos"]:
    """``[head, i1]`` float64: sum over the block's queries of ``A[i, j]`` for every key ``j = 0..i1-1`` (column sums)."""
    return block.probs_rev.sum(1).flip(-1).double()


def probs_at(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"],
             lse: Float[torch.Tensor, "head pos"], qi: torch.Tensor, kj: torch.Tensor, scale: float,
             window: int | None = None, softcap: float | None = None) -> Float[torch.Tensor, "head n"]:
    """``[head, n]`` float64: the exact ``A[qi, kj]`` of chosen (query, key) pairs from q, k and the row log-sum-exp
    (``exp(logit - lse)``, the model's scale, soft-cap and masks; 0 where ``kj`` is not visible from ``qi``).

    ``qi``, ``kj``: ``[n]`` positions, or ``[head, n]`` when the pairs differ per head. The logits are float64 dot
    products of the float32 vectors, so a probability matches the tiled pass's to its float32 rounding.
    """
    H = q.shape[1]
    kx = expand_kv(k, H)
    qi, kj = qi.to(q.device), kj.to(q.device)
    if qi.dim() == 1:
        qi, kj = qi.expand(H, -1), kj.expand(H, -1)
    h = torch.arange(H, device=q.device)[:, None]
    logit = (q[qi, h].double() * kx[kj, h].double()).sum(-1) * scale  # [head, n]
    if softcap:
        logit = softcap * torch.tanh(logit / softcap)
    lag = qi - kj
    ok = lag >= 0
    if window is not None:
        ok &= lag < window
    p = torch.exp(logit - lse.double().gather(1, qi))
    return torch.where(ok, p, torch.zeros_like(p))


def row_probs(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"],
              lse: Float[torch.Tensor, "head pos"], rows: torch.Tensor, scale: float, window: int | None = None,
              softcap: float | None = None) -> Float[torch.Tensor, "head n k_pos"]:
    """``[head, n, pos]`` float64: the exact rows ``A[rows, :]`` of every head from q, k and the row log-sum-exp
    (``exp(logit - lse)``; masked keys 0). For a few rows only (MInference's last 64 queries, a corner). ``k`` may be
    the first ``K`` keys only (``k[:K]``): the result is then ``[head, n, K]``."""
    H = q.shape[1]
    kx = expand_kv(k, H).double()  # [K, head, d]
    logit = torch.einsum("nhd,khd->hnk", q[rows].double(), kx) * scale
    if softcap:
        logit = softcap * torch.tanh(logit / softcap)
    logit = logit.masked_fill(~_visible(rows, torch.arange(k.shape[0], device=q.device), window), float("-inf"))
    return torch.exp(logit - lse.double()[:, rows, None])


def column_probs(q: Float[torch.Tensor, "pos head d_head"], k: Float[torch.Tensor, "pos kv_head d_head"],
                 lse: Float[torch.Tensor, "head pos"], keys: torch.Tensor, scale: float, window: int | None = None,
                 softcap: float | None = None) -> Float[torch.Tensor, "head pos n"]:
    """``[head, pos, n]`` float64: the exact columns ``A[:, keys[h]]`` of every head (``keys``: ``[head, n]`` positions,
    per head) from q, k and the row log-sum-exp (``exp(logit - lse)``; masked entries 0). For a few columns only."""
    N, H = q.shape[0], q.shape[1]
    kx = expand_kv(k, H)  # [pos, head, d]
    kc = kx[keys.to(q.device), torch.arange(H, device=q.device)[:, None]].double()  # [head, n, d]
    logit = torch.einsum("ihd,hnd->hin", q.double(), kc) * scale
    if softcap:
        logit = softcap * torch.tanh(logit / softcap)
    lag = torch.arange(N, device=q.device)[None, :, None] - keys.to(q.device)[:, None, :]  # [head, pos, n]
    ok = lag >= 0
    if window is not None:
        ok &= lag < window
    p = torch.exp(logit - lse.double()[:, :, None])
    return torch.where(ok, p, torch.zeros_like(p))
