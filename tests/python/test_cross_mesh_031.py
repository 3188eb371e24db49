"""spmd_types 0.3.1's cross-mesh rules, each case run under cspmd and
under the installed reference: a collective whose input is typed on
another presentation of the ranks (here the 8-rank world as one axis)
retags it onto the current mesh (dp, tp) first; reinterpret_mesh remaps a
PartitionSpec and, where local axes cannot keep a shard order, decays it
(drops the unmatched shards) instead of failing.  Outcome compared: the
error class, or the result's types per axis and partition spec."""

import pytest
import torch

import cspmd as spmd
import reference


def _libs():
    ref = reference.load()
    reference.load("spmd_types.checker")
    return spmd, ref


def _name(lib, a):
    """An axis by its layout (the libraries name the 8-rank axis differently:
    cspmd after the default group, the reference by the axes it flattens)."""
    a = lib.MeshAxis.of(a) if not isinstance(a, lib.MeshAxis) else a
    for name, (size, stride) in {"dp": (2, 4), "tp": (4, 1), "world": (8, 1)}.items():
        if a == lib.MeshAxis.of(size, stride):
            return name
    return repr(a)


def _text(lib, y):
    spec = lib.get_partition_spec(y)
    types = {_name(lib, a): repr(t).split(".")[-1] for a, t in lib.get_local_type(y).items()}
    return types, None if spec is None else tuple(
        tuple(_name(lib, a) for a in e) if isinstance(e, tuple) else
        (None if e is None else _name(lib, e)) for e in spec)


def _world(lib, letter, shape=(4, 4)):
    """A tensor typed on the whole world as one axis (size 8, stride 1)."""
    return lib.assert_type(torch.randn(*shape), {lib.MeshAxis.of(8, 1): getattr(lib, letter)})


COLLECTIVES = {
    "all_reduce(P world) on tp": ("P", lambda l, x: l.all_reduce(x, "tp", src=l.P, dst=l.R)),
    "all_reduce(V world, src=P) on dp": ("V", lambda l, x: l.all_reduce(x, "dp", src=l.P,
                                                                         dst=l.I)),
    "all_gather(V world) on dp": ("V", lambda l, x: l.all_gather(x, "dp", src=l.V, dst=l.R)),
    "reduce_scatter(P world) on tp": ("P", lambda l, x: l.reduce_scatter(
        x, "tp", src=l.P, dst=l.S(0))),
    "convert(R world) on tp": ("R", lambda l, x: l.convert(x, "tp", src=l.R, dst=l.S(1))),
    "reinterpret(R world) on dp": ("R", lambda l, x: l.reinterpret(x, "dp", src=l.R, dst=l.V,
                                                                    expert_mode=True)),
    "all_reduce(R world) on tp: wrong src": ("R", lambda l, x: l.all_reduce(
        x, "tp", src=l.P, dst=l.R)),
    "all_gather(P world) on dp: wrong src": ("P", lambda l, x: l.all_gather(
        x, "dp", src=l.V, dst=l.R)),
}


def _outcome(lib, mesh, letter, call, local=True):
    x = _world(lib, letter)
    with lib.set_current_mesh(mesh), lib.checker.typecheck(local=local):
        try:
            y = call(lib, x)
        except (lib.SpmdTypeError, ValueError) as e:
            return type(e).__name__
        return _text(lib, y)


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_collective_retags_its_input_onto_the_current_mesh(mesh, name):
    letter, call = COLLECTIVES[name]
    mine, theirs = (_outcome(lib, mesh, letter, call) for lib in _libs())
    assert mine == theirs
    if "wrong src" not in name:
        assert isinstance(mine, tuple) and set(mine[0]) == {"dp", "tp"}


def _remap(lib, mesh, spec_axes, dst, *, checking=None):
    """reinterpret_mesh of a (dp, tp)-typed V tensor whose dim 0 is sharded
    on spec_axes, onto dst ("world": the 8 ranks as one axis)."""
    dp, tp = lib.MeshAxis.of(mesh.get_group("dp")), lib.MeshAxis.of(mesh.get_group("tp"))
    names = {"dp": dp, "tp": tp}
    entry = tuple(names[a] for a in spec_axes)
    entry = entry[0] if len(entry) == 1 else entry
    x = lib.assert_type(torch.randn(4, 4), {dp: lib.V, tp: lib.V},
                        lib.PartitionSpec(entry, None))
    target = {lib.MeshAxis.of(8, 1): lib.V}
    try:
        if checking is None:
            y = lib.reinterpret_mesh(x, target)
        else:
            with lib.set_current_mesh(mesh), lib.checker.typecheck(local=checking == "local"):
                y = lib.reinterpret_mesh(x, target)
    except lib.SpmdTypeError as e:
        return type(e).__name__
    return _text(lib, y)


@pytest.mark.parametrize("spec_axes,checking,decays", [
    (("dp", "tp"), None, False),       # the exact group: remapped
    (("dp",), None, True),             # a part of the group: decays
    (("tp", "dp"), None, True),        # the group reordered: decays
    (("dp",), "local", True),          # local checking: decays
    (("dp", "tp"), "local", False),
])
def test_reinterpret_mesh_spec_decay(mesh, spec_axes, checking, decays):
    mine, theirs = (_remap(lib, mesh, spec_axes, "world", checking=checking) for lib in _libs())
    assert mine == theirs
    types, spec = mine
    assert types == {"world": "V"}
    if decays:
        assert spec is None or all(e is None for e in spec)
    else:
        assert spec is not None and spec[0] is not None


def test_reinterpret_mesh_no_decay_onto_a_global_axis(mesh):
    """Under global checking the destination axis is global: a spec that
    does not match its group stays an error, in both."""
    outcomes = []
    for lib in _libs():
        dp, tp = lib.MeshAxis.of(mesh.get_group("dp")), lib.MeshAxis.of(mesh.get_group("tp"))
        x = lib.assert_type(torch.randn(4, 4), {dp: lib.V, tp: lib.V},
                            lib.PartitionSpec(dp, tp))
        world = lib.MeshAxis.of(8, 1)
        with lib.set_current_mesh({"world": world}), lib.checker.typecheck(local=False):
            try:
                lib.reinterpret_mesh(x, {world: lib.V})
                outcomes.append("ok")
            except lib.SpmdTypeError as e:
                outcomes.append((type(e).__name__, str(e).split("\n")[0]))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "SpmdTypeError"
