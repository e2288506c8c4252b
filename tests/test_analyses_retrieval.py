"""analyses/atlas/retrieval_heads.py (Wu et al. 2024 retrieval heads): the quick mode writes its tables; the summary row."""

from pathlib import Path

import pandas as pd

from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "analyses" / "atlas/retrieval_heads.py"


def test_summary_ranks_by_the_gated_score_when_any_trial_is_retrieved():
    mod = load_script(SCRIPT)
    heads = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "retrieval_score": [0.2, 0.6, 0.05],
                          "retrieval_score_all": [0.5, 0.3, 0.01]})
    trials = pd.DataFrame({"retrieved": [True, False], "rouge1_recall": [1.0, 0.25]})
    s = mod.summarise("m", heads, trials, 1.0)
    assert s["top_heads"].split()[0] == "L0H1" and s["ranked_by"] == "retrieval_score" and s["rouge1_recall"] == 0.625
    assert "top_induction_heads" not in s and s["heads_ge_0.1"] == 2 and s["heads_ge_0.5"] == 1 and s["retrieved"] == 1
    s = mod.summarise("m", heads, trials.assign(retrieved=False), 1.0)
    assert s["top_heads"].split()[0] == "L0H0" and s["ranked_by"] == "retrieval_score_all"


def test_spearman_is_nan_without_a_warning_when_a_score_is_constant():
    """Issue 49: a model whose heads all score 0 (the quick mode's tiny model) has no rank correlation; SciPy's
    ConstantInputWarning is not raised."""
    import warnings

    mod = load_script(SCRIPT)
    heads = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "retrieval_score": [0.0, 0.0, 0.0],
                          "retrieval_score_all": [0.0, 0.0, 0.0], "rr_induction_score": [0.1, 0.5, 0.2]})
    trials = pd.DataFrame({"retrieved": [False], "rouge1_recall": [0.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = mod.summarise("m", heads, trials, 1.0)
    assert pd.isna(s["spearman_induction"])
    s = mod.summarise("m", heads.assign(retrieval_score_all=[0.3, 0.1, 0.2]), trials, 1.0)
    assert s["spearman_induction"] == -1.0


def test_quick_mode_writes_its_tables(tmp_path):
    out = load_script(SCRIPT).main(["--quick", "--out", str(tmp_path)])
    assert list(out["model"]) == ["tiny-llama"] and out.loc[0, "trials"] == 2
    heads = pd.read_csv(tmp_path / "retrieval_heads_tiny-llama.csv")
    assert len(heads) == 8 and list(heads.columns[:5]) == ["model", "layer", "head", "kv_head", "retrieval_score"]
    copy = pd.read_csv(tmp_path / "retrieval_heads_copy.csv")
    assert list(copy.columns) == ["model", "length", "depth", "rouge1_recall", "retrieved", "trials"] and len(copy) == 2
    assert (tmp_path / "retrieval_heads_tiny-llama_trials.csv").exists() and (tmp_path / "retrieval_heads.html").exists()
    assert "rr_induction_score" in heads and out.loc[0, "top_induction_heads"].count("L") == 5
