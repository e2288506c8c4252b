"""Long-range slash-dominant heads on real text (004 App. C) under the consistency rule, with what each rule keeps.

A head is a long-range SDH at a lag 500 <= delta <= 5000 when its average slash score there is >= kappa_long = 1e-3
(004 App. C; ``interp.measures.slash``). A mean over prompts lets one prompt whose text repeats a passage
``delta`` tokens later pass; this project's rule (``long_min_frac`` = 2/3 of the prompts, and with
``long_leave_one_out`` the same after dropping any one prompt) is meant to keep positional slashes only. The
script scans ``--prompts`` pydoc prompts of ``--tokens`` tokens (each prompt on its own, merged exactly with
``interp.merge_results``, so each prompt's own scores are at hand) and counts the long-range SDHs under three rules:

- ``mean``: best long lag by mean score >= kappa_long (004 App. C as written, no per-prompt check);
- ``fraction``: a lag that holds in >= 2/3 of the prompts (``long_leave_one_out=False``);
- ``fraction_loo``: the same and surviving the drop of any one prompt (the default rule, ``is_sdh_long``).

Writes (``MODEL`` the model's name):

- ``long_range_summary.csv``: ``model, prompts, tokens, rule, long_sdh``, plus ``content_repeats`` (heads whose
  best lag by mean holds in < 2/3 of the prompts) and ``seconds``;
- ``long_range_MODEL_long_slash.csv``: ``interp.report.tables.long_lag_table`` (top 5 long lags per head, with the
  rule's view of each; what ``interp scan`` writes as ``long_slash.csv``);
- ``long_range_MODEL_content_repeats.csv``: ``interp.report.tables.content_repeats`` (``content_repeats.csv``);
- ``long_range_MODEL_heads.csv``: per head its best long lag and score under each rule (``mean_``, ``fraction_``,
  ``fraction_loo_`` + ``delta``, ``score``, ``sdh``);
- ``long_range_MODEL_checks.csv``: named heads at named lags (``CHECKS``: L7H7 at 1230 / 1231, the lag the
  fraction rule alone flagged; L18H7 at 1229, the old top head) with each prompt's own score, the mean, the hit
  count and both rules' verdicts.

With ``--ood`` (004 App. C, Table 6: do long-range SDHs keep their slash on out-of-distribution input?) as many
random-token prompts (uniform over the vocabulary without special tokens, seeded; as ``ood_ratio.py``) are scanned the
same way, and for every long-range SDH of the text run (the default rule, at its lag) ``ratio = slash_ood / slash_id``:

- ``long_range_ood.csv``: ``model, layer, head, delta, slash_id, slash_ood, ratio`` (one row per long-range SDH);
- ``long_range_ood_summary.csv``: per model the number of long-range SDHs, the shares with ratio > 0.5 and > 1 and the
  median ratio, with 95% bootstrap intervals over prompts (text and random prompts resampled independently, the heads
  and lags fixed), and the random prompts' own long-range SDH count under the default rule.

    python -m analyses.p004_slash.long_range_slash [--models smollm2-135m] [--prompts 3] [--tokens 6000] [--ood] [--quick] [--out DIR]

``--quick``: tiny-llama (context 512), 3 random-token prompts of 512 tokens with the long window moved to lags
200..400 and 100 entries per prompt (``QUICK_LONG``), checks at two lags there; it tests the plumbing, no claim.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

import interp
from interp.measures.slash import consistent_lags, consistent_long_columns, long_lag_range
from interp.report.tables import content_repeats, long_lag_table

from analyses._common import parser, write_rows
from analyses.p004_slash.band_ablation import boot_index, interval

# (layer, head, lag): L7H7 at 1231 passed the fraction rule alone (prompt 2 alone scores ~0.02 at 1230);
# L18H7 led the mean-only ranking at 1229, a passage that repeats in prompt 2 only (docs/results/smollm2.md)
CHECKS = [(7, 7, 1230), (7, 7, 1231), (18, 7, 1229)]
RULES = ("mean", "fraction", "fraction_loo")
QUICK_LONG = {"long_lags": (200, 400), "long_min_entries": 100}
QUICK_CHECKS = [(0, 0, 250), (1, 1, 300)]


def rule_heads(result: interp.ScanResult) -> pd.DataFrame:
    """Per head (``layer, head``) the best long lag, its mean score and the SDH flag under each rule (module docstring)."""
    cfg = result.config
    lags = long_lag_range(result)
    L, H = result.scores.shape[:2]
    out = {"layer": torch.arange(L).repeat_interleave(H), "head": torch.arange(H).repeat(L)}
    for rule, loo in (("fraction", False), ("fraction_loo", True)):
        cols = consistent_long_columns(result.state, lags, cfg.kappa_long, cfg.long_min_frac, leave_one_out=loo)
        if loo:  # the unfiltered best lag is the same for both calls
            out.update(mean_delta=cols["long_any_slash_delta"], mean_score=cols["long_any_slash_score"],
                       mean_sdh=cols["long_any_slash_score"].nan_to_num(nan=-1.0) >= cfg.kappa_long)
        out.update({f"{rule}_delta": cols["long_slash_delta"], f"{rule}_score": cols["long_slash_score"], f"{rule}_sdh": cols["is_sdh_long"]})
    cols = ["layer", "head", *[f"{r}_{x}" for r in RULES for x in ("delta", "score", "sdh")]]
    return pd.DataFrame({k: out[k].reshape(-1).numpy() for k in cols})


def rule_counts(heads: pd.DataFrame) -> dict[str, int]:
    """Long-range SDH counts under the three rules, from ``rule_heads``."""
    return {rule: int(heads[f"{rule}_sdh"].sum()) for rule in RULES}


def checks(result: interp.ScanResult, per_prompt: list[interp.ScanResult], cells=CHECKS) -> pd.DataFrame:
    """Each (layer, head, lag) in ``cells`` that the scan reaches: per-prompt scores, mean, hits, both rules' verdicts."""
    cfg = result.config
    lags = long_lag_range(result)
    st = result.state
    rows = []
    for l, h, d in cells:
        if not (lags.start <= d < lags.stop) or l >= result.scores.shape[0] or h >= result.scores.shape[1]:
            continue
        verdict = {loo: bool(consistent_lags(st, d, d + 1, cfg.kappa_long, cfg.long_min_frac, loo)[l, h, 0]) for loo in (False, True)}
        row = {"layer": l, "head": h, "delta": d, "slash_score": float(result.scores[l, h, d]),
               "prompts_hit": int(st["long_hits"][l, h, d]), "prompts": int(st["slash_prompts"][d]),
               "passes_fraction": verdict[False], "passes_fraction_loo": verdict[True]}
        row.update({f"prompt{i}_score": float(r.scores[l, h, d]) for i, r in enumerate(per_prompt)})
        rows.append(row)
    return pd.DataFrame(rows)


def per_prompt_scans(model, prompts, cfg, log: str = "") -> list[interp.ScanResult]:
    """Each prompt scanned alone (``prompt_ids`` 0..n-1), so each prompt's own scores are at hand."""
    t0 = time.perf_counter()
    out = []
    for i, p in enumerate(prompts):
        out.append(interp.scan(model, p[None], cfg, prompt_ids=[i]))
        print(f"{log}prompt {i + 1}/{len(prompts)} scanned, {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def ood_table(name: str, heads: pd.DataFrame, text: list[interp.ScanResult], ood: list[interp.ScanResult],
              reps: int = 2000) -> tuple[pd.DataFrame, dict]:
    """The long-range SDHs of ``heads`` (``rule_heads`` of the text run, default rule) at their lags on the text and on the
    random prompts: per head ``slash_id``, ``slash_ood`` (means over each set's prompts) and ``ratio``; and the summary
    (module docstring) with 95% bootstrap intervals over prompts (``reps`` resamples)."""
    sdh = heads[heads["fraction_loo_sdh"]]
    idx = tuple(torch.tensor(sdh[c].astype("int64").tolist(), dtype=torch.long) for c in ("layer", "head", "fraction_loo_delta"))
    s_id = torch.stack([r.scores[idx] for r in text]).double().numpy()   # [prompt, head]
    s_ood = torch.stack([r.scores[idx] for r in ood]).double().numpy()
    table = sdh[["layer", "head"]].assign(model=name, delta=idx[2].numpy(), slash_id=s_id.mean(0), slash_ood=s_ood.mean(0))
    table["ratio"] = table["slash_ood"] / table["slash_id"]
    table = table[["model", "layer", "head", "delta", "slash_id", "slash_ood", "ratio"]]
    b_id, b_ood = boot_index(len(text), reps, seed=0), boot_index(len(ood), reps, seed=1)
    ratio = s_ood[b_ood].mean(1) / s_id[b_id].mean(1)  # [rep, head]
    row = {"model": name, "long_sdh": len(table), "boot": reps}
    if len(table):
        for key, stat in (("share_gt_0.5", lambda r: (r > 0.5).mean(-1)), ("share_gt_1", lambda r: (r > 1).mean(-1)),
                          ("median_ratio", lambda r: np.median(r, -1))):
            row[key] = float(stat(table["ratio"].to_numpy()))
            row[f"{key}_lo"], row[f"{key}_hi"] = interval(stat(ratio))
    return table, row


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 3 prompts x 512 tokens, long lags 200..400")
    ap.set_defaults(models=["smollm2-135m"])
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ood", action="store_true", help="also random-token prompts: each long-range SDH's OOD / text ratio (004 Table 6)")
    args = ap.parse_args(argv)
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    n, t = (3, 512) if args.quick else (args.prompts, args.tokens)
    cfg = interp.ScanConfig(counterfactual_sinks=False, **(QUICK_LONG if args.quick else {}))
    args.out.mkdir(parents=True, exist_ok=True)
    summary, ood_rows, ood_summary = [], [], []
    for name in models:
        t0 = time.perf_counter()
        model = interp.load_model(name, device="cpu")
        prompts = interp.corpus.prompts(model, "random" if args.quick else "pydoc", n, t, args.seed)
        per = per_prompt_scans(model, prompts, cfg, f"{name}: ")
        result = interp.merge_results(per)
        heads = result.heads
        reps = content_repeats(result, heads)
        secs = round(time.perf_counter() - t0, 1)
        by_rule = rule_heads(result)
        by_rule.to_csv(args.out / f"long_range_{name}_heads.csv", index=False)
        for rule, k in rule_counts(by_rule).items():
            summary.append({"model": name, "prompts": n, "tokens": t, "rule": rule, "long_sdh": k, "content_repeats": len(reps),
                            "seconds": secs})
        long_lag_table(result).to_csv(args.out / f"long_range_{name}_long_slash.csv", index=False)
        reps.to_csv(args.out / f"long_range_{name}_content_repeats.csv", index=False)
        checks(result, per, QUICK_CHECKS if args.quick else CHECKS).to_csv(args.out / f"long_range_{name}_checks.csv", index=False)
        print(pd.DataFrame(summary[-3:]).to_string(index=False), flush=True)
        if args.ood:
            rand = interp.corpus.prompts(model, "random", n, t, args.seed + 1000)  # other draws than --quick's text stand-in
            ood = per_prompt_scans(model, rand, cfg, f"{name} random tokens: ")
            table, row = ood_table(name, by_rule, per, ood)
            row["ood_long_sdh"] = rule_counts(rule_heads(interp.merge_results(ood)))["fraction_loo"]
            ood_rows.append(table)
            ood_summary.append({"prompts": n, "tokens": t, **row})
            print(pd.DataFrame([ood_summary[-1]]).to_string(index=False), flush=True)
        del model
    df = write_rows(pd.DataFrame(summary), args.out / "long_range_summary.csv", ("model", "rule"), merge=not args.quick)
    if args.ood:  # other models' rows stay (one model per run on this CPU)
        write_rows(pd.concat(ood_rows, ignore_index=True), args.out / "long_range_ood.csv", ("model", "layer", "head"),
                   merge=not args.quick)
        write_rows(pd.DataFrame(ood_summary), args.out / "long_range_ood_summary.csv", ("model",), merge=not args.quick)
    return df


if __name__ == "__main__":
    main()
