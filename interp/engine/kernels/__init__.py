"""The scan's fused CPU kernel (``stream_attention.cpp``), compiled on first use and cached.

``stream_layer`` computes one layer's exact attention and its reductions (output ``P @ V``, per-lag
sums, weight on key 0, map of the first positions, pre-RoPE counterfactual weight on key 0) in one
tiled pass; it is an accelerated twin of the Python block path in ``interp.attention`` and the tests
hold the two to each other. The shared library is built with the system C++ compiler against the
installed torch into ``$XDG_CACHE_HOME/interp/kernels/<hash>/`` (``~/.cache`` without it;
``$INTERP_CACHE/kernels/<hash>/`` when that is set), about 20 s, once per machine, torch version and
source; later imports load it in milliseconds.

When no compiler is available, the build fails, the tensors are not float32 on CPU, or
``INTERP_KERNEL=0`` is set, ``available()`` is False and the scan uses the Python path (same numbers,
slower). ``INTERP_KERNEL=1`` turns a failed build into an error instead of a silent fallback.

Low-level module: imports only torch, ``interp.attention`` (shape checks) and ``interp.rope`` (pairings).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from interp.attention import check_qk
from interp.errors import ShapeError
from interp.rope import plane_channels

SOURCE = Path(__file__).with_name("stream_attention.cpp")
_STATE: dict[str, object] = {}


def _cache_dir() -> Path:
    """Where compiled kernels go: ``$INTERP_CACHE/kernels`` if set, else ``$XDG_CACHE_HOME/interp/kernels`` (as the
    model cache, ``interp.models.cache_dir``), else ``~/.cache/interp/kernels``."""
    if os.environ.get("INTERP_CACHE"):
        return Path(os.environ["INTERP_CACHE"]) / "kernels"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "interp" / "kernels"


def _cpu_id() -> str:
    """The CPU model and flags: the library is built with -march=native, so it is only valid on this CPU kind."""
    try:
        info = Path("/proc/cpuinfo").read_text()
        lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))][:2]
        return "\n".join(lines)
    except OSError:
        return platform.processor() or platform.machine()


def _compile(target: Path) -> None:
    """Build the shared library into ``target`` (atomic: a half-written file is never loaded).

    Raises:
        RuntimeError: no C++ compiler, or the compiler failed (its message is included).
    """
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) found")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    lib_dirs = cpp_extension.library_paths()
    cmd = [cxx, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           *[f"-I{p}" for p in cpp_extension.include_paths()], str(SOURCE),
           *[f"-L{p}" for p in lib_dirs], *[f"-Wl,-rpath,{p}" for p in lib_dirs], "-lc10", "-ltorch_cpu", "-ltorch"]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        res = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE.name} failed:\n{res.stderr[-3000:]}")
        os.replace(out, target)


def _library_path() -> Path:
    key = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), torch.__version__.encode(), _cpu_id().encode(),
                                     sys.version.encode()])).hexdigest()[:16]
    return _cache_dir() / key / "interp_kernels.so"


def available() -> bool:
    """Whether the fused kernel is loaded (compiling it on the first call if needed).

    Raises:
        RuntimeError: the build failed and ``INTERP_KERNEL=1`` demands the kernel.
    """
    mode = os.environ.get("INTERP_KERNEL", "auto")
    if mode == "0":
        return False
    if "ok" in _STATE:
        return bool(_STATE["ok"])
    ok = False
    try:
        path = _library_path()
        if not path.exists():
            print(f"interp: compiling the fused scan kernel into {path.parent} (once per machine, ~20 s)", file=sys.stderr, flush=True)
            _compile(path)
        torch.ops.load_library(str(path))
        ok = True
    except (RuntimeError, OSError) as e:
        if mode == "1":
            raise RuntimeError(f"the fused scan kernel is required (INTERP_KERNEL=1) but did not build: {e}") from e
        warnings.warn(f"interp: fused scan kernel unavailable, using the slower Python path ({str(e)[:300]})", stacklevel=2)
    _STATE["ok"] = ok
    return ok


def rotate_half_planes(q: torch.Tensor, k: torch.Tensor, pairing: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k with their channels ordered so that rotation plane l is channels ``(l, l + d_head/2)``, the layout both
    kernels sum InP over: interleaved pairs are permuted (dot products are unchanged), rotate_half and None pass.

    Raises:
        ValueError: an unknown pairing.
    """
    if pairing == "interleaved":
        perm = plane_channels(q.shape[-1], "interleaved").T.reshape(-1).to(q.device)
        return q[..., perm], k[..., perm]
    if pairing not in (None, "rotate_half"):
        raise ValueError(f"unknown pairing {pairing!r}")
    return q, k


def stream_layer(q, k, v, scale: float, window: int | None, softcap: float | None, block: int, skip: int, map_size: int,
                 q_pre=None, k_pre=None, inp_pairing: str | None = None, tokens=None, lse: bool = False, entropy: bool = False,
                 key_mass: bool = False):
    """One layer's exact attention and reductions; call only when ``available()``.

    Args:
        q: ``[pos, head, d_head]`` post-RoPE queries (float32, CPU); k, v: ``[pos, kv_head, d_head]``; ``v=None``
            computes the reductions only (no ``P @ V``; ``out`` is empty), as the counterfactual RoPE variants do.
        scale: logit scale; window: sliding window (None = full causal); softcap: ``c`` of ``c*tanh(x/c)`` or None.
        block: queries per tile; skip: keys ``0..skip-1`` are left out of the lag sums; map_size: side M of the map.
        q_pre, k_pre: pre-RoPE vectors (same layouts) for the counterfactual weight on key 0, or None.
        inp_pairing: ``"rotate_half"`` or ``"interleaved"`` to also sum, per rotation plane, the plane's inner
            product ``q_rot_i^(l) . k_rot_j^(l)`` (InP, paper 004 eq. 8-9) and its absolute value over the visible
            pairs with ``j >= skip``; None skips it.
        tokens: ``[pos]`` token ids to also return the token-match sums (``interp.attention.token_match_masks``), or None.
        lse, entropy, key_mass: also return the row log-sum-exp, the entropy sums and the column sums
            (``interp.measures.PRODUCTS``; each is ``[0, ...]`` when off).

    Raises:
        ShapeError: shapes that do not fit the layouts above (``head % kv_head == 0``, equal pos and d_head).
        RuntimeError: tensors that are not float32 on CPU, ``block < 1``.

    Returns:
        ``(out [pos, head, d_head] float32 (``[0, head, d_head]`` without v), lag [head, pos] float64 (sum over queries of A[i, i - delta], keys
        >= skip), sink [head, pos] (A[i, 0]), map [head, M, M] float64 (A[:M, :M]), sink_pre [head, pos] or
        [0, pos], inp_signed [head, freq], inp_abs [head, freq] float64 (``[0, freq]`` without inp_pairing), token_match
        [head, 3] float64 (sum over queries of the attention on previous / duplicate / induction keys; ``[0, 3]`` without
        tokens), lse [head, pos] float32 (row log-sum-exp of the scaled, soft-capped, masked logits), entropy [head, 2] float64
        (sum over queries of -sum_j A log A in nats, and of that over log(#visible keys), rows with one key adding 0),
        key_mass [head, pos] float64 (sum over queries of A[i, j] for every key j))``; the last three are ``[0, pos]``,
        ``[0, 2]``, ``[0, pos]`` when not asked for.
    """
    check_qk(q, k)
    if (v is not None and v.shape != k.shape) or (q_pre is None) != (k_pre is None) or (q_pre is not None and (q_pre.shape != q.shape or k_pre.shape != k.shape)):
        raise ShapeError(f"v must match k {tuple(k.shape)} and q_pre/k_pre must match q/k (or both be None); got v {None if v is None else tuple(v.shape)}, "
                         f"q_pre {None if q_pre is None else tuple(q_pre.shape)}, k_pre {None if k_pre is None else tuple(k_pre.shape)}")
    q, k = rotate_half_planes(q, k, inp_pairing)
    t = lambda x: None if x is None else x.transpose(0, 1)  # noqa: E731  the kernel reads each head's rows contiguously
    return torch.ops.interp_kernels.stream_layer(t(q), t(k), t(v), float(scale), int(window or 0), float(softcap or 0.0),
                                                 int(block), int(skip), int(map_size), t(q_pre), t(k_pre), inp_pairing is not None,
                                                 None if tokens is None else tokens.to("cpu", torch.long), bool(lse), bool(entropy),
                                                 bool(key_mass))


def key_weight_rows(q, k, rows, scale: float, window: int | None, softcap: float | None, key: int = 0) -> torch.Tensor:
    """``A[h, rows[r], key]`` for a sample of query rows, each normalised over its whole visible row (causal, window,
    soft-cap as the model); the fused twin of ``interp.attention.key_weight_rows`` (same values to float32 rounding,
    about 3x faster on a CPU: one product per chunk of rows and kv head, one exp-sum per row). Call only when
    ``available()``.

    Args:
        q: ``[pos, head, d_head]`` float32 CPU queries (only the sampled rows are read); k: ``[pos, kv_head, d_head]``.
        rows: ``[row]`` int64 query positions, sorted (``interp.attention.stratified_rows`` gives them sorted).

    Returns:
        ``[head, row]`` float32, 0 where the key is masked for that row.

    Raises:
        ShapeError: q, k not ``[pos, head|kv_head, d_head]``; RuntimeError: rows unsorted or out of range.
    """
    check_qk(q, k)
    rows = rows.to("cpu", torch.long)
    return torch.ops.interp_kernels.key_weight_rows(q[rows], k, rows, float(scale), int(window or 0), float(softcap or 0.0), int(key))
