"""The claims table: every seed claim of the five papers with a verdict from one vocabulary (issue 33, part 2).

One data file, ``docs/claims.yml``, lists each claim with its paper and place (``where``), the verdict, the effect
and its interval, the range the claim covers against the range measured, the difference from the paper's protocol,
the results page that holds the evidence, and for an untested claim the measurement that would decide it
(``to_run``). Numbers in these fields are ``{{ num(...) }}`` templates like on every results page, so the claims page
is checked with the others (``interp.docs.numbers``). :func:`claims_page` turns the file into the page's template
``docs/templates/results/claims.md``, rendered (numbers filled in) to ``docs/results/claims.md`` like every results
page; :func:`check` lists what is wrong with the file or a stale template.

``python -m interp.docs.claims write`` regenerates the template and renders the page, ``check`` prints the problems.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["VERDICTS", "CLAIMS_FILE", "CLAIMS_TEMPLATE", "CLAIMS_PAGE", "load", "load_open", "problems", "claims_page", "check", "write", "main"]

CLAIMS_FILE = "docs/claims.yml"
CLAIMS_TEMPLATE = "docs/templates/results/claims.md"  # generated from CLAIMS_FILE, numbers as templates
CLAIMS_PAGE = "docs/results/claims.md"  # CLAIMS_TEMPLATE rendered (interp.docs.numbers)

# the verdict vocabulary and the evidence each verdict requires
VERDICTS = {
    "reproduced": "the paper's effect, measured over the range the claim covers, with a 95% interval over seeds or "
                  "prompts that excludes no effect (or, where the seeds agree, every seed's value, at least three "
                  "seeds; or an exact computation or exhaustive test), under the paper's protocol or a stated difference",
    "reproduced in part": "the same evidence, but the effect holds only over part of the claim's range, for part of "
                          "the models or seeds, or at a stated dose or scale away from the paper's",
    "not reproduced": "the same evidence, over the claim's range or the stated part of it, and the effect is absent "
                      "or reversed in our setting (a statement about our models, not the paper's)",
    "refuted": "the effect is absent or reversed, with an interval that excludes the paper's value, under the paper's "
               "own protocol, models and range: the claim itself fails",
    "untested": "not measured, measured outside the claim's range, or measured without an informative interval "
                "(too few seeds or prompts, an interval spanning no effect and the claim); the entry names the "
                "measurement that would decide it",
}
_REQUIRED = ("id", "paper", "claim", "where", "verdict", "evidence")
_EVIDENCE = ("effect", "interval", "range", "protocol")


def load(root: str | Path = ".") -> list[dict]:
    """The claims of ``docs/claims.yml`` (a list of mappings)."""
    return list(_data(root).get("claims") or [])


def load_open(root: str | Path = ".") -> list[dict]:
    """The measurements still to run (``open`` in ``docs/claims.yml``: what, command, decides)."""
    return list(_data(root).get("open") or [])


def _data(root: str | Path) -> dict:
    import yaml

    return yaml.safe_load((Path(root) / CLAIMS_FILE).read_text()) or {}


def problems(claims: list[dict], root: str | Path = ".") -> list[str]:
    """What is wrong with the claims: a missing field, a verdict outside the vocabulary, a verdict other than
    "untested" without its evidence (effect, interval, range, protocol) or with an interval that is neither a 95%
    interval, every seed's value nor an exact result, an untested claim without ``to_run``, a duplicate id, an
    evidence page that does not exist, a paper without claims."""
    root = Path(root)
    out, seen = [], set()
    for i, c in enumerate(claims):
        name = c.get("id", f"claim #{i + 1}")
        out += [f"{name}: no {f!r}" for f in _REQUIRED if not str(c.get(f) or "").strip()]
        if name in seen:
            out.append(f"{name}: duplicate id")
        seen.add(name)
        verdict = c.get("verdict")
        if verdict not in VERDICTS:
            out.append(f"{name}: verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
        elif verdict == "untested":
            if not str(c.get("to_run") or "").strip():
                out.append(f"{name}: untested without 'to_run' (the measurement that would decide it)")
        else:
            out += [f"{name}: {verdict} without {f!r}" for f in _EVIDENCE if not str(c.get(f) or "").strip()]
            interval = str(c.get("interval") or "")
            if interval and not any(k in interval for k in ("95%", "every seed", "exact", "exhaustive")):
                out.append(f"{name}: the interval must be a 95% interval, every seed's value or an exact result: "
                           f"{interval!r}")
        page = str(c.get("evidence") or "").split("#")[0]
        if page and not (root / "docs" / "results" / page).is_file():
            out.append(f"{name}: evidence page docs/results/{page} not found")
    missing = sorted({"000", "001", "002", "003", "004"} - {str(c.get("paper")) for c in claims})
    out += [f"paper {p}: no claims" for p in missing]
    return out


def _cell(text) -> str:
    return " ".join(str(text or "").split()).replace("|", "/")


def claims_page(claims: list[dict], open_runs: list[dict] | None = None) -> str:
    """The markdown of the claims page's template (``docs/templates/results/claims.md``: numbers as templates,
    which ``interp.docs.numbers`` renders); ``open_runs``: the measurements still to run, listed at the end."""
    lines = [
        "# Claims of the five papers and their verdicts",
        "",
        "<!-- generated from docs/claims.yml by python -m interp.docs.claims write: edit the data file, not this page -->",
        "",
        "Every seed claim of papers 000-004 as this project measured it, from one data file (`docs/claims.yml`; "
        "`interp.docs.claims`). Each verdict is one of five words, and each word requires its evidence:",
        "",
        "| verdict | the evidence it requires |",
        "|---|---|",
        *[f"| {v} | {_cell(d)} |" for v, d in VERDICTS.items()],
        "",
        "Where a results page words a verdict differently, this table is the one that holds.",
        "",
    ]
    for paper in sorted({str(c["paper"]) for c in claims}):
        lines += [f"## Paper {paper}", "",
                  "| claim | where | verdict | effect | interval | range: claimed / measured | protocol difference | evidence |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in claims:
            if str(c["paper"]) != paper:
                continue
            untested = c["verdict"] == "untested"
            effect = c.get("effect") or ("observed: " + _cell(c.get("observed")) if c.get("observed") else "-")
            link = f"[{c['evidence'].split('#')[0].removesuffix('.md')}]({c['evidence']})"
            protocol = _cell(c.get("protocol"))
            if untested:
                protocol = (protocol + "; " if protocol else "") + "to decide it: " + _cell(c.get("to_run"))
            lines.append(f"| **{c['id']}** {_cell(c['claim'])} | {_cell(c['where'])} | **{c['verdict']}** | "
                         f"{_cell(effect)} | {_cell(c.get('interval') or '-')} | {_cell(c.get('range') or '-')} | "
                         f"{protocol or '-'} | {link} |")
        lines.append("")
    if open_runs:
        lines += ["## Measurements still to run", "",
                  "Not run yet; each would decide the claims named (or make a count's spread visible).", "",
                  "| measurement | command | decides |", "|---|---|---|"]
        for o in open_runs:
            command = _cell(o.get("command"))
            if command.startswith(("python ", "interp ")):  # a command line: shown as code
                command = f"`{command}`"
            lines.append(f"| {_cell(o.get('what'))} | {command} | {_cell(o.get('decides'))} |")
        lines.append("")
    return "\n".join(lines)


def check(root: str | Path = ".") -> list[str]:
    """:func:`problems` of ``docs/claims.yml``, and whether the page's template is generated from it now (the
    rendered page is checked by ``interp.docs.numbers.check``)."""
    root = Path(root)
    claims = load(root)
    out = problems(claims, root)
    page = root / CLAIMS_TEMPLATE
    if not page.is_file() or page.read_text() != claims_page(claims, load_open(root)):
        out.append(f"{CLAIMS_TEMPLATE} is stale against {CLAIMS_FILE}: run python -m interp.docs.claims write")
    return out


def write(root: str | Path = ".") -> str:
    """Regenerate the claims page's template from ``docs/claims.yml`` and render ``docs/results/claims.md``; returns
    the two paths, one a line."""
    from interp.docs.numbers import render_file

    root = Path(root)
    (root / CLAIMS_TEMPLATE).write_text(claims_page(load(root), load_open(root)))
    (root / CLAIMS_PAGE).write_text(render_file(CLAIMS_TEMPLATE, root))
    return f"{root / CLAIMS_TEMPLATE}\n{root / CLAIMS_PAGE}"


def main(argv: list[str] | None = None) -> int:
    """``python -m interp.docs.claims check | write`` (run at the repository root)."""
    from interp.docs.command import check_or_write

    return check_or_write(argv, "interp.docs.claims", lambda: check("."), lambda: write("."))

if __name__ == "__main__":
    raise SystemExit(main())
