"""Does RoPE-ID keep the sink working beyond its training length? Lab models with a sink, RoPE against RoPE-ID (claim 001h).

Paper 001 (Sec. 4, 4.1, App. A.4, A.6) argues that RoPE-ID (half of each head's planes rotated, at wavelengths that
turn at least twice within the training length) keeps the key and query clusters apart in its unrotated planes, so
"sink token functionality" survives at any length, where RoPE's sink weight collapses past the training length
(Fig. 6, claim 001d). Its evidence is indirect (RULER / LongBench of 1B / 3B models, Tables 1, 2, 5; cluster plots,
Figs. 13-14); the sink weight of a RoPE-ID model against length is not shown. The small CPU lab models of
``rope_id_lm.py`` have no sink at all (their weight on token 0 falls with length, RoPE-ID's included), so they
cannot test it. This script trains models large and long enough to have a chance of forming one, checks that one
formed, and only then sweeps it.

**Models.** Two ``interp.lab`` decoders, identical but for the encoding (``rope_id_lm.lab_config``: ``rope`` base
1e4, and ``rope-id``: half the planes rotated at wavelengths 8 to ``n / 2`` tokens, two turns per training length as
001's 2,048 in 4,096; 001's shortest wavelength is 32, kept at ``rope_id_lm``'s 8; no temperature), ``--layers`` (4)
layers of ``--heads`` (8) heads of width ``--d-model / --heads`` (64), SwiGLU width ``4 d_model``, byte-level
vocabulary (``interp.lab.text_lm``), trained with the plain next-token loss on windows of ``n = --train-length``
(256) tokens (``<bos>`` and ``n - 1`` bytes) of the first 90% of ``--corpus`` (the standard library's source, 11 MB)
for ``--steps`` (4000) AdamW steps of ``--batch`` (64) windows (lr ``--lr`` 1e-3, warmup 100, cosine to a tenth,
weight decay 0.1, betas 0.9 / 0.95 as 001), seed ``--seed``. On a GPU the two train at once, one process each
(``--jobs``), with TF32 matmuls.

**Sink check** (the project's sink definition, ``interp.measures.sinks``: Gu et al. 2024, a head has a sink when the
importance of token 0, the mean over queries of ``A[i, 0]``, exceeds ``SINK_EPS`` = 0.3; not tuned here): on
``--select`` (8) held-out windows (the last 10% of the corpus), the heads whose sink weight at ``n`` tokens exceeds
0.3 are the model's *sink heads*. The sweep uses ``--prompts`` (16) *other* held-out windows, so the selection does
not inflate the 1x value. A model has a working sink at a length when the 95% bootstrap interval over those prompts
of its sink heads' median sink weight lies above 0.3 (``kept``), below it (``lost``), or spans it (``unclear``).

**Sweep** (``sink_beyond.prefix_means``, 001 Fig. 6): each prompt of ``8 n`` tokens captured once, and at ``n, 2n,
4n, 8n`` (``--factors``) the means over the prefix's queries of the sink weight with RoPE (``sink_weight``: what the
model does), in the pre-RoPE counterfactual (``sink_weight_norope``) and of the largest q.k per query (``max_qk_rot``,
``max_qk_pre``), every query row exact up to ``2 --rows`` tokens. Per prompt the median over the model's sink heads;
per length its mean with a 95% percentile bootstrap interval over prompts, and the per-prompt change from ``n``
with its interval (``frayed_bootstrap.changes``).

**Verdict** (``verdict``), for RoPE-ID (claim 001h) and, as the control 001 predicts to fail (claim 001d), RoPE:
``no sink formed`` (no sink head, or the sink heads' weight at ``n`` on the sweep's prompts not ``kept``);
``reproduced`` (``kept`` at every length beyond ``n``); ``in part`` (kept at some); ``not reproduced`` (at none).
These are lab-scale words: the claims table reads a lab ``reproduced`` as "reproduced in part" (a 17M-parameter byte
model at 8x a 256-token training length, not 001's 1B model at 4k).

**Size.** Sized for one device call of at most 8 minutes on an H100 (``device_check.sh rope_id_sink``, not yet
timed): the lab's measured GPU rate is 24.7 ms per step for 3 processes at once training a 3-layer width-64 model on
64 x 256 tokens (``figures/emergence_text_runs.csv``, ``train_seconds`` 247 s for 10,000 steps on an H100), a cost of
kernel launches, not arithmetic; 4 layers (a third more launches) and width 512 (about 1.6 TFLOP per step, some 10 ms
at TF32 rates) give about 45 ms per step with two processes, so 4000 steps take about 3 minutes; process start,
CUDA initialisation and the sweep (2 models x 24 prompts of 2048 tokens) about one more.

Writes ``rope_id_sink_heads.csv`` (``pe, layer, head, select_weight, sink_head, length, factor`` and the four
measures, means over the sweep's prompts), ``rope_id_sink_prompts.csv`` (``model`` = the encoding, ``prompt,
length, context, measure, median``: the median over the sink heads), ``rope_id_sink.csv`` (per encoding, measure and
length: ``sink_heads, prompts, value, value_lo, value_hi, change, change_lo, change_hi, state``) and
``rope_id_sink_verdict.csv`` (per encoding: ``model_heads, sink_heads, final_loss, train_seconds, states, verdict`` and
the settings).

    python -m analyses.p001_frayed.rope_id_sink [--steps 4000] [--train-length 256] [--layers 4] [--heads 8]
        [--d-model 512] [--batch 64] [--factors 1,2,4,8] [--select 8] [--prompts 16] [--device auto] [--jobs 0]
        [--models-dir DIR] [--quick] [--out DIR]

Full mode needs a CUDA GPU unless ``--device cpu`` is given (hours here); ``--quick`` (a width-32 model, 30 steps,
seconds on a CPU) checks the script.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import interp
from interp.experiments.stats import bootstrap_interval
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lab_loaded, save_lab, train_model
from interp.lab import text_lm
from interp.measures.sinks import SINK_EPS

from analyses._common import one_thread, parser
from analyses.benchmarks._device import length_factors, pick_device
from analyses.p001_frayed.frayed_bootstrap import changes
from analyses.p001_frayed.rope_id_lm import lab_config
from analyses.p001_frayed.sink_beyond import MEASURES, prefix_means

PES = ("rope", "rope-id")
VERDICTS = ("reproduced", "in part", "not reproduced", "no sink formed")
CONFIG_FIELDS = ("vocab_size", "n_layers", "d_model", "d_mlp", "pe", "rope_base", "partial_fraction", "max_positions",
                 "rope_id_wavelengths", "temperature_length")  # LabConfig's arguments but n_heads (derived widths are recomputed)
SUMMARY = ["pe", "measure", "length", "factor", "sink_heads", "prompts", "value", "value_lo", "value_hi", "change", "change_lo",
           "change_hi", "state"]
SETTINGS = ("train_length", "layers", "heads", "d_model", "steps", "batch", "lr", "corpus", "seed", "device")


def model_config(pe: str, args) -> LabConfig:
    """``rope_id_lm.lab_config`` of ``pe`` at ``args.train_length`` with ``args.heads`` heads per layer (it has two)."""
    cfg = lab_config(pe, args.train_length, args.d_model, args.layers)
    return LabConfig(**{k: getattr(cfg, k) for k in CONFIG_FIELDS}, n_heads=args.heads)


def sweep_prompts(test: np.ndarray, args) -> torch.Tensor:
    """``[select + prompts, max factor * n]`` disjoint held-out windows (``<bos>`` + bytes): the first ``args.select``
    choose the sink heads, the rest are swept."""
    n_tokens = max(args.factors) * args.train_length
    return text_lm.disjoint_windows(test, n_tokens, args.select + args.prompts)


def head_means(loaded, prompts: torch.Tensor, lengths: list[int], rows: int) -> np.ndarray:
    """``[prompt, length, measure, layer, head]`` float64: ``sink_beyond.prefix_means`` of every prompt (one capture
    each) at every prefix length, measures in ``MEASURES`` order."""
    out = []
    for p in prompts:
        cap = interp.capture(loaded, p, beyond_context=True)
        means = prefix_means(loaded, cap, lengths, rows)
        out.append([[means[n][m] for m in MEASURES] for n in lengths])
        del cap
    return np.asarray(out, dtype=np.float64)


def train_and_sweep(pe: str, args) -> tuple[np.ndarray, dict]:
    """Train the ``pe`` model (module docstring), save it in ``args.models_dir / pe`` and sweep it: returns
    (``head_means`` of the select + sweep prompts, the run's ``final_loss`` / ``train_seconds``)."""
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    train, test = text_lm.split_text(args.corpus)
    n = args.train_length
    model = LabForCausalLM(model_config(pe, args)).to(args.device)
    t0 = time.perf_counter()
    losses = train_model(model, text_lm.lm_batch_fn(train, n, args.batch, passkey_frac=0.0),
                         cfg=TrainConfig(steps=args.steps, lr=args.lr, warmup=min(100, args.steps // 10), weight_decay=0.1,
                                         betas=(0.9, 0.95), seed=args.seed, log_every=0 if args.quick else 500))
    secs = time.perf_counter() - t0
    save_lab(model, text_lm.BYTE_VOCAB, Path(args.models_dir) / pe)
    loaded = lab_loaded(model, text_lm.BYTE_VOCAB, name=pe)
    lengths = [f * n for f in args.factors]
    means = head_means(loaded, sweep_prompts(test, args), lengths, args.rows)
    print(f"{pe}: loss {np.mean(losses[-50:]):.3f}, trained in {secs:.0f} s, swept in {time.perf_counter() - t0 - secs:.0f} s",
          flush=True)
    return means, {"final_loss": float(np.mean(losses[-50:])), "train_seconds": round(secs, 1)}


def _train_and_sweep_alone(pe: str, args):
    """``train_and_sweep`` in a worker process of ``--jobs`` (one CPU thread)."""
    with one_thread():
        return train_and_sweep(pe, args)


def state(lo: float, hi: float, eps: float = SINK_EPS) -> str:
    """``kept`` when the interval ``[lo, hi]`` of a sink weight lies above ``eps``, ``lost`` below it, else ``unclear``."""
    return "kept" if lo > eps else "lost" if hi < eps else "unclear"


def verdict(states: dict[int, str], sink_heads: int) -> str:
    """The verdict word of one model (module docstring) from its ``state`` per length factor (1 = the training
    length) and its number of sink heads."""
    if sink_heads == 0 or states.get(1) != "kept":
        return "no sink formed"
    beyond = [states[f] == "kept" for f in sorted(states) if f > 1]
    return "reproduced" if all(beyond) else "in part" if any(beyond) else "not reproduced"


def tables(means: dict[str, np.ndarray], args) -> dict[str, pd.DataFrame]:
    """The four tables (module docstring) from each encoding's ``head_means`` (select prompts first)."""
    n, S = args.train_length, args.select
    lengths = [f * n for f in args.factors]
    sw = MEASURES.index("sink_weight")
    heads, per = [], []
    for pe, m in means.items():
        select = m[:S, 0, sw].mean(0)  # [layer, head] at n
        sink = select > SINK_EPS
        swept = m[S:]
        L, H = select.shape
        for k, length in enumerate(lengths):
            avg = swept[:, k].mean(0)  # [measure, layer, head]
            for layer in range(L):
                for h in range(H):
                    heads.append({"pe": pe, "layer": layer, "head": h, "select_weight": float(select[layer, h]),
                                  "sink_head": bool(sink[layer, h]), "length": length, "factor": args.factors[k],
                                  **{mm: float(avg[j, layer, h]) for j, mm in enumerate(MEASURES)}})
        if sink.any():
            for i in range(swept.shape[0]):
                for k, length in enumerate(lengths):
                    for j, mm in enumerate(MEASURES):
                        per.append({"model": pe, "prompt": i, "length": length, "context": n, "measure": mm,
                                    "median": float(np.median(swept[i, k, j][sink]))})
    heads_df, per_df = pd.DataFrame(heads), pd.DataFrame(per, columns=["model", "prompt", "length", "context", "measure", "median"])
    rows = []
    change = changes(per_df, args.boot).set_index(["model", "measure", "length_to"]) if len(per_df) else None
    for (pe, mm), g in per_df.groupby(["model", "measure"], sort=False):
        wide = g.pivot(index="prompt", columns="length", values="median")[lengths].to_numpy().T  # [length, prompt]
        lo, hi = bootstrap_interval(wide, args.boot)
        for k, length in enumerate(lengths):
            c = change.loc[(pe, mm, length)] if length != n else None
            rows.append({"pe": pe, "measure": mm, "length": length, "factor": args.factors[k],
                         "sink_heads": int(heads_df[(heads_df.pe == pe) & (heads_df.length == n)].sink_head.sum()),
                         "prompts": wide.shape[1], "value": float(wide[k].mean()), "value_lo": float(lo[k]), "value_hi": float(hi[k]),
                         "change": np.nan if c is None else float(c["change"]), "change_lo": np.nan if c is None else float(c["change_lo"]),
                         "change_hi": np.nan if c is None else float(c["change_hi"]),
                         "state": state(lo[k], hi[k]) if mm == "sink_weight" else ""})
    summary = pd.DataFrame(rows, columns=SUMMARY)
    return {"heads": heads_df, "prompts": per_df, "summary": summary}


def verdict_rows(summary: pd.DataFrame, heads: pd.DataFrame, meta: dict[str, dict], args) -> pd.DataFrame:
    """``rope_id_sink_verdict.csv``: one row per encoding (module docstring)."""
    out = []
    for pe in meta:
        at_n = heads[(heads.pe == pe) & (heads.factor == 1)]
        s = summary[(summary.pe == pe) & (summary.measure == "sink_weight")]
        states = {int(r.factor): r.state for r in s.itertuples()}
        out.append({"pe": pe, "model_heads": len(at_n), "sink_heads": int(at_n.sink_head.sum()), **meta[pe],
                    "states": " ".join(f"{f}x:{states[f]}" for f in sorted(states)), "verdict": verdict(states, int(at_n.sink_head.sum())),
                    "claim": "001h" if pe == "rope-id" else "001d (control)", "sink_eps": SINK_EPS,
                    **{k: getattr(args, k) for k in SETTINGS}})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "width 32 (4 heads), 2 layers, n = 32, 30 steps on pydoc, 2 + 3 prompts at 1x and 2x, on the CPU (seconds)")
    ap.add_argument("--train-length", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--corpus", default="stdlib", help="stdlib (11 MB of Python source) or pydoc (465 kB: memorised in a few thousand steps)")
    ap.add_argument("--factors", default="1,2,4,8", help="sweep lengths as multiples of the training length (1 first)")
    ap.add_argument("--select", type=int, default=8, help="held-out windows that choose the sink heads")
    ap.add_argument("--prompts", type=int, default=16, help="other held-out windows swept")
    ap.add_argument("--rows", type=int, default=1024, help="query rows per length (sink_beyond.query_rows): exact up to 2 x rows tokens")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto (a GPU where there is one), cpu or cuda")
    ap.add_argument("--jobs", type=int, default=0, help="models trained at once, one process each (0: both on a GPU, one at a time on a CPU)")
    ap.add_argument("--models-dir", type=Path, default=None, help="where the trained models are saved (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.quick:
        args.train_length, args.layers, args.heads, args.d_model, args.steps, args.batch = 32, 2, 4, 32, 30, 8
        args.corpus, args.factors, args.select, args.prompts, args.boot, args.device = "pydoc", "1,2", 2, 3, 200, "cpu"
    args.factors = length_factors(ap, args.factors, "the training length")
    if args.corpus not in text_lm.TEXT_CORPORA:
        ap.error(f"--corpus {args.corpus}: use {' or '.join(text_lm.TEXT_CORPORA)}")
    if args.d_model % args.heads or (args.d_model // args.heads) % 4:
        ap.error(f"--d-model {args.d_model} must split into --heads {args.heads} heads of a width divisible by 4 (RoPE-ID rotates half the planes)")
    if args.train_length < 24:
        ap.error(f"--train-length {args.train_length}: RoPE-ID's longest wavelength n / 2 must exceed its shortest (8 tokens); use 24 or more")
    if not pick_device(ap, args, "rope_id_sink"):
        return pd.DataFrame()
    args.models_dir = args.models_dir or Path(tempfile.mkdtemp(prefix="rope_id_sink-"))
    args.jobs = args.jobs or (len(PES) if args.device.startswith("cuda") else 1)
    t0 = time.perf_counter()
    if args.jobs > 1:  # spawned processes: CUDA cannot be forked
        with ProcessPoolExecutor(min(args.jobs, len(PES)), mp_context=multiprocessing.get_context("spawn")) as pool:
            done = dict(zip(PES, pool.map(_train_and_sweep_alone, PES, [args] * len(PES))))
    else:
        with one_thread():
            done = {pe: train_and_sweep(pe, args) for pe in PES}
    t = tables({pe: d[0] for pe, d in done.items()}, args)
    v = verdict_rows(t["summary"], t["heads"], {pe: d[1] for pe, d in done.items()}, args)
    t["heads"].to_csv(args.out / "rope_id_sink_heads.csv", index=False)
    t["prompts"].to_csv(args.out / "rope_id_sink_prompts.csv", index=False)
    t["summary"].to_csv(args.out / "rope_id_sink.csv", index=False)
    v.to_csv(args.out / "rope_id_sink_verdict.csv", index=False)
    s = t["summary"]
    if len(s):
        print(s[s.measure.isin(["sink_weight", "sink_weight_norope"])][["pe", "measure", "factor", "sink_heads", "value", "value_lo",
                                                                        "value_hi", "state"]].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(v[["pe", "model_heads", "sink_heads", "states", "verdict"]].to_string(index=False))
    print(f"done in {time.perf_counter() - t0:.0f} s; models in {args.models_dir}", flush=True)
    return v


if __name__ == "__main__":
    main()
