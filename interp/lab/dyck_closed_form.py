"""Paper 002's closed-form one-layer Dyck completers: Thm 4.1 (learned positions from one word) and Claim 5.3 (no positions).

Both are one attention head with uniform attention (``Q = 0``), a one-dimensional token embedding and a
scalar value ``v < 0``; the logits of eq. 1 reduce to ``[X, -X]`` (Lemma 5.2) with, at a prefix ``z_{:r}``,

- Thm 4.1: ``X_r = (v / r) sum_{i<=r} (E_{z_i} + B_i)`` with ``E = [1, -1]`` (``'(' -> 1``, ``')' -> -1``) and
  ``B = B(s)`` of eq. 4 built from one training word ``s`` with ``gamma = -1/2``; generalisation needs
  ``v < -2 N^2``. Since ``sum_{i<=r} B_i = -Delta_r(s) + gamma E_{s_{r+1}}`` (telescoping, Lemma 5.1),
  ``X_r = (v / r) (Delta_r(z) - Delta_r(s) + gamma E_{s_{r+1}})``: the completion is pulled onto ``s``'s path.
- Claim 5.3: ``X_r = (v / r) sum_{i<=r} E_{z_i}`` with ``E = [1 - 1/(2N+1), -1]`` and ``v < -2 N^2 (2N + 1)``:
  it opens on an empty stack and closes otherwise (completions ``...)))()()()``).

Two implementations of each: plain torch (``thm41_x``, ``claim53_x`` and the ``*_policy`` wrappers for
``interp.lab.dyck.complete``) and the same head as weights of an ``interp.lab.LabForCausalLM``
(``thm41_model``: ``pe="learned"``, ``claim53_model``: ``pe="nope"``), so ``interp.capture`` / ``scan`` and
the counting-head detector (``interp.lab.counting``) inspect it like a trained model.

Embedding into the lab model (pre-LN Llama block: RMSNorm, attention, SwiGLU MLP, final RMSNorm, lm_head).
RMSNorm divides by the residual's RMS, which would destroy the one-dimensional sums. So every residual
vector gets the same norm: channel 0 carries the token value ``E_t``, channel 1 the position value ``B_i``,
and channels 2 / 3 the fillers ``sqrt(K^2 - E_t^2)`` / ``sqrt(K^2 - B_i^2)``; then ``|x|^2 = 2 K^2`` for every
(token, position) and the input norm is the constant factor ``c = (2 K^2 / d_model + eps) ** -0.5``. The head
(``d_head = d_model``) has ``W_q = W_k = 0`` (uniform causal attention, exactly), value ``c (x_0 + x_1)`` and
``o_proj`` writes ``v / c`` times it into channel 4, so channel 4 holds ``X_r`` exactly. The MLP is zero.
The final RMSNorm rescales channel 4 by ``rho = sqrt((2 K^2 + X^2) / d_model + eps)``, and ``lm_head`` reads
``+-L`` times it: logits ``(L X / rho, -L X / rho, 0, ...)`` (specials 0). The sign of ``X``, hence greedy
decoding, is the paper's; the bracket logits are at least ``|X|`` in size (as confident as the paper's
head) whenever ``L >= rho``, which ``L = 64`` gives for every ``|X| <= 180`` (``K = 4``, ``d_model = 8``), and
they saturate at ``L sqrt(d_model)`` beyond. Input ids are the bracket tokens of ``VOCAB`` without ``<bos>``
(Thm 4.1's prefix starts at ``s_1``); position ids are the default ``0 .. pos - 1`` (``B_1`` at id 0).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from interp.lab.dyck import Policy, heights
from interp.lab.model import LabConfig, LabForCausalLM
from interp.lab.vocab import Vocab

__all__ = ["VOCAB", "GAMMA", "thm41_v", "claim53_v", "thm41_positions", "thm41_x", "claim53_x", "thm41_policy",
           "claim53_policy", "thm41_model", "claim53_model", "lab_policy", "stack_gap"]

VOCAB = Vocab(["(", ")"])
GAMMA = -0.5
_K, _D, _L = 4.0, 8, 64.0  # filler norm, residual width, lm_head gain (module docstring)


def _word(s, name: str = "s") -> np.ndarray:
    s = np.asarray(s).reshape(-1)
    if s.size == 0 or s.size % 2 or not np.isin(s, (0, 1)).all():
        raise ValueError(f"{name} must be a non-empty even-length word of codes 0 ('(') / 1 (')'); got {s.size} codes")
    return s.astype(np.int64)


def thm41_v(n: int) -> float:
    """The value scalar used for Thm 4.1 at word length ``n = 2N``: ``-(2 N^2 + 1)`` (the theorem needs ``v < -2N^2``)."""
    return -(2 * (n // 2) ** 2 + 1.0)


def claim53_v(n: int) -> float:
    """The value scalar for Claim 5.3 at ``n = 2N``: ``-(2 N^2 (2N + 1) + 1)`` (the claim needs ``v < -2N^2 (2N+1)``)."""
    N = n // 2
    return -(2 * N**2 * (2 * N + 1) + 1.0)


THM41_E = torch.tensor([1.0, -1.0], dtype=torch.float64)  # E_'(' , E_')' of Thm 4.1


def claim53_e(n: int) -> torch.Tensor:
    """Claim 5.3's token embeddings ``[E_'(', E_')'] = [1 - 1/(n+1), -1]`` ``[2]`` float64 for words of length ``n``.

    Raises:
        ValueError: ``n`` not even and positive.
    """
    if n <= 0 or n % 2:
        raise ValueError(f"n must be even and positive; got {n}")
    return torch.tensor([1.0 - 1.0 / (n + 1), -1.0], dtype=torch.float64)


def thm41_positions(s, gamma: float = GAMMA) -> torch.Tensor:
    """``B(s)`` ``[n]`` float64, 002 eq. 4 with ``E = [1, -1]``: ``B_1 = -E_{s_1} + gamma E_{s_2}``,
    ``B_i = -E_{s_i} + gamma (E_{s_{i+1}} - E_{s_i})`` (``E_{s_{n+1}} := 0``: no token follows the last one).

    Args:
        s: ``[n]`` codes of the training word (any word; the theorem takes ``s`` in ``D_2N``).

    Raises:
        ValueError: not an even-length word of codes 0/1.
    """
    e = 1.0 - 2.0 * _word(s)
    nxt = np.append(e[1:], 0.0)
    b = -e + gamma * (nxt - e)
    b[0] = -e[0] + gamma * nxt[0]
    return torch.tensor(b, dtype=torch.float64)


def _x(buf: torch.Tensor, per_token: torch.Tensor, per_pos: torch.Tensor | None, v: float) -> torch.Tensor:
    """``[batch, pos]`` float64 ``X_r = (v / r) sum_{i<=r} (E_{z_i} + B_i)`` (r = 1-based position)."""
    buf = torch.as_tensor(np.asarray(buf), dtype=torch.long)
    if buf.dim() != 2:
        raise ValueError(f"expected codes [batch, pos]; got shape {tuple(buf.shape)}")
    x = per_token[buf]
    if per_pos is not None:
        if buf.shape[1] > per_pos.shape[0]:
            raise ValueError(f"prefix of {buf.shape[1]} tokens is longer than the training word ({per_pos.shape[0]})")
        x = x + per_pos[: buf.shape[1]]
    r = torch.arange(1, buf.shape[1] + 1, dtype=torch.float64)
    return v * x.cumsum(-1) / r


def thm41_x(buf, s, v: float | None = None, gamma: float = GAMMA) -> torch.Tensor:
    """Thm 4.1's logit ``X_r`` (logits ``[X, -X]``, Lemma 5.2) after every prefix of ``buf``; 002 Sec. 4.1 / 5.3.1.

    Args:
        buf: ``[batch, pos]`` codes (pos <= len(s)). s: ``[n]`` codes of the training word.
        v: value scalar (default ``thm41_v(n)``). gamma: eq. 4's free parameter (-1/2: attractive).

    Returns:
        ``[batch, pos]`` float64; ``X > 0`` predicts ``'('``.
    """
    s = _word(s)
    return _x(buf, THM41_E, thm41_positions(s, gamma),
              thm41_v(len(s)) if v is None else v)


def claim53_x(buf, n: int, v: float | None = None) -> torch.Tensor:
    """Claim 5.3's logit ``X_r`` (no positional embedding, ``E = [1 - 1/(n+1), -1]``) after every prefix; ``[batch, pos]``."""
    return _x(buf, claim53_e(n), None, claim53_v(n) if v is None else v)


def _policy(xfun) -> Policy:
    def policy(buf: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        x = xfun(buf).gather(1, (ends - 1)[:, None])[:, 0]
        return torch.stack([x, -x], -1)
    return policy


def thm41_policy(s, v: float | None = None, gamma: float = GAMMA) -> Policy:
    """``interp.lab.dyck.complete`` policy of Thm 4.1's head (plain torch): logits ``[X, -X]`` ``[batch, 2]``."""
    s = _word(s)
    return _policy(lambda buf: thm41_x(buf, s, v, gamma))


def claim53_policy(n: int, v: float | None = None) -> Policy:
    """``interp.lab.dyck.complete`` policy of Claim 5.3's head (plain torch): logits ``[X, -X]`` ``[batch, 2]``."""
    return _policy(lambda buf: claim53_x(buf, n, v))


def _build(pe: str, n: int, e_tok: torch.Tensor, b_pos: torch.Tensor | None, v: float) -> LabForCausalLM:
    """A 1-layer, 1-head ``LabForCausalLM`` whose channel 4 holds ``X_r`` exactly (module docstring)."""
    if float(max(e_tok.abs().max(), 0 if b_pos is None else b_pos.abs().max())) > _K:
        raise ValueError(f"embedding values must stay within the filler norm K = {_K}")
    cfg = LabConfig(vocab_size=len(VOCAB), n_layers=1, n_heads=1, d_model=_D, d_mlp=_D, pe=pe, max_positions=n)
    model = LabForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.model.layers[0].input_layernorm, model.model.layers[0].post_attention_layernorm, model.model.norm):
            norm.weight.fill_(1.0)
        tok = model.model.embed_tokens.weight
        tok[:, 2] = _K                                  # specials: value 0, filler K
        for code, sym in enumerate("()"):
            i = VOCAB.id(sym)
            tok[i, 0], tok[i, 2] = e_tok[code], math.sqrt(_K**2 - float(e_tok[code]) ** 2)
        if b_pos is not None:
            pos = model.model.embed_positions.weight
            pos[:, 1] = b_pos.float()
            pos[:, 3] = torch.sqrt(_K**2 - b_pos**2).float()
            norm2 = 2 * _K**2
        else:
            norm2 = _K**2
        c = (norm2 / _D + cfg.rms_norm_eps) ** -0.5     # input RMSNorm = multiplication by c (constant norm)
        attn = model.model.layers[0].self_attn           # q_proj = k_proj = 0: uniform causal attention
        attn.v_proj.weight[0, 0] = attn.v_proj.weight[0, 1] = 1.0
        attn.o_proj.weight[4, 0] = v / c
        model.lm_head.weight[VOCAB.id("("), 4] = _L
        model.lm_head.weight[VOCAB.id(")"), 4] = -_L
    return model.eval()


def thm41_model(s, v: float | None = None, gamma: float = GAMMA) -> LabForCausalLM:
    """Thm 4.1's head as an ``interp.lab.LabForCausalLM`` (``pe="learned"``, 1 layer, 1 head, ``d_model = 8``).

    Feed bracket ids of ``VOCAB`` (no ``<bos>``), at most ``len(s)`` tokens; ``model(ids).logits[..., 3:5]``
    have the sign of ``[X, -X]`` of ``thm41_x`` (module docstring for the magnitudes).

    Raises:
        ValueError: ``s`` not an even-length word of codes; ``|B_i|`` above the filler norm (``|gamma| > 1.5``).
    """
    s = _word(s)
    return _build("learned", len(s), THM41_E, thm41_positions(s, gamma),
                  thm41_v(len(s)) if v is None else v)


def claim53_model(n: int, v: float | None = None) -> LabForCausalLM:
    """Claim 5.3's head as an ``interp.lab.LabForCausalLM`` (``pe="nope"``, 1 layer, 1 head, ``d_model = 8``), words of length ``n``.

    Raises:
        ValueError: ``n`` not even and positive.
    """
    return _build("nope", n, claim53_e(n), None, claim53_v(n) if v is None else v)


def lab_policy(model: LabForCausalLM, vocab: Vocab = VOCAB, *, bos: bool = False) -> Policy:
    """``interp.lab.dyck.complete`` policy of a lab model over ``vocab``'s ``'('`` / ``')'`` tokens.

    The prefix is fed as token ids (``<bos>`` first if ``bos``; trained models of ``analyses/p002_dyck/dyck_depth.py``
    use it, the closed forms do not); returns the ``[batch, 2]`` logits of ``'('``, ``')'`` after each prefix.
    The whole buffer is run at once: causal attention keeps the tokens after a prefix from changing it.
    """
    ids = torch.tensor([vocab.id("("), vocab.id(")")])
    shift = 1 if bos else 0

    @torch.no_grad()
    def policy(buf: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        x = ids[buf]
        if bos:
            x = torch.cat([torch.full((x.shape[0], 1), vocab.id("<bos>"), dtype=torch.long), x], 1)
        logits = model(input_ids=x).logits
        last = logits[torch.arange(x.shape[0]), ends - 1 + shift]
        return last[:, ids]
    return policy


def stack_gap(codes, s) -> np.ndarray:
    """``[batch, pos]`` int64 ``Delta_r(z) - Delta_r(s)``: how far each prefix's stack is from the training word's (Thm 4.1)."""
    s = _word(s)
    h = heights(codes)
    return h - heights(s[None, : h.shape[-1]])
