"""cspmd.annotate_module: a module's parameters and buffers typed once, by
name pattern; every miss is an error, and an error changes nothing."""

import os
import sys

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, S, V
from cspmd.checker import typecheck

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import megatron_block  # noqa: E402


def untyped(module):
    return all(not spmd.has_local_type(t)
               for t in list(module.parameters()) + list(module.buffers()))


@pytest.mark.parametrize("sp", [False, True])
def test_megatron_block_by_patterns_equals_its_own_annotation(dp, tp, mesh, sp):
    rep = R if sp else I
    block = megatron_block.build_block(dp, tp, sp=sp, annotate=False)
    spmd.annotate_module(block, {
        "ln*": {dp: R, tp: rep},
        "b_o": {dp: R, tp: rep},
        "b2": {dp: R, tp: rep},
        "*": {dp: R, tp: V},       # the column/row-parallel weights and their biases
    })
    want = block.param_types()
    for name, prm in block.named_parameters():
        assert spmd.get_local_type(prm) == {spmd.MeshAxis.of(a): t
                                            for a, t in want[name].items()}, name
    x = megatron_block.make_input(block)
    with spmd.set_current_mesh(mesh), typecheck():
        megatron_block.run_step(block, x)
    assert spmd.get_local_type(block.w1.grad) == {spmd.MeshAxis.of(dp): P,
                                                  spmd.MeshAxis.of(tp): V}


def test_first_match_wins_default_and_buffers(tp_axis):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    out = spmd.annotate_module(model, {"0.weight": {tp_axis: S(0)}, "0.*": {tp_axis: V}},
                               default={tp_axis: R})
    assert out is model
    types = {n: spmd.get_local_type(t)[tp_axis] for n, t in
             list(model.named_parameters()) + list(model.named_buffers())}
    assert types == {"0.weight": V, "0.bias": V, "1.weight": R, "1.bias": R,
                     "1.running_mean": R, "1.running_var": R, "1.num_batches_tracked": R}
    assert spmd.get_partition_spec(model[0].weight) is not None


def test_tied_parameters_annotated_once(tp_axis):
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    spmd.annotate_module(model, {"emb.weight": {tp_axis: R}})  # head.weight is the same tensor
    assert spmd.get_local_type(head.weight) == {tp_axis: R}


def test_bare_type_uses_the_current_mesh(mesh):
    lin = torch.nn.Linear(3, 3)
    with spmd.set_current_mesh(mesh):
        spmd.annotate_module(lin, {"*": R})
        assert spmd.get_local_type(lin.weight) == {spmd.normalize_axis("dp"): R,
                                                   spmd.normalize_axis("tp"): R}


def test_unmatched_name_is_an_error_and_changes_nothing(tp_axis):
    lin = torch.nn.Linear(3, 3)
    with pytest.raises(ValueError, match=r"no pattern matches bias of Linear.*default="):
        spmd.annotate_module(lin, {"weight": {tp_axis: R}})
    assert untyped(lin)


def test_pattern_matching_nothing_is_an_error(tp_axis):
    lin = torch.nn.Linear(3, 3)
    with pytest.raises(ValueError, match=r"'wieght' match no parameter or buffer of Linear "
                                         r"\(names: weight, bias\)"):
        spmd.annotate_module(lin, {"wieght": {tp_axis: R}, "*": {tp_axis: R}})
    assert untyped(lin)


def test_conflict_names_the_parameter_and_changes_nothing(tp_axis):
    lin = torch.nn.Linear(3, 3)
    spmd.assert_type(lin.bias, {tp_axis: P})
    with pytest.raises(spmd.SpmdTypeError, match=r"annotate_module: Linear\.bias: "):
        spmd.annotate_module(lin, {"*": {tp_axis: R}})
    assert not spmd.has_local_type(lin.weight)
    assert spmd.get_local_type(lin.bias) == {tp_axis: P}


def test_bad_type_names_the_parameter(tp_axis):
    lin = torch.nn.Linear(3, 3)
    with pytest.raises(spmd.SpmdTypeError, match=r"Linear\.bias: .*S\(1\) is out of range"):
        spmd.annotate_module(lin, {"*": {tp_axis: S(1)}})
    assert untyped(lin)
    with pytest.raises(TypeError, match=r"Linear\.weight: .*expected a dict"):
        spmd.annotate_module(lin, {"*": "R"})
    assert untyped(lin)


def test_bad_arguments():
    with pytest.raises(TypeError, match="expected a torch.nn.Module, got Tensor"):
        spmd.annotate_module(torch.zeros(2), {})
    with pytest.raises(TypeError, match="types must be a dict"):
        spmd.annotate_module(torch.nn.Linear(2, 2), [("*", R)])
    with pytest.raises(TypeError, match="non-empty strings"):
        spmd.annotate_module(torch.nn.Linear(2, 2), {0: R})
