"""Experiments built on the engine's public API: band and causal ablations (``ablation``), length sweeps (``sweep``), retrieval heads at decode time (``retrieval``, on the attention taps), causal head effects (``effects``, exact and fast; ``attribution``, linearised; ``effect_roles``, effects by atlas role)."""

__all__ = ["ablation", "atlas", "attribution", "effect_roles", "effects", "embedding_cone", "massive", "projection", "retrieval", "sweep"]  # its modules: the API is each module's public names
