"""Capture of q/k before and after RoPE (``capture``, through the taps of ``interp.models.taps``), interventions with the model restored exactly (``intervene``; single heads: ``heads``)."""
