"""cspmd's pytest plugin (entry point ``pytest11``, installed with the package).

* ``pytest --spmd-typecheck`` runs every test's body inside
  ``cspmd.checker.typecheck()``;
* ``@pytest.mark.spmd_typecheck(strict=True, local=True)`` does so for one
  test (``strict=False`` is the permissive mode);
* the ``spmd_mesh`` fixture makes a fake process group and a CPU DeviceMesh of
  the requested shape, sets it as the current mesh for the test, and tears
  all of it down afterwards: ``mesh = spmd_mesh((2, 4), ("dp", "tp"))``.

Fixtures run outside the checked region (building inputs is not checked);
the test function's body runs inside it. cspmd (and so torch) is imported
only by a test that asks for checking or for the fixture, so pytest runs
that use neither pay nothing.
"""

import contextlib

import pytest

_MARK = "spmd_typecheck"


def pytest_addoption(parser):
    parser.getgroup("cspmd").addoption(
        "--spmd-typecheck", action="store_true", default=False,
        help="run every test inside cspmd.checker.typecheck() (SPMD type checking)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{_MARK}(strict=True, local=True): run this test inside "
        "cspmd.checker.typecheck(); strict=False checks in permissive mode")


def _checking_args(item):
    """The typecheck() arguments for ``item``, or None when it runs unchecked.
    A marker's arguments win over the command-line flag's defaults."""
    mark = item.get_closest_marker(_MARK)
    if mark is None and not item.config.getoption("--spmd-typecheck"):
        return None
    kwargs = dict(mark.kwargs) if mark is not None else {}
    if mark is not None and mark.args:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{_MARK} takes keyword "
                                f"arguments only (strict=..., local=...), got {mark.args!r}")
    unknown = set(kwargs) - {"strict", "local"}
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{_MARK} got unknown "
                                f"arguments {sorted(unknown)}; it takes strict= and local=")
    strict = kwargs.get("strict", True)
    if not isinstance(strict, bool):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{_MARK}(strict=...) must be "
                                f"True or False, got {strict!r}")
    return {"strict_mode": "strict" if strict else "permissive",
            "local": kwargs.get("local")}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    args = _checking_args(item)
    if args is None:
        yield
        return
    import cspmd.checker
    with cspmd.checker.typecheck(**args):
        yield


@pytest.fixture
def spmd_mesh():
    """``spmd_mesh(shape, mesh_dim_names=None)``: a fake process group of
    ``prod(shape)`` ranks and a CPU DeviceMesh of ``shape``, set as the
    current mesh until the test ends; returns the mesh. One per test."""
    with contextlib.ExitStack() as stack:
        made = []

        def make(shape, mesh_dim_names=None):
            if made:
                raise RuntimeError("spmd_mesh: one mesh per test (the fake process group "
                                   "is the default group)")
            import cspmd
            from cspmd.testing import fake_mesh
            mesh = stack.enter_context(fake_mesh(shape, mesh_dim_names))
            stack.enter_context(cspmd.set_current_mesh(mesh))
            made.append(mesh)
            return mesh

        yield make
