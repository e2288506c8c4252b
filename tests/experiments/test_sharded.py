"""Effects and patching on Ray workers (interp.experiments.sharded): heads split by layer, merged equal to one local run,
also when a worker is killed in the middle of its chunk."""

import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from interp.engine.executor import ModelSpec, ray_workers
from interp.errors import ConfigError
from interp.experiments.effects import EffectsConfig, head_effects
from interp.experiments.patch_tasks import induction_pairs
from interp.experiments.patching import PatchConfig, patch_heads, unit_path
from interp.experiments.sharded import effects_on_workers, layer_chunks, patch_on_workers
from tests.conftest import random_tokens

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")
TOL = dict(atol=2e-5, rtol=1e-4)  # a worker runs one torch thread, this process two: float32 matmuls block differently


def test_layer_chunks_deal_whole_layers_round_robin():
    heads = [(l, h) for l in (0, 2, 3, 5, 7) for h in range(3)]
    parts = layer_chunks(heads, 2)
    assert sorted(x for p in parts for x in p) == sorted(heads)  # every head once
    assert [sorted({l for l, _ in p}) for p in parts] == [[0, 3, 7], [2, 5]]
    assert len(layer_chunks(heads, 9)) == 5  # never an empty chunk
    with pytest.raises(ConfigError, match="chunks must be >= 1"):
        layer_chunks(heads, 0)


@pytest.fixture(scope="module")
def actors():
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)  # slots, not cores
    yield ray_workers(ModelSpec("tiny-llama"), 2)
    ray.shutdown()


def test_effects_on_workers_equal_one_local_run(actors, tiny_llama):
    prompts = torch.stack([random_tokens(48, seed=s) for s in range(3)])
    cfg = EffectsConfig(interventions=("zero", "mean", "streaming"), window=8, bootstrap=200)
    got = effects_on_workers(ModelSpec("tiny-llama"), prompts, cfg, actors=actors, chunks=2)
    ref = head_effects(tiny_llama, prompts, cfg)
    assert got.table[["layer", "head", "intervention"]].equals(ref.table[["layer", "head", "intervention"]])
    np.testing.assert_allclose(got.per_prompt["dnll"], ref.per_prompt["dnll"], **TOL)
    np.testing.assert_allclose(got.table[["dnll", "dnll_lo", "dnll_hi", "kl"]], ref.table[["dnll", "dnll_lo", "dnll_hi", "kl"]], **TOL)
    assert got.meta["executor"] == "ray" and got.meta["chunks"] == 2 and got.meta["config"]["bootstrap"] == 200


def test_patch_on_workers_equals_one_local_run(actors, tiny_llama):
    pairs = induction_pairs(tiny_llama.tokenizer, 4, 0, half=5)
    for cfg in (PatchConfig(bootstrap=100), PatchConfig(heads=((0, 1), (1, 2), (1, 3)), positions="each", bootstrap=0)):
        got = patch_on_workers(ModelSpec("tiny-llama"), pairs, cfg, actors=actors)
        ref = patch_heads(tiny_llama, pairs, cfg)
        assert list(got.table.columns) == list(ref.table.columns) and len(got.table) == len(ref.table)
        np.testing.assert_allclose(got.per_pair, ref.per_pair, **TOL)
        num = [c for c in ref.table.columns if c not in ("direction",)]
        np.testing.assert_allclose(got.table[num].to_numpy(float), ref.table[num].to_numpy(float), **TOL)


def test_effects_and_patch_commands_on_ray_equal_local(actors, tmp_path):
    """``interp effects`` / ``interp patch`` with --executor ray write the tables a local run writes."""
    import pandas as pd
    from typer.testing import CliRunner

    from interp.cli import app

    runs = {"effects": (["effects", "tiny-llama", "--prompts", "3", "--tokens", "32", "--corpus", "random", "--window", "8",
                         "--bootstrap", "100"], "effects.csv"),
            "patch": (["patch", "tiny-llama", "--task", "induction", "--n-pairs", "4", "--bootstrap", "100"], "patch.csv")}
    for name, (args, table) in runs.items():
        for ex in ("local", "ray"):
            res = CliRunner().invoke(app, args + ["--executor", ex, "--workers", "2", "--out", str(tmp_path / f"{name}-{ex}")])
            assert res.exit_code == 0, res.output
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / f"{name}-local" / table), pd.read_csv(tmp_path / f"{name}-ray" / table),
                                      atol=2e-5, rtol=1e-4)


def test_a_worker_killed_mid_chunk_is_restarted_and_the_effects_are_complete(tiny_llama, tmp_path, monkeypatch):
    """SIGKILL one worker while it runs its chunk: the actor restarts, the chunk is retried, the table equals a local run.

    The chunk holds at a gate until the kill (no sleep-and-hope: on an idle machine a chunk can end within any sleep)."""
    import interp.experiments.sharded as sharded

    def gated_chunk(model, prompts, config, means):  # pickled by value: the workers run this, not the module's
        (tmp_path / f"started-{os.getpid()}").touch()
        while not (tmp_path / "killed").exists():
            time.sleep(0.05)
        return head_effects(model, prompts, config, means=means)

    monkeypatch.setattr(sharded, "_effects_chunk", gated_chunk)
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        workers = ray_workers(ModelSpec("tiny-llama"), 2, retries=2)
        pids = ray.get([a.pid.remote() for a in workers])
        prompts = torch.stack([random_tokens(64, seed=s) for s in range(4)])
        cfg = EffectsConfig(interventions=("zero", "mean", "streaming"), window=16, bootstrap=0)
        out = {}
        job = threading.Thread(target=lambda: out.setdefault("r", effects_on_workers(ModelSpec("tiny-llama"), prompts, cfg,
                                                                                     actors=workers, chunks=2)))
        job.start()
        deadline = time.monotonic() + 300
        while not (tmp_path / f"started-{pids[0]}").exists():  # chunk 0 runs on workers[0]
            assert time.monotonic() < deadline and job.is_alive(), "the first chunk never started"
            time.sleep(0.05)
        os.kill(pids[0], signal.SIGKILL)
        (tmp_path / "killed").touch()
        job.join(timeout=300)
        got = out["r"]
        assert pids[0] not in got.meta["worker_pids"]  # the killed worker was replaced
        np.testing.assert_allclose(got.per_prompt["dnll"], head_effects(tiny_llama, prompts, cfg).per_prompt["dnll"], **TOL)
    finally:
        ray.shutdown()


def _sigterm_at_the_second_unit_then_resume(args: list[str], name: str, tmp_path, monkeypatch):
    """Run the Ray command ``args`` (ending ``--executor ray --workers 2``, two units: tiny-llama's 2 layers) whole, then
    again with the real SIGTERM as its second unit is about to be written: exit 143, the first layer's rows in
    ``NAME.csv`` marked partial, one unit kept; --resume on Ray reads that unit back (same inode) and equals the whole
    run exactly; --resume of a copy locally equals it to the workers' float32 rounding. Returns ``(whole run's folder,
    the kept unit)``."""
    import json
    import shutil

    import pandas as pd
    from typer.testing import CliRunner

    import interp.io
    from interp.cli import app

    full, part, local = tmp_path / "full", tmp_path / "part", tmp_path / "local"
    res = CliRunner().invoke(app, args + ["--out", str(full)])
    assert res.exit_code == 0, res.output
    orig, calls = interp.io.write_arrays_atomic, {"n": 0}

    def write(*a, **kw):  # the real signal as the second layer's unit is about to be written
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return orig(*a, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(interp.io, "write_arrays_atomic", write)
        res = CliRunner().invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 143, res.output
    assert "partial: 1 of 2 layers" in res.output and "Traceback" not in res.output
    assert json.loads((part / f"{name}.json").read_text())["partial"] == "1 of 2 layers"
    (kept,) = (part / "units").iterdir()
    layer, inode = int(kept.stem.split("-")[1]), kept.stat().st_ino
    assert set(pd.read_csv(part / f"{name}.csv")["layer"]) == {layer}
    shutil.copytree(part, local)
    res = CliRunner().invoke(app, args + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    assert kept.stat().st_ino == inode  # read back, not sent out again
    whole = pd.read_csv(full / f"{name}.csv")
    pd.testing.assert_frame_equal(whole, pd.read_csv(part / f"{name}.csv"), check_exact=True)
    res = CliRunner().invoke(app, args[:-4] + ["--out", str(local), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(whole, pd.read_csv(local / f"{name}.csv"), atol=2e-5, rtol=1e-4)
    return full, kept


def test_effects_on_ray_keep_layer_units_stop_on_sigterm_and_resume(actors, tmp_path, monkeypatch):
    """issue 46: ``interp effects --executor ray`` writes each layer's unit as its chunk comes back; a SIGTERM to the
    driver writes the finished layer's rows marked partial (exit 143); --resume on Ray sends out only the other layer
    and equals the uninterrupted Ray run exactly; --resume locally equals it to the workers' float32 rounding."""
    _sigterm_at_the_second_unit_then_resume(["effects", "tiny-llama", "--prompts", "3", "--tokens", "24", "--bootstrap",
                                             "50", "--executor", "ray", "--workers", "2"], "effects", tmp_path, monkeypatch)


def test_patch_on_ray_keeps_layer_units_stops_after_the_first_and_resumes(actors, tmp_path, monkeypatch):
    """issue 46: ``interp patch --executor ray`` writes each layer's unit (layer-LLL-len-NNNNN.npz, the local run's
    files) as its chunk comes back; a SIGTERM to the driver as the second unit is about to be written leaves the first
    one and writes its rows marked partial (exit 143); --resume on Ray sends out only the other layer and equals the
    uninterrupted Ray run exactly; --resume locally equals it to the workers' float32 rounding."""
    full, kept = _sigterm_at_the_second_unit_then_resume(
        ["patch", "tiny-llama", "--task", "induction", "--n-pairs", "4", "--bootstrap", "50", "--executor", "ray",
         "--workers", "2"], "patch", tmp_path, monkeypatch)
    names = sorted(p.name for p in (full / "units").iterdir())  # a local run's names (unit_path): one length here
    n_tokens = int(names[0].split("-")[3].split(".")[0])
    assert names == [unit_path("", l, n_tokens).name for l in (0, 1)] and kept.name in names


def test_patch_on_ray_sigterm_after_ray_init_exits_143(tmp_path, monkeypatch):
    """``interp patch --executor ray`` starting Ray itself (ray.init sets a SIGTERM handler that exits the process with
    no message): a SIGTERM while the chunks run still reaches the command's handler, so it exits 143 with the partial
    line (no chunk finished: no unit, no table written) and no traceback."""
    from typer.testing import CliRunner

    import interp.experiments.sharded as sharded
    from interp.cli import app

    ray.shutdown()  # the command starts its own cluster, as from a shell
    orig = sharded.as_completed

    def waiting(*a, **kw):  # the driver, about to wait for the chunks
        os.kill(os.getpid(), signal.SIGTERM)
        return orig(*a, **kw)

    monkeypatch.setattr(sharded, "as_completed", waiting)
    res = CliRunner().invoke(app, ["patch", "tiny-llama", "--task", "induction", "--n-pairs", "4", "--bootstrap", "0",
                                   "--executor", "ray", "--workers", "1", "--out", str(tmp_path / "p")])
    assert res.exit_code == 143, res.output
    assert "partial: 0 of 2 layers" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "p" / "patch.csv").exists() and not list((tmp_path / "p").glob("units/*"))
