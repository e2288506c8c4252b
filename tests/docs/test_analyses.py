"""The analyses index (`docs/analyses.md`, issue 36): generated from the scripts, provenance and the results pages, and
current; its figure stems are read from the scripts' ``save_figure`` calls."""

from __future__ import annotations

from pathlib import Path

from interp.docs import analyses

ROOT = Path(__file__).resolve().parents[2]


def test_the_index_is_current_and_every_script_has_a_table():
    problems = analyses.check(ROOT)
    assert not problems, "\n".join(problems)


def test_every_script_sits_in_a_group_and_is_indexed():
    scripts = {s.path for s in analyses.collect(ROOT)}
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "analyses").glob("*/*.py") if not p.name.startswith("_")}
    assert scripts == on_disk and on_disk
    assert {Path(p).parent.name for p in on_disk} <= set(analyses.GROUPS)
    # a package: every group folder has its __init__.py, so each script runs as python -m analyses.GROUP.SCRIPT
    assert (ROOT / "analyses" / "__init__.py").is_file()
    assert all((ROOT / "analyses" / g / "__init__.py").is_file() for g in {Path(p).parent.name for p in on_disk})


def test_figure_stems_from_save_figure_calls():
    src = ('save_figure(f, out, "a")\nsave_figure(f, args.out, f"b_{name}")\n'
           'save_figure(g, out, "c" if one else f"c_{name}")\nsave_figure(fig=f, out=o, stem="d")\nother(f, out, "e")\n')
    assert analyses.figure_stems(src) == ["a", "b_*", "c", "c_*", "d"]
    src = 'def write(out, name: str = "f_text"):\n    save_figure(fig, out, name)\nsave_figure(fig, out, unknown)\n'
    assert analyses.figure_stems(src) == ["f_text"]  # a parameter's default; a name without one adds nothing


def test_a_table_links_its_script_to_the_pages_that_cite_it():
    """band_ablation.py writes band_dose-matched tables that paper-004.md quotes: the index must say so (read from the
    page, not typed), and a benchmark's tables point at the engineering page."""
    by_name = {Path(s.path).name: s for s in analyses.collect(ROOT)}
    assert "docs/results/paper-004.md" in by_name["band_ablation.py"].pages
    assert "band_ablation_summary.csv" in by_name["band_ablation.py"].tables
    assert any(f.startswith("band_ablation_fig8") for f in by_name["band_ablation.py"].figures)
