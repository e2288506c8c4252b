"""What the command line reads of a model without loading its weights, so it can check options first: the head grid
and context length (``--heads``, ``--tokens``, ``--lengths``), the tokenizer (pairs files) and its BOS rule."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    """A model's size as its configuration states it, read without the weights.

    Attributes:
        n_layers, n_heads: the attention grid (query heads per layer).
        context_length: positions the model was trained for (``max_position_embeddings``; the GGUF
            ``context_length``), or None where the source does not say.
        source: where it was read (``"tiny config"``, a ``config.json`` path, ``"GGUF header of FILE"``).
    """

    n_layers: int
    n_heads: int
    context_length: int | None
    source: str


def model_shape(name: str) -> ModelShape | None:
    """The shape of the model ``name`` (as ``interp.load_model`` takes it) from its configuration alone.

    Sources, cheapest first: a tiny model's config; a ``local:PATH`` folder's ``config.json``; a hub id's
    ``config.json`` in the local Hugging Face cache (never the network); a zoo model's converted copy's
    ``config.json`` (written at its first load) or else the key-value header of its GGUF file (the first chunk of a
    chunked one; only the header is read, no tensor). Returns None where none of them can be read; the loader's checks
    then come after the load. Never raises.
    """
    try:
        if name.startswith("tiny-"):
            from interp.models.tiny import TINY

            c = TINY[name].config()
            return ModelShape(int(c.num_hidden_layers), int(c.num_attention_heads), int(c.max_position_embeddings),
                              "tiny config")
        if name.startswith("local:"):
            return _from_config_json(Path(name[len("local:"):]).expanduser() / "config.json")
        from interp.models.zoo import ZOO, is_installed

        if name in ZOO:
            folder = converted_folder(name)
            if folder is not None and (folder / "config.json").is_file():
                return _from_config_json(folder / "config.json")
            if is_installed(name):
                return _from_gguf_header(ZOO[name].source.chunks()[0])
            return None
        if "/" in name and not name.startswith(("/", ".", "~")):
            from huggingface_hub import try_to_load_from_cache

            path = try_to_load_from_cache(name, "config.json")
            return _from_config_json(Path(path)) if isinstance(path, str) else None
    except Exception:  # noqa: BLE001 - any unreadable source: the checks happen after loading instead
        return None
    return None


def model_grid(name: str) -> tuple[int, int] | None:
    """``(n_layers, n_heads)`` of ``model_shape(name)``, or None where it cannot be read without loading."""
    s = model_shape(name)
    return None if s is None else (s.n_layers, s.n_heads)


def converted_folder(name: str) -> Path | None:
    """Where a zoo model's converted copy (``config.json``, tokenizer, safetensors) lives once its first load wrote it
    (``interp.models.loaders``: the cache folder keyed by the GGUF sha256); None for names that are not GGUF zoo
    models. The folder may not exist yet."""
    from interp.models.zoo import ZOO, cache_dir

    src = ZOO[name].source if name in ZOO else None
    return None if src is None else cache_dir() / "hf" / f"{name}-{src.sha256[:16]}"


def _from_config_json(path: Path) -> ModelShape:
    """A Hugging Face ``config.json``'s grid and context (a multimodal one's ``text_config``; GPT-2's ``n_layer``;
    ``interp.lab``'s ``n_layers``, ``max_positions``). Raises on a missing layer or head count."""
    c = json.loads(path.read_text())
    c = c.get("text_config", c)
    pick = lambda *keys: next((int(c[k]) for k in keys if c.get(k) is not None), None)  # noqa: E731
    layers, heads = pick("num_hidden_layers", "n_layer", "n_layers"), pick("num_attention_heads", "n_head", "n_heads")
    if layers is None or heads is None:
        raise KeyError(f"{path} names no layer or head count")
    return ModelShape(layers, heads, pick("max_position_embeddings", "n_positions", "max_positions"), str(path))


# GGUF value types (gguf.GGUFValueType) -> struct format of one scalar; 8: string, 9: array
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _from_gguf_header(path: Path) -> ModelShape | None:
    """The grid and context length from a GGUF file's key-value header (``{arch}.block_count``,
    ``{arch}.attention.head_count``, ``{arch}.context_length``), reading keys in order and stopping once all are found,
    before the tokenizer's long arrays where the file puts them last (gguf's ``GGUFReader`` parses the whole file:
    3.5 s for SmolLM2's). Little-endian GGUF v2 / v3 (the GGUF spec, ggml/docs/gguf.md). None if a key is missing."""
    with open(path, "rb") as f:
        def read(fmt: str):
            size = struct.calcsize("<" + fmt)
            data = f.read(size)
            if len(data) != size:
                raise EOFError(path)
            return struct.unpack("<" + fmt, data)[0]

        def string() -> str:
            return f.read(read("Q")).decode("utf-8", "replace")

        def value(kind: int):
            if kind == 8:
                return string()
            if kind == 9:
                item, n = read("I"), read("Q")
                if item in _GGUF_SCALARS:  # skip the array without reading it item by item
                    f.seek(n * struct.calcsize("<" + _GGUF_SCALARS[item]), 1)
                else:
                    for _ in range(n):
                        value(item)
                return None
            return read(_GGUF_SCALARS[kind])

        if f.read(4) != b"GGUF" or read("I") not in (2, 3):
            return None
        read("Q")  # tensor count
        found: dict[str, object] = {}
        for _ in range(read("Q")):
            key = string()
            found[key] = value(read("I"))
            arch = found.get("general.architecture")
            want = [f"{arch}.block_count", f"{arch}.attention.head_count", f"{arch}.context_length"]
            if arch is not None and all(k in found for k in want):
                return ModelShape(int(found[want[0]]), int(found[want[1]]), int(found[want[2]]), f"GGUF header of {path}")
    return None


def bos_id(tokenizer) -> int | None:
    """The BOS id to start prompts with where the tokenizer itself adds one (Gemma-3), else None; what
    ``LoadedModel.bos_token_id`` returns, for a tokenizer alone. (``add_bos_token`` is not reliable: Gemma adds BOS in
    its post-processor, so the rule tokenizes a letter.)"""
    b = getattr(tokenizer, "bos_token_id", None)
    if b is None:
        return None
    ids = tokenizer("a")["input_ids"]
    return int(b) if ids and ids[0] == b else None


def load_tokenizer(name: str):
    """A model's tokenizer without its weights, where that is cheap; else None (the check then runs after the load).

    Tiny models: the byte tokenizer; ``local:PATH``: the folder's tokenizer; a zoo model: the tokenizer of its cached
    converted copy (written at its first load; the GGUF file itself is not read here). Hub ids and zoo models never
    loaded return None.
    """
    try:
        if name.startswith("tiny-"):
            from interp.models.tiny import byte_tokenizer

            return byte_tokenizer()
        from transformers import AutoTokenizer

        if name.startswith("local:"):
            return AutoTokenizer.from_pretrained(Path(name[len("local:"):]).expanduser(), local_files_only=True)
        folder = converted_folder(name)
        if folder is not None and (folder / "config.json").exists():
            return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception:  # noqa: BLE001 - any unreadable tokenizer: the pairs are checked after the model loads instead
        return None
    return None
