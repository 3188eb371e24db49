"""The training-loop corpus (training_corpus.py): four complete loops, each
correct (no error; losses and parameters equal to the unchecked run bit for
bit) and with planted bugs (each caught, the error pointing at the user's
line), at world sizes 2 and 4 on the fake process group and on Gloo
(loopback; one launch per world size runs the whole catalogue)."""

import math

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh

import gloo_harness
import training_corpus as corpus


def fake_catalogue(ws):
    def make_mesh(shape, names):
        return DeviceMesh("cpu", torch.arange(math.prod(shape)).view(shape),
                          mesh_dim_names=names)

    def pipeline_link(ws):
        return make_mesh((ws,), ("zdp",)), corpus.InProcess, (0, 1)

    # Axis names of their own, sorting after the session mesh's (conftest):
    # an axis both meshes share keeps displaying as "mesh_tp" in other tests.
    return corpus.run_catalogue(ws, make_mesh, pipeline_link, gathers_exact=False,
                                names=("zdp", "ztp"))


def expected_cases(ws, pipeline_bugs=True):
    n = 0
    for loop in ("dp_tp_mlp", "tp_sp_block"):
        n += len(corpus.two_axis_shapes(ws))
        n += sum(len(corpus.two_axis_shapes(ws, a)) for a in corpus.BUGS[loop].values())
    n += 1 + len(corpus.BUGS["ckpt_amp_accum"])
    n += 1 + (len(corpus.BUGS["pipeline"]) if pipeline_bugs else 0)
    return n


def failures(res):
    return "\n".join(f"{case}: {msg}" for case, msg in res.items() if msg)


def test_catalogue_has_four_loops_with_three_bugs_each():
    assert len(corpus.BUGS) >= 4
    assert all(len(bugs) >= 3 for bugs in corpus.BUGS.values())
    for loop, bugs in corpus.BUGS.items():
        for bug in bugs:
            corpus.site(loop, bug)   # every bug marks the line its error must point at


@pytest.mark.parametrize("ws", [2, 4])
def test_fake_process_group(mesh, ws):
    res = fake_catalogue(ws)
    assert len(res) == expected_cases(ws)
    assert not failures(res), failures(res)



@pytest.mark.parametrize("ws", [2, 4])
def test_gloo(ws):
    res = gloo_harness.run_world(ws, corpus.gloo_worker, timeout=120)
    # At ws=2 each pipeline stage is one rank: dp has size 1, no bug to plant.
    for r, out in enumerate(res):
        assert len(out) == expected_cases(ws, pipeline_bugs=ws > 2), sorted(out)
        assert not failures(out), f"rank {r}:\n{failures(out)}"
