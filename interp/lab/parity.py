"""Sparse parity with RoPE + PoSE (paper 003, Sec. 5.1, App. E.1 and App. B.3), for the synthetic lab.

The task (003 App. E.1.1, eq. 19): with an alphabet of ``N`` "marker" symbols ``1..N`` plus ``t0, t1, <SEP>``,
a sample of ``D^sp_{l,k}`` is

    <BOS>, J_1, t_{b_1}, ..., J_l, t_{b_l}, <SEP>, t_{b*}

with ``(J_1..J_l)`` uniform on ``[N]^l`` subject to exactly ``k`` of them being ``<= N/2`` (the *markers*),
``b_i ~ Unif{0,1}`` and ``b* = XOR of b_i over the marked i``. The model is trained to predict the last token.
The length of a sample is ``2 l`` (its ``J``/bit tokens; the paper's "length"); the token sequence has
``2 l + 3`` tokens. The label depends on ``2 k`` tokens (the ``k`` markers and the ``k`` bits after them):
the true sparsity is ``2k`` (the paper's text says ``k``; see papers/README.md). ``k < l`` as in App. E.1.1.

PoSE (003 App. B.3; Zhu et al. 2023): a training sequence of ``n`` tokens is cut into ``c`` contiguous
chunks, and chunk ``i`` gets the ids ``start_i + u_i + arange(len_i)`` with skips ``0 = u_0 <= u_1 <= ... <=
u_{c-1} <= L_max - n``, ``u_i ~ Unif{u_{i-1}, ..., L_max - n}`` (PoSE's sampling), so the ids are strictly
increasing, lie in ``[0, L_max)`` and, over training, cover all ids a test sequence of up to ``L_max``
tokens uses. At test time the true ids ``arange(n)`` are used.

Token ids follow ``interp.lab.Vocab``: 0 = <pad>, 1 = <bos>, 2 = <unk>, then :func:`sparse_parity_symbols`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

N_DEFAULT = 20  # 003 App. E.1, Table 1: vocabulary size N
L_MAX = 510  # 003 Table 1: maximum position id (test sequences of 2l <= 500 have 2l + 3 <= 503 tokens)
PAD, BOS = 0, 1  # interp.lab.Vocab's fixed ids
_FIRST = 3  # the first symbol's id in interp.lab.Vocab (after <pad>, <bos>, <unk>)


def sparse_parity_symbols(n: int = N_DEFAULT) -> list[str]:
    """The task's symbols in vocabulary order: markers ``"1".."n"``, then ``"t0", "t1", "<SEP>"``.

    Source: 003 App. E.1.1 (alphabet ``[N] u {t_0, t_1, <BOS>, <SEP>}``; <BOS> is the Vocab's own).

    Raises:
        ValueError: ``n < 2`` or odd (the marker threshold is ``N/2``).
    """
    if not isinstance(n, (int, np.integer)) or n < 2 or n % 2:
        raise ValueError(f"sparse parity: N must be an even integer >= 2, got {n!r}")
    return [str(j) for j in range(1, n + 1)] + ["t0", "t1", "<SEP>"]


@dataclass(frozen=True)
class SparseParityIds:
    """Token ids of the sparse-parity alphabet under the ``interp.lab.Vocab`` layout (0 pad, 1 bos, 2 unk, symbols).

    ``marker(j)`` for ``j`` in ``1..n`` is ``j + 2``; ``t0 = n + 3``, ``t1 = n + 4``, ``sep = n + 5``;
    ``vocab_size = n + 6``. Source: 003 App. E.1.1.
    """

    n: int = N_DEFAULT

    def __post_init__(self):
        sparse_parity_symbols(self.n)  # validates n

    @property
    def t0(self) -> int:
        return _FIRST + self.n

    @property
    def t1(self) -> int:
        return _FIRST + self.n + 1

    @property
    def sep(self) -> int:
        return _FIRST + self.n + 2

    @property
    def vocab_size(self) -> int:
        return _FIRST + self.n + 3

    def marker(self, j):
        """Id of marker symbol ``j`` (int or array with values in ``1..n``)."""
        return np.asarray(j) + (_FIRST - 1)


def sample_sparse_parity(rng: np.random.Generator, size: int, ell: int, k: int, n: int = N_DEFAULT
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``size`` draws of ``D^sp_{l,k}`` (003 App. E.1.1, eq. 19) as arrays.

    ``J`` is uniform on ``[n]^l`` conditioned on exactly ``k`` entries ``<= n/2``: a uniform ``k``-subset of
    slots is marked, marked slots are uniform on ``1..n/2`` and the others uniform on ``n/2+1..n`` (every
    admissible ``J`` has probability ``1 / (C(l,k) (n/2)^l)``, so this is the conditional law exactly).

    Returns:
        ``J`` [batch, l] int64 in ``1..n``; ``bits`` [batch, l] int64 in {0, 1};
        ``label`` [batch] int64, the XOR of ``bits`` where ``J <= n/2``.

    Raises:
        ValueError: not ``1 <= k < l`` (003 App. E.1.1 takes ``k < l``), ``size < 1`` or a bad ``n``.
    """
    sparse_parity_symbols(n)
    if not (isinstance(size, (int, np.integer)) and size >= 1):
        raise ValueError(f"sparse parity: size must be a positive integer, got {size!r}")
    if not (isinstance(ell, (int, np.integer)) and isinstance(k, (int, np.integer)) and 1 <= k < ell):
        raise ValueError(f"sparse parity: need integers 1 <= k < l, got k={k!r}, l={ell!r}")
    half = n // 2
    # a uniform k-subset of slots per row: the k smallest of l iid uniforms
    marked = np.argsort(rng.random((size, ell)), axis=1) < k
    J = np.where(marked, rng.integers(1, half + 1, (size, ell)), rng.integers(half + 1, n + 1, (size, ell)))
    bits = rng.integers(0, 2, (size, ell))
    label = (bits * marked).sum(1) % 2
    return J.astype(np.int64), bits.astype(np.int64), label.astype(np.int64)


def encode_sparse_parity(J: np.ndarray, bits: np.ndarray, label: np.ndarray, ids: SparseParityIds) -> np.ndarray:
    """Token ids of eq. 19: ``[BOS, J_1, t_b1, ..., J_l, t_bl, SEP, t_b*]``.

    Args:
        J: [batch, l] markers in ``1..ids.n``. bits: [batch, l] in {0,1}. label: [batch] in {0,1}.

    Returns:
        [batch, 2 l + 3] int64 token ids (no padding).

    Raises:
        ValueError: shapes disagree or values out of range.
    """
    J, bits, label = np.asarray(J), np.asarray(bits), np.asarray(label)
    if J.ndim != 2 or bits.shape != J.shape or label.shape != J.shape[:1]:
        raise ValueError(f"encode_sparse_parity: need J, bits [batch, l] and label [batch], got {J.shape}, {bits.shape}, {label.shape}")
    if J.min() < 1 or J.max() > ids.n or not np.isin(bits, (0, 1)).all() or not np.isin(label, (0, 1)).all():
        raise ValueError("encode_sparse_parity: J must lie in 1..N, bits and label in {0, 1}")
    b, ell = J.shape
    out = np.empty((b, 2 * ell + 3), np.int64)
    out[:, 0] = BOS
    out[:, 1:2 * ell + 1:2] = ids.marker(J)
    out[:, 2:2 * ell + 2:2] = ids.t0 + bits
    out[:, 2 * ell + 1] = ids.sep
    out[:, 2 * ell + 2] = ids.t0 + label
    return out


def pose_position_ids(rng: np.random.Generator, n: int, l_max: int = L_MAX, chunks: int = 2) -> np.ndarray:
    """PoSE position ids for one training sequence (003 App. B.3; Zhu et al. 2023, Sec. 3.2).

    The ``n`` tokens are cut at ``chunks - 1`` distinct uniform points into non-empty contiguous chunks; chunk
    ``i`` (0-based) gets ``start_i + u_i + arange(len_i)`` where ``start_i`` is its first token index,
    ``u_0 = 0`` and ``u_i ~ Unif{u_{i-1}, ..., l_max - n}`` (PoSE's skip law). Hence ``ids[0] = 0``, ids are
    strictly increasing, ``ids[-1] <= l_max - 1``, and ids step by exactly 1 inside a chunk.

    Returns:
        [n] int64 position ids.

    Raises:
        ValueError: ``n < chunks``, ``chunks < 1`` or ``n > l_max``.
    """
    if not (isinstance(chunks, (int, np.integer)) and chunks >= 1 and isinstance(n, (int, np.integer)) and chunks <= n <= l_max):
        raise ValueError(f"PoSE: need integers 1 <= chunks <= n <= l_max, got chunks={chunks!r}, n={n!r}, l_max={l_max!r}")
    cuts = np.sort(rng.choice(np.arange(1, n), size=chunks - 1, replace=False)) if chunks > 1 else np.array([], np.int64)
    skips = np.zeros(chunks, np.int64)
    for i in range(1, chunks):
        skips[i] = rng.integers(skips[i - 1], l_max - n + 1)
    chunk_of = np.searchsorted(cuts, np.arange(n), side="right")  # chunk index of each token
    return (np.arange(n) + skips[chunk_of]).astype(np.int64)


def sparse_parity_batch(rng: np.random.Generator, batch: int, ell_range: tuple[int, int], k_range: tuple[int, int],
                        ids: SparseParityIds, pose: bool = True, l_max: int = L_MAX, chunks: int = 2) -> dict:
    """One training batch for ``interp.lab.train_model``: per example ``l ~ Unif[ell_range]``, ``k ~ Unif[k_range]``.

    003 Sec. 5.1: ``2l`` uniform in ``[20, 50]`` (``ell_range=(10, 25)``), ``k ~ Unif([K_train])``
    (``k_range=(1, K_train)``); ``k`` is capped at ``l - 1``. Sequences are right-padded with <pad> (id 0);
    the loss is on the final token ``t_b*`` only.

    Returns:
        dict(input_ids [batch, pos] int64, loss_mask [batch, pos] bool (True at the label), position_ids
        [batch, pos] int64 (PoSE ids if ``pose`` else ``arange``; pads continue the ids), label [batch] int64,
        k [batch] int64, ell [batch] int64) as torch tensors.

    Raises:
        ValueError: empty or inverted ranges, ``k_range[0] >= ell_range[0]`` or a too-long sequence for ``l_max``.
    """
    (l_lo, l_hi), (k_lo, k_hi) = ell_range, k_range
    if not (1 <= l_lo <= l_hi and 1 <= k_lo <= k_hi and k_lo < l_lo and 2 * l_hi + 3 <= l_max):
        raise ValueError(f"sparse_parity_batch: bad ranges l={ell_range}, k={k_range} (need 1 <= k_lo < l_lo <= l_hi, 2 l_hi + 3 <= l_max)")
    ells = rng.integers(l_lo, l_hi + 1, batch)
    ks = np.minimum(rng.integers(k_lo, k_hi + 1, batch), ells - 1)
    width = 2 * ells.max() + 3
    tok = np.zeros((batch, width), np.int64)
    pos = np.zeros((batch, width), np.int64)
    mask = np.zeros((batch, width), bool)
    labels = np.zeros(batch, np.int64)
    for r, (ell, k) in enumerate(zip(ells, ks)):
        J, bits, lab = sample_sparse_parity(rng, 1, int(ell), int(k), ids.n)
        n = 2 * ell + 3
        tok[r, :n] = encode_sparse_parity(J, bits, lab, ids)[0]
        p = pose_position_ids(rng, n, l_max, chunks) if pose else np.arange(n)
        pos[r, :n] = p
        pos[r, n:] = p[-1] + 1 + np.arange(width - n)  # pads: never attended by real tokens (causal)
        mask[r, n - 1] = True
        labels[r] = lab[0]
    t = torch.from_numpy
    return dict(input_ids=t(tok), loss_mask=t(mask), position_ids=t(pos), label=t(labels), k=t(ks.astype(np.int64)),
                ell=t(ells.astype(np.int64)))


@torch.no_grad()
def sparse_parity_accuracy(model, rng: np.random.Generator, ell_range: tuple[int, int], k: int, n_examples: int,
                           ids: SparseParityIds, batch_size: int = 64) -> float:
    """Accuracy of the last-token prediction (argmax over the whole vocabulary) on ``D^sp_{l,k}``, true ids.

    003 Sec. 5.1 / Fig. 1a: ``l ~ Unif[ell_range]`` per example, position ids ``arange`` (no PoSE at test),
    ``n_examples`` draws. ``model(input_ids, position_ids=...)`` must return ``.logits`` [batch, pos, vocab].

    Returns:
        The fraction (float in [0, 1]) of examples whose argmax at <SEP> is ``t_b*``.

    Raises:
        ValueError: ``k >= ell_range[0]`` (``k < l`` is required) or ``n_examples < 1``.
    """
    if n_examples < 1 or not (1 <= k < ell_range[0] <= ell_range[1]):
        raise ValueError(f"sparse_parity_accuracy: need n_examples >= 1 and 1 <= k < l_lo <= l_hi, got {n_examples}, k={k}, l={ell_range}")
    ells = np.sort(rng.integers(ell_range[0], ell_range[1] + 1, n_examples))  # sorted: little padding per chunk
    dev = next(model.parameters()).device
    correct = 0
    for s in range(0, n_examples, batch_size):
        chunk = ells[s:s + batch_size]
        width = 2 * chunk.max() + 3
        tok = np.zeros((len(chunk), width), np.int64)
        sep_at = 2 * chunk + 1
        labels = np.zeros(len(chunk), np.int64)
        for r, ell in enumerate(chunk):
            J, bits, lab = sample_sparse_parity(rng, 1, int(ell), k, ids.n)
            tok[r, :2 * ell + 3] = encode_sparse_parity(J, bits, lab, ids)[0]
            labels[r] = lab[0]
        inp = torch.from_numpy(tok).to(dev)
        pos = torch.arange(width, device=dev).expand(len(chunk), -1)
        logits = model(inp, position_ids=pos).logits
        pred = logits[torch.arange(len(chunk), device=dev), torch.from_numpy(sep_at).to(dev)].argmax(-1).cpu().numpy()
        correct += int((pred == ids.t0 + labels).sum())
    return correct / n_examples
