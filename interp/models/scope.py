"""Where and how a model runs: device and dtype resolution, the hub-offline switch scoped to a load, quiet loading."""

from __future__ import annotations

import contextlib
import os

import torch

from interp.errors import DeviceError


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None``/``"auto"`` -> CUDA when available, else CPU; ``"cpu"``, ``"cuda"``, ``"cuda:1"`` as given.

    Raises:
        DeviceError: an unknown device string, or CUDA asked for on a machine without it.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise DeviceError(f"unknown device {device!r} ({err}); use cpu, cuda or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"device {device!r} asked for, but this machine has no CUDA (torch.cuda.is_available() is False); "
                          f"use --device cpu or auto")
    if dev.type not in ("cpu", "cuda"):
        raise DeviceError(f"device {device!r} is not supported; use cpu, cuda or auto")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """``None`` -> float32; ``"float32"``, ``"bfloat16"``, ``"float16"`` (or fp32/bf16/fp16, or a torch dtype).

    Raises:
        DeviceError: any other dtype.
    """
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise DeviceError(f"unsupported dtype {dtype!r}; use float32, bfloat16 or float16")


@contextlib.contextmanager
def hub_offline():
    """Hugging Face hub offline mode inside the block only (zoo loaders and the bridge); restored on exit.

    huggingface_hub reads ``HF_HUB_OFFLINE`` once at import into ``constants.HF_HUB_OFFLINE``, so the
    constant is switched along with the variable.
    """
    import huggingface_hub.constants as hub_constants

    saved_env, saved_const = os.environ.get("HF_HUB_OFFLINE"), hub_constants.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"] = "1"
    hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        hub_constants.HF_HUB_OFFLINE = saved_const
        if saved_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved_env


@contextlib.contextmanager
def quiet():
    """No transformers progress bars or info logs inside the block (loading, saving; both restored on exit)."""
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _first_line(err: BaseException) -> str:
    """The first non-empty line of an exception's message (library errors can be paragraphs)."""
    return next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
