"""Variable assignment with a scratchpad under Predictive Position Coupling (paper 003, Sec. 5.2.2, App. E.3.1).

Data (003 App. E.3.1, eq. 21): ``w`` chains of depth ``d``, chain ``j`` being the assignments
``v_{j,1} <- v_{j,2}; v_{j,2} <- v_{j,3}; ...; v_{j,d} <- v_{j,d+1}`` over distinct variables, are interleaved at
random (each chain keeps its order). The sequence is

    <BOS>, v_{1,1}, <SEP1>, (the 3 w d tokens of the interleaved assignments), <SEP2>,
    v_{1,1}, <-, v_{1,2}, v_{1,2}, <-, v_{1,3}, ..., v_{1,d}, <-, v_{1,d+1}

(the scratchpad, ``3 d`` tokens, follows chain 1 from ``v_init = v_{1,1}``; the model is trained on it). For a
desired input length ``l`` (tokens between ``<SEP1>`` and ``<SEP2>``) ``w = floor(l / (3 d))``, the largest ``w``
whose assignments fit in ``l`` tokens (App. E.3.1).

Coupled position ids (App. E.3.1): the input part (``<BOS>`` .. the last assignment) gets its true ids
``0, 1, 2, ...``; ``<SEP2>`` gets 0; scratchpad step ``j`` gets ``I_j, I_j + 1, I_j + 2`` where ``I_j`` is the id of
the left-hand ``v_{1,j}`` of chain 1's ``j``-th assignment in the input. So every scratchpad token shares its id with
the input token it copies, and ``I_{j+1}`` depends on the interleaving: the model must *predict* it (PPC).
Training shifts all ids of a sequence by one uniform offset (003 Sec. 5.2), as :func:`interp.lab.ppc.ppc_batch`.

The baseline (003 App. E.3.2, Fig. 5a): learned absolute position embeddings of ``arange(n)`` with the same random
offset, no coupling; exact match counts tokens.

Vocabulary (``interp.lab.Vocab`` over :func:`va_symbols`): 0 pad, 1 bos, 2 unk, 3 ``<-``, 4 ``<SEP1>``,
5 ``<SEP2>``, then the variables ``v0 .. v{n_vars-1}`` (003 Table 3: 200 variables).
"""

from __future__ import annotations

import numpy as np
import torch

from interp.lab import ppc

N_VARS = 200  # 003 Table 3: vocabulary size (number of variables)
L_MAX = 230  # 003 Table 3: maximum position id
ARROW, SEP1, SEP2 = 3, 4, 5
VAR0 = 6  # id of v0


def va_symbols(n_vars: int = N_VARS) -> list[str]:
    """Symbols in vocabulary order: ``"<-", "<SEP1>", "<SEP2>", "v0", ..., "v{n_vars-1}"`` (ids 3, 4, 5, 6, ...)."""
    return ["<-", "<SEP1>", "<SEP2>"] + [f"v{i}" for i in range(n_vars)]


def vocab_size(n_vars: int = N_VARS) -> int:
    """Number of token ids: the 3 specials of ``interp.lab.Vocab``, 3 separators and ``n_vars`` variables."""
    return VAR0 + n_vars


def n_chains(ell: int, depth: int) -> int:
    """``w = floor(l / (3 d))``: the most chains whose ``3 w d`` assignment tokens fit in ``l`` (003 App. E.3.1).

    Raises:
        ValueError: ``depth < 1`` or ``l < 3 d`` (not even one chain fits).
    """
    if not (isinstance(depth, (int, np.integer)) and depth >= 1 and isinstance(ell, (int, np.integer)) and ell >= 3 * depth):
        raise ValueError(f"variable assignment: need integers depth >= 1 and l >= 3 * depth, got l={ell!r}, depth={depth!r}")
    return int(ell) // (3 * int(depth))


def sample_va(rng: np.random.Generator, ell: int, depth: int, n_vars: int = N_VARS) -> tuple[np.ndarray, np.ndarray, int]:
    """One example: (token ids [n], coupled position ids [n], index of the first scratchpad token).

    ``n = 3 + 3 w d + 1 + 3 d`` with ``w = n_chains(l, depth)``; the scratchpad is ``tokens[n - 3 d:]``.

    Raises:
        ValueError: as :func:`n_chains`, or ``w (d + 1) > n_vars`` (not enough distinct variables).
    """
    w = n_chains(ell, depth)
    if w * (depth + 1) > n_vars:
        raise ValueError(f"variable assignment: {w} chains of depth {depth} need {w * (depth + 1)} distinct variables, "
                         f"more than n_vars={n_vars}; use a shorter l or more variables")
    chains = VAR0 + rng.choice(n_vars, w * (depth + 1), replace=False).reshape(w, depth + 1)
    order = rng.permutation(np.repeat(np.arange(w), depth))  # which chain each input assignment comes from
    step = np.zeros(w, np.int64)
    body, lhs_id = [], np.zeros(depth, np.int64)
    for c in order:
        j = step[c]
        if c == 0:
            lhs_id[j] = 3 + len(body)  # <BOS>, v_init, <SEP1> have ids 0, 1, 2
        body += [chains[c, j], ARROW, chains[c, j + 1]]
        step[c] += 1
    pad = [x for j in range(depth) for x in (chains[0, j], ARROW, chains[0, j + 1])]
    tok = np.array([ppc.BOS, chains[0, 0], SEP1] + body + [SEP2] + pad, np.int64)
    n_in = 3 + len(body)
    pos = np.concatenate([np.arange(n_in), [0], (lhs_id[:, None] + np.arange(3)).ravel()]).astype(np.int64)
    return tok, pos, n_in + 1


def l_max_for(max_ell: int, depth: int, coupled: bool, margin: int = 9) -> int:
    """Size of the position-id range a test with inputs up to ``max_ell`` tokens uses, + ``margin``.

    Coupled ids reach ``3 + 3 w d - 1`` (the last assignment token); plain ids ``3 w d + 3 d + 3``.

    Raises:
        ValueError: as :func:`n_chains` or ``margin < 1``.
    """
    w = n_chains(max_ell, depth)
    if margin < 1:
        raise ValueError(f"l_max_for: margin must be >= 1, got {margin}")
    top = 2 + 3 * w * depth if coupled else 3 + 3 * w * depth + 3 * depth
    return top + margin


def va_batch(rng: np.random.Generator, batch: int, ell_range: tuple[int, int], depth: int, coupled: bool = True,
             l_max: int = L_MAX, shift: bool = True, max_offset: int | None = None, n_vars: int = N_VARS) -> dict:
    """A batch of variable assignment, ``l`` uniform in ``ell_range`` (inclusive), laid out as ``ppc.ppc_batch``.

    ``coupled``: ids from :func:`sample_va`; else ``arange(n)``. ``shift`` / ``max_offset``: one uniform offset per
    sequence with all ids ``< l_max`` (training), as :func:`interp.lab.ppc.shift_ids`; ``shift=False`` at test.

    Returns:
        dict(input_ids [batch, pos] int64, position_ids [batch, pos] int64, loss_mask [batch, pos] bool (True on the
        ``3 d`` scratchpad tokens), ell [batch] int64) as torch tensors.

    Raises:
        ValueError: ``ell_range`` below ``3 d``, a sequence that does not fit in ``l_max`` ids, or as :func:`sample_va`.
    """
    if ell_range[0] < 3 * depth or ell_range[1] < ell_range[0]:
        raise ValueError(f"va_batch: ell_range {ell_range} must satisfy 3 * depth <= lo <= hi (depth {depth})")
    ells = rng.integers(ell_range[0], ell_range[1] + 1, batch)
    rows = []
    for ell in ells:
        tok, pos, start = sample_va(rng, int(ell), depth, n_vars)
        if not coupled:
            pos = np.arange(len(tok))
        if pos.max() >= l_max:
            raise ValueError(f"va_batch: l = {ell} needs position id {pos.max()} >= l_max={l_max}")
        if shift:
            pos = ppc.shift_ids(rng, pos, l_max, max_offset)
        rows.append((tok, pos, start))
    out = ppc.pack_rows(rows, l_max)
    out["ell"] = torch.from_numpy(ells.astype(np.int64))
    return out


def exact_match(model, rng: np.random.Generator, ell_range: tuple[int, int], depth: int, n_examples: int, coupled: bool,
                batch_size: int = 64, l_max: int = L_MAX, n_vars: int = N_VARS) -> float:
    """Fraction of ``n_examples`` test inputs (offset 0) whose whole scratchpad, and for a ``ppc.PPCModel`` all its
    predicted position ids, is right (003 Fig. 1c's metric), by :func:`interp.lab.ppc.exact_match_of`.

    Raises:
        ValueError: ``n_examples < 1`` or as :func:`va_batch`.
    """
    return ppc.exact_match_of(model, lambda b: va_batch(rng, b, ell_range, depth, coupled, l_max, shift=False, n_vars=n_vars),
                              n_examples, batch_size)
