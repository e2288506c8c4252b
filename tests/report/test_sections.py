"""Report sections contributed by measures (interp.report.sections): a measure's view joins the report without an edit
to the page, only for scans that ran the measure, and the registry refuses what it cannot place."""

import pytest

from interp.engine import ScanConfig, scan
from interp.report import sections
from interp.report.page import render
from tests.conftest import random_tokens


def test_a_registered_section_shows_only_in_reports_of_scans_that_ran_its_measure(tiny_llama, monkeypatch):
    sections.load_builtin()
    monkeypatch.setattr(sections, "SECTIONS", dict(sections.SECTIONS))  # leave the real registry as it was
    seen = []

    def echo_section(result, tokenizer=None):
        seen.append(tokenizer)
        return [f"<h2>Echo section: {result.card.name}</h2>"]

    sections.register_section("echo", echo_section)
    prompts = [random_tokens(24, seed=s) for s in range(2)]
    on = render(scan(tiny_llama, prompts, ScanConfig(block_size=8, map_size=8, echo=True)), tokenizer="tok")
    off = render(scan(tiny_llama, prompts, ScanConfig(block_size=8, map_size=8)))
    assert f"<h2>Echo section: {tiny_llama.card.name}</h2>" in on and "Echo section" not in off
    assert seen == ["tok"]                            # called once, for the scan with the measure, with its tokenizer


def test_the_registry_refuses_unknown_measures_and_second_sections(monkeypatch):
    sections.load_builtin()
    monkeypatch.setattr(sections, "SECTIONS", dict(sections.SECTIONS))
    with pytest.raises(ValueError, match="no such measure"):
        sections.register_section("no_such_measure", lambda r, t=None: [])
    with pytest.raises(ValueError, match="'heavy_hitters' already has a report section"):
        sections.register_section("heavy_hitters", lambda r, t=None: [])
