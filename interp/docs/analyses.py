"""The index of ``analyses/``: script -> tables -> figures -> results pages, generated into ``docs/analyses.md``.

Every script lives in a group folder named after what it reproduces (``analyses/p004_slash/``, ``analyses/atlas/``,
``analyses/benchmarks/`` ...) and runs as a module from the repository root (``python -m analyses.p004_slash.band_ablation``;
files named ``_*.py`` are shared helpers, not scripts). What each script wrote is read from records, never typed by hand:

- tables: the ``figures/provenance.json`` entries whose ``script`` is the script (written by every run,
  ``analyses/_common.py``);
- figures: the stems the script passes to ``save_figure`` (read from its source with :mod:`ast`; an f-string's
  fields match any text), matched against the files in ``figures/``;
- pages: the results pages (``docs/results/*.md``) and the README whose templates (``docs/templates/``) name one of
  its tables or the script itself (its path or its module).

``python -m interp.docs.analyses write`` regenerates the page, ``check`` prints what is stale (the tests run it).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from interp.docs.command import check_or_write
from interp.docs.numbers import rendered_pages

PAGE = "docs/analyses.md"
GROUPS = {  # folder -> what it reproduces (a folder missing here is listed last, under its own name)
    "p000_copy": "paper 000: copying with 2D RoPE (the lab)",
    "p001_frayed": "paper 001: frayed RoPE, rank-one clouds, geometry against length, RoPE-ID",
    "p002_dyck": "paper 002: Dyck depth (the lab)",
    "p003_sparsity": "paper 003: sparse parity, PPC scratchpads, leave-one-out",
    "p004_slash": "paper 004: slash-dominant heads, band ablations, InP, the embedding cone, OOD",
    "atlas": "the head atlas and the zoo: roles, retrieval heads, massive values, attention shape",
    "effects": "causal head effects: what each head does when removed",
    "emergence": "training dynamics: heads watched as they form",
    "benchmarks": "speed, memory and error of the engine (numbers depend on the machine)",
}


@dataclass
class Script:
    """One analysis script and what it wrote: ``path`` relative to the repository, ``summary`` (its docstring's first
    line), ``tables`` / ``figures`` (file names in ``figures/``), ``pages`` (results pages that cite it)."""

    path: str
    summary: str
    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)

    @property
    def group(self) -> str:
        return Path(self.path).parent.name

    @property
    def module(self) -> str:
        """``analyses/p004_slash/band_ablation.py`` -> ``analyses.p004_slash.band_ablation`` (``python -m`` runs it)."""
        return self.path.removesuffix(".py").replace("/", ".")


def figure_stems(source: str) -> list[str]:
    """The figure stems a script passes to ``save_figure(fig, out, stem)`` as glob patterns (``f"x_{name}"`` ->
    ``x_*``; both branches of ``a if c else b``; a bare name: the string default of a function parameter so named)."""
    tree = ast.parse(source)
    defaults = {}  # parameter name -> its string default, from every function of the script
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        args = fn.args.posonlyargs + fn.args.args
        for arg, default in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults):
            if isinstance(default, ast.Constant) and isinstance(default.value, str):
                defaults[arg.arg] = default.value

    def pattern(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name) and node.id in defaults:
            return [defaults[node.id]]
        if isinstance(node, ast.JoinedStr):
            return ["".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)]
        if isinstance(node, ast.IfExp):
            return pattern(node.body) + pattern(node.orelse)
        return []

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "save_figure":
            stem = node.args[2] if len(node.args) > 2 else next((k.value for k in node.keywords if k.arg == "stem"), None)
            out += pattern(stem) if stem is not None else []
    return sorted(set(out))


def collect(root: Path) -> list[Script]:
    """Every script under ``root/analyses/<group>/`` (not the ``_*.py`` helpers) with its tables, figures and pages (see
    the module docstring)."""
    prov = json.loads((root / "figures" / "provenance.json").read_text())
    figures = sorted(p.name for p in (root / "figures").iterdir() if p.suffix in (".png", ".html", ".svg"))
    sources = rendered_pages(root)  # a page's template names its tables (num(...)), the rendered page may not
    pages = {page: (root / sources.get(page, page)).read_text()
             for page in (p.relative_to(root).as_posix() for p in sorted((root / "docs" / "results").glob("*.md")))}
    pages["README.md"] = (root / sources["README.md"]).read_text()
    out = []
    for path in sorted(scripts(root), key=lambda p: (_group_rank(p.parent.name), p.name)):
        rel = path.relative_to(root).as_posix()
        src = path.read_text()
        doc = ast.get_docstring(ast.parse(src)) or ""
        s = Script(rel, doc.strip().splitlines()[0] if doc.strip() else "")
        s.tables = sorted(t for t, e in prov.items() if e.get("script") == rel)
        stems = figure_stems(src)
        s.figures = [f for f in figures if any(fnmatch.fnmatch(Path(f).stem, st) for st in stems)]
        names = [rel, s.module, *s.tables]
        s.pages = [p for p, text in pages.items() if p != "docs/results/index.md" and any(
            re.search(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", text) for n in names)]
        out.append(s)
    return out


def scripts(root: Path) -> list[Path]:
    """The script files under ``root/analyses/<group>/``: every ``.py`` but the package files and helpers (``_*.py``)."""
    return sorted(p for p in (root / "analyses").glob("*/*.py") if not p.name.startswith("_"))


def _group_rank(name: str) -> tuple[int, str]:
    keys = list(GROUPS)
    return (keys.index(name) if name in keys else len(keys), name)


def _link(page: str) -> str:
    return f"[{Path(page).stem}]({Path(page).relative_to('docs').as_posix()})" if page.startswith("docs/") else "README"


def _cell(names: list[str]) -> str:
    return "<br>".join(f"`{n}`" for n in names) or "-"


def _by_stem(files: list[str]) -> list[str]:
    """``["a.html", "a.png"]`` -> ``["a.{html,png}"]``: one entry per figure."""
    stems: dict[str, list[str]] = {}
    for f in files:
        stems.setdefault(Path(f).stem, []).append(Path(f).suffix[1:])
    return [f"{st}.{ext[0]}" if len(ext) == 1 else f"{st}.{{{','.join(ext)}}}" for st, ext in stems.items()]


def page(root: Path) -> str:
    """The Markdown of ``docs/analyses.md``."""
    lines = ["<!-- generated by python -m interp.docs.analyses write from analyses/, figures/provenance.json and the "
             "results pages: do not edit -->", "# Analyses: script, tables, figures, results page", "",
             "`make figures` (`python -m analyses.make_all`) runs every script below but the benchmarks (`--benchmarks` adds "
             "them); each runs from the repository root with the command shown and has `--quick` and `--out DIR`. Tables are "
             "those `figures/provenance.json` records for the script (with the command that reran it), figures those it "
             "saves, pages the results pages that cite it.", ""]
    group = None
    for s in collect(root):
        if s.group != group:
            group = s.group
            lines += ["", f"## `analyses/{group}/`: {GROUPS.get(group, group)}", "",
                      "| command | what | tables | figures | results |", "|---|---|---|---|---|"]
        what = s.summary.replace("|", "\\|")
        lines.append(f"| `python -m {s.module}` | {what} | {_cell(s.tables)} | {_cell(_by_stem(s.figures))} | "
                     f"{', '.join(_link(p) for p in s.pages) or '-'} |")
    return "\n".join(lines) + "\n"


def check(root: Path) -> list[str]:
    """Problems: the page is stale, or a script (not a benchmark) wrote no table that provenance records."""
    problems = []
    if not (root / PAGE).exists() or (root / PAGE).read_text() != page(root):
        problems.append(f"{PAGE} is stale: run python -m interp.docs.analyses write")
    for s in collect(root):
        if not s.tables:
            problems.append(f"{s.path}: no table in figures/provenance.json names it (run it through analyses/_common.py's parser)")
    return problems


def write(root: Path) -> str:
    """Regenerate ``docs/analyses.md``; returns a line saying so."""
    (root / PAGE).write_text(page(root))
    return f"wrote {PAGE}"


def main(argv: list[str] | None = None) -> int:
    """``python -m interp.docs.analyses check | write`` (run at the repository root)."""
    return check_or_write(argv, "interp.docs.analyses", lambda: check(Path.cwd()), lambda: write(Path.cwd()))

if __name__ == "__main__":
    raise SystemExit(main())
