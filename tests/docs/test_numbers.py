"""Every number the README and the results pages quote is bound to a cell of a committed table (issues 21, 33).

`interp.docs.numbers.check` runs over the pages `docs/numbers.yml` lists: a hand-typed number outside a
`{{ num(...) }}` / `{{ rng(...) }}` template, a template whose table / column / row is missing, and a template whose
value differs from what `docs/numbers.lock.yml` recorded (the page is stale against its tables) each fail, named by
page and line. The mutation tests change one cell of a committed table (or type one number) in a temporary copy of
the repository and check that the failure names the page and the line.

The results pages are committed rendered (issue 45): `docs/templates/results/NAME.md` is the source and
`docs/results/NAME.md` its rendering, which the check compares with the template rendered now.
"""

import ast
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from interp.docs import numbers as dn

ROOT = Path(__file__).resolve().parents[2]


def test_docs_numbers_check_passes():
    problems = dn.check(ROOT)
    assert not problems, f"{len(problems)} problems (python -m interp.docs.numbers check):\n" + "\n".join(problems[:40])


def test_every_results_page_is_rendered_from_its_template():
    """Every `docs/results/NAME.md` is `docs/templates/results/NAME.md` rendered, and shows numbers, not templates."""
    pages = sorted(p.name for p in (ROOT / dn.RESULTS_DIR).glob("*.md"))
    sources = sorted(p.name for p in (ROOT / "docs" / "templates" / "results").glob("*.md"))
    assert pages == sources and "atlas.md" in pages
    rendered = dn.rendered_pages(ROOT)
    assert rendered["README.md"] == "docs/templates/README.md"
    for name in pages:
        page = f"{dn.RESULTS_DIR}/{name}"
        assert rendered[page] == f"docs/templates/results/{name}"
        text = (ROOT / page).read_text()
        assert text.startswith(dn.RENDERED_NOTE.format(src=rendered[page])) and not dn.templates(text), page


def _copy_repo(tmp_path: Path) -> Path:
    """The files the check reads, in a temporary repository root."""
    spec = yaml.safe_load((ROOT / dn.SPEC_FILE).read_text())
    (tmp_path / "figures").mkdir()
    for csv in (ROOT / "figures").glob("*.csv"):
        shutil.copy(csv, tmp_path / "figures" / csv.name)
    files = {dn.SPEC_FILE, dn.LOCK_FILE} | set(spec) | set(dn.rendered_pages(ROOT).values())
    files |= {p.relative_to(ROOT).as_posix() for p in (ROOT / dn.RESULTS_DIR).glob("*.md")}
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def _strict_page_template(root: Path):
    """A fully templated results page, its template, one of its `num` templates without a stat and the line it is on."""
    spec = yaml.safe_load((root / dn.SPEC_FILE).read_text())
    for page, src in dn.rendered_pages(root).items():
        if (spec.get(page) or {}).get("hand_typed") or not page.startswith(dn.RESULTS_DIR + "/"):
            continue
        for line, expr in dn.templates((root / src).read_text()):
            call = ast.parse(expr, mode="eval").body
            if call.func.id == "num" and len(call.args) == 2 and "fmt=\".2f\"" in expr:  # one cell, no stat
                return page, src, line, expr
    pytest.skip("no fully templated results page with a plain num template")


def test_mutating_one_cell_fails_naming_page_and_line(tmp_path):
    """A changed cell: the template's line is stale against the lock, and the committed page against the template."""
    root = _copy_repo(tmp_path)
    assert dn.check(root) == []
    page, src, line, expr = _strict_page_template(root)
    call = ast.parse(expr, mode="eval").body
    table, column = call.args[0].value, call.args[1].value
    where = {k.arg: k.value.value for k in call.keywords if k.arg != "fmt"}
    cell = dn._values(table, column, str(root), where)  # the one row the template reads
    assert len(cell) == 1
    frame = pd.read_csv(root / "figures" / table)
    frame.loc[cell.index[0], column] = float(cell.iloc[0]) + 0.5  # one cell changed
    frame.to_csv(root / "figures" / table, index=False)
    problems = dn.check(root)
    assert any(p.startswith(f"{src}:{line}: stale") for p in problems), problems
    assert any(p.startswith(f"{page}:") and "stale: differs from" in p for p in problems), problems
    dn.write_rendered(root)
    dn.write_lock(root)
    assert dn.check(root) == []


def test_missing_cell_fails_naming_page_and_line(tmp_path):
    root = _copy_repo(tmp_path)
    page, src, line, expr = _strict_page_template(root)
    table = re.match(r'num\("([^"]+)"', expr).group(1)
    column = re.match(r'num\("[^"]+", "([^"]+)"', expr).group(1)
    pd.read_csv(root / "figures" / table).drop(columns=[column]).to_csv(root / "figures" / table, index=False)
    problems = dn.check(root)
    assert any(p.startswith(f"{src}:{line}: ") and f"no column {column!r}" in p for p in problems), problems


def test_a_hand_typed_number_fails_naming_page_and_line(tmp_path):
    root = _copy_repo(tmp_path)
    _, src, _, _ = _strict_page_template(root)
    lines = (root / src).read_text().splitlines(keepends=True)
    lines.insert(3, "The median ratio is 0.78 here.\n")
    (root / src).write_text("".join(lines))
    assert f"{src}:4: hand-typed number 0.78" in " ".join(dn.check(root))


def test_a_new_template_is_rendered_and_checked_without_an_entry(tmp_path):
    """A page added as `docs/templates/results/NAME.md` needs nothing else: the check asks for its rendering, `render`
    writes `docs/results/NAME.md` with the numbers, and the template is checked like every page."""
    root = _copy_repo(tmp_path)
    src = root / "docs" / "templates" / "results" / "new_page.md"
    src.write_text('# New\n\nMedian {{ num("startup.csv", "min_s", fmt=".2f", command="import interp") }} s.\n')
    problems = dn.check(root)
    assert "docs/results/new_page.md: missing (its template is docs/templates/results/new_page.md): run python -m " \
           "interp.docs.numbers render" in problems
    assert any(p.startswith("docs/templates/results/new_page.md:3: {{ num(") and "is not in" in p for p in problems)
    written = dn.write_rendered(root)
    assert root / "docs" / "results" / "new_page.md" in written
    value = dn.num("startup.csv", "min_s", fmt=".2f", root=root, command="import interp")
    page = (root / "docs" / "results" / "new_page.md").read_text()
    assert page == dn.RENDERED_NOTE.format(src="docs/templates/results/new_page.md") + f"# New\n\nMedian {value} s.\n"
    dn.write_lock(root)
    assert dn.check(root) == []
    src.write_text(src.read_text() + "About 12 heads.\n")
    assert "docs/templates/results/new_page.md:4: hand-typed number 12" in " ".join(dn.check(root))


def test_a_results_page_with_templates_and_no_source_fails(tmp_path):
    """A template written straight into `docs/results/` would show as `{{ num(...) }}` on the repository host."""
    root = _copy_repo(tmp_path)
    (root / "docs" / "results" / "raw.md").write_text('# Raw\n\n{{ num("startup.csv", "min_s", command="import interp") }}\n')
    assert any(p.startswith("docs/results/raw.md:3: holds {{ ... }} templates") and
               "move the page to docs/templates/results/raw.md" in p for p in dn.check(root))


def test_the_site_builds_a_rendered_page_from_its_template(tmp_path):
    """The MkDocs hook reads `docs/templates/results/NAME.md`, not the committed rendering: the site shows the
    tables as they are now."""
    pytest.importorskip("mkdocs")
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("numbers_hook", ROOT / "docs" / "hooks" / "numbers.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    root = _copy_repo(tmp_path)
    (root / "docs" / "results" / "atlas.md").write_text("# an old rendering\n")
    config = {"config_file_path": str(root / "mkdocs.yml"), "docs_dir": str(root / "docs")}
    page = SimpleNamespace(file=SimpleNamespace(src_path="results/atlas.md"))
    out = hook.on_page_markdown("# an old rendering\n", page, config, None)
    assert out == dn.render((root / "docs" / "templates" / "results" / "atlas.md").read_text(), root)
    other = SimpleNamespace(file=SimpleNamespace(src_path="index.md"))
    assert hook.on_page_markdown('x {{ num("startup.csv", "min_s", fmt=".2f", command="import interp") }}', other,
                                 config, None) == "x " + dn.num("startup.csv", "min_s", fmt=".2f", root=root,
                                                                command="import interp")


def test_the_guard_that_accepted_any_matching_cell_is_gone():
    """Issue 33: paper-001 quoted -0.119 where its cell is -0.11847; an unrelated Qwen cell rounds to -0.119 and
    the old check (`unbacked`: any cell of any listed table) passed it. A hand-typed number now fails whatever the
    tables hold, and the templated cell renders what the table says."""
    assert not hasattr(dn, "unbacked") and not hasattr(dn, "backed")
    assert dn.hand_typed("mean q-k cosine -0.119") == [(1, "-0.119")]
    expr = 'num("frayed_rope_summary.csv", "median", fmt=".3f", model="smollm2-135m", measure="cos_qk_rot", length=8192)'
    assert dn.evaluate(expr, ROOT) == "-0.118"


def test_hand_typed_counts_integers_and_skips_what_is_not_a_result():
    text = ("# 2. Results\n"
            "1. L16H0 scores 0.770 (Sec. 3.1, Thm 4.1, Table 5, Figs. 12-13, paper 004, issue 21; Python 3.11) on "
            "Gemma-3 and Qwen2.5-Coder-0.5B, `interp scan --prompts 8`, [x](a/0.3.png), Wu et al. 2024, 000's copy\n"
            "80 of 270 heads, 49.6 %, 1,024 tokens, 20x, 3.8e-4, torch 2.13.0, 2D-RoPE, a 7B model, top-1 "
            '{{ num("t.csv", "x") }}\n'
            "8 prompts x 512 tokens\n")
    assert dn.hand_typed(text) == [(2, "0.770"), (3, "80"), (3, "270"), (3, "49.6%"), (3, "1,024"), (3, "20"),
                                   (3, "3.8e-4"), (4, "8"), (4, "512")]
    assert dn.hand_typed(text, {"8 prompts x 512 tokens": "setting"})[-1] == (3, "3.8e-4")


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
    assert dn.find_cells("0.12", ["t.csv"], tmp_path) == ["t.csv[x] = 0.12345 where model='a', lag=0"]
    with pytest.raises(dn.DocsNumberError, match="2 rows"):
        dn.num("t.csv", "x", root=tmp_path, model="a")
    with pytest.raises(dn.DocsNumberError, match="no column 'y'"):
        dn.num("t.csv", "y", root=tmp_path)
    assert dn.render('heads {{ cell("t.csv", "model", lag=0) }}', tmp_path) == "heads a"
    with pytest.raises(dn.DocsNumberError, match="2 rows"):
        dn.cell("t.csv", "model", root=tmp_path, lag=1)
    with pytest.raises(dn.DocsNumberError, match="only num, rng"):
        dn.render("{{ open('x') }}", tmp_path)


def test_a_changed_cell_makes_the_rendered_readme_stale(tmp_path):
    """README.md is rendered from docs/templates/README.md: a table change shows as a stale README line and a stale
    template line, until the README is re-rendered and the lock rewritten."""
    root = _copy_repo(tmp_path)
    startup = pd.read_csv(root / "figures" / "startup.csv")
    startup.loc[startup["command"] == "import interp", "min_s"] = 0.42
    startup.to_csv(root / "figures" / "startup.csv", index=False)
    problems = dn.check(root)
    readme_line = next(i + 1 for i, line in enumerate((root / "README.md").read_text().splitlines())
                       if line.startswith("`import interp` takes"))
    assert any(p.startswith(f"README.md:{readme_line}: stale") for p in problems), problems
    assert any(p.startswith("docs/templates/README.md:") and "renders 0.42" in p for p in problems), problems
    dn.write_rendered(root)
    dn.write_lock(root)
    assert dn.check(root) == []


def test_allowed_phrases_and_the_pending_count(tmp_path):
    """An allowed phrase covers its own occurrence only; a stale phrase and a count that fell are reported."""
    (tmp_path / "figures").mkdir()
    (tmp_path / "docs" / "results").mkdir(parents=True)
    page = tmp_path / "docs" / "results" / "p.md"
    page.write_text("On 8 prompts x 1024 tokens the count is 80; another 8 here.\n")
    spec = tmp_path / dn.SPEC_FILE
    spec.write_text('docs/results/p.md:\n  allow:\n    "8 prompts x 1024 tokens": setting\n')
    assert [p.split(": ", 1)[1][:22] for p in dn.check(tmp_path)] == ["hand-typed number 80: ", "hand-typed number 8: b"]
    spec.write_text('docs/results/p.md:\n  allow:\n    "8 prompts x 1024 tokens": setting\n    "gone": x\n  hand_typed: 3\n')
    problems = dn.check(tmp_path)
    assert any("allows the phrase 'gone'" in p for p in problems)
    assert any("2 hand-typed numbers left, docs/numbers.yml still says 3: lower it" in p for p in problems)
    spec.write_text('docs/results/p.md:\n  hand_typed: 1\n')
    assert any("4 hand-typed numbers, docs/numbers.yml allows at most 1" in p for p in dn.check(tmp_path))
