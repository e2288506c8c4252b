"""Taps on every attention call (``taps``), capture of q/k before and after RoPE (``capture``), interventions with the model restored exactly (``intervene``; single heads: ``heads``)."""
