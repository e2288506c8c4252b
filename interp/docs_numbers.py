"""Numbers in the documentation, taken from the committed tables in ``figures/`` (issue 21, item 1).

Two jobs, one module:

- **render**: a docs page writes ``{{ num("compare_zoo_summary.csv", "sink_rate", fmt=".1%", model="smollm2-135m") }}``
  and :func:`render` replaces it with the table's value, formatted (the MkDocs hook ``docs/hooks/numbers.py``
  runs it on every page), so a rendered number cannot differ from its table. ``rng(...)`` gives ``min-max`` of
  a column over the selected rows.
- **check**: :func:`unbacked` lists the numbers a markdown text quotes (decimals and percentages in prose and
  tables; code, links and templates are skipped) that no cell of the named tables gives at the printed
  precision; ``tests/test_docs_numbers.py`` runs it on README.md and the results pages with the tables and the
  small allowlist of settings and paper quotes named in ``docs/numbers.yml``.

Integers are not checked (layer / head indices, prompt counts and lags would match any table). Tables are CSV
files read with pandas; ``root`` is the repository root (the folder holding ``figures/``).

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

__all__ = ["DocsNumberError", "num", "rng", "evaluate", "render", "quoted_numbers", "backed", "unbacked"]

STATS = ("min", "max", "median", "mean", "sum", "count")
_TEMPLATE = re.compile(r"\{\{\s*(.+?)\s*\}\}", re.S)
_CODE = re.compile(r"(^```.*?^```|`[^`\n]*`)", re.S | re.M)
_DIGITS = re.compile(r"\d+(?:\.\d+)*(?:e-?\d+)?(?: ?%)?")
# a number right after one of these words is a reference or a version, not a quoted result
_REFERENCE = re.compile(r"(?:Sec\.|Section|Secs\.|Thm|Theorem|Claim|Lemma|Table|Tables|Fig\.|Figs\.|Figure|eq\.|App\.|Def\.|arXiv|Python|version)\s*$")


class DocsNumberError(ValueError):
    """A docs template or check could not be resolved against the committed tables."""


@functools.lru_cache(maxsize=None)
def _load(root: str, table: str) -> pd.DataFrame:
    path = Path(root) / "figures" / table
    if not path.is_file():
        raise DocsNumberError(f"table figures/{table} not found under {root}: name a committed CSV in figures/")
    return pd.read_csv(path)


def _select(frame: pd.DataFrame, table: str, where: dict) -> pd.DataFrame:
    rows = frame
    for key, want in where.items():
        if key not in frame.columns:
            raise DocsNumberError(f"{table} has no column {key!r} to select on (columns: {', '.join(frame.columns)})")
        col = rows[key]
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
        rows = rows[mask]
    if rows.empty:
        raise DocsNumberError(f"no row of {table} matches {where}: check the selection against the table")
    return rows


def _values(table: str, column: str, root: str, where: dict) -> pd.Series:
    frame = _load(str(root), table)
    if column not in frame.columns:
        raise DocsNumberError(f"{table} has no column {column!r} (columns: {', '.join(frame.columns)})")
    return pd.to_numeric(_select(frame, table, where)[column], errors="coerce").dropna()


def _format(value: float, fmt: str) -> str:
    return format(value, fmt)


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


_FUNCS = {"num": num, "rng": rng}


def _literal(node: ast.AST, expr: str):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise DocsNumberError(f"template {{{{ {expr} }}}}: arguments must be literals") from None


def evaluate(expr: str, root: str | Path = ".") -> str:
    """Evaluate one template expression, ``num(...)`` or ``rng(...)`` with literal arguments only."""
    try:
        call = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        raise DocsNumberError(f"template {{{{ {expr} }}}} is not a call: write num(\"table.csv\", \"column\", ...)") from None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _FUNCS):
        raise DocsNumberError(f"template {{{{ {expr} }}}}: only {', '.join(_FUNCS)} are allowed")
    args = [_literal(a, expr) for a in call.args]
    kwargs = {k.arg: _literal(k.value, expr) for k in call.keywords}
    return _FUNCS[call.func.id](*args, root=root, **kwargs)


def render(text: str, root: str | Path = ".") -> str:
    """Replace every ``{{ num(...) }}`` / ``{{ rng(...) }}`` in ``text`` with its value from ``figures/``
    (code spans and fenced blocks are left as written, so a page can show a template)."""
    parts = _CODE.split(text)
    return "".join(p if i % 2 else _TEMPLATE.sub(lambda m: evaluate(m.group(1), root), p) for i, p in enumerate(parts))


def _prose(text: str) -> str:
    """The text with what is not a quoted result removed: front matter, fenced and inline code, HTML comments,
    link / image targets, URLs, templates."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = _TEMPLATE.sub("", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"https?://\S+", "", text)


def quoted_numbers(text: str) -> list[str]:
    """Decimals and percentages quoted in markdown prose and tables, in order, without repeats.

    A number glued to a word (``L16H0``, ``fp16``) or a version (``3.11.7``) is not one; a ``-`` before it is a
    sign unless it follows a digit (``0.90-0.95`` is a range of two positive numbers).
    """
    prose = _prose(text)
    seen: dict[str, None] = {}
    for match in _DIGITS.finditer(prose):
        token, start, end = match.group(0).replace(" ", ""), match.start(), match.end()
        before = prose[start - 1] if start else " "
        after = prose[end] if end < len(prose) else " "
        mantissa = token.split("e")[0].rstrip("%")
        if (before.isalnum() or before in "._" or mantissa.count(".") > 1 or (after.isalpha() and after != "x")
                or ("." not in mantissa and "%" not in token)  # integers, and settings like 1e-3 or 1e4
                or _REFERENCE.search(prose[max(0, start - 12):start])):
            continue
        if before == "-" and not (start >= 2 and (prose[start - 2].isalnum() or prose[start - 2] in "._+")):
            token = "-" + token
        seen.setdefault(token, None)
    return list(seen)


@functools.lru_cache(maxsize=None)
def _formatted(root: str, table: str, decimals: int) -> frozenset[str]:
    name, _, columns = table.partition(":")  # "t.csv:col_a,col_b" reads only those columns
    frame = _load(root, name)
    if columns:
        wanted = columns.split(",")
        unknown = [c for c in wanted if c not in frame.columns]
        if unknown:
            raise DocsNumberError(f"{name} has no column {unknown} (columns: {', '.join(frame.columns)})")
        frame = frame[wanted]
    cells = pd.to_numeric(frame.stack(), errors="coerce").dropna().to_numpy(dtype=float)
    out = set()
    for v in cells:
        if math.isfinite(v):
            out.add(f"{v:.{decimals}f}")
            out.add(f"{100 * v:.{decimals}f}%")  # a fraction printed as a percentage
            out.add(f"{v:.{decimals}f}%")  # a column already in percent
            out.add(re.sub(r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2), f"{v:.{decimals}e}"))
    return frozenset(out)


def backed(token: str, tables: list[str], root: str | Path = ".") -> bool:
    """Whether some cell of ``tables`` prints as ``token`` at the token's own precision (``0.61`` matches a
    cell 0.6092; ``49.6%`` a fraction 0.4963; ``-0.37`` only a negative cell)."""
    body = token.rstrip("%").split("e")[0]
    decimals = len(body.split(".")[1]) if "." in body else 0
    return any(token in _formatted(str(root), t, decimals) for t in tables)


def unbacked(text: str, tables: list[str], allow: dict | list | None = None, root: str | Path = ".") -> list[str]:
    """Numbers ``text`` quotes that neither a cell of ``tables`` (at printed precision) nor ``allow`` covers.

    Args:
        text: markdown (templates are skipped: :func:`render` fills them from the tables).
        tables: CSV names in ``figures/`` that back the page; ``"name.csv:col_a,col_b"`` limits the check to
            those columns (a wide table matches a 2-digit number by chance).
        allow: tokens (or token -> reason) that are settings, paper quotes or measurements without a table.
        root: repository root.

    Returns:
        The unbacked tokens, in order of first appearance.
    """
    allowed = set(allow or ())
    return [t for t in quoted_numbers(text) if t not in allowed and not backed(t, tables, root)]
