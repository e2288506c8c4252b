"""Per-head measurements: one module per family, each a pure partial-sum function plus a finaliser.

Every statistic that sums over tokens is kept as additive state (``State``: named float64 tensors
with a leading ``layer`` axis), so prompts, shards and machines merge by addition, in any order.

Modules: ``slash`` (average slash score, SDH), ``spectrum`` (r1, R_tau, stable rank, FSV ratio),
``norms`` (norm relative variation, key norm by position), ``sinks`` (sink weight with and without
RoPE, sink flag), ``cone`` (mean pairwise cosines), ``maps`` (average attention map of the first
positions).
"""

from interp.stats.state import State

__all__ = ["State"]
