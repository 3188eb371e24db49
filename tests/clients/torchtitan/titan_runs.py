"""One torchtitan training job on CPU over Gloo: launch, wait, read its log.

Used by check.py (the end-to-end check) and benchmarks/bench_torchtitan.py.
A job is ``torchrun`` on loopback running train_cpu.py in a torchtitan
checkout, with ``spmd_types`` served by cspmd (``-m cspmd.run``) or by a
real spmd_types from a folder of its own.
"""

import dataclasses
import os
import re
import socket
import subprocess
import sys
import tempfile
from datetime import datetime
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "train_cpu.py")

# torchtitan's pip dependencies that the llama3 debug job imports.
DEPENDENCIES = ("tyro", "grain", "datasets", "tokenizers", "safetensors", "einops")
DATA_FILE = os.path.join("tests", "assets", "c4_test", "data.json")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"^\[titan\] (\S+ \S+) .*step:\s+(\d+)\s+loss:\s+([0-9.]+)\s+"
                   r"grad_norm:\s+([0-9.]+)")


def check_setup(checkout):
    """A message saying what is missing to run torchtitan here, or None."""
    if not os.path.isfile(os.path.join(checkout, "torchtitan", "train.py")):
        return f"{checkout} is not a torchtitan checkout (no torchtitan/train.py)"
    data = os.path.join(checkout, DATA_FILE)
    if not os.path.isfile(data) or os.path.getsize(data) < 1000:
        return (f"{data} is missing or empty: the llama3 debug model trains on it "
                f"(a checkout without its large files lacks it)")
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.util, sys; print(' '.join(n for n in "
         "sys.argv[1:] if importlib.util.find_spec(n) is None))", *DEPENDENCIES],
        cwd=checkout, env=_env(checkout, None), capture_output=True, text=True)
    missing = probe.stdout.split() if probe.returncode == 0 else list(DEPENDENCIES)
    if missing:
        return (f"torchtitan's dependencies are not importable: {', '.join(missing)} "
                f"(pip install -r {checkout}/requirements.txt, or put them on PYTHONPATH)")
    return None


@dataclasses.dataclass
class Job:
    """What one training job printed on rank 0."""
    returncode: int
    log: str
    losses: List[str]       # as printed, so equal runs compare equal exactly
    grad_norms: List[str]
    step_seconds: List[float]  # each step's, from the third on (two warm up)

    def error_lines(self):
        return [line for line in self.log.splitlines() if "SpmdTypeError" in line]


def _env(checkout, spmd_types_dir, extra=None):
    env = dict(os.environ)
    paths = [checkout] + ([spmd_types_dir] if spmd_types_dir else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    env.update(extra or {})
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(checkout, *, tp=2, dp_shard=1, steps=4, checked=True, spmd_types_dir=None,
        plant=None, timeout=600, seq_len=256):
    """Train the llama3 debug model for ``steps`` steps; rank 0's log parsed.

    spmd_types_dir: None for cspmd (through ``-m cspmd.run``), else a folder
    holding a real spmd_types.  plant: train_cpu.py's CSPMD_TT_PLANT."""
    nproc = tp * dp_shard
    with tempfile.TemporaryDirectory(prefix="cspmd-tt-") as dump:
        command = [sys.executable, "-m", "torch.distributed.run",
                   f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
                   f"--master-port={_free_port()}", "--local-ranks-filter=0"]
        command += ["-m", "cspmd.run", DRIVER] if spmd_types_dir is None else [DRIVER]
        command += ["--module", "llama3", "--config", "llama3_debugmodel",
                    f"--parallelism.tensor_parallel_degree={tp}",
                    f"--parallelism.data_parallel_shard_degree={dp_shard}",
                    f"--training.steps={steps}",
                    f"--training.max_context_length={seq_len}",
                    f"--training.num_tokens_per_microbatch_per_dp_rank={2 * seq_len}",
                    "--training.disable_cuda_graphs", "--checkpoint.no-enable",
                    "--metrics.disable-color-printing", f"--dump-folder={dump}",
                    "--debug.seed=42",
                    "--debug.spmd-typechecking" if checked
                    else "--debug.no-spmd-typechecking",
                    # Selective AC is refused with FlexAttention under checking.
                    "activation-checkpoint:full"]
        env = _env(checkout, spmd_types_dir, {"CSPMD_TT_PLANT": plant or ""})
        try:
            done = subprocess.run(command, cwd=checkout, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout)
            returncode, log = done.returncode, done.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            returncode = 124
            log = (out.decode() if isinstance(out, bytes) else out) + \
                f"\n[titan_runs] killed after {timeout} s"
    return _parse(returncode, log)


def _parse(returncode, log):
    losses, norms, stamps = [], [], []
    for line in _ANSI.sub("", log).splitlines():
        m = _STEP.match(line)
        if m:
            stamps.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f"))
            losses.append(m.group(3))
            norms.append(m.group(4))
    seconds = [(b - a).total_seconds() for a, b in zip(stamps[1:], stamps[2:])]
    return Job(returncode, log, losses, norms, seconds)


def median(values: List[float]) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
