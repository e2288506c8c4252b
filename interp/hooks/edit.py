"""THE intervention layer: every change to a running model, as edits on named sites, restored exactly on exit.

``edit(model, *edits)`` is a context manager. Inside it, every forward of ``model.hf`` (any batch size, any
attention implementation, ``interp.scan`` and ``interp.capture`` included where they can honour the edit) has the
edits applied at their sites (``interp.hooks.sites``); on exit every hook is removed and the attention
implementation put back, so logits are bitwise what they were before (a test), also after an exception inside.

An ``Edit`` names a site and layer, an operation and a selection:

- operations: ``replace`` (with ``value``, broadcast to the selection), ``add``, ``zero``, ``mean`` (replace with
  a given mean, e.g. ``head_means``; the name says why), ``scale`` (multiply by ``value``), ``fn`` (``value(x, ctx)``
  returns the new selection; ``ctx`` is an ``EditContext`` with the layer's RoPE tables and the input ids) and
  ``record`` (read only: ``value`` is a dict that receives the selection under ``str(site)``, or a callable
  ``value(x, ctx)``; the tensor is not detached, so gradients flow to it);
- selection: ``rows`` (batch rows), ``positions`` (query positions for ``scores`` / ``pattern``) and ``heads``
  (the site's head axis: query heads, or kv heads for ``k_*`` / ``v``; with ``per_query_head=True`` a key or
  value edit names query heads and changes what those heads read only: GQA is ungrouped for them).

How each site is reached (all module look-ups come from the ``SiteMap``, found once per model):
residual, MLP, attention-output and head-output sites by forward (pre-)hooks on the decoder layer, MLP, attention
and output-projection modules; ``rope`` by a pre-hook on the attention module (its ``position_embeddings``);
``logits`` by a hook on the model; the sites inside attention (``q_pre`` ... ``pattern``) by one attention function
registered with transformers' ``AttentionInterface`` (``interp_edit``). It applies the query / key / value edits
to what attention receives, runs the model's own attention implementation, and recomputes explicitly (float32,
the model's scale, mask, window and soft-cap) only the heads that have ``scores``, ``pattern`` or per-query-head
key / value edits, in the batch rows those edits name: every other head's output is the model's own, bit for bit.

``start_at(model, layer)`` is the one structural edit: decoder layers before ``layer`` become pass-throughs, so
``model.hf(inputs_embeds=resid)`` with a cached ``resid_pre[layer]`` computes the rest of the model (how
``interp.experiments.effects`` and patching run many interventions of one layer without recomputing the layers
before it).

Raises (at ``edit``): ``ConfigError`` for an unknown site or operation, a layer or head outside the grid, a
selection on an axis the site does not have; ``UnsupportedModelError`` for attention sites on a family that builds
its own attention (GPT-J). At a forward: ``ConfigError`` for rows beyond the batch, or when a forward routes
attention around the interface while a ``scores`` / ``pattern`` / per-query-head edit is active (``interp.scan``
computes attention itself: query, key and value edits are applied for it, the others cannot be).
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

from interp.errors import ConfigError, UnsupportedModelError
from interp.hooks.sites import ATTENTION_SITES, HEAD_AXIS, KV_SITES, Site, SiteMap, parse_site, site_map
from interp.models.taps import attention_function
from interp.rope import rotate_tables, unrotate_tables

OPS = ("replace", "add", "zero", "mean", "scale", "fn", "record")
ATTN_NAME = "interp_edit"
_EXPLICIT_SITES = ("scores", "pattern")


@dataclass(frozen=True, eq=False)
class Edit:
    """One edit of one site (module docstring).

    Attributes:
        site: ``Site`` or ``"head_out[3]"`` / ``("head_out", 3)`` / ``"logits"``.
        op: one of ``OPS``.
        value: the replacement / addend / mean (a tensor broadcast to the selection, in the site's layout),
            the scale factor, the function ``(x, ctx) -> x`` (``fn``), or the store (``record``). At the ``rope``
            site the value is a whole ``(cos, sin)`` pair: ``fn`` is ``(cos, sin, ctx) -> (cos, sin)``, ``replace``
            takes the pair, ``record`` receives it; no selection.
        heads, positions, rows: the selection (None: all); ``rows`` may be a slice.
        per_query_head: a ``k_*`` / ``v`` edit whose ``heads`` are query heads (see the module docstring).
    """

    site: Any
    op: str = "replace"
    value: Any = None
    heads: Sequence[int] | None = None
    positions: Sequence[int] | None = None
    rows: Sequence[int] | slice | None = None
    per_query_head: bool = False


def replace(site, value, **sel) -> Edit:
    """An ``Edit`` that writes ``value`` into the selection of ``site``."""
    return Edit(site, "replace", value, **sel)


def zero(site, **sel) -> Edit:
    """An ``Edit`` that sets the selection of ``site`` to 0."""
    return Edit(site, "zero", None, **sel)


def add(site, value, **sel) -> Edit:
    """An ``Edit`` that adds ``value`` to the selection of ``site``."""
    return Edit(site, "add", value, **sel)


def scale(site, factor: float, **sel) -> Edit:
    """An ``Edit`` that multiplies the selection of ``site`` by ``factor``."""
    return Edit(site, "scale", factor, **sel)


def apply(site, fn: Callable, **sel) -> Edit:
    """An ``Edit`` that replaces the selection ``x`` of ``site`` by ``fn(x, ctx)`` (``EditContext``)."""
    return Edit(site, "fn", fn, **sel)


def record(site, store: dict | Callable, **sel) -> Edit:
    """An ``Edit`` that only reads: the selection of ``site`` goes to ``store[str(site)]`` or ``store(x, ctx)``."""
    return Edit(site, "record", store, **sel)


@dataclass
class EditContext:
    """What an ``fn`` / ``record`` edit sees beside the value.

    Attributes:
        site: the ``Site``. sites: the model's ``SiteMap``.
        cos, sin: ``[batch, pos, rot]`` RoPE tables of the layer in this forward (attention and ``rope`` sites;
            None elsewhere). position_ids: ``[batch, pos]`` where the forward passed them (``rope`` site).
        tokens: ``[batch, pos]`` input ids of this forward (None when it ran from ``inputs_embeds``).
        heads: the query heads an explicit recompute covers (``scores`` / ``pattern`` / per-query-head edits).
        tuple_output: at ``resid_post`` / ``attn_out`` / ``mlp_out``, whether the module returned a tuple (for
            ``start_at(as_tuple=...)``).
    """

    site: Site
    sites: SiteMap
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None
    tokens: torch.Tensor | None = None
    heads: tuple[int, ...] | None = None
    tuple_output: bool | None = None


# --------------------------------------------------------------------------------------------
# applying one edit to a tensor
# --------------------------------------------------------------------------------------------


def _index(values, n: int, what: str) -> torch.Tensor:
    if values is None:
        return torch.arange(n)
    if isinstance(values, slice):
        return torch.arange(n)[values]
    t = torch.as_tensor(list(values) if not isinstance(values, torch.Tensor) else values, dtype=torch.long).flatten()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
        raise ConfigError(f"{what} {t.tolist()} outside 0..{n - 1} (this forward has {n})")
    return t


def _deliver(e: Edit, x, ctx: EditContext) -> None:
    """Hand a ``record`` edit its value: ``store(x, ctx)`` or ``store[str(site)] = x``."""
    e.value(x, ctx) if callable(e.value) else e.value.__setitem__(str(ctx.site), x)


def _apply(e: Edit, x: torch.Tensor, ctx: EditContext, *, rows=None, heads=None) -> torch.Tensor:
    """``x`` (the site's layout) with ``e`` applied to its selection; a new tensor unless ``e`` only records.

    ``rows`` / ``heads`` override the edit's own selection (already mapped into ``x``'s axes, e.g. one recomputed
    head); the leading axes ``batch, (pos | head), (head | q_pos)`` are indexed together, the rest kept whole.
    """
    name = ctx.site.name
    if e.op == "record" and rows is None and heads is None and e.rows is None and e.heads is None and e.positions is None:
        _deliver(e, x, ctx)  # the tensor itself, so gradients reach it (``detach=False`` records)
        return x
    hax = HEAD_AXIS.get(name)
    pax = 2 if name in _EXPLICIT_SITES else 1
    r = rows if rows is not None else _index(e.rows, x.shape[0], f"rows of {ctx.site}")
    axes = {0: r.to(x.device)}
    if e.positions is not None:
        axes[pax] = _index(e.positions, x.shape[pax], f"positions of {ctx.site}").to(x.device)
    if hax is not None:
        h = heads if heads is not None else (None if e.heads is None else _index(e.heads, x.shape[hax], f"heads of {ctx.site}"))
        if h is not None:
            axes[hax] = h.to(x.device)
    last = max(axes)
    idx = []
    for a in range(last + 1):
        t = axes.get(a, torch.arange(x.shape[a], device=x.device))
        idx.append(t.view([-1] + [1] * (last - a)))
    idx = tuple(idx)
    sel = x[idx]
    if e.op == "record":
        _deliver(e, sel, ctx)
        return x
    if e.op == "zero":
        new = torch.zeros_like(sel)
    elif e.op in ("replace", "mean"):
        new = torch.as_tensor(e.value).to(x.device, x.dtype).expand_as(sel)
    elif e.op == "add":
        new = sel + torch.as_tensor(e.value).to(x.device, x.dtype)
    elif e.op == "scale":
        new = sel * e.value
    else:
        new = e.value(sel, ctx)
    out = x.clone()
    out[idx] = new.to(x.dtype)
    return out


def _apply_all(edits: Sequence[Edit], x: torch.Tensor, ctx: EditContext) -> torch.Tensor:
    for e in edits:
        x = _apply(e, x, ctx)
    return x


# --------------------------------------------------------------------------------------------
# the registered attention function
# --------------------------------------------------------------------------------------------


@dataclass
class _LayerState:
    """The attention-site edits of one attention module, while some ``edit`` block holds them."""

    sites: SiteMap
    layer: int
    edits: list[Edit] = field(default_factory=list)
    delegate: Callable | None = None
    tables: tuple[torch.Tensor, torch.Tensor] | None = None
    tokens: torch.Tensor | None = None


_STATE: dict[int, _LayerState] = {}  # id(attention module) -> its state
_TOKENS: dict[int, torch.Tensor | None] = {}  # id(hf model) -> input ids of the forward in flight


def _ctx(st: _LayerState, name: str, heads=None) -> EditContext:
    cos, sin = st.tables if st.tables is not None else (None, None)
    return EditContext(Site(name, st.layer), st.sites, cos, sin, None, _TOKENS.get(id(st.sites.model)), heads)


def _by_site(edits: Sequence[Edit], name: str, per_query: bool | None = None) -> list[Edit]:
    return [e for e in edits if _site(e).name == name and (per_query is None or e.per_query_head == per_query)]


def _site(e: Edit) -> Site:
    return e.site if isinstance(e.site, Site) else parse_site(e.site)


def _unrotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str) -> torch.Tensor:
    """``unrotate_tables``, or where gradients are wanted its differentiable form: RoPE with ``-sin`` gives
    ``x (cos^2 + sin^2)`` on the rotating channels, divided out."""
    if not (torch.is_grad_enabled() and x.requires_grad):
        return unrotate_tables(x, cos, sin, pairing)
    r = cos.shape[-1]
    y = rotate_tables(x, cos, -sin, pairing)
    den = torch.ones(x.shape[0], 1, x.shape[-1], dtype=y.dtype, device=y.device)
    den[..., :r] = (cos * cos + sin * sin).to(y.dtype)[:, None, :]
    return y / den


def _pre_edit(edits: list[Edit], x: torch.Tensor, ctx: EditContext) -> torch.Tensor:
    """``x`` ``[batch, pos, head, d]`` post-RoPE with edits of its pre-RoPE vectors: undone with the layer's tables,
    edited, rotated back; only the vectors an edit changed are replaced (the others stay bit-identical)."""
    cos, sin = ctx.cos, ctx.sin
    pairing = ctx.sites.pairing
    pre = torch.stack([_unrotate(x[b], cos[min(b, cos.shape[0] - 1)], sin[min(b, sin.shape[0] - 1)], pairing)
                       for b in range(x.shape[0])])
    new = _apply_all(edits, pre, ctx)
    changed = (new != pre).any(-1, keepdim=True)
    if not bool(changed.any()):
        return x
    rot = torch.stack([rotate_tables(new[b], cos[min(b, cos.shape[0] - 1)], sin[min(b, sin.shape[0] - 1)], pairing)
                       for b in range(x.shape[0])])
    return torch.where(changed, rot.to(x.dtype), x)


def _prepare(st: _LayerState, query, key, value):
    """Apply the layer's query / key / value edits (not per query head) to what attention receives.

    ``query`` ``[batch, head, pos, d]``, ``key`` / ``value`` ``[batch, kv_head, pos, d]`` (HF layout); returns the three.
    """
    for name, pre_name, t_index in (("q_rot", "q_pre", 0), ("k_rot", "k_pre", 1), ("v", None, 2)):
        pre_edits = _by_site(st.edits, pre_name, False) if pre_name else []
        rot_edits = _by_site(st.edits, name, False)
        if not pre_edits and not rot_edits:
            continue
        t = (query, key, value)[t_index].transpose(1, 2)  # [batch, pos, head, d]
        if pre_edits:
            t = _pre_edit(pre_edits, t, _ctx(st, pre_name))
        t = _apply_all(rot_edits, t, _ctx(st, name)).transpose(1, 2)
        query, key, value = (t if i == t_index else x for i, x in enumerate((query, key, value)))
    return query, key, value


def _explicit(st: _LayerState) -> list[Edit]:
    return [e for e in st.edits if _site(e).name in _EXPLICIT_SITES or e.per_query_head]


def _rows_of(e: Edit, batch: int) -> torch.Tensor:
    return _index(e.rows, batch, f"rows of {_site(e)}")


def visible(mask: torch.Tensor | None, n_q: int, n_k: int, window: int | None, device) -> torch.Tensor:
    """``[batch or 1, q_pos, k_pos]`` bool: which keys each query may see in the model itself (its mask, else causal;
    and the sliding window: key j visible from i iff ``i - j < window``). The last query is the last key."""
    i = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)
    j = torch.arange(n_k, device=device)[None, :]
    if mask is not None and mask.dim() == 4:
        m = mask[:, 0, :, :n_k]
        vis = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
    else:
        vis = (j <= i)[None]
    if window is not None:
        vis = vis & ((i - j) < int(window))[None]
    return vis


def _recompute(st: _LayerState, module, query, key, value, attention_mask, scaling, sliding_window, softcap, out, w):
    """Recompute, in float32, the heads that ``scores`` / ``pattern`` / per-query-head edits touch, in their rows."""
    edits = _explicit(st)
    B, H, n_q, _ = query.shape
    n_k = key.shape[2]
    heads: dict[int, list[Edit]] = {}
    for e in edits:
        for h in _index(e.heads, H, f"heads of {_site(e)}").tolist():
            heads.setdefault(h, []).append(e)
    scale_ = float(scaling if scaling is not None else module.scaling)
    vis_all = visible(attention_mask, n_q, n_k, sliding_window, query.device)
    out = out.clone()
    one = torch.zeros(1, dtype=torch.long)
    pieces: dict[int, list[torch.Tensor]] = {}  # record edits of scores / pattern: one [rows, 1, q, k] per head
    for h, es in heads.items():
        rows = torch.unique(torch.cat([_rows_of(e, B) for e in es]))
        local = {id(e): torch.searchsorted(rows, _rows_of(e, B)) for e in es}
        kv = st.sites.kv_head(h)
        ri = rows.to(query.device)
        q = query[ri, h].float()[:, :, None]  # [rows, pos, 1, d]
        k = key[ri, kv].float()[:, :, None]
        v = value[ri, kv].float()[:, :, None]
        ctx_heads = (h,)
        for name, t in (("k_pre", "k"), ("k_rot", "k"), ("v", "v")):
            for e in _by_site(es, name, True):
                c = _ctx(st, name, ctx_heads)
                if name == "k_pre":
                    cos, sin = c.cos[ri.clamp(max=c.cos.shape[0] - 1)], c.sin[ri.clamp(max=c.sin.shape[0] - 1)]
                    c.cos, c.sin = cos, sin
                    k = _pre_edit([dataclasses.replace(e, rows=local[id(e)], heads=[0], per_query_head=False)], k, c)
                elif name == "k_rot":
                    k = _apply(e, k, c, rows=local[id(e)], heads=one)
                else:
                    v = _apply(e, v, c, rows=local[id(e)], heads=one)
        logits = torch.matmul(q[:, :, 0], k[:, :, 0].transpose(-1, -2)) * scale_
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        vis = vis_all[ri] if vis_all.shape[0] > 1 else vis_all
        logits = logits.masked_fill(~vis, float("-inf"))[:, None]  # [rows, 1, q, k]
        for e in _by_site(es, "scores"):
            logits = _apply(_collecting(e, pieces), logits, _ctx(st, "scores", ctx_heads), rows=local[id(e)], heads=one)
        p = torch.softmax(logits, dim=-1)
        for e in _by_site(es, "pattern"):
            p = _apply(_collecting(e, pieces), p, _ctx(st, "pattern", ctx_heads), rows=local[id(e)], heads=one)
        if all(e.op == "record" for e in es):
            continue  # read only: the model's own output stands
        out[ri, :, h] = torch.matmul(p[:, 0], v[:, :, 0]).to(out.dtype)
        if w is not None:
            w[ri, h] = p[:, 0].to(w.dtype)
    for e in edits:  # each record edit of scores / pattern receives its heads together: [rows, head, q_pos, k_pos]
        if id(e) in pieces:
            x = torch.cat(pieces[id(e)], dim=1)
            c = _ctx(st, _site(e).name, tuple(_index(e.heads, H, "heads").tolist()))
            _deliver(e, x, c)
    return out, w


def _collecting(e: Edit, pieces: dict) -> Edit:
    """``e``, or for a record edit one that appends its per-head piece to ``pieces[id(e)]`` (heads in order)."""
    if e.op != "record":
        return e
    return dataclasses.replace(e, value=lambda x, _c: pieces.setdefault(id(e), []).append(x))


def _inner(module) -> Callable:
    """The attention function the model ran before the outermost edit block (sdpa outside any block)."""
    st = _STATE.get(id(module))
    return st.delegate if st is not None and st.delegate is not None else sdpa_attention_forward


def _edit_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                    softcap=None, **kw):
    """Registered as ``interp_edit``: the layer's query / key / value edits, its own attention, explicit heads.

    ``query`` ``[batch, head, q_pos, d_head]``, ``key`` / ``value`` ``[batch, kv_head, k_pos, d_head]`` (post-RoPE);
    returns ``(out [batch, q_pos, head, d_head], weights [batch, head, q_pos, k_pos] | None)``.
    """
    return run_edited(_inner(module), module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                      sliding_window=sliding_window, softcap=softcap, **kw)


def run_edited(delegate: Callable, module, query, key, value, attention_mask, scaling=None, dropout=0.0,
               sliding_window=None, softcap=None, **kw):
    """One attention layer with its edits over ``delegate`` (an attention function of transformers' interface):
    query / key / value edits, ``delegate``'s attention, explicit heads recomputed. Shapes as ``_edit_attention``."""
    st = _STATE.get(id(module))
    if st is None or not st.edits:
        return delegate(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                        sliding_window=sliding_window, softcap=softcap, **kw)
    query, key, value = _prepare(st, query, key, value)
    out, w = delegate(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                      sliding_window=sliding_window, softcap=softcap, **kw)
    if _explicit(st):
        out, w = _recompute(st, module, query, key, value, attention_mask, scaling, sliding_window, softcap, out, w)
    return out, w


def _prepare_inputs(module, query, key, value):
    """For ``interp.models.taps``: this layer's query / key / value edits applied to what a tap receives (HF layout)."""
    st = _STATE.get(id(module))
    if st is None or not st.edits:
        return query, key, value
    return _prepare(st, query, key, value)


def _check_tapped(module) -> None:
    """For ``interp.models.taps``, after a tap computed a layer's attention itself.

    Raises:
        ConfigError: the layer has ``scores`` / ``pattern`` / per-query-head edits, which that tap did not honour.
    """
    st = _STATE.get(id(module))
    if st is not None and _explicit(st):
        names = sorted({str(_site(e)) for e in _explicit(st)})
        raise ConfigError(f"edits of {', '.join(names)} did not run: this forward computes attention itself (interp.scan, "
                          f"capture(patterns=True)); run the model directly inside the block, or edit q / k / v / head_out")


_edit_attention.prepare_inputs = _prepare_inputs  # read by interp.models.taps (which must not import this layer)
_edit_attention.check_tapped = _check_tapped
_edit_attention.run_edited = run_edited
_edit_attention.inner = _inner
AttentionInterface.register(ATTN_NAME, _edit_attention)
AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


# --------------------------------------------------------------------------------------------
# module hooks
# --------------------------------------------------------------------------------------------


def _first_arg(args, kwargs, key: str):
    return args[0] if args else kwargs[key]


def _with_first(args, kwargs, key: str, x):
    if args:
        return (x,) + tuple(args[1:]), kwargs
    return args, {**kwargs, key: x}


def _swap_out(out, x):
    """A module output with its first tensor replaced by ``x`` (tuples, ModelOutputs with ``logits``, tensors)."""
    if isinstance(out, tuple):
        return (x,) + tuple(out[1:])
    return x


def _hooks(sm: SiteMap, site: Site, edits: list[Edit]) -> list:
    """Register the hooks that apply ``edits`` (all of ``site``); returns their handles."""
    name, l = site.name, site.layer
    ctx = lambda: EditContext(site, sm, tokens=_TOKENS.get(id(sm.model)))  # noqa: E731

    if name == "resid_pre":
        def pre(_m, args, kwargs):
            return _with_first(args, kwargs, "hidden_states", _apply_all(edits, _first_arg(args, kwargs, "hidden_states"), ctx()))
        return [sm.layers[l].register_forward_pre_hook(pre, with_kwargs=True)]
    if name == "head_out":
        def pre(_m, args, kwargs):
            x = _first_arg(args, kwargs, "input")
            xv = x.view(*x.shape[:-1], sm.n_heads, sm.head_width)  # [batch, pos, head, d_head]
            return _with_first(args, kwargs, "input", _apply_all(edits, xv, ctx()).flatten(-2))
        return [sm.out_proj[l].register_forward_pre_hook(pre, with_kwargs=True)]
    if name in ("resid_post", "attn_out", "mlp_out"):
        mod = {"resid_post": sm.layers, "attn_out": sm.attention, "mlp_out": sm.mlp}[name][l]
        if mod is None:
            raise UnsupportedModelError(f"layer {l} has no MLP module to hook (looked for mlp / feed_forward / ffn)")

        def post(_m, _args, out):
            x = out[0] if isinstance(out, tuple) else out
            c = ctx()
            c.tuple_output = isinstance(out, tuple)
            return _swap_out(out, _apply_all(edits, x, c))
        return [mod.register_forward_hook(post)]
    if name == "logits":
        def post(_m, _args, out):
            out.logits = _apply_all(edits, out.logits, ctx())
            return out
        return [sm.model.register_forward_hook(post)]
    raise AssertionError(name)  # attention sites and rope are installed by edit()


def _table_hook(sm: SiteMap, layer: int, rope_edits: list[Edit]):
    """Pre-hook of an attention module: apply ``rope`` edits to its ``position_embeddings``, keep the tables."""
    def hook(module, args, kwargs):
        if "position_embeddings" not in kwargs:
            return None
        cos, sin = kwargs["position_embeddings"]
        ctx = EditContext(Site("rope", layer), sm, cos, sin, kwargs.get("position_ids"), _TOKENS.get(id(sm.model)))
        for e in rope_edits:
            if e.op == "record":
                _deliver(e, (cos, sin), ctx)
                continue
            if e.op not in ("fn", "replace"):
                raise ConfigError(f"site rope takes fn, replace or record edits, got {e.op!r}")
            cos, sin = e.value(cos, sin, ctx) if e.op == "fn" else e.value
            ctx.cos, ctx.sin = cos, sin
        st = _STATE.get(id(module))
        if st is not None:
            st.tables = (cos, sin)
        if rope_edits:
            return args, {**kwargs, "position_embeddings": (cos, sin)}
        return None
    return hook


# --------------------------------------------------------------------------------------------
# the context manager
# --------------------------------------------------------------------------------------------


def _check(sm: SiteMap, e: Edit) -> Site:
    if not isinstance(e, Edit):
        raise ConfigError(f"edit() takes Edit objects (interp.hooks.edit.replace / zero / ...), got {type(e).__name__}")
    site = parse_site(e.site, sm.n_layers)
    if e.op not in OPS:
        raise ConfigError(f"unknown edit operation {e.op!r}; use one of {', '.join(OPS)}")
    if e.op in ("replace", "add", "mean", "scale", "fn", "record") and e.value is None:
        raise ConfigError(f"edit {e.op!r} of {site} needs a value")
    hax = HEAD_AXIS.get(site.name)
    if e.heads is not None:
        if hax is None:
            raise ConfigError(f"site {site.name} has no head axis; drop heads= (heads live at q_*, k_*, v, scores, "
                              f"pattern, head_out)")
        n = sm.n_heads if e.per_query_head else sm.n_axis(site.name)
        _index(e.heads, n, f"heads of {site}")
    if e.per_query_head and site.name not in KV_SITES:
        raise ConfigError(f"per_query_head applies to k_pre, k_rot and v edits, not {site.name}")
    if (site.name in ATTENTION_SITES or site.name == "rope") and not sm.interface:
        raise UnsupportedModelError(f"site {site.name} is read inside transformers' AttentionInterface, and this family "
                                    f"builds its own attention (GPT-J); edit head_out, attn_out or the residual stream")
    return site


@contextmanager
def edit(model, *edits: Edit) -> Iterator[SiteMap]:
    """Run ``model`` (a ``LoadedModel`` or HF causal LM) with ``edits`` applied inside the ``with`` block.

    Yields the model's ``SiteMap``. Blocks nest: an inner block's edits apply after the outer block's at the
    same site. On exit (normal or by an exception) every hook is removed and the attention implementation restored:
    logits are bitwise equal to those before the block.

    Raises:
        ConfigError, UnsupportedModelError: see the module docstring (checked before anything is installed).
    """
    sm = site_map(model)
    hf = sm.model
    # sites parsed once here: the forwards read e.site as a Site (no parsing on the hot path)
    checked = [(dataclasses.replace(e, site=s), s) for e in edits for s in [_check(sm, e)]]
    groups: dict[Site, list[Edit]] = {}
    for e, s in checked:
        groups.setdefault(s, []).append(e)
    attn_layers = sorted({s.layer for s in groups if s.name in ATTENTION_SITES})
    rope_layers = sorted({s.layer for s in groups if s.name == "rope"})
    table_layers = sorted(set(attn_layers) | set(rope_layers))
    with ExitStack() as stack:
        handles: list = []
        stack.callback(lambda: [h.remove() for h in handles])
        outer_ids = id(hf) in _TOKENS
        if not outer_ids:
            def keep_ids(_m, args, kwargs):
                ids = args[0] if args else kwargs.get("input_ids")
                _TOKENS[id(hf)] = ids if isinstance(ids, torch.Tensor) else None
            # on the decoder body, which every forward passes through (hf(...) hands it input_ids as a keyword), so
            # a caller that runs hf.base_model(...) alone (e.g. for its hidden states) gets the tokens too
            handles.append(hf.base_model.register_forward_pre_hook(keep_ids, with_kwargs=True))
            _TOKENS[id(hf)] = None
            stack.callback(lambda: _TOKENS.pop(id(hf), None))
        if attn_layers:
            previous = hf.config._attn_implementation or "sdpa"
            if previous != ATTN_NAME:
                saved = {id(m): _STATE.get(id(m)) for m in sm.attention}
                for l, m in enumerate(sm.attention):
                    _STATE[id(m)] = _LayerState(sm, l, [], attention_function(m, previous))
                AttentionMaskInterface.register(ATTN_NAME, ALL_MASK_ATTENTION_FUNCTIONS[previous]
                                                if previous in ALL_MASK_ATTENTION_FUNCTIONS else sdpa_mask)
                hf.set_attn_implementation(ATTN_NAME)

                def restore():
                    hf.set_attn_implementation(previous)
                    for m in sm.attention:
                        if saved[id(m)] is None:
                            _STATE.pop(id(m), None)
                        else:
                            _STATE[id(m)] = saved[id(m)]
                stack.callback(restore)
            for l in attn_layers:
                st = _STATE[id(sm.attention[l])]
                mine = [e for s, es in groups.items() if s.name in ATTENTION_SITES and s.layer == l for e in es]
                st.edits.extend(mine)
                stack.callback(lambda st=st, mine=mine: st.edits.__setitem__(
                    slice(None), [x for x in st.edits if not any(x is y for y in mine)]))
        for l in table_layers:
            rope = groups.get(Site("rope", l), [])
            handles.append(sm.attention[l].register_forward_pre_hook(_table_hook(sm, l, rope), with_kwargs=True))
        for s, es in groups.items():
            if s.name not in ATTENTION_SITES and s.name != "rope":
                handles.extend(_hooks(sm, s, es))
        yield sm


# --------------------------------------------------------------------------------------------
# running from a layer
# --------------------------------------------------------------------------------------------


class _PassThrough(torch.nn.Module):
    """A decoder layer that returns its input hidden states (as a one-tuple where the model's layer returns a tuple)."""

    def __init__(self, as_tuple: bool):
        super().__init__()
        self.as_tuple = as_tuple

    def forward(self, hidden_states, *args, **kwargs):
        return (hidden_states,) if self.as_tuple else hidden_states


@contextmanager
def start_at(model, layer: int, as_tuple: bool = False) -> Iterator[None]:
    """Inside the block, decoder layers ``0..layer-1`` are pass-throughs: ``model.hf(inputs_embeds=x)`` with ``x`` the
    residual stream ``resid_pre[layer]`` (``[batch, pos, d_model]``) computes layers ``layer..L-1``, the final norm
    and the LM head (masks, RoPE tables and soft-caps by the model's own forward). ``as_tuple``: the model's layers
    return tuples (GPT-J). The layers are put back on exit.

    Raises:
        ConfigError: ``layer`` outside ``0..n_layers``.
    """
    sm = site_map(model)
    if not 0 <= layer <= sm.n_layers:
        raise ConfigError(f"start_at: layer {layer} outside 0..{sm.n_layers}")
    hf = sm.model
    base = getattr(hf, "base_model", hf)
    layers = next(getattr(base, a) for a in ("layers", "h") if isinstance(getattr(base, a, None), torch.nn.ModuleList))
    saved = [layers[i] for i in range(layer)]
    try:
        for i in range(layer):
            layers[i] = _PassThrough(as_tuple)
        yield
    finally:
        for i, m in enumerate(saved):
            layers[i] = m


def cache(model, sites: Sequence, *, detach: bool = True) -> "_Cache":
    """A context manager that records ``sites`` (names like ``"head_out[3]"``) of every forward inside it.

    ``with cache(model, ["resid_pre[0]", "head_out[2]"]) as c: model.hf(ids)`` then ``c["head_out[2]"]`` is
    ``[batch, pos, head, d_head]`` (the last forward's; ``detach=False`` keeps the autograd graph).

    Raises:
        ConfigError: an unknown site or a layer outside the grid.
    """
    return _Cache(model, sites, detach)


class _Cache(dict):
    def __init__(self, model, sites, detach):
        super().__init__()
        sm = site_map(model)
        self._model, self._detach = model, detach
        self._sites = [parse_site(s, sm.n_layers) for s in sites]
        self._stack: ExitStack | None = None

    def _keep(self, site: Site):
        def fn(x, _ctx):
            if self._detach:
                x = tuple(t.detach() for t in x) if isinstance(x, tuple) else x.detach()
            self[str(site)] = x
        return fn

    def __enter__(self) -> "_Cache":
        self._stack = ExitStack()
        self._stack.enter_context(edit(self._model, *(record(s, self._keep(s)) for s in self._sites)))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
