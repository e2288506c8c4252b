"""Loaders: ``load_model`` for zoo names, hub ids, ``local:PATH`` folders and tiny models; device, dtype and hub-offline scoping; plugins."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from pathlib import Path

import torch

from interp.models import arch
from interp.errors import (CorruptModelFileError, ModelLoadError, UnsupportedModelError)
from interp.models.tiny import tiny_model
from interp.models.card import make_card
from interp.models.loaded import LoadedModel
from interp.models.scope import _first_line, hub_offline, quiet, resolve_device, resolve_dtype
from interp.models.zoo import DEFAULT_MODEL, ZOO, GGUFSource, _entry, cache_dir, gguf_path

# --------------------------------------------------------------------------------------------
# Devices, dtypes, hub scope
# --------------------------------------------------------------------------------------------

def load_model(name: str = DEFAULT_MODEL, *, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None, device_map: str | dict | None = None) -> LoadedModel:
    """Load a model by name.

    Args:
        name: a zoo name (``interp models`` lists them), ``ORG/NAME`` (Hugging Face hub id, through your
            cache and hub settings), ``local:PATH`` (an HF folder), or ``tiny-<family>``.
        device: ``"cpu"``, ``"cuda"``, ``"auto"`` or None (CUDA when available, else CPU).
        dtype: ``"float32"`` (default), ``"bfloat16"`` or ``"float16"``: the model's weights and
            activations. Scan accumulators are float64 whatever the dtype.
        device_map: ``"auto"`` (or an accelerate device map) to place the layers over the available GPUs and the CPU
            (accelerate's ``infer_auto_device_map`` + ``dispatch_model``) for models larger than one GPU; ``device``
            is then ignored. The scan's tap follows each layer's device.

    Returns:
        LoadedModel with ``.hf`` (HF model), ``.tokenizer``, ``.card`` and a lazily booted ``.bridge``.

    Raises:
        UnknownModelError: the name is none of the above; the message lists valid names.
        ModelNotInstalledError: a zoo model's weights package is missing; the message has the install command.
        CorruptModelFileError: a zoo GGUF file fails its size or sha256 check; the message names it.
        ModelLoadError: a folder or hub id without a readable config.json, tokenizer or weights.
        UnsupportedModelError: not a RoPE decoder interp covers (``interp.models.arch``).
        DeviceError: an unknown or unavailable device, an unsupported dtype, or accelerate missing for ``device_map``.
    """
    dev, dt = resolve_device(device), resolve_dtype(dtype)
    with quiet():
        if name.startswith("local:"):
            model = _load_folder(name[len("local:"):], dt, local=True)
        elif name.startswith("tiny-"):
            _entry(name)
            hf, tok = tiny_model(name, dt)
            card = make_card(name, hf, source="random weights (seed 0), built in memory", quantization=str(dt).removeprefix("torch."))
            model = LoadedModel(hf, tok, card, name)
        elif name in ZOO:
            model = _load_gguf(name, dt)
        elif "/" in name and not name.startswith(("/", ".", "~")):
            model = _load_folder(name, dt, local=False)
        else:
            _entry(name)  # raises UnknownModelError with the valid names
    if device_map is not None:
        return dispatch(model, device_map)
    return model.to(dev)


def dispatch(model: LoadedModel, device_map: str | dict = "auto") -> LoadedModel:
    """Place a loaded model's layers over the GPUs and the CPU with accelerate (``"auto"``: as much as fits on the
    GPUs in order, the rest on the CPU; a dict: accelerate's ``{module name: device}``). Returns ``model``.

    Raises:
        DeviceError: accelerate is not installed, or ``device_map`` is a string other than ``"auto"``.
    """
    from interp.errors import DeviceError

    try:
        from accelerate import dispatch_model, infer_auto_device_map
    except ImportError:
        raise DeviceError("--device-map needs accelerate: pip install accelerate") from None
    if isinstance(device_map, str):
        if device_map != "auto":
            raise DeviceError(f"unknown device map {device_map!r}; use 'auto' (or pass accelerate's dict from Python)")
        device_map = infer_auto_device_map(model.hf, no_split_module_classes=model.hf._no_split_modules or [])
    if set(device_map.values()) <= {"cpu"}:  # nothing on a GPU: a plain CPU model (dispatch_model would add hooks for nothing)
        return model.to("cpu")
    model.hf = dispatch_model(model.hf, device_map=device_map)
    return model


def _load_gguf(name: str, dtype: torch.dtype) -> LoadedModel:
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _entry(name).source
    path = gguf_path(name)
    converted = cache_dir() / "hf" / f"{name}-{src.sha256[:16]}"
    with hub_offline():
        if not (converted / "config.json").exists():
            _convert_gguf(path, src, converted)
        try:
            tok = AutoTokenizer.from_pretrained(converted, local_files_only=True)
            hf = AutoModelForCausalLM.from_pretrained(converted, dtype=dtype, attn_implementation="sdpa", local_files_only=True)
        except (OSError, ValueError, SafetensorError) as err:  # a damaged cache entry (truncated file, missing files)
            raise CorruptModelFileError(
                f"the converted copy of {name} in {converted} cannot be read ({type(err).__name__}: {_first_line(err)}); "
                f"delete that folder and load again to rebuild it from the GGUF file"
            ) from err
    quant = src.quantization + ("" if dtype == torch.float32 else f", run in {str(dtype).removeprefix('torch.')}")
    # the file, not its path: a report or manifest must not carry the user's cache folder (the sha256 pins the bytes)
    card = make_card(name, hf, source=f"zoo file {src.file_name} (GGUF of {src.hub_id}, dequantized to float32)",
                     quantization=quant, sha=src.sha256)
    return LoadedModel(hf, tok, card, src.hub_id)


@contextlib.contextmanager
def _exclusive(lock: Path):
    """Hold an exclusive lock on the file ``lock`` (``flock``; a no-op where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _convert_gguf(path: Path, src: GGUFSource, converted: Path) -> None:
    """Dequantize a GGUF file once and save it as a plain HF folder (atomically: temp folder + rename). Processes that
    convert the same model at once (parallel test workers) take turns at a lock file beside the folder: the first
    converts, the others find its folder; none removes a folder another is reading."""
    converted.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(converted.parent / f"{converted.name}.lock"):
        if not (converted / "config.json").exists():
            _convert_gguf_unlocked(path, src, converted)


def _convert_gguf_unlocked(path: Path, src: GGUFSource, converted: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = Path(tempfile.mkdtemp(dir=converted.parent, prefix=converted.name + "."))
    try:
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        hf.config.architectures = [src.architecture]
        # The tensors are already float32: drop the GGUF quantizer so the model saves as plain safetensors.
        hf.hf_quantizer = None
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config
        hf.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        shutil.rmtree(converted, ignore_errors=True)  # a folder without config.json: an older, unfinished one
        os.replace(tmp, converted)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


PLUGIN_GROUP = "interp.models"


@functools.cache
def load_plugins() -> tuple[str, ...]:
    """Run every ``interp.models`` entry point once (each registers its model types with transformers' Auto
    classes and ``interp.models.arch``; ``interp.lab`` is one). Returns their names; a failing plugin is skipped."""
    from importlib.metadata import entry_points

    done = []
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            ep.load()()
            done.append(ep.name)
        except Exception:  # noqa: BLE001  a broken plugin must not break loading the zoo
            continue
    return tuple(done)


def _load_folder(ref: str, dtype: torch.dtype, *, local: bool) -> LoadedModel:
    """A Hugging Face model from a folder (``local``) or a hub id (the user's cache and hub settings)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    load_plugins()  # model types that plugins (interp.lab) add
    where = Path(ref).expanduser() if local else ref
    what = f"local model folder {where}" if local else f"hub model {ref!r}"
    fix = ("pass local:PATH to a Hugging Face causal-LM folder (config.json, tokenizer and weights files)" if local else
           "check the id, run `hf auth login` for a gated model, or set HF_HUB_OFFLINE=1 to use only your cache")
    if local and not (Path(where) / "config.json").exists():
        raise ModelLoadError(f"{what} has no config.json; {fix}")
    kw = {"local_files_only": True} if local else {}
    try:
        config = AutoConfig.from_pretrained(where, **kw)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"{what}: config.json cannot be read ({_first_line(err)}); {fix}") from None
    mtype = getattr(config, "model_type", "?")
    if mtype not in {t for f in arch.FAMILIES for t in f.model_types} and not getattr(config, "rope_parameters", None):
        raise UnsupportedModelError(f"{what} is a {mtype!r} model without RoPE parameters; interp measures RoPE decoders "
                                    f"({arch.covered()})")
    try:
        tok = AutoTokenizer.from_pretrained(where, **kw)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"{what}: its tokenizer cannot be loaded ({_first_line(err)}); {fix}") from None
    from safetensors import SafetensorError

    try:
        hf = AutoModelForCausalLM.from_pretrained(where, config=config, dtype=dtype, **kw)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as err:
        raise ModelLoadError(f"{what}: weights cannot be loaded ({type(err).__name__}: {_first_line(err)}); "
                             f"re-download or repair the weights files") from None
    if getattr(hf.config, "attn_logit_softcapping", None):
        hf.set_attn_implementation("eager")  # sdpa ignores soft-capping (Gemma-2); eager applies it
    src = str(where) if local else f"hub:{ref}"
    card = make_card(f"local:{where}" if local else ref, hf, source=src, quantization=str(hf.config.dtype))
    return LoadedModel(hf, tok, card, hub_id=str(where))
