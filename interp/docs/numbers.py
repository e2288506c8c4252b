"""Numbers in the documentation, bound to the cells of the committed tables in ``figures/`` (issues 21 and 33).

- **render**: a docs page writes ``{{ num("compare_zoo_summary.csv", "sink_rate", fmt=".1%", model="smollm2-135m") }}``
  and :func:`render` replaces it with that cell, formatted (the MkDocs hook ``docs/hooks/numbers.py`` runs it on
  every page), so a rendered number cannot differ from its table. ``rng(...)`` gives ``min-max`` of a column over
  the selected rows; ``cell(...)`` one cell as text (a list of heads). A template names its table, column and row
  selection: it is bound to its cells.
- **check**: :func:`check` runs over every page ``docs/numbers.yml`` lists and returns one line per problem,
  ``page:line: what``:

  * a **hand-typed number** (:func:`hand_typed`: any number in prose or tables outside a template, integers,
    counts and percentages included) unless it is one of the few things that are not results: a reference
    (``Sec. 3.1``, ``Table 5``, ``Fig. 3b``, ``eq. 6``, ``App. H``, ``Figs. 2, 4, 11``, ``paper 004``, ``issue 21``), a paper id
    (``000``..``004``), a year after a citation (``Wu et al. 2024``), a list or heading number, a name
    (``L16H0``, ``Gemma-3``, ``2D-RoPE``, ``7B``), code (CLI examples), or a phrase the page's entry in
    ``docs/numbers.yml`` allows with its reason (``allow``: exact phrases, not bare tokens, so an allowed
    ``1,024 tokens`` does not let another ``1,024`` through);
  * a **missing cell**: a template whose table, column or row is gone (:class:`DocsNumberError`);
  * a **stale page**: a template whose value differs from the value recorded in ``docs/numbers.lock.yml``
    when the page was last rendered and read (a changed table changes the sentence around it: reread it,
    then ``python -m interp.docs.numbers lock``), and a rendered file that differs from its template source
    rendered now (or is missing);
  * a **template on a page that is read as written**: a ``docs/results/`` page holding ``{{ ... }}`` itself,
    which the repository host would show unrendered (move it to ``docs/templates/results/``).

  Pages not yet fully templated carry ``hand_typed: N`` in ``docs/numbers.yml``: the count may only fall.
- **rendered files** (issue 45): the repository host shows markdown as written, so the pages people read there
  are committed rendered, from templates kept as sources (:func:`rendered_pages`): every
  ``docs/templates/results/NAME.md`` renders to ``docs/results/NAME.md`` (a new page needs only its template:
  ``render`` writes the page, and an entry in ``docs/numbers.yml`` only when it allows phrases), and
  ``README.md`` renders from ``docs/templates/README.md`` (its entry's ``source``). The site renders the same
  templates (``docs/hooks/numbers.py``).

``python -m interp.docs.numbers check`` prints the problems; ``lock`` records the current values; ``render``
rewrites the rendered files (``make pages`` runs it after regenerating the claims template); ``find VALUE
TABLE...`` lists the cells that print as VALUE (to write a template). Tables are CSV files read with pandas;
``root`` is the repository root (the folder holding ``figures/``).

Raises :class:`DocsNumberError` (one line naming the template or table and the fix) for a missing table or
column, a selection that matches no row, or several rows where one value is asked for.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from pathlib import Path

import pandas as pd

__all__ = ["DocsNumberError", "num", "rng", "evaluate", "render", "templates", "hand_typed", "rendered_values",
           "cell", "find_cells", "rendered_pages", "render_file", "check", "write_lock", "write_rendered", "main"]

STATS = ("min", "max", "median", "mean", "sum", "count")
_TEMPLATE = re.compile(r"\{\{\s*(.+?)\s*\}\}", re.S)
_CODE = re.compile(r"(^```.*?^```|`[^`\n]*`)", re.S | re.M)
_DIGITS = re.compile(r"\d+(?:\.\d+)*(?:e-?\d+)?(?: ?%)?")
# a number right after one of these words is a reference or a version, not a quoted result
_REFERENCE = re.compile(r"(?:Sec\.|Section|Secs\.|Thm|Theorem|Claim|Lemma|Table|Tables|Fig\.|Figs\.|Figure|eq\.|App\.|Def\.|arXiv|Python|version)\s*$")


class DocsNumberError(ValueError):
    """A docs template or check could not be resolved against the committed tables."""


def _load(root: str, table: str) -> pd.DataFrame:
    path = Path(root) / "figures" / table
    if not path.is_file():
        raise DocsNumberError(f"table figures/{table} not found under {root}: name a committed CSV in figures/")
    stat = path.stat()
    return _read(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _read(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    """The table at ``path`` (cached while its modification time and size stay the same)."""
    return pd.read_csv(path)


def _select(frame: pd.DataFrame, table: str, where: dict) -> pd.DataFrame:
    keep = pd.Series(True, index=frame.index)  # the filters' conjunction, applied once (one copy of the rows)
    for key, want in where.items():
        if key not in frame.columns:
            raise DocsNumberError(f"{table} has no column {key!r} to select on (columns: {', '.join(frame.columns)})")
        col = frame[key]
        op = re.match(r"^(>=|<=|!=|>|<)\s*(-?[\d.]+(?:e-?\d+)?)$", want) if isinstance(want, str) else None
        if op:  # a comparison: lag=">=1"
            x, bound = pd.to_numeric(col, errors="coerce"), float(op.group(2))
            mask = {">=": x >= bound, "<=": x <= bound, "!=": x != bound, ">": x > bound, "<": x < bound}[op.group(1)]
        elif isinstance(want, bool):
            mask = col.astype(str).str.lower() == str(want).lower()
        elif isinstance(want, (int, float)):
            mask = pd.to_numeric(col, errors="coerce") == want
        else:
            mask = col.astype(str) == str(want)
        keep &= mask
    rows = frame[keep]
    if rows.empty:
        raise DocsNumberError(f"no row of {table} matches {where}: check the selection against the table")
    return rows


def _values(table: str, column: str, root: str, where: dict) -> pd.Series:
    frame = _load(str(root), table)
    if column not in frame.columns:
        raise DocsNumberError(f"{table} has no column {column!r} (columns: {', '.join(frame.columns)})")
    return pd.to_numeric(_select(frame, table, where)[column], errors="coerce").dropna()


def _format(value: float, fmt: str) -> str:
    """``format(value, fmt)``, with the exponent of an ``e`` format written short (``3.0e-3``, not ``3.0e-03``)."""
    out = format(value, fmt)
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), out)


def num(table: str, column: str, stat: str | None = None, fmt: str = ".3g", *, root: str | Path = ".",
        **where) -> str:
    """One number from a committed table, formatted.

    Args:
        table: CSV file name inside ``figures/`` (e.g. ``"compare_zoo_summary.csv"``).
        column: the column to read.
        stat: ``None`` (the selection must match exactly one row) or one of ``min, max, median, mean, sum,
            count`` over the selected rows.
        fmt: a Python format spec (``".3f"``, ``".1%"``, ``".2g"``).
        root: repository root (the folder holding ``figures/``).
        **where: column = value filters (strings compare as text, numbers numerically, booleans as
            ``True``/``False``; a string ``">=1"``, ``"<0.5"``, ``"!=0"`` compares numerically).

    Returns:
        The formatted value.

    Raises:
        DocsNumberError: unknown table / column / stat, no matching row, or several rows without ``stat``.
    """
    values = _values(table, column, root, where)
    if stat is None:
        if len(values) != 1:
            raise DocsNumberError(f"{table}[{column}] where {where} has {len(values)} rows: add filters or a stat")
        return _format(float(values.iloc[0]), fmt)
    if stat not in STATS:
        raise DocsNumberError(f"stat {stat!r} is not one of {', '.join(STATS)}")
    return _format(float(getattr(values, stat)()), fmt)


def rng(table: str, column: str, fmt: str = ".3g", sep: str = "-", *, root: str | Path = ".", **where) -> str:
    """``min{sep}max`` of a column over the selected rows, each formatted with ``fmt`` (see :func:`num`); one value when
    both ends format the same (``18``, not ``18-18``)."""
    values = _values(table, column, root, where)
    lo, hi = _format(float(values.min()), fmt), _format(float(values.max()), fmt)
    return lo if lo == hi else f"{lo}{sep}{hi}"


def cell(table: str, column: str, *, root: str | Path = ".", **where) -> str:
    """The text of one cell (a head list, a setting), for the words a page quotes from a table as they stand
    (``cell("attribution_agreement.csv", "worst", model="smollm2-135m", intervention="zero", depth="all")``).

    Raises:
        DocsNumberError: unknown table or column, or a selection (see :func:`num`) that is not exactly one row.
    """
    frame = _load(str(root), table)
    if column not in frame.columns:
        raise DocsNumberError(f"{table} has no column {column!r} (columns: {', '.join(frame.columns)})")
    rows = _select(frame, table, where)
    if len(rows) != 1:
        raise DocsNumberError(f"{table}[{column}] where {where} has {len(rows)} rows: add filters")
    return str(rows[column].iloc[0])


_FUNCS = {"num": num, "rng": rng, "cell": cell}


def _literal(node: ast.AST, expr: str):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise DocsNumberError(f"template {{{{ {expr} }}}}: arguments must be literals") from None


def evaluate(expr: str, root: str | Path = ".") -> str:
    """Evaluate one template expression, ``num(...)``, ``rng(...)`` or ``cell(...)`` with literal arguments only."""
    try:
        call = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        raise DocsNumberError(f"template {{{{ {expr} }}}} is not a call: write num(\"table.csv\", \"column\", ...)") from None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _FUNCS):
        raise DocsNumberError(f"template {{{{ {expr} }}}}: only {', '.join(_FUNCS)} are allowed")
    args = [_literal(a, expr) for a in call.args]
    kwargs = {k.arg: _literal(k.value, expr) for k in call.keywords}
    return _FUNCS[call.func.id](*args, root=root, **kwargs)


def render(text: str, root: str | Path = ".", values: dict[str, str] | None = None) -> str:
    """Replace every ``{{ num(...) }}`` / ``{{ rng(...) }}`` in ``text`` with its value from ``figures/``
    (code spans and fenced blocks are left as written, so a page can show a template); ``values``: expressions
    already evaluated against the same tables (:func:`check` passes those it has), the others are evaluated."""
    values = values or {}

    def fill(m: re.Match) -> str:
        return values[m.group(1)] if m.group(1) in values else evaluate(m.group(1), root)

    parts = _CODE.split(text)
    return "".join(p if i % 2 else _TEMPLATE.sub(fill, p) for i, p in enumerate(parts))


# ---- where the numbers of a page are: templates, and hand-typed numbers outside them --------------------------------

SPEC_FILE = "docs/numbers.yml"
LOCK_FILE = "docs/numbers.lock.yml"
RESULTS_DIR = "docs/results"
# template folder -> the folder its pages are rendered into, each NAME.md to NAME.md
TEMPLATE_DIRS = {"docs/templates/results": RESULTS_DIR}
# the first line of every rendered file (an HTML comment: neither the repository host nor the site shows it)
RENDERED_NOTE = "<!-- rendered from {src} by python -m interp.docs.numbers render (make pages): edit the template -->\n"

_NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)*(?:[eE]-?\d+)?(?:\s?%)?")
# spans that hold no quoted result; each is blanked (newlines kept, so line numbers stay right)
_FRONT = re.compile(r"\A---\n.*?\n---\n", re.S)
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))*`")  # an inline code span may wrap a line, not a paragraph
_LINK = re.compile(r"\]\([^)]*\)|https?://\S+|\[\^\w+\]")
_REF_WORD = (r"Sec\.|Secs\.|Section|Sections|Table|Tables|Fig\.|Figs\.|Figure|Figures|eq\.|eqs\.|Eq\.|App\.|Appendix|"
             r"Def\.|Thm\.?|Theorem|Lemma|Claim|Assumption|Corollary|Prop\.|Proposition|Alg\.|Algorithm|issue|issues|Issue|"
             r"paper|papers|Paper|Papers|arXiv|Python|version")
_REF_NUM = r"[A-Z]?\d+(?:\.\d+)*[a-z]?"
# a reference: `Sec. 3.1`, `Table 5`, `Fig. 3b`, `App. J.2`, `Tables 10 / 12`, `Fig. 12-13`, `paper 004`, `issue 21`
_REFERENCE_SPAN = re.compile(rf"(?<![\w.])(?:{_REF_WORD})\s*{_REF_NUM}(?:\s*(?:/|-|–|and|&)\s*{_REF_NUM})*")
# after a plural (Figs. 2, 4, 11; Tables 2, 10/12, 11) the list goes on with commas (whole numbers only)
_REFERENCE_LIST = re.compile(rf"(?<![\w.])(?:Figs\.|Figures|Tables|Secs\.|Sections|Apps\.|eqs\.)\s*{_REF_NUM}"
                             rf"(?:\s*(?:/|-|–|and|&|,)\s*[1-9]\d*[a-z]?(?![\d.]))*")
_PAPER_ID = re.compile(r"(?<![\w.,-])00[0-4](?:-00[0-4])?(?![\w.])")  # the five papers: 000 .. 004 (and 000-004)
_YEAR = re.compile(r"(?:(?<=et al\. )|(?<=et al\., )|(?<=ICML )|(?<=NeurIPS )|(?<=ICLR )|(?<=\()|(?<=, )(?=\d{4}\)))(?:19|20)\d\d\b")
_HEAD_LAG = re.compile(r"\bL\d+H\d+(?:,?\s+at)?\s+(?:lag|delta)\s*=?\s*\d+\b")  # an SDH's name: L16H0 at lag 1
_LIST_MARK = re.compile(r"^(?:\s*\d+\.(?=\s)|#+\s*\d+(?:\.\d+)*\.?(?=\s))|\(\d\)(?= [A-Z*])", re.M)  # and (1) Inline


def _blank(text: str, pattern: re.Pattern) -> str:
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _code_masked(text: str) -> str:
    """``text`` with front matter, fenced / inline code and HTML comments blanked (same length, same lines)."""
    for pattern in (_FRONT, _FENCE, _COMMENT, _INLINE):
        text = _blank(text, pattern)
    return text


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def templates(text: str) -> list[tuple[int, str]]:
    """The ``{{ ... }}`` templates of a markdown text outside code, as ``(line, expression)`` in order."""
    masked = _code_masked(text)
    return [(_line(text, m.start()), m.group(1)) for m in _TEMPLATE.finditer(masked)]


def hand_typed(text: str, allow: dict | list | tuple = ()) -> list[tuple[int, str]]:
    """Every number a markdown text quotes outside a template, as ``(line, token)`` in order of appearance.

    Integers, counts and percentages count as much as decimals. Not counted (they are not results): templates,
    code (CLI examples), HTML comments, link targets and URLs; references after ``Sec.``, ``Table``, ``Fig.``,
    ``eq.``, ``App.``, ``Def.``, ``Thm``, ``Lemma``, ``Claim``, ``Assumption``, ``paper``, ``issue``, ``Python``,
    ``version`` ...; the paper ids ``000``-``004``; a year after ``et al.``, a venue, an opening parenthesis or an author (``(Richard, 2024)``); list and
    heading numbers (and an inline enumeration ``(1) Word``); versions (two dots or more); and numbers that are part of a name: glued to a letter, digit,
    ``_`` or ``.`` before (``L16H0``, ``r_1``), to a letter after (``7B``, ``2D``, ``fp16``; a multiplier ``20x``
    is still a number) or after a hyphen or tilde that follows a letter (``Gemma-3``, ``top-1``, ``r~1``); and the lag that names a
    slash-dominant head with its head (``L16H0 at lag 1``).

    Args:
        text: markdown.
        allow: exact phrases (or phrase -> reason) whose numbers are not results (settings, paper quotes); each
            occurrence of the phrase is skipped, not every occurrence of its numbers.

    Returns:
        ``(line, token)`` pairs, one per occurrence (``token`` keeps a ``%``).
    """
    masked = _code_masked(text)
    for phrase in sorted(allow or (), key=len, reverse=True):  # first: a phrase may hold a reference or a paper id
        masked = _blank(masked, re.compile(re.escape(phrase)))
    for pattern in (_TEMPLATE, _LINK, _REFERENCE_LIST, _REFERENCE_SPAN, _PAPER_ID, _YEAR, _LIST_MARK, _HEAD_LAG):
        masked = _blank(masked, pattern)
    found = []
    for match in _NUMBER.finditer(masked):
        start, end = match.span()
        token = match.group(0).replace(" ", "")
        before = masked[start - 1] if start else " "
        before2 = masked[start - 2] if start >= 2 else " "
        after = masked[end] if end < len(masked) else " "
        after2 = masked[end + 1] if end + 1 < len(masked) else " "
        if (before.isalnum() or before in "_."
                or (before in "-~" and before2.isalpha())  # Gemma-3, top-1, r~1
                or (after.isalpha() and not (after == "x" and not after2.isalpha()))
                or token.split("e")[0].count(".") > 1):
            continue
        if before == "-" and not (before2.isalnum() or before2 in "._+)"):  # a sign, not a range 0.90-0.95
            token = "-" + token
        found.append((_line(text, start), token))
    return found


def rendered_values(text: str, root: str | Path = ".") -> dict[str, str]:
    """Each template expression of ``text`` with the value it renders to now (raises on the first bad one)."""
    return {expr: evaluate(expr, root) for _, expr in templates(text)}


def find_cells(value: str, tables: list[str], root: str | Path = ".") -> list[str]:
    """The cells of ``tables`` that print as ``value`` at its own precision (as a fraction or in percent), each
    described with its row's text columns, to help write the template that binds a number to its cell."""
    body = value.rstrip("%").replace(",", "")
    decimals = len(body.split(".")[1]) if "." in body else 0
    want = float(body) / (100 if value.endswith("%") else 1)
    out = []
    for table in tables:
        frame = _load(str(root), table)
        keys = [c for c in frame.columns if not pd.api.types.is_float_dtype(frame[c])]
        for column in frame.columns:
            cells = pd.to_numeric(frame[column], errors="coerce")
            scale = 100 if value.endswith("%") else 1
            hits = cells[[math.isfinite(x) and f"{x * scale:.{decimals}f}" == f"{want * scale:.{decimals}f}"
                          for x in cells.fillna(float("nan"))]]
            for i in hits.index:
                where = ", ".join(f"{k}={_py(frame.at[i, k])!r}" for k in keys if k != column)
                out.append(f"{table}[{column}] = {_py(frame.at[i, column])!r} where {where}")
    return out


def _py(value):
    return value.item() if hasattr(value, "item") else value


def _yaml(path: Path) -> dict:
    """A YAML file as a mapping ({} when empty); a missing file or bad YAML raises one line naming it."""
    import yaml

    if not path.is_file():
        raise DocsNumberError(f"{path} not found: run from the repository root")
    try:
        return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}  # C parser: faster
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise DocsNumberError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)}); quote a value that holds ': '") from None


def _spec(root: Path) -> dict:
    return _yaml(root / SPEC_FILE)


def _lock(root: Path) -> dict:
    path = root / LOCK_FILE
    return _yaml(path) if path.is_file() else {}


def rendered_pages(root: str | Path = ".") -> dict[str, str]:
    """Every rendered file with the template it is rendered from (paths relative to ``root``): each ``NAME.md`` of a
    template folder (``docs/templates/results/`` -> ``docs/results/``, :data:`TEMPLATE_DIRS`), found by listing the
    folder, and each ``docs/numbers.yml`` entry with a ``source`` (``README.md``)."""
    root = Path(root)
    spec = _spec(root) if (root / SPEC_FILE).is_file() else {}
    out = {page: entry["source"] for page, entry in spec.items() if (entry or {}).get("source")}
    for src_dir, page_dir in TEMPLATE_DIRS.items():
        out.update({f"{page_dir}/{p.name}": f"{src_dir}/{p.name}" for p in sorted((root / src_dir).glob("*.md"))})
    return out


def render_file(src: str, root: str | Path = ".", values: dict[str, str] | None = None) -> str:
    """The rendered text of the template file ``src`` (relative to ``root``): :data:`RENDERED_NOTE`, then the
    template with every number filled in (``values``: see :func:`render`)."""
    return RENDERED_NOTE.format(src=src) + render((Path(root) / src).read_text(), root, values)


def _pages(root: Path) -> dict[str, tuple[dict, str]]:
    """Every page the check reads, ``page -> (its docs/numbers.yml entry or {}, the file its text comes from)``: the
    listed pages, the rendered ones and every ``docs/results/*.md``."""
    spec, sources = _spec(root), rendered_pages(root)
    results = {p.relative_to(root).as_posix() for p in (root / RESULTS_DIR).glob("*.md")}
    pages = list(spec) + sorted((set(sources) | results) - set(spec))
    return {page: (spec.get(page) or {}, sources.get(page, page)) for page in pages}


def _template_home(page: str) -> str:
    """Where the template of ``page`` belongs (for the message that asks to move it there)."""
    for src_dir, page_dir in TEMPLATE_DIRS.items():
        if page.startswith(page_dir + "/"):
            return src_dir + page[len(page_dir):]
    return f"a file under docs/templates/ named by the page's 'source' in {SPEC_FILE}"


def check(root: str | Path = ".") -> list[str]:
    """Every problem of the pages ``docs/numbers.yml`` lists, one line each, ``page:line: what and the fix``.

    Reads every listed page, every rendered page and every ``docs/results/*.md`` (a page without an entry is
    checked as fully templated, with no allowed phrase). Checks that every template resolves (a missing table,
    column or row is named); that every template renders the value ``docs/numbers.lock.yml`` recorded (else the
    page is stale against its tables); that a rendered file exists and equals its source rendered now; that a page
    read as written (no template source) holds no template; that no number is hand-typed beyond the page's
    ``hand_typed`` count (0 when absent; a count that fell must be lowered); and that every allowed phrase is still
    on its page.
    """
    root = Path(root)
    lock = _lock(root)
    problems = []
    for page, (entry, src) in _pages(root).items():
        if not (root / src).is_file():
            problems.append(f"{src}: not found ({SPEC_FILE} lists {page}): remove its entry or restore the page")
            continue
        text = (root / src).read_text()
        locked = lock.get(src) or {}
        found, values = templates(text), {}
        for line, expr in found:
            try:
                value = values[expr] = values[expr] if expr in values else evaluate(expr, root)
            except DocsNumberError as err:
                problems.append(f"{src}:{line}: {err}")
                continue
            if expr not in locked:
                problems.append(f"{src}:{line}: {{{{ {expr} }}}} = {value} is not in {LOCK_FILE}: read the sentence, "
                                "then run python -m interp.docs.numbers lock")
            elif str(locked[expr]) != value:
                problems.append(f"{src}:{line}: stale: {{{{ {expr} }}}} now renders {value}, the page was written for "
                                f"{locked[expr]} ({LOCK_FILE}): the table changed; reread the sentence, then run "
                                "python -m interp.docs.numbers lock")
        gone = sorted(set(locked) - {e for _, e in found})
        if gone:
            problems.append(f"{src}: {LOCK_FILE} records {len(gone)} templates the page no longer has: run "
                            "python -m interp.docs.numbers lock")
        if src == page and found:
            problems.append(f"{page}:{found[0][0]}: holds {{{{ ... }}}} templates, which the repository host shows as written: "
                            f"move the page to {_template_home(page)} and run python -m interp.docs.numbers render")
        elif src != page and not (root / page).is_file():
            problems.append(f"{page}: missing (its template is {src}): run python -m interp.docs.numbers render")
        elif src != page:
            try:
                fresh = render_file(src, root, values)
            except DocsNumberError:
                fresh = None  # reported above, line by line
            current = (root / page).read_text()
            if fresh is not None and fresh != current:
                diff = next((i + 1 for i, (a, b) in enumerate(zip(fresh.splitlines(), current.splitlines())) if a != b),
                            min(len(fresh.splitlines()), len(current.splitlines())) + 1)
                problems.append(f"{page}:{diff}: stale: differs from {src} rendered now: run "
                                "python -m interp.docs.numbers render")
        allow = entry.get("allow") or {}
        masked = _code_masked(text)
        problems += [f"{src}: {SPEC_FILE} allows the phrase {p!r}, which the page no longer has" for p in allow
                     if p not in masked]
        typed = hand_typed(text, allow)
        limit = int(entry.get("hand_typed", 0))
        if len(typed) > limit:
            if limit == 0:
                problems += [f"{src}:{line}: hand-typed number {tok}: bind it to its cell with {{{{ num(...) }}}} "
                             f"(or, if it is not a result, allow the phrase with its reason in {SPEC_FILE})"
                             for line, tok in typed]
            else:
                problems.append(f"{src}: {len(typed)} hand-typed numbers, {SPEC_FILE} allows at most {limit} while the "
                                "page is being templated (the count may only fall): bind the new ones with templates")
        elif len(typed) < limit:
            problems.append(f"{src}: {len(typed)} hand-typed numbers left, {SPEC_FILE} still says {limit}: lower it")
    return problems


def write_lock(root: str | Path = ".") -> Path:
    """Record the value every template of the checked pages renders now in ``docs/numbers.lock.yml``."""
    import yaml

    root = Path(root)
    out = {}
    for _, src in _pages(root).values():
        values = rendered_values((root / src).read_text(), root)
        if values:
            out[src] = dict(sorted(values.items()))
    path = root / LOCK_FILE
    header = ("# The value each template rendered to when its page was last read (python -m interp.docs.numbers lock).\n"
              "# tests/docs/test_numbers.py fails when a table change makes a template render something else.\n")
    path.write_text(header + yaml.safe_dump(out, sort_keys=True, allow_unicode=True, width=100000))
    return path


def write_rendered(root: str | Path = ".") -> list[Path]:
    """Rewrite every rendered file (:func:`rendered_pages`: ``docs/results/*.md``, ``README.md``) from its template."""
    root = Path(root)
    written = []
    for page, src in rendered_pages(root).items():
        (root / page).parent.mkdir(parents=True, exist_ok=True)
        (root / page).write_text(render_file(src, root))
        written.append(root / page)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m interp.docs.numbers check | lock | render | find VALUE TABLE...`` (run at the repository root)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("check", "lock", "render", "find"):
        print("usage: python -m interp.docs.numbers check | lock | render | find VALUE TABLE.csv...", file=sys.stderr)
        return 2
    try:
        return _command(args)
    except DocsNumberError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _command(args: list[str]) -> int:
    import sys

    if args[0] == "check":
        problems = check(".")
        print("\n".join(problems) or "docs numbers: ok")
        return 1 if problems else 0
    if args[0] == "lock":
        print(write_lock("."))
    elif args[0] == "render":
        print("\n".join(str(p) for p in write_rendered(".")) or "nothing to render")
    else:
        if len(args) < 3:
            print("usage: python -m interp.docs.numbers find VALUE TABLE.csv...", file=sys.stderr)
            return 2
        print("\n".join(find_cells(args[1], args[2:], ".")) or f"no cell prints as {args[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
