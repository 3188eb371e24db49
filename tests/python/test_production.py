"""docs/production.md's tools: the torchrun benchmark runs (one process on
the fake backend; two processes on gloo under torchrun, the GPU job's code
path but for NCCL) and reports a checked / unchecked ratio."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benchmarks", "bench_torchrun.py")
QUICK = ["--rounds", "1", "--steps", "1", "--warmup", "1"]


def check_report(path, world, tp):
    with open(path) as f:
        out = json.load(f)
    assert (out["world"], out["tp"], out["dp"]) == (world, tp, world // tp)
    assert set(out["ms_best"]) == {"unchecked", "checked", "annotated, off"}
    assert all(ms > 0 for ms in out["ms_best"].values())
    assert out["ratio"] == out["ms_best"]["checked"] / out["ms_best"]["unchecked"]
    # {dp: P, tp: V}; a size-1 dp axis is dropped.
    assert ": V" in out["w1_grad_type"]
    assert (": P" in out["w1_grad_type"]) == (out["dp"] > 1)


def test_bench_torchrun_on_the_fake_backend(tmp_path):
    report = tmp_path / "fake.json"
    proc = subprocess.run([sys.executable, BENCH, "--backend", "fake", "--tp", "4",
                           "--json", str(report), *QUICK],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checked / unchecked:" in proc.stdout
    check_report(report, 8, 4)


def test_bench_torchrun_under_torchrun_on_gloo(tmp_path):
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun is not on PATH")
    report = tmp_path / "gloo.json"
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node=2", BENCH, "--tp", "2",
                           "--json", str(report), *QUICK],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_report(report, 2, 2)


def test_bench_torchrun_outside_torchrun_says_what_to_run():
    proc = subprocess.run([sys.executable, BENCH, "--backend", "gloo"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "RANK"})
    assert proc.returncode != 0
    assert "run under torchrun" in proc.stderr
