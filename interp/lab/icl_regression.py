"""Paper 004's App. D setting: in-context linear regression on orthogonal features (D.1), the reduced two-layer
disentangled RoPE transformer (D.4, eq. 13-15, 22) and its two-stage gradient descent (D.5, Algorithm 1).

**Data model** (:class:`ICLData`, 004 App. D.1, with the general-Delta extension of D.6):

- ``K`` orthonormal features ``v_k = e_k`` in ``R^{d_X}``, ``d_X = K`` (any orthonormal set is equivalent up to a
  rotation of the semantic block); each input ``x_i`` is ``v_k`` with probability ``p_k = 1 / K``;
- a task ``w`` with ``E[w] = 0``, ``Var[w] = I`` and ``||w|| <= sqrt(d_X)``: Rademacher entries (+-1), which meet all
  three (``||w|| = sqrt(d_X)`` exactly); labels ``y_i = <w, x_i>``;
- a prompt ``(x_1, y_1, ..., x_Nin, y_Nin, x_q)`` of length ``N = 2 N_in + 1``. With ``delta > 1`` (D.6's extension,
  whose construction 004 leaves open) each demonstration is ``x_i``, ``delta - 1`` filler tokens, ``y_i``, so
  ``y_i`` sits ``delta`` positions after ``x_i`` and ``N = (delta + 1) N_in + 1``;
- token embeddings (D.2): ``E_x = [c, x, 0, 0]``, ``E_y = [c, 0, 1, y]``, a filler ``[c, 0, 0, 0]`` (ours),
  ``c = e_1`` in ``R^{d_c}``, ``d = d_c + d_X + 2``.

**Model** (:class:`D4Transformer`; positions ``1..N``, RoPE on the paper's interleaved pairs ``(2l - 1, 2l)``):

- layer 1 (eq. 13-14, 22): logits ``A_{i,j} = (c^T W~Q1) R_{j - i} c~`` for ``j <= i`` with the frequencies
  ``theta_1..theta_{d_c / 2}``, ``c~ = (1, 0, ..., 1, 0) = W~K1^T c`` fixed; ``S1 = softmax(A)`` (causal);
  ``W_V1 = I``, so ``H1 = [E, S1 E]``. The same for every prompt: layer 1 sees only the cone axis ``c``;
- layer 2 (eq. 13-15, 22): the question (position ``N``) attends over all ``N`` positions with logits
  ``u_i = R_N(E_q^{x,y} W~Q2) . R_i((S1 E)^{x,y}_i)`` on the low frequencies ``theta_{d_c/2+1..d/2}``;
  ``y^_q = sum_i S2_i E^y_i`` (``W_V2 = I``, ``W_O`` picks the label coordinate of ``S2 E``);
- trainable: ``W~Q1`` ``[d_c, d_c]`` (init 0) and ``W~Q2`` ``[d_X + 2, d_X + 2]`` (init ``I``), as Algorithm 1.
- No ``1 / sqrt(d)`` scale: eq. 22 has none (the scale is absorbed by the trainable ``W~Q``).
- ``layer1="full"`` (ours, a departure used only for the rank question): layer 1 gets full trainable
  ``W_Q1, W_K1`` ``[d, d]`` on the whole embedding with RoPE on all ``d / 2`` frequencies (``W_Q1 = 0`` and ``W_K1``
  the paper's fixed matrix at init), so its queries can depend on the token and their rank can be measured.

**Frequencies** (:func:`frequencies`; Assumption D.1): ``theta_1..theta_{d_c/2}`` act on the cone block,
``theta_{d_c/2+1..d/2}`` on the semantic block. Sets: ``pulse`` (``theta_s = 2 pi s / (2M + 1)``, ``s = 1..M``,
``M = d_c / 2 >= N / 2``: the cosine sum is exactly ``M`` at 0 and ``-1/2`` elsewhere for ``|x| <= 2M``, so D.1's
item 2 holds with ``epsilon_FN = 0``), ``rope`` (the standard ``10000 ** (-2(s-1)/d_c)``; :func:`pulse_check`
measures how far from a pulse its sum is), ``low`` (every plane at most ``N ** -2``: item 2 fails, the sum is flat)
and ``nope`` (all zero). The semantic planes are always low: ``N ** -2 * 10000 ** (-2(s-1)/(d_X + 2))`` (item 1,
``alpha = 2``). Band removals (for the claim after D.1 that without the medium and high frequencies no SDH forms):
``<set>-wo_<bands>`` with ``<set>`` ``pulse`` or ``rope`` and ``<bands>`` ``high``, ``medium`` or ``high_medium``
sets the cone planes of those bands to ``theta = 0`` (unrotated, as the band ablation of 004 Sec. 5 does in the
models), the bands being the cone planes sorted by frequency and split in three (``interp.rope.band_planes``' rule:
``numpy.array_split``, high first).

**Training** (:func:`train_icl`): plain gradient descent (``torch.optim.SGD``, no momentum) on the squared loss
(eq. 16) estimated on a fresh batch of prompts each step (004: the population loss; ours: its unbiased estimate);
``schedule="two-stage"`` is Algorithm 1 (``W~Q1`` for ``tau1`` steps with ``W~Q2 = I`` frozen, then ``W~Q2`` for
``tau2`` steps with ``W~Q1`` frozen); ``"joint"`` trains both for ``tau1 + tau2`` steps.

**Measures** (:func:`measure`, on a fixed evaluation batch): the layer-1 mass at lag ``delta``
(``min`` and ``mean`` over query positions ``i > delta`` of ``S1[i, i - delta]``: Theorem D.3 Stage I asks
``S1[i, i-1] >= 1 - eps1`` for every ``i``), the layer-2 feature mass ``S2_k`` (eq. 17: the question's attention
on the label positions whose input shares its feature; mean over prompts), the loss, and ``r1`` of the layer-1
pre-RoPE queries over all tokens (004 eq. 7; exactly 1 in the reduced model, where every query is ``c^T W~Q1``).

Imports ``interp.rope`` and ``interp.measures.spectrum``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import nn

from interp.measures.spectrum import gram, spectrum_metrics
from interp.rope import RopeSpec, band_planes, rotate

FREQUENCY_SETS = ("pulse", "rope", "low", "nope")
BAND_REMOVALS = ("wo_high", "wo_medium", "wo_high_medium")  # suffixes of ``pulse-`` / ``rope-`` (module docstring)
SCHEDULES = ("two-stage", "joint")


@dataclass(frozen=True)
class ICLData:
    """The data model of 004 App. D.1 (module docstring).

    Attributes:
        K: number of orthonormal features (``d_X = K``). n_in: demonstrations per prompt.
        delta: distance from ``x_i`` to its label ``y_i`` (1 in Theorem D.3; D.6's extension otherwise).
        d_c: width of the cone block (even).

    Raises:
        ValueError: ``K < 2``, ``n_in < 1``, ``delta < 1``, an odd ``d_c`` or an odd ``d_X + 2``.
    """

    K: int = 4
    n_in: int = 32
    delta: int = 1
    d_c: int = 34

    def __post_init__(self):
        if self.K < 2 or self.n_in < 1 or self.delta < 1 or self.d_c < 2 or self.d_c % 2 or self.K % 2:
            raise ValueError(f"ICLData needs K >= 2 even (d_X + 2 rotation planes), n_in >= 1, delta >= 1 and an even "
                             f"d_c >= 2; got K={self.K}, n_in={self.n_in}, delta={self.delta}, d_c={self.d_c}")

    @property
    def N(self) -> int:
        """Prompt length ``(delta + 1) n_in + 1`` (``2 n_in + 1`` at ``delta = 1``)."""
        return (self.delta + 1) * self.n_in + 1

    @property
    def d(self) -> int:
        """Embedding width ``d_c + d_X + 2``."""
        return self.d_c + self.K + 2

    def positions(self) -> tuple[np.ndarray, np.ndarray]:
        """``(x_pos, y_pos)``, each ``[n_in]`` 0-based positions of the inputs and of their labels (``y_pos = x_pos + delta``)."""
        x = np.arange(self.n_in) * (self.delta + 1)
        return x, x + self.delta

    def sample(self, batch: int, gen: torch.Generator, w: Float[torch.Tensor, "batch K"] | None = None) -> dict:
        """``batch`` prompts; ``w`` ``[batch, K]`` gives the tasks (e.g. outside the training distribution, for D.6's OOD
        statement) instead of Rademacher draws.

        Returns:
            ``E`` ``[batch, pos, d]`` float64 embeddings; ``w`` ``[batch, K]`` tasks (+-1); ``feat`` ``[batch, n_in]``
            feature index of each ``x_i``; ``q`` ``[batch]`` feature index of ``x_q``; ``y`` ``[batch, n_in]`` labels
            ``<w, x_i>``; ``target`` ``[batch]`` ``<w, x_q>``.

        Raises:
            ValueError: ``w`` of another shape than ``[batch, K]``.
        """
        K, dc = self.K, self.d_c
        if w is None:
            w = torch.randint(0, 2, (batch, K), generator=gen).double() * 2 - 1
        elif tuple(w.shape) != (batch, K):
            raise ValueError(f"w must have shape [batch, K] = [{batch}, {K}], got {list(w.shape)}")
        w = w.double()
        feat = torch.randint(0, K, (batch, self.n_in), generator=gen)
        q = torch.randint(0, K, (batch,), generator=gen)
        y = w.gather(1, feat)
        E = torch.zeros(batch, self.N, self.d, dtype=torch.float64)
        E[:, :, 0] = 1.0  # c = e_1 on every token (the cone axis)
        xp, yp = (torch.as_tensor(p) for p in self.positions())
        b_idx = torch.arange(batch)[:, None].expand(batch, self.n_in)
        E[b_idx, xp[None].expand(batch, -1), dc + feat] = 1.0
        E[:, yp, dc + K] = 1.0
        E[:, yp, dc + K + 1] = y
        E[torch.arange(batch), self.N - 1, dc + q] = 1.0
        return {"E": E, "w": w, "feat": feat, "q": q, "y": y, "target": w.gather(1, q[:, None])[:, 0]}


def frequencies(kind: str, data: ICLData, base: float = 1e4) -> Float[torch.Tensor, "freq"]:
    """``[d / 2]`` float64 angular frequencies (radians per position): ``d_c / 2`` cone planes of the set ``kind``,
    then ``(d_X + 2) / 2`` low semantic planes (module docstring). ``kind`` is one of ``FREQUENCY_SETS`` or
    ``pulse-`` / ``rope-`` followed by one of ``BAND_REMOVALS`` (those cone bands set to zero).

    Raises:
        ValueError: an unknown ``kind``, or ``pulse`` with ``d_c < N`` (the exact pulse covers ``|x| <= 2M = d_c``, D.1 asks ``|x| <= N``).
    """
    if "-" in kind:
        head, _, removal = kind.partition("-")
        if head not in ("pulse", "rope") or removal not in BAND_REMOVALS:
            raise ValueError(f"unknown frequency set {kind!r}; band removals are pulse-<r> or rope-<r> with r one of "
                             f"{', '.join(BAND_REMOVALS)}")
        theta = frequencies(head, data, base)
        return torch.cat([remove_bands(theta[: data.d_c // 2], removal[3:].split("_")), theta[data.d_c // 2:]])
    M, N = data.d_c // 2, data.N
    n_sem = (data.K + 2) // 2
    low = N ** -2.0 * base ** (-2.0 * torch.arange(n_sem, dtype=torch.float64) / (data.K + 2))
    if kind == "pulse":
        if 2 * M < N:
            raise ValueError(f"the exact pulse set needs d_c >= N = {N} (Assumption D.1 covers |x| <= N <= 2M); got d_c = {data.d_c}")
        cone = 2 * math.pi * torch.arange(1, M + 1, dtype=torch.float64) / (2 * M + 1)
    elif kind == "rope":
        cone = base ** (-2.0 * torch.arange(M, dtype=torch.float64) / data.d_c)
    elif kind == "low":
        cone = N ** -2.0 * base ** (-2.0 * torch.arange(M, dtype=torch.float64) / data.d_c)
    elif kind == "nope":
        cone = torch.zeros(M, dtype=torch.float64)
        low = torch.zeros(n_sem, dtype=torch.float64)
    else:
        raise ValueError(f"unknown frequency set {kind!r}; use one of {', '.join(FREQUENCY_SETS)}")
    return torch.cat([cone, low])


def remove_bands(theta: Float[torch.Tensor, "freq"], bands: list[str]) -> Float[torch.Tensor, "freq"]:
    """``theta`` with the planes of ``bands`` (of ``high``, ``medium``, ``low``) set to 0: the planes sorted by
    decreasing frequency and split in three as ``interp.rope.band_planes`` does (``numpy.array_split``, high first).

    Raises:
        ValueError: an unknown band name, or fewer than 3 planes (``interp.rope.band_planes``).
    """
    order = torch.argsort(theta, descending=True, stable=True)  # position in the order -> plane
    out = theta.clone()
    for band in bands:
        ranks = band_planes(len(theta), band, n_remove=len(theta))  # every plane of the band, by rank
        out[order[ranks]] = 0.0
    return out


def pulse_check(theta: Float[torch.Tensor, "freq"], N: int) -> dict[str, float]:
    """Assumption D.1, item 2, for the planes ``theta``: ``S(x) = sum_s cos(theta_s x)`` for ``x = 0..N``;
    ``C2`` = mean of ``S`` over ``1 <= x <= N``, ``C1 = S(0) - C2``, ``eps_FN = max_{1<=x<=N} |S(x) - C2|``.

    Returns:
        ``{"C1", "C2", "eps_fn", "L"}`` with ``L = N eps_FN / C1`` (D.1 asks ``eps_FN <= L C1 / N`` for a constant
        ``L``: a small ``L`` at this ``N`` is a pulse; ``L >= N`` means no spike above the noise).
    """
    x = torch.arange(0, N + 1, dtype=torch.float64)
    S = torch.cos(x[:, None] * theta.double()[None, :]).sum(-1)
    C2 = float(S[1:].mean())
    C1 = float(S[0]) - C2
    eps = float((S[1:] - C2).abs().max())
    return {"C1": C1, "C2": C2, "eps_fn": eps, "L": N * eps / C1 if C1 > 0 else math.inf}


class D4Transformer(nn.Module):
    """The reduced two-layer disentangled RoPE transformer of 004 App. D.4 (module docstring), float64.

    Args:
        data: the data model (sizes). theta: ``[d / 2]`` frequencies (:func:`frequencies`).
        layer1: ``"reduced"`` (the paper's, eq. 13-14) or ``"full"`` (ours: trainable ``W_Q1, W_K1`` ``[d, d]``).

    Raises:
        ValueError: ``theta`` of another length than ``d / 2``, or an unknown ``layer1``.
    """

    def __init__(self, data: ICLData, theta: torch.Tensor, layer1: str = "reduced", init_scale: float = 0.0):
        super().__init__()
        if theta.shape != (data.d // 2,):
            raise ValueError(f"theta must have d / 2 = {data.d // 2} entries, got {tuple(theta.shape)}")
        if layer1 not in ("reduced", "full"):
            raise ValueError(f"layer1 must be 'reduced' or 'full', got {layer1!r}")
        self.data, self.layer1 = data, layer1
        dc, dxy = data.d_c, data.K + 2
        self.register_buffer("theta", theta.double())
        c_tilde = torch.zeros(dc, dtype=torch.float64)
        c_tilde[0::2] = 1.0
        self.register_buffer("c_tilde", c_tilde)
        self.WQ2 = nn.Parameter(torch.eye(dxy, dtype=torch.float64))
        if layer1 == "reduced":
            self.WQ1 = nn.Parameter(torch.zeros(dc, dc, dtype=torch.float64))
        else:
            self.WQ1 = nn.Parameter(torch.zeros(data.d, data.d, dtype=torch.float64))
            WK1 = torch.zeros(data.d, data.d, dtype=torch.float64)
            WK1[0, :dc] = c_tilde  # the paper's fixed key at init: c^T W_K1 = c~ (c = e_1)
            self.WK1 = nn.Parameter(WK1)

    def spec(self, block: str) -> RopeSpec:
        """RoPE of the cone block (``"cone"``: ``theta_1..theta_{d_c/2}``), the semantic block (``"sem"``) or all
        planes (``"all"``), interleaved pairing (004 eq. 3)."""
        M = self.data.d_c // 2
        th = {"cone": self.theta[:M], "sem": self.theta[M:], "all": self.theta}[block]
        return RopeSpec(th, pairing="interleaved")

    def layer1_queries_keys(self, E: Float[torch.Tensor, "batch pos d"]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-RoPE layer-1 queries and keys, each ``[batch, pos, width]`` (width ``d_c``, or ``d`` for ``full``)."""
        if self.layer1 == "reduced":
            Ec = E[..., : self.data.d_c]
            return Ec @ self.WQ1, (Ec[..., :1] * self.c_tilde).expand(*E.shape[:2], -1)
        return E @ self.WQ1, E @ self.WK1

    def layer1_scores(self, E: Float[torch.Tensor, "batch pos d"]) -> Float[torch.Tensor, "batch q_pos k_pos"]:
        """``S1``: layer-1 attention (causal softmax of RoPE-rotated q.k; 004 eq. 4, 22)."""
        q, k = self.layer1_queries_keys(E)
        spec = self.spec("cone" if self.layer1 == "reduced" else "all")
        pos = torch.arange(1, E.shape[1] + 1)
        qr = rotate(q.transpose(0, 1), pos, spec).transpose(0, 1)
        kr = rotate(k.transpose(0, 1), pos, spec).transpose(0, 1)
        logits = qr @ kr.transpose(1, 2)
        n = E.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        return torch.softmax(logits.masked_fill(~mask, -math.inf), -1)

    def forward(self, E: Float[torch.Tensor, "batch pos d"]) -> dict:
        """``{"y_hat": [batch], "S1": [batch, pos, pos], "S2": [batch, pos]}`` (eq. 22)."""
        dc, n = self.data.d_c, E.shape[1]
        S1 = self.layer1_scores(E)
        keys = (S1 @ E)[..., dc:]                       # (S1 E)^{x,y}: [batch, pos, d_X + 2]
        query = E[:, -1, dc:] @ self.WQ2                # E_q^{x,y} W~Q2: [batch, d_X + 2]
        spec = self.spec("sem")
        pos = torch.arange(1, n + 1)
        kr = rotate(keys.transpose(0, 1), pos, spec).transpose(0, 1)
        qr = rotate(query[None], torch.tensor([n]), spec)[0]
        S2 = torch.softmax((kr @ qr[..., None])[..., 0], -1)
        return {"y_hat": (S2 * E[..., -1]).sum(-1), "S1": S1, "S2": S2}


def squared_loss(model: D4Transformer, batch: dict) -> torch.Tensor:
    """Eq. 16 on a batch: ``mean (y^_q - <w, x_q>)^2 / 2``."""
    return 0.5 * ((model(batch["E"])["y_hat"] - batch["target"]) ** 2).mean()


@torch.no_grad()
def measure(model: D4Transformer, batch: dict) -> dict[str, float]:
    """The module docstring's measures on one (evaluation) batch: ``loss``, ``lag_min`` / ``lag_mean`` (layer-1 mass at
    lag ``delta``, min / mean over queries ``i > delta``, averaged over prompts), ``lag1_mean`` (the same at lag 1),
    ``feature_mass`` (eq. 17, mean over prompts), ``r1_q1`` (004 eq. 7 on the layer-1 pre-RoPE queries of all tokens;
    NaN while they are all zero)."""
    data = model.data
    out = model(batch["E"])
    S1, S2 = out["S1"], out["S2"]
    n, dl = S1.shape[1], data.delta
    i = torch.arange(dl, n)
    lag = S1[:, i, i - dl]
    i1 = torch.arange(1, n)
    _, yp = data.positions()
    match = (batch["feat"] == batch["q"][:, None]).double()
    q, _ = model.layer1_queries_keys(batch["E"])
    G = gram(q.reshape(-1, 1, q.shape[-1]))[0]
    r1 = float(spectrum_metrics(G)["r1"]) if float(G.trace()) > 0 else math.nan
    return {"loss": float(0.5 * ((out["y_hat"] - batch["target"]) ** 2).mean()),
            "lag_min": float(lag.min(-1).values.mean()), "lag_mean": float(lag.mean()),
            "lag1_mean": float(S1[:, i1, i1 - 1].mean()),
            "feature_mass": float((S2[:, torch.as_tensor(yp)] * match).sum(-1).mean()), "r1_q1": r1}


def record_steps(total: int, every: int = 10, dense: int = 40) -> set[int]:
    """Steps at which :func:`train_icl` records: every step up to ``dense``, every ``every``-th after, and ``total``."""
    return set(range(0, min(dense, total) + 1)) | set(range(0, total + 1, max(1, every))) | {total}


def train_icl(data: ICLData, theta: torch.Tensor, *, schedule: str = "two-stage", tau1: int = 500, tau2: int = 500,
              lr1: float = 1.0, lr2: float = 1.0, batch: int = 256, seed: int = 0, eval_batch: int = 512,
              record_every: int = 10, layer1: str = "reduced") -> tuple[pd.DataFrame, D4Transformer]:
    """Train a :class:`D4Transformer` by gradient descent (module docstring) and record :func:`measure` on a fixed
    evaluation batch at the steps of :func:`record_steps` (every step up to 40, then every ``record_every``-th; in
    the two-stage schedule also the first 40 steps of Stage II).

    Returns:
        ``(trace, model)``: ``trace`` has one row per recorded step with ``step``, ``stage`` (1 or 2; ``joint``: 0),
        ``train_loss`` (the step's batch loss, NaN at 0), ``seconds`` and the :func:`measure` columns.

    Raises:
        ValueError: an unknown ``schedule``, or ``tau1``/``tau2`` negative.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if tau1 < 0 or tau2 < 0:
        raise ValueError(f"tau1 and tau2 must be >= 0, got {tau1}, {tau2}")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    ev = data.sample(eval_batch, torch.Generator().manual_seed(10_000 + seed))
    model = D4Transformer(data, theta, layer1)
    layer1_params = [model.WQ1] + ([model.WK1] if layer1 == "full" else [])
    if schedule == "joint":
        phases = [(0, tau1 + tau2, torch.optim.SGD([{"params": layer1_params, "lr": lr1}, {"params": [model.WQ2], "lr": lr2}]))]
    else:
        phases = [(1, tau1, torch.optim.SGD(layer1_params, lr=lr1)), (2, tau2, torch.optim.SGD([model.WQ2], lr=lr2))]
    rows, step, t0 = [{"step": 0, "stage": 1 if schedule == "two-stage" else 0, "train_loss": math.nan, "seconds": 0.0,
                       **measure(model, ev)}], 0, time.perf_counter()
    total = tau1 + tau2
    when = record_steps(total, record_every) | ({tau1 + s for s in record_steps(tau2, record_every)} if schedule == "two-stage" else set())
    for stage, n_steps, opt in phases:
        for _ in range(n_steps):
            loss = squared_loss(model, data.sample(batch, gen))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step in when:
                rows.append({"step": step, "stage": stage, "train_loss": loss.item(), "seconds": time.perf_counter() - t0,
                             **measure(model, ev)})
    return pd.DataFrame(rows), model


@torch.no_grad()
def relative_error(model: D4Transformer, batch: dict) -> float:
    """``mean (y^_q - <w, x_q>)^2 / mean <w, x_q>^2`` on a batch (0: exact; 1: no better than predicting 0)."""
    t = batch["target"]
    return float(((model(batch["E"])["y_hat"] - t) ** 2).mean() / (t ** 2).mean())
