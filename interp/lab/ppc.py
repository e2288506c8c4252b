"""Parity with a scratchpad under Predictive Position Coupling (paper 003, Sec. 5.2 / 5.2.1, App. E.2).

Data (003 App. E.2.1, eq. 20, with the "jumps" of Sec. 5.2.1): for ``l`` input bits and jump ``k``,

    <BOS>, b_1, ..., b_l, <SEP>, b'_1, ..., b'_{l/k},     b'_i = b_1 xor ... xor b_{k i}

(the scratchpad writes every ``k``-th prefix parity; ``k = 1`` is the standard scratchpad; ``l`` must be a
multiple of ``k`` so that the last scratchpad bit is the parity of all ``l`` bits). The model is trained on the
scratchpad tokens. Coupled position ids (App. E.2.1, "each position id is repeated k times in the input"):

    <BOS> -> 0,  b_j -> ceil(j / k),  <SEP> -> 0,  b'_i -> i

so ``b'_i`` shares its id with the ``k`` input bits it adds to the running parity. In training every id of a
sequence is shifted by one uniform offset in ``{0, ..., L_max - 1 - max id}`` (Sec. 5.2); at test the offset
is 0. Predictive Position Coupling (Sec. 5.2, items 1-3): an extra head predicts, at every position, the
position id of the next token; both heads are trained with cross-entropy, weighted equally; at generation
the predicted token *and* predicted id are fed back. Exact match counts all scratchpad tokens and ids.

The baseline (003 App. E.2.2 (a)): the same learned absolute position embeddings without coupling, ids
``arange(n)`` shifted by a uniform random offset in training (0 at test); exact match counts tokens.

Length convention: a sample with ``l`` input bits has length ``2 l`` (input + scratchpad for ``k = 1``, the
paper's "2l in [10, 40]"), for every jump.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

L_MAX = 210  # 003 Table 2: maximum position id
PAD, BOS = 0, 1  # interp.lab.Vocab's fixed ids
ZERO, ONE, SEP = 3, 4, 5  # ids of ppc_symbols() under interp.lab.Vocab (0 pad, 1 bos, 2 unk, then symbols)
VOCAB_SIZE = 6


def ppc_symbols() -> list[str]:
    """Symbols of the scratchpad-parity task in vocabulary order: ``"0", "1", "<SEP>"`` (ids 3, 4, 5)."""
    return ["0", "1", "<SEP>"]


def _check(ell, jump) -> None:
    if not (isinstance(jump, (int, np.integer)) and jump >= 1 and isinstance(ell, (int, np.integer)) and ell >= 1 and ell % jump == 0):
        raise ValueError(f"scratchpad parity: need integers jump >= 1 and l >= 1 a multiple of jump, got l={ell!r}, jump={jump!r}")


def scratchpad_targets(bits: np.ndarray, jump: int) -> np.ndarray:
    """The scratchpad ``b'_i = XOR(b_1..b_{jump i})``, ``i = 1..l/jump`` (003 eq. 20 with jumps, Sec. 5.2.1).

    Args:
        bits: [batch, l] or [l] in {0, 1}.

    Returns:
        [batch, l / jump] (or [l / jump]) int64.

    Raises:
        ValueError: ``l`` not a positive multiple of ``jump`` or bits not in {0, 1}.
    """
    bits = np.asarray(bits)
    _check(bits.shape[-1], jump)
    if not np.isin(bits, (0, 1)).all():
        raise ValueError("scratchpad_targets: bits must be 0 or 1")
    return (np.cumsum(bits, axis=-1)[..., jump - 1::jump] % 2).astype(np.int64)


def scratchpad_tokens(bits: np.ndarray, jump: int) -> np.ndarray:
    """Token ids ``[BOS, b_1..b_l, SEP, b'_1..b'_{l/jump}]`` of one or a batch of inputs.

    Args:
        bits: [batch, l] or [l] in {0, 1}.

    Returns:
        [..., l + l/jump + 2] int64 (ids of :func:`ppc_symbols`).

    Raises:
        ValueError: as :func:`scratchpad_targets`.
    """
    bits = np.asarray(bits)
    sp = scratchpad_targets(bits, jump)
    lead = bits.shape[:-1]
    return np.concatenate([np.full(lead + (1,), BOS), ZERO + bits, np.full(lead + (1,), SEP), ZERO + sp], -1).astype(np.int64)


def coupled_position_ids(ell: int, jump: int) -> np.ndarray:
    """Coupled ids ``[0, ceil(j/jump) for j=1..l, 0, 1..l/jump]`` (003 App. E.2.1 with Sec. 5.2.1's repetition).

    Returns:
        [l + l/jump + 2] int64; the scratchpad bit ``b'_i`` has id ``i``, the id of input bits
        ``b_{jump(i-1)+1} .. b_{jump i}``.

    Raises:
        ValueError: ``l`` not a positive multiple of ``jump``.
    """
    _check(ell, jump)
    inp = (np.arange(1, ell + 1) + jump - 1) // jump
    return np.concatenate([[0], inp, [0], np.arange(1, ell // jump + 1)]).astype(np.int64)


def l_max_for(max_ell: int, jump: int, coupled: bool, margin: int = 9) -> int:
    """The size of the position-id range: the largest id a test sequence with ``max_ell`` input bits uses, + ``margin``.

    Coupled ids reach ``max_ell / jump``; plain ids ``max_ell + max_ell / jump + 1``. With ``margin = 9`` the
    uncoupled ``jump = 1``, ``2l = 200`` case gives 003 Table 2's ``L_max = 210``; the coupled ids need far fewer
    (``max_ell / jump + 10``), so the random training offsets spread over the ids a test can use.

    Raises:
        ValueError: ``max_ell`` not a positive multiple of ``jump`` or ``margin < 1``.
    """
    _check(max_ell, jump)
    if margin < 1:
        raise ValueError(f"l_max_for: margin must be >= 1, got {margin}")
    top = max_ell // jump if coupled else max_ell + max_ell // jump + 1
    return top + margin


def ppc_batch(rng: np.random.Generator, batch: int, ell_range: tuple[int, int], jump: int, coupled: bool = True,
              l_max: int = L_MAX, shift: bool = True, max_offset: int | None = None) -> dict:
    """A batch of scratchpad parity, ``l`` uniform over the multiples of ``jump`` in ``ell_range``.

    ``coupled``: ids from :func:`coupled_position_ids`; else ``arange(n)`` (the baseline). ``shift``: add one
    uniform offset per sequence with all ids ``< l_max`` (003 Sec. 5.2 training); ``False`` at test.
    ``max_offset``: cap the offset at this value (an offset curriculum; ``None``: no cap, the paper's law).
    Right-padded with <pad> (id 0); pads continue the ids (they follow the sequence, so never change it).

    Returns:
        dict(input_ids [batch, pos] int64, position_ids [batch, pos] int64, loss_mask [batch, pos] bool (True on
        the scratchpad tokens: the targets), ell [batch] int64) as torch tensors.

    Raises:
        ValueError: no multiple of ``jump`` in ``ell_range`` or a sequence that does not fit in ``l_max`` ids.
    """
    ells_ok = np.arange(math.ceil(ell_range[0] / jump) * jump, ell_range[1] + 1, jump)
    ells_ok = ells_ok[ells_ok >= 1]
    if len(ells_ok) == 0:
        raise ValueError(f"ppc_batch: no multiple of jump={jump} in l range {ell_range}")
    ells = rng.choice(ells_ok, batch)
    if (coupled and ells.max() // jump >= l_max) or (not coupled and ells.max() + ells.max() // jump + 2 > l_max):
        raise ValueError(f"ppc_batch: l up to {ells.max()} does not fit in l_max={l_max} position ids")
    rows = []
    for ell in ells:
        ell = int(ell)
        tok = scratchpad_tokens(rng.integers(0, 2, ell), jump)
        p = coupled_position_ids(ell, jump) if coupled else np.arange(len(tok))
        if shift:
            p = shift_ids(rng, p, l_max, max_offset)
        rows.append((tok, p, ell + 2))
    out = pack_rows(rows, l_max)
    out["ell"] = torch.from_numpy(ells.astype(np.int64))
    return out


def shift_ids(rng: np.random.Generator, ids: np.ndarray, l_max: int, max_offset: int | None = None) -> np.ndarray:
    """``ids + u`` with one offset ``u ~ Unif{0, ..., l_max - 1 - max(ids)}`` (003 Sec. 5.2's training shift).

    ``max_offset``: cap ``u`` at this value (an offset curriculum; ``None``: the paper's law). ids: [n] int64.
    Returns [n] int64, all ``< l_max``.
    """
    hi = l_max - ids.max() if max_offset is None else min(l_max - ids.max(), max_offset + 1)
    return ids + rng.integers(0, hi)


def pack_rows(rows: list[tuple[np.ndarray, np.ndarray, int]], l_max: int) -> dict:
    """Right-pad ``(tokens [n], position ids [n], first target index)`` rows into one batch.

    Pads are ``<pad>`` (id 0) whose ids continue the sequence's last id (capped at ``l_max - 1``); they follow the
    sequence, so causal attention never lets them change it.

    Returns:
        dict(input_ids [batch, pos], position_ids [batch, pos] int64, loss_mask [batch, pos] bool: True from the first
        target index to the end of each row), torch tensors.
    """
    width = max(len(t) for t, _, _ in rows)
    tok = np.zeros((len(rows), width), np.int64)
    pos = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), bool)
    for r, (t, p, start) in enumerate(rows):
        n = len(t)
        tok[r, :n], pos[r, :n], mask[r, start:n] = t, p, True
        pos[r, n:] = np.minimum(p[-1] + 1 + np.arange(width - n), l_max - 1)
    return dict(input_ids=torch.from_numpy(tok), position_ids=torch.from_numpy(pos), loss_mask=torch.from_numpy(mask))


class PPCModel(nn.Module):
    """A ``LabForCausalLM`` plus a position head: ``Linear(d_model, n_position_ids)`` on the final hidden state.

    003 Sec. 5.2 item 1: "an additional output embedding module so that, at each step, the transformer predicts
    two IDs: the next token ID, as well as the coupled position ID for that token". ``lm.config`` must have
    ``pe="learned"`` (absolute position embeddings, 003 Table 2) with ``max_positions >= n_position_ids``.

    Forward: ``input_ids`` [batch, pos] int64, ``position_ids`` [batch, pos] int64 ->
    (token logits [batch, pos, vocab], position logits [batch, pos, n_position_ids]); row ``t`` predicts token
    ``t + 1`` and its position id.
    """

    def __init__(self, lm, n_position_ids: int = L_MAX):
        super().__init__()
        self.lm = lm
        self.pos_head = nn.Linear(lm.config.d_model, n_position_ids, bias=False)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.lm.model(input_ids, position_ids=position_ids).last_hidden_state
        return self.lm.lm_head(h), self.pos_head(h)


def ppc_loss(model: PPCModel, batch: dict) -> torch.Tensor:
    """Token cross-entropy + position-id cross-entropy on the target positions, weighted equally (003 Sec. 5.2 item 2).

    For every ``t`` with ``loss_mask[:, t]``: CE(token logits[:, t-1], input_ids[:, t]) + CE(position logits
    [:, t-1], position_ids[:, t]), each averaged over the masked targets. Returns a scalar tensor.
    """
    dev = next(model.parameters()).device
    inp, pos, mask = (batch[k].to(dev) for k in ("input_ids", "position_ids", "loss_mask"))
    tok_logits, pos_logits = model(inp, pos)
    m = mask[:, 1:]
    return F.cross_entropy(tok_logits[:, :-1][m], inp[:, 1:][m]) + F.cross_entropy(pos_logits[:, :-1][m], pos[:, 1:][m])


def train_ppc(model: PPCModel, batch_fn, cfg=None) -> list[float]:
    """Train a :class:`PPCModel` on :func:`ppc_loss` (tokens and position ids) with ``interp.lab.train_model``.

    ``batch_fn(step, rng) -> dict`` as :func:`ppc_batch`; ``cfg`` an ``interp.lab.TrainConfig``. Returns the
    per-step losses; the model is left in eval mode.

    Raises:
        ValueError: ``cfg.steps < 1`` or ``cfg.warmup < 0``.
    """
    from interp.lab import train_model

    return train_model(model, batch_fn, cfg, loss_fn=ppc_loss)


def _forward(model, inp, pos):
    """(token logits, position logits or None) for a PPCModel or a plain LabForCausalLM."""
    if isinstance(model, PPCModel):
        return model(inp, pos)
    return model(inp, position_ids=pos).logits, None


@torch.no_grad()
def generate(model, prompt: torch.Tensor, prompt_pos: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy generation of ``steps`` tokens; a :class:`PPCModel` feeds back its predicted ids (003 Sec. 5.2 item 3).

    For a plain LM the next id is the last id + 1 (no coupling).

    Args:
        prompt: [batch, pos] int64 token ids (no padding). prompt_pos: [batch, pos] int64 position ids.

    Returns:
        (tokens [batch, pos + steps], position ids [batch, pos + steps]), int64.

    Raises:
        ValueError: shapes disagree.
    """
    if prompt.shape != prompt_pos.shape or prompt.ndim != 2:
        raise ValueError(f"generate: prompt and prompt_pos must both be [batch, pos], got {tuple(prompt.shape)}, {tuple(prompt_pos.shape)}")
    tok, pos = prompt, prompt_pos
    for _ in range(steps):
        tl, pl = _forward(model, tok, pos)
        nxt = tl[:, -1].argmax(-1, keepdim=True)
        npos = pl[:, -1].argmax(-1, keepdim=True) if pl is not None else pos[:, -1:] + 1
        tok, pos = torch.cat([tok, nxt], 1), torch.cat([pos, npos], 1)
    return tok, pos


@torch.no_grad()
def teacher_forced_exact(model, batch: dict) -> torch.Tensor:
    """Per example, whether every target (loss_mask) token, and for a :class:`PPCModel` every target position id,
    is the argmax under teacher forcing.

    This equals exact match under greedy generation with fed-back predictions (003 Sec. 5.2's metric): if all
    teacher-forced argmaxes are right, greedy decoding reproduces the target sequence step by step, and if greedy
    decoding is all right its inputs were the targets. One forward pass instead of ``l/jump``.

    Returns:
        [batch] bool.
    """
    dev = next(model.parameters()).device
    inp, pos, mask = (batch[k].to(dev) for k in ("input_ids", "position_ids", "loss_mask"))
    tl, pl = _forward(model, inp, pos)
    m = mask[:, 1:]
    ok = (tl[:, :-1].argmax(-1) == inp[:, 1:]) | ~m
    if pl is not None:
        ok &= (pl[:, :-1].argmax(-1) == pos[:, 1:]) | ~m
    return ok.all(1)


def exact_match(model, rng: np.random.Generator, ell_range: tuple[int, int], jump: int, n_examples: int,
                coupled: bool, batch_size: int = 64, l_max: int = L_MAX) -> float:
    """Fraction of ``n_examples`` test inputs (``l`` uniform over multiples of ``jump`` in ``ell_range``, offset 0)
    whose whole scratchpad (and, with coupling, all its predicted position ids) is right (003 Sec. 5.2, Fig. 1b).

    Raises:
        ValueError: ``n_examples < 1`` or as :func:`ppc_batch`.
    """
    return exact_match_of(model, lambda b: ppc_batch(rng, b, ell_range, jump, coupled=coupled, l_max=l_max, shift=False),
                          n_examples, batch_size)


def exact_match_of(model, make_batch, n_examples: int, batch_size: int = 64) -> float:
    """Fraction of ``n_examples`` examples from ``make_batch(size) -> dict`` (as :func:`ppc_batch`) that
    :func:`teacher_forced_exact` calls right, drawn in batches of at most ``batch_size``.

    Raises:
        ValueError: ``n_examples < 1``.
    """
    if n_examples < 1:
        raise ValueError(f"exact_match: n_examples must be >= 1, got {n_examples}")
    hits = 0
    for s in range(0, n_examples, batch_size):
        hits += int(teacher_forced_exact(model, make_batch(min(batch_size, n_examples - s))).sum())
    return hits / n_examples
