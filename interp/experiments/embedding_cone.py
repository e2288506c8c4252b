"""Layer-0 embedding cone: why layer-0 queries and keys are nearly rank one (paper 004, App. B; Tables 2, 10/12, 11; Figs. 10-13).

Paper 004 feeds layer 0 "the concatenation of all tokens" (the whole vocabulary, one vector per token) and asks
whether the token embeddings, after the layer's input RMS norm, line up with one direction of each head's W_Q / W_K.
Notation (paper 004, App. B): ``h = RMSN(x)`` is a token's embedding ``x`` after layer 0's input norm (here the
model's own module, learned gain included: ``model.hf.model.layers[0].input_layernorm``, applied to the
model's own embedding module, so Gemma's ``sqrt(d_model)`` embedding scale is applied first); ``W_Q`` is one
head's ``[d_model, d_head]`` slice (``q = W_Q^T h + b_Q``; HF's ``q_proj.weight`` rows ``h*d_head:(h+1)*d_head``,
transposed), with SVD ``W_Q = sum_l sigma_l v_l u_l^T`` (``v_l`` in R^d_model, sigma descending). Likewise W_K
of the head's kv head (``kv_head = head // (n_heads / n_kv_heads)``).

Columns of ``embedding_cone_table`` (one row per layer-0 query head; all over the vocabulary ``X``, N tokens):

- ``r1_h``, ``R95_h``: r1 and R_0.95 (paper 004 eq. 7, ``interp.measures.spectrum``; not centred) of ``H = [h_1..h_N]``
  (Fig. 10's "H" at layer 0). ``r1_wq``, ``R95_wq`` / ``r1_wk``, ``R95_wk``: the same of the weight slice
  (share of ``sigma_l^2``; Fig. 10).
- ``r1_q``, ``R95_q`` / ``r1_k``, ``R95_k``: of the layer-0 queries / keys of the vocabulary, ``Q = H W_Q + 1 b_Q^T``
  (bias included where the model has one; before any QK-norm), Fig. 11's r1 and R_0.95 at layer 0.
  ``r1_q_pre``, ``R95_q_pre`` / ``..._k_pre``: of what RoPE rotates (after QK-norm on Gemma-3; equal to the
  previous columns for models without QK-norm).
- ``r1_tilde_q``, ``R95_tilde_q`` / ``..._k`` (eq. 11, Table 2): per token, the powers
  ``p_l(h) = (sigma_l v_l^T h)^2`` (they sum to ``||W_Q^T h||^2``, bias excluded); ``r~_1(h) = max_l p_l / sum_l p_l``
  and ``R~_0.95(h)`` = fewest powers (largest first) whose share reaches 0.95; the columns are means over the
  vocabulary ("average values ... computed over all the tokens"; tokens with ``W^T h = 0``, such as an all-zero
  padding row, are skipped: their shares are undefined); ``R95_tilde_*_median`` the median (the paper prints
  integers and does not say how its mean was rounded).
- ``lstar_q``, ``lstar_k``: the dominating singular direction ``l* = argmax_l sum_h (sigma_l v_l^T h)^2``
  (1-based; 1 = the largest singular value), App. B; ``v_Q = v_{l*}``.
- ``rv_q``, ``rv_k``: relative variation ``RV(v) = std_h(v^T h) / |mean_h(v^T h)|`` (population std, ddof 0) of the
  projections on ``v_Q`` / ``v_K`` (Table 11, Fig. 12; dimensionless, the paper prints percent).
  ``rv_rand``: the same for one direction drawn from N(0, I_d) (seeded; one per model, as the paper's
  Table 11 prints one value per model); ``rv_rand_median``: median over ``n_random`` such draws.
- ``mean_wq_h``, ``mean_wk_h``: mean over the vocabulary of ``||W_Q^T h||`` / ``||W_K^T h||`` (bias excluded; units of
  the model's query / key vectors); ``bias_q``, ``bias_k``: ``||b_Q||``, ``||b_K||`` (NaN without biases);
  ``bias_ratio_q``, ``bias_ratio_k`` = bias norm / mean norm (Tables 10 and 12, Fig. 13; Qwen2).

The paper reports these for its slash-dominant heads in layer 0 (Gemma-7B, Llama3-8B-Instruct, Qwen2.5-7B-Instruct);
this table has every layer-0 head, so join ``is_sdh`` from a scan to select them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float

from interp.errors import UnsupportedModelError
from interp.models import LoadedModel
from interp.measures import spectrum

__all__ = ["Layer0Weights", "layer0_weights", "normed_embeddings", "token_powers", "tilde_r1_R", "dominant_direction",
           "relative_variation", "embedding_cone_table"]


@dataclass
class Layer0Weights:
    """Layer 0's query/key weights per head in the paper's orientation (``q = W_Q^T h + b_Q``).

    Attributes:
        w_q: ``[head, d_model, d_head]``; w_k: ``[kv_head, d_model, d_head]`` (float32).
        b_q: ``[head, d_head]`` or None; b_k: ``[kv_head, d_head]`` or None.
        q_norm, k_norm: the QK-norm modules applied per head before RoPE (Gemma-3), or None.
    """

    w_q: torch.Tensor
    w_k: torch.Tensor
    b_q: torch.Tensor | None
    b_k: torch.Tensor | None
    q_norm: torch.nn.Module | None
    k_norm: torch.nn.Module | None


def _layer0(model: LoadedModel):
    try:
        return model.hf.model.layers[0]
    except AttributeError:
        raise UnsupportedModelError(
            f"{model.card.name}: no model.hf.model.layers[0]; the embedding cone needs a Llama/Qwen2/Gemma-3-style decoder") from None


def layer0_weights(model: LoadedModel) -> Layer0Weights:
    """W_Q, W_K (and biases, QK-norm modules) of layer 0, per head, from ``model.hf.model.layers[0].self_attn``.

    Raises:
        UnsupportedModelError (an ``InterpError`` and ``ValueError``): the layer has no separate ``q_proj`` /
            ``k_proj`` linear modules (fused ``qkv_proj`` / ``query_key_value`` models), or their shapes do not
            match the card's head counts.
    """
    attn = getattr(_layer0(model), "self_attn", None)
    q_proj, k_proj = getattr(attn, "q_proj", None), getattr(attn, "k_proj", None)
    if not isinstance(q_proj, torch.nn.Linear) or not isinstance(k_proj, torch.nn.Linear):
        raise UnsupportedModelError(
            f"{model.card.name}: layer 0 has no separate q_proj/k_proj linear modules (fused projection); "
            "the embedding cone supports Llama, Qwen2 and Gemma-3-style attention")
    c = model.card
    d = q_proj.weight.shape[1]
    if q_proj.weight.shape[0] != c.n_heads * c.d_head or k_proj.weight.shape[0] != c.n_kv_heads * c.d_head:
        raise UnsupportedModelError(
            f"{c.name}: q_proj/k_proj have {q_proj.weight.shape[0]}/{k_proj.weight.shape[0]} outputs, expected "
            f"{c.n_heads}x{c.d_head}/{c.n_kv_heads}x{c.d_head}")

    def heads(w, n):
        return w.detach().float().reshape(n, c.d_head, d).transpose(1, 2).contiguous()

    def bias(p, n):
        return None if p.bias is None else p.bias.detach().float().reshape(n, c.d_head)

    return Layer0Weights(heads(q_proj.weight, c.n_heads), heads(k_proj.weight, c.n_kv_heads), bias(q_proj, c.n_heads),
                         bias(k_proj, c.n_kv_heads), getattr(attn, "q_norm", None), getattr(attn, "k_norm", None))


def normed_embeddings(model: LoadedModel, n_tokens: int | None = None, chunk: int = 16384) -> Float[torch.Tensor, "pos d_model"]:
    """``h = RMSN(x)`` for every token of the vocabulary: layer 0's input to its q/k projections.

    Token ids ``0 .. N-1`` with ``N = min(len(tokenizer), embedding rows)`` (padding rows past the tokenizer are
    skipped) unless ``n_tokens`` is given; run through the model's embedding module (Gemma scales by
    sqrt(d_model)) and ``layers[0].input_layernorm`` (its learned gain included), in chunks. float32, on CPU.

    Raises:
        UnsupportedModelError: no ``model.hf.model.embed_tokens`` or ``layers[0].input_layernorm``.
    """
    layer = _layer0(model)
    emb = getattr(model.hf.model, "embed_tokens", None)
    norm = getattr(layer, "input_layernorm", None)
    if emb is None or norm is None:
        raise UnsupportedModelError(f"{model.card.name}: no embed_tokens / layers[0].input_layernorm module")
    rows = emb.weight.shape[0]
    n = min(len(model.tokenizer), rows) if n_tokens is None else min(n_tokens, rows)
    dev = emb.weight.device
    out = []
    with torch.no_grad():
        for s in range(0, n, chunk):
            ids = torch.arange(s, min(n, s + chunk), device=dev)
            out.append(norm(emb(ids[None]))[0].float().cpu())
    return torch.cat(out)


def token_powers(h: Float[torch.Tensor, "pos d_model"], w: Float[torch.Tensor, "d_model d_head"]) -> tuple[
        Float[torch.Tensor, "pos d_head"], torch.Tensor, torch.Tensor]:
    """``c[x, l] = sigma_l v_l^T h_x`` for the SVD ``W = sum_l sigma_l v_l u_l^T`` (paper 004 eq. 11).

    Returns:
        ``c [pos, d_head]`` (float32; ``(c**2).sum(1) = ||W^T h||^2``), ``sigma [d_head]`` descending and
        ``V [d_model, d_head]`` (columns ``v_l``), both float64.
    """
    V, S, _ = torch.linalg.svd(w.double(), full_matrices=False)
    return h.float() @ (V * S).float(), S, V


def tilde_r1_R(c: Float[torch.Tensor, "pos d_head"], tau: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token ``r~_1`` and ``R~_tau`` (paper 004 eq. 11) from ``c = sigma_l v_l^T h`` (``token_powers``).

    ``r~_1 = max_l c_l^2 / sum_l c_l^2``; ``R~_tau`` = smallest count of the largest powers whose share reaches
    ``tau`` (same convention as ``spectrum.spectrum_metrics``'s ``R``: 1-based, share >= tau - 1e-12).

    Returns:
        ``r1 [pos]`` and ``R [pos]``, float64. Both NaN for a token with ``W^T h = 0`` (e.g. an all-zero padding
        embedding), where the shares are undefined; averages skip those tokens.
    """
    p = c.double() ** 2
    tot = p.sum(1, keepdim=True)
    p = p / tot
    srt = p.sort(1, descending=True).values
    R = ((srt.cumsum(1) < tau - 1e-12).sum(1) + 1).clamp(max=c.shape[1]).double()
    bad = tot[:, 0] == 0
    return srt[:, 0].masked_fill(bad, float("nan")), R.masked_fill(bad, float("nan"))


def dominant_direction(c: Float[torch.Tensor, "pos d_head"]) -> int:
    """``l* = argmax_l sum_x (sigma_l v_l^T h_x)^2`` (paper 004, App. B), 0-based."""
    return int((c.double() ** 2).sum(0).argmax())


def relative_variation(h: Float[torch.Tensor, "pos d_model"], v: Float[torch.Tensor, "*k d_model"]) -> float | torch.Tensor:
    """``RV(v) = std_x(v^T h_x) / |mean_x(v^T h_x)|`` (paper 004, App. B, Table 11); population std (ddof 0).

    Scale-free in ``v`` (any norm, either sign); dimensionless (the paper prints percent). ``inf`` if the mean is 0.
    Projections in float32 (relative error ~1e-6), mean and std in float64. ``v`` may also be ``[k, d_model]``
    (k directions at once), then a ``[k]`` float64 tensor is returned.
    """
    p = (h.float() @ v.float().reshape(-1, v.shape[-1]).T).double()
    m, s = p.mean(0), p.std(0, correction=0)
    rv = torch.where(m != 0, s / m.abs(), torch.full_like(m, float("inf")))
    return float(rv[0]) if v.dim() == 1 else rv


def _r_R(x: torch.Tensor, tau: float) -> tuple[float, float]:
    m = spectrum.spectrum_metrics(spectrum.gram(x[:, None, :]), tau)
    return float(m["r1"][0]), float(m["R"][0])


def embedding_cone_table(model: LoadedModel, *, tau: float = 0.95, n_random: int = 32, seed: int = 0,
                         n_tokens: int | None = None, h: torch.Tensor | None = None) -> pd.DataFrame:
    """One row per layer-0 query head: the embedding-cone measurements of paper 004 App. B (see the module docstring).

    Args:
        model: a loaded model with separate ``q_proj`` / ``k_proj`` (Llama, Qwen2, Gemma-3 families).
        tau: threshold of R_tau and R~_tau (paper: 0.95).
        n_random: random directions for ``rv_rand_median`` (``rv_rand`` is the first draw).
        seed: seed of the random directions (``torch.Generator``).
        n_tokens: use only token ids ``0 .. n_tokens-1`` (quick runs); default the whole vocabulary.
        h: precomputed ``normed_embeddings(model)`` ``[pos, d_model]`` (saves recomputing it).

    Returns:
        DataFrame with ``model, layer, head, kv_head, n_tokens`` and the columns of the module docstring.

    Raises:
        UnsupportedModelError: no separate q_proj/k_proj, or no embedding / input-norm module.
    """
    c = model.card
    W = layer0_weights(model)
    H = normed_embeddings(model, n_tokens) if h is None else h.float()
    N, d = H.shape
    g = c.n_heads // c.n_kv_heads
    r1_h, R_h = _r_R(H, tau)
    gen = torch.Generator().manual_seed(seed)
    rand = torch.randn(n_random, d, generator=gen, dtype=torch.float64)
    rv_rand = relative_variation(H, rand).tolist()

    def per_head(w, b, qk_norm):
        coef, S, V = token_powers(H, w)
        r1t, Rt = tilde_r1_R(coef, tau)
        ls = dominant_direction(coef)
        proj = H @ w  # W^T h, bias excluded
        x = proj if b is None else proj + b
        out = {"r1_w": float((S[0] ** 2 / (S ** 2).sum())), "R95_w": float(((S ** 2).cumsum(0) / (S ** 2).sum() < tau - 1e-12).sum() + 1),
               "r1": None, "R95": None, "r1_tilde": float(r1t.nanmean()), "R95_tilde": float(Rt.nanmean()),
               "R95_tilde_median": float(Rt.nanmedian()), "lstar": ls + 1,
               "rv": relative_variation(H, V[:, ls]), "mean_w_h": float(proj.double().norm(dim=1).mean()),
               "bias": float("nan") if b is None else float(b.double().norm())}
        out["r1"], out["R95"] = _r_R(x, tau)
        if qk_norm is not None:
            with torch.no_grad():
                x = qk_norm(x[:, None, :])[:, 0].float()
            out["r1_pre"], out["R95_pre"] = _r_R(x, tau)
        else:
            out["r1_pre"], out["R95_pre"] = out["r1"], out["R95"]
        out["bias_ratio"] = out["bias"] / out["mean_w_h"]
        return out

    keys = [per_head(W.w_k[j], None if W.b_k is None else W.b_k[j], W.k_norm) for j in range(c.n_kv_heads)]
    rows = []
    for hq in range(c.n_heads):
        qv = per_head(W.w_q[hq], None if W.b_q is None else W.b_q[hq], W.q_norm)
        kv = keys[hq // g]
        row = {"model": c.name, "layer": 0, "head": hq, "kv_head": hq // g, "n_tokens": N, "r1_h": r1_h, "R95_h": R_h}
        for name, vals in (("q", qv), ("k", kv)):
            row.update({f"r1_w{name}": vals["r1_w"], f"R95_w{name}": vals["R95_w"],
                        f"r1_{name}": vals["r1"], f"R95_{name}": vals["R95"],
                        f"r1_{name}_pre": vals["r1_pre"], f"R95_{name}_pre": vals["R95_pre"],
                        f"r1_tilde_{name}": vals["r1_tilde"], f"R95_tilde_{name}": vals["R95_tilde"],
                        f"R95_tilde_{name}_median": vals["R95_tilde_median"], f"lstar_{name}": vals["lstar"],
                        f"rv_{name}": vals["rv"], f"mean_w{name}_h": vals["mean_w_h"], f"bias_{name}": vals["bias"],
                        f"bias_ratio_{name}": vals["bias_ratio"]})
        row["rv_rand"] = rv_rand[0]
        row["rv_rand_median"] = float(np.median(rv_rand))
        rows.append(row)
    return pd.DataFrame(rows)
