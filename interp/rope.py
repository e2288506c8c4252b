"""RoPE as data: per-layer frequencies, channel pairing, rotation at any positions, plane ablation.

A head's ``d_head`` channels form ``d_head / 2`` rotation planes; plane ``freq`` (0 = highest
frequency) turns by angle ``theta_freq * pos`` with ``theta_freq = base ** (-2 freq / d_head)``
(times the model's rope-type scaling). Which channels form a plane is the *pairing*:

- ``"rotate_half"`` (every HF model): plane l = channels (l, l + d_head/2).
- ``"interleaved"`` (the papers' notation, and GPT-J style): plane l = channels (2l, 2l + 1).

Leaf module: imports nothing from interp but errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float

from interp.errors import ShapeError

PAIRINGS = ("rotate_half", "interleaved")


@dataclass(frozen=True)
class RopeSpec:
    """RoPE of one layer.

    Attributes:
        inv_freq: ``[freq]`` angular frequency of each plane, radians per position.
        scaling: multiplier on cos/sin (1.0 for default RoPE; rope types such as YaRN set it).
        pairing: ``"rotate_half"`` or ``"interleaved"``.
    """

    inv_freq: Float[torch.Tensor, "freq"]
    scaling: float = 1.0
    pairing: str = "rotate_half"

    @property
    def d_head(self) -> int:
        """Channels per head (two per plane)."""
        return 2 * self.inv_freq.numel()

    @property
    def base(self) -> float:
        """The RoPE base theta implied by the two highest-frequency planes (default RoPE only)."""
        f = self.inv_freq.double()
        return float((f[0] / f[1]) ** (self.d_head / 2))


def default_inv_freq(base: float, d_head: int) -> Float[torch.Tensor, "freq"]:
    """Default RoPE frequencies ``base ** (-2l / d_head)``, l = 0..d_head/2-1 (RoFormer, Su et al. 2021)."""
    return 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float) / d_head))


def rope_specs(hf_model: torch.nn.Module) -> list[RopeSpec]:
    """Per-layer RoPE read from a HF model's rotary-embedding module (the frequencies it really uses).

    Gemma-3 keeps one set per layer type (``sliding_attention_inv_freq``, ``full_attention_inv_freq``);
    other models keep one ``inv_freq``. Pairing is ``rotate_half`` for every HF model.
    """
    inner = getattr(hf_model, "model", hf_model)
    rot = inner.rotary_emb
    cfg = hf_model.config
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    specs = []
    for t in types:
        if hasattr(rot, f"{t}_inv_freq"):
            inv, scale = getattr(rot, f"{t}_inv_freq"), getattr(rot, f"{t}_attention_scaling")
        else:
            inv, scale = rot.inv_freq, rot.attention_scaling
        specs.append(RopeSpec(inv.detach().float().cpu(), float(scale), "rotate_half"))
    return specs


def plane_channels(d_head: int, pairing: str = "rotate_half") -> torch.Tensor:
    """``[freq, 2]`` channel indices of each rotation plane under ``pairing``.

    Raises:
        ValueError: unknown pairing or odd ``d_head``.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; use one of {PAIRINGS}")
    if d_head % 2:
        raise ValueError(f"d_head must be even for RoPE, got {d_head}")
    half = d_head // 2
    l = torch.arange(half)
    if pairing == "rotate_half":
        return torch.stack([l, l + half], dim=1)
    return torch.stack([2 * l, 2 * l + 1], dim=1)


def angles(spec: RopeSpec, positions: torch.Tensor) -> Float[torch.Tensor, "pos freq"]:
    """Rotation angle of every plane at every position, ``pos * inv_freq``, in float32 as HF computes it."""
    return positions.float()[:, None] * spec.inv_freq.to(positions.device)[None, :]


def rotate(
    x: Float[torch.Tensor, "pos head d_head"],
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    keep_planes: Bool[torch.Tensor, "freq"] | None = None,
    inverse: bool = False,
) -> Float[torch.Tensor, "pos head d_head"]:
    """Apply RoPE to vectors at arbitrary positions.

    Args:
        x: ``[pos, head, d_head]`` vectors (pre-RoPE queries or keys).
        positions: ``[pos]`` integer (or real) positions, one per row of ``x``.
        spec: the layer's RoPE.
        keep_planes: optional ``[freq]`` mask; planes where it is False are left unrotated
            (theta -> 0, channels kept), as in the band ablation of paper 004, Table 5.
        inverse: rotate by ``-angle`` (undo RoPE).

    Returns:
        ``[pos, head, d_head]`` rotated vectors, same dtype as ``x``.

    Raises:
        ShapeError: ``x`` is not 3-D, or its last axis is not the spec's ``d_head``, or positions mismatch.
    """
    if x.dim() != 3 or x.shape[-1] != spec.d_head or positions.shape != (x.shape[0],):
        raise ShapeError(
            f"rotate expects x [pos, head, d_head={spec.d_head}] and positions [pos]; got x {tuple(x.shape)}, "
            f"positions {tuple(positions.shape)}"
        )
    ang = angles(spec, positions.to(x.device))
    if keep_planes is not None:
        ang = ang * keep_planes.to(ang.device, ang.dtype)[None, :]
    if inverse:
        ang = -ang
    cos = (ang.cos() * spec.scaling).to(x.dtype)[:, None, :]
    sin = (ang.sin() * spec.scaling).to(x.dtype)[:, None, :]
    ch = plane_channels(spec.d_head, spec.pairing).to(x.device)
    x1, x2 = x[..., ch[:, 0]], x[..., ch[:, 1]]
    out = torch.empty_like(x)
    out[..., ch[:, 0]] = x1 * cos - x2 * sin
    out[..., ch[:, 1]] = x2 * cos + x1 * sin
    if inverse and spec.scaling != 1.0:
        out = out / (spec.scaling**2)
    return out


def plane_norms(x: Float[torch.Tensor, "... d_head"], pairing: str = "rotate_half") -> Float[torch.Tensor, "... freq"]:
    """Norm of each rotation-plane sub-vector (``||x^(l)||`` of paper 004, eq. 8); invariant under RoPE."""
    ch = plane_channels(x.shape[-1], pairing).to(x.device)
    return torch.sqrt(x[..., ch[:, 0]] ** 2 + x[..., ch[:, 1]] ** 2)


def band_planes(n_freq: int, band: str, n_remove: int = 6) -> torch.Tensor:
    """Planes removed in one band of the ablation of paper 004 (Table 5, Fig. 8).

    Planes are split into high / medium / low thirds (``"high"``, ``"medium"``, ``"low"``); ``n_remove``
    evenly spaced planes of the band are returned (for 64 planes and ``"high"``: 0, 4, 8, 12, 16, 20,
    i.e. the paper's l = 1, 5, ..., 21 in 1-based indexing).

    Raises:
        ValueError: unknown band name.
    """
    bounds = torch.linspace(0, n_freq, 4).round().long().tolist()
    names = ("high", "medium", "low")
    if band not in names:
        raise ValueError(f"unknown band {band!r}; use one of {names}")
    lo, hi = bounds[names.index(band)], bounds[names.index(band) + 1]
    return torch.linspace(lo, hi - 1, n_remove).round().long().unique()
