"""How many heads the atlas labels when there is nothing to find: a null for its thresholds (issue 33, part 3).

The atlas's rules (``interp.experiments.atlas``) put each role's threshold at a fixed fraction of the way from chance
to the attainable score, or use the papers' values; none was set against a null. This script runs the same atlas
(``run_atlas``: same sizes, no band ablation, no support) on inputs where the content roles have nothing to find:
the text pass on random tokens (uniform over the vocabulary, seeded: no word repeats beyond chance) and the
repeated-random pass with one copy only (``repeats = 1``: plain random tokens, so no earlier copy exists for an
induction or echo head to find). The share of heads each rule labels there is its rate under this null.

What the null covers: the token-matched roles (``duplicate_token``, ``induction``, ``echo``) need content, so a head
labelled under the null is a false positive of the rule. The positional roles (``previous_token``, ``sdh``, ``sink``,
``streaming``) do not need content: random tokens are 004's out-of-distribution test for them, not a null (see the OOD
page), and their counts here say how much of the label survives without text. ``retrieval`` is joined, not measured.

``--null positions`` is the second null: the same text and repeated-random prompts as the atlas, with the positions
RoPE encodes shuffled in every layer (``interp.rope.variants.ShuffledPositions``, a seeded permutation, applied with
``interp.hooks.intervene.rope_intervention``; the causal mask stays). It is a null for the roles read from a fixed
offset (``previous_token``, ``sdh``): a head that finds its lag through RoPE loses it, one that follows content keeps
it. Every role's count is reported.

Writes ``atlas_null.csv``: ``model, input, role, heads, labelled_text, labelled_null, labelled_both, share_null, null``
(``input``: ``random tokens`` or ``shuffled positions``)
(``labelled_text``: the count of ``atlas_summary.csv``; ``labelled_both``: heads labelled both here and in the committed
``atlas_<model>.csv``; ``null``: whether the random input is a null for that role). Random tokens still repeat by
chance (a vocabulary of tens of thousands, a thousand tokens), so a real induction head can act on those accidental
repeats: ``labelled_both`` tells such heads from new labels.

    python -m analyses.atlas.atlas_null [--models ...] [--prompts 8] [--tokens 1024] [--null tokens|positions] [--quick] [--out DIR]
"""

from __future__ import annotations

import pandas as pd
import torch

import interp
from interp.experiments.atlas import ROLE_NAMES, AtlasConfig, run_atlas

from analyses._common import FIGURES, installed, parser, replace_rows

CONTENT_ROLES = ("duplicate_token", "induction", "echo")  # the random input is a null for these
OFFSET_ROLES = ("previous_token", "sdh")  # shuffled positions are a null for these
INPUTS = {"tokens": "random tokens", "positions": "shuffled positions"}


def null_table(model, prompts: int, tokens: int, seed: int = 1) -> pd.DataFrame:
    """The atlas table of ``model`` on random tokens (text pass) and unrepeated random tokens (repeated pass)."""
    text = interp.corpus.prompts(model, "random", prompts, tokens, seed)
    cfg = AtlasConfig(prompts=prompts, tokens=tokens, repeats=1, ablate=False, inp=False, support=0)
    return run_atlas(model, cfg, text_prompts=text).table


def shuffled_positions_table(model, prompts: int, tokens: int, seed: int = 1) -> pd.DataFrame:
    """The atlas table of ``model`` on its usual prompts (pydoc text, repeated random tokens) with the positions RoPE
    encodes shuffled in every layer (``ShuffledPositions(seed)``)."""
    from interp.hooks.intervene import rope_intervention
    from interp.rope.variants import ShuffledPositions

    cfg = AtlasConfig(prompts=prompts, tokens=tokens, ablate=False, inp=False, support=0)
    with rope_intervention(model, ShuffledPositions(seed)):
        return run_atlas(model, cfg).table


def labelled_heads(table: pd.DataFrame, role: str) -> set[tuple[int, int]]:
    """The ``(layer, head)`` pairs an atlas table labels with ``role``."""
    col = f"role_{role}"
    if col not in table:
        return set()
    return {(int(r.layer), int(r.head)) for r in table[table[col].astype(bool)].itertuples()}


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Write ``atlas_null.csv`` (see the module docstring)."""
    ap = parser(__doc__, "tiny-llama, 2 prompts x 48 tokens")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--null", choices=sorted(INPUTS), default="tokens",
                    help="tokens: random-token prompts; positions: the atlas's prompts with RoPE's positions shuffled")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.prompts, args.tokens = ["tiny-llama"], 2, 48
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    summary = pd.read_csv(FIGURES / "atlas_summary.csv").set_index("model")
    rows = []
    for name in installed(args.models):
        model = interp.load_model(name, device="cpu")
        table = (null_table if args.null == "tokens" else shuffled_positions_table)(model, args.prompts, args.tokens)
        atlas = FIGURES / f"atlas_{name}.csv"
        text_table = pd.read_csv(atlas) if atlas.exists() else None
        heads = model.card.n_layers * model.card.n_heads
        counts = {}
        for role in ROLE_NAMES:
            if f"role_{role}" not in table:
                continue
            null_heads = labelled_heads(table, role)
            counts[role] = len(null_heads)
            text = int(summary.at[name, role]) if name in summary.index and role in summary.columns else None
            both = len(null_heads & labelled_heads(text_table, role)) if text_table is not None else None
            rows.append({"model": name, "input": INPUTS[args.null], "role": role, "heads": heads, "labelled_text": text,
                         "labelled_null": len(null_heads), "labelled_both": both, "share_null": len(null_heads) / heads,
                         "null": role in (CONTENT_ROLES if args.null == "tokens" else OFFSET_ROLES)})
        print(f"{name}: " + ", ".join(f"{r} {n}" for r, n in counts.items()), flush=True)
    df = pd.DataFrame(rows)
    path = args.out / "atlas_null.csv"
    if path.exists() and not args.quick:
        old = pd.read_csv(path)
        if "input" not in old:  # tables written before the second null: every row was the random-token null
            old.insert(1, "input", INPUTS["tokens"])
        df = replace_rows(old, df, ["model", "input", "role"])
    df.to_csv(path, index=False)
    print(df.to_string(index=False))
    return df


if __name__ == "__main__":
    main()
