"""Detector of paper 002's uniform "counting" heads: attention spread evenly over the visible keys whose output
carries the running mean of the bracket balance (002 Sec. 4.1 / 5.3.1: with ``Q = 0`` and ``E = [1, -1]`` the
head's ``r``-th row is ``Delta_r / r``, eq. 9; Sec. 5.3.4 trains such heads).

Per head (over a batch of prompts, query rows with at least two visible keys):

- ``uniformity`` ``U`` in [0, 1]: the mean over prompts and rows of ``H(a_r) / log(n_r)``, where ``a_r`` is the
  head's attention row, ``H`` its entropy in nats and ``n_r`` the number of keys it may see (causal). ``U = 1``
  iff every row is exactly uniform; a head that puts all weight on one key has ``U = 0``.
- ``r2`` (can be < 0; clipped at 0 in the score): held-out partial R^2 of a least-squares fit of the target
  ``y_r = (1 / n_r) sum_{j <= r} sigma_j`` (the running mean of the balance steps ``sigma = +1`` for ``'('``,
  ``-1`` for ``')'``, 0 for other tokens such as ``<bos>``) on the head's output ``o_r`` ``[d_head]``
  (``sum_j a_rj v_j``, before ``o_proj``) *with one free intercept per position*: both ``y`` and ``o`` are
  centred within each position, ``beta`` is fitted on the even-numbered prompts and
  ``r2 = 1 - |y_c - o_c beta|^2 / |y_c|^2`` is measured on the odd-numbered ones. The per-position intercept
  removes what position alone predicts (a uniform head's output is ``y_r`` times a fixed vector plus a
  position-dependent offset from the positional embeddings; Thm 4.1's ``B``).
- ``shape = U * max(r2, 0)`` in [0, 1]: 1 for the closed forms of Thm 4.1 / Claim 5.3 (exactly uniform,
  output exactly affine in ``y_r`` at each position); 0 for a head attending to a single key. This is the
  head's *shape* only, and every head of an untrained model has it too (small random q/k give uniform rows,
  and a uniform average of two token values is affine in the balance): ``shape`` is 0.99-1.00 at
  initialisation, so it cannot tell a learned counting head from an untrained one.
- ``use`` in [0, 1] (null 0): whether the model *relies* on the head's balance signal. At the forced positions
  of the probe words (height 0: only ``'('`` keeps the word completable; height = brackets left: only
  ``')'``), ``acc`` is the share where the model's argmax over the two brackets is the forced one, and
  ``acc_ablated`` the same with the head's output replaced by its mean over the probe words at that position
  (mean ablation; for a uniform head this removes exactly the balance, ``y_r``, and keeps what position
  predicts). ``blind`` is the best accuracy any position-only rule reaches on the same forced positions (per
  position, the more frequent forced bracket). ``use = clip((acc - acc_ablated) / (acc - blind), 0, 1)``, and
  0 when the model is no better than ``blind`` (``acc - blind < 0.05``: there is no counting to attribute),
  so an untrained model scores 0 whatever its heads look like; 1 when ablating the head alone brings the
  model down to (or below) position-only accuracy, as for the closed forms.
- ``score = shape * use`` in [0, 1]: a uniform head that carries the balance *and* that the model needs.
  One head of several redundant counting heads scores 0 on ``use`` (ablating it alone leaves the others), so
  ``detect`` also gives one row per layer with ``head = -1``: every head of the layer mean-ablated at once
  (``use`` of the layer), with the layer's mean ``uniformity``, ``r2`` and ``shape``.

Works on any model interp can tap (``interp.models.taps``: q/k/v of each attention call, one prompt at a time).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pandas as pd
import torch

from interp.attention import attention_pattern, expand_kv
from interp.hooks.sites import site_map
from interp.models.taps import AttentionCall, attention_taps

__all__ = ["uniformity", "balance_target", "partial_r2", "counting_scores", "head_activations", "forced_brackets",
           "head_means", "mean_ablated", "use_scores", "detect"]


def uniformity(patterns: torch.Tensor, first: int = 1) -> torch.Tensor:
    """``[head]`` mean normalised row entropy ``H(a_r) / log(r + 1)`` over prompts and query rows ``r >= first``.

    Args:
        patterns: ``[batch, head, q_pos, k_pos]`` causal attention probabilities (row r sees keys 0..r).
        first: first query row to score (>= 1: row 0 has a single key, ``log 1 = 0``).

    Raises:
        ValueError: not 4-D / not square, or ``first`` outside ``[1, pos)``.
    """
    if patterns.dim() != 4 or patterns.shape[-1] != patterns.shape[-2]:
        raise ValueError(f"patterns must be [batch, head, pos, pos]; got {tuple(patterns.shape)}")
    n = patterns.shape[-1]
    if not 1 <= first < n:
        raise ValueError(f"first must lie in [1, {n}); got {first}")
    p = patterns[..., first:, :].double()
    ent = -torch.special.xlogy(p, p).sum(-1)                         # [batch, head, rows] nats
    norm = torch.log(torch.arange(first + 1, n + 1, dtype=torch.float64))
    return (ent / norm).mean(dim=(0, 2))


def balance_target(steps: torch.Tensor) -> torch.Tensor:
    """``[batch, pos]`` float64 running mean ``y_r = (1 / (r + 1)) sum_{j <= r} sigma_j`` of balance steps ``[batch, pos]``."""
    steps = torch.as_tensor(steps, dtype=torch.float64)
    return steps.cumsum(-1) / torch.arange(1, steps.shape[-1] + 1, dtype=torch.float64)


def partial_r2(features: torch.Tensor, target: torch.Tensor) -> float:
    """Held-out partial R^2 of ``target`` on ``features`` with a free intercept per position (module docstring).

    Args:
        features: ``[batch, pos, f]``; target: ``[batch, pos]``. The fit uses even batch rows, the score odd ones.

    Returns:
        ``1 - SS_res / SS_tot`` on the odd rows after centring per position; nan if the target has no variance
        left there.

    Raises:
        ValueError: shapes disagree or fewer than 2 prompts.
    """
    f = torch.as_tensor(features, dtype=torch.float64)
    y = torch.as_tensor(target, dtype=torch.float64)
    if f.dim() != 3 or y.shape != f.shape[:2] or f.shape[0] < 2:
        raise ValueError(f"features [batch >= 2, pos, f] and target [batch, pos] expected; got {tuple(f.shape)}, {tuple(y.shape)}")
    fit, ev = slice(0, None, 2), slice(1, None, 2)
    mf, my = f[fit].mean(0), y[fit].mean(0)                        # per-position intercepts from the fitting half
    A, b = (f[fit] - mf).reshape(-1, f.shape[-1]).numpy(), (y[fit] - my).reshape(-1).numpy()
    beta = np.linalg.lstsq(A, b, rcond=None)[0]
    yc = (y[ev] - y[ev].mean(0)).reshape(-1).numpy()
    pred = ((f[ev] - f[ev].mean(0)).reshape(-1, f.shape[-1]).numpy() @ beta)
    ss = float(yc @ yc)
    return float("nan") if ss <= 1e-12 * yc.size else 1.0 - float(((yc - pred) ** 2).sum()) / ss


def counting_scores(patterns: torch.Tensor, outputs: torch.Tensor, steps: torch.Tensor, first: int = 1) -> pd.DataFrame:
    """Counting-head scores of every head of one layer (module docstring).

    Args:
        patterns: ``[batch, head, pos, pos]`` attention probabilities.
        outputs: ``[batch, pos, head, d_head]`` head outputs ``sum_j a_rj v_j``.
        steps: ``[batch, pos]`` balance steps (+1 ``'('``, -1 ``')'``, 0 otherwise).
        first: first query row scored (>= 1).

    Returns:
        DataFrame, one row per head: ``head``, ``uniformity``, ``r2``, ``shape``.

    Raises:
        ValueError: inconsistent shapes.
    """
    b, h, n, _ = patterns.shape
    if outputs.shape[:3] != (b, n, h) or tuple(steps.shape) != (b, n):
        raise ValueError(f"patterns {tuple(patterns.shape)}, outputs {tuple(outputs.shape)} and steps {tuple(steps.shape)} disagree")
    u = uniformity(patterns, first)
    y = balance_target(steps)[:, first:]
    rows = []
    for k in range(h):
        r2 = partial_r2(outputs[:, first:, k], y)
        rows.append(dict(head=k, uniformity=float(u[k]), r2=r2, shape=float(u[k]) * max(r2, 0.0) if r2 == r2 else float("nan")))
    return pd.DataFrame(rows)


@torch.no_grad()
def head_activations(model, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer ``patterns [batch, head, pos, pos]`` and head ``outputs [batch, pos, head, d_head]`` (float32).

    Recomputed from the q / k / v each attention call receives (``interp.models.taps``, one prompt at a time) with the
    call's scale, window and soft-cap, as ``interp.capture`` does; the model runs its own attention unchanged.

    Args:
        model: an ``interp.LoadedModel`` (e.g. ``interp.lab.lab_loaded(...)``) or a tappable HF causal LM.
        ids: ``[batch, pos]`` int64 token ids (equal lengths).
    """
    hf = getattr(model, "hf", model)
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() != 2:
        raise ValueError(f"ids must be [batch, pos]; got {tuple(ids.shape)}")
    per: dict[int, tuple[list, list]] = {}

    def keep(call: AttentionCall):
        q, k, v = call.query.float(), call.key.float(), call.value.float()
        p = attention_pattern(q, k, call.scale, call.window, call.softcap)          # [head, q, k]
        o = torch.einsum("hqk,khd->qhd", p, expand_kv(v, q.shape[1]))
        pats, outs = per.setdefault(call.layer, ([], []))
        pats.append(p)
        outs.append(o)
        return None

    device = next(hf.parameters()).device
    with attention_taps(model, keep):
        for row in ids:
            hf(input_ids=row[None].to(device))
    layers = sorted(per)
    return [torch.stack(per[i][0]).cpu() for i in layers], [torch.stack(per[i][1]).cpu() for i in layers]


def forced_brackets(steps: torch.Tensor) -> torch.Tensor:
    """``[batch, pos]`` int64: the bracket a complete word forces after each token (0 ``'('``, 1 ``')'``, -1 free).

    ``steps`` ``[batch, pos]`` are balance steps of *whole* words (+1 ``'('``, -1 ``')'``, 0 for ``<bos>``); the
    word length is the number of brackets in the row. After token r (height ``h``, ``m`` brackets left) only
    ``'('`` keeps the word completable when ``h = 0 < m``, only ``')'`` when ``h = m > 0``; the last token
    (``m = 0``) and every other position are free (-1).

    Raises:
        ValueError: ``steps`` not 2-D, or a row whose prefix sums go negative or end above 0 (not a whole word).
    """
    s = torch.as_tensor(steps).long()
    if s.dim() != 2:
        raise ValueError(f"steps must be [batch, pos]; got {tuple(s.shape)}")
    h = s.cumsum(-1)
    left = (s != 0).sum(-1, keepdim=True) - (s != 0).long().cumsum(-1)
    if (h < 0).any() or (h[:, -1] != 0).any():
        raise ValueError("forced_brackets: every row must be a whole balanced word (prefix sums >= 0, ending at 0)")
    out = torch.full_like(s, -1)
    out[(h == 0) & (left > 0)] = 0
    out[(h == left) & (left > 0)] = 1
    return out


@torch.no_grad()
def head_means(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, ``[pos, head * d_head]``: the mean over prompts of the heads' outputs (the output projection's input,
    the ``head_out`` site of ``interp.hooks.edit``) at each position: a per-position mean, unlike
    ``interp.hooks.heads.head_means``' one mean over every position (this task's positions differ in role).

    Args:
        model: an ``interp.LoadedModel`` or a HF causal LM of a covered family.
        ids: ``[batch, pos]`` int64 prompts of equal length.
    """
    from interp.hooks.edit import cache

    hf = getattr(model, "hf", model)
    n = site_map(hf).n_layers
    with cache(hf, [f"head_out[{l}]" for l in range(n)]) as c:
        hf(input_ids=torch.as_tensor(ids, dtype=torch.long).to(next(hf.parameters()).device))
    return [c[f"head_out[{l}]"].float().mean(0).flatten(-2).cpu() for l in range(n)]


@contextmanager
def mean_ablated(model, layer: int, head, means: torch.Tensor) -> Iterator[None]:
    """Inside the block, head ``head`` of ``layer`` (an int, or a list of heads) outputs ``means[r]`` at position r
    (a ``head_out`` edit of ``interp.hooks.edit``).

    Args:
        means: ``[pos, head * d_head]`` from ``head_means`` (positions beyond its length keep the last row).

    Raises:
        ValueError: a head outside the layer's heads.
    """
    from interp.hooks.edit import apply, edit

    hf = getattr(model, "hf", model)
    sm = site_map(hf)
    heads = [head] if isinstance(head, (int, np.integer)) else list(head)
    if not heads or not all(0 <= h < sm.n_heads for h in heads):
        raise ValueError(f"head(s) {head} outside 0..{sm.n_heads - 1}")
    per_head = means.view(means.shape[0], sm.n_heads, sm.head_width)  # [pos, head, d_head]

    def fn(x, _ctx):  # x: [batch, pos, len(heads), d_head]
        idx = torch.clamp(torch.arange(x.shape[1]), max=per_head.shape[0] - 1)
        return per_head[idx][:, heads].to(x.device, x.dtype).expand_as(x)

    with edit(hf, apply(("head_out", layer), fn, heads=[int(h) for h in heads])):
        yield


@torch.no_grad()
def use_scores(model, ids: torch.Tensor, steps: torch.Tensor, bracket_ids: tuple[int, int] = (3, 4),
               min_gain: float = 0.05) -> pd.DataFrame:
    """``use`` of every head (module docstring): how far mean-ablating it alone drops forced-bracket accuracy.

    Args:
        model: an ``interp.LoadedModel`` or Llama-style HF causal LM.
        ids: ``[batch, pos]`` whole words (``<bos>`` first if the model was trained with it).
        steps: ``[batch, pos]`` their balance steps (``forced_brackets``).
        bracket_ids: token ids of ``'('`` and ``')'`` (``interp.lab.dyck_closed_form.VOCAB``: 3, 4).
        min_gain: ``acc - blind`` below which the model has nothing to attribute (use = 0).

    Returns:
        DataFrame, one row per head and one per layer (``head = -1``: all its heads at once):
        ``layer, head, acc, acc_ablated, blind, use``.
    """
    from interp.models.arch import attention_modules

    hf = getattr(model, "hf", model)
    ids = torch.as_tensor(ids, dtype=torch.long)
    forced = forced_brackets(steps)
    at = forced >= 0
    if not at.any():
        raise ValueError("use_scores: the probe words have no forced positions")
    want = forced[at]
    # position-only rule: at each position, the more frequent forced bracket
    pos = torch.arange(forced.shape[1]).expand_as(forced)[at]
    n_close = torch.zeros(forced.shape[1]).index_add_(0, pos, want.float())
    n_all = torch.zeros(forced.shape[1]).index_add_(0, pos, torch.ones_like(want, dtype=torch.float))
    blind = float(torch.maximum(n_close, n_all - n_close).sum() / n_all.sum())
    dev = next(hf.parameters()).device
    br = list(bracket_ids)

    def acc() -> float:
        logits = hf(input_ids=ids.to(dev)).logits[..., br].float().cpu()
        return float((logits.argmax(-1)[at] == want).float().mean())

    clean = acc()
    means = head_means(hf, ids)
    rows = []
    H = int(hf.config.num_attention_heads)
    for layer in range(len(attention_modules(hf))):
        for head in list(range(H)) + [-1]:
            with mean_ablated(hf, layer, head if head >= 0 else list(range(H)), means[layer]):
                abl = acc()
            gain = clean - blind
            use = 0.0 if gain < min_gain else float(np.clip((clean - abl) / gain, 0.0, 1.0))
            rows.append(dict(layer=layer, head=head, acc=clean, acc_ablated=abl, blind=blind, use=use))
    return pd.DataFrame(rows)


def detect(model, ids: torch.Tensor, steps: torch.Tensor, first: int = 1, bracket_ids: tuple[int, int] = (3, 4)) -> pd.DataFrame:
    """Counting-head scores of every head of every layer of ``model`` on whole words ``ids`` ``[batch, pos]``.

    Args:
        steps: ``[batch, pos]`` balance steps of the tokens (+1 ``'('``, -1 ``')'``, 0 for ``<bos>`` etc.).
        first: first query row scored (>= 1).
        bracket_ids: token ids of ``'('`` and ``')'`` (for ``use``).

    Returns:
        DataFrame: ``layer``, ``head`` (-1: the whole layer), ``uniformity``, ``r2``, ``shape``, ``acc``,
        ``acc_ablated``, ``blind``, ``use``, ``score`` (module docstring).
    """
    pats, outs = head_activations(model, ids)
    frames = [counting_scores(p, o, torch.as_tensor(steps), first).assign(layer=i) for i, (p, o) in enumerate(zip(pats, outs))]
    per = pd.concat(frames, ignore_index=True)
    whole = per.groupby("layer", as_index=False)[["uniformity", "r2", "shape"]].mean().assign(head=-1)
    df = pd.concat([per, whole], ignore_index=True).merge(use_scores(model, ids, steps, bracket_ids), on=["layer", "head"])
    df["score"] = df["shape"] * df["use"]
    return df[["layer", "head", "uniformity", "r2", "shape", "acc", "acc_ablated", "blind", "use", "score"]]
