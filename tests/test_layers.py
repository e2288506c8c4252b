"""One direction of imports: a module imports only modules of its own layer or lower ones (``interp`` layout).

Layers, lowest first (a module's layer is the longest prefix listed): leaves (``errors``, ``attention``, ``corpus``,
``_compat``), ``rope``, ``models.arch`` / ``models.tiny``, ``hooks.taps``, ``models`` (zoo, card, loaders: the card's
2-token probe runs through the taps, the one place where a model module reads a hook), ``hooks`` (capture,
interventions), ``measures`` and ``stats``, ``engine``, ``experiments``, ``report``, ``cli``. ``interp.lab`` is a
plugin: nothing outside it imports it. The old-path shims (``interp/scan.py`` ...) and ``interp/__init__.py``
(lazy names) are exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "interp"

LAYERS = [
    ["interp.errors", "interp.attention", "interp.corpus", "interp._compat", "interp.io"],
    ["interp.rope"],
    ["interp.models.arch", "interp.models.tiny"],
    ["interp.hooks.taps"],
    ["interp.models"],
    ["interp.hooks"],
    ["interp.measures", "interp.stats"],
    ["interp.engine"],
    ["interp.experiments"],
    ["interp.report"],
    ["interp.cli", "interp.docs_numbers", "interp.docs_claims"],
]
SHIMS = {"interp", "interp.scan", "interp.capture", "interp.rope_variants", "interp.arch", "interp.tiny", "interp.taps",
         "interp.intervene", "interp.executor", "interp.ablation", "interp.sweep", "interp.kernels"} | {
    f"interp.stats.{m}" for m in ("slash", "spectrum", "norms", "sinks", "cone", "maps", "state", "freq", "clouds", "geometry")} | {"interp.report.cone_figures"}


def _layer(mod: str) -> int | None:
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    return rank


def _modules():
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(path: Path, mod: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                base = mod.split(".")[: -node.level] if not path.name == "__init__.py" else mod.split(".")[: len(mod.split(".")) - node.level + 1]
                name = ".".join(base + [node.module])
            else:
                name = node.module
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}  # `from interp.x import submodule`
    return {n for n in out if n == "interp" or n.startswith("interp.")}


def test_imports_go_down_the_layers():
    bad = []
    for mod, path in _modules():
        if mod in SHIMS or mod.startswith("interp.lab"):
            continue
        own = _layer(mod)
        assert own is not None, f"{mod} is in no layer: add it to LAYERS"
        for imp in _imports(path, mod):
            if imp.startswith("interp.lab"):
                bad.append(f"{mod} imports the lab plugin ({imp})")
                continue
            if imp in SHIMS and imp != "interp":
                bad.append(f"{mod} imports the deprecated path {imp}")
                continue
            if imp == "interp":
                continue
            target = _layer(imp)
            if target is not None and target > own:
                bad.append(f"{mod} (layer {own}) imports {imp} (layer {target})")
    assert not bad, "\n".join(bad)
