"""Activation and path patching between a clean and a corrupt run: which heads carry a behaviour (Wang et al. 2022,
"Interpretability in the Wild"; Meng et al. 2022; Heimersheim and Nanda 2024, "How to use and interpret activation
patching").

**Metric.** Per pair (``interp.experiments.patch_tasks.Pair``), read from the logits of the last position(s):

- ``logit_diff`` (default): ``LD = logit[answer] - logit[wrong]`` at the last position (logit units);
- ``nll``: the NLL (nats) of the clean continuation: of ``answer`` at the last position where the pair has one, else
  of the clean prompt's last token read at the position before it (the target is that clean token in every run,
  the corrupt and patched ones included).

**Activation patching** (``patch_heads``). ``direction="denoise"`` (default): run the corrupt prompt with head
``(l, h)``'s output ``head_out[l]`` (``[batch, pos, head, d_head]``, its slice of the output projection's input)
replaced by its value in the clean run, at every position (``positions="all"``) or at one position per row
(``positions="each"``: TransformerLens' ``get_act_patch_attn_head_out_by_pos``; pairs of one template only);
``"noise"``: run the clean prompt with the corrupt value. Per head (and position):

- ``ld``: the mean patched metric over pairs;
- ``recovered = (mean patched - mean corrupt) / (mean clean - mean corrupt)`` (``interp.experiments.stats.recovered``;
  means over pairs of the unpatched clean and corrupt runs, whatever the direction: denoising heads that matter
  read near 1, noising them near 0), with a 95% percentile bootstrap over pairs (``stats.recovered_interval``);
  NaN where clean and corrupt agree on average.

**Cost** (as ``interp.experiments.effects``): one base and one source pass per pair cache ``resid_pre`` of every
layer (base) and every ``head_out`` (source); a head of layer ``l`` cannot change layers ``0..l-1``, so its run starts
from the base run's cached ``resid_pre[l]`` (``interp.hooks.edit.start_at``), the heads x pairs (x positions) of a
layer run side by side as batch rows (one ``replace`` edit per head / position with ``rows=``), and only the logits
the metric reads go through the LM head (``logits_to_keep``). Pairs of different token lengths run in separate
buckets. ``naive_patch_heads`` runs a full forward per head and pair (the reference).

**Attribution patching** (``attribution_patch_heads``; Nanda 2023, "Attribution Patching"; Syed, Rager and Conmy
2023): one forward and one backward of the base run give ``g = d metric / d z_base``; per head (and position)
``ld = metric_base + sum over positions and channels of (z_source - z_base) . g`` (first-order Taylor expansion),
``recovered`` from it as above. Exact where the metric is linear in the head's output (a test).

**Path patching** (``interp.experiments.path_patching.path_patch``; Wang et al. 2022, Sec. 3.1 and App. B) builds on
the same cached runs.

**Whole sites** (``patch_sites``): a site such as ``resid_pre[l]`` or ``attn_out[l]`` patched at every position
(TransformerLens' ``get_act_patch_resid_pre``); handing over ``resid_pre[l]`` recovers exactly 1 (a test).

Sits above the intervention layer (``interp.hooks.edit``): it never registers hooks itself.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float

from interp.errors import ConfigError, CorruptStateError
from interp.experiments.attribution import _frozen
from interp.experiments.effects import _progress
from interp.experiments.patch_tasks import METRICS, Pair, check_one_template
from interp.experiments.stats import recovered, recovered_interval
from interp.hooks.edit import Edit, cache, edit, record, replace, start_at
from interp.hooks.heads import check_heads
from interp.hooks.sites import parse_site

DIRECTIONS = ("denoise", "noise")
POSITIONS = ("all", "each")
COLUMNS = ("layer", "head", "direction", "ld", "recovered", "recovered_lo", "recovered_hi")
POS_COLUMNS = ("layer", "head", "pos", "direction", "ld", "recovered", "recovered_lo", "recovered_hi")
SITE_COLUMNS = ("site", "direction", "ld", "recovered", "recovered_lo", "recovered_hi")


@dataclass(frozen=True)
class PatchConfig:
    """Settings of ``patch_heads`` / ``naive_patch_heads`` / ``attribution_patch_heads`` / ``path_patch``.

    Attributes:
        heads: ``(layer, head)`` pairs patched (path patching: the receivers), or None for every head.
        direction: ``denoise`` (corrupt run, clean values patched in) or ``noise`` (the reverse).
        positions: ``all`` (a head at every position at once) or ``each`` (one row per head and position; pairs of
            equal token lengths). Path patching takes ``all`` only.
        metric: ``logit_diff`` or ``nll`` (module docstring).
        bootstrap: pair resamples of the 95% interval of ``recovered``; seed: their RNG seed.
        batch_rows: rows per forward (None: from ``max_batch_gb``, an estimate of one forward's activations).
    """

    heads: tuple[tuple[int, int], ...] | None = None
    direction: str = "denoise"
    positions: str = "all"
    metric: str = "logit_diff"
    bootstrap: int = 1000
    seed: int = 0
    batch_rows: int | None = None
    max_batch_gb: float = 1.0

    def check(self, n_layers: int | None = None, n_heads: int | None = None) -> "PatchConfig":
        """Check every setting (and the heads against a ``n_layers x n_heads`` grid where given); returns self.

        Raises:
            ConfigError: one line naming the bad setting and the allowed values.
        """
        for name, value, allowed in (("--direction", self.direction, DIRECTIONS), ("--positions", self.positions, POSITIONS),
                                     ("--metric", self.metric, METRICS)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}; use one of {', '.join(allowed)}")
        if self.heads is not None:  # without a grid: only that there are heads
            check_heads(self.heads, n_layers or sys.maxsize, n_heads or sys.maxsize)
        if self.bootstrap < 0:
            raise ConfigError(f"--bootstrap must be >= 0 resamples, got {self.bootstrap}")
        if self.batch_rows is not None and self.batch_rows < 1:
            raise ConfigError(f"batch_rows must be >= 1, got {self.batch_rows}")
        if not self.max_batch_gb > 0:
            raise ConfigError(f"max_batch_gb must be > 0, got {self.max_batch_gb}")
        return self


@dataclass
class PatchResult:
    """Result of the patching functions.

    Attributes:
        table: one row per head (``COLUMNS``), head and position (``POS_COLUMNS``), site (``SITE_COLUMNS``) or
            sender, receiver and input (``interp.experiments.path_patching.PATH_COLUMNS``), in ``per_pair`` row order.
        per_pair: ``[row, pair]`` float64, the patched metric of each pair.
        clean, corrupt: ``[pair]`` float64, the metric of the unpatched clean and corrupt runs.
        meta: model, settings, clean / corrupt means (and accuracy: share of pairs with LD > 0), method, seconds
            (written to ``patch.json``); ``partial`` (``"K of N layers"``) when the run was stopped early.
        stopped: the exception of ``patch_heads(stop_on=...)`` that stopped the run early, else None.
    """

    table: pd.DataFrame
    per_pair: np.ndarray
    clean: np.ndarray
    corrupt: np.ndarray
    meta: dict = field(default_factory=dict)
    stopped: BaseException | None = None


# --------------------------------------------------------------------------------------------
# pairs, targets and the metric
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """What the metric reads for every pair: ``keep`` last positions' logits (1 for ``logit_diff``, 2 for ``nll``),
    ``at [pair]`` the index into them, ``target [pair]`` (answer, or the clean last token) and ``wrong [pair]``."""

    metric: str
    keep: int
    at: torch.Tensor
    target: torch.Tensor
    wrong: torch.Tensor | None


def targets(pairs: Sequence[Pair], metric: str) -> Targets:
    """The ``Targets`` of ``pairs`` under ``metric``.

    Raises:
        ConfigError: ``logit_diff`` with a pair that has no answer or wrong token.
    """
    if metric == "logit_diff":
        bad = [p.line for p in pairs if p.answer is None or p.wrong is None]
        if bad:
            raise ConfigError(f"--metric logit_diff needs answer and wrong tokens; pair {bad[0]} has none (use --metric nll)")
        return Targets(metric, 1, torch.zeros(len(pairs), dtype=torch.long), torch.tensor([p.answer for p in pairs]),
                       torch.tensor([p.wrong for p in pairs]))
    at = torch.tensor([1 if p.answer is not None else 0 for p in pairs])
    tgt = torch.tensor([p.answer if p.answer is not None else p.clean[-1] for p in pairs])
    return Targets(metric, 2, at, tgt, None)


def metric_of(logits: Float[torch.Tensor, "row keep vocab"], t: Targets, pidx: torch.Tensor) -> torch.Tensor:
    """``[row]`` float32 metric of rows whose pairs are ``pidx [row]`` (indices into ``t``), from the last ``t.keep``
    positions' logits; differentiable (attribution patching)."""
    pidx = pidx.cpu()
    rows = torch.arange(logits.shape[0], device=logits.device)
    x = logits[rows, t.at[pidx].to(logits.device)].float()  # [row, vocab]
    tgt = t.target[pidx].to(logits.device)[:, None]
    if t.metric == "logit_diff":
        return (x.gather(1, tgt) - x.gather(1, t.wrong[pidx].to(logits.device)[:, None]))[:, 0]
    return -torch.log_softmax(x, -1).gather(1, tgt)[:, 0]


def _setup(model, pairs: Sequence[Pair], config: PatchConfig | None):
    """``(config, heads, targets, base tokens, source tokens, buckets)``; buckets: ``{length: [pair index]}``."""
    c = model.card
    cfg = (config or PatchConfig()).check(c.n_layers, c.n_heads)
    pairs = list(pairs)
    if not pairs:
        raise ConfigError("no pairs given: patching needs at least one clean / corrupt pair")
    for p in pairs:
        if len(p.clean) != len(p.corrupt) or len(p.clean) < 2:
            raise ConfigError(f"pair {p.line}: clean and corrupt need equal token lengths of at least 2, got "
                              f"{len(p.clean)} and {len(p.corrupt)}")
    if cfg.positions == "each":
        check_one_template(pairs)
    heads = sorted(cfg.heads) if cfg.heads is not None else [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    clean = [torch.tensor(p.clean) for p in pairs]
    corrupt = [torch.tensor(p.corrupt) for p in pairs]
    base, source = (corrupt, clean) if cfg.direction == "denoise" else (clean, corrupt)
    buckets: dict[int, list[int]] = {}
    for i, p in enumerate(pairs):
        buckets.setdefault(len(p.clean), []).append(i)
    return cfg, heads, targets(pairs, cfg.metric), base, source, buckets


def rows_per_forward(model, config: PatchConfig, n_tokens: int, keep: int) -> int:
    """Batch rows per forward: ``config.batch_rows``, else ``max_batch_gb`` over an estimate of one row's float32
    activations (``n_tokens x (12 d_model + 3 d_ff + n_heads n_tokens)`` plus ``keep x vocab`` logits)."""
    if config.batch_rows is not None:
        return config.batch_rows
    c = model.card
    hc = getattr(model.hf.config, "text_config", model.hf.config)
    ff = getattr(hc, "intermediate_size", None) or 4 * c.d_model
    per_row = 4 * (n_tokens * (12 * c.d_model + 3 * ff + c.n_heads * n_tokens) + keep * c.vocab_size)
    return max(1, int(config.max_batch_gb * 1e9 // per_row))


# --------------------------------------------------------------------------------------------
# unpatched runs
# --------------------------------------------------------------------------------------------


@dataclass
class RunCache:
    """One unpatched run of a bucket of prompts (``run_cached``).

    Attributes:
        metric: ``[pair]`` float64. resid: ``[layer, pair, pos, d_model]`` ``resid_pre`` of every layer (or None).
        z: ``[layer, pair, pos, head, d_head]`` every ``head_out`` (or None). as_tuple: the decoder layers return
            tuples (for ``start_at``). Tensors in the model's dtype, on its device.
    """

    metric: np.ndarray
    resid: torch.Tensor | None
    z: torch.Tensor | None
    as_tuple: bool


def run_cached(model, tokens: Sequence[torch.Tensor], t: Targets, pidx: Sequence[int], rows: int, *,
               resid: bool = False, z: bool = False) -> RunCache:
    """Plain forwards of ``tokens`` (the prompts of pairs ``pidx``, one length), ``rows`` prompts per forward,
    recording what ``resid`` / ``z`` ask for (see ``RunCache``)."""
    L = model.card.n_layers
    ids = torch.stack([tokens[i] for i in pidx])
    P = ids.shape[0]
    store: dict[str, torch.Tensor] = {}
    cur = {"s": 0, "tuple": False}

    def keep(name: str, l: int):
        def fn(x, _ctx):
            if name not in store:
                store[name] = x.new_empty((L, P) + tuple(x.shape[1:]))
            store[name][l, cur["s"]:cur["s"] + x.shape[0]] = x
        return fn

    edits = [record(("resid_pre", l), keep("resid", l)) for l in range(L)] if resid else []
    if resid:
        edits.append(record(("resid_post", L - 1), lambda x, ctx: cur.__setitem__("tuple", bool(ctx.tuple_output))))
    edits += [record(("head_out", l), keep("z", l)) for l in range(L)] if z else []
    out = np.zeros(P)
    pt = torch.as_tensor(list(pidx))
    with torch.inference_mode(), edit(model, *edits):
        for s in range(0, P, rows):
            cur["s"] = s
            logits = model.hf(ids[s:s + rows].to(model.device), use_cache=False, logits_to_keep=t.keep).logits
            out[s:s + rows] = metric_of(logits, t, pt[s:s + rows]).double().cpu().numpy()
    return RunCache(out, store.get("resid"), store.get("z"), cur["tuple"])


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


def _stats(per_pair: np.ndarray, clean: np.ndarray, corrupt: np.ndarray, cfg: PatchConfig) -> dict[str, np.ndarray]:
    lo, hi = recovered_interval(per_pair, clean, corrupt, cfg.bootstrap, cfg.seed)
    return {"ld": per_pair.mean(1), "recovered": recovered(per_pair, clean, corrupt), "recovered_lo": lo, "recovered_hi": hi}


def head_table(order: Sequence[tuple], per_pair: np.ndarray, clean: np.ndarray, corrupt: np.ndarray,
               cfg: PatchConfig) -> pd.DataFrame:
    """The table of ``order`` (``(layer, head)`` or ``(layer, head, pos)`` rows): ``COLUMNS`` / ``POS_COLUMNS``."""
    cols = POS_COLUMNS if cfg.positions == "each" else COLUMNS
    keys = {k: [int(r[i]) for r in order] for i, k in enumerate(cols[:3 if cfg.positions == "each" else 2])}
    t = pd.DataFrame({**keys, "direction": cfg.direction, **_stats(per_pair, clean, corrupt, cfg)})
    return t[list(cols)]


def _meta(model, cfg: PatchConfig, pairs: Sequence[Pair], method: str, clean: np.ndarray, corrupt: np.ndarray,
          secs: float, extra: dict) -> dict:
    c = asdict(cfg)
    c["heads"] = "all" if cfg.heads is None else [f"{l}:{h}" for l, h in cfg.heads]
    short = "ld" if cfg.metric == "logit_diff" else "nll"
    m = {"model": model.card.name, "method": method, "metric": cfg.metric, "direction": cfg.direction,
         "positions": cfg.positions, "pairs": len(pairs), "tokens": sorted({len(p.clean) for p in pairs}),
         f"clean_{short}": float(clean.mean()), f"corrupt_{short}": float(corrupt.mean()),
         "clean_metric": [float(x) for x in clean], "corrupt_metric": [float(x) for x in corrupt],
         "config": c, "seconds": secs, "device": str(model.device), **extra}
    if cfg.metric == "logit_diff":
        m.update(clean_accuracy=float((clean > 0).mean()), corrupt_accuracy=float((corrupt > 0).mean()))
    return m


def _rows(cfg: PatchConfig, heads: Sequence[tuple[int, int]], n_tokens: int) -> list[tuple]:
    """Table rows in order: ``(layer, head)`` or, with ``positions="each"``, ``(layer, head, pos)``."""
    if cfg.positions == "each":
        return [(l, h, i) for l, h in heads for i in range(n_tokens)]
    return [(l, h) for l, h in heads]


# --------------------------------------------------------------------------------------------
# activation patching: the fast path
# --------------------------------------------------------------------------------------------


def _groups(chunk: Sequence[tuple]) -> dict[tuple, tuple[list[int], list[int]]]:
    """Rows ``(a, b, pair)`` of one forward grouped by ``(a, b)`` (one edit each): ``{(a, b): (rows, pairs)}``."""
    out: dict[tuple, tuple[list[int], list[int]]] = {}
    for i, (a, b, p) in enumerate(chunk):
        rows, ps = out.setdefault((a, b), ([], []))
        rows.append(i)
        ps.append(p)
    return out


def _patch_edits(layer: int, chunk: Sequence[tuple[int, int | None, int]], src_z: torch.Tensor) -> list[Edit]:
    """``replace`` edits of ``head_out[layer]`` for a chunk of rows ``(head, pos or None, pair)``: row ``i`` gets its
    pair's source value of its head (at its position, or every position); one edit per (head, position) with ``rows=``.

    ``src_z``: ``[layer, pair, pos, head, d_head]`` of the bucket."""
    out = []
    for (h, pos), (rows, ps) in _groups(chunk).items():
        ps = torch.tensor(ps, device=src_z.device)
        if pos is None:
            out.append(replace(("head_out", layer), src_z[layer, ps][:, :, [h]], rows=rows, heads=[h]))
        else:
            out.append(replace(("head_out", layer), src_z[layer, ps, pos, h][:, None, None], rows=rows, heads=[h], positions=[pos]))
    return out


def unit_path(folder, layer: int, n_tokens: int):
    """Where ``patch_heads(store=folder)`` keeps a finished layer of the pairs of one token length:
    ``folder/layer-LLL-len-NNNNN.npz`` (``interp.io.write_arrays_atomic``) holding ``per_pair`` ``[row, pair]`` (the
    layer's rows in table order, the bucket's pairs in order) and the bucket's unpatched ``clean`` / ``corrupt``
    ``[pair]``, all float64."""
    from pathlib import Path

    return Path(folder) / f"layer-{layer:03d}-len-{n_tokens:05d}.npz"


def read_unit(path, rows: int, pairs: int) -> dict:
    """A patching unit (``unit_path``; path patching's ``path_patching.unit_path`` holds the same arrays) with
    ``per_pair`` ``[rows, pairs]`` and ``clean`` / ``corrupt`` ``[pairs]``.

    Raises:
        CorruptStateError: missing, unreadable or of other shapes (``interp.experiments.units.keep_units`` then redoes
            the unit).
    """
    from interp.io import read_arrays

    got = read_arrays(path, per_pair=(rows, pairs), clean=(pairs,), corrupt=(pairs,))
    if got is None:
        raise CorruptStateError(f"patching unit {path} cannot be read or has other shapes")
    return got


def patch_heads(model, pairs: Sequence[Pair], config: PatchConfig | None = None, *, progress: bool = False,
                log: Callable[[str], None] | None = None, store=None,
                stop_on: tuple[type[BaseException], ...] = ()) -> PatchResult:
    """Every chosen head's activation patching result by the fast path (module docstring).

    Args:
        model: a ``LoadedModel``.
        pairs: tokenised pairs (``interp.experiments.patch_tasks``: ``tokenize_pairs`` / ``task_pairs``).
        config: ``PatchConfig`` (default: every head, denoise, all positions, logit difference).
        progress: a tqdm bar over patched rows; log: where to report the unpatched passes' time.
        store: a folder that keeps each finished layer of each token length (``unit_path``) and from which finished
            ones are read back instead of run (a layer's runs depend only on the unpatched passes, so the numbers are
            equal; a token length whose layers are all finished skips its unpatched passes too). ``interp patch
            --resume`` passes one.
        stop_on: exception types (e.g. ``interp.cli.longrun.Interrupted``) that end the run early: the layer in flight
            is dropped and the result holds the rows of the layers finished for every token length, with
            ``meta["partial"] = "K of N layers"`` (no row: ``table`` empty).

    Returns:
        ``PatchResult``: ``table`` with ``COLUMNS`` (``POS_COLUMNS`` for ``positions="each"``), sorted by layer, head
        (and position); ``per_pair`` ``[row, pair]``.

    Raises:
        ConfigError: bad settings (``PatchConfig.check``), no pairs, a pair of unequal lengths, pairs of several
            lengths with ``positions="each"``, ``logit_diff`` pairs without answer tokens.
    """
    from interp.io import read_arrays, write_arrays_atomic

    cfg, heads, t, base_tok, src_tok, buckets = _setup(model, pairs, config)
    P = len(base_tok)
    order = _rows(cfg, heads, len(base_tok[0]))
    index = {r: i for i, r in enumerate(order)}
    per_pair, clean, corrupt = np.zeros((len(order), P)), np.zeros(P), np.zeros(P)
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)
    t0 = time.perf_counter()
    t_pass, rows_used = 0.0, 0
    bar = _progress(len(order) * P, progress, f"patch {model.card.name}")
    done: dict[int, int] = {}  # layer -> token lengths finished
    stopped: BaseException | None = None
    pending: tuple[int, int, int] | None = None  # (layer, token length, done[layer] before) of the unit being written
    try:
        for N, pidx in buckets.items():
            B = rows_per_forward(model, cfg, N, t.keep)
            rows_used = max(rows_used, B)
            poss = range(N) if cfg.positions == "each" else [None]
            rows = {l: [index[(l, h) if pos is None else (l, h, pos)] for h in by_layer[l] for pos in poss] for l in by_layer}
            ready = {}
            if store is not None:
                for l in sorted(by_layer):
                    got = read_arrays(unit_path(store, l, N), per_pair=(len(rows[l]), len(pidx)), clean=(len(pidx),),
                                      corrupt=(len(pidx),))
                    if got is not None:
                        ready[l] = got
            base = src = None
            if len(ready) < len(by_layer):
                s0 = time.perf_counter()
                base = run_cached(model, base_tok, t, pidx, B, resid=True)
                src = run_cached(model, src_tok, t, pidx, B, z=True)
                dt = time.perf_counter() - s0
                t_pass += dt
                if log:
                    log(f"unpatched passes of {len(pidx)} pairs x {N} tokens: {dt:.1f} s")
                _store_unpatched(cfg, pidx, base, src, clean, corrupt)
            else:  # every layer of this length finished: its unpatched metric is in the units
                first = ready[min(ready)]
                clean[pidx], corrupt[pidx] = first["clean"], first["corrupt"]
            pt = torch.tensor(pidx)
            for l in sorted(by_layer):
                if l in ready:
                    per_pair[np.ix_(rows[l], pidx)] = ready[l]["per_pair"]
                    done[l] = done.get(l, 0) + 1
                    bar.update(len(rows[l]) * len(pidx))
                    continue
                jobs = [(h, pos, p) for h in by_layer[l] for pos in poss for p in range(len(pidx))]
                for s in range(0, len(jobs), B):
                    chunk = jobs[s:s + B]
                    local = torch.tensor([p for _, _, p in chunk])
                    with torch.inference_mode(), edit(model, *_patch_edits(l, chunk, src.z)), start_at(model, l, base.as_tuple):
                        logits = model.hf(inputs_embeds=base.resid[l, local.to(base.resid.device)], use_cache=False,
                                          logits_to_keep=t.keep).logits
                    vals = metric_of(logits, t, pt[local]).double().cpu().numpy()
                    for i, (h, pos, p) in enumerate(chunk):
                        per_pair[index[(l, h) if pos is None else (l, h, pos)], pidx[p]] = vals[i]
                    bar.update(len(chunk))
                if store is not None:
                    pending = (l, N, done.get(l, 0))
                    write_arrays_atomic(unit_path(store, l, N), per_pair=per_pair[np.ix_(rows[l], pidx)],
                                        clean=clean[pidx], corrupt=corrupt[pidx])
                done[l] = done.get(l, 0) + 1
            del base, src
    except stop_on as err:
        stopped = err
        if pending is not None and done.get(pending[0], 0) == pending[2] and unit_path(store, *pending[:2]).exists():
            done[pending[0]] = pending[2] + 1  # stopped after the unit was renamed into place: it is finished
    finally:
        bar.close()
    secs = time.perf_counter() - t0
    meta = _meta(model, cfg, pairs, "exact", clean, corrupt, secs, {"unpatched_passes": t_pass, "patching": secs - t_pass,
                                                                  "rows_per_forward": rows_used})
    if stopped is not None:
        finished = {l for l, k in done.items() if k == len(buckets)}
        keep = [r for r, key in enumerate(order) if key[0] in finished]
        order, per_pair = [order[r] for r in keep], per_pair[keep]
        meta.update(partial=f"{len(finished)} of {len(by_layer)} layers", stopped_by=str(stopped))
    return PatchResult(head_table(order, per_pair, clean, corrupt, cfg), per_pair, clean, corrupt, meta, stopped)


def _store_unpatched(cfg: PatchConfig, pidx: Sequence[int], base: RunCache, src: RunCache, clean: np.ndarray,
                     corrupt: np.ndarray) -> None:
    """Write a bucket's unpatched clean / corrupt metric (base and source, by direction) into the full arrays."""
    c, k = (src.metric, base.metric) if cfg.direction == "denoise" else (base.metric, src.metric)
    clean[list(pidx)], corrupt[list(pidx)] = c, k


def naive_patch_heads(model, pairs: Sequence[Pair], config: PatchConfig | None = None, *, progress: bool = False) -> PatchResult:
    """The table of ``patch_heads`` by the plain loop (the reference the fast path is tested against, and the
    baseline of ``analyses/benchmarks/patch_cost.py``): per pair, one full forward of the source prompt caching every
    ``head_out`` (``interp.hooks.edit.cache``), then one full forward of the whole model on the base prompt per head
    (and position) inside a ``replace`` edit. Arguments, returns and errors as ``patch_heads``."""
    cfg, heads, t, base_tok, src_tok, _ = _setup(model, pairs, config)
    P, L = len(base_tok), model.card.n_layers
    order = _rows(cfg, heads, len(base_tok[0]))
    per_pair, clean, corrupt = np.zeros((len(order), P)), np.zeros(P), np.zeros(P)
    t0 = time.perf_counter()
    bar = _progress(len(order) * P, progress, f"patch (naive) {model.card.name}")

    def run(ids: torch.Tensor, p: int) -> float:
        logits = model.hf(ids[None].to(model.device), use_cache=False, logits_to_keep=t.keep).logits
        return float(metric_of(logits, t, torch.tensor([p]))[0])

    try:
        with torch.inference_mode():
            for p in range(P):
                with cache(model, [f"head_out[{l}]" for l in range(L)]) as c:
                    m_src = run(src_tok[p], p)
                m_base = run(base_tok[p], p)
                clean[p], corrupt[p] = (m_src, m_base) if cfg.direction == "denoise" else (m_base, m_src)
                for r, key in enumerate(order):
                    l, h = key[0], key[1]
                    z = c[f"head_out[{l}]"]  # [1, pos, head, d_head]
                    e = (replace(("head_out", l), z[:, :, [h]], heads=[h]) if len(key) == 2 else
                         replace(("head_out", l), z[:, [key[2]]][:, :, [h]], heads=[h], positions=[key[2]]))
                    with edit(model, e):
                        per_pair[r, p] = run(base_tok[p], p)
                    bar.update(1)
    finally:
        bar.close()
    secs = time.perf_counter() - t0
    return PatchResult(head_table(order, per_pair, clean, corrupt, cfg), per_pair, clean, corrupt,
                       _meta(model, cfg, pairs, "naive", clean, corrupt, secs, {}))


# --------------------------------------------------------------------------------------------
# attribution patching
# --------------------------------------------------------------------------------------------


def base_gradients(model, tokens: torch.Tensor, t: Targets, pidx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """One forward and one backward of a batch of base prompts: every head's output, the metric's gradient there, and
    the metric.

    Args:
        tokens: ``[pair, pos]`` ids; pidx: ``[pair]`` indices into ``t``.

    Returns:
        ``(z, grad, metric)``: ``z`` and ``grad`` ``[layer, pair, pos, head, d_head]`` float32 (``d metric_p / d z_p``:
        rows are independent, so the gradient of the summed metric is each pair's own), ``metric`` ``[pair]`` float64.
    """
    hf, L = model.hf, model.card.n_layers
    seen: dict = {}
    with _frozen(hf), torch.enable_grad(), edit(model, *(record(("head_out", l), seen) for l in range(L))):
        ids = tokens.to(model.device)
        emb = hf.get_input_embeddings()(ids).detach().requires_grad_(True)  # parameters frozen: the graph starts here
        m = metric_of(hf(inputs_embeds=emb, use_cache=False, logits_to_keep=t.keep).logits, t, pidx)
        zs = [seen[f"head_out[{l}]"] for l in range(L)]
        grads = torch.autograd.grad(m.sum(), zs)
    z = torch.stack([x.detach() for x in zs]).float()
    return z, torch.stack(grads).float(), m.detach().double().cpu().numpy()


def attribution_patch_heads(model, pairs: Sequence[Pair], config: PatchConfig | None = None, *,
                            progress: bool = False) -> PatchResult:
    """Every chosen head's attribution patching estimate (module docstring): one source forward and one base forward
    and backward per batch of pairs, for all heads at once (plus one plain base forward, so that the unpatched clean
    and corrupt metric are computed exactly as by ``patch_heads``: with clean == corrupt their gap is exactly 0).
    Arguments, returns and errors as ``patch_heads`` (``meta["method"] = "attribution"``)."""
    cfg, heads, t, base_tok, src_tok, buckets = _setup(model, pairs, config)
    P = len(base_tok)
    order = _rows(cfg, heads, len(base_tok[0]))
    li = torch.tensor([r[0] for r in order])
    hi = torch.tensor([r[1] for r in order])
    per_pair, clean, corrupt = np.zeros((len(order), P)), np.zeros(P), np.zeros(P)
    t0 = time.perf_counter()
    for N, pidx in buckets.items():
        B = rows_per_forward(model, cfg, N, t.keep)
        src = run_cached(model, src_tok, t, pidx, B, z=True)
        _store_unpatched(cfg, pidx, run_cached(model, base_tok, t, pidx, B), src, clean, corrupt)
        for s in range(0, len(pidx), B):
            part = pidx[s:s + B]
            z, g, m_base = base_gradients(model, torch.stack([base_tok[i] for i in part]), t, torch.tensor(part))
            d = ((src.z[:, s:s + B].float() - z) * g).sum(-1)  # [layer, pair, pos, head]
            d = d.permute(0, 3, 1, 2).double().cpu()  # [layer, head, pair, pos]
            if cfg.positions == "each":
                pos = torch.tensor([r[2] for r in order])
                est = d[li, hi, :, pos]  # [row, pair]
            else:
                est = d.sum(-1)[li, hi]
            per_pair[:, part] = est.numpy() + m_base[None]
    secs = time.perf_counter() - t0
    return PatchResult(head_table(order, per_pair, clean, corrupt, cfg), per_pair, clean, corrupt,
                       _meta(model, cfg, pairs, "attribution", clean, corrupt, secs, {}))


# --------------------------------------------------------------------------------------------
# patching whole sites (closed-form checks, residual-stream patching)
# --------------------------------------------------------------------------------------------


def patch_sites(model, pairs: Sequence[Pair], sites: Sequence[str], config: PatchConfig | None = None) -> PatchResult:
    """Patch whole sites (``"resid_pre[3]"``, ``"attn_out[1]"``, ``"mlp_out[0]"``, any ``interp.hooks.sites`` name)
    from the source run into the base run at every position: TransformerLens' ``get_act_patch_resid_pre`` and kin.
    Full forwards, pairs of a length batched as rows. Patching ``resid_pre[l]`` hands the whole state over, so it
    recovers exactly 1 (a test of the bookkeeping). ``config.heads`` / ``positions`` are ignored.

    Returns:
        ``PatchResult`` with ``SITE_COLUMNS``.

    Raises:
        ConfigError: as ``patch_heads``, or an unknown site.
    """
    cfg, _, t, base_tok, src_tok, buckets = _setup(model, pairs, config)
    sites = [parse_site(s, model.card.n_layers) for s in sites]
    cfg = PatchConfig(**{**asdict(cfg), "positions": "all", "heads": None})
    P = len(base_tok)
    per_pair, clean, corrupt = np.zeros((len(sites), P)), np.zeros(P), np.zeros(P)
    t0 = time.perf_counter()
    for N, pidx in buckets.items():
        B = rows_per_forward(model, cfg, N, t.keep)
        for s in range(0, len(pidx), B):
            part = pidx[s:s + B]
            pt = torch.tensor(part)
            ids = [torch.stack([x[i] for i in part]).to(model.device) for x in (base_tok, src_tok)]
            with torch.inference_mode():
                with cache(model, sites) as c:
                    m_src = metric_of(model.hf(ids[1], use_cache=False, logits_to_keep=t.keep).logits, t, pt)
                m_base = metric_of(model.hf(ids[0], use_cache=False, logits_to_keep=t.keep).logits, t, pt)
                for r, site in enumerate(sites):
                    with edit(model, replace(site, c[str(site)])):
                        per_pair[r, part] = metric_of(model.hf(ids[0], use_cache=False, logits_to_keep=t.keep).logits,
                                                      t, pt).double().cpu().numpy()
            src_m, base_m = m_src.double().cpu().numpy(), m_base.double().cpu().numpy()
            clean[part], corrupt[part] = (src_m, base_m) if cfg.direction == "denoise" else (base_m, src_m)
    t_ = pd.DataFrame({"site": [str(s) for s in sites], "direction": cfg.direction, **_stats(per_pair, clean, corrupt, cfg)})
    return PatchResult(t_[list(SITE_COLUMNS)], per_pair, clean, corrupt,
                       _meta(model, cfg, pairs, "sites", clean, corrupt, time.perf_counter() - t0, {}))
