"""analyses/p004_slash/band_dose.py, band_ablation.py --dose matched, sdh_count_spread.py (issue 33): the dose of 004's band
ablation per model, the matched variants, and the prompt-set parser."""

from pathlib import Path

import pandas as pd
import pytest

from interp.rope import band_planes
from tests.conftest import load_script

ANALYSES = Path(__file__).resolve().parents[1] / "analyses"


@pytest.fixture(scope="module")
def dose():
    return load_script(ANALYSES / "p004_slash/band_dose.py")


def test_six_planes_are_twice_the_papers_share_of_a_band_in_32_plane_models(dose):
    t = dose.dose_table({"paper": 64, "small": 32, "wide": 128}).set_index(["model", "band"])
    assert t.loc[("small", "high"), "band_planes"] == 11 and t.loc[("small", "low"), "band_planes"] == 10
    assert t.loc[("small", "high"), "share_of_band"] == pytest.approx(6 / 11)
    assert t.loc[("wide", "high"), "share_of_band"] == pytest.approx(6 / 43)
    assert t.loc[("paper", "medium"), "share_of_band"] == pytest.approx(6 / 21)
    # the matched dose is the paper's share of each band, at least one plane
    assert t.loc[("small", "high"), "matched_removed"] == 3 and t.loc[("wide", "high"), "matched_removed"] == 12
    assert (t["matched_removed"] >= 1).all() and (t.loc["paper", "matched_removed"] == 6).all()


def test_the_committed_dose_table_is_what_the_script_computes(dose):
    committed = pd.read_csv(ANALYSES.parent / "figures" / "band_dose.csv")
    planes = dict(zip(committed["model"], committed["n_planes"]))
    fresh = dose.dose_table(planes)
    pd.testing.assert_frame_equal(fresh.reset_index(drop=True), committed.reset_index(drop=True), check_dtype=False)


def test_matched_variants_remove_the_matched_planes_of_each_band():
    ablation = load_script(ANALYSES / "p004_slash/band_ablation.py")
    table = pd.DataFrame({"model": ["m"] * 3, "n_planes": [32] * 3, "band": ["high", "medium", "low"],
                          "matched_removed": [3, 3, 2]})
    v = ablation.matched_variants("m", 32, table)
    assert [x.name for x in v] == ["wo_high", "wo_medium", "wo_low"]
    assert [len(x.planes) for x in v] == [3, 3, 2]
    assert list(v[0].planes) == band_planes(32, "high", 3).tolist()
    with pytest.raises(SystemExit, match="no matched dose"):
        ablation.matched_variants("m", 64, table)


def test_prompt_sets_parse_and_a_bad_one_is_one_line():
    spread = load_script(ANALYSES / "p004_slash/sdh_count_spread.py")
    assert spread.parse_set("stdlib:1024") == ("stdlib", 1024)
    with pytest.raises(SystemExit, match="CORPUS:TOKENS"):
        spread.parse_set("stdlib")


@pytest.mark.skipif(not __import__("interp").models.is_installed("smollm2-135m"), reason="smollm2-135m not installed")
def test_matched_causal_pass_uses_the_matched_planes(tmp_path, monkeypatch):
    """``--dose matched --causal-only`` runs the causal pass with the matched variants of band_dose.csv and writes its
    own tables (the six-plane causal tables untouched), with n_remove per band."""
    import numpy as np

    ablation = load_script(ANALYSES / "p004_slash/band_ablation.py")
    seen = []

    def fake_causal_nll(model, prompts, variants):  # the NLLs are the model's; here only the wiring is checked
        seen.extend(variants)
        return pd.DataFrame({"prompt": range(len(prompts)), "original": 2.0, **{v.name: 2.0 + 0.1 * k for k, v in enumerate(variants)}})

    monkeypatch.setattr(ablation, "causal_nll", fake_causal_nll)
    out = ablation.main(["--dose", "matched", "--causal-only", "--models", "smollm2-135m", "--prompts", "2", "--tokens", "32",
                         "--out", str(tmp_path)])["causal"]
    dose = pd.read_csv(ANALYSES.parent / "figures" / "band_dose.csv").set_index(["model", "band"])
    assert [len(v.planes) for v in seen] == [int(dose.loc[("smollm2-135m", b), "matched_removed"]) for b in ("high", "medium", "low")]
    assert list(out["n_remove"]) == [len(v.planes) for v in seen]
    assert np.allclose(out["delta_nll"], [0.0, 0.1, 0.2]) and (out["delta_lo"] <= out["delta_hi"]).all()
    assert (tmp_path / "band_ablation_matched_causal.csv").exists() and not (tmp_path / "band_ablation_causal.csv").exists()
