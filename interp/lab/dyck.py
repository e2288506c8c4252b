"""Balanced single-bracket (Dyck-1) words, their depth, exact sampling by depth, and completion accuracy.

Paper 002 (Richard, "Depth Extrapolation of Decoders Trained on Nested Structures"), Sec. 4 / 4.2:
words of ``D_2N`` are the balanced strings of ``2N`` brackets; the *depth* of a word is its maximum
prefix sum (stack size) with ``'(' = +1`` and ``')' = -1``; a model is scored by completing a prefix to
``2N`` characters and checking that the result is balanced.

Representation: a word is a row of token *codes* ``0 = '('``, ``1 = ')'`` (the paper's own tokenization,
Sec. 5.3.1), numpy ``uint8`` or torch ``int64``; ``steps = 1 - 2 * code`` is ``+1 / -1``.

Sampling is exact: ``completion_counts`` is a dynamic programme over (position, height, running maximum)
that counts the balanced completions whose final depth lies in a given set, and ``unrank`` walks it to turn
an integer rank in ``[0, count)`` into the word of that rank (lexicographic, ``'(' < ')'``). Uniform integer
ranks give uniform words (``sample``); all ranks give all words (``enumerate_words``: the 4,000 words of
length 32 and depth >= 13 among the 35,357,670 of ``D_32``; the README's slip list notes that uniform sampling
would essentially never find them).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Iterable

import numpy as np
import torch

OPEN, CLOSE = "(", ")"
SYMBOLS = (OPEN, CLOSE)
MAX_N = 60  # counts stay below 2**62 (int64) up to this length
MAX_ENUMERATE = 10_000_000

__all__ = ["OPEN", "CLOSE", "SYMBOLS", "to_codes", "to_strings", "heights", "depth", "is_balanced", "is_completable",
           "bounded_counts", "count_by_depth", "completion_counts", "count", "unrank", "sample", "enumerate_words",
           "cut_at_max", "unique_prefixes", "all_prefixes", "complete", "completion_accuracy", "Policy"]

Policy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _depth_set(n: int, depths: Iterable[int] | None) -> tuple[int, ...]:
    if n < 0 or n % 2 or n > MAX_N:
        raise ValueError(f"word length n must be even and in [0, {MAX_N}]; got {n}")
    full = tuple(range(n // 2 + 1))
    if depths is None:
        return full
    ds = tuple(sorted({int(d) for d in depths}))
    if any(d < 0 for d in ds):
        raise ValueError(f"depths must be >= 0; got {ds}")
    return tuple(d for d in ds if d <= n // 2)


def to_codes(words: Iterable[str]) -> np.ndarray:
    """``[batch, n]`` uint8 codes (``'(' -> 0``, ``')' -> 1``) of equal-length bracket strings.

    Raises:
        ValueError: a character other than ``(`` / ``)``, or strings of different lengths.
    """
    words = list(words)
    if len({len(w) for w in words}) > 1:
        raise ValueError(f"words must have equal lengths; got lengths {sorted({len(w) for w in words})}")
    bad = {c for w in words for c in w} - set(SYMBOLS)
    if bad:
        raise ValueError(f"words may only contain '(' and ')'; got {sorted(bad)}")
    n = len(words[0]) if words else 0
    return np.array([[c == CLOSE for c in w] for w in words], dtype=np.uint8).reshape(len(words), n)


def to_strings(codes) -> list[str]:
    """Bracket strings of a ``[batch, n]`` array of codes (0 = '(', 1 = ')')."""
    codes = np.asarray(codes)
    return ["".join(SYMBOLS[int(c)] for c in row) for row in codes.reshape(-1, codes.shape[-1])]


def heights(codes) -> np.ndarray:
    """``[batch, n]`` int64 prefix sums (stack size after each character) of codes ``[batch, n]``; 002 eq. 9."""
    codes = np.asarray(codes)
    if codes.size and not np.isin(codes, (0, 1)).all():
        raise ValueError("codes must be 0 ('(') or 1 (')')")
    return np.cumsum(1 - 2 * codes.astype(np.int64), axis=-1)


def depth(codes) -> np.ndarray:
    """``[batch]`` maximum prefix sum of codes ``[batch, n]`` (002 Sec. 4: the highest point of the path; 0 if empty)."""
    h = heights(codes)
    return np.maximum(h.max(axis=-1), 0) if h.shape[-1] else np.zeros(h.shape[:-1], dtype=np.int64)


def is_balanced(codes) -> np.ndarray:
    """``[batch]`` bool: the word is in ``D_n`` (no prefix sum below 0 and total 0). 002 Sec. 4.2's criterion."""
    h = heights(codes)
    if h.shape[-1] == 0:
        return np.ones(h.shape[:-1], dtype=bool)
    return (h.min(axis=-1) >= 0) & (h[..., -1] == 0)


def is_completable(codes, n: int) -> np.ndarray:
    """``[batch]`` bool: the prefix ``codes [batch, r]`` is a prefix of some word of ``D_n`` (r <= n, even n).

    True iff every prefix sum is >= 0 and the final height ``h`` satisfies ``h <= n - r`` (enough characters
    left to close; the parity then matches automatically since ``h = r mod 2``).
    """
    h = heights(codes)
    r = h.shape[-1]
    if r == 0:
        return np.ones(h.shape[:-1], dtype=bool)
    return (h.min(axis=-1) >= 0) & (h[..., -1] <= n - r) & (r <= n)


@lru_cache(maxsize=None)
def bounded_counts(n: int, cap: int) -> np.ndarray:
    """``G [n + 1, cap + 2]`` int64: ``G[i, h]`` = number of ways to go from height ``h`` after ``i`` characters to
    height 0 after ``n`` characters with every height in ``[0, cap]`` (``G[:, cap + 1] = 0``; ``cap = -1``: all 0).

    Raises:
        ValueError: odd or too large ``n`` (counts must fit int64).
    """
    _depth_set(n, None)
    G = np.zeros((n + 1, max(cap, -1) + 2), dtype=np.int64)
    if cap >= 0:
        G[n, 0] = 1
        for i in range(n - 1, -1, -1):  # one step: up to h + 1 (0 beyond cap: G[:, cap + 1] = 0) or down to h - 1
            G[i, : cap + 1] = G[i + 1, 1: cap + 2] + np.concatenate([[0], G[i + 1, : cap]])
    G.flags.writeable = False
    return G


def count_by_depth(n: int) -> np.ndarray:
    """``[n // 2 + 1]`` int64: number of words of ``D_n`` of depth exactly ``k`` (``sum`` = Catalan ``C_{n/2}``)."""
    _depth_set(n, None)
    le = np.array([bounded_counts(n, k)[0, 0] for k in range(n // 2 + 1)], dtype=np.int64)
    return np.diff(le, prepend=0)


@lru_cache(maxsize=None)
def completion_counts(n: int, depths: tuple[int, ...]) -> np.ndarray:
    """``C [n + 1, H + 2, H + 2]`` int64 with ``H = n // 2``: ``C[i, h, m]`` = number of ways to finish a prefix of
    length ``i``, height ``h`` and running maximum ``m`` into a word of ``D_n`` whose depth lies in ``depths``.

    With ``G_k`` = ``bounded_counts(n, k)``: the final depth is ``m`` iff the rest stays ``<= m`` (``G_m[i, h]``
    ways) and is ``k > m`` iff the rest peaks at exactly ``k`` (``G_k[i, h] - G_{k-1}[i, h]`` ways).

    Raises:
        ValueError: odd / too large ``n``, negative depths.
    """
    ds = _depth_set(n, depths)
    H = n // 2
    G = np.zeros((H + 2, n + 1, H + 2), dtype=np.int64)  # G[k + 1] = bounded_counts(n, k), G[0] = 0 (cap -1)
    for k in range(H + 1):
        G[k + 1, :, : k + 2] = bounded_counts(n, k)
    C = np.zeros((n + 1, H + 2, H + 2), dtype=np.int64)
    for m in range(H + 1):
        tot = G[m + 1] if m in ds else np.zeros_like(G[0])
        for k in ds:
            if k > m:
                tot = tot + G[k + 1] - G[k]
        C[:, :, m] = tot
    C.flags.writeable = False
    return C


def count(n: int, depths: Iterable[int] | None = None) -> int:
    """Number of words of ``D_n`` whose depth lies in ``depths`` (None: all, the Catalan number)."""
    return int(completion_counts(n, _depth_set(n, depths))[0, 0, 0])


def unrank(ranks, n: int, depths: Iterable[int] | None = None) -> np.ndarray:
    """``[batch, n]`` uint8 codes of the words of given lexicographic ranks (``'(' < ')'``) among the words of
    ``D_n`` with depth in ``depths``; ``ranks [batch]`` integers in ``[0, count(n, depths))``.

    Vectorised over ranks: at each position the word opens iff its rank is below the number of valid
    completions that open there (``completion_counts``), else it closes and that number is subtracted.

    Raises:
        ValueError: a rank outside ``[0, count)``; bad ``n`` / ``depths``.
    """
    ds = _depth_set(n, depths)
    C = completion_counts(n, ds)
    r = np.asarray(ranks, dtype=np.int64).copy().reshape(-1)
    total = C[0, 0, 0]
    if r.size and (r.min() < 0 or r.max() >= total):
        raise ValueError(f"ranks must lie in [0, {total}) for n={n}, depths={ds}; got [{r.min()}, {r.max()}]")
    out = np.zeros((r.size, n), dtype=np.uint8)
    h = np.zeros(r.size, dtype=np.int64)
    m = np.zeros(r.size, dtype=np.int64)
    H = n // 2
    for i in range(n):
        up = np.minimum(h + 1, H + 1)
        n_open = np.where(h + 1 <= H, C[i + 1, up, np.maximum(m, up)], 0)
        close = r >= n_open
        r -= np.where(close, n_open, 0)
        out[:, i] = close
        h += np.where(close, -1, 1)
        m = np.maximum(m, h)
    return out


def sample(n: int, depths: Iterable[int] | None, size: int, rng: np.random.Generator, *, distinct: bool = False) -> np.ndarray:
    """``[size, n]`` uint8 codes drawn exactly uniformly from the words of ``D_n`` with depth in ``depths``.

    Args:
        distinct: draw without replacement (002 Sec. 4.2 trains on sets of distinct words).

    Raises:
        ValueError: empty depth set, or ``distinct`` with ``size`` above the number of words.
    """
    ds = _depth_set(n, depths)
    total = count(n, ds)
    if total == 0:
        raise ValueError(f"no word of length {n} has depth in {ds}")
    if distinct and size > total:
        raise ValueError(f"asked for {size} distinct words but only {total} have length {n} and depth in {ds}")
    ranks = rng.choice(total, size=size, replace=False) if distinct else rng.integers(0, total, size=size)
    return unrank(ranks, n, ds)


def enumerate_words(n: int, depths: Iterable[int] | None = None) -> np.ndarray:
    """``[count, n]`` uint8 codes of every word of ``D_n`` with depth in ``depths``, in lexicographic order.

    Raises:
        ValueError: more than ``MAX_ENUMERATE`` words (use ``sample``).
    """
    total = count(n, depths)
    if total > MAX_ENUMERATE:
        raise ValueError(f"{total} words is too many to enumerate (limit {MAX_ENUMERATE}); sample them instead")
    return unrank(np.arange(total), n, depths)


def cut_at_max(codes) -> tuple[np.ndarray, np.ndarray]:
    """Cut each word right after the first time it reaches its maximum depth (002 Sec. 4.2: test prefixes of depth q).

    Args:
        codes: ``[batch, n]`` words.

    Returns:
        ``(codes [batch, n], lengths [batch])``: the words unchanged and the prefix lengths
        ``1 + argmax(heights)`` (the prefix of a word of depth q has depth q and ends at height q).
    """
    codes = np.asarray(codes)
    return codes, 1 + heights(codes).argmax(axis=-1)


def unique_prefixes(codes, lengths) -> tuple[np.ndarray, np.ndarray]:
    """The distinct prefixes ``codes[b, :lengths[b]]`` in order of first occurrence: ``(codes [m, n], lengths [m])``,
    codes zeroed after each prefix (002 Sec. 4.2 evaluates on *distinct* prefixes).

    Raises:
        ValueError: shapes disagree or a length outside ``[0, n]``.
    """
    codes, lengths = np.asarray(codes), np.asarray(lengths).reshape(-1)
    if codes.ndim != 2 or codes.shape[0] != lengths.shape[0]:
        raise ValueError(f"codes [batch, n] and lengths [batch] expected; got {codes.shape}, {lengths.shape}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > codes.shape[1]):
        raise ValueError(f"prefix lengths must lie in [0, {codes.shape[1]}]")
    masked = np.where(np.arange(codes.shape[1])[None, :] < lengths[:, None], codes, 0).astype(np.uint8)
    key = np.concatenate([masked, lengths[:, None].astype(np.uint8)], axis=1)
    _, first = np.unique(key, axis=0, return_index=True)
    first = np.sort(first)
    return masked[first], lengths[first]


def all_prefixes(codes, lengths: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every word repeated once per prefix length: ``(codes [batch * L, n], lengths [batch * L])``.

    ``lengths`` defaults to ``1 .. n - 1`` (002 Thm 4.1's prefixes ``z_{:r}``, r >= 1; r = n is the word itself).
    """
    codes = np.asarray(codes)
    ls = np.arange(1, codes.shape[-1]) if lengths is None else np.asarray(list(lengths))
    return np.repeat(codes, len(ls), axis=0), np.tile(ls, codes.shape[0])


@torch.no_grad()
def complete(policy: Policy, codes, lengths, *, greedy: bool = True, generator: torch.Generator | None = None,
             batch_size: int = 8192) -> np.ndarray:
    """Complete each prefix ``codes[b, :lengths[b]]`` to the full length ``n`` with a model; 002 Sec. 4.2.

    Args:
        policy: ``policy(buf, ends) -> logits [batch, 2]`` for the next code (``'('``, ``')'``) after
            ``buf[b, :ends[b]]``; ``buf`` is ``[batch, n]`` int64 codes, where entries at and after ``ends[b]``
            are arbitrary (a causal model must ignore them); ``ends`` ``[batch]`` int64 >= 1.
            Decoding is over the two brackets only: the paper's vocabulary is ``{'(', ')'}``.
        codes: ``[batch, n]`` codes (only the prefixes are read).
        lengths: ``[batch]`` prefix lengths in ``[1, n]``.
        greedy: argmax decoding; otherwise sample from the softmax at temperature 1 (002 eq. 1).
        generator: torch generator for sampling (seeded by the caller).

    Returns:
        ``[batch, n]`` uint8 completed words (prefix kept; one policy call per missing position).

    Raises:
        ValueError: shapes disagree, or a length outside ``[1, n]``.
    """
    codes = torch.as_tensor(np.asarray(codes), dtype=torch.long)
    lengths = torch.as_tensor(np.asarray(lengths), dtype=torch.long).reshape(-1)
    if codes.dim() != 2 or codes.shape[0] != lengths.shape[0]:
        raise ValueError(f"codes must be [batch, n] with one length per row; got {tuple(codes.shape)} and {tuple(lengths.shape)}")
    n = codes.shape[1]
    if lengths.numel() and (lengths.min() < 1 or lengths.max() > n):
        raise ValueError(f"prefix lengths must lie in [1, {n}]; got [{int(lengths.min())}, {int(lengths.max())}]")
    out = []
    for s in range(0, codes.shape[0], batch_size):
        buf, ends = codes[s: s + batch_size].clone(), lengths[s: s + batch_size].clone()
        buf[torch.arange(n)[None, :] >= ends[:, None]] = 0
        while True:
            todo = (ends < n).nonzero().reshape(-1)
            if todo.numel() == 0:
                break
            logits = policy(buf[todo], ends[todo]).float()
            if greedy:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).reshape(-1)
            buf[todo, ends[todo]] = nxt
            ends[todo] += 1
        out.append(buf)
    return torch.cat(out).numpy().astype(np.uint8) if out else np.zeros((0, n), dtype=np.uint8)


def completion_accuracy(policy: Policy, codes, lengths, *, greedy: bool = True, generator: torch.Generator | None = None,
                        batch_size: int = 8192) -> float:
    """Fraction of prefixes whose completion to length ``n`` is balanced (002 Sec. 4.2's accuracy), in [0, 1]."""
    done = complete(policy, codes, lengths, greedy=greedy, generator=generator, batch_size=batch_size)
    return float(is_balanced(done).mean()) if len(done) else float("nan")
