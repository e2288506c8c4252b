"""A model's head grid read without loading its weights, so the command line can check ``--heads`` first."""

from __future__ import annotations


def model_grid(name: str) -> tuple[int, int] | None:
    """``(n_layers, n_heads)`` of a model read without loading its weights (so the command line can check ``--heads``
    before the model loads): a tiny model's config, a ``local:PATH`` folder's ``config.json``, an installed zoo
    model's GGUF header. None where that cannot be read cheaply (a hub id, a zoo model not installed)."""
    import json
    from pathlib import Path

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
