"""The lab's decoder: a small pre-LN transformer with pluggable position encodings, as a Hugging Face model.

``LabForCausalLM(LabConfig(...))`` is a ``transformers.PreTrainedModel`` (Llama blocks: RMSNorm before
attention and MLP, SwiGLU MLP, no biases) whose attention layers call transformers' attention interface
with RoPE tables passed as ``position_embeddings``, exactly like the zoo's models. So ``interp.capture``,
``verify_attention``, ``interp.scan`` and the reports work on a trained lab model unchanged
(``interp.lab.lab_loaded``), and ``save_pretrained`` / ``interp.load_model("local:DIR")`` round-trip.

Position encodings (``LabConfig.pe``), all on the ``rotate_half`` pairing (plane l = channels l, l + d/2):

- ``"rope"``: RoPE with base ``rope_base``: ``omega_l = base ** (-2l / d_head)`` radians per position.
- ``"nope"``: no position encoding (every plane at frequency 0).
- ``"rope-id"``, ``"partial"``: the frequencies of ``interp.rope.variants.RopeID(0.5, *rope_id_wavelengths)``
  (paper 001 App. A.4: half the planes, wavelengths 32..2048 tokens by default; a model trained on n tokens
  rescales the longest to n / 2, two full turns per training length as the paper's 2048 in 4096) and
  ``PartialRope(partial_fraction)`` (highest-frequency planes only) over the default spec.
- ``temperature_length`` ``L`` > 0 (any encoding; paper 001 App. A.4, Codeblock 1, from YaRN): the attention
  logits of a forward over ``N`` positions are multiplied by ``(0.1 ln(max(N, L) / L) + 1) ** 2``
  (``RopeID(train_length=L).logit_scale(N)``; 1 up to ``N = L``). The factor is part of the scale the
  attention call receives, so interp's scans see the model's own attention. 0 (default): off.
- ``"rope2d"``: 2D-RoPE (paper 000 Sec. 4.1): position ``(r, c)`` = (line breaks before the token, offset
  in its line) from ``interp.rope.variants.positions_2d`` with ``newline_ids``; planes ``0 .. h-1`` turn
  with ``r``, planes ``h .. 2h-1`` with ``c``, both at ``beta_j = omega_{2j}`` (row half first, shared
  frequencies: ``interp.rope.variants.Rope2D`` over the same spec gives the same angles).
- ``"learned"``: a learned absolute embedding ``W_pos[position]`` added to the token embedding
  (``max_positions`` rows); no rotation. Paper 003 trains it with a random offset (pass ``position_ids``).
- ``"alibi"``: ALiBi (Press et al. 2022): logits ``scale q_i.k_j - m_h (i - j)`` with the standard slopes
  ``m_h = 2 ** (-8 h' / n)`` (``alibi_slopes``). Carried *exactly* by one extra zero-frequency plane, so the
  attention call stays a plain ``softmax(scale q.k)`` that every interp tool reads: the call's query gets
  channel ``m_h / scale``, its key gets the key's position ``j`` (value: 0; the plane's second channel is
  0 everywhere). Then ``scale q'.k' = scale q.k + m_h j``, which differs from ALiBi's logit by ``m_h i``,
  constant along a row, and softmax ignores it. ``head_dim`` (the call's width) is then
  ``d_model / n_heads + 2`` and the output's two extra channels (always 0) are dropped before ``o_proj``.

Explicit ``position_ids`` (``[batch, pos]``; ``[batch, pos, 2]`` for ``rope2d``) drive every encoding
(position coupling, PoSE, offsets); the causal mask always follows token order.

Imports ``interp.models.arch``, ``interp.rope``, ``interp.rope.variants`` (never the other way).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
# eager_attention_forward and rotate_half must be names of this module: interp.models.taps finds the eager
# attention of a layer, and interp.models.arch its pairing, in the module that defines the attention class.
from transformers.models.llama.modeling_llama import (  # noqa: F401
    LlamaMLP, LlamaRMSNorm, apply_rotary_pos_emb, eager_attention_forward, rotate_half,
)

from interp.models import arch
from interp.rope import RopeSpec, default_inv_freq
from interp.rope.variants import PartialRope, RopeID, positions_2d

PES = ("rope", "nope", "alibi", "learned", "rope-id", "partial", "rope2d")
MODEL_TYPE = "interp_lab"


class LabConfig(PretrainedConfig):
    """Configuration of a lab decoder (``LabForCausalLM``).

    Args:
        vocab_size: number of token ids (``len(Vocab)``).
        n_layers, n_heads, d_model, d_mlp: depth, heads per layer (no GQA: as many kv heads), residual width,
            MLP width. ``d_model`` must be divisible by ``n_heads`` and ``d_model / n_heads`` even (4 | for rope2d).
        pe: one of ``PES`` (module docstring).
        rope_base: RoPE base theta (``rope``, ``partial``, ``rope2d``).
        partial_fraction: share of planes that rotate under ``partial``.
        max_positions: context length (and the learned table's size for ``learned``); position ids must be below it.
        rope_id_wavelengths: ``(shortest, longest)`` wavelength in tokens of the rotated planes under ``rope-id``
            (paper 001: ``(32, 2048)`` for 4096-token training).
        temperature_length: ``L`` of the length temperature (module docstring); 0 turns it off.
        newline_ids: token ids that start a new row under ``rope2d``.
        rms_norm_eps, initializer_range: as in Llama.

    Raises:
        ValueError: an unknown ``pe``, bad sizes, ``rope2d`` without ``newline_ids``, wavelengths not
            ``0 < shortest < longest`` or a negative ``temperature_length``.
    """

    model_type = MODEL_TYPE
    attribute_map = {"hidden_size": "d_model", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                     "num_key_value_heads": "n_heads", "intermediate_size": "d_mlp", "max_position_embeddings": "max_positions"}

    def __init__(self, vocab_size: int = 16, n_layers: int = 1, n_heads: int = 4, d_model: int = 64, d_mlp: int = 256,
                 pe: str = "rope", rope_base: float = 1e4, partial_fraction: float = 0.25, max_positions: int = 4096,
                 newline_ids: tuple[int, ...] = (), rms_norm_eps: float = 1e-6, initializer_range: float = 0.02,
                 rope_id_wavelengths: tuple[float, float] = (32.0, 2048.0), temperature_length: int = 0, **kwargs):
        if pe not in PES:
            raise ValueError(f"LabConfig: unknown pe {pe!r}; use one of {', '.join(PES)}")
        if d_model % n_heads or (d_model // n_heads) % (4 if pe == "rope2d" else 2):
            raise ValueError(f"LabConfig: d_model {d_model} must split into {n_heads} heads of an even width "
                             f"(a multiple of 4 for rope2d)")
        if pe == "rope2d" and not newline_ids:
            raise ValueError("LabConfig: pe='rope2d' needs newline_ids (the line-break token ids)")
        lo, hi = (float(w) for w in rope_id_wavelengths)
        if not 0 < lo < hi:
            raise ValueError(f"LabConfig: rope_id_wavelengths must be (shortest, longest) with 0 < shortest < longest, got {tuple(rope_id_wavelengths)}")
        if int(temperature_length) < 0:
            raise ValueError(f"LabConfig: temperature_length must be >= 0 (0: off), got {temperature_length}")
        for k in ("head_dim", "num_key_value_heads", "hidden_act", "attention_bias", "mlp_bias", "attention_dropout"):
            kwargs.pop(k, None)  # derived below (present in a saved config.json)
        kwargs.setdefault("pad_token_id", 0)
        kwargs.setdefault("bos_token_id", 1)
        kwargs.setdefault("tie_word_embeddings", False)
        self.vocab_size, self.n_layers, self.n_heads, self.d_model, self.d_mlp = vocab_size, n_layers, n_heads, d_model, d_mlp
        self.pe, self.rope_base, self.partial_fraction = pe, float(rope_base), float(partial_fraction)
        self.max_positions, self.newline_ids = int(max_positions), tuple(int(i) for i in newline_ids)
        self.rms_norm_eps, self.initializer_range = rms_norm_eps, initializer_range
        self.rope_id_wavelengths, self.temperature_length = (lo, hi), int(temperature_length)
        self.proj_dim = d_model // n_heads                      # q/k/v projection width per head
        self.head_dim = self.proj_dim + (2 if pe == "alibi" else 0)  # width of the attention call (ALiBi plane)
        self.hidden_act, self.attention_bias, self.mlp_bias, self.attention_dropout = "silu", False, False, 0.0
        self.rope_theta = self.rope_base if pe in ("rope", "partial", "rope2d") else 0.0
        super().__init__(**kwargs)


def alibi_slopes(n_heads: int) -> Float[torch.Tensor, "head"]:
    """ALiBi slopes ``m_h`` (Press et al. 2022, Sec. 3): ``2 ** (-8 (h + 1) / n)`` for n a power of two; otherwise
    the slopes of the next lower power of two followed by every other slope of twice that many heads."""
    def powers(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    p = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = powers(p) + powers(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


def lab_inv_freq(config: LabConfig) -> Float[torch.Tensor, "freq"]:
    """``[head_dim / 2]`` float32 angular frequency per plane (radians per position) the layer rotates with.

    ``rope2d``: the default frequencies ``omega_l`` of the spec (the rotation uses ``omega_{2j}`` on both
    halves, module docstring); ``nope``, ``learned``, ``alibi``: zeros.
    """
    d = config.proj_dim
    base = default_inv_freq(config.rope_base, d)
    spec = RopeSpec(base)
    if config.pe in ("rope", "rope2d"):
        f = base
    elif config.pe == "partial":
        f = PartialRope(config.partial_fraction).frequencies(spec).float()
    elif config.pe == "rope-id":
        lo, hi = config.rope_id_wavelengths
        f = RopeID(min_wavelength=lo, max_wavelength=hi).frequencies(spec).float()
    else:
        f = torch.zeros(d // 2)
    return torch.cat([f.float(), f.new_zeros((config.head_dim - d) // 2)])


class LabRotary(nn.Module):
    """The RoPE tables of every layer: ``(cos, sin)``, each ``[batch, pos, head_dim]`` (rotate_half layout).

    Holds ``inv_freq`` ``[head_dim / 2]`` and ``attention_scaling`` (1.0), where ``interp.models.arch.rope_specs``
    reads them.
    """

    def __init__(self, config: LabConfig):
        super().__init__()
        self.pe = config.pe
        self.attention_scaling = 1.0
        self.register_buffer("inv_freq", lab_inv_freq(config), persistent=False)

    def angles(self, position_ids: torch.Tensor) -> Float[torch.Tensor, "batch pos freq"]:
        """Angles in radians from ``[batch, pos]`` (or ``[batch, pos, 2]`` rows/columns for rope2d) positions."""
        f = self.inv_freq.float()
        if self.pe == "rope2d":
            beta = f[0::2]
            rc = position_ids.float()
            return torch.cat([rc[..., :1] * beta, rc[..., 1:] * beta], dim=-1)
        return position_ids.float()[..., None] * f

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``[batch, pos, head_dim]`` in ``dtype``, from ``angles(position_ids)`` repeated on both halves."""
        ang = self.angles(position_ids)
        emb = torch.cat([ang, ang], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


class LabAttention(nn.Module):
    """Multi-head causal self-attention through transformers' attention interface (what ``interp.models.taps`` taps).

    Shapes: hidden ``[batch, pos, d_model]`` -> q, k, v ``[batch, head, pos, head_dim]`` -> output
    ``[batch, pos, d_model]``. Scale ``1 / sqrt(d_model / n_heads)``, times the length temperature of a
    forward over ``pos`` positions when ``config.temperature_length`` is set (module docstring).
    """

    def __init__(self, config: LabConfig, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.head_dim, self.proj_dim = config.head_dim, config.proj_dim
        self.num_key_value_groups = 1
        self.scaling = self.proj_dim ** -0.5
        self.is_causal = True
        h, d = config.n_heads, config.d_model
        self.q_proj = nn.Linear(d, h * self.proj_dim, bias=False)
        self.k_proj = nn.Linear(d, h * self.proj_dim, bias=False)
        self.v_proj = nn.Linear(d, h * self.proj_dim, bias=False)
        self.o_proj = nn.Linear(h * self.proj_dim, d, bias=False)
        if config.pe == "alibi":
            self.register_buffer("alibi_slopes", alibi_slopes(h), persistent=False)

    def _alibi_plane(self, q, k, v, position_ids):
        """Append ALiBi's plane: q gets ``m_h / scale``, k the key position, v zeros (module docstring)."""
        b, h, n, _ = q.shape
        qa = (self.alibi_slopes.to(q.dtype) / self.scaling)[None, :, None, None].expand(b, h, n, 1)
        ka = position_ids.to(k.dtype)[:, None, :, None].expand(b, h, n, 1)
        zero = q.new_zeros(b, h, n, 1)
        return torch.cat([q, qa, zero], -1), torch.cat([k, ka, zero], -1), torch.cat([v, zero, zero], -1)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, position_ids=None, **kwargs):
        """``(output [batch, pos, d_model], weights [batch, head, q_pos, k_pos] | None)``; ``position_ids`` ``[batch, pos]`` feed ALiBi's plane."""
        b, n, _ = hidden_states.shape
        shape = (b, n, -1, self.proj_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        if self.config.pe == "alibi":
            q, k, v = self._alibi_plane(q, k, v, position_ids)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        scale = self.scaling
        if self.config.temperature_length:
            scale = scale * RopeID(train_length=self.config.temperature_length).logit_scale(n)
        out, weights = attend(self, q, k, v, attention_mask, dropout=0.0, scaling=scale, **kwargs)
        out = out[..., : self.proj_dim].reshape(b, n, -1)  # ALiBi's extra channels are 0 by construction
        return self.o_proj(out), weights


class LabBlock(nn.Module):
    """Pre-LN block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))`` (Llama's RMSNorm and SwiGLU MLP)."""

    def __init__(self, config: LabConfig, layer_idx: int):
        super().__init__()
        self.self_attn = LabAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.d_model, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.d_model, eps=config.rms_norm_eps)

    def forward(self, x, attention_mask, position_embeddings, position_ids):
        """``[batch, pos, d_model]`` -> ``[batch, pos, d_model]``."""
        a, _ = self.self_attn(self.input_layernorm(x), position_embeddings=position_embeddings,
                              attention_mask=attention_mask, position_ids=position_ids)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x))


class LabPreTrainedModel(PreTrainedModel):
    """Shared HF plumbing (weight init from ``initializer_range``, sdpa / eager / interp's tap attention)."""

    config_class = LabConfig
    config: LabConfig
    base_model_prefix = "model"
    _supports_sdpa = True
    _supports_attention_backend = True
    _no_split_modules = ["LabBlock"]

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        # non-persistent buffers are not in the checkpoint: rebuild them (from_pretrained creates modules empty)
        if isinstance(module, LabRotary):
            module.inv_freq.copy_(lab_inv_freq(self.config))
        elif isinstance(module, LabAttention) and hasattr(module, "alibi_slopes"):
            module.alibi_slopes.copy_(alibi_slopes(self.config.n_heads))


class LabModel(LabPreTrainedModel):
    """The decoder stack: embeddings (+ learned positions), blocks, final RMSNorm."""

    def __init__(self, config: LabConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        if config.pe == "learned":
            self.embed_positions = nn.Embedding(config.max_positions, config.d_model)
        self.layers = nn.ModuleList([LabBlock(config, i) for i in range(config.n_layers)])
        self.norm = LlamaRMSNorm(config.d_model, eps=config.rms_norm_eps)
        self.rotary_emb = LabRotary(config)
        self.post_init()

    def default_positions(self, input_ids: Int[torch.Tensor, "batch pos"]) -> torch.Tensor:
        """``[batch, pos]`` = 0..pos-1, or ``[batch, pos, 2]`` (row, column) from the line breaks for rope2d."""
        b, n = input_ids.shape
        if self.config.pe == "rope2d":
            return torch.stack([positions_2d(row, self.config.newline_ids) for row in input_ids])
        return torch.arange(n, device=input_ids.device).expand(b, n)

    def forward(self, input_ids: Int[torch.Tensor, "batch pos"] | None = None, attention_mask=None,
                position_ids: torch.Tensor | None = None, inputs_embeds=None, use_cache=None, **kwargs) -> BaseModelOutputWithPast:
        """Hidden states ``[batch, pos, d_model]`` after the final norm (``last_hidden_state``).

        Args:
            input_ids: ``[batch, pos]`` token ids (or ``inputs_embeds`` ``[batch, pos, d_model]``).
            attention_mask: optional ``[batch, pos]`` padding mask (1 = real token); the causal mask is always applied.
            position_ids: optional ``[batch, pos]`` int positions (``[batch, pos, 2]`` for rope2d); default ``default_positions``.

        Raises:
            ValueError: position ids of the wrong shape, negative, or (for ``learned``) >= ``max_positions``.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("LabModel: pass exactly one of input_ids and inputs_embeds")
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        b, n = x.shape[:2]
        if position_ids is None:
            ids = input_ids if input_ids is not None else torch.zeros(b, n, dtype=torch.long, device=x.device)
            position_ids = self.default_positions(ids).to(x.device)
        position_ids = self._check_positions(position_ids, b, n)
        if self.config.pe == "learned":
            x = x + self.embed_positions(position_ids)
        # the mask follows token order; position ids are not passed, since transformers would read jumps in
        # them as packed sequences and cut attention across each jump
        mask = create_causal_mask(config=self.config, inputs_embeds=x, attention_mask=attention_mask,
                                  past_key_values=None, position_ids=torch.arange(n, device=x.device)[None])
        tables = self.rotary_emb(position_ids, x.dtype)
        pos1d = position_ids[..., 1] if position_ids.dim() == 3 else position_ids
        for layer in self.layers:
            x = layer(x, mask, tables, pos1d)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(x))

    def _check_positions(self, position_ids: torch.Tensor, b: int, n: int) -> torch.Tensor:
        position_ids = torch.as_tensor(position_ids, device=self.embed_tokens.weight.device).long()
        want = (b, n, 2) if self.config.pe == "rope2d" else (b, n)
        if position_ids.dim() == len(want) - 1:
            position_ids = position_ids.expand(b, *position_ids.shape)
        if tuple(position_ids.shape) != want:
            raise ValueError(f"position_ids must have shape {list(want)} for pe={self.config.pe!r}, got {list(position_ids.shape)}")
        if n and int(position_ids.min()) < 0:
            raise ValueError("position_ids must be >= 0")
        if self.config.pe == "learned" and n and int(position_ids.max()) >= self.config.max_positions:
            raise ValueError(f"position id {int(position_ids.max())} >= max_positions {self.config.max_positions} of the "
                             f"learned position table; use smaller ids or a larger LabConfig(max_positions=...)")
        return position_ids


class LabForCausalLM(LabPreTrainedModel):
    """A lab decoder with its LM head: ``logits = lm_head(model(...).last_hidden_state)``.

    Shapes: ``input_ids`` ``[batch, pos]`` -> ``logits`` ``[batch, pos, vocab]``. ``labels`` (optional, ``[batch, pos]``,
    -100 = ignored) gives the next-token cross-entropy in ``loss``.
    """

    def __init__(self, config: LabConfig):
        super().__init__(config)
        self.model = LabModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                use_cache=None, **kwargs) -> CausalLMOutputWithPast:
        """``logits`` ``[batch, pos, vocab]`` (and ``loss`` with ``labels``); arguments as ``LabModel.forward``."""
        h = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                       inputs_embeds=inputs_embeds).last_hidden_state
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)


def register() -> None:
    """Make ``interp_lab`` models loadable by transformers' Auto classes and known to ``interp.models.arch``.

    Idempotent. Runs on ``import interp.lab``; ``interp.load_model("local:DIR")`` also triggers it through the
    package's ``interp.models`` entry point, so a saved lab model loads without importing the lab first.
    """
    try:
        AutoConfig.register(MODEL_TYPE, LabConfig)
        AutoModelForCausalLM.register(LabConfig, LabForCausalLM)
    except ValueError:  # already registered
        pass
    arch.register_family(arch.Family("Lab", (MODEL_TYPE,), notes="interp.lab decoder (RoPE, NoPE, ALiBi, learned, "
                                     "RoPE-ID, partial, 2D-RoPE)"))
