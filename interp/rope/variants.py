"""RoPE variants as data (issue 7, item 4): partial RoPE, p-RoPE, RoPE-ID, position interpolation, YaRN,
scaled and shuffled frequencies, 2D-RoPE. Each is an ``interp.rope.RopeVariant``, so the scan's
counterfactual passes (``ScanConfig.variants``) and the causal intervention (``interp.hooks.intervene``) accept it.

Leaf module beside ``interp.rope``: imports only ``interp.rope`` and ``interp.errors``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float

from interp.errors import ShapeError
from interp.rope import VARIANT_KEYWORDS, RopeSpec, RopeVariant, angles, register_variant

# --------------------------------------------------------------------------------------------
# More variants (issue 7, item 4): partial / p-RoPE / RoPE-ID / PI / YaRN / 2D-RoPE / causal ablations
# --------------------------------------------------------------------------------------------
#
# Every variant below whose angles are linear in the position (all but ``Rope2D``) defines
# ``frequencies(spec) -> [freq]`` float64 radians per position, and ``angles`` is
# ``positions * frequencies`` in float32, the way HF computes its angles. A frequency of 0 leaves the
# plane unrotated (channels kept). Field ``name`` is keyword-only and defaults to a label built from
# the parameters, so ``PartialRope(0.5)`` works and is named ``partial0.5``.


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def _check_fraction(owner: str, fraction: float, lo_open: bool = False) -> None:
    ok = isinstance(fraction, (int, float)) and math.isfinite(fraction) and (0 < fraction if lo_open else 0 <= fraction) and fraction <= 1
    if not ok:
        rng = "(0, 1]" if lo_open else "[0, 1]"
        raise ValueError(f"{owner}: fraction must be a number in {rng}, got {fraction!r}")


def _linear_angles(freq: torch.Tensor, positions: torch.Tensor) -> Float[torch.Tensor, "pos freq"]:
    """``positions * freq`` in float32 on the positions' device (the convention of ``angles``)."""
    return positions.float()[:, None] * freq.to(device=positions.device, dtype=torch.float32)[None, :]


def _name_default(obj, label: str) -> None:
    if not obj.name:
        object.__setattr__(obj, "name", label)


def fit_base(spec: RopeSpec) -> float:
    """The base ``theta`` of a default (geometric) spectrum ``inv_freq_l = theta ** (-2 l / d_head)``, fitted.

    Least squares on ``log inv_freq`` over all planes with the intercept fixed at 0 (RoFormer, Su et
    al. 2021, eq. 15): much less sensitive to float32 rounding than ``RopeSpec.base`` (two planes only).

    Raises:
        ValueError: the spectrum is not geometric through 1 (max log residual > 1e-4), e.g. frequencies
            already scaled by a rope type (pass the base explicitly to the variant instead).
    """
    f = spec.inv_freq.double()
    x = 2 * torch.arange(f.numel(), dtype=torch.float64) / spec.d_head
    y = -torch.log(f)
    if f.numel() < 2 or (f <= 0).any():
        raise ValueError("fit_base needs at least two positive frequencies")
    log_base = float((x * y).sum() / (x * x).sum())
    resid = float((y - x * log_base).abs().max())
    if resid > 1e-4:
        raise ValueError(f"the layer's frequencies are not a default geometric spectrum (log residual {resid:.2g}); "
                         "pass rope_theta= to the variant")
    return math.exp(log_base)


def _default_freq64(base: float, d_head: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head))


@dataclass(frozen=True)
class PartialRope(RopeVariant):
    """Rotate only the highest-frequency planes: ``theta_l -> 0`` for ``l >= round(fraction * n_freq)``.

    Formula: ``omega_l = inv_freq_l`` for ``l < m``, ``0`` otherwise, with ``m = round(fraction * n_freq)``
    (rounded half up); angle ``= pos * omega_l`` (radians, position in tokens). ``PartialRope(0.5)`` is
    the "half RoPE" baseline of paper 001 (Sec. 4, Fig. 7, green) and "high-frequency-only" RoPE;
    ``PartialRope(0)`` is NoPE, ``PartialRope(1)`` is the layer's own RoPE. Unrotated planes keep their
    channels (not zeroed), as in ``PlaneAblation``.

    Attributes:
        fraction: share of planes rotated, in [0, 1].

    Raises:
        ValueError: ``fraction`` outside [0, 1].
    """

    fraction: float = 0.5
    name: str = field(default="", kw_only=True)

    def __post_init__(self):
        _check_fraction("PartialRope", self.fraction)
        _name_default(self, f"partial{self.fraction:g}")

    def n_rotated(self, n_freq: int) -> int:
        """Number of rotated planes (the first ones, highest frequencies)."""
        return _round_half_up(self.fraction * n_freq)

    def frequencies(self, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
        """``[freq]`` float64 radians per token; 0 for unrotated planes."""
        f = spec.inv_freq.double().clone()
        f[self.n_rotated(f.numel()):] = 0.0
        return f

    def angles(self, spec, positions, tokens=None):
        return _linear_angles(self.frequencies(spec), positions)


@dataclass(frozen=True)
class PRope(RopeVariant):
    """p-RoPE (Barbero et al. 2024, "Round and round we go! What makes rotary positional encodings
    useful?", Sec. 6): leave the lowest-frequency ``fraction`` of the planes unrotated.

    Formula: ``omega_l = inv_freq_l`` for ``l < n_freq - k``, ``0`` otherwise, with
    ``k = round(fraction * n_freq)`` (rounded half up); angle ``= pos * omega_l`` radians. The field is the
    fraction *dropped* (this project's issue 7); Barbero et al. name the variant by the fraction kept,
    ``p = 1 - fraction`` (their 0.75-RoPE keeps the highest 75 %, their 1-RoPE is RoPE, 0-RoPE is NoPE).
    ``PRope(f)`` rotates the same planes as ``PartialRope(1 - f)`` up to rounding.

    Attributes:
        fraction: share of the planes (lowest frequencies) left unrotated, in [0, 1].

    Raises:
        ValueError: ``fraction`` outside [0, 1].
    """

    fraction: float = 0.25
    name: str = field(default="", kw_only=True)

    def __post_init__(self):
        _check_fraction("PRope", self.fraction)
        _name_default(self, f"prope_drop{self.fraction:g}")

    @property
    def p(self) -> float:
        """Barbero et al.'s ``p``: the fraction of frequencies kept."""
        return 1.0 - self.fraction

    def frequencies(self, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
        """``[freq]`` float64 radians per token; 0 for the dropped (lowest-frequency) planes."""
        f = spec.inv_freq.double().clone()
        k = _round_half_up(self.fraction * f.numel())
        if k:
            f[f.numel() - k:] = 0.0
        return f

    def angles(self, spec, positions, tokens=None):
        return _linear_angles(self.frequencies(spec), positions)


@dataclass(frozen=True)
class RopeID(RopeVariant):
    """RoPE-ID (paper 001, Sec. 4.1 and App. A.4, Codeblocks 1-3): high-frequency RoPE on half the planes.

    Which half: the first ``round(fraction * n_freq)`` planes (``freq`` indices 0.., the model's highest
    frequencies). The paper's Codeblock 3 rotates "the first and third quarter of real-valued channels",
    which under HF's ``rotate_half`` pairing (plane l = channels l, l + d/2) are exactly planes
    ``0 .. d/4 - 1``; the same plane indices are used under any pairing. The other planes stay unrotated.

    Frequencies (Codeblock 2): wavelengths geometric from ``min_wavelength`` = 32 to ``max_wavelength``
    = 2048 tokens (two full turns in the 4096-token training length), highest first:
    ``lambda_j = 32 * (2048 / 32) ** (j / (m - 1))``, ``omega_j = 2 pi / lambda_j`` radians per token,
    ``j = 0 .. m - 1``, ``m`` rotated planes. The layer's own frequencies are not used.

    Attention temperature (Codeblock 1): logits times ``(0.1 ln(max(n, L) / L) + 1) ** 2`` with ``L`` =
    ``train_length`` = 4096 and ``n`` the number of positions. The paper's text (App. A.4) prints
    ``(1 + 0.1 ln(min(4096, n)))^2``, a typo: the code, and YaRN's ``mscale`` it borrows, use
    ``max(n, 4096) / 4096`` (1 within the training length).

    Attributes:
        fraction: share of planes rotated (paper: 1/2).
        min_wavelength, max_wavelength: shortest / longest wavelength in tokens (paper: 32, 2048).
        train_length: ``L`` of the temperature (paper: 4096).

    Raises:
        ValueError: ``fraction`` outside (0, 1], wavelengths not ``0 < min < max``, ``train_length < 1``,
            or fewer than two rotated planes for the layer (``frequencies``).
    """

    fraction: float = 0.5
    min_wavelength: float = 32.0
    max_wavelength: float = 2048.0
    train_length: int = 4096
    name: str = field(default="", kw_only=True)

    def __post_init__(self):
        _check_fraction("RopeID", self.fraction, lo_open=True)
        if not (0 < self.min_wavelength < self.max_wavelength < math.inf):
            raise ValueError(f"RopeID: need 0 < min_wavelength < max_wavelength, got {self.min_wavelength}, {self.max_wavelength}")
        if self.train_length < 1:
            raise ValueError(f"RopeID: train_length must be >= 1, got {self.train_length}")
        _name_default(self, "rope_id")

    def frequencies(self, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
        """``[freq]`` float64 radians per token: ``2 pi / lambda_j`` on the first ``m`` planes, 0 after."""
        n = spec.inv_freq.numel()
        m = _round_half_up(self.fraction * n)
        if m < 2:
            raise ValueError(f"RopeID: needs at least 2 rotated planes, got {m} of {n} (fraction {self.fraction})")
        j = torch.arange(m, dtype=torch.float64) / (m - 1)
        lo, hi = math.log(2 * math.pi / self.min_wavelength), math.log(2 * math.pi / self.max_wavelength)
        f = torch.zeros(n, dtype=torch.float64)
        f[:m] = torch.exp(lo + j * (hi - lo))
        return f

    def angles(self, spec, positions, tokens=None):
        return _linear_angles(self.frequencies(spec), positions)

    def logit_scale(self, n_pos: int) -> float:
        """``(0.1 ln(max(n_pos, L) / L) + 1) ** 2`` (paper 001, Codeblock 1; see the class docstring)."""
        return (0.1 * math.log(max(n_pos, self.train_length) / self.train_length) + 1.0) ** 2


@dataclass(frozen=True)
class PositionInterpolation(RopeVariant):
    """Position Interpolation (Chen et al. 2023), transformers' rope_type ``"linear"``.

    Formula (``transformers.modeling_rope_utils._compute_linear_scaling_rope_parameters``):
    ``omega_l = base ** (-2 l / d_head) / factor`` radians per token, i.e. positions divided by ``factor``.
    ``base`` is ``rope_theta`` or, when None, the layer's base fitted from its frequencies (``fit_base``).
    No attention factor (``logit_scale`` = 1).

    Attributes:
        factor: context extension factor (>= 1).
        rope_theta: RoPE base; None: fitted from the layer.

    Raises:
        ValueError: ``factor < 1`` or not finite, ``rope_theta <= 1``; ``fit_base``'s error when the layer's
            spectrum is not default and ``rope_theta`` is None.
    """

    factor: float = 4.0
    rope_theta: float | None = None
    name: str = field(default="", kw_only=True)

    def __post_init__(self):
        if not (isinstance(self.factor, (int, float)) and math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"PositionInterpolation: factor must be a finite number >= 1, got {self.factor!r}")
        if self.rope_theta is not None and not self.rope_theta > 1:
            raise ValueError(f"PositionInterpolation: rope_theta must be > 1, got {self.rope_theta!r}")
        _name_default(self, f"pi{self.factor:g}")

    def frequencies(self, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
        """``[freq]`` float64 radians per token."""
        base = self.rope_theta if self.rope_theta is not None else fit_base(spec)
        return _default_freq64(base, spec.d_head) / self.factor

    def angles(self, spec, positions, tokens=None):
        return _linear_angles(self.frequencies(spec), positions)


@dataclass(frozen=True)
class Yarn(RopeVariant):
    """YaRN (Peng et al. 2023, "YaRN: Efficient context window extension", Sec. 3.2-3.4), transformers'
    rope_type ``"yarn"`` (``_compute_yarn_parameters``, no ``mscale``/``mscale_all_dim``).

    Formula, with ``d = d_head``, ``b`` the base, ``L = original_max_position_embeddings``, ``s = factor``:
    ``corr(r) = d ln(L / (2 pi r)) / (2 ln b)``; ``low = max(floor(corr(beta_fast)), 0)``,
    ``high = min(ceil(corr(beta_slow)), d - 1)`` (no floor/ceil when ``truncate`` is False);
    ``ramp_l = clip((l - low) / (high - low), 0, 1)`` (``high += 0.001`` when equal);
    ``omega_l = b ** (-2l/d) * (1 - ramp_l) + b ** (-2l/d) / s * ramp_l`` radians per token (fast planes
    kept, slow planes interpolated by ``s``). Attention factor ``a = 0.1 ln s + 1`` (1 when ``s <= 1``)
    multiplies cos and sin, hence both q and k: ``logit_scale = a ** 2``.

    Attributes:
        factor: ``s`` (>= 1).
        original_max_position_embeddings: ``L``, the pretraining context in tokens.
        beta_fast, beta_slow: rotation counts bounding the ramp (32, 1).
        rope_theta: base; None: fitted from the layer (``fit_base``).
        truncate: floor/ceil the correction range (transformers' default True).

    Raises:
        ValueError: ``factor < 1``, ``original_max_position_embeddings < 1``, ``beta_fast <= beta_slow``,
            ``beta_slow <= 0`` or ``rope_theta <= 1``.
    """

    factor: float = 4.0
    original_max_position_embeddings: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    rope_theta: float | None = None
    truncate: bool = True
    name: str = field(default="", kw_only=True)

    def __post_init__(self):
        if not (isinstance(self.factor, (int, float)) and math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"Yarn: factor must be a finite number >= 1, got {self.factor!r}")
        if not self.original_max_position_embeddings >= 1:
            raise ValueError(f"Yarn: original_max_position_embeddings must be >= 1, got {self.original_max_position_embeddings!r}")
        if not (self.beta_fast > self.beta_slow > 0):
            raise ValueError(f"Yarn: need beta_fast > beta_slow > 0, got {self.beta_fast}, {self.beta_slow}")
        if self.rope_theta is not None and not self.rope_theta > 1:
            raise ValueError(f"Yarn: rope_theta must be > 1, got {self.rope_theta!r}")
        _name_default(self, f"yarn{self.factor:g}")

    @property
    def attention_factor(self) -> float:
        """``0.1 ln(factor) + 1`` (the multiplier on cos/sin; 1 for ``factor <= 1``)."""
        return 1.0 if self.factor <= 1 else 0.1 * math.log(self.factor) + 1.0

    def frequencies(self, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
        """``[freq]`` float64 radians per token."""
        base = self.rope_theta if self.rope_theta is not None else fit_base(spec)
        d, L = spec.d_head, self.original_max_position_embeddings

        def corr(rot):
            return d * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(base))

        low, high = corr(self.beta_fast), corr(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # transformers' guard against a zero-width ramp
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extra = _default_freq64(base, d)
        return extra * (1 - ramp) + extra / self.factor * ramp

    def angles(self, spec, positions, tokens=None):
        return _linear_angles(self.frequencies(spec), positions)

    def logit_scale(self, n_pos: int) -> float:
        """``attention_factor ** 2``: cos/sin are scaled on both q and k."""
        return self.attention_factor**2


@dataclass(frozen=True)
class ScaledRope(RopeVariant):
    """Every frequency times ``factor``: ``omega_l = factor * inv_freq_l`` radians per token.

    A causal ablation (not from a paper): ``factor > 1`` turns every plane faster (the cloud disperses
    sooner, paper 001 Sec. 3.1), ``factor < 1`` slower (as PI does, Chen et al. 2023). NoPE is
    ``PartialRope(0)``.

    Attributes:
        factor: multiplier (> 0).

    Raises:
        ValueError: ``factor`` not a finite number > 0.
    """

    factor: float = 2.0
    name: str = field(default="", kw_only=True)

    def __post_init__(self):
        if not (isinstance(self.factor, (int, float)) and math.isfinite(self.factor) and self.factor > 0):
            raise ValueError(f"ScaledRope: factor must be a finite number > 0, got {self.factor!r}")
        _name_default(self, f"scaled{self.factor:g}")

    def frequencies(self, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
        """``[freq]`` float64 radians per token."""
        return spec.inv_freq.double() * self.factor

    def angles(self, spec, positions, tokens=None):
        return _linear_angles(self.frequencies(spec), positions)


@dataclass(frozen=True)
class _SeededPermutation(RopeVariant):
    """A variant defined by one seeded permutation: ``seed`` (an integer >= 0) and the name ``{label}{seed}``."""

    seed: int = 0
    name: str = field(default="", kw_only=True)
    label = ""  # class attribute, not a field: the name's prefix

    def __post_init__(self):
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise ValueError(f"{type(self).__name__}: seed must be an integer >= 0, got {self.seed!r}")
        _name_default(self, f"{self.label}{self.seed}")


@dataclass(frozen=True)
class ShuffledRope(_SeededPermutation):
    """The layer's frequencies on permuted planes: ``omega_l = inv_freq_{pi(l)}`` radians per token.

    A causal ablation (not from a paper): same spectrum, wrong plane for each frequency, so a head that
    relies on a particular plane turning at a particular speed (paper 004, Sec. 5) loses it while the
    cloud-level statistics of paper 001 (which depend on the set of frequencies) barely change.
    ``pi = torch.randperm(n_freq, generator=manual_seed(seed))``: fixed per (seed, n_freq).

    Attributes:
        seed: the permutation's seed (>= 0).

    Raises:
        ValueError: negative or non-integer seed.
    """

    label = "shuffled"

    def permutation(self, n_freq: int) -> torch.Tensor:
        """``[freq]`` int64: plane l gets the frequency of plane ``permutation[l]``."""
        return torch.randperm(n_freq, generator=torch.Generator().manual_seed(self.seed))

    def frequencies(self, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
        """``[freq]`` float64 radians per token."""
        return spec.inv_freq.double()[self.permutation(spec.inv_freq.numel())]

    def angles(self, spec, positions, tokens=None):
        return _linear_angles(self.frequencies(spec), positions)


@dataclass(frozen=True)
class ShuffledPositions(_SeededPermutation):
    """The layer's own rotation at permuted positions: token ``i`` is rotated as if it sat at position ``pi(i)``.

    A null for the positional head roles (not from a paper): the text, the causal mask and the frequencies stay, only
    the positions RoPE encodes are shuffled, so a head that finds the previous token (or any fixed lag) through RoPE
    loses it while a head that follows content keeps it (``analyses/atlas/atlas_null.py --null positions``).
    ``pi = torch.randperm(n_pos, generator=manual_seed(seed))`` over the positions of the forward, fixed per (seed, n_pos).

    Attributes:
        seed: the permutation's seed (>= 0).

    Raises:
        ValueError: negative or non-integer seed.
    """

    label = "shuffled-positions"

    def angles(self, spec, positions, tokens=None):
        perm = torch.randperm(positions.numel(), generator=torch.Generator().manual_seed(self.seed)).to(positions.device)
        return angles(spec, positions.reshape(-1)[perm].reshape(positions.shape))


def positions_2d(tokens: torch.Tensor, newline_ids) -> torch.Tensor:
    """``[pos, 2]`` int64 (row, column) of every token, paper 000 Sec. 4.1 (2D position IDs).

    ``(r_0, c_0) = (0, 0)``; ``(r_i, c_i) = (r_{i-1}, c_{i-1} + 1)`` if token ``i - 1`` is not a line
    break, ``(r_{i-1} + 1, 0)`` if it is. So ``r_i`` = number of line-break tokens before ``i`` and
    ``c_i`` = offset of ``i`` after the last of them. A token counts as a line break when its id is in
    ``newline_ids`` (one break per token, also for a token such as ``"\\n\\n"``).

    Raises:
        ShapeError: ``tokens`` is not 1-D.
    """
    tokens = torch.as_tensor(tokens)
    if tokens.dim() != 1:
        raise ShapeError(f"positions_2d expects token ids [pos], got shape {tuple(tokens.shape)}")
    nl = torch.isin(tokens, torch.as_tensor(list(newline_ids), dtype=tokens.dtype, device=tokens.device))
    n = tokens.numel()
    idx = torch.arange(n, device=tokens.device)
    before = torch.zeros(n, dtype=torch.long, device=tokens.device)
    before[1:] = nl[:-1].long().cumsum(0)  # line breaks strictly before i
    last = torch.where(nl, idx, torch.full_like(idx, -1)).cummax(0).values  # last break at or before i
    last_before = torch.full_like(idx, -1)
    last_before[1:] = last[:-1]
    return torch.stack([before, idx - last_before - 1], dim=1)


def newline_token_ids(tokenizer, vocab_size: int | None = None) -> tuple[int, ...]:
    """Ids of the tokens whose decoded text contains ``"\\n"`` (line-break tokens for ``Rope2D``).

    Args:
        tokenizer: a HF tokenizer (anything with ``batch_decode``; ``LoadedModel.tokenizer``).
        vocab_size: ids ``0 .. vocab_size - 1`` are checked (default ``len(tokenizer)``).
    """
    n = vocab_size if vocab_size is not None else len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(n)])
    return tuple(i for i, t in enumerate(texts) if "\n" in t)


@dataclass(frozen=True)
class Rope2D(RopeVariant):
    """2D-RoPE (paper 000, Sec. 4.1; App. F): rows and columns of the text grid instead of 1D positions.

    Positions: ``(r_i, c_i)`` from ``positions_2d(tokens, newline_ids)`` (row = line breaks before the
    token, column = offset within its line). Rotation: the first half of the planes (``freq`` 0 .. h-1,
    ``h = n_freq / 2``) turn with the row, the second half with the column, both halves with the same
    frequencies ``beta_j = inv_freq_{2j}`` (``= base ** (-4 j / d_head)`` for a default layer, the paper's
    ``beta_j = theta ** (-4j/d)`` with ``theta`` the layer's base, j = 0 .. h-1):
    ``angle_j = r * beta_j`` and ``angle_{h+j} = c * beta_j`` radians. Sec. 4.1 puts the row half first
    (``R = diag(R_1(r), .., R_{d/4}(r), R_1(c), .., R_{d/4}(c))``), App. L the column half; here row first,
    with the shared frequencies of Sec. 4.1 / App. F (``theta_x = theta_y``). Under ``rotate_half`` the row
    half is channels ``[0, d/4) + [d/2, 3d/4)``.

    ``positions`` are taken to be ``0 .. pos - 1`` (the 1D positions are replaced, not used).

    Attributes:
        newline_ids: token ids that count as line breaks (``newline_token_ids(tokenizer)``).

    Raises:
        ValueError: ``newline_ids`` empty or not integers; ``angles`` without ``tokens``, with ``tokens`` of
            another length than ``positions``, or on a layer whose ``n_freq`` is odd (d_head not divisible by 4).
    """

    newline_ids: tuple[int, ...] = ()
    name: str = field(default="", kw_only=True)

    def __post_init__(self):
        ids = tuple(self.newline_ids)
        if not ids or not all(isinstance(i, (int, np.integer)) and i >= 0 for i in ids):
            raise ValueError(f"Rope2D: newline_ids must be a non-empty tuple of token ids >= 0, got {self.newline_ids!r}")
        object.__setattr__(self, "newline_ids", tuple(int(i) for i in ids))
        _name_default(self, "rope2d")

    def angles(self, spec, positions, tokens=None):
        if tokens is None:
            raise ValueError("Rope2D needs the prompt's tokens to place each token on the (row, column) grid; pass tokens=")
        tokens = torch.as_tensor(tokens).reshape(-1)
        if tokens.numel() != positions.numel():
            raise ValueError(f"Rope2D: {tokens.numel()} tokens for {positions.numel()} positions")
        n = spec.inv_freq.numel()
        if n % 2:
            raise ValueError(f"Rope2D: needs an even number of planes (d_head divisible by 4), got {n}")
        beta = spec.inv_freq.float()[0::2].to(positions.device)
        rc = positions_2d(tokens.to(positions.device), self.newline_ids).float()
        return torch.cat([rc[:, :1] * beta[None, :], rc[:, 1:] * beta[None, :]], dim=1)


def variant_frequencies(variant: RopeVariant, spec: RopeSpec) -> Float[torch.Tensor, "freq"]:
    """``[freq]`` float64 angular frequency (radians per token) of a variant whose angles are linear in position.

    Uses ``variant.frequencies(spec)`` where defined, else the angles at position 1 (float32), after
    checking that the angles at positions 0..63 and 4095 are ``pos *`` those (so ``RopeVariant`` and
    ``PlaneAblation`` work too).

    Raises:
        ValueError: the variant's angles need tokens (``Rope2D``) or are not linear in the position.
    """
    if hasattr(variant, "frequencies"):
        return variant.frequencies(spec)
    pos = torch.cat([torch.arange(64), torch.tensor([4095])])
    ang = variant.angles(spec, pos).double()
    f = ang[1]
    if not torch.allclose(ang, pos.double()[:, None] * f[None, :], rtol=1e-5, atol=1e-6):
        raise ValueError(f"variant {variant.name!r}: angles are not linear in the position; no frequencies")
    return f


register_variant(PartialRope, "partial")
register_variant(PRope, "p-rope")
register_variant(RopeID, "rope-id")
register_variant(PositionInterpolation, "pi")
register_variant(Yarn, "yarn")
register_variant(ScaledRope, "scaled")
register_variant(ShuffledRope, "shuffled", int)
register_variant(ShuffledPositions, "shuffled-positions", int)
register_variant(Rope2D)


def parse_variant(spec: str) -> RopeVariant:
    """A variant from a short text, as the command line takes it: ``KIND[:VALUE]``.

    Kinds: ``partial:F`` (``PartialRope``, rotate the highest-frequency fraction F), ``p-rope:F`` (``PRope``, drop the
    lowest fraction F), ``rope-id`` (``RopeID``), ``pi:FACTOR``, ``yarn:FACTOR``, ``scaled:FACTOR``, ``shuffled:SEED``,
    ``shuffled-positions:SEED``; without a value each class's default is used.

    Raises:
        ValueError: an unknown kind or a value that is not a number (the message lists the kinds).
    """
    kind, _, value = spec.strip().partition(":")
    if kind not in VARIANT_KEYWORDS:
        raise ValueError(f"unknown RoPE variant {spec!r}; use one of {', '.join(k + '[:value]' for k in VARIANT_KEYWORDS)}")
    cls, conv = VARIANT_KEYWORDS[kind]
    if not value:
        return cls()
    try:
        return cls(conv(value))
    except ValueError as e:
        raise ValueError(f"bad value in RoPE variant {spec!r}: {e}") from None
