"""Head atlas: every head's scores for the head types the field names, and its role labels, from one text pass and one
repeated-random pass (and, optionally, the retrieval pass), with the frequency band attribution of each role.

Passes (each an exact streaming ``scan``; nothing materialises ``[head, pos, pos]``):

- **text** (``corpus``, ``prompts`` x ``tokens``): every always-on measure (slash score / SDH, spectrum r1, sinks...),
  the token-matched scores (``prev_token_score, duplicate_token_score, induction_score``: TransformerLens
  ``detect_head``), the shape of attention (entropy, vertical mass, A-shape / vertical-slash coverage, distant
  mass / streaming: StreamingLLM, MInference, DuoAttention), the heavy-hitter key tokens (``interp.measures.heavy_hitters``,
  shown in the text pass's report) and the per-plane InP (004 eq. 8-9, band use);
- **repeated-random** (the same count and length; BOS, r, r, ... with ``repeats`` copies): the token-matched scores
  and RazorAttention's echo score, as ``rr_prev_token_score, rr_duplicate_token_score, rr_induction_score,
  rr_echo_score`` (names fixed: scripts rely on them);
- **retrieval** (optional): Wu et al.'s retrieval score on needle-in-a-haystack decoding (``interp.experiments.retrieval``).

With ``ablate`` both scans also carry the three band ablations of 004 (``interp.rope.band_ablations``: high /
medium / low planes unrotated, counterfactual, from the same pass) and the atlas gains each role score without
each band (``<score>_wo_high`` ...): which frequencies each head type needs.

Roles (``ROLES``; a head may hold several): ``sdh`` (``is_sdh``, 004 Def. 3.1), ``sink`` (``has_sink``, Gu et al.),
``previous_token``, ``duplicate_token``, ``induction``, ``echo`` (a score at least ``ROLE_SHARE`` = 0.4 of the way from
``chance``, the score of a head attending uniformly over its causal keys, to the share of queries that *can* attend such
a key, ``attainable``: the rule of ARENA's / TransformerLens' induction-head exercises, "mean attention on the target
over the queries that have one > 0.4", rescaled to ``detect_head``'s mean over all queries and measured from chance,
so that a small alphabet, where any head puts much attention on matching tokens, does not pass it),
``streaming`` (``is_streaming``: distant mass below ``ScanConfig.streaming_threshold``; DuoAttention), ``retrieval``
(retrieval score > 0.1, Wu et al. 2024 Sec. 2). A head's ``role`` (its colour in the grid) is the first of its roles
in ``ROLES`` order, most specific first; ``none`` if it has none. With ``AtlasConfig.support`` each head also gets
``support_<role>``, the share of bootstrap resamples of the prompts in which it holds the role (``role_support``).

Sits above the scan: it calls ``scan`` / ``run_retrieval`` and reads their results; it never touches the engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from interp.engine import ScanConfig, ScanResult, merge_results, scan
from interp.measures.state import State
from interp.measures.echo import period
from interp.measures.variants import variant_sink_weight, variant_token_scores
from interp.rope import band_ablations

ROLE_SHARE = 0.4  # ARENA / TransformerLens exercises: mean attention on the target over queries that have one > 0.4
RETRIEVAL_MIN = 0.1  # Wu et al. 2024 Sec. 2: heads with retrieval score > 0.1
TOKEN_COLUMNS = ("prev_token_score", "duplicate_token_score", "induction_score")
RR_COLUMNS = ("rr_prev_token_score", "rr_duplicate_token_score", "rr_induction_score", "rr_echo_score")
BANDS = ("wo_high", "wo_medium", "wo_low")


def _from_chance(score: str, attainable: str) -> str:
    """The rule line of a token-matched role (``thresholds``): chance + ROLE_SHARE x (attainable - chance)."""
    return f"{score} >= chance + {ROLE_SHARE} x ({attainable} - chance)"


@dataclass(frozen=True)
class Role:
    """A head type: ``name``; ``column``, the atlas score it reads; ``flag``, an existing boolean column that decides it
    (else ``column >= chance + ROLE_SHARE * (attainable - chance)``, or ``> RETRIEVAL_MIN`` for retrieval); ``source``; ``rule``
    (one line for the page and the CSV)."""

    name: str
    column: str
    flag: str | None
    source: str
    rule: str


ROLES: tuple[Role, ...] = (
    Role("retrieval", "retrieval_score", None, "Wu et al. 2024", f"retrieval_score > {RETRIEVAL_MIN} (needle copying, top-1 attention)"),
    Role("induction", "rr_induction_score", None, "Olsson et al. 2022; TransformerLens detect_head",
         _from_chance("rr_induction_score", "share of queries with an earlier copy of their token")),
    Role("echo", "rr_echo_score", None, "RazorAttention (Tang et al. 2024) Sec. 3.3",
         _from_chance("rr_echo_score", "share of queries in a later copy")),
    Role("duplicate_token", "duplicate_token_score", None, "Wang et al. 2022 (IOI); TransformerLens detect_head",
         _from_chance("duplicate_token_score (text)", "share of queries whose token occurred before")),
    Role("previous_token", "prev_token_score", None, "TransformerLens detect_head",
         _from_chance("prev_token_score (text)", "(pos - 1) / pos")),
    Role("sdh", "slash_score", "is_sdh", "paper 004 Def. 3.1", "is_sdh: average slash score >= kappa at a lag 0..4"),
    Role("streaming", "distant_mass", "is_streaming", "DuoAttention (Xiao et al. 2024); StreamingLLM",
         "is_streaming: distant mass (outside sink + local window) < streaming_threshold"),
    Role("sink", "sink_weight", "has_sink", "Gu et al. 2024; Xiao et al. 2023", "has_sink: mean attention on token 0 > sink_eps"),
)
ROLE_NAMES = tuple(r.name for r in ROLES)


@dataclass(frozen=True)
class AtlasConfig:
    """Settings of ``run_atlas``.

    Attributes:
        corpus: the text corpus (``interp.corpus.CORPORA``, not a random one); prompts, tokens, seed: as ``interp scan``.
        repeats: copies of r in the repeated-random pass (2: TransformerLens' induction test; RazorAttention: 4).
        ablate: also the counterfactual band ablations (004 Table 5) in both passes.
        n_remove: planes left unrotated per band (004: 6).
        inp: the per-plane InP in the text pass (role against band use; ~+50% time).
        scan: base ``ScanConfig`` (block size, thresholds); the atlas switches its measures on.
        retrieval: a ``RetrievalConfig`` to also run the retrieval pass, or None.
        support: bootstrap resamples of the prompts (each pass resampled with replacement) for each head's role
            support, ``support_<role>`` in the table (``role_support``); 0: off. The passes then scan one prompt at a
            time (same sums, ``merge_results``) so that each prompt's state can be reweighted.
        effects: an ``interp.experiments.effects.EffectsConfig`` to also measure every head's causal effect on the
            text pass's prompts (``head_effects``: one clean pass caching the residual stream, then every head x
            intervention), joined as ``effect_columns``; None: off.
        effects_prompts, effects_tokens: the effects run on the first ``effects_prompts`` text prompts cut to their
            first ``effects_tokens`` tokens (None: all of them; the exact effects cost hundreds of scans, so a CPU
            run takes a few short prompts).
    """

    corpus: str = "pydoc"
    prompts: int = 8
    tokens: int = 1024
    seed: int = 0
    repeats: int = 2
    ablate: bool = False
    n_remove: int = 6
    inp: bool = True
    scan: ScanConfig = field(default_factory=ScanConfig)
    retrieval: object | None = None
    support: int = 0
    effects: object | None = None
    effects_prompts: int | None = None
    effects_tokens: int | None = None


@dataclass
class AtlasResult:
    """``table``: one row per head (``atlas_table``); ``text``, ``rr``: the two scans; ``retrieval``: the retrieval result
    or None; ``effects``: the ``EffectsResult`` of ``AtlasConfig.effects`` or None; ``attainable``: the shares the role thresholds scale with (``thresholds``' keys, with their ``*_chance``
    floors); ``seconds``: wall time per pass."""

    table: pd.DataFrame
    text: ScanResult
    rr: ScanResult
    retrieval: object | None
    attainable: dict[str, float]
    seconds: dict[str, float]
    config: AtlasConfig
    effects: object | None = None


def attainable(prompts: Sequence[torch.Tensor]) -> dict[str, float]:
    """Mean over prompts of the share of queries that have a target key, per token-matched pattern: ``previous_token``
    (``(pos - 1) / pos``), ``duplicate_token`` and ``induction`` (the query's token occurred before: both of
    TransformerLens' patterns mark a key then), ``echo`` (the query lies in a later copy of a periodic prompt,
    ``interp.measures.echo.period``; 0 for a prompt without a period).

    Args:
        prompts: ``[pos]`` token tensors (or a ``[prompt, pos]`` tensor).
    """
    out = {"previous_token": [], "duplicate_token": [], "induction": [], "echo": []}
    for p in prompts:
        t = p.reshape(-1).tolist()
        N = len(t)
        seen, earlier = set(), 0
        for tok in t:
            earlier += tok in seen
            seen.add(tok)
        per = period(p)
        out["previous_token"].append((N - 1) / N)
        out["duplicate_token"].append(earlier / N)
        out["induction"].append(earlier / N)
        out["echo"].append((N - per[0] - per[1]) / N if per else 0.0)
    return {k: float(np.mean(v)) for k, v in out.items()}


def chance(prompts: Sequence[torch.Tensor], chunk: int = 1024) -> dict[str, float]:
    """Mean over prompts of the score of a head that attends uniformly over its causal keys (``A[i, j] = 1 / (i + 1)``),
    per token-matched pattern (same keys as ``attainable``): ``(1 / pos) sum_i |{j <= i: D[i, j]}| / (i + 1)`` with the
    detection patterns ``D`` of TransformerLens' ``detect_head`` (``interp.attention.token_match_masks``) and
    RazorAttention's echo pairs (``interp.measures.echo.echo_pairs``; 0 for a prompt without a period).

    The floor a score reaches without looking for its pattern: on text from a large vocabulary it is small
    (previous-token ``H_pos / pos``, duplicate-token a few percent), on a small alphabet it is not (a two-letter
    alphabet gives a duplicate-token score near 0.5 to a uniform head). ``thresholds`` measures ``ROLE_SHARE`` from it.

    Args:
        prompts: ``[pos]`` token tensors (or a ``[prompt, pos]`` tensor).
        chunk: queries per block of the ``[3, chunk, pos]`` masks (memory only).
    """
    from interp.attention import token_match_masks
    from interp.measures.echo import echo_pairs

    out = {"previous_token": [], "duplicate_token": [], "induction": [], "echo": []}
    for p in prompts:
        t = p.reshape(-1)
        N = t.numel()
        keys = torch.zeros(3, N, dtype=torch.float64)
        for i0 in range(0, N, chunk):
            i1 = min(N, i0 + chunk)
            keys[:, i0:i1] = token_match_masks(t, i0, i1).sum(-1).double()
        w = 1.0 / torch.arange(1, N + 1, dtype=torch.float64)  # uniform weight of one key for query i
        prev, dup, ind = ((keys * w).sum(-1) / N).tolist()
        per = period(p)
        echo = float((w[echo_pairs(N, *per)[0]]).sum() / N) if per else 0.0
        for k, v in zip(out, (prev, dup, ind, echo)):
            out[k].append(v)
    return {k: float(np.mean(v)) for k, v in out.items()}


def atlas_config(cfg: AtlasConfig, variants: tuple = ()) -> tuple[ScanConfig, ScanConfig]:
    """The ``ScanConfig`` of the text pass and of the repeated-random pass."""
    text = replace(cfg.scan, token_match=True, shape=True, heavy_hitters=True, inp=cfg.inp or cfg.scan.inp, variants=variants)
    rr = replace(cfg.scan, token_match=True, echo=True, variants=variants)
    return text, rr


def _band_columns(res: ScanResult, heads: pd.DataFrame, prefix: str, with_slash: bool) -> dict[str, np.ndarray]:
    """Each role score under each band ablation: token-matched scores (``prefix`` + name), and on the text pass the slash
    score at the head's own lag and the sink weight."""
    out = {}
    l, h = heads["layer"].to_numpy(), heads["head"].to_numpy()
    for band in BANDS:
        tm = variant_token_scores(res, band).numpy()[l, h]  # [heads, 3]
        for k, col in enumerate(TOKEN_COLUMNS):
            out[f"{prefix}{col}_{band}"] = tm[:, k]
        if with_slash:
            d = heads["slash_delta"].to_numpy()
            ok = ~np.isnan(d)
            s = np.full(len(heads), np.nan)
            s[ok] = res.variant_scores(band).numpy()[l[ok], h[ok], d[ok].astype(int)]
            out[f"slash_score_{band}"] = s
            out[f"sink_weight_{band}"] = variant_sink_weight(res, band).numpy()[l, h]
    return out


SHARE_KEYS = {"previous_token": "previous_token", "duplicate_token": "duplicate_token", "induction": "rr_induction",
              "echo": "rr_echo"}  # role -> its key in the shares (``rr_``: of the repeated-random prompts)


def thresholds(shares: dict[str, float]) -> dict[str, float]:
    """``{role: threshold}`` of the roles decided by a score (``ROLES`` without a ``flag``): ``c + ROLE_SHARE (a - c)``
    with ``a`` the share of queries that can attend such a key and ``c`` the score of uniform attention (``shares``:
    keys ``previous_token``, ``duplicate_token`` of the text prompts, ``rr_induction``, ``rr_echo`` of the
    repeated-random prompts, from ``attainable``, and the same keys + ``_chance`` from ``chance``; a missing ``_chance``
    is 0, the uncorrected rule), and ``RETRIEVAL_MIN``."""
    out = {}
    for role, key in SHARE_KEYS.items():
        c = shares.get(f"{key}_chance", 0.0)
        out[role] = c + ROLE_SHARE * (shares[key] - c)
    return {**out, "retrieval": RETRIEVAL_MIN}


def atlas_table(text: ScanResult, rr: ScanResult, shares: dict[str, float], retrieval: pd.DataFrame | None = None,
                text_heads: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per head: ``layer, head, kv_head``, every column of the text pass's ``heads.csv``, the repeated-random
    pass's ``rr_*`` columns, ``retrieval_score`` (when given), the band-ablated scores (when the scans carry the band
    variants), one boolean ``role_<name>`` per role of ``ROLES``, ``roles`` (the names joined by ``;``) and ``role``
    (the first of them in ``ROLES`` order, or ``none``).

    Args:
        text, rr: the text and repeated-random scans (same model).
        shares: ``attainable`` of the text prompts under keys ``previous_token`` / ``duplicate_token`` and of the
            repeated-random prompts under ``rr_induction`` / ``rr_echo``.
        retrieval: ``RetrievalResult.heads`` (``layer, head, retrieval_score``) or None.
        text_heads: the text pass's head table if already computed (``text.heads`` otherwise).

    Raises:
        ValueError: the two scans are of different models.
    """
    if text.card.name != rr.card.name or text.card.n_heads != rr.card.n_heads:
        raise ValueError(f"the text and repeated-random scans are of different models ({text.card.name}, {rr.card.name})")
    heads = (text.heads if text_heads is None else text_heads).reset_index(drop=True)
    rh = rr.heads.reset_index(drop=True)
    t = heads.copy()
    for col, src in zip(RR_COLUMNS, TOKEN_COLUMNS + ("echo_score",)):
        t[col] = rh[src].to_numpy()
    if retrieval is not None:
        t = t.merge(retrieval[["layer", "head", "retrieval_score"]], on=["layer", "head"], how="left")
    if any(v.name == "wo_high" for v in text.config.variants):
        extra = {**_band_columns(text, heads, "", True), **_band_columns(rr, rh, "rr_", False)}
        t = pd.concat([t, pd.DataFrame(extra, index=t.index)], axis=1)
    rule = thresholds(shares)
    for r in ROLES:
        if r.column not in t:
            t[f"role_{r.name}"] = False
        elif r.flag is not None:
            t[f"role_{r.name}"] = t[r.flag].fillna(False).astype(bool)
        elif r.name == "retrieval":
            t[f"role_{r.name}"] = (t[r.column] > rule[r.name]).fillna(False).astype(bool)
        else:
            t[f"role_{r.name}"] = (t[r.column] >= rule[r.name]).fillna(False).astype(bool) if rule[r.name] > 0 else False
    flags = t[[f"role_{n}" for n in ROLE_NAMES]].to_numpy()
    t["roles"] = [";".join(n for n, f in zip(ROLE_NAMES, row) if f) for row in flags]
    t["role"] = [next((n for n, f in zip(ROLE_NAMES, row) if f), "none") for row in flags]
    return t


def role_summary(table: pd.DataFrame, shares: dict[str, float]) -> pd.DataFrame:
    """Per role: ``heads`` (count), ``share`` of all heads, ``dominant`` (heads whose grid colour it is), the median r1 of
    queries and keys of its heads (``r1_q``, ``r1_k``; 004 eq. 7) against the other heads (``r1_q_rest``...), the median
    number of active InP planes per band (``inp_active_high`` ...; 004 eq. 9) when the scan has InP, the ``threshold``,
    the ``chance`` score it is measured from and the ``attainable`` share it scales to (token-matched roles;
    ``thresholds``), ``rule`` and ``source``; with ``role_support`` columns, the median and least support of its heads
    (``support_median``, ``support_min``)."""
    rows = []
    limits = thresholds(shares)
    for r in ROLES:
        on = table[f"role_{r.name}"].to_numpy(bool)
        row = {"role": r.name, "heads": int(on.sum()), "share": float(on.mean()), "dominant": int((table["role"] == r.name).sum())}
        for c in ("r1_q", "r1_k", "inp_active_high", "inp_active_medium", "inp_active_low"):
            if c in table and table[c].notna().any():
                row[c] = float(np.nanmedian(table.loc[on, c])) if on.any() else np.nan
                row[f"{c}_rest"] = float(np.nanmedian(table.loc[~on, c])) if (~on).any() else np.nan
        if f"support_{r.name}" in table:  # role_support: how firm the role's labels are over prompt resamples
            sup = table.loc[on, f"support_{r.name}"]
            row.update(support_median=float(sup.median()) if on.any() else np.nan,
                       support_min=float(sup.min()) if on.any() else np.nan)
        key = SHARE_KEYS.get(r.name)
        row.update(threshold=limits.get(r.name, np.nan), chance=shares.get(f"{key}_chance", np.nan) if key else np.nan,
                   attainable=shares[key] if key else np.nan, score=r.column, rule=r.rule, source=r.source)
        rows.append(row)
    return pd.DataFrame(rows)


def cooccurrence(table: pd.DataFrame) -> pd.DataFrame:
    """``role x role`` counts of heads that hold both roles (diagonal: heads with the role); index and columns are the
    role names in ``ROLES`` order. Answers e.g. "are SDHs streaming heads?" (DuoAttention issue 8)."""
    F = table[[f"role_{n}" for n in ROLE_NAMES]].to_numpy(bool).astype(int)
    return pd.DataFrame(F.T @ F, index=list(ROLE_NAMES), columns=list(ROLE_NAMES))


ABLATED_SCORES = {"sdh": "slash_score", "sink": "sink_weight", "previous_token": "prev_token_score",
                  "duplicate_token": "duplicate_token_score", "induction": "rr_induction_score"}


def band_attribution(table: pd.DataFrame) -> pd.DataFrame:
    """Per role with an ablated score (``ABLATED_SCORES``): the role's heads' score, median original and median under each
    band ablation, and the median per-head ratio ablated / original (``ratio_wo_high``...; 004 Fig. 8's statistic for
    SDHs, here for every role). Empty when the atlas ran without ``ablate``. The echo score has no ablated value (it
    is recomputed from the model's own lse; a variant's lse is not kept)."""
    if f"slash_score_{BANDS[0]}" not in table:
        return pd.DataFrame()
    rows = []
    for role, col in ABLATED_SCORES.items():
        sel = table[table[f"role_{role}"]]
        if not len(sel):
            continue
        row = {"role": role, "score": col, "heads": len(sel), "original": float(np.nanmedian(sel[col]))}
        for band in BANDS:
            row[band] = float(np.nanmedian(sel[f"{col}_{band}"]))
        for band in BANDS:
            with np.errstate(divide="ignore", invalid="ignore"):
                row[f"ratio_{band}"] = float(np.nanmedian(sel[f"{col}_{band}"] / sel[col]))
        rows.append(row)
    return pd.DataFrame(rows)


def shares_of(a_text: dict, a_rr: dict, c_text: dict, c_rr: dict) -> dict[str, float]:
    """The ``shares`` of ``thresholds`` / ``atlas_table`` from ``attainable`` and ``chance`` of the text prompts and of the
    repeated-random prompts."""
    return {"previous_token": a_text["previous_token"], "duplicate_token": a_text["duplicate_token"],
            "rr_induction": a_rr["induction"], "rr_echo": a_rr["echo"],
            "previous_token_chance": c_text["previous_token"], "duplicate_token_chance": c_text["duplicate_token"],
            "rr_induction_chance": c_rr["induction"], "rr_echo_chance": c_rr["echo"]}


def reweighted(parts: Sequence[ScanResult], weights: np.ndarray) -> ScanResult:
    """The scan of the prompts of ``parts`` (one scan per prompt) with prompt ``i`` counted ``weights[i]`` times: every
    state entry is a sum over prompts, so the weighted sum of the parts' states is that scan's state exactly (a bootstrap
    resample when ``weights`` are multinomial counts).

    Raises:
        ValueError: ``weights`` not one non-negative integer per part, or all zero.
    """
    w = np.asarray(weights)
    if w.shape != (len(parts),) or (w < 0).any() or w.sum() == 0 or not np.array_equal(w, np.round(w)):
        raise ValueError(f"reweighted: need one non-negative integer weight per part ({len(parts)}), not all zero; got {w}")
    state = None
    for part, k in zip(parts, w):
        if k:
            scaled = State({name: v * float(k) for name, v in part.state.items()})
            state = scaled if state is None else state + scaled
    first = parts[0]
    meta = {**first.meta, "prompts": int(w.sum()),
            "tokens": [n for part, k in zip(parts, w) for n in part.meta.get("tokens", []) * int(k)]}
    return ScanResult(first.card, first.config, state, meta)


def role_support(text_parts: Sequence[ScanResult], rr_parts: Sequence[ScanResult], text_prompts: Sequence[torch.Tensor],
                 rr_prompts: Sequence[torch.Tensor], resamples: int, seed: int = 0,
                 retrieval: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each head's support for each role: the share of ``resamples`` bootstrap resamples of the prompts (text and
    repeated-random prompts each drawn with replacement, ``reweighted``) in which ``atlas_table`` gives the head the
    role, its thresholds recomputed from the resampled prompts (``attainable``, ``chance``). A label with support near 1
    holds whichever prompts are drawn; near 0.5 it rests on the prompt sample (a score close to its threshold).
    Retrieval scores, when given, are fixed (not resampled).

    Args:
        text_parts, rr_parts: one scan per prompt of each pass (same order as the prompts).
        text_prompts, rr_prompts: ``[pos]`` token tensors of those prompts.

    Returns:
        DataFrame ``layer, head, support_<role>`` (one per ``ROLES``), in [0, 1].

    Raises:
        ValueError: ``resamples`` < 1, or parts and prompts of different counts.
    """
    if resamples < 1 or len(text_parts) != len(text_prompts) or len(rr_parts) != len(rr_prompts):
        raise ValueError(f"role_support: need resamples >= 1 and one scan per prompt (got {resamples} resamples, "
                         f"{len(text_parts)} / {len(text_prompts)} text and {len(rr_parts)} / {len(rr_prompts)} rr)")
    rng = np.random.default_rng([seed, 7919])
    per = {"a_text": [attainable([p]) for p in text_prompts], "c_text": [chance([p]) for p in text_prompts],
           "a_rr": [attainable([p]) for p in rr_prompts], "c_rr": [chance([p]) for p in rr_prompts]}

    def mean(dicts: list[dict], w: np.ndarray) -> dict:
        return {k: float(np.average([d[k] for d in dicts], weights=w)) for k in dicts[0]}

    hits, t = None, None
    for _ in range(resamples):
        wt = rng.multinomial(len(text_parts), np.full(len(text_parts), 1 / len(text_parts)))
        wr = rng.multinomial(len(rr_parts), np.full(len(rr_parts), 1 / len(rr_parts)))
        shares = shares_of(mean(per["a_text"], wt), mean(per["a_rr"], wr), mean(per["c_text"], wt), mean(per["c_rr"], wr))
        t = atlas_table(reweighted(text_parts, wt), reweighted(rr_parts, wr), shares, retrieval)
        flags = t[[f"role_{n}" for n in ROLE_NAMES]].to_numpy(float)
        hits = flags if hits is None else hits + flags
    out = t[["layer", "head"]].reset_index(drop=True)  # every resample's table has the same rows
    for k, n in enumerate(ROLE_NAMES):
        out[f"support_{n}"] = hits[:, k] / resamples
    return out


TEXT_CORPORA = ("pydoc", "stdlib")


def check_text_corpus(corpus: str) -> None:
    """Raises ConfigError (one line) unless ``corpus`` is a text corpus the atlas's text pass can read."""
    from interp.errors import ConfigError

    if corpus not in TEXT_CORPORA:
        raise ConfigError(f"--corpus: the atlas's text pass needs a text corpus, pydoc or stdlib, got {corpus!r} (the "
                          "repeated-random pass is always run)")


def run_atlas(model, cfg: AtlasConfig = AtlasConfig(), *, progress: bool = False, engine: str = "auto",
              log: Callable[[str], None] = lambda s: None, retrieval_heads: pd.DataFrame | None = None,
              text_prompts: torch.Tensor | None = None, scan_pass: Callable | None = None, store=None) -> AtlasResult:
    """Run the atlas's passes on ``model`` (``interp.models.LoadedModel``) and build its table.

    ``retrieval_heads``: retrieval scores already measured (``layer, head, retrieval_score``, e.g. a committed
    ``retrieval.csv``) to join instead of running the retrieval pass.

    ``text_prompts``: ``[prompt, pos]`` int64 token ids for the text pass instead of ``cfg.corpus`` (a lab model whose
    vocabulary is not text, e.g. a copier on its own task's inputs); ``cfg.prompts`` / ``cfg.tokens`` then size only the
    repeated-random pass.

    ``scan_pass``: ``scan_pass(name, prompts, config, meta) -> ScanResult`` runs the ``"text"`` and ``"rr"``
    (repeated-random) passes instead of one scan each (``interp atlas`` passes one that keeps each prompt as a unit
    of the run, ``interp.cli.longrun.scan_units``, saved as ``text-IIIII/`` / ``rr-IIIII/`` in ``store``; with
    ``support`` the per-prompt states ``role_support`` needs are read back from there). ``store``: a folder where the
    retrieval pass keeps its trials and the effects pass its layers (``run_retrieval`` / ``head_effects``), read back
    on a rerun.

    Returns:
        AtlasResult (its ``table`` is what ``interp atlas`` writes as ``atlas.csv``).

    Raises:
        ConfigError: a random corpus for the text pass, a negative ``support``, or a bad scan / retrieval setting.
        PromptError: prompts too long.
        ValueError: ``text_prompts`` not a ``[prompt, pos]`` int64 tensor.
    """
    from interp import corpus as corpus_mod
    from interp.errors import ConfigError

    if cfg.support < 0:
        raise ConfigError(f"--support: bootstrap resamples must be 0 (off) or more, got {cfg.support}")
    if text_prompts is None:
        check_text_corpus(cfg.corpus)
    else:
        text_prompts = torch.as_tensor(text_prompts)
        if text_prompts.ndim != 2 or text_prompts.dtype != torch.long or text_prompts.numel() == 0:
            raise ValueError(f"text_prompts: need a non-empty [prompt, pos] int64 tensor, got {tuple(text_prompts.shape)} "
                             f"{text_prompts.dtype}")
    variants = band_ablations(model.card.n_rotary_planes, cfg.n_remove) if cfg.ablate else ()
    text_cfg, rr_cfg = atlas_config(cfg, variants)
    seconds = {}
    t0 = time.perf_counter()
    if text_prompts is None:
        text_p, source = corpus_mod.prompts(model, cfg.corpus, cfg.prompts, cfg.tokens, cfg.seed), cfg.corpus
    else:
        text_p, source = text_prompts, "given"
    log(f"text pass: {text_p.shape[0]} x {text_p.shape[1]} {source} tokens")
    text, text_parts = _scan_pass(model, text_p, text_cfg, {"corpus": source, "seed": cfg.seed}, cfg.support, progress, engine,
                                  scan_pass, "text", store)
    seconds["text"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rr_p = corpus_mod.prompts(model, "repeated-random", cfg.prompts, cfg.tokens, cfg.seed, repeats=cfg.repeats)
    log(f"repeated-random pass: {cfg.prompts} x {cfg.tokens} tokens, {cfg.repeats} copies")
    rr, rr_parts = _scan_pass(model, rr_p, rr_cfg, {"corpus": "repeated-random", "seed": cfg.seed, "repeats": cfg.repeats},
                              cfg.support, progress, engine, scan_pass, "rr", store)
    seconds["repeated_random"] = time.perf_counter() - t0
    ret = None
    if cfg.retrieval is not None:
        from interp.experiments.retrieval import run_retrieval

        t0 = time.perf_counter()
        log("retrieval pass: needle-in-a-haystack decoding")
        ret = run_retrieval(model, cfg.retrieval, progress=progress, log=log, store=store)
        seconds["retrieval"] = time.perf_counter() - t0
    shares = shares_of(attainable(list(text_p)), attainable(list(rr_p)), chance(list(text_p)), chance(list(rr_p)))
    joined = ret.heads if ret is not None else retrieval_heads
    table = atlas_table(text, rr, shares, joined)
    if cfg.support:
        t0 = time.perf_counter()
        log(f"role support: {cfg.support} bootstrap resamples of the prompts")
        sup = role_support(text_parts, rr_parts, list(text_p), list(rr_p), cfg.support, cfg.seed, joined)
        table = table.merge(sup, on=["layer", "head"], how="left")
        seconds["support"] = time.perf_counter() - t0
    eff = None
    if cfg.effects is not None:
        from interp.experiments.effects import LayerStore, head_effects

        t0 = time.perf_counter()
        p = text_p[:cfg.effects_prompts, :cfg.effects_tokens]
        log(f"effects: every head x {', '.join(cfg.effects.interventions)} on {p.shape[0]} x {p.shape[1]} text tokens")
        eff = head_effects(model, p, cfg.effects, progress=progress, store=LayerStore(store) if store is not None else None)
        table = table.merge(effect_columns(eff.table), on=["layer", "head"], how="left")
        seconds["effects"] = time.perf_counter() - t0
    return AtlasResult(table, text, rr, ret, shares, seconds, cfg, eff)


def effect_columns(effects: pd.DataFrame) -> pd.DataFrame:
    """An ``effects.csv`` table (long: one row per head and intervention) as atlas columns (wide: one row per head):
    ``layer, head`` and per intervention ``dnll_<name>``, ``dnll_<name>_lo``, ``dnll_<name>_hi``, ``kl_<name>`` (nats;
    ``interp.experiments.effects``), so the atlas shows "where it looks" and "what it does" side by side.

    Raises:
        ConfigError: a table without ``layer, head, intervention, dnll`` or with a head twice for one intervention.
    """
    from interp.errors import ConfigError

    need = {"layer", "head", "intervention", "dnll"}
    if not need <= set(effects.columns):
        raise ConfigError(f"an effects table needs the columns {', '.join(sorted(need))} (interp effects' effects.csv); "
                          f"got {', '.join(effects.columns)}")
    if effects.duplicated(["layer", "head", "intervention"]).any():
        raise ConfigError("the effects table holds a head twice for one intervention: give one run's effects.csv")
    values = [c for c in ("dnll", "dnll_lo", "dnll_hi", "kl") if c in effects]
    name = lambda v, k: f"{v}_{k}" if v in ("dnll", "kl") else f"dnll_{k}_{v[len('dnll_'):]}"  # noqa: E731  dnll_zero_lo
    wide = effects.pivot(index=["layer", "head"], columns="intervention", values=values)
    wide.columns = [name(v, k) for v, k in wide.columns]
    return wide[[name(v, k) for k in dict.fromkeys(effects["intervention"]) for v in values]].reset_index()


def _scan_pass(model, prompts, cfg: ScanConfig, meta: dict, support: int, progress: bool, engine: str,
               scan_pass: Callable | None = None, name: str = "text", store=None) -> tuple[ScanResult, list[ScanResult] | None]:
    """One pass: a single scan, or with ``support`` one scan per prompt (for ``role_support``) and their merge;
    ``scan_pass`` (``run_atlas``) scans it instead, its per-prompt units read back from ``store`` for ``support``."""
    if scan_pass is not None:
        merged = scan_pass(name, prompts, cfg, meta)
        if not support:
            return merged, None
        from pathlib import Path

        return merged, [ScanResult.load(Path(store) / f"{name}-{i:05d}") for i in range(len(prompts))]
    if not support:
        return scan(model, prompts, cfg, progress=progress, meta=meta, engine=engine), None
    parts = [scan(model, prompts[i:i + 1], cfg, meta=meta, prompt_ids=[i], engine=engine) for i in range(len(prompts))]
    return merge_results(parts), parts
