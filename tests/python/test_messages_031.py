"""spmd_types 0.3.1's message hints, compared with the installed reference
on the same programs: the cross-mesh and sub-axis hints of a missing-axis
error, the note about an axis name found in an outer mesh, and the
traceback-filtering note that str(err) carries when frames are removed."""

import pytest
import torch

import cspmd as spmd
import reference


def _libs():
    ref = reference.load()
    reference.load("spmd_types.checker")
    return spmd, ref


def _hint(text):
    """The Hint paragraph of an error message ("" if none)."""
    for para in text.split("\n\n"):
        if para.startswith("Hint: "):
            return para
    return ""


def _error(fn):
    try:
        fn()
    except spmd.SpmdTypeError as e:
        return str(e)
    except Exception as e:  # the reference's SpmdTypeError
        if type(e).__name__ != "SpmdTypeError":
            raise
        return str(e)
    raise AssertionError("no error")


# operand types: the tp axis whole, or split in two (2:2 outer, 2:1 inner)
CASES = {
    "sub-axis": ({"dp": "R", "tp": "V"}, {"dp": "R", (2, 1): "V"}),
    "cross-mesh compatible": ({"dp": "R", "tp": "V"}, {"dp": "R", (2, 2): "V", (2, 1): "V"}),
    "axis subset": ({"dp": "R"}, {"dp": "R", "tp": "V"}),
}


def _typed(lib, mesh, spec):
    axes = {"dp": lib.MeshAxis.of(mesh.get_group("dp")),
            "tp": lib.MeshAxis.of(mesh.get_group("tp"))}
    t = {axes[k] if isinstance(k, str) else lib.MeshAxis.of(*k): getattr(lib, v)
         for k, v in spec.items()}
    return lib.assert_type(torch.randn(4), t)


@pytest.mark.parametrize("name", list(CASES))
def test_missing_axis_hint_as_reference(mesh, name):
    """Strict mode with no current mesh: operands typed on different axis
    sets get the reference's hint (or none)."""
    texts = []
    for lib in _libs():
        a, b = (_typed(lib, mesh, s) for s in CASES[name])
        with lib.checker.typecheck():
            texts.append(_error(lambda: a + b))
    mine, theirs = texts
    assert mine.split("\n")[0] == theirs.split("\n")[0]
    assert _hint(mine) == _hint(theirs)
    assert _hint(mine)


def test_outer_mesh_note_as_reference(mesh):
    texts = []
    for lib in _libs():
        with lib.set_current_mesh(mesh), lib.set_current_mesh(mesh["tp"]):
            texts.append(_error(lambda: lib.assert_type(torch.randn(2), {"dp": lib.R})))
    assert texts[0] == texts[1]
    assert "Note: 'dp' exists in an outer mesh on the stack" in texts[0]


def test_unknown_axis_without_outer_mesh_has_no_note(mesh):
    with spmd.set_current_mesh(mesh["tp"]):
        text = _error(lambda: spmd.assert_type(torch.randn(2), {"ep": spmd.R}))
    assert text == "No mesh axis named 'ep' in the current mesh. Available: tp"


@pytest.mark.parametrize("mode", ["remove_frames", "quiet_remove_frames", "off"])
def test_traceback_note_in_str_as_reference(mesh, mode):
    """Where frames are removed, str(err) says how to see them all (after
    the message, before the failed call's context)."""
    notes = []
    for lib in _libs():
        x = _typed(lib, mesh, {"dp": "R", "tp": "R"})
        with lib.set_current_mesh(mesh), lib.checker.typecheck(), lib.traceback_filtering(mode):
            text = _error(lambda: lib.all_reduce(x, "tp", src=lib.P, dst=lib.R))
        notes.append(
            "\n\nSet SPMD_TYPES_TRACEBACK_FILTERING=off to see the full, unfiltered traceback."
            in text)
    assert notes[0] == notes[1] == (mode != "off")
