"""Average slash score and slash-dominant heads (SDH).

Source: paper 004 (Cheng, Zhang, Hou et al. 2026), Definition 3.1, eq. (6): for a head with
attention A (rows = queries), the average slash score at lag delta is
``E_prompts[ 1/#valid * sum_i A[i, i - delta] ]``, where entries that involve positions 0..3 (the
paper's 1..4, sink and warm-up tokens) are dropped. A head is kappa slash-dominant at delta when the
score >= kappa: short range delta in 0..4 with kappa = 0.1; long range 500 <= delta <= 5000 with
kappa = 1e-3 (App. C). The expectation is a mean over prompts of per-prompt means.

Long-range consistency rule (this project; motivated by 004 App. C and Table 6, which check long-range
SDHs on random-token prompts): a mean over prompts lets one prompt whose text repeats a passage d
tokens later (copied by induction-like heads) outrank every positional slash. So per prompt and lag
the state also counts the prompts whose own score is >= kappa_long (``long_hits``), with the sum of
those prompts' scores and ids (which name the prompt when it is the only one) and the sum of squared
per-prompt scores (spread). A long lag counts as slash-dominant only when it holds in at least
``long_min_frac`` (default 2/3) of the prompts that reach it (``consistent_long_columns``).

Leave-one-prompt-out (``long_leave_one_out``, default on; issue 21): the fraction rule alone lets one prompt's
repeat pass at a neighbouring lag (smollm2-135m, 3 x 6000 pydoc tokens: L7H7 flagged at lag 1231, mean 0.0011,
held in 2 of 3 prompts, while prompt 2 alone scores 0.020 at 1230). So a long lag reached by ``n >= 2`` prompts
must also survive dropping any one of them: for every prompt p, (a) the other prompts' hit fraction is
>= ``long_min_frac`` and (b) the other prompts' mean score is >= ``kappa_long``. With ``h`` hits, (a) is exactly
``(h - 1) / (n - 1) >= long_min_frac`` (dropping a hit is the worst case). (b) needs the largest per-prompt
score ``m``, which additive sums do not keep; the rule uses an upper bound ``m_ub`` from the sums it has:
``min(mu + sigma * sqrt(n - 1), H - (h - 1) * kappa_long)`` (Samuelson's inequality with the mean ``mu`` and the
population spread ``sigma`` of the per-prompt scores, from ``slash_mean_sum`` and ``slash_sq_sum``; and the
sum ``H`` of the hits' scores, ``long_hit_score``, less the other hits' floor; ``kappa_long`` when ``h = 0``), and
asks ``(S - m_ub) / (n - 1) >= kappa_long`` (``S`` the sum of scores). ``m_ub >= m``, so the test is conservative:
a lag that passes it passes the exact leave-one-out test; it can refuse a lag whose exact leave-one-out mean
just clears ``kappa_long`` when the prompts' scores are very uneven (for ``n = 2`` the bound is exact). With one
prompt there is nothing to leave out and the plain fraction rule applies (scan >= 3 prompts for the rule to
separate a repeat from a position). ``long_leave_one_out=False`` restores the plain fraction rule.

Which lags are scored: lags 0..63 (the report's short profile, and at least the short lags) and the ``long_lags``
range (``profile_window``); other lags are NaN in ``slash_scores`` (their prompts are not counted), so the engine
need not compute them (the GPU engine skips their tiles). ``full_profile=True`` (``interp scan --full-profile``)
scores every lag, for studies of the whole profile's shape.
"""

from __future__ import annotations

import pandas as pd
import torch
from jaxtyping import Float

from interp.measures.base import Column, Dims, Entry, LayerInput, Measure, Option, PromptInput, Summed

SKIP = 4  # positions 0..SKIP-1 are excluded (paper 004: "positions 1-4")


def valid_counts(n_pos: int, skip: int = SKIP, device: torch.device | str | None = None) -> Float[torch.Tensor, "delta"]:
    """``[delta]`` number of entries ``A[i, i - delta]`` with ``i - delta >= skip``: ``max(0, N - delta - skip)``."""
    return (n_pos - skip - torch.arange(n_pos, dtype=torch.float64, device=device)).clamp(min=0)


def prompt_slash(lag_sum: Float[torch.Tensor, "head delta"], n_pos: int, skip: int = SKIP, kappa_long: float | None = None,
                 prompt_id: int = 0) -> dict[str, torch.Tensor]:
    """One prompt's additive contribution to the slash state.

    Args:
        lag_sum: ``[head, delta]`` sums over queries of ``A[i, i - delta]`` with keys < ``skip`` zeroed.
        n_pos: the prompt's length; skip: positions dropped (0..3).
        kappa_long: if given, also the per-prompt long-range entries (see module docstring).
        prompt_id: the prompt's global index (recorded where it is slash-dominant, to name content repeats).

    Returns:
        ``slash_mean_sum [head, delta]`` (this prompt's mean ``A[i, i - delta]``), ``slash_prompts [delta]``
        (1 where the lag has entries), and with ``kappa_long``: ``slash_sq_sum`` (squared mean),
        ``long_hits`` (1 where the mean >= kappa_long), ``long_hit_score`` (the mean there),
        ``long_hit_prompt`` (``prompt_id`` there), all ``[head, delta]`` float64.
    """
    cnt = valid_counts(n_pos, skip, lag_sum.device)
    ok = cnt > 0
    mean = torch.where(ok, lag_sum.double() / cnt.clamp(min=1), 0.0)
    out = {"slash_mean_sum": mean, "slash_prompts": ok.double()}
    if kappa_long is not None:
        hit = (mean >= kappa_long) & ok
        out.update(slash_sq_sum=mean**2, long_hits=hit.double(), long_hit_score=torch.where(hit, mean, 0.0),
                   long_hit_prompt=hit.double() * float(prompt_id))
    return out


def lag_means(state, sums: torch.Tensor) -> torch.Tensor:
    """``sums`` of per-prompt means (last axis a lag) divided by the prompts that reach each lag (NaN where none does)."""
    n = state["slash_prompts"]
    return sums / torch.where(n > 0, n, torch.nan)


def slash_scores(state) -> Float[torch.Tensor, "layer head delta"]:
    """Average slash score at every lag (NaN where no prompt was long enough)."""
    return lag_means(state, state["slash_mean_sum"])


def slash_from_pattern(A: Float[torch.Tensor, "head q_pos k_pos"], skip: int = SKIP) -> Float[torch.Tensor, "head delta"]:
    """Reference: per-lag mean of ``A[i, i - delta]`` over ``i - delta >= skip`` from a full pattern."""
    H, N, _ = A.shape
    out = torch.full((H, N), torch.nan, dtype=torch.float64)
    for d in range(N - skip):
        out[:, d] = torch.diagonal(A, offset=-d, dim1=1, dim2=2)[:, skip:].double().mean(dim=1)
    return out


def sdh_columns(scores: Float[torch.Tensor, "layer head delta"], lags: range, kappa: float, prefix: str, flag: str) -> dict[str, torch.Tensor]:
    """Best lag in ``lags`` per head (``{prefix}delta``), its score (``{prefix}score``) and ``flag`` = score >= kappa.

    Lags beyond the scanned length are ignored; a head with no valid lag gets NaN / False.
    """
    L, H, n = scores.shape
    lo, hi = lags.start, min(lags.stop, n)
    if hi <= lo:
        nan = torch.full((L, H), torch.nan, dtype=torch.float64)
        return {f"{prefix}score": nan, f"{prefix}delta": nan, flag: torch.zeros(L, H, dtype=torch.bool)}
    best, arg = torch.nan_to_num(scores[..., lo:hi], nan=-1.0).max(dim=-1)
    best = torch.where(best < 0, torch.nan, best)
    return {f"{prefix}score": best, f"{prefix}delta": (arg + lo).double(), flag: best >= kappa}


def loo_mean_bound(state, lo: int, hi: int, kappa: float) -> Float[torch.Tensor, "layer head lag"]:
    """Lower bound of the smallest leave-one-prompt-out mean score at lags ``lo..hi-1`` (module docstring).

    ``(S - m_ub) / (n - 1)`` with ``m_ub`` an upper bound of the largest per-prompt score from the additive sums;
    NaN where fewer than two prompts reach the lag.
    """
    n = state["slash_prompts"][lo:hi]
    S = state["slash_mean_sum"][..., lo:hi]
    mu = S / n.clamp(min=1)
    var = (state["slash_sq_sum"][..., lo:hi] / n.clamp(min=1) - mu**2).clamp(min=0)
    samuelson = mu + (var * (n - 1).clamp(min=0)).sqrt()
    h = state["long_hits"][..., lo:hi]
    hit_bound = torch.where(h >= 1, state["long_hit_score"][..., lo:hi] - (h - 1) * kappa, torch.full_like(h, kappa))
    m_ub = torch.minimum(samuelson, hit_bound)
    return torch.where(n >= 2, (S - m_ub) / (n - 1).clamp(min=1), torch.nan)


def consistent_lags(state, lo: int, hi: int, kappa: float, min_frac: float, leave_one_out: bool = True) -> torch.Tensor:
    """``[layer, head, lag]`` True where a long lag in ``lo..hi-1`` passes the consistency rule (module docstring):
    hit fraction >= ``min_frac`` and, with ``leave_one_out`` and >= 2 prompts, the same after dropping any prompt
    (exact) with a leave-one-out mean >= ``kappa`` (``loo_mean_bound``)."""
    n = state["slash_prompts"][lo:hi]
    h = state["long_hits"][..., lo:hi]
    ok = h / n.clamp(min=1) >= min_frac - 1e-12
    if not leave_one_out:
        return ok
    loo = ((h - 1) / (n - 1).clamp(min=1) >= min_frac - 1e-12) & (loo_mean_bound(state, lo, hi, kappa) >= kappa - 1e-15)
    return torch.where(n >= 2, ok & loo, ok)


def consistent_long_columns(state, lags: range, kappa: float, min_frac: float, leave_one_out: bool = True) -> dict[str, torch.Tensor]:
    """Long-range SDH columns under the consistency rule (module docstring), one value per (layer, head).

    A lag in ``lags`` is *consistent* when the fraction of prompts (among those long enough to reach it)
    whose own score is >= ``kappa`` is >= ``min_frac`` and, with ``leave_one_out``, when that and a mean >= ``kappa``
    survive dropping any one prompt (``consistent_lags``). Returns ``long_slash_score`` / ``long_slash_delta``
    (best mean score among consistent lags; NaN where a head has none), ``long_slash_prompt_frac`` (the
    fraction at that lag), ``is_sdh_long`` (a consistent lag with mean >= kappa), and the unfiltered best lag
    (``long_any_slash_score``, ``long_any_slash_delta``, ``long_any_prompt_frac``: the pre-rule definition,
    kept to show content repeats). All ``[layer, head]``; NaN / False when ``lags`` is empty.

    Raises:
        KeyError: the state has no per-prompt long-range entries (it was written by an older interp; rescan).
    """
    scores = slash_scores(state)
    if "long_hits" not in state:
        raise KeyError("this scan's state has no per-prompt long-range counts (written by an older interp); rescan it")
    L, H, n = scores.shape
    lo, hi = lags.start, min(lags.stop, n)
    nan = torch.full((L, H), torch.nan, dtype=torch.float64)
    if hi <= lo:
        return {"long_slash_score": nan, "long_slash_delta": nan, "long_slash_prompt_frac": nan, "is_sdh_long": torch.zeros(L, H, dtype=torch.bool),
                "long_any_slash_score": nan, "long_any_slash_delta": nan, "long_any_prompt_frac": nan}
    sc = scores[..., lo:hi]
    frac = state["long_hits"][..., lo:hi] / state["slash_prompts"][lo:hi].clamp(min=1)
    out = {}
    rule = consistent_lags(state, lo, hi, kappa, min_frac, leave_one_out)
    for tag, eligible in (("long_slash", rule), ("long_any_slash", torch.ones_like(frac, dtype=torch.bool))):
        best, arg = torch.where(eligible, sc.nan_to_num(nan=-1.0), -1.0).max(dim=-1)
        none = best < 0
        out[f"{tag}_score"] = torch.where(none, torch.nan, best)
        out[f"{tag}_delta"] = torch.where(none, torch.nan, (arg + lo).double())
        f = frac.gather(-1, arg[..., None])[..., 0]
        out["long_slash_prompt_frac" if tag == "long_slash" else "long_any_prompt_frac"] = torch.where(none, torch.nan, f)
    out["is_sdh_long"] = out["long_slash_score"].nan_to_num(nan=-1.0) >= kappa
    return out


def lag_table(scores: Float[torch.Tensor, "layer head delta"], lags: range) -> pd.DataFrame:
    """Tidy ``(layer, head, delta, slash_score)`` rows for the given lags (those that fit)."""
    L, H, n = scores.shape
    deltas = [d for d in lags if d < n]
    sub = scores[..., deltas]
    idx = pd.MultiIndex.from_product([range(L), range(H), deltas], names=["layer", "head", "delta"])
    return pd.DataFrame({"slash_score": sub.reshape(-1).numpy()}, index=idx).reset_index()


# --------------------------------------------------------------------------------------------
# The measure: state, update, columns; accessors on a summed scan
# --------------------------------------------------------------------------------------------

LONG_ENTRIES = ("slash_sq_sum", "long_hits", "long_hit_score", "long_hit_prompt")
PROFILE_LAGS = 64  # lags 0..63: the report's short lag profile; with long_lags, what the default scan scores


def profile_window(cfg) -> tuple[tuple[int, int], tuple[int, int]]:
    """The inclusive lag ranges a scan without ``full_profile`` scores: ``0..max(63, short lags)`` and ``long_lags``."""
    return (0, max(PROFILE_LAGS - 1, *cfg.short_lags)), (int(cfg.long_lags[0]), int(cfg.long_lags[1]))


def lag_mask(n_pos: int, cfg, device=None) -> torch.Tensor:
    """``[delta]`` bool: the lags ``0..n_pos-1`` inside ``profile_window(cfg)``."""
    d = torch.arange(n_pos, device=device)
    ok = torch.zeros(n_pos, dtype=torch.bool, device=device)
    for lo, hi in profile_window(cfg):
        ok |= (d >= lo) & (d <= hi)
    return ok


def _check_frac(v) -> str | None:
    return None if 0 < v <= 1 else f"long_min_frac must lie in (0, 1], got {v:g} (e.g. 2/3: a long lag must hold in 2 of 3 prompts)"


class Slash(Measure):
    """Average slash score per lag and slash-dominant heads, short and long range (module docstring; 004 Def. 3.1, eq. 6)."""

    name = "slash"
    summary = "average slash score per lag, SDH at short (0..4) and long (500..5000) lags with the consistency rule (004 Def. 3.1)"
    options = (
        Option("short_lags", (0, 1, 2, 3, 4), "lags of the short-range slash columns (paper 004: 0..4)", convert=tuple),
        Option("kappa", 0.1, "SDH threshold for the short lags (004: 0.1)"),
        Option("long_lags", (500, 5000), "(lo, hi) inclusive range of long lags (004 App. C: 500..5000)", convert=tuple),
        Option("long_min_entries", 1000, "a long lag counts only if each prompt has at least this many entries A[i, i - delta]"),
        Option("kappa_long", 1e-3, "SDH threshold for long lags (004 App. C: 1e-3)"),
        Option("long_min_frac", 2 / 3, "a long lag is slash-dominant only if it is so in at least this fraction of the prompts "
               "that reach it (one prompt's repeated passage must not make a long-range SDH)", check=_check_frac),
        Option("long_leave_one_out", True, "a long lag must also hold (fraction and mean) after dropping any one prompt, "
               "so one prompt's repeat cannot pass at a neighbouring lag (module docstring; False: fraction rule only)"),
        Option("skip", SKIP, "positions 0..skip-1 are excluded from slash scores and InP sums (004: positions 1-4)"),
        Option("full_profile", False, "score every lag (the whole lag profile, for shape and variant studies); by default only "
               f"lags 0..{PROFILE_LAGS - 1} (the report's short profile) and the long_lags range are scored, the others are NaN"),
    )
    products = ("lag",)

    def lag_window(self, cfg):
        return None if cfg.full_profile else profile_window(cfg)

    def columns(self, cfg):
        short = [Column(f"slash_d{d}", f"average slash score at lag {d}: mean over prompts of the mean of A[i, i-{d}], "
                        f"entries touching positions < skip dropped (004 Def. 3.1, eq. 6)") for d in cfg.short_lags]
        return short + [
            Column("slash_score", "best average slash score over the short lags (004 Def. 3.1, eq. 6)"),
            Column("slash_delta", "lag of slash_score", heatmap=False),
            Column("is_sdh", "slash-dominant head: slash_score >= kappa (0.1) (004 Def. 3.1)", heatmap=False),
            Column("long_slash_score", "best average slash score over long lags that hold in >= long_min_frac of the prompts, also with any one prompt left out (004 App. C)"),
            Column("long_slash_delta", "lag of long_slash_score", heatmap=False),
            Column("long_slash_prompt_frac", "fraction of the prompts reaching long_slash_delta whose own score there is >= kappa_long"),
            Column("long_any_slash_score", "best average slash score over all long lags, without the consistency rule (004 App. C)"),
            Column("long_any_slash_delta", "lag of long_any_slash_score", heatmap=False),
            Column("long_any_prompt_frac", "fraction of prompts whose own score at long_any_slash_delta is >= kappa_long", heatmap=False),
            Column("is_sdh_long", "long-range SDH: a consistent long lag with score >= kappa_long (1e-3) (004 App. C)", heatmap=False),
        ]

    def entries(self, dims: Dims, cfg):
        L, H, N = dims.n_layers, dims.n_heads, dims.n_pos
        per_lag = [Entry(n, (L, H, N), per_position=True) for n in ("slash_mean_sum", *LONG_ENTRIES)]
        return [*per_lag, Entry("slash_prompts", (N,), layer_axis=None, per_position=True)]

    def update(self, x: LayerInput):
        lag = x.products["lag"]
        if not x.config.full_profile:  # lags outside the window: not computed (the engine may leave them 0 or skip them)
            lag = lag * lag_mask(x.n_pos, x.config, lag.device)
        part = prompt_slash(lag, x.n_pos, x.config.skip, x.config.kappa_long, x.prompt_id)
        return {n: part[n] for n in ("slash_mean_sum", *LONG_ENTRIES)}

    def update_prompt(self, x: PromptInput):
        ok = valid_counts(x.n_pos, x.config.skip) > 0
        if not x.config.full_profile:  # a lag outside the window counts no prompt, so its score is NaN, not 0
            ok &= lag_mask(x.n_pos, x.config)
        return {"slash_prompts": ok.double()}

    def compute(self, s: Summed):
        cfg = s.config
        scores = slash_scores(s.state)
        L, H, n = scores.shape
        cols = {f"slash_d{d}": scores[..., d] if d < n else torch.full((L, H), torch.nan) for d in cfg.short_lags}
        short = range(min(cfg.short_lags), max(cfg.short_lags) + 1)
        cols.update(sdh_columns(scores, short, cfg.kappa, "slash_", "is_sdh"))
        cols.update(consistent_long_columns(s.state, long_lag_range(s), cfg.kappa_long, cfg.long_min_frac, cfg.long_leave_one_out))
        return cols


def long_lag_range(s: Summed) -> range:
    """Long lags that fit the scanned prompts with ``long_min_entries`` entries each (may be empty)."""
    cfg = s.config
    lo, hi = cfg.long_lags
    n = s.state["slash_prompts"].shape[-1]  # lags scanned (the longest prompt)
    return range(lo, max(lo, min(hi, n - cfg.skip - cfg.long_min_entries) + 1))


def long_min_tokens(cfg) -> int:
    """The shortest prompt (tokens) with a long lag: ``long_lags[0] + skip + long_min_entries`` (1504 by default:
    lag 500 needs 1000 entries ``A[i, i - 500]`` whose keys lie past the first 4 positions)."""
    return int(cfg.long_lags[0]) + int(cfg.skip) + int(cfg.long_min_entries)


def no_long_lags(s: Summed) -> str:
    """Why a scan has no long lag (so ``long_lag_table`` and ``content_repeats`` have no rows), as one clause naming
    the prompt length that would give one; ``""`` when ``long_lag_range(s)`` is not empty."""
    if long_lag_range(s):
        return ""
    cfg, n = s.config, s.state["slash_prompts"].shape[-1]
    lo, hi = cfg.long_lags
    return (f"no long lag measured: lags {lo}..{hi} need {cfg.long_min_entries} entries per prompt past the first {cfg.skip} "
            f"positions, so prompts of at least {long_min_tokens(cfg)} tokens, and these have {n}")


def long_lag_table(s: Summed, top: int = 5) -> pd.DataFrame:
    """Top ``top`` long lags per head by mean score, with the consistency rule's view of each lag.

    Columns: ``layer, head, rank, delta, slash_score`` (mean over prompts), ``prompt_frac`` (fraction of
    prompts whose own score at the lag is >= kappa_long), ``consistent`` (the consistency rule, ``consistent_lags``),
    ``is_sdh_long`` (consistent and mean >= kappa_long), ``slash_sd`` (spread of the per-prompt scores).
    Empty if the prompts are too short for long lags.
    """
    cols = ["layer", "head", "rank", "delta", "slash_score", "prompt_frac", "consistent", "is_sdh_long", "slash_sd"]
    lags = long_lag_range(s)
    if not lags:
        return pd.DataFrame(columns=cols)
    st, cfg = s.state, s.config
    lo, hi = lags.start, lags.stop
    window = slash_scores(st)[..., lo:hi].nan_to_num(nan=-1.0)
    n = st["slash_prompts"][lo:hi].clamp(min=1)
    frac = st["long_hits"][..., lo:hi] / n
    mean = st["slash_mean_sum"][..., lo:hi] / n
    sd = (st["slash_sq_sum"][..., lo:hi] / n - mean**2).clamp(min=0).sqrt()
    rule = consistent_lags(st, lo, hi, cfg.kappa_long, cfg.long_min_frac, cfg.long_leave_one_out)
    k = min(top, window.shape[-1])
    val, idx = window.topk(k, dim=-1)
    L, H = val.shape[:2]
    rows = []
    for l in range(L):
        for h in range(H):
            for r in range(k):
                if val[l, h, r] < 0:
                    continue
                i = int(idx[l, h, r])
                f = float(frac[l, h, i])
                ok = bool(rule[l, h, i])
                rows.append((l, h, r + 1, i + lo, float(val[l, h, r]), f, ok, ok and float(val[l, h, r]) >= cfg.kappa_long, float(sd[l, h, i])))
    return pd.DataFrame(rows, columns=cols)


def content_repeats(s: Summed, heads: pd.DataFrame) -> pd.DataFrame:
    """Heads whose best long lag by mean score is slash-dominant in fewer than ``long_min_frac`` of the prompts.

    Such a lag comes from text that repeats within a prompt (copied by induction-like heads), not from
    position. Columns: ``layer, head, delta, slash_score`` (mean over prompts), ``prompts_hit`` (how many
    prompts score >= kappa_long there), ``prompts``, ``prompt`` (the global index of that prompt when it is
    the only one, else -1), ``prompt_score`` (mean score of the prompts that hit).
    """
    cols = ["layer", "head", "delta", "slash_score", "prompts_hit", "prompts", "prompt", "prompt_score"]
    if "long_any_slash_delta" not in heads:
        return pd.DataFrame(columns=cols)
    st, cfg = s.state, s.config
    sel = heads[(heads["long_any_slash_score"] >= cfg.kappa_long) & (heads["long_any_prompt_frac"] < cfg.long_min_frac - 1e-12)]
    rows = []
    for r in sel.itertuples():
        d = int(r.long_any_slash_delta)
        hits = float(st["long_hits"][r.layer, r.head, d])
        pid = int(round(float(st["long_hit_prompt"][r.layer, r.head, d]))) if hits == 1 else -1
        score = float(st["long_hit_score"][r.layer, r.head, d]) / hits if hits else float("nan")
        rows.append((r.layer, r.head, d, r.long_any_slash_score, int(hits), int(st["slash_prompts"][d]), pid, score))
    return pd.DataFrame(rows, columns=cols).sort_values("slash_score", ascending=False)


OOD_COLUMNS = (
    Column("ood_slash_score", "average slash score on random-token prompts at the head's slash_delta (004 Sec. 3.1)"),
    Column("ood_ratio", "OOD ratio: random-token / text slash score at slash_delta (004 Sec. 3.1, Fig. 3b, Table 3)"),
    Column("long_ood_slash_score", "random-token slash score at long_slash_delta (004 Table 6); NaN without a consistent long lag"),
)


def add_ood(heads: pd.DataFrame, ood: Summed) -> pd.DataFrame:
    """Add ``OOD_COLUMNS`` to a head table from a scan of random-token prompts of the same model: ``ood_slash_score``
    (random-token score at each head's ``slash_delta``), ``ood_ratio`` = OOD score / text score (paper 004, Sec. 3.1,
    Fig. 3b and Table 3), and ``long_ood_slash_score`` (random-token score at ``long_slash_delta``; 004 Table 6; NaN
    where the head has no consistent long lag or the OOD prompts are shorter).

    Raises:
        ValueError: the OOD scan is of another model.
    """
    import numpy as np

    if ood.card.name != heads.attrs.get("model", ood.card.name) or ood.card.n_heads != heads["head"].max() + 1:
        raise ValueError("the OOD scan must be of the same model as the head table")
    scores = slash_scores(ood.state).numpy()
    d = heads["slash_delta"].fillna(0).to_numpy().astype(int)
    val = scores[heads["layer"].to_numpy(), heads["head"].to_numpy(), d]
    out = heads.copy()
    out["ood_slash_score"] = val
    out["ood_ratio"] = val / out["slash_score"]
    if "long_slash_delta" in out:  # random-token score at each head's consistent long lag (004 Table 6)
        dl = out["long_slash_delta"].to_numpy()
        ok = ~np.isnan(dl) & (np.nan_to_num(dl, nan=0) < scores.shape[-1])
        idx = np.where(ok, np.nan_to_num(dl, nan=0), 0).astype(int)
        out["long_ood_slash_score"] = np.where(ok, scores[heads["layer"].to_numpy(), heads["head"].to_numpy(), idx], np.nan)
    return out
