"""analyses/emergence in quick mode: the App. D runs (icl_two_stage.py) and the induction study (induction_text.py)
write tables whose numbers follow from their definitions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import load_script

HERE = Path(__file__).resolve().parents[1] / "analyses" / "emergence"


def test_quick_icl_two_stage(tmp_path):
    runs = load_script(HERE / "icl_two_stage.py").main(["--quick", "--out", str(tmp_path)])
    trace = pd.read_csv(tmp_path / "emergence_icl_trace.csv")
    summ = pd.read_csv(tmp_path / "emergence_icl_summary.csv")
    pulse = pd.read_csv(tmp_path / "emergence_icl_pulse.csv")
    # NoPE: layer 1 cannot tell positions apart; its lag-1 mass stays the uniform 1/i at every step
    nope = trace[(trace["freq"] == "nope")]
    n = int(nope["N"].iloc[0])
    assert np.allclose(nope["lag_mean"], np.mean(1.0 / np.arange(2, n + 1)), atol=1e-12)
    assert runs.loc[runs["freq"] == "nope", "t1_fixed"].isna().all()
    # the exact pulse satisfies D.1 (eps_FN = 0); the lag-1 mass of the pulse runs rises from its uniform start
    assert (pulse.loc[pulse["freq"] == "pulse", "eps_fn"] < 1e-9).all()
    p = runs[(runs["freq"] == "pulse") & (runs["delta"] == 1) & (runs["layer1"] == "reduced")]
    assert (p["lag_mean_end"] > 2 * p["uniform_lag_mass"]).all()
    # the full layer-1 variant measures a real rank (queries depend on the token)
    full = trace[trace["layer1"] == "full"]
    assert full["r1_q1"].dropna().between(0, 1).all()
    # the summary's mean is the mean over seeds of the runs table
    row = summ[(summ["freq"] == "pulse") & (summ["schedule"] == "joint") & (summ["delta"] == 1) & (summ["layer1"] == "reduced")
               & (summ["measure"] == "loss_end")].iloc[0]
    sel = runs[(runs["freq"] == "pulse") & (runs["schedule"] == "joint") & (runs["delta"] == 1) & (runs["layer1"] == "reduced")]
    assert row["mean"] == pytest.approx(sel["loss_end"].mean())


def test_quick_icl_band_removal(tmp_path):
    """Each removal is run beside its baseline; a zeroed plane adds the constant 1 to D.1's cosine sum, so C1 and eps_FN
    equal those of the kept planes alone."""
    from interp.lab.icl_regression import ICLData, frequencies, pulse_check

    runs = load_script(HERE / "icl_band_removal.py").main(["--quick", "--out", str(tmp_path)])
    assert set(runs["freq"]) == {"rope", "rope-wo_high_medium"} and len(runs) == 4
    pulse = pd.read_csv(tmp_path / "emergence_icl_bands_pulse.csv").set_index("freq")
    row = pulse.loc["rope-wo_high_medium"]
    data = ICLData(K=2, n_in=4, delta=1, d_c=int(row["d_c"]))
    theta = frequencies("rope-wo_high_medium", data)[: data.d_c // 2]
    kept = pulse_check(theta[theta > 0], int(row["N"]))
    assert row["C1"] == pytest.approx(kept["C1"], abs=1e-12) and row["eps_fn"] == pytest.approx(kept["eps_fn"], abs=1e-12)
    summ = pd.read_csv(tmp_path / "emergence_icl_bands_summary.csv")
    assert set(summ["freq"]) == set(runs["freq"])


def test_quick_induction_text(tmp_path):
    runs = load_script(HERE / "induction_text.py").main(["--quick", "--out", str(tmp_path)])
    traj = pd.read_csv(tmp_path / "emergence_text_trajectory.csv")
    eff = pd.read_csv(tmp_path / "emergence_text_effects.csv")
    steps = traj["step"].unique()
    assert len(traj) == len(steps) * 2 * 4 and steps[0] == 0 and steps[-1] == 30
    assert traj["scan_seconds"].gt(0).all() and traj["icl_score"].notna().all()
    r = runs.iloc[0]
    last = traj[(traj["step"] == 30) & (traj["layer"] == 1)]
    assert (r["top_layer"], r["top_head"]) == tuple(last.sort_values("induction_score").iloc[-1][["layer", "head"]].astype(int))
    assert r["induction_end"] == pytest.approx(last["induction_score"].max())
    assert len(eff) == 8 and (eff["dnll_lo"] <= eff["dnll"]).all() and (eff["dnll"] <= eff["dnll_hi"]).all()
    assert (tmp_path / "emergence_text_seed0.html").exists()
    # layer 0's heads ablated together (the layers before the top induction head's): the interval holds the mean
    assert r["earlier_joint_dnll_lo"] <= r["earlier_joint_dnll"] <= r["earlier_joint_dnll_hi"]


def test_seen_probes_repeat_ids_of_the_training_text():
    mod = load_script(HERE / "induction_text.py")
    from interp.lab import LabConfig, LabForCausalLM, lab_loaded, text_lm

    train = np.array([3, 40, 41, 50, 50, 3])
    lm = lab_loaded(LabForCausalLM(LabConfig(vocab_size=len(text_lm.BYTE_VOCAB), n_layers=1, n_heads=2, d_model=16, d_mlp=16,
                                             max_positions=32)), text_lm.BYTE_VOCAB)
    p = mod.repeated_probes(lm, train, "seen", 4, 20, 0)  # <bos> as the training windows, then r, r cut to fit
    assert p.shape == (4, 20) and (p[:, 0] == text_lm.BOS).all() and (p[:, 1:10] == p[:, 11:]).all()
    assert set(p[:, 1:].unique().tolist()) <= {3, 40, 41, 50}
    q = mod.repeated_probes(lm, train, "all", 4, 20, 0)
    assert q.shape == (4, 20) and (q[:, :10] == q[:, 10:]).all() and q.max() >= 60  # the whole vocabulary


def test_quick_icl_lr(tmp_path):
    runs = load_script(HERE / "icl_lr.py").main(["--quick", "--out", str(tmp_path)])
    assert sorted(runs["lr"].unique()) == [0.3, 3.0] and set(runs["schedule"]) == {"two-stage", "joint"}
    summ = pd.read_csv(tmp_path / "emergence_icl_lr_summary.csv")
    row = summ[(summ["lr"] == 3.0) & (summ["schedule"] == "joint") & (summ["measure"] == "loss_end")].iloc[0]
    assert row["mean"] == pytest.approx(runs[(runs["lr"] == 3.0) & (runs["schedule"] == "joint")]["loss_end"].mean())
    # a larger step moves layer 1 faster: the lag-one mass at the end is higher at eta 3 than at eta 0.3
    end = runs.groupby("lr")["lag_mean_end"].mean()
    assert end[3.0] > end[0.3]


def test_induction_text_refuses_cuda_without_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit) as e:
        load_script(HERE / "induction_text.py").main(["--quick", "--device", "cuda"])
    assert e.value.code == 2
    assert "no CUDA GPU; use --device cpu" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_induction_text_trains_and_scans_on_a_gpu(tmp_path):
    """The GPU path of the study (``--device cuda``): training, the callback's scans (Triton engine), the ICL score and
    the effects run there, and the tables are written as on the CPU."""
    runs = load_script(HERE / "induction_text.py").main(["--quick", "--device", "cuda", "--out", str(tmp_path)])
    assert runs["device"].iloc[0] == "cuda"
    traj = pd.read_csv(tmp_path / "emergence_text_trajectory.csv")
    assert traj["icl_score"].notna().all() and traj["induction_score"].between(0, 1).all()


def test_induction_text_trains_on_the_stdlib_source(tmp_path):
    """``--corpus stdlib``: the runs table names the corpus, and the seen probes draw from the stdlib's byte ids."""
    runs = load_script(HERE / "induction_text.py").main(["--quick", "--corpus", "stdlib", "--out", str(tmp_path)])
    assert runs["corpus"].iloc[0] == "stdlib"
    with pytest.raises(SystemExit) as e:
        load_script(HERE / "induction_text.py").main(["--quick", "--corpus", "wiki", "--out", str(tmp_path)])
    assert e.value.code == 2


def test_text_probes_repeat_a_stretch_of_held_out_text():
    """``--probes text``: <bos>, then a stretch of the held-out text and its copy; an unknown kind is refused."""
    mod = load_script(HERE / "induction_text.py")
    test = np.arange(100, 160)
    p = mod.repeated_probes(None, np.array([1]), "text", 3, 21, 0, test)
    assert p.shape == (3, 21) and (p[:, 0] == mod.BOS).all() and (p[:, 1:11] == p[:, 11:]).all()
    assert ((p[:, 2:11] - p[:, 1:10]) == 1).all() and p[:, 1:].min() >= 100  # consecutive bytes of ``test``
    with pytest.raises(ValueError, match="--probes text"):
        mod.repeated_probes(None, np.array([1]), "text", 3, 21, 0)


SMALL = ["--steps", "6", "--seeds", "2", "--length", "32", "--batch", "4", "--points", "3", "--d-model", "32", "--layers", "2",
         "--every", "0", "--icl-windows", "8", "--icl-band", "4"]


def test_seeds_in_parallel_processes_equal_the_sequential_run(tmp_path):
    """``--jobs 2`` (the script run as a program, one spawned process per seed) writes the tables a sequential run
    writes, timings aside; ``--replot`` redraws the figure and the pages from them; a bad ``--probes`` is one line."""
    import subprocess
    import sys

    script = ["-m", "analyses.emergence.induction_text"]  # run from the repository root, as the docs say
    for jobs in ("1", "2"):
        res = subprocess.run([sys.executable, *script, *SMALL, "--jobs", jobs, "--out", str(tmp_path / jobs)], capture_output=True,
                             text=True, cwd=HERE.parents[1])
        assert res.returncode == 0, res.stderr[-2000:]
    timing = ["train_seconds", "scan_seconds_per_checkpoint", "callback_seconds"]
    a, b = (pd.read_csv(tmp_path / j / "emergence_text_runs.csv").drop(columns=timing) for j in ("1", "2"))
    pd.testing.assert_frame_equal(a, b)
    ta, tb = (pd.read_csv(tmp_path / j / "emergence_text_trajectory.csv").drop(columns=["scan_seconds"]) for j in ("1", "2"))
    pd.testing.assert_frame_equal(ta, tb)
    assert not list((tmp_path / "2").glob("*.partial.csv"))
    for f in ("emergence_text.html", "emergence_text_seed1.html"):
        (tmp_path / "2" / f).unlink()
    load_script(HERE / "induction_text.py").main(["--replot", "--out", str(tmp_path / "2")])
    assert (tmp_path / "2" / "emergence_text.html").exists() and (tmp_path / "2" / "emergence_text_seed1.html").exists()
    res = subprocess.run([sys.executable, *script, "--quick", "--probes", "words", "--out", str(tmp_path / "x")], capture_output=True,
                         text=True, cwd=HERE.parents[1])
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].endswith("--probes words: use all or seen or text")
