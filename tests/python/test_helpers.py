"""Queries, normalization and PartitionSpec/SpmdType helpers."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, PartitionSpec, R, S, SpmdType, V

TP = spmd.MeshAxis.of(4, 1)
DP = spmd.MeshAxis.of(2, 4)
ONE = spmd.MeshAxis.of(1, 1)


def test_axis_queries(mesh):
    x = torch.randn(4)
    spmd.assert_type(x, {TP: V})
    assert spmd.get_axis_local_type(x, TP) is V
    assert spmd.maybe_get_axis_local_type(x, DP) is None
    with pytest.raises(ValueError, match="no type on axis"):
        spmd.get_axis_local_type(x, DP)
    with spmd.set_current_mesh(mesh):
        assert spmd.get_axis_local_type(x, "tp") is V
        with pytest.raises(spmd.SpmdTypeError, match="No mesh axis named 'nope'"):
            spmd.get_axis_local_type(x, "nope")
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        spmd.get_axis_local_type([1], TP)


def test_assert_local_type_and_like():
    a, b, c = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    spmd.assert_local_type(a, {TP: S(0), DP: R})
    spmd.assert_type_like(b, a)
    spmd.assert_local_type_like(c, a, {DP: I})
    assert spmd.get_partition_spec(b) == spmd.get_partition_spec(a)
    assert spmd.get_partition_spec(c) is None
    assert spmd.get_local_type(c) == {TP: V, DP: I}
    with pytest.raises(TypeError, match="overrides must be a dict"):
        spmd.assert_local_type_like(c, a, [DP])
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        spmd.assert_local_type_like(c, 3)


def test_assert_type_with_spmd_type():
    x = torch.randn(2, 3)
    spmd.assert_type(x, SpmdType({TP: V}, PartitionSpec(None, TP)))
    assert spmd.get_partition_spec(x) == PartitionSpec(None, TP)
    # The types merge (the reference's merge_types): a spec may come apart.
    y = spmd.assert_type(torch.randn(2, 3), SpmdType({TP: V}), PartitionSpec(None, TP))
    assert spmd.get_partition_spec(y) == PartitionSpec(None, TP)
    with pytest.raises(spmd.SpmdTypeError, match="Conflicting PartitionSpecs"):
        spmd.assert_type(x, SpmdType({TP: V}, PartitionSpec(None, TP)),
                         partition_spec=PartitionSpec(TP, None))
    with pytest.raises(TypeError, match="partition_spec must be a PartitionSpec"):
        spmd.assert_type(torch.randn(2), {TP: V}, partition_spec="tp")
    with pytest.raises(TypeError, match="expected a dict"):
        spmd.assert_type(torch.randn(2), {TP: V}, "tp")


def test_spmd_type_validation():
    assert SpmdType({TP: S(-1)}).local_type[TP] == S(-1)  # kept verbatim
    with pytest.raises(spmd.SpmdTypeError, match="cannot be combined"):
        SpmdType({TP: S(0)}, PartitionSpec(TP))
    with pytest.raises(spmd.SpmdTypeError, match="not V"):
        SpmdType({TP: R}, PartitionSpec(TP))
    with pytest.raises(TypeError, match="must be one of R, I, V, P or S"):
        SpmdType({TP: "R"})
    with pytest.raises(ValueError, match="empty tuple"):
        SpmdType({TP: V}, PartitionSpec(()))
    with pytest.raises(TypeError, match="local_type must be a dict"):
        SpmdType(R)


def test_normalize_helpers(mesh):
    assert spmd.normalize_mesh([TP, DP, ONE]) == frozenset({TP, DP})
    with pytest.raises(spmd.SpmdTypeError, match="are not orthogonal"):
        spmd.normalize_mesh([TP, spmd.MeshAxis.of(2, 2)])
    with pytest.raises(TypeError, match="collection of mesh axes"):
        spmd.normalize_mesh(3)
    with spmd.set_current_mesh(mesh):
        assert spmd.normalize_local_type({"tp": R, ONE: V}) == {TP: R}
        assert spmd.normalize_partition_spec(PartitionSpec(("dp", ONE), "tp")) == \
            PartitionSpec(DP, TP)
        assert spmd.normalize_axis("dp") is DP
    with pytest.raises(TypeError, match="cannot be stored as a local SPMD type"):
        spmd.normalize_local_type({TP: S(0)})
    with pytest.raises(TypeError, match="Expected PerMeshAxisLocalSpmdType"):
        spmd.normalize_local_type({TP: 1})
    with pytest.raises(TypeError, match="expected a dict"):
        spmd.normalize_local_type([TP])
    with pytest.raises(spmd.SpmdTypeError, match="not orthogonal"):
        spmd.normalize_partition_spec(PartitionSpec(TP, TP))
    assert spmd.normalize_partition_spec(PartitionSpec((ONE,))) == PartitionSpec(None)
    with pytest.raises(TypeError, match="expected a PartitionSpec"):
        spmd.normalize_partition_spec(3)
    with pytest.raises(spmd.SpmdTypeError, match="no current mesh"):
        spmd.normalize_axis("tp")


def test_partition_spec_conversions():
    spec = PartitionSpec((DP, TP), None)
    assert spmd.partition_spec_to_shard_types(spec) == {DP: S(0), TP: S(0)}
    assert spmd.partition_spec_get_shard(spec, TP) == S(0)
    assert spmd.partition_spec_get_shard(PartitionSpec(None, TP), TP) == S(1)
    assert spmd.partition_spec_get_shard(spec, ONE) is None
    assert spmd.partition_spec_get_shard(None, TP) is None
    assert spec.axes_with_partition_spec() == {DP, TP}
    types = {DP: S(0), TP: S(0), ONE: R}
    assert spmd.shard_types_to_partition_spec(types, 2, axis_order=[DP, TP]) == spec
    assert spmd.shard_types_to_partition_spec({TP: S(-1)}, 2) == PartitionSpec(None, TP)
    with pytest.raises(spmd.SpmdTypeError, match="Tensor dim 0 is sharded on multiple axes "
                       r"\(.*\) but axis_order does not resolve their ordering"):
        spmd.shard_types_to_partition_spec(types, 2, axis_order=[DP])
    assert types == {DP: S(0), TP: S(0), ONE: R}  # not mutated
    with pytest.raises(TypeError, match="ndim must be"):
        spmd.shard_types_to_partition_spec(types, "2")
    with pytest.raises(TypeError, match="types must be a dict"):
        spmd.shard_types_to_partition_spec([], 2)


def test_to_local_type():
    assert spmd.to_local_type(S(3)) is V
    for t in (R, I, V, P):
        assert spmd.to_local_type(t) is t
    with pytest.raises(TypeError, match="to_local_type"):
        spmd.to_local_type("V")


def test_aliases_exist():
    import typing
    assert typing.get_args(spmd.PerMeshAxisSpmdType) == (spmd.PerMeshAxisLocalSpmdType, S)
    assert spmd.LocalSpmdType is not None and spmd.PerMeshAxisSpmdTypes is not None
