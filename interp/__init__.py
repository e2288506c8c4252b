"""interp: mechanistic interpretability of attention geometry under RoPE.

Axis conventions (used in every jaxtyping annotation and DataFrame column):

- ``batch``: prompts run together; ``prompt``: index of a prompt in a scan.
- ``pos``: token position (``q_pos`` / ``k_pos`` when both appear).
- ``layer``; ``head`` (query head); ``kv_head`` (key/value head; query head ``h`` reads
  kv head ``h // (n_heads // n_kv_heads)``).
- ``d_head``: channels of one head; ``freq``: rotation-plane index, 0 = highest frequency.
- ``delta``: lag, query position minus key position.

Captured vectors use one layout: ``[pos, head, d_head]`` (keys ``[pos, kv_head, d_head]``).

Quick use::

    import interp
    model = interp.load_model("smollm2-135m")
    prompts = interp.corpus.prompts(model, "pydoc", n_prompts=4, n_tokens=512)
    result = interp.scan(model, prompts)
    result.heads            # one row per (layer, head)

Names are imported on first use (PEP 562), so ``import interp`` does not load transformers, plotly or the report.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError as _NoMetadata, version as _version

try:  # the version lives in pyproject.toml only; an uninstalled source tree reports 0+unknown
    __version__ = _version("interp")
except _NoMetadata:  # pragma: no cover
    __version__ = "0+unknown"

# public name -> "module:attribute", or "module" for a submodule
_EXPORTS = {
    "ModelCard": "interp.models:ModelCard", "LoadedModel": "interp.models:LoadedModel", "load_model": "interp.models:load_model",
    "zoo_table": "interp.models:zoo_table",
    "Capture": "interp.hooks.capture:Capture", "capture": "interp.hooks.capture:capture", "expand_kv": "interp.hooks.capture:expand_kv",
    "verify_attention": "interp.hooks.capture:verify_attention",
    "ScanConfig": "interp.engine:ScanConfig", "ScanResult": "interp.engine:ScanResult", "scan": "interp.engine:scan",
    "merge_results": "interp.engine:merge_results", "inp_spectrum": "interp.measures.inp:spectrum_table",
    "write_report": "interp.report:write_report",
    "corpus": "interp.corpus", "rope": "interp.rope", "errors": "interp.errors", "measures": "interp.measures",
    "engine": "interp.engine", "hooks": "interp.hooks", "models": "interp.models", "experiments": "interp.experiments",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'interp' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    mod = importlib.import_module(module)
    value = getattr(mod, attr) if attr else mod
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
