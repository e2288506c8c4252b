"""Experiments built on the engine's public API: band and causal ablations (``ablation``), length sweeps (``sweep``), retrieval heads at decode time (``retrieval``, on the attention taps)."""
