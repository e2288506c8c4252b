"""Report sections that measures contribute: one registry, so a measure's view joins the report without editing it.

A section is a function ``(result, tokenizer) -> list[str]`` of HTML fragments (each escaping the model's text),
registered under the name of the measure it shows (``register_section``, which refuses a second section for one
measure or a measure that is not registered). ``interp.report.page.render`` appends, in registration order, the
sections of every measure the scan ran (``Measure.enabled(result.config)``). The built-in sections
(``BUILTIN``) register when first needed; a plugin measure registers its section when its module is imported (the
entry point that registers the measure, ``interp.measures.load_plugins``).
"""

from __future__ import annotations

import importlib
from typing import Callable

from interp.measures import REGISTRY

SectionFn = Callable[..., list]  # (result: ScanResult, tokenizer=None) -> list of HTML fragments
BUILTIN = ("interp.report.heavy_hitters",)  # modules whose import registers the built-in measures' sections
SECTIONS: dict[str, SectionFn] = {}  # measure name -> its section, in registration order


def register_section(measure: str, render: SectionFn) -> SectionFn:
    """Show ``render(result, tokenizer)``'s fragments in the report of every scan that ran ``measure``; returns it.

    Raises:
        ValueError: ``measure`` is not a registered measure, or already has a section.
    """
    if measure not in REGISTRY:
        raise ValueError(f"report section for {measure!r}: no such measure; register the measure first "
                         f"(known: {', '.join(m.name for m in REGISTRY)})")
    if measure in SECTIONS:
        raise ValueError(f"measure {measure!r} already has a report section ({SECTIONS[measure].__qualname__})")
    SECTIONS[measure] = render
    return render


def load_builtin() -> None:
    """Import the built-in section modules (``BUILTIN``), which register their sections; idempotent."""
    for module in BUILTIN:
        importlib.import_module(module)


def measure_sections(result, tokenizer=None) -> list[str]:
    """HTML fragments of the sections of every measure ``result`` ran (registration order); ``[]`` when none."""
    load_builtin()
    parts: list[str] = []
    for name, render in SECTIONS.items():
        if REGISTRY[name].enabled(result.config):
            parts += render(result, tokenizer)
    return parts
