"""Capture of q/k before and after RoPE (``capture``, through the taps of ``interp.models.taps``), interventions with the model restored exactly (``intervene``; single heads: ``heads``)."""

__all__ = ["capture", "heads", "intervene"]  # its modules: the API is each module's public names
