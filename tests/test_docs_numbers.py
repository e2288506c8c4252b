"""Every number the README and the results pages quote has a committed table behind it (issue 21, item 1).

`docs/numbers.yml` names, per page, the tables in `figures/` that back it and the few exempt tokens (settings,
paper quotes, values whose table is still missing, each with its reason). A page's `{{ num(...) }}` templates must
resolve against the tables (the docs build fills them in the same way).
"""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from interp import docs_numbers as dn

ROOT = Path(__file__).resolve().parents[1]
SPEC = yaml.safe_load((ROOT / "docs" / "numbers.yml").read_text())
PAGES = sorted(SPEC)


@pytest.mark.parametrize("page", PAGES)
def test_every_quoted_number_has_a_table(page):
    entry = SPEC[page]
    text = (ROOT / page).read_text()
    dn.render(text, ROOT)  # every template resolves (raises DocsNumberError naming it otherwise)
    missing = dn.unbacked(text, entry.get("tables") or [], entry.get("allow") or {}, ROOT)
    assert not missing, (f"{page} quotes {missing} with no table behind them: name the CSV in docs/numbers.yml, "
                         "pull the value with a {{ num(...) }} template, or (settings, paper quotes) allow it with a reason")


@pytest.mark.parametrize("page", PAGES)
def test_allowlist_is_current(page):
    """An exempt token that the page no longer quotes is stale and must go (keeps the allowlist small)."""
    quoted = set(dn.quoted_numbers((ROOT / page).read_text()))
    stale = [t for t in (SPEC[page].get("allow") or {}) if t not in quoted]
    assert not stale, f"{page}: docs/numbers.yml allows {stale}, which the page no longer quotes"


def test_every_results_page_is_checked():
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "results").glob("*.md")}
    unchecked = sorted(pages - set(SPEC))
    assert not unchecked, f"results pages without an entry in docs/numbers.yml: {unchecked}"


def test_catches_the_issue_21_mismatches():
    """The old README's numbers that the tables do not support are flagged at their printed precision.

    (A bound such as the old ">= 0.998", or a range whose ends are cells but not the extremes ("1.13-3.2"), is not caught when another cell happens to print as 0.998: bounds and
    ranges over many cells are written as {{ num(..., "min") }} / {{ rng(...) }} templates instead.)"""
    assert dn.unbacked("Qwen keys pre 1.26 -> 1.22", ["frayed_rope_summary.csv:median"], root=ROOT) == ["1.26"]
    assert dn.unbacked("gain 0.101 vs 0.102 nats", ["loo_summary.csv:mean_gain_all"], root=ROOT) == ["0.102"]
    assert dn.unbacked("mean score 0.78-0.999", ["dyck_counting.csv:score"], root=ROOT) == ["0.78"]

    assert dn.unbacked("sink rate 49.6%, 80 SDHs", ["compare_zoo_summary.csv"], root=ROOT) == []
    assert dn.unbacked("sink rate 49.7%", ["compare_zoo_summary.csv"], root=ROOT) == ["49.7%"]


def test_num_and_rng_read_the_table(tmp_path):
    (tmp_path / "figures").mkdir()
    pd.DataFrame({"model": ["a", "a", "b"], "lag": [0, 1, 1], "x": [0.12345, 0.5, 2.0]}).to_csv(
        tmp_path / "figures" / "t.csv", index=False)
    assert dn.num("t.csv", "x", fmt=".3f", root=tmp_path, model="a", lag=0) == "0.123"
    assert dn.num("t.csv", "x", "median", ".2f", root=tmp_path, model="a") == "0.31"
    assert dn.num("t.csv", "x", "count", ".0f", root=tmp_path, lag=">=1") == "2"
    assert dn.rng("t.csv", "x", fmt=".1f", root=tmp_path) == "0.1-2.0"
    assert dn.rng("t.csv", "lag", fmt=".0f", root=tmp_path, model="b") == "1"  # equal ends: one value
    assert dn.render('v {{ num("t.csv", "x", fmt=".0%", model="b") }}, `{{ kept }}`', tmp_path) == "v 200%, `{{ kept }}`"
    with pytest.raises(dn.DocsNumberError, match="2 rows"):
        dn.num("t.csv", "x", root=tmp_path, model="a")
    with pytest.raises(dn.DocsNumberError, match="no column 'y'"):
        dn.num("t.csv", "y", root=tmp_path)
    with pytest.raises(dn.DocsNumberError, match="only num, rng"):
        dn.render("{{ open('x') }}", tmp_path)


def test_quoted_numbers_skip_code_references_and_words():
    text = ("L16H0 scores 0.770 (Sec. 3.1, Thm 4.1, Python 3.11.7) on 1.4B tokens, `0.5` and [x](a/0.3.png); "
            "a range 0.90-0.95, a sign -0.37, 12.5 % and 3.8e-4; kappa 1e-3\n```\n0.25\n```\n")
    assert dn.quoted_numbers(text) == ["0.770", "0.90", "0.95", "-0.37", "12.5%", "3.8e-4"]
