"""Per-plane decomposition of attention logits (InP), active planes and the pulse check.

Source: paper 004 (Cheng, Zhang, Hou et al. 2026), Sec. 3.3 eq. (8)-(9), Fig. 7, Sec. 4
(Assumption 4.1, eq. 10), App. D.3 (Assumption D.1, eq. 12, Fig. 23).

Definitions, for one head, query position i, key position j and rotation plane l (the model's
pairing, ``freq`` axis, 0 = highest frequency, ``theta_l = inv_freq[l]`` radians per position), with
``q^(l)``, ``k^(l)`` the 2-D *pre-RoPE* sub-vectors of plane l (channels ``plane_channels(d_head, pairing)[l]``,
read as complex numbers ``z = x[ch0] + i x[ch1]``) and ``s`` the RoPE spec's ``scaling`` (1.0 for default RoPE):

- amplitude ``A_l = s^2 |q_i^(l)| |k_j^(l)|``;
- phase ``phi_l = arg q_i^(l) - arg k_j^(l)`` (wrapped to (-pi, pi]); RoPE multiplies ``z`` by
  ``s exp(i theta_l pos)``, so the plane-l dot product of the rotated vectors is
  ``Re(s^2 z_q conj(z_k) exp(i theta_l (i - j)))``, which fixes this sign;
- ``InP(i, j, l) = A_l cos(theta_l (i - j) + phi_l)`` (004 eq. 9), so that
  ``scale * sum_l InP(i, j, l) = scale * q_rot_i . k_rot_j``, the head's attention logit before soft-capping
  and masking, with ``scale`` the model's ``ModelCard.attn_scale[layer]`` (004 eq. 4 omits it). Equivalently
  ``InP(i, j, l)`` is the plane-l partial dot product of the post-RoPE vectors, which is how ``inp_sums``
  computes it. InP is in logit units before the scale (multiply by ``attn_scale`` for logit units).

Visible pairs of a head (what ``inp_sums`` averages over): ``skip <= j <= i`` (keys 0..skip-1, the sink and
warm-up tokens, are dropped as in the slash score; default skip = 4) and, in a sliding-window layer,
``i - j < window``. GQA: query head h reads kv head ``h // group``.

Active planes (004 Sec. 4, App. D.3: "those whose average InP exceeds one tenth of the maximum"): the
paper says neither whether the average is of InP or |InP| nor over which pairs. Both are kept: the signed
mean ``E[InP]`` and the mean magnitude ``E[|InP|]`` over the visible pairs of the prompts. A plane is active
when its mean is >= ``frac`` (0.1) times the maximum over planes (``active_planes``). The pulse check uses
**mean |InP|** by default (the project's choice); the signed mean is reported beside it.

Pulse check (004 eq. 10/12 and Fig. 23): ``P(x) = sum_{l active} cos(theta_l x)``, unit amplitudes and no
phases. The paper's condition is ``P(x) ~ C1 delta_0(x) + C2``; this project asks whether, for x >= 1, P
peaks at (or near) the head's slash lag. Note ``P(0) = n_active`` is always the global maximum, so for a
lag-0 head the check is trivially met; the question is informative only for lags >= 1.

Everything here is a pure function; sums are float64 (products float32 inside one block of ``inp_sums``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from jaxtyping import Bool, Float

from interp.errors import ShapeError
from interp.measures.base import Column, Entry, Measure, Option
from interp.rope import BANDS, RopeSpec, plane_channels

SKIP = 4  # keys 0..SKIP-1 dropped, as in interp.measures.slash
_KEY_CHUNK = 64  # keys per inner chunk of inp_sums (products of one chunk stay in L2)


def _split(x: torch.Tensor, pairing: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x[..., ch0], x[..., ch1])``, each ``[..., freq]``: the two coordinates of every plane."""
    ch = plane_channels(x.shape[-1], pairing).to(x.device)
    return x[..., ch[:, 0]], x[..., ch[:, 1]]


def plane_terms(
    q_pre: Float[torch.Tensor, "... d_head"], k_pre: Float[torch.Tensor, "... d_head"], spec: RopeSpec
) -> tuple[Float[torch.Tensor, "... freq"], Float[torch.Tensor, "... freq"]]:
    """Amplitude and phase of every rotation plane (004 eq. 9): ``A_l = s^2 |q^(l)| |k^(l)|``, ``phi_l = arg q^(l) - arg k^(l)``.

    Args:
        q_pre: ``[..., d_head]`` pre-RoPE query vector(s).
        k_pre: ``[..., d_head]`` pre-RoPE key vector(s); leading axes broadcast with ``q_pre``'s.
        spec: the layer's RoPE (pairing, ``scaling`` s).

    Returns:
        ``(A [..., freq], phi [..., freq])`` float64; phi in radians, wrapped to (-pi, pi].

    Raises:
        ShapeError: the last axis of q or k is not the spec's ``d_head``.
    """
    d = spec.d_head
    if q_pre.shape[-1] != d or k_pre.shape[-1] != d:
        raise ShapeError(f"plane_terms expects q and k [..., d_head={d}]; got q {tuple(q_pre.shape)}, k {tuple(k_pre.shape)}")
    zq = torch.complex(*_split(q_pre.double(), spec.pairing))
    zk = torch.complex(*_split(k_pre.double(), spec.pairing))
    z = zq * zk.conj() * spec.scaling**2
    return z.abs(), z.angle()


def inp(
    q_pre_i: Float[torch.Tensor, "... d_head"],
    k_pre_j: Float[torch.Tensor, "... d_head"],
    spec: RopeSpec,
    delta,
) -> Float[torch.Tensor, "... freq"]:
    """``InP(i, j, l) = A_l cos(theta_l delta + phi_l)`` for given pre-RoPE vectors (004 eq. 8-9).

    Args:
        q_pre_i: ``[..., d_head]`` pre-RoPE query(ies) at position(s) i.
        k_pre_j: ``[..., d_head]`` pre-RoPE key(s) at position(s) j.
        spec: the layer's RoPE.
        delta: ``i - j`` in positions: a number or a tensor broadcastable with the leading axes.

    Returns:
        ``[..., freq]`` float64; ``attn_scale * inp(...).sum(-1)`` is the attention logit.

    Raises:
        ShapeError: as ``plane_terms``.
    """
    A, phi = plane_terms(q_pre_i, k_pre_j, spec)
    dl = torch.as_tensor(delta, dtype=torch.float64, device=A.device)
    return A * torch.cos(dl[..., None] * spec.inv_freq.double().to(A.device) + phi)


def inp_matrix(
    q_pre: Float[torch.Tensor, "pos head d_head"],
    k_pre: Float[torch.Tensor, "pos kv_head d_head"],
    spec: RopeSpec,
    query: int,
    head: int,
    group: int,
) -> Float[torch.Tensor, "k_pos freq"]:
    """InP of one query against every causal key ``j = 0..query`` of one head (004 Fig. 7: keys x planes).

    Args:
        q_pre, k_pre: one layer's pre-RoPE vectors (as ``interp.capture`` gives them).
        spec: that layer's RoPE.
        query: the query position i (004 uses i = 100).
        head: query head; it reads kv head ``head // group``.
        group: query heads per kv head (``ModelCard.group_size``).

    Returns:
        ``[query + 1, freq]`` float64, row j = ``InP(query, j, :)``.

    Raises:
        ShapeError: q/k not 3-D with matching pos and ``d_head``, or head/query/group out of range.
    """
    if (q_pre.dim() != 3 or k_pre.dim() != 3 or q_pre.shape[0] != k_pre.shape[0] or q_pre.shape[-1] != spec.d_head
            or k_pre.shape[-1] != spec.d_head):
        raise ShapeError(f"inp_matrix expects q [pos, head, d_head={spec.d_head}] and k [pos, kv_head, d_head]; "
                         f"got q {tuple(q_pre.shape)}, k {tuple(k_pre.shape)}")
    if not (0 <= query < q_pre.shape[0] and 0 <= head < q_pre.shape[1] and group >= 1 and head // group < k_pre.shape[1]):
        raise ShapeError(f"inp_matrix: query {query} / head {head} / group {group} out of range for q {tuple(q_pre.shape)}, "
                         f"k {tuple(k_pre.shape)}")
    j = torch.arange(query + 1, device=q_pre.device)
    return inp(q_pre[query, head], k_pre[: query + 1, head // group], spec, query - j)


def _check_rot(q: torch.Tensor, k: torch.Tensor) -> None:
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2] or q.shape[1] % k.shape[1] or q.shape[2] % 2:
        raise ShapeError(
            "inp_sums expects q_rot [pos, head, d_head] and k_rot [pos, kv_head, d_head] with equal pos and (even) d_head "
            f"and head % kv_head == 0; got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )


def _key_lo(i: torch.Tensor, skip: int, window: int | None) -> torch.Tensor:
    """First visible key of each query: ``max(skip, i - window + 1)``."""
    lo = torch.full_like(i, skip)
    return lo if window is None else torch.maximum(lo, i - window + 1)


def pair_count(n_pos: int, skip: int = SKIP, window: int | None = None) -> int:
    """Number of visible pairs ``(i, j)``: ``skip <= j <= i < n_pos`` and ``i - j < window`` (if set)."""
    i = torch.arange(n_pos)
    return int((i + 1 - _key_lo(i, skip, window)).clamp(min=0).sum())


def inp_signed_prefix(
    q_rot: Float[torch.Tensor, "pos head d_head"],
    k_rot: Float[torch.Tensor, "pos kv_head d_head"],
    pairing: str = "rotate_half",
    skip: int = SKIP,
    window: int | None = None,
) -> Float[torch.Tensor, "head freq"]:
    """Exact ``sum_{visible (i, j)} InP(i, j, l)`` per head in O(pos) from prefix sums of the keys.

    ``sum_j q_i^(l) . k_j^(l) = q_i^(l) . (C[i + 1] - C[lo_i])`` with ``C[j] = sum_{m < j} k_m^(l)`` (float64)
    and ``lo_i = max(skip, i - window + 1)``.

    Returns:
        ``[head, freq]`` float64.

    Raises:
        ShapeError: as ``inp_sums``.
    """
    _check_rot(q_rot, k_rot)
    N, H, _ = q_rot.shape
    g = H // k_rot.shape[1]
    k = k_rot.double()
    C = torch.cat([k.new_zeros(1, *k.shape[1:]), k.cumsum(0)])  # [pos + 1, kv_head, d_head]
    i = torch.arange(N, device=q_rot.device)
    lo = _key_lo(i, skip, window).clamp(max=N)
    ok = (lo <= i).double()[:, None, None]
    ksum = (C[i + 1] - C[lo]) * ok  # [pos, kv_head, d_head]: visible keys of each query
    prod = q_rot.double() * ksum.repeat_interleave(g, dim=1)  # [pos, head, d_head]
    a, b = _split(prod.sum(0), pairing)
    return a + b


def inp_sums(
    q_rot: Float[torch.Tensor, "pos head d_head"],
    k_rot: Float[torch.Tensor, "pos kv_head d_head"],
    pairing: str = "rotate_half",
    skip: int = SKIP,
    window: int | None = None,
    block_size: int = 32,
) -> dict[str, torch.Tensor]:
    """One prompt's additive sums of InP over every visible pair of every head (004 Sec. 4 "average InP").

    ``InP(i, j, l) = q_rot_i^(l) . k_rot_j^(l)`` (plane-l partial dot product of the post-RoPE vectors; the
    module docstring shows it equals ``A_l cos(theta_l (i - j) + phi_l)``). Visible pairs: ``skip <= j <= i``
    and ``i - j < window`` when ``window`` is set. Means over prompts: add the sums, then ``inp_means``.

    The signed sum uses the exact prefix-sum form (``inp_signed_prefix``, O(pos)). The |InP| sum is
    pairwise, computed block-wise over queries: each block of ``block_size`` queries forms the
    ``[kv_head, group, block, keys, freq]`` products in float32, 64 keys at a time (memory ~ head x block x 64 x
    freq floats, never ``[head, pos, pos, freq]``), sums them in float32 and adds the block's sum into a float64
    total. All heads at once. Cost: about ``head x pos^2 / 2 x freq`` products; measured ~0.1-0.2 s per layer of
    smollm2-135m (9 heads, 64 channels) at 1024 tokens on one core of this project's 2-core machine.

    Args:
        q_rot: ``[pos, head, d_head]`` post-RoPE queries of one layer (positions 0..pos-1).
        k_rot: ``[pos, kv_head, d_head]`` post-RoPE keys.
        pairing: the model's channel pairing (``ModelCard.pairing``).
        skip: keys 0..skip-1 dropped (default 4, the slash score's).
        window: sliding window of the layer (``ModelCard.sliding_window[layer]``), or None.
        block_size: queries per block.

    Returns:
        ``{"signed": [head, freq], "abs": [head, freq], "count": [head]}`` float64 (count: visible pairs).

    Raises:
        ShapeError: q/k not ``[pos, head, d_head]`` / ``[pos, kv_head, d_head]`` with equal pos and even d_head,
            or head not a multiple of kv_head.
        ValueError: ``block_size < 1`` or ``window < 1``.
    """
    _check_rot(q_rot, k_rot)
    if block_size < 1 or (window is not None and window < 1):
        raise ValueError(f"inp_sums needs block_size >= 1 and window >= 1 (or None); got {block_size}, {window}")
    N, H, D = q_rot.shape
    n_kv, F = k_rot.shape[1], D // 2
    g = H // n_kv
    q0, q1 = (t.float().permute(1, 0, 2).reshape(n_kv, g, N, F) for t in _split(q_rot, pairing))  # [kv, g, pos, freq]
    k0, k1 = (t.float().permute(1, 0, 2).contiguous() for t in _split(k_rot, pairing))  # [kv, pos, freq]
    total = torch.zeros(n_kv, g, F, dtype=torch.float64, device=q_rot.device)
    kc = _KEY_CHUNK
    buf = q0.new_empty(n_kv * g * min(block_size, N) * kc * F)
    for i0 in range(min(skip, N), N, block_size):
        i1 = min(N, i0 + block_size)
        B = i1 - i0
        lo = skip if window is None else max(skip, i0 - window + 1)
        qa, qb = q0[:, :, i0:i1, None, :], q1[:, :, i0:i1, None, :]
        acc = q0.new_zeros(n_kv, g, F)
        for j0 in range(lo, i1, kc):  # key chunks keep the temporaries in cache (~2 MB for 9 heads x 32 x 64 x 32)
            j1 = min(i1, j0 + kc)
            t = buf[: n_kv * g * B * (j1 - j0) * F].view(n_kv, g, B, j1 - j0, F)
            torch.mul(qa, k0[:, None, None, j0:j1, :], out=t)
            t.addcmul_(qb, k1[:, None, None, j0:j1, :]).abs_()
            if j1 > i0 or (window is not None and j0 <= i1 - 1 - window):  # chunk holds future or out-of-window keys
                lag = torch.arange(i0, i1, device=t.device)[:, None] - torch.arange(j0, j1, device=t.device)[None, :]
                hide = lag < 0
                if window is not None:
                    hide |= lag >= window
                t.masked_fill_(hide[None, None, :, :, None], 0.0)
            acc += t.view(n_kv, g, -1, F).sum(2)
        total += acc.double()
    i = torch.arange(N)
    count = float((i + 1 - _key_lo(i, skip, window)).clamp(min=0).sum())
    return {
        "signed": inp_signed_prefix(q_rot, k_rot, pairing, skip, window),
        "abs": total.reshape(H, F),
        "count": torch.full((H,), count, dtype=torch.float64, device=q_rot.device),
    }


def inp_means(sums: dict[str, torch.Tensor]) -> tuple[Float[torch.Tensor, "... freq"], Float[torch.Tensor, "... freq"]]:
    """``(mean_signed, mean_abs)`` from (summed) ``inp_sums`` output: sums divided by the pair count (NaN if 0)."""
    c = sums["count"].double()
    c = torch.where(c > 0, c, torch.nan)[..., None]
    return sums["signed"] / c, sums["abs"] / c


def active_planes(mean_inp: Float[torch.Tensor, "... freq"], frac: float = 0.1) -> Bool[torch.Tensor, "... freq"]:
    """Active planes (004 Sec. 4, App. D.3): mean InP >= ``frac`` x its maximum over planes.

    Works for mean |InP| (the default use) and for the signed mean: where the maximum over planes is
    <= 0 (a signed mean with no positive plane) no plane is active.

    Args:
        mean_inp: ``[..., freq]`` per-plane average (``inp_means``).
        frac: fraction of the maximum (0.1 in 004).

    Returns:
        ``[..., freq]`` bool.

    Raises:
        ShapeError: ``mean_inp`` is 0-D.
    """
    if mean_inp.dim() == 0:
        raise ShapeError("active_planes expects [..., freq]; got a scalar")
    m = mean_inp.max(dim=-1, keepdim=True).values
    return (mean_inp >= frac * m) & (m > 0)


def pulse(
    inv_freq: Float[torch.Tensor, "freq"], active: Bool[torch.Tensor, "freq"], x: Float[torch.Tensor, "n"]
) -> Float[torch.Tensor, "n"]:
    """``P(x) = sum_{l active} cos(theta_l x)`` (004 eq. 10 / 12 left side, Fig. 23), float64.

    Args:
        inv_freq: ``[freq]`` theta_l, radians per position (``RopeSpec.inv_freq``).
        active: ``[freq]`` bool mask (``active_planes``).
        x: ``[n]`` lags in positions.

    Raises:
        ShapeError: inv_freq and active differ in shape, or an input is not 1-D.
    """
    if inv_freq.dim() != 1 or active.shape != inv_freq.shape or torch.as_tensor(x).dim() != 1:
        raise ShapeError(f"pulse expects inv_freq [freq], active [freq], x [n]; got {tuple(inv_freq.shape)}, "
                         f"{tuple(active.shape)}, {tuple(torch.as_tensor(x).shape)}")
    th = inv_freq.double()[active.bool()]
    return torch.cos(torch.as_tensor(x, dtype=torch.float64)[:, None] * th[None, :]).sum(-1)


def pulse_peak(inv_freq: Float[torch.Tensor, "freq"], active: Bool[torch.Tensor, "freq"], x_max: int = 64, x_min: int = 1) -> int:
    """Integer lag ``x`` in ``[x_min, x_max]`` where ``pulse`` is largest (first one on ties; -1 if no plane is active).

    Default ``x_min = 1``: ``P(0) = n_active`` is always the global maximum.

    Raises:
        ShapeError: as ``pulse``; ValueError: ``x_max < x_min``.
    """
    if x_max < x_min:
        raise ValueError(f"pulse_peak needs x_max >= x_min; got {x_max} < {x_min}")
    if not bool(active.any()):
        return -1
    x = torch.arange(x_min, x_max + 1, dtype=torch.float64)
    P = pulse(inv_freq, active, x)
    return int(x_min + int(torch.argmax(P.round(decimals=12))))


def band_counts(active: Bool[torch.Tensor, "freq"]) -> dict[str, int]:
    """Active planes per band: ``numpy.array_split(arange(freq), 3)`` = high, medium, low (as ``interp.rope.band_planes``)."""
    a = np.asarray(active.cpu(), dtype=bool)
    return {b: int(a[idx].sum()) for b, idx in zip(BANDS, np.array_split(np.arange(a.shape[-1]), 3))}


def period(inv_freq: Float[torch.Tensor, "freq"]) -> Float[torch.Tensor, "freq"]:
    """Period of each plane in positions, ``2 pi / theta_l``."""
    return 2 * math.pi / inv_freq.double()


def query_inp(
    q_rot: Float[torch.Tensor, "pos head d_head"], k_rot: Float[torch.Tensor, "pos kv_head d_head"], query: int, n_keys: int,
    pairing: str = "rotate_half",
) -> Float[torch.Tensor, "head k_pos freq"]:
    """InP(query, j, l) for keys ``j = 0..n_keys-1`` of every head, from post-RoPE vectors (004 Fig. 7, all heads at once).

    Equals ``inp_matrix`` (from pre-RoPE vectors) head by head; GQA: query head h reads kv head ``h // group``.

    Raises:
        ShapeError: as ``inp_sums``; ValueError: ``query`` or ``n_keys`` outside the prompt.
    """
    _check_rot(q_rot, k_rot)
    N, H, _ = q_rot.shape
    if not (0 <= query < N and 0 < n_keys <= N):
        raise ValueError(f"query_inp needs 0 <= query < {N} and 0 < n_keys <= {N}; got {query}, {n_keys}")
    q0, q1 = (t[query].double() for t in _split(q_rot, pairing))  # [head, freq]
    k0, k1 = (t[:n_keys].double().repeat_interleave(H // k_rot.shape[1], dim=1) for t in _split(k_rot, pairing))  # [k, head, freq]
    return (q0[None] * k0 + q1[None] * k1).permute(1, 0, 2)


# --------------------------------------------------------------------------------------------
# The measure and its accessors on a summed scan
# --------------------------------------------------------------------------------------------


class InP(Measure):
    """Per-plane InP sums over visible pairs, and InP of query ``map_size - 1`` with the first keys (module docstring)."""

    name = "inp"
    summary = "per-plane InP (004 eq. 8-9): mean signed and |InP| per rotation plane, active planes per band (about +50% scan time)"
    options = (Option("inp", False, "sum, per head and rotation plane, InP(i, j, l) and |InP| over the visible pairs with keys >= skip "
                      "(004 eq. 8-9; about +50% scan time on the fused kernel)"),)
    switch = "inp"
    products = ("inp",)

    def columns(self, cfg):
        return [Column("inp_active_abs", "number of active planes: mean |InP| >= 0.1 x its maximum over planes (004 Sec. 4, App. D)"),
                Column("inp_active_signed", "number of active planes by the signed mean InP (004 Sec. 4, App. D)"),
                Column("inp_top_plane", "plane with the largest mean |InP| (0 = highest frequency) (004 eq. 8-9)"),
                *(Column(f"inp_active_{b}", f"active planes (mean |InP|) in the {b}-frequency third of the planes (004 Sec. 4)") for b in BANDS)]

    def entries(self, dims, cfg):
        L, H, F = dims.n_layers, dims.n_heads, dims.n_freq
        return [Entry("inp_signed", (L, H, F)), Entry("inp_abs", (L, H, F)), Entry("inp_pairs", (L, H)),
                Entry("inp_query_map", (L, H, cfg.map_size, F))]

    def update(self, x):
        sums = x.products["inp"]
        M = min(x.config.map_size, x.n_pos)
        qmap = query_inp(x.q_rot, x.k_rot, M - 1, M, x.card.pairing)  # [head, M, freq]
        qmap = torch.nn.functional.pad(qmap, (0, 0, 0, x.config.map_size - M))
        return {"inp_signed": sums["signed"], "inp_abs": sums["abs"], "inp_pairs": sums["count"], "inp_query_map": qmap}

    def compute(self, s):
        mean_s, mean_a = means(s)
        act_a, act_s = active_planes(mean_a), active_planes(mean_s)
        out = {"inp_active_abs": act_a.sum(-1).double(), "inp_active_signed": act_s.sum(-1).double(),
               "inp_top_plane": mean_a.nan_to_num(nan=-1.0).argmax(-1).double()}
        for band, idx in zip(BANDS, np.array_split(np.arange(mean_a.shape[-1]), 3)):
            out[f"inp_active_{band}"] = act_a[..., torch.as_tensor(idx)].sum(-1).double()
        return out


def _require(s) -> None:
    if not s.config.inp:
        raise ValueError("this scan has no InP sums: scan with ScanConfig(inp=True) (interp scan --measure inp; interp ablate does)")


def means(s) -> tuple[Float[torch.Tensor, "layer head freq"], Float[torch.Tensor, "layer head freq"]]:
    """``(mean_signed, mean_abs)`` InP per (layer, head, plane) of a summed scan (NaN where a head has no pair).

    Raises:
        ValueError: the scan ran without ``ScanConfig(inp=True)``.
    """
    _require(s)
    st = s.state
    return inp_means({"signed": st["inp_signed"], "abs": st["inp_abs"], "count": st["inp_pairs"]})


def query_map(s) -> Float[torch.Tensor, "layer head k_pos freq"]:
    """``[layer, head, k_pos, freq]`` InP(i, j, l) of query ``i = map_size - 1`` with keys ``j = 0..map_size-1``, mean over
    prompts (paper 004 Fig. 7 shows one prompt's; keys include the sink).

    Raises:
        ValueError: the scan ran without InP.
    """
    _require(s)
    return s.state["inp_query_map"] / s.state["prompts"][0]


def layer_inv_freq(s) -> Float[torch.Tensor, "layer freq"]:
    """``[layer, freq]`` RoPE frequencies (radians per position) the scanned model used (recorded in ``meta``), or the
    default RoPE of the card's per-layer base for scans that did not record them."""
    from interp.rope import default_inv_freq

    if "inv_freq" in s.meta:
        return torch.tensor(s.meta["inv_freq"], dtype=torch.float64)
    c = s.card
    return torch.stack([default_inv_freq(t, c.d_head).double() for t in c.rope_theta])


def spectrum_table(s):
    """Tidy per-plane InP table: ``layer, head, freq, period`` (positions per turn), ``mean_inp`` (signed),
    ``mean_abs_inp``, ``active_abs``, ``active_signed`` (004 eq. 8-9, Sec. 4). One row per (layer, head, freq).

    Raises:
        ValueError: the scan ran without ``ScanConfig(inp=True)``.
    """
    import pandas as pd

    mean_s, mean_a = means(s)
    L, H, F = mean_a.shape
    periods = period(layer_inv_freq(s))  # [layer, freq]
    idx = pd.MultiIndex.from_product([range(L), range(H), range(F)], names=["layer", "head", "freq"])
    return pd.DataFrame({
        "period": periods[:, None, :].expand(L, H, F).reshape(-1).numpy(),
        "mean_inp": mean_s.reshape(-1).numpy(), "mean_abs_inp": mean_a.reshape(-1).numpy(),
        "active_abs": active_planes(mean_a).reshape(-1).numpy(), "active_signed": active_planes(mean_s).reshape(-1).numpy(),
    }, index=idx).reset_index()
