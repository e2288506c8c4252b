"""Error of bfloat16 / float16 scans against float32 on the zoo models (issue 11: the numbers the README states).

For each model and dtype, the same pydoc prompts are scanned with the model loaded in float32 and in
the reduced dtype (weights and activations; the scan itself works in float32 on the model's q/k/v and
sums in float64). Reported per model and dtype: the largest change of any slash score (all heads,
lags 0..N-1), of r1_q / r1_k (pre-RoPE), of the sink weight, how many heads change SDH status, and
the scan time relative to float32. Writes ``figures/dtype_error.csv``.

    python -m analyses.benchmarks.dtype_error [--models smollm2-135m ...] [--prompts 4] [--tokens 512] [--quick]
"""

from __future__ import annotations

import pandas as pd

import interp
from interp.measures import slash

from analyses._common import parser


def compare(name: str, prompts: int, tokens: int, dtypes=("bfloat16", "float16")) -> list[dict]:
    """Rows of the table for one model (see the module docstring)."""
    ref_model = interp.load_model(name, device="cpu")
    p = interp.corpus.prompts(ref_model, "pydoc", prompts, tokens)
    ref = interp.scan(ref_model, p)
    del ref_model
    valid = tokens - slash.SKIP
    rows = []
    for dt in dtypes:
        try:
            got = interp.scan(interp.load_model(name, device="cpu", dtype=dt), p)
        except interp.errors.NumericsError as err:  # e.g. Gemma in float16: activations overflow
            rows.append({"model": name, "dtype": dt, "prompts": prompts, "tokens": tokens, "note": str(err)})
            print(rows[-1], flush=True)
            continue
        a, b = ref.heads, got.heads
        rows.append({
            "model": name, "dtype": dt, "prompts": prompts, "tokens": tokens,
            "max_abs_slash": float((got.scores[..., :valid] - ref.scores[..., :valid]).abs().max()),
            "max_abs_r1_q": float((a.r1_q - b.r1_q).abs().max()), "max_abs_r1_k": float((a.r1_k - b.r1_k).abs().max()),
            "max_abs_sink": float((a.sink_weight - b.sink_weight).abs().max()),
            "sdh_flips": int((a.is_sdh != b.is_sdh).sum()), "n_heads": len(a),
            "time_ratio": got.meta["seconds"] / ref.meta["seconds"],
        })
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, 2 prompts x 64 tokens")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=512)
    args = ap.parse_args(argv)
    models = ["tiny-llama"] if args.quick else [m for m in args.models if interp.models.is_installed(m)]
    n, t = (2, 64) if args.quick else (args.prompts, args.tokens)
    df = pd.DataFrame([r for m in models for r in compare(m, n, t)])
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "dtype_error.csv", index=False)
    print(df.to_string(index=False))
    return df


if __name__ == "__main__":
    main()
