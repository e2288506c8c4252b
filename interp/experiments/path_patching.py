"""Path patching (Wang et al. 2022, "Interpretability in the Wild", Sec. 3.1 and App. B): the effect of a sender head
on a receiver head through the receiver's query, key or value alone, each sender separately.

(1) Run the base prompt with
``s``'s ``head_out`` from the source run and every other head's ``head_out`` frozen at its base value; record the
receivers' ``q_rot`` (query head ``r``), ``k_rot`` and ``v`` (the kv head ``r`` reads). MLPs are not frozen: they
recompute from the patched residual stream, so the sender reaches a receiver directly and through every MLP in
between (as in Wang et al.). (2) Run the base prompt with only that receiver input replaced (keys and values for
query head ``r`` alone, ``per_query_head=True``: GQA siblings keep theirs) and everything downstream free; measure
the metric; ``recovered`` as above. Receivers: every head in a later layer than the sender, or the given heads
(those after the sender). Step (1) starts at the sender's layer, step (2) at the receiver's: per sender and batch of
pairs one forward, then one row per receiver, input and pair.

Pairs, metric, directions, ``recovered`` and the cached runs are those of ``interp.experiments.patching``.
Sits above the intervention layer (``interp.hooks.edit``): it never registers hooks itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from interp.errors import ConfigError
from interp.experiments.effects import _progress
from interp.experiments.patch_tasks import Pair
from interp.experiments.patching import (PatchConfig, PatchResult, RunCache, _groups, _meta, _setup, _store_unpatched,
                                         metric_of, read_unit, rows_per_forward, run_cached)
from interp.experiments.stats import recovered
from interp.hooks.edit import Edit, edit, record, replace, start_at
from interp.hooks.heads import check_heads

VIAS = ("q", "k", "v")
PATH_COLUMNS = ("sender_layer", "sender_head", "receiver_layer", "receiver_head", "via", "recovered")
_VIA_SITE = {"q": "q_rot", "k": "k_rot", "v": "v"}


def receivers_of(sender: tuple[int, int], receivers: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The receivers that can hear ``sender``: those in later layers, sorted."""
    return sorted(r for r in receivers if r[0] > sender[0])


def sender_inputs(model, sender: tuple[int, int], base: RunCache, src_z: torch.Tensor, local: torch.Tensor,
                  layers: Sequence[int]) -> dict[str, torch.Tensor]:
    """Path patching's step 1 for one sender and a batch of pairs: the base run from the sender's layer with the
    sender's ``head_out`` from the source run and every other head's frozen at its base value (MLPs recomputed).

    Args:
        base: the bucket's base run (``resid`` and ``z``); src_z: the source run's ``[layer, pair, pos, head, d_head]``;
        local: ``[row]`` pair indices into the bucket; layers: the receivers' layers.

    Returns:
        ``{"q_rot[l]": [row, pos, head, d_head], "k_rot[l]" / "v[l]": [row, pos, kv_head, d_head]}`` for ``l`` in
        ``layers``.
    """
    ls, hs = sender
    L = model.card.n_layers
    dev = base.z.device
    local = local.to(dev)
    seen: dict = {}
    recs = [record((site, l), seen) for l in sorted(set(layers)) for site in _VIA_SITE.values()]
    with torch.inference_mode():
        frozen = []
        for l in range(ls, L):
            z = base.z[l, local].clone()
            if l == ls:
                z[:, :, hs] = src_z[l, local, :, hs]
            frozen.append(replace(("head_out", l), z))
        with edit(model, *frozen, *recs), start_at(model, ls, base.as_tuple):
            model.hf(inputs_embeds=base.resid[ls, local], use_cache=False, logits_to_keep=1)
    return seen


def _receiver_edits(layer: int, chunk: Sequence[tuple[int, str, int]], inputs: dict[str, torch.Tensor],
                    n_heads: int, n_kv: int) -> list[Edit]:
    """Step 2's edits for rows ``(receiver head, via, pair row of inputs)``: that receiver's query, or its key / value
    as it alone reads them (``per_query_head``); one edit per (head, via) with ``rows=``."""
    out = []
    for (h, via), (rows, ps) in _groups(chunk).items():
        x = inputs[f"{_VIA_SITE[via]}[{layer}]"]
        col = h if via == "q" else h // (n_heads // n_kv)
        val = x[torch.tensor(ps, device=x.device)][:, :, [col]]  # [rows, pos, 1, d_head]
        out.append(replace((_VIA_SITE[via], layer), val, rows=rows, heads=[h], per_query_head=via != "q"))
    return out


def unit_path(folder, sender: tuple[int, int], n_tokens: int):
    """Where ``path_patch(store=folder)`` keeps a finished sender for the pairs of one token length:
    ``folder/path-LLL-HH-len-NNNNN.npz`` (``interp.io.write_arrays_atomic``) holding ``per_pair`` ``[row, pair]`` (the
    sender's rows in table order, the bucket's pairs in order) and the bucket's unpatched ``clean`` / ``corrupt``
    ``[pair]``, all float64."""
    from pathlib import Path

    return Path(folder) / f"path-{sender[0]:03d}-{sender[1]:02d}-len-{n_tokens:05d}.npz"


def path_patch(model, pairs: Sequence[Pair], senders: Sequence[tuple[int, int]], config: PatchConfig | None = None, *,
               vias: Sequence[str] = VIAS, progress: bool = False, store=None,
               stop_on: tuple[type[BaseException], ...] = ()) -> PatchResult:
    """Path patching from each sender to each receiver through its query, key or value (module docstring).

    Args:
        model: a ``LoadedModel``; pairs: tokenised pairs.
        senders: ``(layer, head)`` pairs, each patched on its own.
        config: ``PatchConfig``; ``heads`` are the receivers (None: every head), ``positions`` must be ``all``.
        vias: the receiver inputs, a subset of ``VIAS`` (``q``, ``k``, ``v``).
        progress: a tqdm bar over step-2 rows.
        store: a folder that keeps each finished sender of each token length (``unit_path``; through
            ``interp.experiments.units.keep_units``: written atomically and read back) and from which finished ones
            are read back instead of run (a sender's rows depend only on the unpatched passes; a token length whose
            senders are all finished skips its unpatched passes). ``interp patch --paths --resume`` passes one.
        stop_on: exception types (e.g. ``interp.cli.longrun.Interrupted``) that end the run early: the sender in
            flight is dropped (one stopped after its unit's rename counts) and the result holds the rows of the
            senders finished for every token length, with ``meta["partial"] = "K of N senders"`` and ``stopped`` set.

    Returns:
        ``PatchResult`` with ``PATH_COLUMNS`` (sender, receiver, via order); ``per_pair`` ``[row, pair]`` patched
        metric.

    Raises:
        ConfigError: no senders, a sender outside the grid, ``positions="each"``, an unknown via, no receiver after
            any sender, or as ``patch_heads``.
    """
    from interp.experiments.units import keep_units
    from interp.io import write_arrays_atomic

    cfg, receivers, t, base_tok, src_tok, buckets = _setup(model, pairs, config)
    c = model.card
    if cfg.positions != "all":
        raise ConfigError("path patching replaces a receiver's input at every position; use --positions all")
    senders = sorted(check_heads(senders, c.n_layers, c.n_heads)) if senders else []
    if not senders:
        raise ConfigError("--paths needs at least one sender head LAYER:HEAD")
    bad = [v for v in vias if v not in VIAS]
    if bad or not vias:
        raise ConfigError(f"unknown receiver input {bad[0] if bad else '(none)'}; use q, k and / or v")
    order = [(s, r, v) for s in dict.fromkeys(senders) for r in receivers_of(s, receivers) for v in vias]
    if not order:
        raise ConfigError(f"no receiver after the senders {', '.join(f'{l}:{h}' for l, h in senders)}: receivers must sit "
                          f"in later layers")
    index = {k: i for i, k in enumerate(order)}
    senders = list(dict.fromkeys(senders))
    rows_of = {s: [index[(s, r, v)] for r in receivers_of(s, receivers) for v in vias] for s in senders}
    P = len(base_tok)
    per_pair, clean, corrupt = np.zeros((len(order), P)), np.zeros(P), np.zeros(P)
    t0 = time.perf_counter()
    bar = _progress(len(order) * P, progress, f"path patching {c.name}")
    done = dict.fromkeys(senders, 0)  # sender -> token lengths finished
    stopped: BaseException | None = None
    try:
        for N, pidx in buckets.items():
            B = rows_per_forward(model, cfg, N, t.keep)
            names = {unit_path(".", s, N).name: s for s in senders}

            def compute(todo: list[str], N=N, pidx=pidx, B=B):
                if not todo:
                    return
                base = run_cached(model, base_tok, t, pidx, B, resid=True, z=True)
                src = run_cached(model, src_tok, t, pidx, B, z=True)
                _store_unpatched(cfg, pidx, base, src, clean, corrupt)
                for name in todo:
                    s = names[name]
                    _sender_rows(model, s, receivers_of(s, receivers), vias, base, src, pidx, B, t, index, per_pair, bar)
                    yield name, {"per_pair": per_pair[np.ix_(rows_of[s], pidx)], "clean": clean[pidx],
                                 "corrupt": corrupt[pidx]}

            def load(path, pidx=pidx):
                return read_unit(path, len(rows_of[names[path.name]]), len(pidx))

            got, stopped = keep_units(Path(store) if store is not None else None, list(names), compute, load,
                                      lambda path, res: write_arrays_atomic(path, **res), stop_on=stop_on)
            for name, g in got.items():
                s = names[name]
                per_pair[np.ix_(rows_of[s], pidx)] = g["per_pair"]
                clean[pidx], corrupt[pidx] = g["clean"], g["corrupt"]
                done[s] += 1
            if stopped is not None:
                break
    finally:
        bar.close()
    meta = _meta(model, cfg, pairs, "path", clean, corrupt, time.perf_counter() - t0,
                 {"senders": [f"{l}:{h}" for l, h in senders], "vias": list(vias)})
    if stopped is not None:
        finished = {s for s, k in done.items() if k == len(buckets)}
        keep = [r for r, key in enumerate(order) if key[0] in finished]
        order, per_pair = [order[r] for r in keep], per_pair[keep]
        meta.update(partial=f"{len(finished)} of {len(senders)} senders", stopped_by=str(stopped))
    rec = recovered(per_pair, clean, corrupt)
    table = pd.DataFrame({"sender_layer": [s[0] for s, _, _ in order], "sender_head": [s[1] for s, _, _ in order],
                          "receiver_layer": [r[0] for _, r, _ in order], "receiver_head": [r[1] for _, r, _ in order],
                          "via": [v for _, _, v in order], "recovered": rec})
    return PatchResult(table[list(PATH_COLUMNS)], per_pair, clean, corrupt, meta, stopped)


def _sender_rows(model, s: tuple[int, int], recv: list[tuple[int, int]], vias: Sequence[str], base: RunCache,
                 src: RunCache, pidx: Sequence[int], B: int, t, index: dict, per_pair: np.ndarray, bar) -> None:
    """Steps 1 and 2 of path patching for sender ``s`` and one token length's pairs ``pidx`` (``B`` rows per forward):
    fills ``per_pair[index[(s, receiver, via)], pair]`` for every receiver in ``recv`` and via."""
    c = model.card
    pt = torch.tensor(pidx)
    for p0 in range(0, len(pidx), B):
        local = torch.arange(p0, min(p0 + B, len(pidx)))
        inputs = sender_inputs(model, s, base, src.z, local, [l for l, _ in recv])
        for lr in sorted({l for l, _ in recv}):
            jobs = [(h, v, i) for (l, h) in recv if l == lr for v in vias for i in range(len(local))]
            for j in range(0, len(jobs), B):
                chunk = jobs[j:j + B]
                rows_pair = local[[i for _, _, i in chunk]]
                with torch.inference_mode(), edit(model, *_receiver_edits(lr, chunk, inputs, c.n_heads, c.n_kv_heads)), \
                        start_at(model, lr, base.as_tuple):
                    logits = model.hf(inputs_embeds=base.resid[lr, rows_pair.to(base.resid.device)], use_cache=False,
                                      logits_to_keep=t.keep).logits
                vals = metric_of(logits, t, pt[rows_pair]).double().cpu().numpy()
                for k, (h, v, i) in enumerate(chunk):
                    per_pair[index[(s, (lr, h), v)], pidx[int(local[i])]] = vals[k]
                bar.update(len(chunk))
