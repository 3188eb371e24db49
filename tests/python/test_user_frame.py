"""One user-frame finder (cspmd._frames) for every message path: the library's
own files are known by their real locations, so a user script that lives in
a folder named ``cspmd`` or ``torch_work`` is still the user's line.

Each case runs a script as a subprocess and checks the ``file:line`` that a
forward op error, a collective error, a backward error under anomaly mode
(the forward op's line) and a trace line report.
"""

import os
import re
import sys

import pytest

from cspmd import _frames
import time_limits

SCRIPT = '''\
import logging, sys
import torch, torch.distributed as dist
import cspmd as spmd, cspmd.checker
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group(backend="fake", rank=0, world_size=4)
mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
tp = mesh.get_group("tp")


def report(tag, fn):
    try:
        fn()
    except spmd.SpmdTypeError as e:
        print(f"<<{tag}>>{e}<<end>>")


class PartialGrad(torch.autograd.Function):
    """Hands mul's backward a P gradient where R is due: P * P there."""

    @staticmethod
    def forward(ctx, h):
        return h.view_as(h)

    @staticmethod
    def backward(ctx, g):
        return spmd.convert(g, tp, src=spmd.R, dst=spmd.P)


class Trace(logging.Handler):
    def emit(self, record):
        print(f"<<trace>>{record.getMessage()}<<end>>")


with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
    x = torch.randn(4)
    spmd.assert_type(x, {tp: spmd.P})
    report("op", lambda: torch.relu(x))  # MARK op
    report("coll", lambda: spmd.all_gather(x, tp, src=spmd.V, dst=spmd.R))  # MARK coll
    w = torch.randn(4, requires_grad=True)
    spmd.assert_type(w, {tp: spmd.R})
    z = torch.randn(4)
    spmd.assert_type(z, {tp: spmd.P})
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        h = torch.mul(w, z)  # MARK forward
        loss = PartialGrad.apply(h).sum()
        report("backward", lambda: loss.backward())
    logging.getLogger("cspmd.runtime.trace").addHandler(Trace())
    logging.getLogger("cspmd.runtime.trace").setLevel(logging.INFO)
    with spmd.trace():
        torch.mul(w, w)  # MARK trace
'''


def _marks(text):
    return {m.group(1): i + 1 for i, line in enumerate(text.splitlines())
            for m in [re.search(r"# MARK (\w+)", line)] if m}


def _blocks(out):
    return {m.group(1): m.group(2) for m in re.finditer(r"<<(\w+)>>(.*?)<<end>>", out, re.S)}


@pytest.mark.parametrize("folder", ["cspmd", "torch_work"])
def test_user_line_from_a_folder_named_like_the_library(tmp_path, folder):
    where = tmp_path / folder
    where.mkdir(parents=True)
    script = where / "train.py"
    script.write_text(SCRIPT)
    proc = time_limits.run([sys.executable, str(script)], 120, text=True, cwd=str(tmp_path),
                           env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines, blocks = _marks(SCRIPT), _blocks(proc.stdout)
    path = str(script)
    assert f"\n  at {path}:{lines['op']}" in blocks["op"]
    assert f"\n  at {path}:{lines['coll']}" in blocks["coll"]
    assert f"forward op at {path}:{lines['forward']}" in blocks["backward"]
    assert blocks["trace"].startswith(f"{path}:{lines['trace']}  aten::mul")


def test_library_files_are_known_by_location():
    import torch
    assert _frames.is_library_file(_frames.__file__)
    assert _frames.is_library_file(torch.__file__)
    assert _frames.is_library_file("<frozen importlib._bootstrap>")
    assert not _frames.is_library_file("/home/u/cspmd/train.py")
    assert not _frames.is_library_file("/home/u/torch_work/train.py")
    assert not _frames.is_library_file("<stdin>")


def test_user_site_of_an_anomaly_stack():
    import torch
    lib = os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py")
    stack = ['  File "/u/cspmd/run.py", line 3, in <module>\n    f()\n',
             '  File "/u/cspmd/model.py", line 9, in f\n    g()\n',
             f'  File "{lib}", line 40, in g\n    x\n']
    assert _frames.user_site_of_stack(stack) == "/u/cspmd/model.py:9"
    assert _frames.user_site_of_stack(stack[2:]) == ""
