"""spmd_types 0.2.x argument forms that real clients (torchtitan) still use,
accepted where they do not conflict with 0.3.1 (docs/differences.md)."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
from cspmd import R, V, PartitionSpec


@pytest.fixture
def on_mesh(mesh):
    # Annotations outside typecheck(): inside it a factory's result is typed R.
    with spmd.set_current_mesh(mesh):
        yield mesh


@pytest.mark.parametrize("spec", [("tp", None), ["tp", None]], ids=["tuple", "list"])
def test_a_plain_sequence_is_a_partition_spec_in_assert_type(spec, on_mesh):
    want = spmd.assert_type(torch.ones(8, 2), {"dp": R, "tp": V}, PartitionSpec("tp", None))
    positional = spmd.assert_type(torch.ones(8, 2), {"dp": R, "tp": V}, spec)
    keyword = spmd.assert_type(torch.ones(8, 2), {"dp": R, "tp": V}, partition_spec=spec)
    for t in (positional, keyword):
        assert spmd.get_partition_spec(t) == spmd.get_partition_spec(want)
        assert isinstance(spmd.get_partition_spec(t), PartitionSpec)
        assert spmd.get_local_type(t) == spmd.get_local_type(want)


def test_torchtitan_layout_specs(on_mesh):
    # Multi-axis entries as tuples (or lists), as torchtitan's layouts write them.
    t = spmd.assert_type(torch.ones(8, 2), {"dp": V, "tp": V}, (("dp", "tp"), None))
    assert spmd.get_partition_spec(t) == spmd.get_partition_spec(
        spmd.assert_type(torch.ones(8, 2), {"dp": V, "tp": V}, PartitionSpec(("dp", "tp"), None)))
    u = spmd.assert_type(torch.ones(8, 2), {"dp": V, "tp": V}, partition_spec=[["dp", "tp"], None])
    assert spmd.get_partition_spec(u) == spmd.get_partition_spec(t)


def test_the_plain_spec_is_checked_like_a_partition_spec(on_mesh):
    x = torch.ones(8, 2)
    with pytest.raises(Exception) as plain:
        spmd.assert_type(x, {"dp": R, "tp": V}, ("tp", "tp"))
    with pytest.raises(Exception) as typed:
        spmd.assert_type(torch.ones(8, 2), {"dp": R, "tp": V}, PartitionSpec("tp", "tp"))
    assert type(plain.value) is type(typed.value) and str(plain.value) == str(typed.value)
    assert not spmd.has_local_type(x)  # nothing changed
    with pytest.raises(TypeError, match="requires at least one type argument"):
        spmd.assert_type(torch.ones(8, 2), ("tp", None))  # a spec alone is no type


def test_merge_types_and_local_map_take_it_too(on_mesh):
    m = spmd.merge_types({"dp": R, "tp": V}, ("tp", None))
    assert m.partition_spec == PartitionSpec("tp", None)

    @spmd.local_map(in_types=(({"dp": R, "tp": V}, ("tp", None)),),
                    out_types=({"dp": R, "tp": V}, ("tp", None)))
    def double(x):
        return x * 2

    x = torch.ones(8, 2)
    with spmd.checker.typecheck():
        y = double(x)
    assert spmd.get_partition_spec(y) == spmd.get_partition_spec(
        spmd.assert_type(torch.ones(8, 2), {"dp": R, "tp": V}, PartitionSpec("tp", None)))


def test_mutate_type_with_a_dst_dict_and_no_axis(on_mesh):
    # torchtitan's vision encoder writes mutate_type(t, src=R, dst={...}).
    t = spmd.assert_type(torch.ones(4), {"dp": R, "tp": R})
    spmd.mutate_type(t, src=R, dst={"dp": V, "tp": spmd.I})
    assert spmd.get_local_type(t) == spmd.get_local_type(
        spmd.assert_type(torch.ones(4), {"dp": V, "tp": spmd.I}))
