"""RoPE as data: per-layer frequencies, channel pairing, rotation at any positions, plane ablation.

A head's ``d_head`` channels form ``d_head / 2`` rotation planes; plane ``freq`` (0 = highest
frequency) turns by angle ``theta_freq * pos`` with ``theta_freq = base ** (-2 freq / d_head)``
(times the model's rope-type scaling). Which channels form a plane is the *pairing*:

- ``"rotate_half"`` (every HF model): plane l = channels (l, l + d_head/2).
- ``"interleaved"`` (the papers' notation, and GPT-J style): plane l = channels (2l, 2l + 1).
- ``"rotate_half:R"`` (partial rotary with rotate-half, e.g. GPT-NeoX, StableLM: only the first R
  channels rotate): plane l < R/2 = channels (l, l + R/2); the ``d_head - R`` channels after them are
  never rotated and form the zero-frequency planes (R + 2m, R + 2m + 1). Partial *interleaved* rotary
  (GPT-J) needs no suffix: its unrotated tail pairs as (2l, 2l + 1) like the rest.

A model's ``RopeSpec`` has ``d_head / 2`` planes in this order; unrotated planes have ``inv_freq = 0``.

More variants (partial, p-RoPE, RoPE-ID, PI, YaRN, 2D ...) live in ``interp.rope.variants``; point clouds
under a rotation (paper 001 Lemma 1, Theorem 1, Fig. 7) in ``interp.rope.clouds``.

Leaf module: imports nothing from interp but errors.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
from jaxtyping import Bool, Float

from interp.errors import ShapeError

PAIRINGS = ("rotate_half", "interleaved")


@dataclass(frozen=True)
class RopeSpec:
    """RoPE of one layer.

    Attributes:
        inv_freq: ``[freq]`` angular frequency of each plane, radians per position (0 for planes that
            partial rotary leaves unrotated).
        scaling: multiplier on cos/sin (1.0 for default RoPE; rope types such as YaRN set it).
        pairing: ``"rotate_half"``, ``"interleaved"`` or ``"rotate_half:R"`` (see the module docstring).
    """

    inv_freq: Float[torch.Tensor, "freq"]
    scaling: float = 1.0
    pairing: str = "rotate_half"

    @property
    def d_head(self) -> int:
        """Channels per head (two per plane)."""
        return 2 * self.inv_freq.numel()

    @property
    def rotary_dim(self) -> int:
        """Channels that rotate: R of a ``"rotate_half:R"`` pairing, else the zero-frequency tail excluded."""
        _, _, width = self.pairing.partition(":")
        if width:
            return int(width)
        return 2 * int((self.inv_freq != 0).sum()) if self.pairing == "interleaved" else self.d_head

    @property
    def base(self) -> float:
        """The RoPE base theta implied by the two highest-frequency planes (default RoPE only)."""
        f = self.inv_freq.double()
        return float((f[0] / f[1]) ** (self.d_head / 2))


def default_inv_freq(base: float, d_head: int) -> Float[torch.Tensor, "freq"]:
    """Default RoPE frequencies ``base ** (-2l / d_head)``, l = 0..d_head/2-1 (RoFormer, Su et al. 2021)."""
    return 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float) / d_head))


def plane_channels(d_head: int, pairing: str = "rotate_half") -> torch.Tensor:
    """``[freq, 2]`` channel indices of each rotation plane under ``pairing`` (module docstring).

    Raises:
        ValueError: unknown pairing, odd ``d_head``, or a rotary width R that is odd or above ``d_head``.
    """
    kind, _, width = pairing.partition(":")
    if kind not in PAIRINGS or (width and kind != "rotate_half"):
        raise ValueError(f"unknown pairing {pairing!r}; use one of {PAIRINGS} or 'rotate_half:R' (partial rotary)")
    if d_head % 2:
        raise ValueError(f"d_head must be even for RoPE, got {d_head}")
    if kind == "interleaved":
        l = torch.arange(d_head // 2)
        return torch.stack([2 * l, 2 * l + 1], dim=1)
    r = int(width) if width else d_head
    if r % 2 or not 0 < r <= d_head:
        raise ValueError(f"rotary width R in {pairing!r} must be even and in 2..{d_head}")
    l = torch.arange(r // 2)
    tail = torch.arange(r, d_head).view(-1, 2)  # unrotated channels, as zero-frequency planes
    return torch.cat([torch.stack([l, l + r // 2], dim=1), tail])


def partial_pairing(pairing: str, rotary_dim: int, d_head: int) -> str:
    """The pairing name for a model that rotates only its first ``rotary_dim`` channels (module docstring)."""
    return f"{pairing}:{rotary_dim}" if pairing == "rotate_half" and rotary_dim < d_head else pairing


def rotate_half_of(x: torch.Tensor, pairing: str) -> torch.Tensor:
    """The 90-degree turn of every plane, ``(a, b) -> (-b, a)``, over the last axis (all of it rotates).

    This is HF's ``rotate_half`` (``"rotate_half"``) or ``rotate_every_two`` / Cohere's (``"interleaved"``).
    """
    if pairing == "interleaved":
        return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def unrotate_tables(
    x_rot: Float[torch.Tensor, "pos head d_head"],
    cos: Float[torch.Tensor, "pos rot"],
    sin: Float[torch.Tensor, "pos rot"],
    pairing: str,
) -> Float[torch.Tensor, "pos head d_head"]:
    """Undo RoPE with the model's own per-channel ``cos``/``sin`` tables (as HF passes them to attention).

    RoPE maps the first ``rot = cos.shape[-1]`` channels to ``y = x cos + turn(x) sin`` (``turn`` =
    ``rotate_half_of``; both channels of a plane share cos and sin); then ``y cos - turn(y) sin =
    x (cos^2 + sin^2)``, so ``x`` is recovered exactly up to float rounding, including tables scaled by a
    rope type's attention factor. Channels beyond ``rot`` (partial rotary) pass through. Computed in
    float32 (or float64 for float64 input).

    Raises:
        ShapeError: ``cos``/``sin`` are not ``[pos, rot]`` with ``rot <= d_head`` matching ``x_rot``.
    """
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[0] != x_rot.shape[0] or cos.shape[1] > x_rot.shape[-1]:
        raise ShapeError(f"unrotate_tables expects cos/sin [pos, rot<=d_head] for x {tuple(x_rot.shape)}; got {tuple(cos.shape)}")
    dt = torch.float64 if x_rot.dtype == torch.float64 else torch.float32
    x = x_rot.to(dt)
    r = cos.shape[1]
    # plane l = channels (a_l, b_l); turn(y) = (-y_b, y_a), so x_a = (y_a c_a + y_b s_a) / den_a, x_b = (y_b c_b - y_a s_b) / den_b:
    # the tables' division on [pos, rot] once, then four passes over x into a contiguous output (a scan runs this on
    # every layer's q and k; cat / clone / broadcast division cost 4x more)
    a, b = (slice(0, r, 2), slice(1, r, 2)) if pairing.partition(":")[0] == "interleaved" else (slice(0, r // 2), slice(r // 2, r))
    c, s = cos.to(dt), sin.to(dt)
    den = c * c + s * s
    c, s = (c / den)[:, None, :], (s / den)[:, None, :]
    out = torch.empty(x.shape, dtype=dt, device=x.device)
    xa, xb, ya, yb = out[..., a], out[..., b], x[..., a], x[..., b]
    torch.mul(ya, c[..., a], out=xa).addcmul_(yb, s[..., a])
    torch.mul(yb, c[..., b], out=xb).addcmul_(ya, s[..., b], value=-1)
    out[..., r:] = x[..., r:]
    return out


def rotate_tables(
    x: Float[torch.Tensor, "pos head d_head"],
    cos: Float[torch.Tensor, "pos rot"],
    sin: Float[torch.Tensor, "pos rot"],
    pairing: str,
) -> Float[torch.Tensor, "pos head d_head"]:
    """Apply RoPE with the model's own per-channel tables, as HF's ``apply_rotary_pos_emb`` does: the first
    ``rot = cos.shape[-1]`` channels become ``x cos + turn(x) sin`` (``turn`` = ``rotate_half_of`` over those channels);
    the rest pass through. The inverse of ``unrotate_tables``; float32 (float64 for float64 input).

    Raises:
        ShapeError: ``cos``/``sin`` are not ``[pos, rot]`` with ``rot <= d_head`` matching ``x``.
    """
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[0] != x.shape[0] or cos.shape[1] > x.shape[-1]:
        raise ShapeError(f"rotate_tables expects cos/sin [pos, rot<=d_head] for x {tuple(x.shape)}; got {tuple(cos.shape)}")
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    x = x.to(dt)
    r = cos.shape[1]
    c, s = cos.to(dt)[:, None, :], sin.to(dt)[:, None, :]
    out = x.clone()
    out[..., :r] = x[..., :r] * c + rotate_half_of(x[..., :r], pairing.partition(":")[0]) * s
    return out


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
    angles_override: Float[torch.Tensor, "pos freq"] | None = None,
) -> Float[torch.Tensor, "pos head d_head"]:
    """Apply RoPE to vectors at arbitrary positions.

    Args:
        x: ``[pos, head, d_head]`` vectors (pre-RoPE queries or keys).
        positions: ``[pos]`` integer (or real) positions, one per row of ``x``.
        spec: the layer's RoPE.
        keep_planes: optional ``[freq]`` mask; planes where it is False are left unrotated
            (theta -> 0, channels kept), as in the band ablation of paper 004, Table 5.
        inverse: rotate by ``-angle`` (undo RoPE).
        angles_override: ``[pos, freq]`` angles to use instead of ``positions * inv_freq`` (variants).

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
    ang = angles(spec, positions.to(x.device)) if angles_override is None else angles_override.to(x.device).float()
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


BANDS = ("high", "medium", "low")


def band_planes(n_freq: int, band: str, n_remove: int = 6) -> torch.Tensor:
    """Planes left unrotated in one band of the frequency ablation (paper 004, Sec. 5, Table 5, Fig. 8).

    The planes ``0..n_freq-1`` (0 = highest frequency) are split into three bands with
    ``numpy.array_split(arange(n_freq), 3)`` (high, medium, low; the first bands take the remainder),
    and ``n_remove`` evenly spaced planes of the band are chosen: ``band[linspace(0, len(band) - 1,
    n_remove).round()]``. For 64 planes: high = 0..21 -> 0, 4, 8, 13, 17, 21. The paper splits 64 planes
    as l in [1, 21], [22, 42], [43, 64] (1-based) and removes l = 1, 5, ..., 21 from the first; the
    split here is the project's stated rule (the two differ by at most one plane per band edge).

    Returns:
        ``[n]`` int64 plane indices (``n = min(n_remove, len(band))``, unique, ascending).

    Raises:
        ValueError: unknown band name, or ``n_freq < 3``.
    """
    if band not in BANDS:
        raise ValueError(f"unknown band {band!r}; use one of {BANDS}")
    if n_freq < 3:
        raise ValueError(f"need at least 3 rotation planes to form bands, got {n_freq}")
    part = np.array_split(np.arange(n_freq), 3)[BANDS.index(band)]
    idx = np.unique(np.linspace(0, len(part) - 1, n_remove).round().astype(int))
    return torch.as_tensor(part[idx], dtype=torch.long)


# --------------------------------------------------------------------------------------------
# Variants: changes of the rotation that the counterfactual scan and the causal intervention accept
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RopeVariant:
    """A change of RoPE, as data. The base class is standard RoPE (the layer's own rotation).

    A variant maps a layer's ``RopeSpec`` and the token positions to the rotation angle of every
    plane (``angles``) and may rescale the logits (``logit_scale``, e.g. the attention temperature of
    RoPE-ID). Subclasses override those two methods; everything that rotates (``rotate``, the scan's
    counterfactual passes, ``interp.hooks.intervene``) goes through them, so a new variant works everywhere.

    Attributes:
        name: label used in tables and state keys (unique within one scan).
    """

    name: str = "rope"

    def angles(self, spec: RopeSpec, positions: torch.Tensor, tokens: torch.Tensor | None = None) -> Float[torch.Tensor, "pos freq"]:
        """Rotation angle (radians) of every plane at every position (``tokens`` only for token-aware variants)."""
        return angles(spec, positions)

    def logit_scale(self, n_pos: int) -> float:
        """Multiplier on the attention logits for a prompt of ``n_pos`` tokens (1.0: none)."""
        return 1.0


@dataclass(frozen=True)
class PlaneAblation(RopeVariant):
    """Leave chosen rotation planes unrotated (theta_l -> 0; channels kept, not zeroed): paper 004, Table 5.

    Attributes:
        planes: plane indices (``freq`` axis, 0 = highest frequency) left unrotated, in every layer.
    """

    planes: tuple[int, ...] = ()

    def angles(self, spec, positions, tokens=None):
        ang = angles(spec, positions)
        keep = torch.ones(ang.shape[-1], dtype=ang.dtype, device=ang.device)
        if self.planes:
            if max(self.planes) >= ang.shape[-1] or min(self.planes) < 0:
                raise ValueError(f"{self.name}: planes must lie in 0..{ang.shape[-1] - 1}, got {list(self.planes)}")
            keep[list(self.planes)] = 0.0
        return ang * keep


def band_ablation(n_freq: int, band: str, n_remove: int = 6) -> PlaneAblation:
    """The ``PlaneAblation`` of one band (``band_planes``), named ``wo_<band>``."""
    return PlaneAblation(f"wo_{band}", tuple(band_planes(n_freq, band, n_remove).tolist()))


def band_ablations(n_freq: int, n_remove: int = 6) -> tuple[PlaneAblation, ...]:
    """The three band ablations of paper 004 Table 5: ``wo_high``, ``wo_medium``, ``wo_low``."""
    return tuple(band_ablation(n_freq, b, n_remove) for b in BANDS)


def variant_to_dict(variant: RopeVariant) -> dict:
    """``{"type": class name, field: value...}``: a variant as JSON-ready data (saved with a scan)."""
    return {"type": type(variant).__name__, **{f.name: getattr(variant, f.name) for f in fields(variant)}}


VARIANT_TYPES: dict[str, type] = {}  # class name (as saved in scan.json) -> class
VARIANT_KEYWORDS: dict[str, tuple[type, type]] = {}  # command-line keyword -> (class, type of its one value)


def register_variant(cls: type, keyword: str | None = None, value: type = float) -> type:
    """Add a ``RopeVariant`` subclass to the one registry that both ``variant_from_dict`` (loading saved scans) and
    ``interp.rope.variants.parse_variant`` (the command line's ``KIND[:VALUE]``) read.

    Args:
        cls: the variant class (a ``RopeVariant`` subclass); saved scans name it by ``cls.__name__``.
        keyword: its command-line name (None: not offered on the command line).
        value: type of the optional ``:VALUE`` (passed as the class's first field).

    Raises:
        ValueError: ``cls`` is not a ``RopeVariant`` subclass, or its name or keyword is already registered.
    """
    if not (isinstance(cls, type) and issubclass(cls, RopeVariant)):
        raise ValueError(f"{cls!r} is not a RopeVariant subclass")
    if cls.__name__ in VARIANT_TYPES or (keyword and keyword in VARIANT_KEYWORDS):
        raise ValueError(f"RoPE variant {cls.__name__!r} or keyword {keyword!r} is already registered")
    VARIANT_TYPES[cls.__name__] = cls
    if keyword:
        VARIANT_KEYWORDS[keyword] = (cls, value)
    return cls


register_variant(RopeVariant)
register_variant(PlaneAblation)


def variant_from_dict(d: dict) -> RopeVariant:
    """Inverse of ``variant_to_dict`` (lists become tuples, so frozen variants stay hashable).

    Raises:
        ValueError: an unknown variant type (the message lists the known ones).
    """
    known = VARIANT_TYPES
    d = dict(d)
    kind = d.pop("type", "RopeVariant")
    if kind not in known:
        raise ValueError(f"unknown RoPE variant type {kind!r}; known: {sorted(known)}")
    return known[kind](**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def rotate_variant(
    x: Float[torch.Tensor, "pos head d_head"],
    positions: torch.Tensor,
    spec: RopeSpec,
    variant: RopeVariant,
    tokens: torch.Tensor | None = None,
) -> Float[torch.Tensor, "pos head d_head"]:
    """Rotate pre-RoPE vectors with a variant's angles (``rotate`` with ``variant.angles``).

    Raises:
        ShapeError: as ``rotate``.
    """
    return rotate(x, positions, spec, angles_override=variant.angles(spec, positions.to(x.device), tokens))


from interp.rope import variants as _variants  # noqa: E402,F401  registers the variants that saved scans may name

__all__ = [
    "angles", "band_ablation", "band_ablations", "band_planes", "BANDS", "default_inv_freq", "PAIRINGS",
    "partial_pairing", "plane_channels", "plane_norms", "PlaneAblation", "register_variant", "RopeSpec",
    "RopeVariant", "rotate", "rotate_half_of", "rotate_variant", "unrotate_tables", "variant_from_dict",
    "variant_to_dict",
]
