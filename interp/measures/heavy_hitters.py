"""Heavy-hitter tokens: which token ids receive the most attention, per head, summed over a scan's prompts (optional:
``heavy_hitters=True``, ``interp scan --measure heavy_hitters``).

Issue 19 part 2 ("vertical mass"). H2O (Zhang et al. 2023) ranks *keys* by accumulated attention; ``interp.measures.shape``
does that per position (``vertical_top_key``), which names a token only on a scan of one prompt (a position holds a
different token in every prompt). Here the unit is the token id, which is the same in every prompt: the attention mass
head ``h`` puts on token id ``t``,

    mass[h, t] = sum over prompts, over keys j >= skip holding t, of m_j,   m_j = sum_i A[i, j]   (column sum),

is a sum over prompts, so it merges by addition like every other state (``interp.measures.state``). Keys ``0..skip-1``
(the sinks, ``ScanConfig.skip``; measured by the ``sinks`` measure) are left out, as in ``vertical_top1pct``: BOS counts
here only where it occurs later in a prompt (packed documents). ``share[h, t] = mass[h, t] / sum_t mass[h, t]`` is the
share of the head's attention on keys other than the sinks that goes to ``t``.

State size, the choice made: an exact ``[layer, head, vocab]`` table is too large (SmolLM2-135M: 30 x 9 x 49152 float64
= 106 MB; Qwen2.5-0.5B: 408 MB) and a "top-k keys per prompt" record does not add. So ``mass`` is kept as a
**count-min sketch** (Cormode & Muthukrishnan 2005, "An improved data stream summary: the count-min sketch", Sec. 3):
``DEPTH`` rows of ``WIDTH`` buckets per head, id ``t`` adding its mass to bucket ``h_r(t)`` of row ``r``
(``h_r(t) = ((a_r t + b_r) mod (2^31 - 1)) mod WIDTH``, fixed constants ``HASH_A``, ``HASH_B``, so shards and machines
agree). A sketch is linear, so it still merges by addition. The estimate ``min_r sketch[h, r, h_r(t)]`` is never below
the true mass and exceeds it by at most ``e / WIDTH`` (0.27%) of the head's total with probability ``>= 1 - e^-DEPTH``
(98%) per token (Cormode & Muthukrishnan, Theorem 1): heavy hitters (shares of several %) are ranked reliably, shares
below ~0.5% are not. State: ``DEPTH * WIDTH = 4096`` floats per head (SmolLM2-135M: 8.8 MB).

Which ids occur is kept exactly: ``hh_keys[t]``, the number of keys ``>= skip`` holding ``t`` (ids folded modulo
``KEY_TABLE = 2^18``, which holds every zoo vocabulary; 2 MB); only ids that occur are ranked, and ``key_share`` (the
share of keys holding ``t``) gives the lift ``share / key_share`` (1: the head attends to ``t`` as often as ``t`` occurs).

``heavy_hitter_tokens(result, tokenizer)`` decodes each head's top ids with their text and class (``token_class``:
BOS, special, newline, space, punctuation, word); ``class_summary`` gives the model-level shares the report shows.
"""

from __future__ import annotations

import math
import unicodedata

import torch

from interp.measures.base import Column, Entry, Measure, Option

DEPTH = 4  # rows of the count-min sketch (failure probability e^-DEPTH per token)
WIDTH = 1024  # buckets per row (overestimate <= e / WIDTH of the head's total)
PRIME = 2**31 - 1  # the hash family's modulus
HASH_A = (1_103_515_245, 1_664_525, 22_695_477, 134_775_813)  # odd multipliers < PRIME, one per row (fixed)
HASH_B = (12_345, 1_013_904_223, 2_531_011, 3_141_592_653 % PRIME)  # offsets, one per row (fixed)
KEY_TABLE = 2**18  # exact occurrence counts of ids modulo this
CLASSES = ("BOS", "special", "newline", "space", "punctuation", "word")


def bucket(tokens: torch.Tensor) -> torch.Tensor:
    """``[DEPTH, n]`` long: the sketch bucket ``h_r(t)`` of each token id ``t`` of ``tokens [n]`` in every row ``r``."""
    t = tokens.long().reshape(1, -1)
    a = torch.tensor(HASH_A, dtype=torch.long, device=t.device)[:, None]
    b = torch.tensor(HASH_B, dtype=torch.long, device=t.device)[:, None]
    return ((a * t + b) % PRIME) % WIDTH  # a < 2^31, t < 2^32: the product fits in int64


def sketch(mass: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[head, DEPTH, WIDTH]`` float64 count-min sketch of per-key masses ``mass [head, n]`` keyed by ``tokens [n]``."""
    idx = bucket(tokens.to(mass.device))
    out = torch.zeros(mass.shape[0], DEPTH, WIDTH, dtype=torch.float64, device=mass.device)
    for r in range(DEPTH):
        out[:, r].index_add_(1, idx[r], mass.double())
    return out


class HeavyHitters(Measure):
    """Attention mass per token id, per head, over the scan's prompts (count-min sketch; module docstring). No
    ``heads.csv`` columns: read it with ``heavy_hitter_tokens``; the report shows each head's top tokens."""

    name = "heavy_hitters"
    summary = "which token ids receive the most attention per head, summed over prompts (count-min sketch; report only)"
    options = (Option("heavy_hitters", False, "also the attention mass per token id and head (heavy-hitter tokens in "
                      "the report; interp.measures.heavy_hitters)"),)
    switch = "heavy_hitters"
    products = ("key_mass",)

    def columns(self, cfg):
        return []

    def entries(self, dims, cfg):
        return [Entry("hh_sketch", (dims.n_layers, dims.n_heads, DEPTH, WIDTH)),
                Entry("hh_keys", (KEY_TABLE,), layer_axis=None)]

    def update_prompt(self, x):
        skip = min(x.config.skip, x.n_pos)
        ids = x.tokens[skip:].long().cpu() % KEY_TABLE
        return {"hh_keys": torch.zeros(KEY_TABLE, dtype=torch.float64).index_add_(0, ids, torch.ones(ids.numel(), dtype=torch.float64))}

    def update(self, x):
        skip = min(x.config.skip, x.n_pos)
        return {"hh_sketch": sketch(x.products["key_mass"][:, skip:], x.tokens[skip:])}

    def compute(self, s):
        return {}


def estimates(s, ids: torch.Tensor) -> torch.Tensor:
    """``[layer, head, n]`` float64 count-min estimate of the attention mass on each id of ``ids [n]`` (never below the
    true mass; module docstring).

    Raises:
        KeyError: the scan ran without ``heavy_hitters=True``.
    """
    if "hh_sketch" not in s.state:
        raise KeyError("this scan has no heavy-hitter state: scan with ScanConfig(heavy_hitters=True) "
                       "(interp scan --measure heavy_hitters)")
    sk = s.state["hh_sketch"]  # [L, H, DEPTH, WIDTH]
    idx = bucket(ids)  # [DEPTH, n]
    per_row = torch.stack([sk[:, :, r, idx[r]] for r in range(DEPTH)])  # [DEPTH, L, H, n]
    return per_row.min(0).values


def token_class(token_id: int, text: str, tokenizer=None) -> str:
    """One of ``CLASSES`` for a token: ``BOS`` (the tokenizer's ``bos_token_id``), ``special`` (another of its special
    ids), ``newline`` (text holds ``\\n`` or ``\\r``), ``space`` (only whitespace, or empty), ``punctuation`` (every
    non-space character in a Unicode punctuation or symbol category, ``P*`` / ``S*``), else ``word``."""
    if tokenizer is not None:
        if token_id == getattr(tokenizer, "bos_token_id", None):
            return "BOS"
        if token_id in set(getattr(tokenizer, "all_special_ids", ()) or ()):
            return "special"
    if "\n" in text or "\r" in text:
        return "newline"
    core = "".join(text.split())
    if not core:
        return "space"
    if all(unicodedata.category(ch)[0] in "PS" for ch in core):
        return "punctuation"
    return "word"


def heavy_hitter_tokens(s, tokenizer=None, k: int = 5, by: str = "share", min_key_share: float = 0.0):
    """Each head's ``k`` token ids with the largest attention mass (keys other than the sinks, all prompts), or with
    the largest lift (``by="lift"``: attention beyond the id's frequency).

    Ranking by mass favours frequent ids (on SmolLM2-135M and pydoc text, `` the`` and ``\\n`` top most heads with a
    median lift near 2); ranking by lift among ids on at least ``min_key_share`` of the keys names the ids a head seeks.

    Args:
        s: a scan with ``heavy_hitters=True`` (``ScanResult`` or any ``Summed``).
        tokenizer: decodes one id (``model.tokenizer``); None: ``token`` and ``class`` are empty (ids only).
        k: ids per head (fewer where fewer distinct ids occur).
        by: ``"share"`` or ``"lift"``; min_key_share: rank only ids holding at least this share of the keys.

    Returns:
        DataFrame with ``layer, head, rank, token_id, token, class, share, key_share, lift``: ``share`` the count-min
        estimate of the share of the head's attention on keys ``>= skip`` that goes to the id (an upper estimate, error
        ``<= e / WIDTH`` with probability ``>= 1 - e^-DEPTH``), ``key_share`` the share of keys ``>= skip`` holding the
        id (exact), ``lift = share / key_share``.

    Raises:
        KeyError: the scan ran without ``heavy_hitters=True``.
        ValueError: ``by`` is neither ``"share"`` nor ``"lift"``.
    """
    import pandas as pd

    if by not in ("share", "lift"):
        raise ValueError(f"by must be 'share' or 'lift', got {by!r}")
    if "hh_sketch" not in s.state:
        estimates(s, torch.zeros(0, dtype=torch.long))  # raises the one-line KeyError
    counts = s.state["hh_keys"]
    ids = (counts > 0).nonzero().flatten()
    ids = ids[counts[ids] / counts.sum().clamp(min=1) >= min_key_share]
    total = s.state["hh_sketch"][:, :, 0, :].sum(-1)  # [L, H]: every row of a sketch sums to the total mass
    L, H = total.shape
    cols = ["layer", "head", "rank", "token_id", "token", "class", "share", "key_share", "lift"]
    if not ids.numel():
        return pd.DataFrame(columns=cols)
    share = estimates(s, ids) / total.clamp(min=1e-300)[..., None]
    key_share = counts[ids] / counts.sum()
    rank_by = share if by == "share" else share / key_share
    top = rank_by.topk(min(k, ids.numel()), -1)
    texts: dict[int, str] = {}
    rows = []
    for layer in range(L):
        for head in range(H):
            for r, c in enumerate(top.indices[layer, head].tolist()):
                t, v = int(ids[c]), float(share[layer, head, c])
                if t not in texts:
                    texts[t] = tokenizer.decode([t]) if tokenizer is not None else ""
                ks = float(key_share[c])
                cls = token_class(t, texts[t], tokenizer) if tokenizer is not None else ""
                rows.append((layer, head, r, t, texts[t], cls, v, ks,
                             v / ks if ks > 0 else math.nan))
    return pd.DataFrame(rows, columns=cols)


def class_summary(table) -> "pd.DataFrame":  # noqa: F821
    """Model-level shares of the heavy hitters by class (``token_class``), from ``heavy_hitter_tokens``' table.

    Returns:
        DataFrame with ``class, entries, entry_share, attention_share`` over ``CLASSES`` (classes absent get 0):
        ``entries`` the number of (head, rank) rows of that class, ``entry_share`` their share of all rows,
        ``attention_share`` the share of the listed rows' summed ``share`` that their class holds.
    """
    import pandas as pd

    n, tot = len(table), float(table["share"].sum()) if len(table) else 0.0
    rows = []
    for c in CLASSES:
        sel = table[table["class"] == c] if n else table
        rows.append((c, len(sel), len(sel) / n if n else 0.0, float(sel["share"].sum()) / tot if tot > 0 else 0.0))
    return pd.DataFrame(rows, columns=["class", "entries", "entry_share", "attention_share"])
