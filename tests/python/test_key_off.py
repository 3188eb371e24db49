"""Turning checking on and off."""

import threading

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, V, SpmdTypeError
from cspmd.checker import no_typecheck, typecheck
from conftest import key_included, ltype


def _partial_plus_replicate(mesh):
    with spmd.set_current_mesh(mesh):
        p = spmd.assert_type(torch.ones(3), P)
        r = spmd.assert_type(torch.ones(3), R)
    return p, r


def _assert_off():
    assert not key_included()
    assert not spmd.is_type_checking()
    assert not spmd.TYPE_CHECKING


def test_key_on_inside_off_after(mesh):
    _assert_off()
    with typecheck():
        assert key_included()
        assert spmd._lib.ops.checker_key() in str(torch._C._dispatch_tls_local_include_set())
        assert spmd.is_type_checking() and spmd.TYPE_CHECKING
    _assert_off()
    p, r = _partial_plus_replicate(mesh)
    out = p + r      # runs: nothing is checked
    assert torch.equal(out, torch.full((3,), 2.0))


def test_key_off_after_exception(mesh):
    p, r = _partial_plus_replicate(mesh)
    with pytest.raises(ValueError):
        with typecheck():
            raise ValueError("boom")
    _assert_off()
    with pytest.raises(SpmdTypeError):
        with typecheck():
            p + r
    _assert_off()
    out = p + r
    assert torch.equal(out, torch.full((3,), 2.0))


def test_key_off_after_exception_in_nested_regions(mesh):
    p, r = _partial_plus_replicate(mesh)
    with pytest.raises(SpmdTypeError):
        with typecheck(), no_typecheck(), typecheck("permissive"):
            p + r
    _assert_off()


def test_untyped_results_outside(mesh):
    p, r = _partial_plus_replicate(mesh)
    assert not spmd.has_local_type(p * 2)


def test_no_typecheck_pauses(mesh):
    p, r = _partial_plus_replicate(mesh)
    with spmd.set_current_mesh(mesh), typecheck():
        with no_typecheck():
            assert not spmd.is_type_checking()
            assert not key_included()
            out = p + r                          # not checked
            assert not spmd.has_local_type(out)  # not typed
        assert spmd.is_type_checking() and key_included()
        with pytest.raises(SpmdTypeError):
            p + r


def test_no_typecheck_outside_is_noop():
    with no_typecheck():
        assert not spmd.is_type_checking()
    _assert_off()


def test_typecheck_inside_no_typecheck_reenables(mesh):
    p, r = _partial_plus_replicate(mesh)
    with spmd.set_current_mesh(mesh), typecheck():
        with no_typecheck():
            with typecheck():
                assert spmd.is_type_checking() and key_included()
                with pytest.raises(SpmdTypeError):
                    p + r
            assert not spmd.is_type_checking() and not key_included()
            p + r
        assert spmd.is_type_checking()


def test_strictness_inherited_and_restored(mesh, typed, tp_axis):
    with spmd.set_current_mesh(mesh):
        partial_ann = typed({tp_axis: V})
        full = typed(V)
        with typecheck("permissive") as m:
            assert m.strict is False
            assert ltype(partial_ann + full) == {"mesh_dp": "V", "mesh_tp": "V"}
            with no_typecheck():
                with typecheck() as m2:          # inherits permissive
                    assert m2.strict is False
                    assert ltype(partial_ann + full) == {"mesh_dp": "V", "mesh_tp": "V"}
            with typecheck("strict") as m3:
                assert m3.strict is True
                with pytest.raises(SpmdTypeError, match="missing axis mesh_dp"):
                    partial_ann + full
            # restored to permissive
            assert ltype(partial_ann + full) == {"mesh_dp": "V", "mesh_tp": "V"}
        with typecheck() as m4:                  # a fresh outermost region is strict
            assert m4.strict is True
            with pytest.raises(SpmdTypeError, match="missing axis mesh_dp"):
                partial_ann + full


def test_checking_is_per_thread(mesh):
    p, r = _partial_plus_replicate(mesh)
    seen = {}

    def worker():
        seen["checking"] = spmd.is_type_checking()
        seen["key"] = key_included()
        try:
            seen["sum"] = (p + r).tolist()
        except Exception as e:  # pragma: no cover - recorded for the assert
            seen["error"] = e

    with typecheck():
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        assert spmd.is_type_checking()
    assert seen == {"checking": False, "key": False, "sum": [2.0, 2.0, 2.0]}


def test_current_mesh_restored_after_exception(mesh):
    with pytest.raises(KeyError):
        with spmd.set_current_mesh(mesh):
            raise KeyError("x")
    assert spmd.current_mesh() is None
