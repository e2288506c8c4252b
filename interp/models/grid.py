"""What the command line reads of a model without loading its weights, so it can check options first: the head grid
(``--heads``), the tokenizer (pairs files) and its BOS rule."""

from __future__ import annotations

from pathlib import Path


def model_grid(name: str) -> tuple[int, int] | None:
    """``(n_layers, n_heads)`` of a model read without loading its weights (so the command line can check ``--heads``
    before the model loads): a tiny model's config, a ``local:PATH`` folder's ``config.json``, an installed zoo
    model's GGUF header. None where that cannot be read cheaply (a hub id, a zoo model not installed)."""
    import json

    try:
        if name.startswith("tiny-"):
            from interp.models.tiny import TINY

            c = TINY[name].config()
            return int(c.num_hidden_layers), int(c.num_attention_heads)
        if name.startswith("local:"):
            c = json.loads((Path(name[len("local:"):]) / "config.json").read_text())
            c = c.get("text_config", c)
            return int(c.get("num_hidden_layers", c.get("n_layer"))), int(c.get("num_attention_heads", c.get("n_head")))
        from interp.models.zoo import ZOO, gguf_path, is_installed

        if name in ZOO and is_installed(name):
            import gguf

            r = gguf.GGUFReader(gguf_path(name))
            arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
            get = lambda k: int(r.fields[f"{arch}.{k}"].parts[r.fields[f"{arch}.{k}"].data[0]][0])  # noqa: E731
            return get("block_count"), get("attention.head_count")
    except Exception:  # noqa: BLE001 - any unreadable source: the check happens after loading instead
        return None
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
        from interp.models.zoo import ZOO, cache_dir

        src = ZOO[name].source if name in ZOO else None
        folder = cache_dir() / "hf" / f"{name}-{src.sha256[:16]}" if src is not None else None
        if folder is not None and (folder / "config.json").exists():
            return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception:  # noqa: BLE001 - any unreadable tokenizer: the pairs are checked after the model loads instead
        return None
    return None
