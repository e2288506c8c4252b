"""The token-level attention viewer: embedded values equal the recomputed attention, text is escaped,
the window bounds what is embedded, bad indices give one-line errors, and the HTML structure is pinned
by a snapshot (``INTERP_UPDATE_SNAPSHOTS=1`` rewrites it after an intended change)."""

from __future__ import annotations

import base64
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch

from interp.hooks.capture import capture, recompute_pattern
from interp.errors import ConfigError, PathError, PromptError
from interp.report.viewer import (AttentionView, _json_for_script, attention_view, decode_values, display_token,
                                  normalise_ids, parse_index_spec, view_command_main)
from tests.conftest import random_tokens

SNAPSHOTS = Path(__file__).parent / "snapshots"
HOSTILE = "a <script>alert('x')</script> & \"q\" &amp; <!-- <script> </b>\n\tend\r ok </SCRIPT "


def island(page: str) -> dict:
    """The JSON data island of a page (exactly one)."""
    found = re.findall(r'<script type="application/json" class="interp-av-data">(.*?)</script>', page, re.S)
    assert len(found) == 1
    return json.loads(found[0])


def decode(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """Independent decoder written from the module docstring's description of the format."""
    S = {"uint8": 255, "uint16": 65535}[data["dtype"]]
    dt = np.uint8 if data["dtype"] == "uint8" else np.dtype("<u2")
    vals = np.frombuffer(base64.b64decode(data["values"]), dtype=dt)
    W = data["end"] - data["start"]
    nl, nh = len(data["layers"]), len(data["heads"])
    out = np.zeros((nl, nh, W, W))
    T = W * (W + 1) // 2
    assert vals.size == nl * nh * T
    for li in range(nl):
        for hi in range(nh):
            base = (li * nh + hi) * T
            for r in range(W):
                out[li, hi, r, : r + 1] = vals[base + r * (r + 1) // 2 : base + r * (r + 1) // 2 + r + 1] / S
    before = np.frombuffer(base64.b64decode(data["before"]), dtype=dt).reshape(nl, nh, W) / S
    return out, before


@pytest.mark.parametrize("dtype, tol", [("uint8", 0.5 / 255), ("uint16", 0.5 / 65535)])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_embedded_values_equal_recomputed_attention(name, dtype, tol, tiny_llama, tiny_gemma):
    """Decoded page values == recompute_pattern on the window (sliding layers and MQA on tiny-gemma3)."""
    model = {"tiny-llama": tiny_llama, "tiny-gemma3": tiny_gemma}[name]
    toks = random_tokens(40, seed=3)
    layers, heads = [model.card.n_layers - 1, 0], [3, 1]  # out of order on purpose: axes follow the request
    view = attention_view(model, toks, layers=layers, heads=heads, start=11, window=20, dtype=dtype)
    data = island(view.html())
    assert (data["start"], data["end"], data["n_tokens"]) == (11, 31, 40) and data["layers"] == layers and data["heads"] == heads
    probs, before = decode(data)
    ref_probs, ref_before = decode_values(data)
    np.testing.assert_array_equal(probs, ref_probs)
    np.testing.assert_array_equal(before, ref_before)
    cap = capture(model, toks)
    for li, layer in enumerate(layers):
        full = recompute_pattern(model, cap, layer)[heads].double().numpy()
        ref, ref_b = full[:, 11:31, 11:31], full[:, 11:31, :11].sum(-1)
        np.testing.assert_allclose(view.probs[li], ref, atol=1e-6)  # exact values (float32 arithmetic)
        np.testing.assert_allclose(view.before[li], ref_b, atol=1e-6)
        np.testing.assert_allclose(probs[li], ref, atol=tol + 1e-7)  # quantised in the page
        np.testing.assert_allclose(before[li], ref_b, atol=tol + 1e-7)
        np.testing.assert_allclose(probs[li].sum(-1) + before[li], 1.0, atol=21 * tol + 1e-6)
        np.testing.assert_allclose(view.pattern(layer, heads[0]), ref[0], atol=1e-6)
        window = model.card.sliding_window[layer]
        if window is not None:  # keys at lag >= window are masked: exactly 0 in the page
            r, c = np.nonzero(np.tril(np.ones((20, 20)), -window))
            assert (probs[li][:, r, c] == 0).all() and len(r) > 0
    group = model.card.n_heads // model.card.n_kv_heads
    assert data["kv_heads"] == [h // group for h in heads]
    if name == "tiny-gemma3":
        assert model.card.n_kv_heads == 1 and data["kv_heads"] == [0, 0]


def test_whole_prompt_equals_recompute_pattern_exactly(tiny_gemma):
    toks = random_tokens(24, seed=1)
    view = attention_view(tiny_gemma, toks)
    cap = capture(tiny_gemma, toks)
    assert view.probs.shape == (3, 4, 24, 24) and (view.before == 0).all()
    for layer in range(3):
        np.testing.assert_allclose(view.probs[layer], recompute_pattern(tiny_gemma, cap, layer).numpy(), atol=1e-6)


def test_model_eager_attention_agrees(tiny_gemma):
    """The view's values are the model's own eager attention (through capture's patterns)."""
    toks = random_tokens(20, seed=2)
    view = attention_view(tiny_gemma, toks, start=4, window=12)
    eager = capture(tiny_gemma, toks, patterns=True).patterns
    for layer in range(3):
        np.testing.assert_allclose(view.probs[layer], eager[layer][:, 4:16, 4:16].numpy(), atol=1e-5)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.scripts, self.tokens, self.stack, self.tags = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        self.stack.append((tag, a))
        if tag == "script":
            self.scripts.append(a.get("type", "js"))
        if tag == "span" and a.get("class") == "tok":
            self.tokens.append("")

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if self.stack and self.stack[-1][0] == "span" and self.stack[-1][1].get("class") == "tok":
            self.tokens[-1] += data


def test_hostile_token_text_is_escaped(tiny_llama):
    view = attention_view(tiny_llama, HOSTILE, window=200)
    page = view.html()
    p = _Collect()
    p.feed(page)
    assert p.scripts == ["application/json", "js"]  # no script element from the prompt
    assert p.tags.count("b") == 1 and p.tags.count("br") == 1  # the model name; the one newline token
    assert set(p.tags) <= {"html", "head", "meta", "title", "style", "body", "div", "b", "label", "select", "input", "p", "span", "br", "canvas", "script"}
    decoded = [tiny_llama.tokenizer.decode([int(i)]) for i in view.token_ids]
    assert p.tokens == [display_token(t) for t in decoded]  # every token shown literally, one span each
    assert "".join(view.texts) == tiny_llama.tokenizer.decode(view.token_ids)
    assert "\\n" in p.tokens and "\\t" in p.tokens and "\\r" in p.tokens and "<" in p.tokens and "&" in p.tokens
    data = island(page)
    assert data["labels"] == view.labels
    raw = page.split('class="interp-av-data">')[1].split("</script>")[0]
    assert not set("<>&\u2028\u2029") & set(raw)  # JSON island: written as \\uXXXX escapes
    assert "<!--" not in page and page.count("</b>") == 1  # the model name's
    assert page.count("</script>") == 2 and page.lower().count("</script") == 2
    assert "<br>" in page  # the newline token keeps the prompt's line structure


def test_json_island_escapes():
    text = _json_for_script({"t": "</script><!--<script>&\u2028\u2029"})
    assert not set("<>&\u2028\u2029") & set(text) and json.loads(text) == {"t": "</script><!--<script>&\u2028\u2029"}


def test_window_bounds_what_is_embedded(tiny_llama):
    toks = random_tokens(500, seed=4)
    view = attention_view(tiny_llama, toks, start=480, window=64)
    assert (view.start, view.end, view.n_tokens) == (480, 500, 500) and view.probs.shape == (2, 4, 20, 20)
    page = view.html()
    data = island(page)
    assert len(data["labels"]) == len(data["token_ids"]) == 20 and data["token_ids"] == toks[480:].tolist()
    assert page.count('class="tok"') == 20
    assert "Positions 480..499 of 500 tokens" in page and "before position 480" in page
    assert len(base64.b64decode(data["values"])) == 2 * 4 * 20 * 21 // 2
    small = attention_view(tiny_llama, toks, start=0, window=16)
    assert small.end == 16 and len(small.html()) < 40_000  # 500-token prompt, small page
    assert len(island(small.html())["token_ids"]) == 16
    assert "the rest of the prompt is not in this page" in small.html()


@pytest.mark.parametrize("kwargs, needle", [
    ({"layers": [5]}, "layer 5 is out of range: tiny-llama has layers 0..1"),
    ({"layers": 2}, "layer 2 is out of range"),
    ({"heads": [0, -1]}, "head -1 is out of range: tiny-llama has heads 0..3"),
    ({"heads": [9]}, "head 9 is out of range"),
    ({"heads": []}, "pass at least one head"),
    ({"layers": ["0"]}, "layer '0' is out of range"),
    ({"start": 10}, "start 10 is outside the prompt: pick start in 0..9"),
    ({"start": -1}, "start -1 is outside the prompt"),
    ({"window": 0}, "window must be an integer >= 1"),
    ({"dtype": "float32"}, "dtype must be 'uint8' or 'uint16'"),
    ({"max_values": 10}, "over max_values=10"),
])
def test_bad_arguments_raise_one_line_config_error(tiny_llama, kwargs, needle):
    with pytest.raises(ConfigError) as err:
        attention_view(tiny_llama, random_tokens(10), **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_prompt_errors_come_from_capture(tiny_llama):
    with pytest.raises(PromptError):
        attention_view(tiny_llama, random_tokens(600))  # tiny context is 512
    with pytest.raises(PromptError):
        attention_view(tiny_llama, torch.tensor([], dtype=torch.long))
    with pytest.raises(ConfigError, match="not in this view"):
        attention_view(tiny_llama, random_tokens(8), layers=[0], heads=[1]).pattern(1, 1)


def test_jupyter_fragment_has_unique_ids_and_runs_its_own_script(tiny_llama):
    view = attention_view(tiny_llama, "hello", layers=0)
    a, b = view._repr_html_(), view._repr_html_()
    ida, idb = re.findall(r'id="(interp-av-[0-9a-f]{12})"', a), re.findall(r'id="(interp-av-[0-9a-f]{12})"', b)
    assert len(ida) == len(idb) == 1 and ida != idb
    assert f'document.getElementById("{ida[0]}")' in a and "document.currentScript" in a and "<html" not in a and "<body" not in a
    assert normalise_ids(a) == normalise_ids(b)
    assert "src=" not in a and "http" not in a.replace("http-equiv", "")  # nothing fetched: works offline
    page = view.html()
    assert page.startswith("<!DOCTYPE html>") and "<meta charset=\"utf-8\">" in page and "http" not in page


def _snapshot_text(view: AttentionView) -> str:
    page = normalise_ids(view.html())
    # the structure, not the float values: base64 payloads are checked by the decode tests
    return re.sub(r'"(values|before|values_v|before_v)":"[A-Za-z0-9+/=]*"', r'"\1":"<base64>"', page)


def test_html_snapshot(tiny_llama):
    view = attention_view(tiny_llama, "Hi <b>&\n\"x\" 'y'", layers=[1], heads=[0, 2], start=2, window=9)
    got = _snapshot_text(view)
    path = SNAPSHOTS / "viewer_tiny_llama.html"
    if os.environ.get("INTERP_UPDATE_SNAPSHOTS") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
        if os.environ.get("INTERP_UPDATE_SNAPSHOTS") != "1":
            pytest.fail(f"snapshot {path} was missing and has been written; re-run the test")
    assert got == path.read_text(encoding="utf-8"), "viewer HTML changed: INTERP_UPDATE_SNAPSHOTS=1 pytest tests/report to accept"


def test_decode_values_round_trip(tiny_gemma):
    view = attention_view(tiny_gemma, random_tokens(30, seed=5), start=3, window=25, dtype="uint16")
    probs, before = decode_values(view.payload())
    np.testing.assert_allclose(probs, view.probs, atol=0.5 / 65535 + 1e-7)
    np.testing.assert_allclose(before, view.before, atol=0.5 / 65535 + 1e-7)
    assert np.triu(probs[0, 0], 1).max() == 0


def test_view_command_main(tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("one <two>\nthree", encoding="utf-8")
    out = view_command_main("tiny-llama", file=prompt, out=tmp_path / "sub" / "view.html", layers="1", heads="0-2", window=8, device="cpu")
    data = island(out.read_text(encoding="utf-8"))
    assert data["layers"] == [1] and data["heads"] == [0, 1, 2] and data["end"] == 8
    out2 = view_command_main("tiny-llama", text="x y", out=tmp_path / "v2.html", device="cpu")
    assert island(out2.read_text(encoding="utf-8"))["heads"] == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="exactly one of --text and --file"):
        view_command_main("tiny-llama", text="a", file=prompt, out=tmp_path / "x.html")
    with pytest.raises(ConfigError, match="exactly one"):
        view_command_main("tiny-llama", out=tmp_path / "x.html")
    with pytest.raises(PathError, match="missing.txt: the file does not exist"):  # not "cannot read it as UTF-8"
        view_command_main("tiny-llama", file=tmp_path / "missing.txt", out=tmp_path / "x.html")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        view_command_main("tiny-llama", file=tmp_path / "latin1.txt", out=tmp_path / "x.html")
    with pytest.raises(ConfigError, match="comma-separated"):
        view_command_main("tiny-llama", text="a", out=tmp_path / "x.html", layers="one")


def test_parse_index_spec():
    assert parse_index_spec("0,2,5-7") == [0, 2, 5, 6, 7]
    assert parse_index_spec("all") is None and parse_index_spec(None) is None and parse_index_spec([3, 1]) == [3, 1]


def test_gpu_tensors_are_brought_back():
    """Capture on CUDA when there is one (the view's arrays are numpy on the host either way)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from interp.models import load_model
    model = load_model("tiny-gemma3", device="cuda")
    view = attention_view(model, random_tokens(20), start=2, window=10)
    cpu = attention_view(load_model("tiny-gemma3", device="cpu"), random_tokens(20), start=2, window=10)
    np.testing.assert_allclose(view.probs, cpu.probs, atol=1e-4)
