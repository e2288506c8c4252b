"""The attention viewer in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

Checks that the standalone page loads offline with no console errors, that hovering a token colours
the tokens before it by its row and the tokens after it by its column with the embedded values, that the
layer / head selectors and thumbnails switch heads, that the heatmap read-out works, that hostile token
text shows literally, and that two inline (Jupyter-style) fragments inserted while detached work
independently. Skipped, with the reason, where Playwright or Chromium is missing.

Set-up: ``pip install playwright`` (the Python package only; no ``playwright install``: the system
Chromium is used) and ``apt-get install chromium``; ``INTERP_CHROMIUM`` overrides the browser path.
"""

from __future__ import annotations

import json

import numpy as np

from interp.report.viewer import attention_view
from tests.conftest import random_tokens

HOSTILE = "<script>alert(1)</script> & \"q\"\n<img src=x onerror=alert(2)>"


def _alpha(bg: str) -> float:
    return float(bg[bg.rindex(",") + 1 : bg.rindex(")")]) if bg.startswith("rgba") else (1.0 if bg.startswith("rgb") else 0.0)


def test_standalone_page_hover_select_and_heatmap(tiny_gemma, page, tmp_path):
    view = attention_view(tiny_gemma, random_tokens(40, seed=7), start=6, window=24)
    path = view.save(tmp_path / "view.html")
    page.goto(path.as_uri())
    page.wait_for_function("document.querySelectorAll('.thumbs canvas').length === 4")
    assert page.is_hidden(".nojs")
    assert page.eval_on_selector_all(".sel-layer option", "o => o.length") == 3
    assert page.eval_on_selector_all(".sel-head option", "o => o.map(x => x.textContent)")[1] == "head 1 (kv head 0)"
    S = 255
    for li, hi, r in [(0, 0, 10), (2, 3, 17)]:  # a sliding-window layer and the global one
        page.select_option(".sel-layer", str(li))
        page.select_option(".sel-head", str(hi))
        page.hover(f".tok[data-i='{r}']")
        out = page.inner_text(".readout")
        assert f"L{li}H{hi}  query {6 + r} " in out and "looks at:" in out and "keys before position 6" in out
        got = [_alpha(b) for b in page.eval_on_selector_all(".tok", "ts => ts.map(t => t.style.background)")]
        A = np.round(view.probs[li, hi] * S) / S
        want = [A[r, j] if j <= r else A[j, r] for j in range(24)]
        np.testing.assert_allclose(got, want, atol=3e-3)  # alpha: 3 decimals, kept by the browser in 1/255 steps
        assert page.eval_on_selector(".tok.sel", "t => +t.dataset.i") == r
        assert f"{np.round(view.before[li, hi, r] * S) / S:.3f}" in out
    # thumbnail click selects that head
    page.click(".thumbs figure:nth-child(2)")
    assert page.input_value(".sel-head") == "1" and page.eval_on_selector(".thumbs figure.on", "f => f.textContent") == "H1"
    page.hover(".tok[data-i='2']")
    assert "L2H1  query 8 " in page.inner_text(".readout")
    # heatmap hover: tooltip with the cell's value; the hovered row becomes the selected query
    box = page.locator(".hm").bounding_box()
    cell = (box["width"] - 4 - 110) / 24
    page.mouse.move(box["x"] + 110 + 3.5 * cell, box["y"] + 110 + 9.5 * cell)
    tip = page.inner_text(".tip")
    assert "query 15 " in tip and "key   9 " in tip and f"A = {np.round(view.probs[2, 1, 9, 3] * S) / S:.3f}" in tip
    # click pins a token: moving away keeps it
    page.click(".tok[data-i='5']")
    page.hover(".tok[data-i='7']")
    assert "query 11 " in page.inner_text(".readout") and "pinned" in page.inner_text(".readout")
    assert page.problems == []


def test_hostile_text_shows_literally(tiny_llama, page, tmp_path):
    view = attention_view(tiny_llama, HOSTILE)
    page.goto(view.save(tmp_path / "v.html").as_uri())
    page.wait_for_selector(".thumbs canvas")
    shown = page.eval_on_selector_all(".tok", "ts => ts.map(t => t.textContent)")
    assert shown == view.labels and "".join(shown).startswith("<bos><script>alert(1)</script> & \"q\"\\n<img")
    assert page.eval_on_selector_all("img", "x => x.length") == 0
    assert page.eval_on_selector_all("script", "x => x.length") == 2
    page.hover(".tok[data-i='8']")
    assert "query 8 “>”" in page.inner_text(".readout")
    assert page.problems == []


def test_two_inline_fragments_inserted_detached(tiny_llama, page):
    """JupyterLab sets an output's innerHTML and re-creates its scripts before attaching it: both views must work."""
    a = attention_view(tiny_llama, "first prompt", layers=[0])._repr_html_()
    b = attention_view(tiny_llama, "second", layers=[1])._repr_html_()
    page.set_content("<!DOCTYPE html><html><body><div id='nb'></div></body></html>")
    page.evaluate("""frags => frags.forEach(function(f){
        var host = document.createElement('div'); host.innerHTML = f;
        host.querySelectorAll('script').forEach(function(old){ var s = document.createElement('script');
            for (var i = 0; i < old.attributes.length; i++) s.setAttribute(old.attributes[i].name, old.attributes[i].value);
            s.textContent = old.textContent; old.parentNode.replaceChild(s, old); });
        document.getElementById('nb').appendChild(host); })""", [a, b])
    page.wait_for_function("document.querySelectorAll('.thumbs canvas').length === 8")
    views = page.locator(".interp-av")
    views.nth(1).locator(".tok[data-i='3']").hover()
    assert "L1H0  query 3 " in views.nth(1).locator(".readout").inner_text()
    assert views.nth(0).locator(".readout").inner_text() == "Hover a token or a heatmap cell."
    views.nth(0).locator(".tok[data-i='2']").hover()
    assert "L0H0  query 2 " in views.nth(0).locator(".readout").inner_text()
    assert json.loads(json.dumps(page.problems)) == []


def test_value_weight_toggle_switches_map_and_legend(tiny_gemma, page, tmp_path):
    """Ticking "weight by value norm" colours the tokens and fills the read-out and tooltip with the value-weighted
    map (``probs_v``), the legend says which map is shown, and unticking restores the attention; no JS errors."""
    view = attention_view(tiny_gemma, random_tokens(30, seed=4), start=3, window=20)
    page.goto(view.save(tmp_path / "vw.html").as_uri())
    page.wait_for_function("document.querySelectorAll('.thumbs canvas').length === 4")
    S, r = 255, 12

    def alphas():
        return [_alpha(b) for b in page.eval_on_selector_all(".tok", "ts => ts.map(t => t.style.background)")]

    def want(probs):
        A = np.round(probs * S) / S
        return [A[r, j] if j <= r else A[j, r] for j in range(20)]

    page.select_option(".sel-layer", "1")
    page.select_option(".sel-head", "2")
    page.click(f".tok[data-i='{r}']")  # pinned, so later mouse moves keep the query
    assert page.inner_text(".shown") == "attention A[i, j]" and "[attention]" in page.inner_text(".readout")
    np.testing.assert_allclose(alphas(), want(view.probs[1, 2]), atol=3e-3)
    assert np.abs(np.array(want(view.probs_v[1, 2])) - want(view.probs[1, 2])).max() > 0.02  # the maps differ here
    page.check(".vw")
    assert page.inner_text(".shown").startswith("value-weighted attention A[i, j]") and "Kobayashi" in page.inner_text(".shown")
    out = page.inner_text(".readout")
    assert "[value-weighted]" in out and f"{np.round(view.before_v[1, 2, r] * S) / S:.3f}" in out
    np.testing.assert_allclose(alphas(), want(view.probs_v[1, 2]), atol=3e-3)
    box = page.locator(".hm").bounding_box()
    cell = (box["width"] - 4 - 110) / 20
    page.mouse.move(box["x"] + 110 + 2.5 * cell, box["y"] + 110 + 7.5 * cell)
    assert f"Aw = {np.round(view.probs_v[1, 2, 7, 2] * S) / S:.3f}" in page.inner_text(".tip")
    page.uncheck(".vw")
    assert page.inner_text(".shown") == "attention A[i, j]"
    np.testing.assert_allclose(alphas(), want(view.probs[1, 2]), atol=3e-3)
    assert page.problems == []
