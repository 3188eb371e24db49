"""local(), local_map, Infer and the typed no_typecheck decorator."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
from cspmd import I, P, PartitionSpec, R, S, V

from conftest import ltype


def test_infer_singleton():
    assert repr(spmd.Infer) == "Infer"
    assert type(spmd.Infer)() is spmd.Infer


def test_local_is_noop_off_checking():
    with spmd.local():
        assert not spmd.is_type_checking()


def test_local_keeps_checking_on(checked):
    with spmd.local():
        assert spmd.is_type_checking()
    assert spmd.is_type_checking()


def test_local_map_stamps_outputs(checked, typed):
    @spmd.local_map(in_types=({"dp": R, "tp": V},), out_types={"dp": R, "tp": P})
    def f(x):
        return x * 2

    y = f(typed({"dp": R, "tp": V}))
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "P"}  # V -> P refinement


def test_local_map_sets_untyped_inputs_and_spec(checked):
    @spmd.local_map(in_types=({"dp": R, "tp": S(0)}, None), out_types=PartitionSpec("tp", None))
    def f(x, k):
        assert spmd.get_partition_spec(x) is not None
        return x.reshape(4, 1) * k

    x = torch.randn(4)
    y = f(x, 3)
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert repr(spmd.get_partition_spec(y)) == "PartitionSpec(mesh_tp, None)"


def test_local_map_pair_leaf_and_list_in_types(checked, typed):
    @spmd.local_map(in_types=[({"dp": R}, PartitionSpec("tp")), {"dp": R, "tp": R}],
                    out_types=(({"dp": R, "tp": V}, None), {"dp": R, "tp": R}))
    def f(a, b):
        return a + b, b

    a, b = typed({"dp": R, "tp": V}, 4), typed({"dp": R, "tp": R}, 4)
    ya, yb = f(a, b)
    assert ltype(ya)["mesh_tp"] == "V" and ltype(yb)["mesh_tp"] == "R"


def test_local_map_input_conflict_raises(checked, typed):
    @spmd.local_map(in_types=({"dp": R, "tp": R},), out_types={"dp": R, "tp": R})
    def f(x):
        return x

    with pytest.raises(spmd.SpmdTypeError, match="SPMD type mismatch on axis mesh_tp"):
        f(typed({"dp": R, "tp": V}))


def test_local_map_output_conflict_raises(checked, typed):
    @spmd.local_map(out_types={"dp": R, "tp": V})
    def f(x):
        return x

    with pytest.raises(spmd.SpmdTypeError, match="tensor has R"):
        f(typed({"dp": R, "tp": R}))


def test_local_map_body_is_checked(checked, typed):
    @spmd.local_map(out_types={"dp": R, "tp": R})
    def f(x):
        return torch.relu(x)

    with pytest.raises(spmd.SpmdTypeError, match="Partial type on axis mesh_tp"):
        f(typed({"dp": R, "tp": P}))


def test_local_map_errors(checked, typed):
    x = typed({"dp": R, "tp": R})

    def body(*a):
        return a[0]

    with pytest.raises(spmd.SpmdTypeError, match=r"local_map\[.*body\]: input_types contains "
                       "Infer at a leaf; only the bare value of in_types may be Infer."):
        spmd.local_map(in_types=(spmd.Infer,), out_types={"tp": R})(body)(x)
    with pytest.raises(spmd.SpmdTypeError, match="output_types contains Infer"):
        spmd.local_map(out_types=spmd.Infer)(body)(x)
    with pytest.raises(spmd.SpmdTypeError, match="input_types pytree structure does not match "
                       "input"):
        spmd.local_map(in_types=({"tp": R}, {"tp": R}), out_types={"tp": R})(body)(x)
    with pytest.raises(spmd.SpmdTypeError, match="is a tensor but its type is None"):
        spmd.local_map(in_types=(None,), out_types={"tp": R})(body)(x)
    with pytest.raises(spmd.SpmdTypeError, match="not a tensor"):
        spmd.local_map(in_types=({"tp": R},), out_types=None)(body)(3)
    with pytest.raises(spmd.SpmdTypeError, match="unrecognized type 42"):
        spmd.local_map(in_types=(42,), out_types={"tp": R})(body)(x)
    with pytest.raises(spmd.SpmdTypeError, match="No mesh axis named 'zz'"):
        spmd.local_map(in_types=({"zz": R},), out_types={"tp": R})(body)(x)


def test_local_map_bad_arguments():
    with pytest.raises(TypeError, match="out_types"):
        spmd.local_map(in_types=({},))
    with pytest.raises(TypeError, match="expected a function"):
        spmd.local_map(out_types={})(3)


def test_local_map_off_checking_just_calls(mesh):
    @spmd.local_map(in_types=(42,), out_types=spmd.Infer)  # never validated off checking
    def f(x):
        return x + 1

    assert f(1) == 2


def test_string_axes_resolve_at_call_time(mesh, typed):
    @spmd.local_map(in_types=({"tp": V},), out_types={"tp": P})
    def f(x):
        return x

    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(strict_mode="permissive"):
        y = f(typed({"dp": R, "tp": V}))
        assert ltype(y)["mesh_tp"] == "P"
    with spmd.set_current_mesh({"tp": spmd.MeshAxis.of(2, 4)}), \
            spmd.checker.typecheck(strict_mode="permissive"):
        y = f(torch.randn(4))
        assert ltype(y) == {"mesh_dp": "P"}  # "tp" now names the 2:4 axis


def test_typed_no_typecheck_stamps_untyped_results(checked, typed):
    @spmd.no_typecheck(out_types={"dp": R, "tp": I}, in_types=({"dp": R, "tp": P},))
    def opaque(x):
        assert not spmd.is_type_checking()
        return torch.relu(x)  # would be an error under checking

    y = opaque(typed({"dp": R, "tp": P}))
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "I"}
    assert spmd.is_type_checking()


def test_typed_no_typecheck_errors():
    with pytest.raises(TypeError, match="out_types is required for typed no_typecheck"):
        spmd.no_typecheck(in_types=({},))
    with pytest.raises(TypeError, match="out_types is required for typed no_typecheck"):
        spmd.no_typecheck(out_types={}, bogus=1)
    with pytest.raises(TypeError, match="not a context manager"):
        with spmd.no_typecheck(out_types={}):
            pass
    with pytest.raises(TypeError, match="requires a callable"):
        spmd.no_typecheck(3)


def test_plain_no_typecheck_still_a_context_manager(checked):
    with spmd.no_typecheck():
        assert not spmd.is_type_checking()
    assert spmd.is_type_checking()


def test_checker_exports_local_map():
    assert cspmd.checker.local_map is spmd.local_map
