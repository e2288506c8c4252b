"""Token-level attention viewer: one prompt, any (layer, head), drawn on the prompt's own tokens.

``attention_view(model, text)`` returns an ``AttentionView`` that renders inline in Jupyter
(``_repr_html_``: plain HTML + one script, no widget server, no internet) and saves a standalone HTML
file (``.save(path)``). The page shows

- the prompt's tokens as text: hover a token (click to pin it) and the tokens *before* it turn blue by
  where it looks (its attention row ``A[i, j]``, ``j <= i``) and the tokens *after* it turn orange by
  what looks at it (its column ``A[j, i]``, ``j >= i``); row and column never overlap except on the
  token itself (outlined), so both show at once;
- a heatmap of the window (rows: queries, columns: keys) with token labels when the cells are large
  enough, a hover read-out of every cell, and thumbnails of every shown head of the layer (click one
  to select it);
- a (layer, head) selector;
- a toggle between the attention ``A[i, j]`` and the **value-weighted attention** (the legend above the tokens says
  which is shown)

      Aw[i, j] = A[i, j] ||v_j|| / sum_k A[i, k] ||v_k||,

  ``v_j`` the value vector of key ``j`` in the head's kv head (``interp.capture``'s ``v``, ``[pos, kv_head, d_head]``;
  with GQA / MQA every query head of a group weighs by the same values), renormalised so each query's row sums to 1
  over all its visible keys. Kobayashi et al. 2020, "Attention is not only a weight: analyzing transformers with
  vector norms" (EMNLP), Sec. 3 (norm-based analysis), measure what key ``j`` contributes to query ``i`` as
  ``||A[i, j] f(x_j)||`` rather than ``A[i, j]`` alone (a sink's small value vector makes its large weight contribute
  little). Their ``f(x_j) = (x_j W_V + b_V) W_O`` includes the head's slice of the output projection ``W_O``; here it
  is left out (``||v_j||``, the value norm, as asked for in AttentionViz #31 and by inseq users), and the rows are
  renormalised (interp's choice, so both views read as distributions over keys).

The attention values are the model's own probabilities, recomputed exactly from the captured post-RoPE
queries and keys (``interp.capture``) with the model's scale, causal and sliding-window masks, logit
soft-cap and GQA/MQA mapping: the arithmetic of ``interp.capture.recompute_pattern`` (which
``interp.verify_attention`` holds to the model's eager attention), restricted to the rows of the window
so an 8k-token prompt never materialises an 8k x 8k matrix (the tests hold the two to 1e-6).

Window: only queries *and* keys at positions ``[start, end)`` (``end = min(start + window, n_tokens)``)
are embedded. Each query's probabilities are normalised over all its visible keys, including those
before ``start``; the mass on those keys is embedded separately (``before``) and shown in the read-out.

Embedded data (one ``<script type="application/json" class="interp-av-data">`` island; ``<``, ``>``,
``&`` and U+2028/9 are written as ``\\uXXXX`` escapes, so no token text can close the script):

- ``values``: base64 of the lower triangles of every shown head's ``[W, W]`` window block (``W = end - start``),
  quantised as ``round(p * S)`` with ``S = 255`` (``dtype`` ``"uint8"``, absolute error <= 1/510) or
  ``S = 65535`` (``"uint16"``, little-endian, error <= 1/131070). Order: layer (as in ``layers``), then
  head (as in ``heads``), then query row ``r = 0..W-1``, then key column ``c = 0..r``; head block
  ``b = li * len(heads) + hi`` starts at element ``b * W (W + 1) / 2``, row ``r`` at ``r (r + 1) / 2``
  inside it. ``p = value / S`` is ``A[start + r, start + c]``; entries above the diagonal are 0.
- ``before``: base64, same dtype and scale, ``[layer, head, W]``: attention of each query on keys ``< start``.
- ``values_v``, ``before_v`` (present when ``value_weighted`` is true): the same two arrays for the value-weighted
  attention ``Aw`` (same layout, dtype and scale).
- ``labels``: display text of the window's tokens (``\\n``, ``\\r``, ``\\t`` written as those two
  characters); ``token_ids``; ``layers``, ``heads``, ``kv_heads``; ``start``, ``end``, ``n_tokens``.

``decode_values`` is the reference decoder (the tests decode the page independently from this description).
``value_weighted_attention`` is the reference arithmetic of ``Aw`` from a full pattern and the values.
"""

from __future__ import annotations

import base64
import html
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from interp.attention import _grouped, _logits, _visible
from interp.hooks.capture import Capture, as_tokens, capture
from interp.errors import ConfigError
from interp.report import html as html_kit
from interp.models import LoadedModel

__all__ = ["AttentionView", "attention_view", "decode_values", "value_weighted_attention", "view_command_main", "MAX_VALUES"]

MAX_VALUES = 8_000_000  # embedded probabilities per page by default: about 10.7 MB of base64 as uint8
_SCALE = {"uint8": 255, "uint16": 65535}
_WS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def display_token(text: str) -> str:
    """How a token's text is shown: as is (spaces kept), with ``\\n``, ``\\r``, ``\\t`` as two visible characters."""
    return "".join(_WS.get(ch, ch) for ch in text)


def _json_for_script(obj) -> str:
    """Compact JSON safe inside any ``<script>`` element (``interp.report.html.script_json``)."""
    return html_kit.script_json(obj, ensure_ascii=False, separators=(",", ":"))


def _indices(sel, n: int, what: str, model_name: str) -> list[int]:
    """Validated, de-duplicated indices (order kept) from None (all), an int or a sequence of ints."""
    if sel is None:
        return list(range(n))
    items = [sel] if isinstance(sel, (int, np.integer)) else list(sel)
    if not items:
        raise ConfigError(f"{what}s: pass at least one {what} index (or None for all {n})")
    out: list[int] = []
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= int(x) < n:
            raise ConfigError(f"{what} {x!r} is out of range: {model_name} has {what}s 0..{n - 1}")
        if int(x) not in out:
            out.append(int(x))
    return out


def parse_index_spec(spec: str | Sequence[int] | None, what: str = "layer", count: int | None = None,
                     model_name: str = "the model") -> list[int] | None:
    """``"0,2,5-7"`` -> ``[0, 2, 5, 6, 7]``; ``None`` / ``"all"`` -> None (all); a sequence passes through.

    ``count``: the model's number of layers (heads); every index and range end must lie in ``0..count-1``, checked
    before a range is expanded (``0-1000000000`` is refused, not listed).

    Raises:
        ConfigError: text that is not comma-separated integers or ``a-b`` ranges with ``a <= b``, nothing selected, or
            an index outside ``0..count-1``.
    """
    if spec is None or (isinstance(spec, str) and spec.strip() in ("", "all")):
        return None
    if not isinstance(spec, str):
        return [int(x) for x in spec]
    syntax = f"--{what}s takes comma-separated integers or ranges A-B with A <= B (e.g. 0,2,5-7) or 'all', got {spec!r}"
    bounds = []
    try:
        for part in (p.strip() for p in spec.split(",")):
            if part:
                a, sep, b = part.partition("-")
                bounds.append((int(a), int(b) if sep else int(a)))
    except ValueError:
        raise ConfigError(syntax) from None
    if not bounds or any(a > b for a, b in bounds):
        raise ConfigError(syntax)
    if count is not None and (bad := next((x for ab in bounds for x in ab if not 0 <= x < count), None)) is not None:
        raise ConfigError(f"--{what}s: {what} {bad} is out of range: {model_name} has {what}s 0..{count - 1}")
    return [i for a, b in bounds for i in range(a, b + 1)]


def value_weighted_attention(probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Value-weighted attention ``Aw[h, i, j] = A[h, i, j] ||v_j|| / sum_k A[h, i, k] ||v_k||`` (Kobayashi et al. 2020,
    Sec. 3, with ``||v_j||`` for ``||f(x_j)||`` and rows renormalised; module docstring).

    Args:
        probs: ``[head, q_pos, k_pos]`` attention rows (any rows; keys ``0..k_pos-1``).
        v: ``[k_pos, kv_head, d_head]`` the layer's values; query head ``h`` reads kv head ``h // (head / kv_head)``.

    Returns:
        ``[head, q_pos, k_pos]``, each row summing to 1 (a row whose visible keys all have ``v = 0`` is all 0).

    Raises:
        ShapeError: ``probs`` and ``v`` disagree on the keys, or heads are not a multiple of kv heads.
    """
    from interp.errors import ShapeError

    H, n_kv = probs.shape[0], v.shape[1]
    if v.shape[0] != probs.shape[-1] or H % n_kv:
        raise ShapeError(f"value_weighted_attention: probs {tuple(probs.shape)} and v {tuple(v.shape)} do not match "
                         "([head, q_pos, k_pos] and [k_pos, kv_head, d_head], head a multiple of kv_head)")
    norm = v.double().norm(dim=-1).T.repeat_interleave(H // n_kv, 0)  # [head, k_pos]
    w = probs.double() * norm[:, None, :].to(probs.device)
    return (w / w.sum(-1, keepdim=True).clamp(min=1e-300)).to(probs.dtype)


def _window_rows(model: LoadedModel, cap: Capture, layer: int, start: int,
                 value_weighted: bool = False) -> tuple[torch.Tensor, ...]:
    """Exact attention of queries ``start..end-1`` of ``layer`` (``end`` = captured length).

    The arithmetic of ``interp.capture.recompute_pattern`` (same logits, scale, soft-cap, causal and
    sliding-window mask and GQA grouping, from ``interp.attention``) on the window's rows only:
    ``[head, W, end]`` logits instead of ``[head, end, end]``.

    Returns:
        ``[head, W, W]`` probabilities on the window's keys and ``[head, W]`` mass on keys ``< start``; with
        ``value_weighted`` also the same two for the value-weighted attention (``value_weighted_attention``,
        normalised over all ``end`` keys).
    """
    c = model.card
    q = cap.q_rot[layer][start:]
    k = cap.k_rot[layer]
    end, H, n_kv = k.shape[0], q.shape[1], k.shape[1]
    W = end - start
    s = _logits(_grouped(q, n_kv), k.permute(1, 2, 0), c.attn_scale[layer], c.softcap).reshape(H, W, end)
    pos = torch.arange(end, device=q.device)
    s = s.masked_fill(~_visible(pos[start:], pos, c.sliding_window[layer]), float("-inf"))
    p = torch.softmax(s, dim=-1)
    if not value_weighted:
        return p[:, :, start:], p[:, :, :start].sum(-1)
    pw = value_weighted_attention(p, cap.v[layer][:end])
    return p[:, :, start:], p[:, :, :start].sum(-1), pw[:, :, start:], pw[:, :, :start].sum(-1)


def _encode(x: np.ndarray, dtype: str) -> str:
    """Probabilities in [0, 1] -> base64 of ``round(x * S)`` as little-endian uint8 / uint16."""
    S = _SCALE[dtype]
    q = np.round(np.clip(x, 0.0, 1.0) * S).astype("u1" if dtype == "uint8" else "<u2")
    return base64.b64encode(q.tobytes()).decode("ascii")


def decode_values(data: dict, value_weighted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Decode a page's data island (``AttentionView.payload()`` or the JSON in the HTML); with ``value_weighted`` its
    value-weighted attention (``values_v``, ``before_v``).

    Returns:
        ``probs`` ``[layer, head, W, W]`` float64 (rows: queries ``start + r``, columns: keys ``start + c``;
        0 above the diagonal) and ``before`` ``[layer, head, W]`` (mass on keys ``< start``); axes follow
        ``data["layers"]`` and ``data["heads"]``. Absolute error of quantisation: ``0.5 / S`` (module docstring).

    Raises:
        ValueError: the arrays do not hold the size the island declares; KeyError: no value-weighted arrays.
    """
    vkey, bkey = ("values_v", "before_v") if value_weighted else ("values", "before")
    S = _SCALE[data["dtype"]]
    dt = "u1" if data["dtype"] == "uint8" else "<u2"
    nl, nh, W = len(data["layers"]), len(data["heads"]), data["end"] - data["start"]
    tri = np.frombuffer(base64.b64decode(data[vkey]), dtype=dt).astype(np.float64) / S
    T = W * (W + 1) // 2
    if tri.size != nl * nh * T:
        raise ValueError(f"values hold {tri.size} entries, expected {nl * nh * T}")
    rows, cols = np.tril_indices(W)  # row-major: row r holds columns 0..r
    probs = np.zeros((nl, nh, W, W))
    probs[:, :, rows, cols] = tri.reshape(nl, nh, T)
    before = np.frombuffer(base64.b64decode(data[bkey]), dtype=dt).astype(np.float64).reshape(nl, nh, W) / S
    return probs, before


@dataclass
class AttentionView:
    """Attention of one prompt's window for the chosen layers and heads, renderable as HTML.

    Attributes:
        model_name: the model card's name.
        token_ids: ``[n_tokens]`` ids of the whole prompt (BOS included where the tokenizer adds one).
        texts: decoded text of each of the window's tokens (``W = end - start`` of them); ``labels`` shows them.
        layers, heads: the shown layer and query-head indices (in this order along ``probs``' axes).
        kv_heads: ``[len(heads)]`` kv head each shown query head reads (``h // (n_heads // n_kv_heads)``).
        start, end: the window: queries and keys at positions ``start..end-1``.
        probs: ``[layer, head, W, W]`` float32 probabilities ``A[start + r, start + c]`` (exact, before quantisation).
        before: ``[layer, head, W]`` float32 attention of each window query on keys before ``start``.
        dtype: ``"uint8"`` or ``"uint16"``, how ``probs`` are quantised in the page.
        sliding_window: the model's sliding window per layer (all layers; None where global).
        probs_v, before_v: the same as ``probs`` and ``before`` for the value-weighted attention
            ``A[i, j] ||v_j|| / sum_k A[i, k] ||v_k||`` (module docstring); None when not computed.
    """

    model_name: str
    token_ids: list[int]
    texts: list[str]
    layers: list[int]
    heads: list[int]
    kv_heads: list[int]
    start: int
    end: int
    probs: np.ndarray
    before: np.ndarray
    dtype: str = "uint8"
    sliding_window: list[int | None] = field(default_factory=list)
    probs_v: np.ndarray | None = None
    before_v: np.ndarray | None = None

    @property
    def labels(self) -> list[str]:
        """Display text of the window's tokens (``display_token``: ``\\n``, ``\\r``, ``\\t`` visible)."""
        return [display_token(t) for t in self.texts]

    @property
    def n_tokens(self) -> int:
        """Length of the whole prompt."""
        return len(self.token_ids)

    def pattern(self, layer: int, head: int, value_weighted: bool = False) -> np.ndarray:
        """``[W, W]`` float32 window block of one shown (layer, head), by model indices (``value_weighted``: of ``probs_v``).

        Raises:
            ConfigError: the layer or head is not one of the shown ones, or value weighting was not computed.
        """
        if layer not in self.layers or head not in self.heads:
            raise ConfigError(f"L{layer}H{head} is not in this view: layers {self.layers}, heads {self.heads}")
        if value_weighted and self.probs_v is None:
            raise ConfigError("this view has no value-weighted attention: make it with attention_view(..., value_weighted=True)")
        return (self.probs_v if value_weighted else self.probs)[self.layers.index(layer), self.heads.index(head)]

    def payload(self) -> dict:
        """The data island embedded in the page (format: module docstring; ``decode_values`` reads it)."""
        W = self.end - self.start
        rows, cols = np.tril_indices(W)
        weighted = {} if self.probs_v is None else {"values_v": _encode(self.probs_v[:, :, rows, cols], self.dtype),
                                                    "before_v": _encode(self.before_v, self.dtype)}
        return {
            "format": "interp-attention-view/1", "model": self.model_name, "dtype": self.dtype,
            "start": self.start, "end": self.end, "n_tokens": self.n_tokens,
            "layers": self.layers, "heads": self.heads, "kv_heads": self.kv_heads,
            "sliding_window": [self.sliding_window[li] if self.sliding_window else None for li in self.layers],
            "token_ids": self.token_ids[self.start:self.end], "labels": self.labels,
            "values": _encode(self.probs[:, :, rows, cols], self.dtype),
            "before": _encode(self.before, self.dtype),
            "value_weighted": self.probs_v is not None, **weighted,
        }

    def _fragment(self, uid: str) -> str:
        W = self.end - self.start
        toks = []
        for r, text in enumerate(self.texts):
            toks.append(f'<span class="tok" data-i="{r}" title="position {self.start + r}">{html.escape(display_token(text), quote=True)}</span>')
            if "\n" in text:  # keep the prompt's line structure
                toks.append("<br>")
        err = 0.5 / _SCALE[self.dtype]
        hidden = (f" Each query also attends to keys before position {self.start}; that share is not drawn, "
                  "and the read-out states it." if self.start > 0 else "")
        note = (f"Positions {self.start}..{self.end - 1} of {self.n_tokens} tokens ({W} queries x {W} keys embedded"
                f"{'' if W == self.n_tokens else '; the rest of the prompt is not in this page'}).{hidden} "
                f"Values: exact attention recomputed from post-RoPE q/k with the model's scale and masks, "
                f"stored as {self.dtype} (error &lt;= {err:.1e}).")
        vnote = ("" if self.probs_v is None else
                 " Value-weighted: A[i, j] ||v_j|| / sum_k A[i, k] ||v_k||, v_j the value of key j in the head's kv head, "
                 "each query's row renormalised to 1 (Kobayashi et al. 2020, 'Attention is not only a weight', with ||v_j|| "
                 "before the output projection).")
        return (
            f'<div class="interp-av" id="{uid}">\n<style>\n{html_kit.asset("viewer.css")}</style>\n'
            f'<div class="hdr"><b>{html.escape(self.model_name)}</b> attention &nbsp; '
            '<label>layer <select class="sel-layer"></select></label> '
            '<label>head <select class="sel-head"></select></label> '
            '<label><input type="checkbox" class="norm"> scale colours to the row / column maximum</label>'
            + ('<label><input type="checkbox" class="vw"> weight by value norm ||v_j||</label>' if self.probs_v is not None else "")
            + '</div>\n'
            '<p class="legend">Shown: <span class="shown">attention A[i, j]</span></p>\n'
            f'<p class="note">{note}{vnote}</p>\n'
            '<p class="note">Hover a token (click to pin it): <span class="key-row">blue</span> = where it looks (its row), '
            '<span class="key-col">orange</span> = what looks at it (its column). Heatmap: rows are queries, columns keys, '
            'white (0) to dark blue (1); hover a cell to read it, click a thumbnail to pick a head.</p>\n'
            '<p class="nojs">Interactive view: needs JavaScript (in Jupyter, run the cell or trust the notebook).</p>\n'
            f'<div class="tokens">{"".join(toks)}</div>\n'
            '<div class="readout"></div>\n'
            '<div class="thumbs"></div>\n'
            '<div class="heat"><canvas class="hm"></canvas><div class="tip"></div></div>\n'
            f'<script type="application/json" class="interp-av-data">{_json_for_script(self.payload())}</script>\n'
            f'<script>\n{html_kit.asset("viewer.js").replace("__UID__", uid)}</script>\n</div>'
        )

    def _repr_html_(self) -> str:
        """Inline HTML for Jupyter (a fresh element id on every render)."""
        return self._fragment(_uid())

    def html(self) -> str:
        """A standalone page (works offline: no external scripts or styles)."""
        title = html.escape(f"interp attention view: {self.model_name}")
        return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title>'
                f'<style>body{{font-family:system-ui,sans-serif;margin:24px}}</style></head>\n<body>\n'
                f"{self._fragment(_uid())}\n</body></html>\n")

    def save(self, path: str | Path) -> Path:
        """Write ``html()`` to ``path`` (parent folders created; atomically, ``interp.io``). Returns the path."""
        from interp.io import write_text_atomic

        return write_text_atomic(path, self.html())


def _uid() -> str:
    return "interp-av-" + uuid.uuid4().hex[:12]


def attention_view(model: LoadedModel, tokens_or_text, *, layers: int | Sequence[int] | None = None,
                   heads: int | Sequence[int] | None = None, window: int = 512, start: int = 0,
                   dtype: str = "uint8", max_values: int = MAX_VALUES, beyond_context: bool = False,
                   value_weighted: bool = True) -> AttentionView:
    """Token-level attention of one prompt, for a window of positions and the chosen layers and heads.

    Args:
        model: a loaded model (``interp.load_model``).
        tokens_or_text: a string (tokenised with BOS where the tokenizer adds one), or ``[pos]`` / ``[1, pos]`` ids.
        layers: layer indices to include (an int, a list, or None for all).
        heads: query-head indices to include (an int, a list, or None for all).
        window: number of positions shown; queries and keys ``start .. min(start + window, n_tokens) - 1``.
        start: first position of the window.
        dtype: ``"uint8"`` (default; absolute error <= 0.002) or ``"uint16"`` (<= 7.6e-6) in the page.
        max_values: refuse views that would embed more probabilities than this
            (``len(layers) * len(heads) * W * (W + 1) / 2``, twice that with ``value_weighted``; 8M is about 11 MB of
            page as uint8).
        beyond_context: allow a prompt longer than the model's context (as ``interp.capture``).
        value_weighted: also embed the value-weighted attention ``A[i, j] ||v_j|| / sum_k A[i, k] ||v_k||`` and
            offer the toggle (module docstring; Kobayashi et al. 2020).

    Returns:
        AttentionView (``probs`` ``[layer, head, W, W]``, ``before`` ``[layer, head, W]``, ``probs_v`` / ``before_v`` the
        same value-weighted; ``.html()``, ``.save()``).

    Cost: one forward over the first ``start + W`` tokens (later tokens cannot change the window's
    attention), then ``[head, W, start + W]`` logits per layer.

    Raises:
        ConfigError: a layer or head index out of range, a window < 1, a start outside the prompt, an
            unknown dtype, or a view larger than ``max_values``; the message says which and the valid range.
        PromptError / ShapeError: the prompt itself (empty, ids outside the vocabulary, longer than the context).
    """
    card = model.card
    toks = as_tokens(model, tokens_or_text, beyond_context=beyond_context)
    N = int(toks.numel())
    L = _indices(layers, card.n_layers, "layer", card.name)
    Hs = _indices(heads, card.n_heads, "head", card.name)
    if dtype not in _SCALE:
        raise ConfigError(f"dtype must be 'uint8' or 'uint16', got {dtype!r}")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ConfigError(f"window must be an integer >= 1, got {window!r}")
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start < N:
        raise ConfigError(f"start {start!r} is outside the prompt: pick start in 0..{N - 1} ({N} tokens)")
    start, end = int(start), min(int(start) + int(window), N)
    W = end - start
    n_values = len(L) * len(Hs) * W * (W + 1) // 2 * (2 if value_weighted else 1)
    if n_values > max_values:
        twice = ", twice for value weighting" if value_weighted else ""
        raise ConfigError(f"the view would embed {n_values:,} values ({len(L)} layers x {len(Hs)} heads x {W} positions{twice}), "
                          f"over max_values={max_values:,}: pass fewer layers / heads, a smaller window"
                          + (" or value_weighted=False" if value_weighted else ""))
    cap = capture(model, toks[:end], beyond_context=beyond_context)
    probs = np.zeros((len(L), len(Hs), W, W), dtype=np.float32)
    before = np.zeros((len(L), len(Hs), W), dtype=np.float32)
    probs_v, before_v = (np.zeros_like(probs), np.zeros_like(before)) if value_weighted else (None, None)
    hidx = torch.tensor(Hs)
    with torch.no_grad():
        for li, layer in enumerate(L):
            got = _window_rows(model, cap, layer, start, value_weighted)
            pick = [t[hidx.to(t.device)].float().cpu().numpy() for t in got]
            probs[li], before[li] = pick[0], pick[1]
            if value_weighted:
                probs_v[li], before_v[li] = pick[2], pick[3]
    group = card.n_heads // card.n_kv_heads
    raw = [model.tokenizer.decode([int(i)]) for i in toks[start:end]]
    return AttentionView(model_name=card.name, token_ids=[int(i) for i in toks], texts=raw,
                         layers=L, heads=Hs, kv_heads=[h // group for h in Hs], start=start, end=end, probs=probs,
                         before=before, dtype=dtype, sliding_window=list(card.sliding_window), probs_v=probs_v, before_v=before_v)


def view_command_main(model_name: str, text: str | None = None, file: str | Path | None = None,
                      out: str | Path = "view.html", layers: str | Sequence[int] | None = None,
                      heads: str | Sequence[int] | None = None, window: int = 512, start: int = 0,
                      device: str | None = None, dtype: str | None = None) -> Path:
    """What ``interp view MODEL --text "..." | --file F --out view.html`` does: load, view, save.

    Args:
        model_name: as ``interp.load_model``.
        text / file: the prompt, given as text or as a UTF-8 file (exactly one of the two).
        out: the HTML file to write.
        layers, heads: ``"0,2,5-7"``, ``"all"`` / None, or a list of ints.
        window, start: the window of positions (``attention_view``).
        device, dtype: as ``interp.load_model`` (the model's dtype, not the page's).

    Returns:
        The path written.

    Raises:
        ConfigError: both or neither of text / file, a file that is not UTF-8, bad indices or window (``attention_view``).
        PathError: the file does not exist, is a folder or cannot be read.
        Other ``InterpError``: from loading the model or tokenising the prompt.
    """
    from interp.models import load_model

    if (text is None) == (file is None):
        raise ConfigError("pass exactly one of --text and --file")
    if file is not None:
        from interp.io import check_input_file

        check_input_file(file, "--file")  # PathError: missing, a folder, unreadable
        try:
            text = Path(file).read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(f"--file {file}: not UTF-8 text (byte {err.start}); save it as UTF-8 or pass --text") from None
        except OSError as err:
            raise ConfigError(f"--file {file}: cannot be read ({err.strerror or err.__class__.__name__})") from None
    model = load_model(model_name, device=device, dtype=dtype)
    card = model.card
    view = attention_view(model, text, layers=parse_index_spec(layers, "layer", card.n_layers, card.name),
                          heads=parse_index_spec(heads, "head", card.n_heads, card.name), window=window, start=start)
    return view.save(out)


def normalise_ids(page: str) -> str:
    """``page`` with every element id of the viewer replaced by ``interp-av-ID`` (stable text for snapshots)."""
    return re.sub(r"interp-av-[0-9a-f]{12}", "interp-av-ID", page)


# assets/viewer.js writes everything with textContent / fillText: token text is never parsed as HTML.
