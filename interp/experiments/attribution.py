"""Attribution patching: every head's linearised zero / mean effect from one forward and one backward pass per prompt
(Nanda 2023, "Attribution Patching: Activation Patching At Industrial Scale"; Syed, Rager and Conmy 2023,
"Attribution Patching Outperforms Automated Circuit Discovery").

For head ``h`` of layer ``l`` with output ``z`` (``[pos, d_head]``, its slice of the output projection's input) and
replacement ``z'`` (0 for ``zero``, the head's mean output for ``mean``), the first-order Taylor expansion of the
prompt's mean next-token NLL around the clean run gives

    dnll_attr = sum over positions i of (z'_i - z_i) . dNLL / dz_i,

with every gradient from one backward pass of the clean run (all heads at once). The table has the columns of
``interp.experiments.effects`` (``layer, head, intervention, dnll, dnll_lo, dnll_hi, kl``); ``kl`` is NaN (KL is
second order at the clean run: its linear term is 0). ``agreement`` compares it with the exact effects: Spearman's rho
over heads, overall and per depth third (the large effects of early layers are the known weak point of the linear
approximation), and the heads where the two disagree most.

Cost: per prompt one forward and one backward (the parameters are frozen while it runs, so the backward computes no
weight gradients; their ``requires_grad`` restored on exit). The ``mean`` reference needs no clean pass of its own: the
effect is linear in it, ``sum_i (m - z_i) . g_i = m . sum_i g_i - sum_i z_i . g_i``, so each prompt keeps its
gradient sum and ``z . g`` total, and the mean of the same forwards' head outputs is applied after the last prompt.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pandas as pd
import torch

from interp.errors import ConfigError
from interp.experiments.effects import EffectsConfig, EffectsResult, _meta, _order, _prompts, _table
from interp.hooks.edit import edit, record

LINEAR_KINDS = ("zero", "mean")


@contextmanager
def _frozen(hf: torch.nn.Module) -> Iterator[None]:
    """Parameters without gradients inside the block (only activations get them); each flag restored on exit."""
    flags = [(p, p.requires_grad) for p in hf.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, f in flags:
            p.requires_grad_(f)


def head_gradients(model, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One prompt's head outputs, their NLL gradients and the NLL, from one forward and one backward pass.

    Args:
        tokens: ``[pos]`` token ids.

    Returns:
        ``(z [layer, pos, head, d_head], grad [layer, pos, head, d_head], nll)``: each head's output (its slice of the
        output projection's input), ``d mean-NLL / d z`` (float32, model device), and the prompt's mean next-token NLL.
    """
    hf, c = model.hf, model.card
    seen: dict = {}
    with _frozen(hf), torch.enable_grad(), edit(model, *(record(("head_out", l), seen) for l in range(c.n_layers))):
        t = tokens.to(model.device)
        emb = hf.get_input_embeddings()(t[None])
        emb = emb.detach().requires_grad_(True)
        # Gemma scales inside its embedding module: feeding the module's output as inputs_embeds is the same input
        logits = hf(inputs_embeds=emb, use_cache=False).logits[0, :-1].float()
        loss = torch.nn.functional.cross_entropy(logits, t[1:])
        zs = [seen[f"head_out[{l}]"] for l in range(c.n_layers)]  # each [1, pos, head, d_head], in the graph
        grads = torch.autograd.grad(loss, zs)
    z = torch.stack([x.detach()[0] for x in zs]).float()
    g = torch.stack([x[0] for x in grads]).float()
    return z, g, float(loss.detach())


def attribution_effects(model, prompts, config: EffectsConfig | None = None, *, means: torch.Tensor | None = None,
                        progress: bool = False) -> EffectsResult:
    """Every chosen head's linearised ``zero`` / ``mean`` effect (module docstring), as an ``EffectsResult``.

    Args:
        model: a ``LoadedModel``; prompts: ``[prompt, pos]`` token ids.
        config: ``EffectsConfig``; its interventions must be ``zero`` and / or ``mean``.
        means: ``[layer, head, d_head]`` reference outputs for ``mean`` (default: the prompts of the run, one clean pass).
        progress: a tqdm bar over prompts.

    Raises:
        ConfigError: an intervention other than zero / mean (attribution patching linearises replacements of a head's
            output; streaming and RoPE changes act inside attention), or bad settings (``EffectsConfig.check``).
    """
    from tqdm.auto import tqdm

    cfg = (config or EffectsConfig(interventions=LINEAR_KINDS)).check(model.card.n_layers, model.card.n_heads)
    bad = [k for k in cfg.interventions if k not in LINEAR_KINDS]
    if bad:
        raise ConfigError(f"--method attribution linearises zero and mean only, got {', '.join(bad)}; use --method exact for them")
    toks = _prompts(prompts)
    L, H = model.card.n_layers, model.card.n_heads
    heads = sorted(cfg.heads) if cfg.heads is not None else [(l, h) for l in range(L) for h in range(H)]
    P = toks.shape[0]
    t0 = time.perf_counter()
    order = _order(heads, cfg.interventions)
    li = torch.tensor([l for l, _, _ in order])
    hi = torch.tensor([h for _, h, _ in order])
    is_mean = np.array([k == "mean" for _, _, k in order])
    zg = np.zeros((L, H, P))  # sum over positions and channels of z . grad, per prompt
    g_sum = []  # per prompt: [layer, head, d_head] float64 gradient summed over positions
    z_sum, count = 0.0, 0  # the run's head outputs summed in float64: the mean reference (head_means of the same prompts)
    nll = np.zeros(P)
    for p in tqdm(range(P), desc=f"attribution {model.card.name}", unit="prompt", disable=not progress):
        z, g, nll[p] = head_gradients(model, toks[p])
        zg[:, :, p] = (z * g).sum((1, 3)).double().cpu().numpy()
        g_sum.append(g.double().sum(1).cpu())
        z_sum, count = z_sum + z.double().sum(1).cpu(), count + z.shape[1]
    dn = -zg[li, hi]  # zero: (0 - z) . grad
    if "mean" in cfg.interventions:
        ref = (z_sum / count if means is None else torch.as_tensor(means, dtype=torch.float64)).cpu()  # [layer, head, d_head]
        mean = np.stack([(ref * gs).sum(-1).numpy() for gs in g_sum], -1) - zg  # (m - z) . grad
        dn = np.where(is_mean[:, None], mean[li, hi], dn)
    secs = time.perf_counter() - t0
    res = EffectsResult(_table(order, dn, np.full_like(dn, np.nan), cfg), {"dnll": dn, "kl": np.full_like(dn, np.nan)},
                        float(nll.mean()), nll, _meta(model, cfg, toks, "attribution", secs, nll, {}))
    return res


def agreement(exact: pd.DataFrame, attribution: pd.DataFrame, n_layers: int, worst: int = 5) -> pd.DataFrame:
    """Spearman's rho between exact and attributed ``dnll`` over heads, per intervention and depth.

    Rows: per intervention, ``depth`` = ``all``, ``early`` / ``middle`` / ``late`` (layers split in thirds with
    ``numpy.array_split``) and ``all_but_layer0``; columns ``intervention, depth, heads, spearman, pearson,
    sign_agree`` (share of heads whose two effects have the same sign), ``worst`` (the heads with the largest
    |exact - attribution|, ``LxHy``). Both tables must hold the same heads and interventions.
    """
    from scipy.stats import pearsonr, spearmanr

    key = ["layer", "head", "intervention"]
    both = exact[key + ["dnll"]].merge(attribution[key + ["dnll"]], on=key, suffixes=("_exact", "_attr"))
    thirds = np.array_split(np.arange(n_layers), 3)
    groups = {"all": lambda d: d, "early": lambda d: d[d["layer"].isin(thirds[0])], "middle": lambda d: d[d["layer"].isin(thirds[1])],
              "late": lambda d: d[d["layer"].isin(thirds[2])], "all_but_layer0": lambda d: d[d["layer"] > 0]}
    rows = []
    for kind, d0 in both.groupby("intervention", sort=False):
        for name, pick in groups.items():
            d = pick(d0)
            x, y = d["dnll_exact"].to_numpy(), d["dnll_attr"].to_numpy()
            ok = len(d) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0
            err = (d["dnll_exact"] - d["dnll_attr"]).abs()
            w = d.loc[err.sort_values(ascending=False).index[:worst]]
            rows.append({"intervention": kind, "depth": name, "heads": len(d),
                         "spearman": float(spearmanr(x, y).statistic) if ok else np.nan,
                         "pearson": float(pearsonr(x, y).statistic) if ok else np.nan,
                         "sign_agree": float((np.sign(x) == np.sign(y)).mean()) if len(d) else np.nan,
                         "worst": " ".join(f"L{r.layer}H{r.head}" for r in w.itertuples())})
    return pd.DataFrame(rows)
