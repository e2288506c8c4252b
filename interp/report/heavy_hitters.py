"""The report section of the ``heavy_hitters`` measure: each head's top token ids by share and by lift, as text.

Registered with ``interp.report.sections`` (measure ``heavy_hitters``), so the report shows it whenever a scan ran
that measure. Token text is escaped.
"""

from __future__ import annotations

import html
import math

import pandas as pd

from interp.measures import heavy_hitters as hh_measure
from interp.measures import prompt_count
from interp.report import html as html_kit
from interp.report.sections import register_section
from interp.report.tables import heavy_hitter_cells

HH_TOP = 5  # heavy-hitter tokens shown per head
HH_LIFT_MIN_KEYS = 0.01  # ids ranked by lift hold at least this share of the keys (the sketch's error stays small)


def heavy_hitter_html(table: pd.DataFrame, skip: int, n_prompts: int, lifted: pd.DataFrame | None = None,
                      min_key_share: float = HH_LIFT_MIN_KEYS) -> str:
    """The heavy-hitter section from ``interp.measures.heavy_hitters.heavy_hitter_tokens``' table (ranked by share): the
    model-level shares by token class (when the tokens were decoded) and each head's top tokens; with ``lifted`` (the
    same ranked by lift among ids on at least ``min_key_share`` of the keys) a second column. Every token text escaped."""
    k = int(table["rank"].max()) + 1 if len(table) else 0
    n_heads = len(table.groupby(["layer", "head"])) if len(table) else 0
    parts = [f"<h2>Heavy-hitter tokens: the {k} token ids that receive the most attention, per head</h2>",
             '<p class="note">Attention a head puts on each token id, summed over the keys holding it in all '
             f"{n_prompts} prompt{'' if n_prompts == 1 else 's'}, keys 0..{skip - 1} (the sinks) left out (H2O, Zhang et al. 2023, ranks keys by "
             "accumulated attention; here keys are pooled by token id, so the sum runs over prompts). Each entry: the "
             "token, its share of the head's attention on keys other than the sinks, and its lift (that share over the "
             "share of keys holding the token: x1 = attended as often as it occurs). Ranking by share favours frequent "
             "tokens; ranking by lift names the tokens a head seeks beyond their frequency. Shares come from a count-min sketch "
             f"(interp.measures.heavy_hitters): upper estimates, at most {math.e / hh_measure.WIDTH:.2%} of the head's "
             f"attention too high with probability {1 - math.exp(-hh_measure.DEPTH):.0%} per token.</p>"]
    known = table[table["class"] != ""] if len(table) else table
    if len(known):
        summ = hh_measure.class_summary(known)
        words = ", ".join(f"{f:.0%} {c}" for c, n, f in zip(summ["class"], summ["entries"], summ["entry_share"]) if n)
        shown = pd.DataFrame({"class": summ["class"], "entries": summ["entries"],
                              "share of entries": summ["entry_share"].map("{:.1%}".format),
                              "share of their attention": summ["attention_share"].map("{:.1%}".format)})
        parts += [f"<p>Of the {len(known)} heavy-hitter entries ({k} per head, {n_heads} heads): {html.escape(words)}.</p>",
                  html_kit.table(shown, "tbl hh-classes")]
    elif len(table):
        parts.append('<p class="note">Token text needs the model\'s tokenizer: write_report(result, path, '
                     "tokenizer=model.tokenizer); ids shown.</p>")
    def td(cells, css):
        return (f'<td class="{css}">' + " &nbsp; ".join(f"<code>{html.escape(label)}</code> {html.escape(detail)}"
                                                      for label, detail in cells) + "</td>")

    second = {(l, h): c for l, h, c in heavy_hitter_cells(lifted)} if lifted is not None else None
    rows = "".join(f"<tr><td>{layer}</td><td>{head}</td>{td(cells, 'hh-toks')}"
                   + (td(second.get((layer, head), []), "hh-lift") if second is not None else "") + "</tr>"
                   for layer, head, cells in heavy_hitter_cells(table))
    extra = (f"<th>most above their frequency (largest lift; ids on at least {min_key_share:.0%} of the keys)</th>"
             if second is not None else "")
    parts.append('<div class="scroll"><table class="tbl hh"><thead><tr><th>layer</th><th>head</th>'
                 f"<th>most attention: share of attention, lift</th>{extra}</tr></thead><tbody>{rows}</tbody></table></div>")
    return "\n".join(parts)


def heavy_hitter_section(result, tokenizer=None) -> list[str]:
    """The heavy-hitter section of a scan with the ``heavy_hitters`` state (else nothing): tokens decoded with
    ``tokenizer`` (ids without it)."""
    if "hh_sketch" not in result.state:
        return []
    table = hh_measure.heavy_hitter_tokens(result, tokenizer, HH_TOP)
    lifted = hh_measure.heavy_hitter_tokens(result, tokenizer, HH_TOP, by="lift", min_key_share=HH_LIFT_MIN_KEYS)
    return [heavy_hitter_html(table, result.config.skip, int(prompt_count(result)), lifted)]


register_section("heavy_hitters", heavy_hitter_section)
