"""The model card: architecture facts read from the config and from a 2-token probe through the taps."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from interp.models import arch
from interp.errors import UnsupportedModelError
from interp.rope import partial_pairing

# --------------------------------------------------------------------------------------------
# Model card
# --------------------------------------------------------------------------------------------


@dataclass
class ModelCard:
    """What a measurement needs to know about a model, read from its config and from one probe forward.

    ``n_heads``, ``n_kv_heads``, ``d_head``, ``attn_scale``, ``sliding_window`` and ``softcap`` are what
    the model actually passes to its attention function (``interp.models.taps``), per layer where they vary
    (Gemma mixes local and global layers). ``pairing`` is the RoPE channel pairing (``interp.rope``):
    ``"rotate_half"`` (channel i with i + d_head/2), ``"interleaved"`` (2l with 2l+1) or
    ``"rotate_half:R"`` (partial rotary); ``rotary_dim`` is how many channels rotate (``rotary_fraction`` =
    rotary_dim / d_head) and ``rope_scaling`` the rope type with its factor (e.g. ``"llama3 (factor 8.0)"``).
    """

    name: str
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    vocab_size: int
    context_length: int
    rope_theta: list[float]
    sliding_window: list[int | None]
    attn_scale: list[float]
    softcap: float | None
    pairing: str = "rotate_half"
    qk_norm: bool = False
    qk_bias: bool = False
    source: str = ""
    quantization: str = ""
    sha256: str = ""
    extra: dict = field(default_factory=dict)
    family: str = ""
    rotary_dim: int | None = None
    rope_scaling: str = "default"
    dtype: str = "float32"
    tested: bool = True

    @property
    def group_size(self) -> int:
        """Query heads per kv head (1 = MHA, n_heads = MQA)."""
        return self.n_heads // self.n_kv_heads

    @property
    def rotary_fraction(self) -> float:
        """Fraction of each head's channels that RoPE rotates (1.0 unless partial rotary)."""
        return (self.rotary_dim or self.d_head) / self.d_head

    @property
    def n_rotary_planes(self) -> int:
        """Rotation planes with a nonzero frequency (``rotary_dim / 2``); they come first on the ``freq`` axis."""
        return (self.rotary_dim or self.d_head) // 2

    def to_dict(self) -> dict:
        """Plain-JSON form (lists, numbers, strings)."""
        return asdict(self)


def rope_theta_per_layer(config) -> list[float]:
    """RoPE base per layer from an HF config (``rope_parameters`` is per layer type in Gemma-3; GPT-J: 10000)."""
    params = getattr(config, "rope_parameters", None) or {"rope_theta": getattr(config, "rope_theta", 1e4)}
    out = []
    for t in arch.layer_types(config):
        p = params[t] if isinstance(params.get(t), dict) else params
        out.append(float(p.get("rope_theta", 1e4)))
    return out


def _probe(hf_model: torch.nn.Module) -> list:
    """Run two tokens through the model and return every layer's ``interp.models.taps.AttentionCall``."""
    from interp.models.taps import attention_taps

    calls = []
    with torch.inference_mode(), attention_taps(hf_model, lambda c: calls.append(c)):
        hf_model.base_model(torch.tensor([[0, 1]], device=next(hf_model.parameters()).device), use_cache=False)
    return calls


def make_card(name: str, hf_model: torch.nn.Module, *, source: str = "", quantization: str = "", sha: str = "") -> ModelCard:
    """Build the model card from a loaded HF causal LM: its config plus what one probe forward passes to attention.

    Raises:
        UnsupportedModelError: the model is not a RoPE decoder interp can tap (``interp.models.arch.family``).
    """
    cfg = hf_model.config
    fam = arch.family(hf_model)
    attn = arch.attention_modules(hf_model)
    calls = _probe(hf_model)
    if len(calls) != len(attn):
        raise UnsupportedModelError(f"{name}: {len(calls)} of {len(attn)} attention layers reached interp's tap; "
                                    f"this architecture calls attention another way (covered: {arch.covered()})")
    c0 = calls[0]
    d_head = c0.query.shape[-1]
    rot = c0.cos.shape[-1]
    proj = [getattr(attn[0], a, None) for a in ("q_proj", "qkv_proj", "query_key_value")]
    return ModelCard(
        name=name,
        architecture=(cfg.architectures or [type(hf_model).__name__])[0],
        n_layers=len(attn),
        n_heads=c0.query.shape[1],
        n_kv_heads=c0.key.shape[1],
        d_head=d_head,
        d_model=cfg.hidden_size,
        vocab_size=cfg.vocab_size,
        context_length=int(cfg.max_position_embeddings),
        rope_theta=rope_theta_per_layer(cfg),
        sliding_window=[c.window for c in calls],
        attn_scale=[c.scale for c in calls],
        softcap=c0.softcap,
        pairing=partial_pairing(fam.pairing, rot, d_head),
        qk_norm=any(hasattr(attn[0], a) for a in ("q_norm", "q_layernorm")),
        qk_bias=any(getattr(p, "bias", None) is not None for p in proj if p is not None),
        source=source,
        quantization=quantization,
        sha256=sha,
        family=fam.name,
        rotary_dim=rot,
        rope_scaling=arch.rope_scaling(cfg),
        dtype=str(next(hf_model.parameters()).dtype).removeprefix("torch."),
        tested=fam.tested,
    )
