"""One contract test over every registered measure (``interp.measures.REGISTRY``), on the tiny models.

For each measure: shards merge to one pass (float64 sums to 1e-10), save / load round trip, fused kernel ==
Python block path, declared columns == computed columns with ``[layer, head]`` shape, every column documented in
the README's measurement table, every ``ScanConfig`` field owned by exactly one measure (or the engine).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from interp.engine import ScanConfig, ScanResult, merge_results, scan
from interp.engine import kernels
from interp.engine.collector import dims_of
from interp.measures import REGISTRY, Column, Entry, Measure, Option, Registry, RegistryError
from interp.rope import band_ablations
from tests.conftest import random_tokens

README = Path(__file__).resolve().parents[2] / "README.md"
MEASURES = [m.name for m in REGISTRY]


def _config(model) -> ScanConfig:
    """Every measure switched on, at sizes where long lags and the cluster scores have data on short prompts."""
    switches = {m.switch: True for m in REGISTRY if m.switch}
    return ScanConfig(**switches, block_size=8, map_size=12, long_lags=(6, 30), long_min_entries=4, cluster_points=20,
                      variants=band_ablations(model.card.d_head // 2, 2))


def _prompts():
    return [random_tokens(n, seed=s) for s, n in enumerate((41, 23, 33))]  # different lengths: per-position padding


@pytest.fixture(scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the fused kernel's sums are then deterministic, so merges can be held to 1e-10
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-gemma3", "tiny-qwen2"])
def scans(request, one_thread):
    """``{engine: (whole, merged)}``: one pass over three prompts, and the merge of a 1-prompt and a 2-prompt shard."""
    from interp.models import load_model

    model = load_model(request.param, device="cpu")
    cfg, prompts = _config(model), _prompts()
    out = {}
    mp = pytest.MonkeyPatch()
    for engine in ("fused-cpu", "python"):
        mp.setenv("INTERP_KERNEL", "0" if engine == "python" else "auto")
        if engine == "fused-cpu" and not kernels.available():
            continue
        whole = scan(model, prompts, cfg)
        assert whole.meta["engine"] == engine
        merged = merge_results([scan(model, prompts[:1], cfg), scan(model, prompts[1:], cfg, prompt_ids=[1, 2])])
        out[engine] = (whole, merged)
    mp.undo()
    return model, out


def _entries(measure, result):
    return measure.entries(dims_of(result.card, 1), result.config)


@pytest.mark.parametrize("name", MEASURES)
def test_shards_merge_to_one_pass(scans, name):
    _, runs = scans
    for whole, merged in runs.values():
        for e in _entries(REGISTRY[name], whole):
            torch.testing.assert_close(merged.state[e.name], whole.state[e.name], atol=1e-10, rtol=1e-10, msg=e.name)


@pytest.mark.parametrize("name", MEASURES)
def test_save_load_round_trip(scans, name, tmp_path):
    _, runs = scans
    whole = next(iter(runs.values()))[0]
    back = ScanResult.load(whole.save(tmp_path / "scan"))
    for e in _entries(REGISTRY[name], whole):
        assert torch.equal(back.state[e.name], whole.state[e.name])
    cols = [c.name for c in REGISTRY[name].columns(whole.config)]
    assert back.heads[cols].equals(whole.heads[cols])


@pytest.mark.parametrize("name", MEASURES)
def test_fused_kernel_equals_python_path(scans, name):
    _, runs = scans
    if "fused-cpu" not in runs:
        pytest.skip("the fused kernel did not build here; the Python path is covered by the other tests")
    fused, python = runs["fused-cpu"][0], runs["python"][0]
    for e in _entries(REGISTRY[name], fused):
        a, b = fused.state[e.name], python.state[e.name]
        torch.testing.assert_close(a, b, atol=1e-5 * max(1.0, float(b.abs().max())), rtol=1e-5, msg=e.name)


@pytest.mark.parametrize("name", MEASURES)
def test_declared_columns_and_entries(scans, name):
    model, runs = scans
    whole = next(iter(runs.values()))[0]
    m = REGISTRY[name]
    got = m.compute(whole)
    declared = [c.name for c in m.columns(whole.config)]
    assert list(got) == declared or set(got) == set(declared)
    L, H = model.card.n_layers, model.card.n_heads
    for c in declared:
        assert tuple(got[c].shape) == (L, H), c
    heads = whole.heads
    assert all(c in heads for c in declared)
    for e in _entries(m, whole):  # declared entries are exactly what the state holds, float64
        assert whole.state[e.name].dtype == torch.float64
        shape = whole.state[e.name].shape
        assert (shape[:-1] == e.shape[:-1]) if e.per_position else (tuple(shape) == e.shape), e.name


def _readme_columns() -> set[str]:
    text = README.read_text()
    section = text.split("## Measurements", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", section))


@pytest.mark.parametrize("name", MEASURES)
def test_every_column_documented(name):
    cfg = REGISTRY.probe_config()
    documented = _readme_columns()
    missing = [c.name for c in REGISTRY[name].columns(cfg) if c.name not in documented]
    assert not missing, f"README's Measurements table lacks {missing}"
    for c in REGISTRY[name].columns(cfg):
        assert c.label and len(c.label) < 200, c.name
        # plain words first, the paper's symbols after (issue 49): a label shown in the report's dropdown does not open
        # with a formula such as "r1 = ..." or "||k_0|| / ..."
        first = c.label.split()[0].rstrip(":,'s")
        assert first.replace("-", "").replace("'", "").isalpha(), (c.name, c.label)


def test_every_option_owned_once():
    names = [f.name for f in dataclasses.fields(ScanConfig)]
    owners = [o.name for o in REGISTRY.options()]
    assert sorted(names) == sorted(owners) and len(set(owners)) == len(owners)
    for n in names:
        assert REGISTRY.owner(n)


class _Toy(Measure):
    name = "toy"

    def __init__(self, column="toy_col", entry="toy_sum", option=None):
        self._col, self._entry = column, entry
        self.options = (Option(option, 1, "x"),) if option else ()

    def columns(self, cfg):
        return [Column(self._col, "a toy")]

    def entries(self, dims, cfg):
        return [Entry(self._entry, (dims.n_layers, dims.n_heads))]


def test_registry_refuses_duplicates():
    reg = Registry(reserved_columns=("layer",))
    reg.register(_Toy())
    for bad in (_Toy(), type("T2", (_Toy,), {"name": "t2"})(column="toy_col", entry="other"),
                type("T3", (_Toy,), {"name": "t3"})(column="other", entry="toy_sum"),
                type("T4", (_Toy,), {"name": "t4"})(column="layer", entry="e4")):
        with pytest.raises(RegistryError):
            reg.register(bad)
    assert [m.name for m in reg] == ["toy"]
    reg.register(type("T5", (_Toy,), {"name": "t5"})(column="c5", entry="e5", option="opt5"))
    with pytest.raises(RegistryError):
        reg.register(type("T6", (_Toy,), {"name": "t6"})(column="c6", entry="e6", option="opt5"))


def test_builtin_registry_refuses_a_clash():
    with pytest.raises(RegistryError):
        REGISTRY.register(type("Clash", (_Toy,), {"name": "clash"})(column="slash_score", entry="clash_sum"))
    assert "clash" not in REGISTRY
