"""The dose of 004's band ablation in each model: how many of a band's rotation planes are left unrotated (issue 33).

004 Sec. 5 (Table 5, Fig. 8) splits the 64 planes of its models into thirds and leaves six evenly spaced planes of one
third unrotated: 6 of 21 or 22 planes, about 29% of the band (10% of all planes). ``interp.rope.band_planes`` applies
the same six planes to every model, so the dose differs with the head width: 6 of 10-11 planes (55-60% of a band) in
the 32-plane models, 6 of 42-43 (14%) in Gemma-3-270M's 128. For each model and band this script writes the planes per
head, the band's size, the planes removed and their share of the band and of all planes, and the matched dose: the
number of planes that removes the paper's share of the band (``round(share * band size)``, at least one), the plane
count a re-run at the paper's dose would use (``interp ablate MODEL --n-remove K``, not yet run for every model).

Planes per head come from ``figures/massive_values_summary.csv`` (``n_planes``, read from the loaded models) and, for
the paper, from 004 Sec. 5's 64. No model is loaded.

Writes ``band_dose.csv``: ``model, n_planes, band, band_planes, removed, share_of_band, share_of_all,
matched_removed, matched_share_of_band``.

    python -m analyses.p004_slash.band_dose [--out DIR] [--quick]
"""

from __future__ import annotations

import pandas as pd

from interp.rope import BANDS, band_planes

from analyses._common import FIGURES, parser

PAPER = ("004 (Llama3-8B, Qwen2.5-7B, Gemma-7B)", 64)
N_REMOVE = 6


def dose_table(planes: dict[str, int], n_remove: int = N_REMOVE) -> pd.DataFrame:
    """One row per model and band: the band's size, the planes the ablation removes and the matched dose."""
    paper_share = n_remove / len(band_planes_all(PAPER[1])[0])
    rows = []
    for model, n in planes.items():
        for band, part in zip(BANDS, band_planes_all(n)):
            removed = len(band_planes(n, band, n_remove))
            matched = max(1, round(paper_share * len(part)))
            rows.append({"model": model, "n_planes": n, "band": band, "band_planes": len(part), "removed": removed,
                         "share_of_band": removed / len(part), "share_of_all": removed / n,
                         "matched_removed": matched, "matched_share_of_band": matched / len(part)})
    return pd.DataFrame(rows)


def band_planes_all(n: int) -> list[range]:
    """The three bands of ``n`` planes (high, medium, low), as ``interp.rope.band_planes`` splits them."""
    import numpy as np

    return [range(int(p[0]), int(p[-1]) + 1) for p in np.array_split(np.arange(n), 3)]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Write ``band_dose.csv`` (see the module docstring)."""
    ap = parser(__doc__, "the same table (it loads no model)")
    args = ap.parse_args(argv)
    summary = pd.read_csv(FIGURES / "massive_values_summary.csv")
    planes = {PAPER[0]: PAPER[1]} | {m: int(n) for m, n in summary.groupby("model", sort=False)["n_planes"].first().items()}
    table = dose_table(planes)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "band_dose.csv", index=False)
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
