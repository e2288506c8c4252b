"""Tables derived from a scan for the report and the output folder (long-range lags, content repeats)."""

from __future__ import annotations

import pandas as pd

from interp.scan import ScanResult

TOP_LONG_LAGS = 5


def long_lag_table(result: ScanResult, top: int = TOP_LONG_LAGS) -> pd.DataFrame:
    """Top ``top`` long lags per head by mean score, with the consistency rule's view of each lag.

    Columns: ``layer, head, rank, delta, slash_score`` (mean over prompts), ``prompt_frac`` (fraction of
    prompts whose own score at the lag is >= kappa_long), ``consistent`` (``prompt_frac >= long_min_frac``),
    ``is_sdh_long`` (consistent and mean >= kappa_long), ``slash_sd`` (spread of the per-prompt scores).
    Empty if the prompts are too short for long lags.
    """
    cols = ["layer", "head", "rank", "delta", "slash_score", "prompt_frac", "consistent", "is_sdh_long", "slash_sd"]
    lags = result.long_lag_range()
    if not lags:
        return pd.DataFrame(columns=cols)
    st, cfg = result.state, result.config
    lo, hi = lags.start, lags.stop
    window = result.scores[..., lo:hi].nan_to_num(nan=-1.0)
    n = st["slash_prompts"][lo:hi].clamp(min=1)
    frac = st["long_hits"][..., lo:hi] / n
    mean = st["slash_mean_sum"][..., lo:hi] / n
    sd = (st["slash_sq_sum"][..., lo:hi] / n - mean**2).clamp(min=0).sqrt()
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
                ok = f >= cfg.long_min_frac - 1e-12
                rows.append((l, h, r + 1, i + lo, float(val[l, h, r]), f, ok, ok and float(val[l, h, r]) >= cfg.kappa_long, float(sd[l, h, i])))
    return pd.DataFrame(rows, columns=cols)


def content_repeats(result: ScanResult, heads: pd.DataFrame) -> pd.DataFrame:
    """Heads whose best long lag by mean score is slash-dominant in fewer than ``long_min_frac`` of the prompts.

    Such a lag comes from text that repeats within a prompt (copied by induction-like heads), not from
    position. Columns: ``layer, head, delta, slash_score`` (mean over prompts), ``prompts_hit`` (how many
    prompts score >= kappa_long there), ``prompts``, ``prompt`` (the global index of that prompt when it is
    the only one, else -1), ``prompt_score`` (mean score of the prompts that hit).
    """
    cols = ["layer", "head", "delta", "slash_score", "prompts_hit", "prompts", "prompt", "prompt_score"]
    if "long_any_slash_delta" not in heads:
        return pd.DataFrame(columns=cols)
    st, cfg = result.state, result.config
    sel = heads[(heads["long_any_slash_score"] >= cfg.kappa_long) & (heads["long_any_prompt_frac"] < cfg.long_min_frac - 1e-12)]
    rows = []
    for r in sel.itertuples():
        d = int(r.long_any_slash_delta)
        hits = float(st["long_hits"][r.layer, r.head, d])
        pid = int(round(float(st["long_hit_prompt"][r.layer, r.head, d]))) if hits == 1 else -1
        score = float(st["long_hit_score"][r.layer, r.head, d]) / hits if hits else float("nan")
        rows.append((r.layer, r.head, d, r.long_any_slash_score, int(hits), int(st["slash_prompts"][d]), pid, score))
    return pd.DataFrame(rows, columns=cols).sort_values("slash_score", ascending=False)
