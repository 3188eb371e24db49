"""An S(i) out of range for the input, in src or dst of a collective or
conversion: which error is reported first (the shard's SpmdTypeError, or
the (src, dst) pair's ValueError) is decided by the core
(cspmd_coll_check_shard_range) and must be the reference's, naming the
same shard."""

import itertools
import re

import pytest
import torch

import cspmd as spmd
import reference

OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "reinterpret", "convert",
       "redistribute"]
# plain types and shards in and out of range for a 2-dim input
VALUES = ["R", "V", "P", "S0", "S-1", "S2", "S-3", "S9"]


def _value(lib, name):
    return lib.S(int(name[1:])) if name.startswith("S") else getattr(lib, name)


def _outcome(lib, mesh, fn, src, dst):
    """(error class name, the S(d) texts its message names), or ("ok", ())."""
    with lib.set_current_mesh(mesh):
        x = torch.randn(4, 4)
        try:
            getattr(lib, fn)(x, "tp", src=_value(lib, src), dst=_value(lib, dst))
        except (ValueError, lib.SpmdTypeError) as e:
            kind = "ValueError" if isinstance(e, ValueError) else "SpmdTypeError"
            return kind, tuple(re.findall(r"S\(-?\d+\)", str(e)))
    return "ok", ()


@pytest.mark.parametrize("fn", OPS)
def test_shard_out_of_range_order_matches_reference(mesh, fn):
    ref = reference.load()
    checked = 0
    for src, dst in itertools.product(VALUES, VALUES):
        if src in ("S2", "S-3", "S9") or dst in ("S2", "S-3", "S9"):
            mine = _outcome(spmd, mesh, fn, src, dst)
            theirs = _outcome(ref, mesh, fn, src, dst)
            assert mine[0] == theirs[0], (fn, src, dst, mine, theirs)
            if mine[0] == "SpmdTypeError":  # the same shard named
                assert mine[1][:1] == theirs[1][:1], (fn, src, dst, mine, theirs)
            assert mine[0] != "ok"
            checked += 1
    assert checked == len(VALUES) ** 2 - 5 ** 2


def test_reinterpret_refuses_shards_as_the_reference(mesh):
    """Every shard, equal on both sides or out of range, is the pair's
    ValueError with the reference's text (no no-op, no range error)."""
    for src, dst in [("S0", "S0"), ("S9", "P"), ("V", "S-1")]:
        with spmd.set_current_mesh(mesh), pytest.raises(ValueError) as ei:
            spmd.reinterpret(torch.randn(4, 4), "tp", src=_value(spmd, src),
                             dst=_value(spmd, dst))
        assert str(ei.value).startswith(
            "reinterpret does not support S(i). Use V instead, or use convert for "
            "semantics-preserving conversions. Got src="), str(ei.value)
