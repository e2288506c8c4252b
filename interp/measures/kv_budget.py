"""A geometric predictor of each head's attention vs distance, and kvpress's on-the-fly DuoAttention score (optional:
``kv_budget=True``, ``interp scan --measure kv_budget``). Derivation: ``docs/concepts/kv_budget.md``.

Notation (one layer, one query head ``h`` reading kv head ``g = h // group``): pre-RoPE query and key ``q_i``, ``k_j``
(after bias and QK-norm), rotation plane ``l`` (``freq`` axis, the model's pairing, ``interp.rope.plane_channels``)
read as a complex number ``z = x[ch0] + i x[ch1]``; RoPE multiplies ``z`` at position ``p`` by ``r_l(p) = s_l
exp(i theta_l p)``, so the logit is (paper 004 eq. 8-9, with the model's scale ``c``)

    logit(i, j) = c sum_l s_l^2 Re(z_q,i^(l) conj(z_k,j^(l)) exp(i theta_l (i - j))).

Statistics kept (additive float64 sums over prompts; queries and bulk keys are the positions ``>= skip``, the first
``skip`` keys, sink and warm-up tokens, are kept one by one as the slash score drops them):

- ``mu_q^(l)``, ``mu_k^(l)``: mean pre-RoPE query / key of each plane (the cone's axis, paper 001 Fig. 2);
- ``Q2_l = E|z_q^(l)|^2``, ``K2_l = E|z_k^(l)|^2``: per-plane second moments (the amplitudes InP sums, 004 eq. 9), so
  the spread around the axis is ``Q2_l - |mu_q^(l)|^2``;
- ``sigma_j^(l)``, ``S2_{j,l}``: mean and second moment of key ``j < skip`` (sink);
- ``s_l^2``: the rotation's per-plane gain, read from the layer's own q_pre -> q_rot (1 for default RoPE).

The predictor (cone + pulse, 004 Sec. 4 and App. D, with the spread treated as Gaussian noise, independent over keys):

- mean logit of a bulk key at distance ``delta``: ``m(delta) = c sum_l s_l^2 Re(mu_q^(l) conj(mu_k^(l)) exp(i theta_l
  delta))``; variance ``v = c^2 sum_l s_l^4 (Q2_l K2_l - |mu_q^(l)|^2 |mu_k^(l)|^2) / 2`` (circular noise per plane);
- mean logit of sink key ``j`` for query ``i``: ``m_j(i) = c sum_l s_l^2 Re(mu_q^(l) conj(sigma_j^(l)) exp(i theta_l (i - j)))``;
- expected attention (typical, not annealed, normaliser): the ``n_i`` bulk keys query ``i`` sees carry
  ``exp(m(i - j) + phi(v, n_i))`` each, with the random-energy-model gain (Derrida 1981) ``phi = v / 2`` when
  ``v <= 2 ln n`` and ``sqrt(2 v ln n) - ln n`` beyond (the sum of ``n`` log-normal weights is dominated by its largest
  term there); a single sink key carries ``exp(m_j(i))``; ``A(i, j)`` is that weight over their sum (causal mask and
  sliding window as the model's).

Read-outs, on prompts of ``N`` tokens: the predicted **distant mass** (``geo_distant_mass``; the ``shape`` measure's
``distant_mass`` definition, DuoAttention's A-shape with ``shape.budgets(N)["distant"]``), the predicted **slash
score** at the short lags (``geo_slash_score`` / ``geo_slash_delta``; 004 Def. 3.1 eq. 6, the best over
``short_lags``), and the **zeroth-order** distant mass (``geo0_distant_mass``: no spread, sinks replaced by the bulk
mean; the case kvpress's score sits in). Zero spread and ``sigma_j = mu_k`` give exactly the softmax of the rotated
mean query against the rotated mean keys (a test).

kvpress's on-the-fly score (``kvpress_score``; NVIDIA kvpress, ``kvpress/presses/duo_attention_press.py``,
``duo_attention_on_the_fly``, read, not copied): per prompt, the mean pre-RoPE query and key over *all* positions, both
placed at positions ``0..q_len-1`` (``q_len = min(kvpress_q_len, N)``, kvpress: 500) and rotated; the last query's
attention ``a_j`` over those keys (softmax, no mask besides causality, the model's scale where kvpress uses
``1/sqrt(d_head)``); the score is the area under the cumulative attention curve ``mean_j sum_{j' <= j} a_j'`` (high:
mass on the far keys, keep the head full), averaged over the query heads of a kv head and over prompts. Column value:
the head's kv head's score.

Shapes: state entries below; every column ``[layer, head]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Float

from interp.measures.base import Column, Entry, Measure, Option, kv_index, prompt_count
from interp.rope import plane_channels

KVPRESS_Q_LEN = 500  # kvpress duo_attention_on_the_fly default q_len


def planes(x: Float[torch.Tensor, "... d_head"], pairing: str) -> torch.Tensor:
    """``[..., freq]`` complex128: every rotation plane of ``x`` as ``x[ch0] + i x[ch1]`` (``interp.rope.plane_channels``)."""
    ch = plane_channels(x.shape[-1], pairing).to(x.device)
    x = x.double()
    return torch.complex(x[..., ch[:, 0]], x[..., ch[:, 1]])


def rotation_table(pre: Float[torch.Tensor, "pos head d_head"], rot: Float[torch.Tensor, "pos head d_head"],
                   pairing: str) -> Float[torch.Tensor, "pos freq"]:
    """``[pos, freq]`` complex128: the rotation ``r_l(p) = s_l exp(i theta_l p)`` the layer applied at each position,
    read off its own pre- and post-RoPE vectors: ``sum_h z_rot conj(z_pre) / sum_h |z_pre|^2`` (exact for any rope type;
    1 where a plane is zero in every head at that position)."""
    zp, zr = planes(pre, pairing), planes(rot, pairing)
    num, den = (zr * zp.conj()).sum(1), (zp.abs() ** 2).sum(1)
    return torch.where(den > 0, num / den.clamp(min=1e-300), torch.ones_like(num))


def kvpress_score(q_pre: Float[torch.Tensor, "pos head d_head"], k_pre: Float[torch.Tensor, "pos kv_head d_head"],
                  rot: Float[torch.Tensor, "pos freq"], scale: float, q_len: int, pairing: str) -> Float[torch.Tensor, "head"]:
    """kvpress's on-the-fly DuoAttention score of one prompt (module docstring), per query head, float64 in [0, 1].

    Args:
        q_pre, k_pre: the prompt's pre-RoPE queries and keys (every position is averaged, as kvpress does).
        rot: ``[pos, freq]`` the layer's rotation (``rotation_table``); positions ``0..q_len-1`` are used.
        scale: the layer's logit scale; q_len: positions of the synthetic sequence (``<= pos``).

    Raises:
        ValueError: ``q_len`` is not in ``1..pos``.
    """
    if not 1 <= q_len <= rot.shape[0]:
        raise ValueError(f"q_len must lie in 1..{rot.shape[0]} (the prompt's length), got {q_len}")
    H, K = q_pre.shape[1], k_pre.shape[1]
    zq = planes(q_pre.mean(0), pairing) * rot[q_len - 1]  # [head, freq], the last query rotated
    zk = planes(k_pre.mean(0), pairing)[:, None, :] * rot[None, :q_len]  # [kv_head, key, freq]
    zk = zk.repeat_interleave(H // K, dim=0)
    logits = scale * (zq[:, None, :] * zk.conj()).real.sum(-1)  # [head, key]
    return torch.softmax(logits, -1).cumsum(-1).mean(-1)


@dataclass
class Stats:
    """Pooled pre-RoPE statistics of one layer (module docstring), complex128 / float64.

    Attributes:
        q_mean: ``[head, freq]`` mu_q; q_sq: ``[head, freq]`` Q2 = E|z_q|^2.
        k_mean: ``[kv_head, freq]`` mu_k; k_sq: ``[kv_head, freq]`` K2.
        sink_mean: ``[kv_head, skip, freq]`` mean of keys 0..skip-1; sink_sq: ``[kv_head, skip, freq]`` their E|z|^2.
    """

    q_mean: torch.Tensor
    q_sq: torch.Tensor
    k_mean: torch.Tensor
    k_sq: torch.Tensor
    sink_mean: torch.Tensor
    sink_sq: torch.Tensor

    def zeroth_order(self) -> "Stats":
        """The same means with no spread (second moments = |mean|^2) and every sink key replaced by the bulk key mean:
        kvpress's case."""
        K, S, _ = self.sink_mean.shape
        km = self.k_mean[:, None, :].expand(K, S, -1)
        return Stats(self.q_mean, self.q_mean.abs() ** 2, self.k_mean, self.k_mean.abs() ** 2, km, km.abs() ** 2)


@dataclass
class Predicted:
    """The predicted attention of one layer's heads on a prompt of ``n_pos`` tokens (``predict``).

    Attributes:
        lag_weight: ``[head, pos]`` ``exp(m(delta) - shift)`` for delta = 0..pos-1 (bulk keys, before the gain).
        gain: ``[head, pos]`` ``exp(phi(v, n_i))`` per query i (0 where the query sees no bulk key).
        sink_weight: ``[head, pos, skip]`` ``exp(m_j(i) - shift)``, 0 where key j is not visible to i.
        norm: ``[head, pos]`` Z_i, the sum of every visible key's weight of query i.
        skip: number of sink keys; window: the sliding window (None: full causal).
    """

    lag_weight: torch.Tensor
    gain: torch.Tensor
    sink_weight: torch.Tensor
    norm: torch.Tensor
    skip: int
    window: int | None

    @property
    def n_pos(self) -> int:
        """Prompt length the prediction is for."""
        return self.lag_weight.shape[1]

    def matrix(self) -> Float[torch.Tensor, "head q_pos k_pos"]:
        """``[head, pos, pos]`` float64 predicted ``A(i, j)`` (materialised: tests and small ``pos`` only)."""
        H, N = self.lag_weight.shape
        i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
        vis = (j <= i) & ((i - j) < (self.window or N + 1))
        bulk = self.lag_weight[:, (i - j).clamp(min=0)] * self.gain[:, :, None] * (vis & (j >= self.skip))
        bulk[:, :, : self.skip] = self.sink_weight
        return bulk / self.norm[:, :, None]


def rem_gain(v: Float[torch.Tensor, "head"], n: Float[torch.Tensor, "pos"]) -> Float[torch.Tensor, "head pos"]:
    """``phi(v, n)``: log of the typical mean weight of ``n`` keys with i.i.d. Gaussian logit noise of variance ``v``
    relative to a noiseless key: ``v / 2`` when ``v <= 2 ln n``, else ``sqrt(2 v ln n) - ln n`` (random energy model,
    Derrida 1981, Phys. Rev. B 24, 2613: the sum freezes onto its largest terms); 0 for ``n <= 1``."""
    ln = torch.log(n.double().clamp(min=1))[None, :]
    v = v.double().clamp(min=0)[:, None]
    return torch.where(v <= 2 * ln, v / 2, torch.sqrt(2 * v * ln) - ln)


def predict(st: Stats, inv_freq: Float[torch.Tensor, "freq"], gain2: Float[torch.Tensor, "freq"], scale: float,
            n_pos: int, *, window: int | None = None, softcap: float | None = None) -> Predicted:
    """The predicted expected attention of every query head of one layer on a prompt of ``n_pos`` tokens (module
    docstring; derivation in ``docs/concepts/kv_budget.md``).

    Args:
        st: the layer's pooled statistics (``Stats``; GQA: query head h reads kv head ``h // (head / kv_head)``).
        inv_freq: ``[freq]`` theta_l, radians per position; gain2: ``[freq]`` s_l^2 (1 for default RoPE).
        scale: the layer's logit scale; n_pos: prompt length (tokens); window: sliding window; softcap: the model's
            logit soft-cap, applied to the mean logits.

    Raises:
        ValueError: ``n_pos`` < 1 or shapes that do not match.
    """
    H, F = st.q_mean.shape
    K, S = st.sink_mean.shape[:2]
    if n_pos < 1 or st.k_mean.shape != (K, F) or H % K or inv_freq.shape != (F,):
        raise ValueError(f"predict: need n_pos >= 1 and q [head, freq], k [kv_head, freq] with head % kv_head == 0 and "
                         f"inv_freq [freq]; got n_pos {n_pos}, q {tuple(st.q_mean.shape)}, k {tuple(st.k_mean.shape)}, "
                         f"inv_freq {tuple(inv_freq.shape)}")
    g = torch.arange(H) // (H // K)
    c = scale * gain2.double()  # [freq]
    theta = inv_freq.double()
    N = n_pos
    delta = torch.arange(N, dtype=torch.float64)
    phase = torch.polar(torch.ones(N, F, dtype=torch.float64), delta[:, None] * theta[None, :])  # [pos, freq]
    M = st.q_mean * st.k_mean[g].conj() * c  # [head, freq]
    m = (M @ phase.T).real  # [head, delta]
    v = (c**2 * (st.q_sq * st.k_sq[g] - st.q_mean.abs() ** 2 * st.k_mean[g].abs() ** 2)).sum(-1) / 2
    i = torch.arange(N)
    jj = torch.arange(S)
    Ms = st.q_mean[:, None, :] * st.sink_mean[g].conj() * c  # [head, skip, freq]
    dist = (i[:, None] - jj[None, :]).double()  # [pos, skip]
    ms = torch.einsum("hsf,nsf->hns", Ms, torch.polar(torch.ones(N, S, F, dtype=torch.float64),
                                                      dist[..., None] * theta)).real  # [head, pos, skip]
    if softcap:
        m, ms = softcap * torch.tanh(m / softcap), softcap * torch.tanh(ms / softcap)
    win = window or N + 1
    vis_sink = (jj[None, :] <= i[:, None]) & ((i[:, None] - jj[None, :]) < win)  # [pos, skip]
    n_bulk = (i - S + 1).clamp(min=0).clamp(max=win)  # bulk keys j in [skip, i] with i - j < window
    phi = rem_gain(v, n_bulk.double())
    shift = torch.maximum(m.max(-1).values, ms.amax((1, 2)))[:, None]  # [head, 1]
    w = torch.exp(m - shift)
    ws = torch.exp(ms - shift[..., None]) * vis_sink
    cum = torch.cumsum(w, -1)
    top = (n_bulk - 1).clamp(min=0)  # the largest bulk lag of query i is min(i - skip, window - 1) = n_i - 1
    bulk_sum = torch.where(n_bulk > 0, cum[:, top], torch.zeros(()))
    gain = torch.where(n_bulk > 0, torch.exp(phi), torch.zeros(()))
    norm = gain * bulk_sum + ws.sum(-1)
    return Predicted(w, gain, ws, norm, S, window)


def slash_profile(p: Predicted) -> Float[torch.Tensor, "head delta"]:
    """``[head, pos]`` predicted average slash score at every lag (004 Def. 3.1, eq. 6): the mean of ``A(i, i - delta)``
    over queries ``i >= skip + delta`` (keys ``< skip`` dropped); NaN where no entry is valid."""
    H, N = p.lag_weight.shape
    per_q = p.gain / p.norm.clamp(min=1e-300)  # [head, pos]
    suffix = per_q.flip(-1).cumsum(-1).flip(-1)  # sum over i >= t
    d = torch.arange(N)
    first = d + p.skip
    count = (N - first).clamp(min=0).double()
    s = torch.where(first < N, suffix[:, first.clamp(max=N - 1)], torch.zeros(()))
    out = p.lag_weight * s / count.clamp(min=1)
    ok = (count > 0) & (d < (p.window or N + 1))
    return torch.where(ok, out, torch.full_like(out, math.nan))


def distant_mass(p: Predicted, sink: int, window: int) -> Float[torch.Tensor, "head"]:
    """``[head]`` predicted share of attention outside the first ``sink`` keys and the last ``window`` keys of each
    query (DuoAttention's A-shape; ``interp.measures.shape``'s ``distant_mass``), summed over queries over ``n_pos``."""
    H, N = p.lag_weight.shape
    i = torch.arange(N)
    cum = torch.cumsum(p.lag_weight, -1)
    lo = window  # distant bulk lags delta in [window, i - max(sink, skip)], below the model's sliding window
    hi = torch.minimum(i - max(sink, p.skip), torch.tensor((p.window or N + 1) - 1))
    ok = hi >= lo
    base = cum[:, lo - 1:lo] if lo >= 1 else torch.zeros(H, 1, dtype=cum.dtype)
    bulk = torch.where(ok, cum[:, hi.clamp(min=0)] - base, torch.zeros(()))
    jj = torch.arange(p.skip)
    far_sink = (jj[None, :] >= sink) & ((i[:, None] - jj[None, :]) >= window)  # [pos, skip]
    dist = p.gain * bulk + (p.sink_weight * far_sink).sum(-1)
    return (dist / p.norm.clamp(min=1e-300)).sum(-1) / N


def _check_q_len(v) -> str | None:
    return None if int(v) >= 1 else f"kvpress_q_len must be >= 1 position (kvpress: 500), got {v}"


class KVBudget(Measure):
    """Geometric prediction of distant mass and slash score from pre-RoPE statistics, and kvpress's on-the-fly
    DuoAttention score (module docstring)."""

    name = "kv_budget"
    summary = ("predicted distant mass and slash score from the cone (mean q / k, per-plane spread, sink keys) and the "
               "RoPE frequencies; kvpress's on-the-fly DuoAttention score")
    options = (Option("kv_budget", False, "also the geometric KV-budget predictor and kvpress's on-the-fly score "
                      "(interp.measures.kv_budget)"),
               Option("kvpress_q_len", KVPRESS_Q_LEN, "positions of kvpress's synthetic sequence (its q_len: 500; capped "
                      "at the prompt length)", check=_check_q_len))
    switch = "kv_budget"

    def columns(self, cfg):
        return [
            Column("geo_distant_mass", "predicted distant mass from the cone + pulse geometry with spread and sink keys "
                   "(docs/concepts/kv_budget.md; 004 Sec. 4, App. D)", compare=True),
            Column("geo_slash_score", "predicted best average slash score over the short lags (004 Def. 3.1, eq. 6)"),
            Column("geo_slash_delta", "lag of geo_slash_score", heatmap=False),
            Column("geo0_distant_mass", "zeroth-order predicted distant mass: mean q and k only, no spread, no sink keys"),
            Column("kvpress_score", "kvpress duo_attention_on_the_fly: area under the last query's cumulative attention "
                   "of the rotated mean q / k (per kv head; high = keep full)"),
        ]

    def entries(self, dims, cfg):
        L, H, K, F, S = dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.n_freq, int(cfg.skip)
        return [Entry("kvb_q_sum", (L, H, F, 2)), Entry("kvb_q_sq", (L, H, F)),
                Entry("kvb_k_sum", (L, K, F, 2)), Entry("kvb_k_sq", (L, K, F)),
                Entry("kvb_sink_sum", (L, K, S, F, 2)), Entry("kvb_sink_sq", (L, K, S, F)),
                Entry("kvb_gain2", (L, F)), Entry("kvb_kvpress", (L, K)),
                Entry("kvb_tokens", (2,), layer_axis=None)]  # sum of (pos - skip) and of pos over prompts

    def update(self, x):
        S, pair = min(int(x.config.skip), x.n_pos), x.card.pairing
        zq, zk = planes(x.q_pre[S:], pair), planes(x.k_pre, pair)
        sink = torch.zeros(zk.shape[1], int(x.config.skip), zk.shape[2], dtype=zk.dtype, device=zk.device)
        sink[:, :S] = zk[:S].transpose(0, 1)
        rot = rotation_table(torch.cat([x.q_pre, x.k_pre], 1), torch.cat([x.q_rot, x.k_rot], 1), pair)
        score = kvpress_score(x.q_pre, x.k_pre, rot, x.scale, min(int(x.config.kvpress_q_len), x.n_pos), pair)
        K = x.k_pre.shape[1]
        return {"kvb_q_sum": torch.view_as_real(zq.sum(0)), "kvb_q_sq": (zq.abs() ** 2).sum(0),
                "kvb_k_sum": torch.view_as_real(zk[S:].sum(0)), "kvb_k_sq": (zk[S:].abs() ** 2).sum(0),
                "kvb_sink_sum": torch.view_as_real(sink), "kvb_sink_sq": sink.abs() ** 2,
                "kvb_gain2": (rot.abs() ** 2).mean(0), "kvb_kvpress": score.view(K, -1).mean(-1)}

    def update_prompt(self, x):
        return {"kvb_tokens": torch.tensor([max(x.n_pos - int(x.config.skip), 0), x.n_pos], dtype=torch.float64)}

    def compute(self, s):
        from interp.measures.shape import budgets

        N = scanned_length(s)
        out = predicted(s, N, *budgets(N)["distant"])
        out["kvpress_score"] = (s.state["kvb_kvpress"] / prompt_count(s))[:, kv_index(s.card)]
        return out


def scanned_length(s) -> int:
    """Mean prompt length (tokens) of a summed scan with the ``kv_budget`` measure."""
    return max(1, int(round(float(s.state["kvb_tokens"][1] / prompt_count(s)))))


def predicted(s, n_pos: int, sink: int, window: int) -> dict[str, Float[torch.Tensor, "layer head"]]:
    """The predictor's columns for prompts of ``n_pos`` tokens (any length, not only the scanned one: nothing is
    materialised), distant mass outside the first ``sink`` and last ``window`` keys: ``geo_distant_mass``,
    ``geo_slash_score``, ``geo_slash_delta`` (over the config's ``short_lags``), ``geo0_distant_mass`` (zeroth order).

    Args:
        s: a summed scan with ``kv_budget=True`` (``ScanResult``: ``state``, ``card``, ``config``, ``meta``).

    Raises:
        KeyError: the scan ran without the ``kv_budget`` measure.
    """
    from interp.measures.inp import layer_inv_freq

    if "kvb_q_sum" not in s.state:
        raise KeyError("this scan ran without the kv_budget measure; rescan with ScanConfig(kv_budget=True) "
                       "(interp scan --measure kv_budget)")
    st, card, cfg = s.state, s.card, s.config
    P, n_bulk = prompt_count(s), st["kvb_tokens"][0].clamp(min=1)
    inv = layer_inv_freq(s)
    L, H = card.n_layers, card.n_heads
    out = {k: torch.full((L, H), math.nan, dtype=torch.float64)
           for k in ("geo_distant_mass", "geo_slash_score", "geo_slash_delta", "geo0_distant_mass")}
    short = torch.tensor([d for d in cfg.short_lags if d < n_pos], dtype=torch.long)
    for l in range(L):
        stats = layer_stats(st, l, P, n_bulk)
        args = (inv[l], st["kvb_gain2"][l] / P, card.attn_scale[l], n_pos)
        kw = dict(window=card.sliding_window[l], softcap=card.softcap)
        pred = predict(stats, *args, **kw)
        out["geo_distant_mass"][l] = distant_mass(pred, sink, window)
        if len(short):
            prof = slash_profile(pred)[:, short].nan_to_num(nan=-1.0)
            best, arg = prof.max(-1)
            out["geo_slash_score"][l] = torch.where(best < 0, math.nan, best)
            out["geo_slash_delta"][l] = torch.where(best < 0, math.nan, short[arg].double())
        out["geo0_distant_mass"][l] = distant_mass(predict(stats.zeroth_order(), *args, **kw), sink, window)
    return out


def layer_stats(state, layer: int, prompts, n_bulk) -> Stats:
    """The pooled ``Stats`` of ``layer`` from a summed state (``prompts``: prompt count; ``n_bulk``: bulk tokens summed)."""
    cz = lambda t: torch.view_as_complex(t.contiguous())  # noqa: E731
    return Stats(cz(state["kvb_q_sum"][layer]) / n_bulk, state["kvb_q_sq"][layer] / n_bulk,
                 cz(state["kvb_k_sum"][layer]) / n_bulk, state["kvb_k_sq"][layer] / n_bulk,
                 cz(state["kvb_sink_sum"][layer]) / prompts, state["kvb_sink_sq"][layer] / prompts)
