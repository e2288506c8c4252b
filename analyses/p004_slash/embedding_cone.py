"""Paper 004 App. B on the zoo models: the layer-0 embedding cone (Tables 2, 10/12, 11 and Figs. 11-13 analogues).

For each installed model, ``interp.experiments.embedding_cone.embedding_cone_table`` over the whole vocabulary (every
token id the tokenizer knows, through the embedding module and layer 0's input RMS norm): per layer-0 head,
r1 / R_0.95 of H, W_Q, W_K, Q and K (eq. 7), the per-token r~1 / R~0.95 of eq. 11 (Table 2), the dominating singular
direction v_Q / v_K and RV(v) = std / |mean| of the projections on it against a random Gaussian direction
(Table 11, Fig. 12), and for models with q/k biases the bias norms against the mean ||W^T h|| (Tables 10/12,
Fig. 13). The paper reports layer-0 *slash-dominant* heads only, so a short ``interp.scan`` on pydoc text
(``--prompts`` x ``--tokens``; ``--prompts 0`` skips it) adds each head's ``is_sdh``, ``slash_delta``,
``slash_score`` and the text-prompt ``r1_q_text`` / ``R95_q_text`` / ``r1_k_text`` / ``R95_k_text`` (pre-RoPE, eq. 7; Fig. 11's r1).

Writes into ``--out`` (default ``figures/``): ``embedding_cone_<model>.csv`` (one row per layer-0 head),
``embedding_cone_summary.csv`` (per model: means over all layer-0 heads and over its SDHs) and
``embedding_cone_fig12_13.{html,png}`` (means over the layer-0 SDHs where a model has any, else over all heads).

    python -m analyses.p004_slash.embedding_cone [--quick] [--models ...] [--prompts 2] [--tokens 1024] [--out figures]
"""

from __future__ import annotations

import time

import pandas as pd

import interp
from interp.experiments.embedding_cone import embedding_cone_table
from interp.report.geometry_figures import embedding_cone_figure

from analyses._common import one_thread, parser, save_figure

SUMMARY_COLS = ["r1_h", "R95_h", "r1_wq", "R95_wq", "r1_wk", "R95_wk", "r1_q", "R95_q", "r1_k", "R95_k", "r1_q_pre", "r1_k_pre",
                "r1_tilde_q", "R95_tilde_q", "r1_tilde_k", "R95_tilde_k", "rv_q", "rv_k", "rv_rand", "rv_rand_median",
                "mean_wq_h", "bias_q", "mean_wk_h", "bias_k", "bias_ratio_q", "bias_ratio_k",
                "r1_q_text", "R95_q_text", "r1_k_text", "R95_k_text"]


def model_table(name: str, n_prompts: int, n_tokens: int, vocab: int | None) -> tuple[pd.DataFrame, dict]:
    """The embedding-cone table of one model, joined with layer 0 of a short text scan; and timings (s)."""
    model = interp.load_model(name, device="cpu")
    t0 = time.perf_counter()
    with one_thread():
        tab = embedding_cone_table(model, n_tokens=vocab)
    secs = {"cone_s": time.perf_counter() - t0}
    if n_prompts:
        t0 = time.perf_counter()
        prompts = interp.corpus.prompts(model, "pydoc", n_prompts, n_tokens)
        res = interp.scan(model, prompts, interp.ScanConfig(counterfactual_sinks=False), meta={"corpus": "pydoc"})
        secs["scan_s"] = time.perf_counter() - t0
        h0 = res.heads[res.heads["layer"] == 0].set_index("head")
        tab = tab.join(h0[["is_sdh", "slash_delta", "slash_score"]], on="head")
        tab = tab.join(h0[["r1_q", "R95_q", "r1_k", "R95_k"]].add_suffix("_text"), on="head")
    else:
        tab["is_sdh"] = False
    return tab, secs


def summarise(tab: pd.DataFrame) -> pd.DataFrame:
    """Means over all layer-0 heads and over its SDHs (the paper's selection), per model."""
    rows = []
    for m, g in tab.groupby("model", sort=False):
        for sel, part in (("all heads", g), ("SDHs", g[g["is_sdh"].fillna(False).astype(bool)])):
            if len(part):
                cols = [c for c in SUMMARY_COLS if c in part]
                rows.append({"model": m, "heads": sel, "n": len(part), "head_ids": " ".join(str(h) for h in part["head"]),
                             **part[cols].mean().to_dict()})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny models, their whole 259-token vocabulary, one 64-token prompt")
    ap.add_argument("--prompts", type=int, default=2, help="pydoc prompts of the SDH scan (0: no scan)")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per prompt of the SDH scan")
    args = ap.parse_args(argv)
    models = ["tiny-llama", "tiny-qwen2", "tiny-gemma3"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    n_prompts, n_tokens = (1, 64) if args.quick else (args.prompts, args.tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    frames = []
    for name in models:
        t0 = time.perf_counter()
        tab, secs = model_table(name, n_prompts, n_tokens, None)
        tab.to_csv(args.out / f"embedding_cone_{name}.csv", index=False)
        frames.append(tab)
        print(f"{name}: {int(tab['n_tokens'].iloc[0])} tokens, {len(tab)} heads, {int(tab['is_sdh'].fillna(False).sum())} layer-0 SDHs; "
              + ", ".join(f"{k} {v:.1f}" for k, v in secs.items()) + f", total {time.perf_counter() - t0:.0f} s", flush=True)
    allt = pd.concat(frames, ignore_index=True)
    summ = summarise(allt)
    summ.to_csv(args.out / "embedding_cone_summary.csv", index=False)
    sdh = allt["is_sdh"].fillna(False).astype(bool)
    has = allt.groupby("model")["is_sdh"].transform(lambda s: s.fillna(False).astype(bool).any())
    shown = allt[sdh | ~has]  # a model's layer-0 SDHs, or all its layer-0 heads when it has none
    save_figure(embedding_cone_figure(shown, "Layer-0 embedding cone: means over layer-0 SDHs (all layer-0 heads where none)"),
                args.out, "embedding_cone_fig12_13")
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.precision", 3):
        print(summ.drop(columns=["head_ids"]).to_string(index=False))
    return summ


if __name__ == "__main__":
    main()
