"""cspmd.testing: fake process group / mesh helpers and the unittest bases.

The cases themselves (fake_pg_cases.py) create and destroy default process
groups, so they run in a fresh interpreter, not beside this session's mesh.
"""

import ast
import inspect
import os
import subprocess
import sys

import reference

import cspmd.testing as testing

HERE = os.path.dirname(os.path.abspath(__file__))


def test_fake_pg_cases_pass_in_a_fresh_interpreter():
    proc = subprocess.run([sys.executable, "-m", "unittest", "-v", "fake_pg_cases"],
                          capture_output=True, text=True, timeout=300, cwd=HERE,
                          env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Ran 15 tests" in out and out.rstrip().endswith("OK"), out


def test_names_and_signatures_match_the_reference():
    ref_testing = reference.load("spmd_types._testing")
    # The reference's test cases import torch's internal common_utils, which
    # needs expecttest: read their class attributes from the source instead.
    path = os.path.join(reference.ref_dir(), "spmd_types", "_test_utils.py")
    with open(path) as f:
        classes = {c.name: c for c in ast.parse(f.read()).body if isinstance(c, ast.ClassDef)}
    def params(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert params(testing.fake_pg) == params(ref_testing.fake_pg.__wrapped__)
    for name in ("FakeProcessGroupTestCase", "LocalTensorTestCase"):
        assert hasattr(testing, name) and name in classes
    ref_attrs = {a.target.id: ast.literal_eval(a.value)
                 for a in classes["FakeProcessGroupTestCase"].body if isinstance(a, ast.AnnAssign)}
    assert set(ref_attrs) == {"MESH_SHAPE", "MESH_DIM_NAMES", "WORLD_SIZE"}
    for attr, value in ref_attrs.items():
        assert getattr(testing.FakeProcessGroupTestCase, attr) == value, attr
    assert issubclass(testing.LocalTensorTestCase, testing.FakeProcessGroupTestCase)


def test_public_helpers_are_documented():
    for name in testing.__all__:
        assert inspect.getdoc(getattr(testing, name)), name
