"""Trajectories (interp.experiments.trajectory): the training callback's rows equal scans of the same weights by hand,
a trajectory of saved checkpoints equals the callback's, schedules, the ICL score, and bad checkpoint folders."""

from __future__ import annotations

import copy
import os
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from interp.engine import ScanConfig, scan
from interp.experiments import trajectory as T
from interp.lab import LabConfig, LabForCausalLM, TrainConfig, Vocab, lab_loaded, save_lab, train_model

VOCAB = Vocab([f"t{i}" for i in range(20)])
CFG = ScanConfig(token_match=True, shape=True)


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(layers: int = 2, d_model: int = 32) -> LabForCausalLM:
    torch.manual_seed(0)
    return LabForCausalLM(LabConfig(vocab_size=len(VOCAB), n_layers=layers, n_heads=2, d_model=d_model, d_mlp=64, max_positions=64))


def _batches(step, rng):
    x = torch.as_tensor(rng.integers(3, len(VOCAB), (4, 12)))
    x = torch.cat([x, x], 1)  # repeated halves: something for an induction head to learn
    return {"input_ids": x, "loss_mask": torch.ones_like(x, dtype=torch.bool)}


def _probes() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    r = torch.randint(3, len(VOCAB), (3, 10), generator=g)
    return torch.cat([torch.full((3, 1), 1), r, r], 1)


class Snapshots:
    """A callback keeping a deep copy of the model at given steps (and saving it to disk when ``root`` is set)."""

    def __init__(self, steps, root=None):
        self.steps, self.root, self.models = set(steps), root, {}

    def __call__(self, step, model, loss):
        if step in self.steps:
            self.models[step] = copy.deepcopy(model).eval()
            if self.root is not None:
                save_lab(model, VOCAB, self.root / f"step-{step}")


def _train(steps, callbacks):
    model = _model()
    losses = train_model(model, _batches, TrainConfig(steps=steps, lr=3e-3, warmup=2, seed=0), callbacks=callbacks)
    return model, losses


def test_schedules():
    assert T.every_schedule(10, 4) == [0, 4, 8, 10]
    s = T.log_schedule(1000, 10)
    assert s[0] == 0 and s[-1] == 1000 and s == sorted(set(s)) and s[1] == 1
    assert np.all(np.diff(np.log(s[1:])) > 0)
    with pytest.raises(Exception, match="k >= 1"):
        T.every_schedule(10, 0)


def test_callback_rows_equal_a_scan_of_the_same_weights_by_hand(tmp_path):
    steps = [0, 3, 6]
    snaps = Snapshots(steps)
    cb = T.ScanCallback(lambda m: lab_loaded(m, VOCAB), _probes(), CFG, steps=steps, engine="python",
                        extras=lambda m: {"icl": T.icl_score(m, _probes(), 2, 20)})
    _, losses = _train(6, [cb, snaps])
    traj = cb.frame
    assert sorted(traj["step"].unique()) == steps
    assert len(traj) == len(steps) * 2 * 2  # steps x layers x heads
    assert cb.losses["step"].tolist() == list(range(1, 7)) and np.allclose(cb.losses["loss"], losses)
    assert np.isnan(traj.loc[traj["step"] == 0, "train_loss"]).all()
    assert np.allclose(traj.loc[traj["step"] == 6, "train_loss"], losses[-1])
    for s in steps:
        by_hand = scan(lab_loaded(snaps.models[s], VOCAB), _probes(), CFG, engine="python").heads
        rows = traj[traj["step"] == s].reset_index(drop=True)
        pd.testing.assert_frame_equal(rows[by_hand.columns], by_hand, check_exact=False, rtol=1e-9, atol=1e-12)
        assert rows["icl"].iloc[0] == pytest.approx(T.icl_score(snaps.models[s], _probes(), 2, 20), abs=1e-12)
    # the weights moved: the trajectory is not one checkpoint three times
    a, b = (traj[traj["step"] == s]["prev_token_score"].to_numpy() for s in (0, 6))
    assert np.abs(a - b).max() > 1e-6


def test_saved_checkpoints_give_the_callback_trajectory(tmp_path):
    steps = [0, 2, 5]
    cb = T.ScanCallback(lambda m: lab_loaded(m, VOCAB), _probes(), CFG, steps=steps, engine="python")
    _train(5, [cb, Snapshots(steps, tmp_path)])
    cks = T.find_checkpoints(tmp_path)
    assert [c.label for c in cks] == ["step-0", "step-2", "step-5"] and [c.step for c in cks] == steps
    traj = T.checkpoint_trajectory(cks, _probes(), CFG, progress=False, engine="python", device="cpu")
    assert traj["revision"].tolist()[:4] == ["step-0"] * 4
    cols = [c for c in cb.frame.columns if c not in ("train_loss", "scan_seconds", "revision")]
    pd.testing.assert_frame_equal(traj[cols], cb.frame[cols], check_exact=False, rtol=1e-6, atol=1e-9)
    # --revisions picks and orders
    assert [c.label for c in T.find_checkpoints(tmp_path, ["step-5", "step-0"])] == ["step-5", "step-0"]


def test_bad_checkpoint_folders_fail_before_any_scan(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(T.TrajectoryError, match="holds no model"):
        T.find_checkpoints(tmp_path / "empty")
    save_lab(_model(), VOCAB, tmp_path / "mixed" / "step-1")
    save_lab(_model(layers=1), VOCAB, tmp_path / "mixed" / "step-2")
    with pytest.raises(T.TrajectoryError, match=r"mixed architectures: step-1 and step-2 differ \(.*n_layers=2 vs 1"):
        T.find_checkpoints(tmp_path / "mixed")
    with pytest.raises(T.TrajectoryError, match="step-9 not found"):
        T.find_checkpoints(tmp_path / "mixed", ["step-1", "step-9"])
    with pytest.raises(T.TrajectoryError, match="neither a folder nor a hub id"):
        T.find_checkpoints(tmp_path / "nothing-here")


def test_hub_revisions_resolve_from_the_local_cache_only(tmp_path, monkeypatch):
    """A fake Hugging Face cache (refs/<revision> -> snapshots/<commit>/): revisions in it resolve offline; one that is
    not fails with one line, without a network call."""
    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    for rev, commit, layers in (("step1", "a" * 40, 2), ("step2", "b" * 40, 2)):
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / rev).write_text(commit)
        save_lab(_model(layers=layers), VOCAB, repo / "snapshots" / commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as C

    monkeypatch.setattr(C, "HF_HUB_CACHE", str(cache))
    cks = T.find_checkpoints("org/tiny", ["step1", "step2"])
    assert [c.step for c in cks] == [1, 2] and cks[1].path.name == "b" * 40
    with pytest.raises(T.TrajectoryError, match="revision 'step3' of org/tiny is not in the local Hugging Face cache"):
        T.find_checkpoints("org/tiny", ["step1", "step3"])
    with pytest.raises(T.TrajectoryError, match="--revisions"):
        T.find_checkpoints("org/tiny")


class _ExactAt(torch.nn.Module):
    """Uniform logits over 10 tokens except at ``positions``, where the logits predict the next token of ``ids``
    exactly (its loss 0, log 10 elsewhere)."""

    def __init__(self, ids: torch.Tensor, positions: tuple[int, ...]):
        super().__init__()
        self.ids, self.positions = ids, positions

    def forward(self, input_ids):
        b, n = input_ids.shape
        logits = torch.zeros(b, n, 10)
        for p in self.positions:
            if n > p:
                logits[:, p, :] = -1e4
                logits[torch.arange(b), p, self.ids[:, p + 1]] = 0.0
        return type("Out", (), {"logits": logits})()


def test_icl_score_is_late_minus_early_loss():
    ids = torch.randint(0, 10, (4, 12))
    model = _ExactAt(ids, (5,))  # position 5 predicts token 6 exactly
    assert T.icl_score(model, ids, 2, 6) == pytest.approx(-np.log(10), abs=1e-9)
    assert T.icl_score(model, ids, 2, 7) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(Exception, match="early < late"):
        T.icl_score(model, ids, 6, 2)


def test_icl_score_bands_average_their_tokens():
    ids = torch.randint(0, 10, (3, 12))
    model = _ExactAt(ids, (8, 9))  # positions 8 and 9 predict tokens 9 and 10 exactly
    # late band 8..10: tokens 9 and 10 free, token 8 costs log 10; early band 2..4 costs log 10 each
    assert T.icl_score(model, ids, 2, 10, width=3) == pytest.approx(np.log(10) / 3 - np.log(10), abs=1e-9)
    assert T.icl_score(model, ids, 2, 10, width=1) == T.icl_score(model, ids, 2, 10)
    with pytest.raises(Exception, match="overlap"):
        T.icl_score(model, ids, 2, 6, width=3)
