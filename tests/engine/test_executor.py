"""Executors: the Ray path equals one single-process pass, survives a killed worker, and never counts a shard twice."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from interp.errors import ConfigError
from interp.engine.executor import ModelSpec, ray_workers, run_sharded, shard_ids
from interp.models import is_installed
from interp.engine import ScanConfig, scan
from tests.conftest import random_tokens

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)  # slots, not cores: no actor waits for a slot
    yield
    ray.shutdown()


def _close(a, b, atol=1e-6):
    """Equal states, to float32 rounding: a Ray worker runs one torch thread, the driver several, and float32 matmuls
    block differently by thread count (Gram entries then differ by about 4e-7 of the matrix's largest entry on this
    machine), so the tolerance scales with each state's magnitude."""
    assert set(a.state) == set(b.state)
    for name in a.state:
        x, y = a.state[name], b.state[name]
        scale = float(y.abs().max()) if torch.is_tensor(y) and y.is_floating_point() and y.numel() else 0.0
        torch.testing.assert_close(x, y, atol=max(atol, 2e-6 * scale), rtol=1e-6)


def test_shards_cover_every_prompt_once():
    parts = shard_ids(7, 3)
    assert parts == [[0, 3, 6], [1, 4], [2, 5]] and shard_ids(2, 4) == [[0], [1]]


def test_local_executor_is_the_single_process_scan(tiny_llama):
    prompts = [random_tokens(40, seed=s) for s in range(3)]
    _close(run_sharded(ModelSpec("tiny-llama"), prompts, executor="local", model=tiny_llama), scan(tiny_llama, prompts))
    with pytest.raises(ConfigError, match="unknown executor"):
        run_sharded(ModelSpec("tiny-llama"), prompts, executor="dask")


def test_ray_with_two_workers_equals_one_pass(ray_cluster, tiny_llama):
    prompts = [random_tokens(n, seed=n) for n in (40, 55, 33, 61, 47)]
    cfg = ScanConfig(block_size=16, geometry=True, cluster_points=20)
    got = run_sharded(ModelSpec("tiny-llama"), prompts, cfg, executor="ray", workers=2)
    _close(got, scan(tiny_llama, prompts, cfg))
    assert got.meta["shards"] == ["0/2", "1/2"] and sorted(got.meta["prompt_ids"]) == [0, 1, 2, 3, 4]
    assert len(got.meta["worker_pids"]) == 2 and os.getpid() not in got.meta["worker_pids"]


@pytest.mark.slow
@pytest.mark.skipif(not is_installed("smollm2-135m"), reason="smollm2-135m not installed")
def test_ray_on_the_default_model_equals_one_pass(ray_cluster, smollm2):
    from interp import corpus

    prompts = corpus.prompts(smollm2, "pydoc", 2, 128)
    _close(run_sharded(ModelSpec("smollm2-135m"), prompts, executor="ray", workers=2), scan(smollm2, prompts))


def _wait_busy(pid: int, job: threading.Thread, cpu_s: float = 0.3) -> None:
    """Return once process ``pid`` has spent ``cpu_s`` more CPU seconds (it is inside its shard): a kill then lands
    mid-shard on a fast machine too, where a fixed sleep can outlast the whole shard."""
    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    start, deadline = cpu(), time.monotonic() + 120
    while cpu() - start < cpu_s:
        assert job.is_alive() and time.monotonic() < deadline, "the worker never started its shard"
        time.sleep(0.01)


def test_a_killed_worker_is_restarted_and_its_shard_retried(ray_cluster, tiny_llama):
    """SIGKILL one worker in the middle of its shard: the merged result is still complete and identical."""
    prompts = [random_tokens(3000, seed=s) for s in range(96)]  # several seconds of work per shard (the kill lands mid-shard)
    actors = ray_workers(ModelSpec("tiny-llama"), 2)
    pids = ray.get([a.pid.remote() for a in actors])  # both loaded
    out = {}
    job = threading.Thread(target=lambda: out.setdefault("r", run_sharded(ModelSpec("tiny-llama"), prompts, executor="ray",
                                                                      actors=actors, beyond_context=True)))
    job.start()
    _wait_busy(pids[0], job)
    os.kill(pids[0], signal.SIGKILL)
    job.join(timeout=180)
    res = out["r"]
    assert pids[0] not in res.meta["worker_pids"]  # shard 0 came back from the restarted worker
    assert sorted(res.meta["prompt_ids"]) == list(range(96)) and res.meta["prompts"] == 96
    _close(res, scan(tiny_llama, prompts, beyond_context=True))


def test_missing_ray_is_one_clear_line(monkeypatch):
    import builtins

    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError()) if name == "ray" else real(name, *a, **k))
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[ray\]'"):
        ray_workers(ModelSpec("tiny-llama"), 1)


def test_scan_and_sweep_commands_on_ray_equal_local(ray_cluster, tmp_path):
    import pandas as pd
    from typer.testing import CliRunner

    from interp.cli import app

    args = ["scan", "tiny-qwen2", "--prompts", "3", "--tokens", "48", "--corpus", "random"]
    for ex in ("local", "ray"):
        res = CliRunner().invoke(app, args + ["--executor", ex, "--workers", "2", "--out", str(tmp_path / ex)])
        assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "local" / "heads.csv"), pd.read_csv(tmp_path / "ray" / "heads.csv"), atol=1e-6)
    sw = ["sweep", "tiny-qwen2", "--lengths", "32,64", "--corpus", "random", "--cluster-points", "20"]
    for ex in ("local", "ray"):
        res = CliRunner().invoke(app, sw + ["--executor", ex, "--out", str(tmp_path / f"sw-{ex}")])
        assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "sw-local" / "sweep.csv"), pd.read_csv(tmp_path / "sw-ray" / "sweep.csv"), atol=1e-6)


def _signal_self_at(monkeypatch, module, name: str, k: int, signum: int):
    """Replace ``module.name`` by a wrapper whose call number ``k`` first sends ``signum`` to this process (the real
    signal, so the handler installed at that moment is the one tested), then runs the original."""
    orig, calls = getattr(module, name), {"n": 0}

    def wrapped(*a, **kw):
        calls["n"] += 1
        if calls["n"] == k:
            os.kill(os.getpid(), signum)
        return orig(*a, **kw)

    monkeypatch.setattr(module, name, wrapped)


def test_scan_on_ray_keeps_units_stops_on_sigterm_and_resumes(ray_cluster, tmp_path, monkeypatch):
    """issue 46: the driver writes each prompt's unit as its worker returns it; a SIGTERM to the driver (after Ray set
    its own handler at ray.init) writes the partial tables and exits 143; --resume on Ray scans only the other
    prompts and gives the uninterrupted Ray run's heads.csv exactly; --resume locally gives it to float32 rounding."""
    import json
    import shutil

    import pandas as pd
    from typer.testing import CliRunner

    import interp.io
    from interp.cli import app

    args = ["scan", "tiny-llama", "--prompts", "3", "--tokens", "48", "--corpus", "stdlib", "--engine", "python",
            "--executor", "ray", "--workers", "2"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert CliRunner().invoke(app, args + ["--out", str(full)]).exit_code == 0
    with monkeypatch.context() as mp:  # SIGTERM as the second finished prompt is about to be written
        _signal_self_at(mp, interp.io, "write_dir_atomic", 2, signal.SIGTERM)
        res = CliRunner().invoke(app, args + ["--out", str(part)])
    assert res.exit_code == 143, res.output
    assert "partial: 1 of 3 prompts" in res.output and "--resume" in res.output and "Traceback" not in res.output
    assert json.loads((part / "state" / "scan.json").read_text())["meta"]["partial"] == "1 of 3 prompts"
    (kept,) = (part / "units").iterdir()
    inode = kept.stat().st_ino
    local = tmp_path / "local"
    shutil.copytree(part, local)
    res = CliRunner().invoke(app, args + ["--out", str(part), "--resume"])
    assert res.exit_code == 0, res.output
    assert kept.stat().st_ino == inode  # read back, not scanned again
    pd.testing.assert_frame_equal(pd.read_csv(full / "heads.csv"), pd.read_csv(part / "heads.csv"), check_exact=True)
    res = CliRunner().invoke(app, args[:-4] + ["--out", str(local), "--resume"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(full / "heads.csv"), pd.read_csv(local / "heads.csv"), atol=1e-6)


def test_ablate_on_ray_sigint_writes_the_partial_tables(ray_cluster, tmp_path, monkeypatch):
    """Ctrl-C of ``interp ablate --executor ray``: the finished prompts' band_ablation.csv and heads.csv, marked
    partial, exit 130."""
    import json

    import pandas as pd
    from typer.testing import CliRunner

    import interp.io
    from interp.cli import app

    out = tmp_path / "ab"
    with monkeypatch.context() as mp:
        _signal_self_at(mp, interp.io, "write_dir_atomic", 2, signal.SIGINT)
        res = CliRunner().invoke(app, ["ablate", "tiny-llama", "--prompts", "3", "--tokens", "48", "--corpus", "stdlib",
                                       "--engine", "python", "--all-heads", "--executor", "ray", "--out", str(out)])
    assert res.exit_code == 130 and "partial: 1 of 3 prompts" in res.output and "Traceback" not in res.output, res.output
    assert json.loads((out / "state" / "scan.json").read_text())["meta"]["partial"] == "1 of 3 prompts"
    assert len(pd.read_csv(out / "band_ablation.csv")) == 2 * 4  # tiny-llama: 2 layers x 4 heads
