"""The tap handler of a scan: each layer's exact attention, the requested tile products, and every measure's update.

For each layer of each prompt the tap (``interp.models.taps``) hands over post-RoPE queries, keys and values with the
model's scale, window and soft-cap. The collector computes the layer's attention *exactly* in query blocks (all
heads at once, exact row normalisers, causal + sliding-window masks, GQA mapping), returns the output ``P @ V`` to
the model and, from the same probabilities, the products the enabled measures ask for (``interp.measures.PRODUCTS``,
their union computed once): on the fused CPU kernel (``interp.engine.kernels``) for float32 CPU tensors, else on the
Python block path (``interp.attention``), or, for CUDA tensors, the Triton twin (``interp.engine.kernels.triton_attention``).
Counterfactual RoPE variants are extra passes of the same code without ``P @ V``. Each measure's ``update`` then
returns its additions, which the collector places at the layer's index (and positions ``0..pos-1`` for per-position
entries). The CPU paths work in float32 whatever the model's dtype; the Triton path reads q/k/v in the model's dtype
(bf16/fp16 products on tensor cores, float32 accumulation). Sums are float64.

Engines (``ENGINES``; ``scan(..., engine=)``, ``interp scan --engine``): ``auto`` picks ``triton`` for CUDA tensors
when Triton is installed, ``cpu-kernel`` for float32 CPU tensors when the fused kernel builds, else ``python``.
On a GPU the state's sums accumulate on the device for the whole scan and come to the CPU once (``finish``), each
per-position entry only up to its last nonzero position (the default scan scores lags up to ``long_lags``' end, so
at 32k tokens most of a per-lag entry is zeros that never cross the bus); no host sync per layer.

Products are computed only as far as the measures read them: ``lag`` over the union of the measures' lag windows
(``Measure.lag_window``; the Triton engine skips the tiles outside it), and the pre-RoPE ``key0_pre`` over a
stratified sample of ``counterfactual_queries`` query positions (``interp.attention.key_weight_rows``, float32; its
C++ twin ``interp.engine.kernels.key_weight_rows`` on the fused CPU engine and its Triton twin
``interp.engine.kernels.triton_rows`` on the Triton engine, each equal to float32 rounding) or, with 0, from every
query through the kernels. ``interp.engine.phases`` times each part.
"""

from __future__ import annotations

import torch

from interp.engine import kernels
from interp.engine.kernels import triton_attention, triton_rows
from interp.attention import (attention_blocks, entropy_sums, key_mass_sums, key_weight, key_weight_rows, lag_sums, stratified_rows,
                              token_match_sums)
from interp.engine.phases import phase
from interp.errors import ConfigError, NumericsError
from interp.measures import REGISTRY, Dims, Entry, LayerInput, PromptInput, State
from interp.measures import inp as inp_measure
from interp.measures import maps
from interp.rope import RopeSpec, rotate_variant
from interp.models.taps import AttentionCall


def dims_of(card, n_pos: int) -> Dims:
    """The sizes a state of ``card``'s model is allocated for, with ``n_pos`` the longest prompt."""
    return Dims(card.n_layers, card.n_heads, card.n_kv_heads, card.d_head, n_pos)


def state_entries(card, n_pos: int, cfg) -> dict[str, Entry]:
    """``{name: Entry}`` of every enabled measure under ``cfg`` (registry order), plus the engine's ``prompts`` counter."""
    out = {"prompts": Entry("prompts", (1,), layer_axis=None)}
    for m in REGISTRY.enabled(cfg):
        out.update({e.name: e for e in m.entries(dims_of(card, n_pos), cfg)})
    return out


def new_state(card, n_pos: int, cfg) -> State:
    """Zeroed float64 sums of every enabled measure for a model and prompts up to ``n_pos`` tokens."""
    return State({name: torch.zeros(e.shape, dtype=torch.float64) for name, e in state_entries(card, n_pos, cfg).items()})


def use_kernel(q: torch.Tensor) -> bool:
    """Whether the fused kernel handles this layer: float32 CPU tensors and the kernel built (see ``interp.engine.kernels``)."""
    return q.device.type == "cpu" and q.dtype == torch.float32 and kernels.available()


ENGINES = ("auto", "triton", "cpu-kernel", "python")


def check_engine(engine: str, device: str | torch.device = "cpu") -> None:
    """Refuse an engine that cannot run on ``device`` before any model loads.

    Raises:
        ConfigError: an unknown engine name; ``triton`` without Triton (or on a CPU without ``TRITON_INTERPRET=1``, or
            with an interpreter that fails under this NumPy: ``triton_attention.interpreter_problem``);
            ``cpu-kernel`` on a GPU or without a C++ compiler.
    """
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    dev = torch.device("cuda" if str(device) == "auto" and torch.cuda.is_available() else
                       "cpu" if str(device) == "auto" else device)
    if engine == "triton" and not triton_attention.available(dev):
        why = (triton_attention.interpreter_problem() if triton_attention.triton is None or triton_attention.interpreted()
               else None) or "on a CPU it runs only in Triton's interpreter: set TRITON_INTERPRET=1 (slow; for tests)"
        raise ConfigError(f"--engine triton cannot run on {dev.type}: {why}")
    if engine == "cpu-kernel" and (dev.type != "cpu" or not kernels.available()):
        raise ConfigError(f"--engine cpu-kernel runs on the CPU with a C++ compiler (g++); use --engine auto or python")


def pick_engine(engine: str, q: torch.Tensor) -> str:
    """The engine that runs a layer whose queries are ``q``: ``engine`` itself, or for ``auto`` the fastest available."""
    if engine != "auto":
        return engine
    if q.is_cuda and triton_attention.available(q.device):
        return "triton"
    return "cpu-kernel" if use_kernel(q.float()) else "python"


ROW_PRODUCTS = ("lse", "entropy", "key_mass")  # products computed from each row's normaliser and probabilities
# the fused CPU kernel's outputs, in order (interp.engine.kernels.stream_layer); the Triton twin returns them by name
KERNEL_OUTPUTS = ("out", "lag", "key0", "map", "key0_pre", "inp_signed", "inp_abs", "token_match", "lse", "entropy", "key_mass")


def all_finite(*xs: torch.Tensor) -> bool:
    """Whether every element of ``xs`` is finite, from one float64 sum per tensor: an inf or NaN element makes the sum
    inf or NaN, and float32 / 16-bit values cannot overflow a float64 sum (3.4e38 per element, 1.8e308 the limit), so
    the test is exact at a third of ``torch.isfinite(x).all()``'s cost (no boolean tensor)."""
    return all(bool(torch.isfinite(x.sum(dtype=torch.float64))) for x in xs)


class Collector:
    """Receives each layer's q/k/v during one prompt's forward and adds every enabled measure's update to ``state``.

    Args:
        card: the model card; cfg: the ``ScanConfig``; state: sums from ``new_state``.
        specs: the model's per-layer RoPE (``interp.models.arch.rope_specs``), needed when a measure reads ``variants``.

    Raises:
        ValueError: counterfactual variants without ``specs``.
    """

    def __init__(self, card, cfg, state: State, specs: list[RopeSpec] | None = None, engine: str = "auto"):
        if engine not in ENGINES:
            raise ConfigError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
        self.card, self.cfg, self.state, self.specs, self.requested = card, cfg, state, specs, engine
        self.measures = REGISTRY.enabled(cfg)
        self.needs = set().union(*(m.needs(cfg) for m in self.measures))
        self.variant_needs = set().union(*(m.variant_needs(cfg) for m in self.measures))  # what each variant's pass carries
        self.entries = state_entries(card, 1, cfg)
        self.lag_window = self._lag_window()
        if "variants" in self.needs and specs is None:
            raise ValueError("counterfactual variants need the model's per-layer RoPE specs")
        self.tokens: torch.Tensor | None = None  # the prompt being scanned
        self.engine = "none"  # which attention path ran last: "triton", "fused-cpu" or "python"
        self.prompt_id = 0  # global index of the prompt being scanned
        self.device_state: State | None = None  # sums on the GPU, for the whole scan (moved to ``state`` by ``finish``)
        self.finite: torch.Tensor | None = None  # on a GPU: all queries and keys of the prompt finite (checked once)
        self._rows = None  # the prompt's sampled query rows for the pre-RoPE counterfactual, on its device

    def _lag_window(self) -> tuple[tuple[int, int], ...] | None:
        """Union of the lag windows of the measures that read ``lag`` (None: every lag)."""
        windows = [m.lag_window(self.cfg) for m in self.measures if "lag" in m.needs(self.cfg)]
        if not windows or any(w is None for w in windows):
            return None
        return tuple(sorted({r for w in windows for r in w}))

    def begin_prompt(self, prompt_id: int, tokens: torch.Tensor) -> None:
        """Start a prompt: count it and add the measures' once-per-prompt entries."""
        self.prompt_id, self.tokens = prompt_id, tokens
        self.state.add("prompts", 0, torch.ones(()))
        x = PromptInput(int(tokens.numel()), tokens, prompt_id, self.card, self.cfg)
        for m in self.measures:
            self._place(m, m.update_prompt(x), None)

    def end_prompt(self) -> None:
        """Finish a prompt (on a GPU: check that its queries and keys were finite; one host sync per prompt).

        Raises:
            NumericsError: a layer of the prompt produced non-finite queries or keys (checked here on a GPU).
        """
        if self.finite is not None and not bool(self.finite):
            raise NumericsError(f"{self.card.name}: a layer produced non-finite queries or keys (overflow); "
                                f"scan in bfloat16 or float32 (--dtype)")
        self.finite = None

    def finish(self) -> None:
        """Move the GPU-side sums to the CPU state (once per scan; a no-op on a CPU).

        A per-position entry crosses only up to its last nonzero position (found on the GPU, one sync for all
        entries); the rest of the CPU entry is left as it is (zeros of a fresh state). Transfers go through pinned
        buffers, asynchronously, with one wait at the end (a pageable copy moves about 3 GB/s; measured in
        ``analyses/benchmarks/gpu_scan.py``'s ``ph_flush_s``).
        """
        if self.device_state is None:
            return
        dev = next(iter(self.device_state.values())).device
        with phase("flush", dev):
            names = list(self.device_state.keys())
            extents = []
            for name in names:
                v, e = self.device_state[name], self.entries.get(name)
                if e is not None and e.per_position and v.dim() and v.shape[-1]:
                    nz = v.ne(0).reshape(-1, v.shape[-1]).any(0)
                    extents.append(torch.where(nz, torch.arange(1, v.shape[-1] + 1, device=dev), 0).max())
                else:
                    extents.append(torch.tensor(v.shape[-1] if v.dim() else 0, device=dev))
            staged = []  # pinned host buffers (reused across scans by PyTorch's caching host allocator): one DMA each
            for name, n in zip(names, torch.stack(extents).tolist()):
                v = self.device_state[name]
                src = v if v.dim() == 0 else v[..., :n]
                if src.numel():
                    buf = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
                    buf.copy_(src, non_blocking=True)
                    staged.append((name, n, buf))
            torch.cuda.current_stream(dev).synchronize()
            for name, n, buf in staged:
                if buf.dim() == 0:
                    self.state[name] += buf
                else:
                    self.state[name][..., :n] += buf
        self.device_state = None

    def __call__(self, call: AttentionCall) -> torch.Tensor:
        """The tap handler (``interp.models.taps``): one layer of one prompt -> its attention output ``[pos, head, d_head]``.

        Works in float32 whatever the model's dtype (bf16/fp16 q/k/v are upcast; the output is cast back by the tap).

        Raises:
            NumericsError: the layer's queries or keys are not finite (overflow in the model's dtype).
        """
        with phase("taps", call.query.device):
            if call.query.is_cuda:  # checked once per prompt (end_prompt): a check here would sync the host every layer
                finite = torch.isfinite(call.query).all() & torch.isfinite(call.key).all()
                self.finite = finite if self.finite is None else self.finite & finite.to(self.finite.device)
            elif not all_finite(call.query, call.key):
                raise NumericsError(f"{self.card.name}: layer {call.layer} produced non-finite queries or keys in {call.query.dtype} "
                                    f"(overflow); scan in bfloat16 or float32 (--dtype)")
            with phase("copies", call.query.device):  # what the measures read: float32 whatever the model's dtype
                q, k, v = call.query.float(), call.key.float(), call.value.float()
            with phase("pre", call.query.device):
                q_pre, k_pre = call.pre(q, k)  # from the float32 copies: no second upcast of 16-bit q / k
        return self.attend(call.layer, q, k, v, call.scale, call.window, call.softcap, q_pre, k_pre,
                           (call.query, call.key, call.value))

    def attend(self, layer, q_rot, k_rot, v, scale, window, softcap, q_pre, k_pre, native=None):
        """One layer of one prompt: q/k/v ``[pos, head|kv_head, d_head]`` -> attention output ``[pos, head, d_head]``.

        ``native``: the model's own q/k/v (its dtype) for the Triton engine, which reads 16-bit inputs directly.
        """
        rows = self.cfg.counterfactual_queries  # a prompt no longer than the sample: every row anyway, in the kernel's pass
        exact_pre = "key0_pre" in self.needs and (not rows or q_rot.shape[0] <= rows)
        out, products = self._attention(q_rot, k_rot, v, scale, window, softcap, (q_pre, k_pre) if exact_pre else None,
                                        "inp" in self.needs, self.tokens if "token_match" in self.needs else None,
                                        frozenset(self.needs & set(ROW_PRODUCTS)), native, lags=self.lag_window)
        if "key0_pre" in self.needs:
            with phase("counterfactual", q_rot.device):
                products["key0_pre"] = (products["key0_pre"].double().mean(-1) if exact_pre else
                                        self._key0_pre_sampled(q_pre, k_pre, scale, window, softcap))
        if "variants" in self.needs:
            with phase("variants", q_rot.device):
                products["variants"] = self._variants(layer, q_pre, k_pre, scale, window, softcap)
        x = LayerInput(layer, self.prompt_id, self.tokens, q_pre, k_pre, q_rot, k_rot, scale, window, softcap,
                       self.card, self.cfg, products, value=v, native=native)
        with phase("measures", q_rot.device):
            for m in self.measures:
                with phase(m.name, q_rot.device):  # timed alone under phase_timer(detail=True)
                    self._place(m, m.update(x), layer)
        return out

    def _key0_pre_sampled(self, q_pre, k_pre, scale, window, softcap) -> torch.Tensor:
        """``[head]`` float64: the stratified estimate of the mean over queries of the pre-RoPE weight on key 0
        (``counterfactual_queries`` positions seeded by the prompt's index; exact for shorter prompts)."""
        key = (self.prompt_id, q_pre.shape[0], q_pre.device)
        if self._rows is None or self._rows[0] != key:  # once per prompt: a host-to-device copy waits for the GPU
            rows, weights = stratified_rows(q_pre.shape[0], int(self.cfg.counterfactual_queries), self.prompt_id)
            self._rows = (key, rows, rows.to(q_pre.device), weights.to(q_pre.device))
        _, rows, rows_dev, weights = self._rows
        if self.engine == "fused-cpu":  # the same rows and arithmetic in the C++ kernel, about 3x faster
            w = kernels.key_weight_rows(q_pre, k_pre, rows, scale, window, softcap)
        elif self.engine == "triton":  # streamed keys, no [head, rows, pos] logits (PyTorch's path where it is faster)
            w = triton_rows.key_weight_rows(q_pre, k_pre, rows_dev, scale, window, softcap, rows_host=rows)
        else:
            w = key_weight_rows(q_pre, k_pre, rows_dev, scale, window, softcap, rows_host=rows)
        return w.double() @ weights

    def _place(self, measure, values: dict, layer: int | None) -> None:
        """Add each value at its entry's layer index (and positions ``0..pos-1`` for per-position entries)."""
        for name, value in values.items():
            e = self.entries.get(name)
            target = self.state
            if isinstance(value, torch.Tensor) and value.is_cuda:
                if self.device_state is None:
                    self.device_state = State({k: torch.zeros_like(t, device=value.device) for k, t in self.state.items()})
                target = self.device_state
            if e is None:
                raise KeyError(f"measure {measure.name!r} updated {name!r}, which is not one of its declared entries")
            idx = [slice(None)] * len(e.shape)
            if e.layer_axis is not None:
                if layer is None:
                    raise KeyError(f"measure {measure.name!r}: entry {name!r} has a layer axis but came from update_prompt")
                idx[e.layer_axis] = layer
            if e.per_position:
                idx[-1] = slice(0, value.shape[-1])
            target.add(name, tuple(idx), value)

    def _attention(self, q, k, v, scale, window, softcap, pre, inp=False, tokens=None, rows=frozenset(), native=None, lags=None):
        """Exact attention of one layer and its tile products, on the fused kernel when it applies, else in Python.

        Returns ``(out [pos, head, d_head] (empty when v is None), products)`` with ``lag``, ``key0`` ``[head, pos]``, ``map``
        ``[head, M, M]``, ``key0_pre`` (``pre = (q_pre, k_pre)`` given), ``inp`` (when asked; ``interp.measures.inp.inp_sums``' dict),
        ``token_match`` (``tokens`` given; ``[head, 3]``, ``interp.attention.token_match_sums``) and those of ``lse``,
        ``entropy``, ``key_mass`` named in ``rows`` (``interp.measures.PRODUCTS``). ``lags``: inclusive lag ranges the
        caller reads (None: all); the Triton engine leaves the others at 0, the CPU paths compute every lag.
        """
        cfg, pairing = self.cfg, self.card.pairing
        engine = pick_engine(self.requested, q)
        if engine == "cpu-kernel" and not use_kernel(q):
            raise ConfigError("--engine cpu-kernel needs float32 CPU tensors and a C++ compiler; use --engine auto")
        if engine in ("triton", "cpu-kernel"):
            q_pre, k_pre = pre or (None, None)
            pairing_arg = pairing if inp else None
            if engine == "triton":
                self.engine = "triton"
                if native is not None:  # the model's own dtype: 16-bit products on tensor cores
                    q, k, v = native
                r = triton_attention.stream_layer(q, k, v, scale, window, softcap, None if q.is_cuda else 16, cfg.skip,
                                                  cfg.map_size, q_pre, k_pre, inp_pairing=pairing_arg, tokens=tokens,
                                                  entropy="entropy" in rows, key_mass="key_mass" in rows, lags=lags)
            else:
                self.engine = "fused-cpu"
                with phase("attention"):
                    r = dict(zip(KERNEL_OUTPUTS, kernels.stream_layer(
                        q, k, v, scale, window, softcap, cfg.block_size, cfg.skip, cfg.map_size, q_pre, k_pre,
                        inp_pairing=pairing_arg, tokens=tokens, lse="lse" in rows, entropy="entropy" in rows,
                        key_mass="key_mass" in rows)))
            return self._kernel_products(r, q, window, pre is not None, inp, tokens is not None, rows)
        self.engine = "python"
        with phase("attention", q.device):
            out, lag, sink, amap, tm, extra = self._blocks(q, k, v, scale, window, softcap, tokens, rows)
        products = {"lag": lag, "key0": sink, "map": amap, **extra}
        if tokens is not None:
            products["token_match"] = tm
        if pre is not None:
            products["key0_pre"] = key_weight(*pre, scale, window, softcap, cfg.block_size, key=0)
        if inp:
            products["inp"] = inp_measure.inp_sums(q, k, pairing, cfg.skip, window, cfg.block_size)
        return out, products

    def _kernel_products(self, r: dict, q, window, pre: bool, inp: bool, tokens: bool, rows) -> tuple:
        """``(out, products)`` from a kernel's outputs named as ``KERNEL_OUTPUTS`` (the fused CPU kernel's and the Triton
        twin's are the same reductions in the same layouts); ``out`` is ``[0, head, d_head]`` without v."""
        out = r["out"]
        if out is None:
            out = q.new_empty(0, q.shape[1], q.shape[2], dtype=torch.float32)
        products = {"lag": r["lag"], "key0": r["key0"], "map": r["map"], **{name: r[name] for name in rows}}
        if tokens:
            products["token_match"] = r["token_match"]
        if pre:
            products["key0_pre"] = r["key0_pre"]
        if inp:
            n = inp_measure.pair_count(q.shape[0], self.cfg.skip, window)
            products["inp"] = {"signed": r["inp_signed"], "abs": r["inp_abs"],
                               "count": torch.full((q.shape[1],), float(n), dtype=torch.float64, device=q.device)}
        return out, products

    def _variants(self, layer, q_pre, k_pre, scale, window, softcap) -> list[dict]:
        """Counterfactual passes: per variant, ``{lag, key0}`` plus the products the measures' ``variant_needs`` name,
        from attention with the variant's rotation of the pre-RoPE q/k (no P @ V)."""
        N = q_pre.shape[0]
        pos = torch.arange(N, device=q_pre.device)
        spec, extra = self.specs[layer], sorted(self.variant_needs)
        tokens = self.tokens if "token_match" in self.variant_needs else None
        rows = frozenset(self.variant_needs & set(ROW_PRODUCTS))
        out = []
        for var in self.cfg.variants:
            q = rotate_variant(q_pre, pos, spec, var, self.tokens)
            k = rotate_variant(k_pre, pos, spec, var, self.tokens)
            _, p = self._attention(q, k, None, scale * var.logit_scale(N), window, softcap, None, "inp" in self.variant_needs,
                                   tokens, rows)
            out.append({name: p[name] for name in ("lag", "key0", *extra)})
        return out

    def _blocks(self, q_rot, k_rot, v, scale, window, softcap, tokens=None, rows=frozenset()):
        """Python block path: ``(out [pos, head, d_head] (empty without v), lag [head, pos], key0 [head, pos], map [head, M, M],
        token_match [head, 3] or None, {product: value} of the row products named in rows)``: ``lse [head, pos]`` float32,
        ``entropy [head, 2]`` and ``key_mass [head, pos]`` float64 (``interp.measures.PRODUCTS``)."""
        cfg, H, M = self.cfg, self.card.n_heads, self.cfg.map_size
        N = q_rot.shape[0]
        out = torch.empty_like(q_rot) if v is not None else q_rot.new_empty(0, H, q_rot.shape[-1])
        # float32 within one prompt (at most pos / block_size additions per entry), float64 across prompts
        lag = torch.zeros(H, N, dtype=q_rot.dtype, device=q_rot.device)
        sink = torch.zeros(H, N, dtype=q_rot.dtype, device=q_rot.device)
        amap = torch.zeros(H, M, M, dtype=torch.float64, device=q_rot.device)
        tm = torch.zeros(H, 3, dtype=torch.float64, device=q_rot.device) if tokens is not None else None
        extra = {}
        if "lse" in rows:
            extra["lse"] = torch.zeros(H, N, dtype=torch.float32, device=q_rot.device)
        if "entropy" in rows:
            extra["entropy"] = torch.zeros(H, 2, dtype=torch.float64, device=q_rot.device)
        if "key_mass" in rows:
            extra["key_mass"] = torch.zeros(H, N, dtype=torch.float64, device=q_rot.device)
        for blk in attention_blocks(q_rot, k_rot, scale, window, softcap, cfg.block_size, v=v, out=out if v is not None else None,
                                    lse="lse" in rows):
            sink[:, blk.i0 : blk.i1] = blk.key_column(0)
            m = maps.block_map(blk, M)
            if m is not None:
                amap += m
            if tm is not None:
                tm += token_match_sums(blk, tokens)
            if "lse" in rows:
                extra["lse"][:, blk.i0 : blk.i1] = blk.lse
            if "entropy" in rows:
                extra["entropy"] += entropy_sums(blk, window)
            if "key_mass" in rows:
                extra["key_mass"][:, : blk.i1] += key_mass_sums(blk)
            skip = min(cfg.skip, blk.i1)
            blk.probs_rev[:, :, blk.i1 - skip :] = 0.0  # drop keys 0..skip-1 from slash sums
            lag[:, : blk.i1] += lag_sums(blk.probs_rev)
        return out, lag, sink, amap, tm, extra
