"""Causal head effects: what the model loses, in next-token loss, when one head is zeroed, mean-ablated, streamed
(A-shape), or has RoPE planes unrotated (Michel et al. 2019; Voita et al. 2019; DuoAttention, Xiao et al. 2024).

For every chosen head ``(layer, head)`` and intervention (``interp.hooks.heads.head_intervention``) on prompts of
equal length ``N``:

- ``dnll``: mean next-token negative log-likelihood (nats per prediction, over all ``P * (N - 1)`` predictions) with
  the intervention minus without;
- ``dnll_lo``, ``dnll_hi``: the 2.5 / 97.5 percentiles of ``dnll`` over ``bootstrap`` resamples of the prompts
  (percentile bootstrap, seeded; one set of resamples shared by every row, so rows stay comparable);
- ``kl``: mean over the same predictions of ``KL(clean || intervened)`` of the next-token distribution (nats).

Interventions: ``zero``, ``mean`` (reference: every position of every prompt of the run, one clean pass),
``streaming`` (keys ``0..sink-1`` and the last ``window`` keys), ``rope_high`` / ``rope_medium`` / ``rope_low``
(the head's planes of one band left unrotated, ``n_remove`` of them as in paper 004 Table 5) and ``nope`` (all
planes).

**Fast path (``head_effects``).** One clean pass caches the residual stream at the input of every layer (and after
the last), the heads' mean outputs and the clean NLL. A head of layer ``l`` cannot change layers ``0..l-1``, so its
run starts from the cached input of layer ``l`` (``resid_pre`` recorded by ``interp.hooks.edit``): the earlier decoder
layers are pass-throughs while it runs (``interp.hooks.edit.start_at``) (the model's own forward then computes layers ``l..L-1``, final norm and LM head from ``inputs_embeds``), and
many heads of one layer run side by side as batch rows (``head_intervention(..., rows=...)``). The clean next-token
distribution comes from the cached final residual through the same norm and head. ``naive_effects`` runs the full
model once per head, intervention and prompt; the tests hold the two equal to 1e-4 nats.

``score_from`` scores only the predictions of tokens ``score_from..N-1`` (e.g. the second copy of repeated random
tokens); only those positions go through the LM head. ``set_effects`` removes whole sets of heads at once (one batch
row per set, full forwards): the masking tests of Wu et al. and Olsson et al.

Memory: the cached residual stream is ``(L + 1) x P x N x d_model`` floats (SmolLM2, 8 x 512: 0.3 GB); one forward's
logits are ``rows x N x vocab`` floats, and ``max_logits_gb`` bounds the rows per forward.

Sits above the hooks: it calls the model and ``head_intervention``; it never touches the engine.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float

from interp.errors import ConfigError
from interp.experiments.stats import bootstrap_interval
from interp.hooks.edit import edit, record, start_at
from interp.hooks.heads import HeadOutputSums, check_heads, head_intervention

INTERVENTIONS = ("zero", "mean", "streaming", "rope_high", "rope_medium", "rope_low", "nope")
COLUMNS = ("layer", "head", "intervention", "dnll", "dnll_lo", "dnll_hi", "kl")


def parse_interventions(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``"zero,mean,streaming"`` (or a sequence) as a tuple of intervention names, duplicates dropped, order kept.

    Raises:
        ConfigError: an empty list or a name not in ``INTERVENTIONS`` (the message lists them).
    """
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not names:
        raise ConfigError(f"no interventions given; use a comma-separated list of {', '.join(INTERVENTIONS)}")
    for n in names:
        if n not in INTERVENTIONS:
            raise ConfigError(f"unknown intervention {n!r}; use one of {', '.join(INTERVENTIONS)}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class EffectsConfig:
    """Settings of ``head_effects``.

    Attributes:
        interventions: names from ``INTERVENTIONS``.
        heads: ``(layer, head)`` pairs, or None for every head.
        sink, window: ``streaming``'s A-shape (keys ``0..sink-1`` and the last ``window`` keys; DuoAttention uses
            128 / 256 on long contexts, the defaults 4 / 64 fit prompts of a few hundred tokens).
        n_remove: planes per band for ``rope_*`` (paper 004: 6; None: the whole third).
        bootstrap: prompt resamples for ``dnll_lo`` / ``dnll_hi``; seed: their RNG seed.
        max_logits_gb: bound on one forward's logits (rows x pos x vocab float32), which sets rows per forward.
        batch_rows: rows per forward (None: from ``max_logits_gb``).
        score_from: the first target position scored: ``dnll`` and ``kl`` average the predictions of tokens
            ``score_from..N-1`` (1, the default: every prediction; e.g. the second copy of a repeated sequence for
            Olsson et al.'s induction test). Only those positions go through the LM head (``logits_to_keep``).
    """

    interventions: tuple[str, ...] = ("zero", "mean", "streaming")
    heads: tuple[tuple[int, int], ...] | None = None
    sink: int = 4
    window: int = 64
    n_remove: int | None = 6
    bootstrap: int = 1000
    seed: int = 0
    max_logits_gb: float = 1.0
    batch_rows: int | None = None
    score_from: int = 1

    def check(self, n_layers: int | None = None, n_heads: int | None = None, n_tokens: int | None = None) -> "EffectsConfig":
        """Check every setting (against the model's grid and the prompt length where given); returns self.

        Raises:
            ConfigError: one line naming the bad setting and the allowed values.
        """
        parse_interventions(self.interventions)
        if self.heads is not None:
            if not self.heads:
                raise ConfigError("--heads is empty; give 'all' or LAYER:HEAD pairs, e.g. 3:1,17:0")
            if n_layers is not None and n_heads is not None:
                check_heads(self.heads, n_layers, n_heads)
        if "streaming" in self.interventions:
            if self.window < 1:
                raise ConfigError(f"--window must be >= 1 key (the query itself), got {self.window}")
            if self.sink < 0:
                raise ConfigError(f"--sink must be >= 0 keys, got {self.sink}")
            if n_tokens is not None and self.sink > n_tokens:
                raise ConfigError(f"--sink {self.sink} is larger than the prompt ({n_tokens} tokens); use 0..{n_tokens}")
        if self.bootstrap < 0:
            raise ConfigError(f"--bootstrap must be >= 0 resamples, got {self.bootstrap}")
        if self.n_remove is not None and self.n_remove < 1:
            raise ConfigError(f"n_remove must be >= 1 plane (or None for the whole band), got {self.n_remove}")
        if self.batch_rows is not None and self.batch_rows < 1:
            raise ConfigError(f"batch_rows must be >= 1, got {self.batch_rows}")
        if self.score_from < 1 or (n_tokens is not None and self.score_from > n_tokens - 1):
            raise ConfigError(f"score_from must lie in 1..{'N-1' if n_tokens is None else n_tokens - 1} (a target position "
                              f"with a prediction before it), got {self.score_from}")
        if not self.max_logits_gb > 0:
            raise ConfigError(f"max_logits_gb must be > 0, got {self.max_logits_gb}")
        return self


def intervention_kwargs(name: str, config: EffectsConfig, means: torch.Tensor | None = None) -> dict:
    """``head_intervention`` keyword arguments (``kind`` included) of one intervention name."""
    if name.startswith("rope_"):
        return {"kind": "rope_band", "band": name[len("rope_"):], "n_remove": config.n_remove}
    if name == "streaming":
        return {"kind": "streaming", "sink": config.sink, "window": config.window}
    if name == "mean":
        return {"kind": "mean", "means": means}
    return {"kind": name}


@dataclass
class EffectsResult:
    """Result of ``head_effects`` / ``naive_effects``.

    Attributes:
        table: one row per head and intervention, columns ``COLUMNS`` (``layer, head, intervention, dnll, dnll_lo,
            dnll_hi, kl``), sorted by intervention, layer, head.
        per_prompt: ``{"dnll": [row, prompt], "kl": [row, prompt]}`` float64, rows in ``table`` order (per-prompt
            means over its ``N - 1`` predictions).
        clean_nll: mean next-token NLL of the unmodified model (nats per prediction); clean_nll_prompt: ``[prompt]``.
        meta: settings, model, prompt shape, method and seconds (written to ``effects.json``); ``partial`` (``"K of N
            layers"``) when the run was stopped early.
        stopped: the exception of ``head_effects(stop_on=...)`` that stopped the run early, else None.
    """

    table: pd.DataFrame
    per_prompt: dict[str, np.ndarray]
    clean_nll: float
    clean_nll_prompt: np.ndarray
    meta: dict = field(default_factory=dict)
    stopped: BaseException | None = None


# --------------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------------


def clean_dist(logits: Float[torch.Tensor, "pos vocab"]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p, p)`` of the clean next-token distributions at the first ``pos - 1`` positions (float32), kept per
    prompt for ``token_stats``."""
    lc = torch.log_softmax(logits[:-1].float(), -1)
    return lc, lc.exp()


def token_stats(logits: Float[torch.Tensor, "row pos vocab"], clean: Sequence[tuple[torch.Tensor, torch.Tensor]],
                tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the mean over its predictions of ``NLL(intervened) - NLL(clean)`` and of ``KL(clean || intervened)``
    (nats). ``logits`` may hold only the last ``K`` positions (``logits_to_keep=K``): the predictions are then those of
    the last ``K - 1`` tokens (``K = N``: all ``N - 1``).

    Float32, one row at a time (log-softmax, then ``sum p_clean (log p_clean - log p)``): the per-position error is
    about 1e-6 nats, so a KL of identical distributions can read as -1e-6.

    Args:
        logits: ``[row, K, vocab]`` intervened logits of the last ``K`` positions; clean: per row ``clean_dist`` of its
            prompt (from the same ``K`` positions); tokens: ``[row, pos]`` ids.

    Returns:
        ``(dnll [row], kl [row])`` float64.
    """
    dn, kl = np.zeros(logits.shape[0]), np.zeros(logits.shape[0])
    for b in range(logits.shape[0]):
        lp = torch.log_softmax(logits[b, :-1].float(), -1)
        lc, pc = clean[b]
        nxt = tokens[b, tokens.shape[1] - logits.shape[1] + 1:].to(lp.device)[:, None]
        dn[b] = float((lc.gather(1, nxt) - lp.gather(1, nxt)).double().mean())
        kl[b] = float((pc * (lc - lp)).sum(-1).double().mean())
    return dn, kl


def _table(rows: list[tuple[int, int, str]], dn: np.ndarray, kl: np.ndarray, config: EffectsConfig) -> pd.DataFrame:
    lo, hi = bootstrap_interval(dn, config.bootstrap, config.seed)
    t = pd.DataFrame({"layer": [r[0] for r in rows], "head": [r[1] for r in rows], "intervention": [r[2] for r in rows],
                      "dnll": dn.mean(1), "dnll_lo": lo, "dnll_hi": hi, "kl": kl.mean(1)})
    return t[list(COLUMNS)]


def _order(heads: Sequence[tuple[int, int]], interventions: Sequence[str]) -> list[tuple[int, int, str]]:
    return [(l, h, n) for n in interventions for (l, h) in sorted(heads)]


def _setup(model, prompts, config) -> tuple["EffectsConfig", torch.Tensor, list[tuple[int, int]]]:
    """``(checked config, [prompt, pos] tokens, sorted (layer, head) pairs)`` shared by the fast path and the naive loop."""
    cfg = (config or EffectsConfig()).check(model.card.n_layers, model.card.n_heads)
    toks = _prompts(prompts)
    cfg.check(model.card.n_layers, model.card.n_heads, toks.shape[1])
    L, H = model.card.n_layers, model.card.n_heads
    return cfg, toks, sorted(cfg.heads) if cfg.heads is not None else [(l, h) for l in range(L) for h in range(H)]


def kept(config: "EffectsConfig", n_tokens: int) -> dict:
    """``logits_to_keep`` keyword of a forward whose predictions start at ``config.score_from`` (empty for all)."""
    return {} if config.score_from <= 1 else {"logits_to_keep": n_tokens - config.score_from + 1}


def _clean_prompt(model, tokens: torch.Tensor, score_from: int, keep: dict) -> tuple[tuple[torch.Tensor, torch.Tensor], float]:
    """One prompt's clean forward (``tokens [pos]``): its ``clean_dist`` over the scored positions (``keep``:
    ``kept(config, N)``) and its mean NLL of the tokens ``score_from..N-1`` (nats)."""
    cd = clean_dist(model.hf(tokens[None].to(model.device), use_cache=False, **keep).logits[0])
    return cd, float(-cd[0].gather(1, tokens[score_from:, None].to(cd[0].device)).double().mean())


def _prompts(prompts) -> torch.Tensor:
    t = torch.stack([torch.as_tensor(p, dtype=torch.long) for p in prompts]) if not isinstance(prompts, torch.Tensor) else prompts
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 2:
        raise ConfigError(f"prompts must be [prompt, pos] with at least 1 prompt of 2 tokens, got shape {tuple(t.shape)}")
    return t.long()


# --------------------------------------------------------------------------------------------
# the clean pass and running from a layer
# --------------------------------------------------------------------------------------------


@dataclass
class CleanPass:
    """What one clean forward per prompt leaves for the fast path.

    Attributes:
        resid: ``[layer + 1, prompt, pos, d_model]``: input of every decoder layer, then the last layer's output
            (model dtype, model device).
        means: ``[layer, head, d_head]`` mean head outputs over every position of every prompt (``mean`` ablation).
        nll: ``[prompt]`` mean next-token NLL per prompt (nats). as_tuple: the layers return tuples (GPT-J).
    """

    resid: torch.Tensor
    means: torch.Tensor
    nll: np.ndarray
    as_tuple: bool


def clean_pass(model, prompts: torch.Tensor, score_from: int = 1) -> CleanPass:
    """One clean forward per prompt: cache the residual stream at every layer's input and after the last layer, the
    heads' mean outputs and the NLL of the tokens at positions ``score_from..N-1`` (see ``CleanPass``)."""
    L = model.card.n_layers
    P, N = prompts.shape
    resid: torch.Tensor | None = None
    cur = {"p": 0, "tuple": False}

    def keep(l: int):
        def fn(x, ctx):  # x: [1, pos, d_model]
            nonlocal resid
            if resid is None:
                resid = x.new_empty((L + 1, P, N, x.shape[-1]))
            resid[l, cur["p"]] = x[0]
            if l == L:
                cur["tuple"] = bool(ctx.tuple_output)
        return fn

    keeps = [record(("resid_pre", l), keep(l)) for l in range(L)] + [record(("resid_post", L - 1), keep(L))]
    nll = np.zeros(P)
    rec = HeadOutputSums(model)
    with torch.inference_mode(), edit(model, *keeps, *rec.edits()):
        for p in range(P):
            cur["p"] = p
            t = prompts[p].to(model.device)
            logits = model.hf(t[None], use_cache=False).logits[0, score_from - 1:-1].float()
            nll[p] = float(torch.nn.functional.cross_entropy(logits, t[score_from:], reduction="mean"))
    return CleanPass(resid, rec.means(), nll, cur["tuple"])


def _clean_dists(model, clean: CleanPass, prompt_idx: torch.Tensor, keep: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``clean_dist`` of the given prompts, from the cached final residual through the model's own final norm and LM
    head (every layer a pass-through); ``keep``: ``kept(config, N)``."""
    with start_at(model, clean.resid.shape[0] - 1, clean.as_tuple):
        logits = model.hf(inputs_embeds=clean.resid[-1, prompt_idx], use_cache=False, **keep).logits
    return [clean_dist(x) for x in logits]


def _rows_per_forward(config: EffectsConfig, n_tokens: int, vocab: int) -> int:
    if config.batch_rows is not None:
        return config.batch_rows
    return max(1, int(config.max_logits_gb * 1e9 // (n_tokens * vocab * 4)))


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="run", disable=not enabled)


class LayerStore:
    """The finished layers of a ``head_effects`` run, one file per layer in ``folder``: ``layer-LLL.npz`` holding
    ``dnll`` and ``kl``, each ``[row, prompt]`` float64 (the layer's rows of ``EffectsResult.per_prompt``, in table
    order), written atomically (``interp.io.write_atomic``): a layer cut off mid-write has no file and is redone.
    ``interp effects --resume`` passes one, so a resumed run reads the finished layers back and equals an
    uninterrupted one exactly."""

    def __init__(self, folder):
        from pathlib import Path

        self.folder = Path(folder)

    def path(self, layer: int):
        """``folder/layer-LLL.npz``."""
        return self.folder / f"layer-{layer:03d}.npz"

    def load(self, layer: int, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
        """``(dnll, kl)`` of ``layer``, each ``shape`` = ``(rows, prompts)``; None when the layer is not finished, its file
        is unreadable or holds other shapes (then it is redone)."""
        from interp.io import read_arrays

        got = read_arrays(self.path(layer), dnll=tuple(shape), kl=tuple(shape))
        return None if got is None else (got["dnll"], got["kl"])

    def save(self, layer: int, dn: np.ndarray, kl: np.ndarray) -> None:
        """Write ``layer``'s ``dnll`` and ``kl`` (``[row, prompt]`` float64) atomically."""
        from interp.io import write_arrays_atomic

        write_arrays_atomic(self.path(layer), dnll=dn, kl=kl)


def head_effects(model, prompts, config: EffectsConfig | None = None, *, progress: bool = False,
                 means: torch.Tensor | None = None, log: Callable[[str], None] | None = None,
                 store: LayerStore | None = None, stop_on: tuple[type[BaseException], ...] = ()) -> EffectsResult:
    """Every chosen head's causal effect under every intervention, by the fast path (module docstring).

    Args:
        model: a ``LoadedModel``.
        prompts: ``[prompt, pos]`` token ids (equal lengths), or a list of ``[pos]`` tensors.
        config: ``EffectsConfig`` (default: zero, mean, streaming on every head).
        progress: a tqdm bar over (head, intervention, prompt) runs, with ETA.
        means: ``[layer, head, d_head]`` reference outputs for ``mean`` (default: the prompts of the run).
        log: where to report the clean pass's time (e.g. ``print``).
        store: keeps each finished layer (all its heads and interventions) and reads finished layers back instead of
            running them (``LayerStore``; each layer's runs are independent of the others', so the numbers are equal).
        stop_on: exception types (e.g. ``interp.cli.longrun.Interrupted``) that end the run early after the clean pass:
            the layer in flight is dropped and the result holds the finished layers' rows only, with
            ``meta["partial"] = "K of N layers"``.

    Returns:
        ``EffectsResult`` (``table`` with ``COLUMNS``).

    Raises:
        ConfigError: bad settings (``EffectsConfig.check``), prompts not ``[prompt, pos]``.
        UnsupportedModelError: ``streaming`` / ``rope_*`` / ``nope`` on GPT-J.
    """
    cfg, toks, heads = _setup(model, prompts, config)
    L, H = model.card.n_layers, model.card.n_heads
    P, N = toks.shape
    t0 = time.perf_counter()
    clean = clean_pass(model, toks, cfg.score_from)
    keep = kept(cfg, N)
    ref_means = clean.means if means is None else torch.as_tensor(means)
    t_clean = time.perf_counter() - t0
    if log:
        log(f"clean pass: {P} prompts x {N} tokens, residual stream cached, {t_clean:.1f} s")
    order = _order(heads, cfg.interventions)
    index = {r: i for i, r in enumerate(order)}
    dn, kl = np.zeros((len(order), P)), np.zeros((len(order), P))
    B = _rows_per_forward(cfg, N, model.card.vocab_size)
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)
    bar = _progress(len(order) * P, progress, f"effects {model.card.name}")
    dev = clean.resid.device
    cache: dict[int, tuple] = {}  # prompt -> clean_dist, for the prompts of the current chunk
    done: list[int] = []
    stopped: BaseException | None = None
    pending: int | None = None  # the layer whose unit is being written
    try:
        with torch.inference_mode():
            for l in sorted(by_layer):
                rows = [index[(l, h, name)] for name in cfg.interventions for h in by_layer[l]]
                got = store.load(l, (len(rows), P)) if store is not None else None
                if got is not None:
                    dn[rows], kl[rows] = got
                    done.append(l)
                    bar.update(len(rows) * P)
                    continue
                cache = {}  # each layer starts afresh, so its numbers do not depend on which layers ran before it
                jobs = [(p, h) for p in range(P) for h in by_layer[l]]  # prompt-major: a chunk spans few prompts
                for name in cfg.interventions:
                    kw = intervention_kwargs(name, cfg, ref_means)
                    for s in range(0, len(jobs), B):
                        chunk = jobs[s:s + B]
                        need = sorted({p for p, _ in chunk})
                        cache = {p: cache[p] for p in need if p in cache}
                        missing = [p for p in need if p not in cache]
                        if missing:
                            cache.update(zip(missing, _clean_dists(model, clean, torch.tensor(missing, device=dev), keep)))
                        pidx = torch.tensor([p for p, _ in chunk], device=dev)
                        with head_intervention(model, [(l, h) for _, h in chunk], rows=[[i] for i in range(len(chunk))], **kw), \
                                start_at(model, l, clean.as_tuple):
                            logits = model.hf(inputs_embeds=clean.resid[l, pidx], use_cache=False, **keep).logits
                        d1, k1 = token_stats(logits, [cache[p] for p, _ in chunk], toks[pidx.cpu()])
                        for i, (p, h) in enumerate(chunk):
                            r = index[(l, h, name)]
                            dn[r, p], kl[r, p] = d1[i], k1[i]
                        bar.update(len(chunk))
                if store is not None:
                    pending = l
                    store.save(l, dn[rows], kl[rows])
                done.append(l)
    except stop_on as err:
        stopped = err
        if pending is not None and pending not in done and store.path(pending).exists():
            done.append(pending)  # stopped after the layer's file was renamed into place: it is finished
    finally:
        bar.close()
    secs = time.perf_counter() - t0
    meta = _meta(model, cfg, toks, "exact", secs, clean.nll, {"clean_pass": t_clean, "interventions": secs - t_clean,
                                                             "rows_per_forward": B})
    if stopped is not None:
        keep_rows = [r for r, (l, _, _) in enumerate(order) if l in set(done)]
        order, dn, kl = [order[r] for r in keep_rows], dn[keep_rows], kl[keep_rows]
        meta.update(partial=f"{len(done)} of {len(by_layer)} layers", stopped_by=str(stopped))
    return EffectsResult(_table(order, dn, kl, cfg), {"dnll": dn, "kl": kl}, float(clean.nll.mean()), clean.nll, meta, stopped)


def naive_effects(model, prompts, config: EffectsConfig | None = None, *, progress: bool = False,
                  means: torch.Tensor | None = None) -> EffectsResult:
    """The same table as ``head_effects``, by the plain loop: one full forward of the whole model per head,
    intervention and prompt inside ``head_intervention`` (the reference the fast path is tested against, and the
    baseline of ``analyses/benchmarks/effects_cost.py``). Arguments and errors as ``head_effects``."""
    from interp.hooks.heads import head_means

    cfg, toks, heads = _setup(model, prompts, config)
    L, H = model.card.n_layers, model.card.n_heads
    P, N = toks.shape
    t0 = time.perf_counter()
    ref_means = head_means(model, toks) if means is None and "mean" in cfg.interventions else means
    keep = kept(cfg, N)
    with torch.inference_mode():
        clean, nll = zip(*(_clean_prompt(model, toks[p], cfg.score_from, keep) for p in range(P)))
    nll = np.array(nll)
    order = _order(heads, cfg.interventions)
    dn, kl = np.zeros((len(order), P)), np.zeros((len(order), P))
    bar = _progress(len(order) * P, progress, f"effects (naive) {model.card.name}")
    try:
        with torch.inference_mode():
            for r, (l, h, name) in enumerate(order):
                with head_intervention(model, [(l, h)], **intervention_kwargs(name, cfg, ref_means)):
                    for p in range(P):
                        logits = model.hf(toks[p][None].to(model.device), use_cache=False, **keep).logits
                        d1, k1 = token_stats(logits, [clean[p]], toks[p][None])
                        dn[r, p], kl[r, p] = d1[0], k1[0]
                        bar.update(1)
    finally:
        bar.close()
    secs = time.perf_counter() - t0
    meta = _meta(model, cfg, toks, "naive", secs, nll, {})
    return EffectsResult(_table(order, dn, kl, cfg), {"dnll": dn, "kl": kl}, float(nll.mean()), nll, meta)


def set_effects(model, prompts, sets: Sequence[Sequence[tuple[int, int]]], intervention: str = "zero",
                config: EffectsConfig | None = None, *, means: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The joint effect of intervening on every head of a set at once, for many sets: the loss change when a group
    of heads is removed together (Wu et al.'s and Olsson et al.'s masking tests; DuoAttention streams many heads at once).

    Each set runs as one batch row of a full forward of the model (``head_intervention(..., rows=...)``: row ``i``
    changes the heads of set ``i`` and nothing else), so the sets of one prompt share forwards. An empty set is the
    clean model (``dnll`` = ``kl`` = 0).

    Args:
        model: a ``LoadedModel``; prompts: ``[prompt, pos]`` token ids.
        sets: head sets, each a sequence of ``(layer, head)`` pairs.
        intervention: a name of ``INTERVENTIONS``; config: its options (``sink``, ``window``, ``n_remove``,
            ``score_from``, ``batch_rows`` / ``max_logits_gb``); ``config.heads`` and ``config.interventions`` are ignored.
        means: ``[layer, head, d_head]`` references for ``mean`` (default: ``head_means`` of ``prompts``).

    Returns:
        ``(dnll [set, prompt], kl [set, prompt], clean_nll [prompt])`` float64, nats per scored prediction
        (``score_from..N-1``).

    Raises:
        ConfigError: an unknown intervention, a head outside the grid, bad settings, prompts not ``[prompt, pos]``.
    """
    from interp.hooks.heads import head_means

    parse_interventions([intervention])
    cfg = config or EffectsConfig()
    toks = _prompts(prompts)
    P, N = toks.shape
    L, H = model.card.n_layers, model.card.n_heads
    cfg.check(L, H, N)
    sets = [check_heads(s, L, H) if len(s) else [] for s in sets]
    if intervention == "mean" and means is None:
        means = head_means(model, toks)
    kw = intervention_kwargs(intervention, cfg, means)
    keep = kept(cfg, N)
    B = _rows_per_forward(cfg, N - cfg.score_from + 1, model.card.vocab_size)
    todo = [i for i, s in enumerate(sets) if s]
    dn, kl, nll = np.zeros((len(sets), P)), np.zeros((len(sets), P)), np.zeros(P)
    with torch.inference_mode():
        for p in range(P):
            t = toks[p][None].to(model.device)
            cd, nll[p] = _clean_prompt(model, toks[p], cfg.score_from, keep)
            for s0 in range(0, len(todo), B):
                chunk = todo[s0:s0 + B]
                heads = [hd for i in chunk for hd in sets[i]]
                rows = [[r] for r, i in enumerate(chunk) for _ in sets[i]]
                with head_intervention(model, heads, rows=rows, **kw):
                    logits = model.hf(t.expand(len(chunk), -1), use_cache=False, **keep).logits
                d1, k1 = token_stats(logits, [cd] * len(chunk), toks[p][None].expand(len(chunk), -1))
                dn[chunk, p], kl[chunk, p] = d1, k1
    return dn, kl, nll


def _meta(model, cfg: EffectsConfig, toks: torch.Tensor, method: str, secs: float, nll: np.ndarray, extra: dict) -> dict:
    c = asdict(cfg)
    c["heads"] = "all" if cfg.heads is None else [f"{l}:{h}" for l, h in cfg.heads]
    return {"model": model.card.name, "prompts": int(toks.shape[0]), "tokens": int(toks.shape[1]), "method": method,
            "clean_nll": float(nll.mean()), "clean_nll_prompt": [float(x) for x in nll],
            "predictions": int(toks.shape[0] * (toks.shape[1] - cfg.score_from)), "config": c, "seconds": secs,
            "device": str(model.device), **extra}
