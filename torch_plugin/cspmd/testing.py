"""Helpers to test parallel code in one process, on PyTorch's ``fake``
process-group backend: collectives return at once without talking to
another process, so a 2x4 mesh fits in one CPU-only test.

- ``fake_pg(world_size)``: a fake default process group for a ``with`` block;
- ``fake_mesh(shape, mesh_dim_names)``: the same plus a DeviceMesh of that shape;
- ``FakeProcessGroupTestCase``: a ``unittest.TestCase`` base whose class has
  ``pg`` and ``mesh`` (``MESH_SHAPE``/``MESH_DIM_NAMES`` or ``WORLD_SIZE``);
- ``LocalTensorTestCase``: the same, with every test inside PyTorch's
  ``LocalTensorMode`` (all ranks' data in this process; ``rank_map`` builds
  a tensor per rank) -- see docs/testing.md.

Names and class attributes follow spmd_types' ``fake_pg`` and
``FakeProcessGroupTestCase``.  Every helper tears down what it set up (the
process group and cspmd's axis names), so tests do not leak into each other.
"""

import contextlib
import math
import unittest

from ._traceback import api_boundary

__all__ = ["fake_pg", "fake_mesh", "FakeProcessGroupTestCase", "LocalTensorTestCase"]

def _check_shape(shape, mesh_dim_names):
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"mesh shape must be an int or a tuple of ints, got {shape!r}") from None
    if not shape or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                            for n in shape):
        raise ValueError(f"mesh shape must be one or more positive ints, got {shape!r}")
    if mesh_dim_names is None:
        if len(shape) != 1:
            raise ValueError(f"a {len(shape)}-D mesh needs mesh_dim_names (one name per "
                             f"dim), e.g. ('dp', 'tp') for shape {shape!r}")
        mesh_dim_names = ("tp",)
    if isinstance(mesh_dim_names, str):
        mesh_dim_names = (mesh_dim_names,)
    mesh_dim_names = tuple(mesh_dim_names)
    if len(mesh_dim_names) != len(shape) or not all(isinstance(n, str) and n
                                                    for n in mesh_dim_names):
        raise ValueError(f"mesh_dim_names must be {len(shape)} non-empty names for shape "
                         f"{shape!r}, got {mesh_dim_names!r}")
    if len(set(mesh_dim_names)) != len(mesh_dim_names):
        raise ValueError(f"mesh_dim_names must be distinct, got {mesh_dim_names!r}")
    return shape, mesh_dim_names


def _require_no_group():
    """Refuse, changing nothing, when a default group exists (it is not
    ours to replace or to destroy)."""
    import torch.distributed as dist
    if dist.is_initialized():
        raise RuntimeError(
            "a default process group is already initialized; cspmd.testing creates its "
            "own fake one: call torch.distributed.destroy_process_group() first")


def _init_fake(world_size):
    """The fake default group; call it inside the ``try`` whose ``finally``
    runs :func:`_teardown`, after :func:`_require_no_group`: an interrupt
    anywhere in it then leaves no group behind."""
    import torch.distributed as dist
    # Importing FakeStore also registers the "fake" backend.
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group(backend="fake", rank=0, world_size=world_size, store=FakeStore())
    return dist.distributed_c10d._get_default_group()


def _teardown():
    """Destroy the default group and forget the axis names.  Both steps run
    even when the first raises, and a step that raises runs once more (an
    interrupt lands once): the first error is raised at the end."""
    import torch.distributed as dist

    from ._open_regions import run_every_step
    from .mesh import _reset_names

    def destroy():
        if dist.is_initialized():
            dist.destroy_process_group()

    run_every_step((destroy, _reset_names))


@contextlib.contextmanager
def _fake_pg(world_size):
    _require_no_group()
    try:
        yield _init_fake(world_size)
    finally:
        _teardown()


@api_boundary
def fake_pg(world_size=4):
    """A fake default process group of ``world_size`` ranks (this process is
    rank 0) for the ``with`` block; yields the group.

    >>> with fake_pg(4) as pg:
    ...     pg.size()
    4
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"fake_pg: world_size must be a positive int, got {world_size!r}")
    return _fake_pg(world_size)


@contextlib.contextmanager
def _fake_mesh(shape, names):
    from torch.distributed.device_mesh import init_device_mesh
    _require_no_group()
    try:
        _init_fake(math.prod(shape))
        yield init_device_mesh("cpu", shape, mesh_dim_names=names)
    finally:
        _teardown()


@api_boundary
def fake_mesh(shape, mesh_dim_names=None):
    """A fake process group of ``prod(shape)`` ranks and a CPU DeviceMesh of
    ``shape`` named ``mesh_dim_names`` (default ``("tp",)`` for a 1-D mesh)
    for the ``with`` block; yields the mesh.

    >>> with fake_mesh((2, 4), ("dp", "tp")) as mesh:
    ...     mesh.get_group("tp").size()
    4
    """
    return _fake_mesh(*_check_shape(shape, mesh_dim_names))


class FakeProcessGroupTestCase(unittest.TestCase):
    """Base class for tests on a fake process group, set up once per class.

    The class gets ``pg`` (the default group) and ``mesh`` (a CPU DeviceMesh).
    Set ``MESH_SHAPE`` and ``MESH_DIM_NAMES`` for a multi-dim mesh, or only
    ``WORLD_SIZE`` for a 1-D mesh named ``"tp"``; ``MESH_SHAPE`` wins, and
    ``WORLD_SIZE`` is then its product.  Checking is not turned on: enter
    ``typecheck()`` (under ``set_current_mesh(self.mesh)`` for strict mode)
    in the test.
    """

    MESH_SHAPE = None
    MESH_DIM_NAMES = ("tp",)
    WORLD_SIZE = 3

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from torch.distributed.device_mesh import init_device_mesh
        shape = cls.MESH_SHAPE if cls.MESH_SHAPE is not None else (cls.WORLD_SIZE,)
        shape, names = _check_shape(shape, cls.MESH_DIM_NAMES)
        cls.WORLD_SIZE = math.prod(shape)
        _teardown()  # a group left over by another test class
        try:
            cls.pg = _init_fake(cls.WORLD_SIZE)
            cls.mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        except BaseException:
            _teardown()
            raise

    @classmethod
    def tearDownClass(cls):
        _teardown()
        super().tearDownClass()


class LocalTensorTestCase(FakeProcessGroupTestCase):
    """``FakeProcessGroupTestCase`` whose tests run inside
    ``LocalTensorMode(WORLD_SIZE)``: a LocalTensor holds every rank's
    tensor, ops and cspmd's collectives compute every rank's result, and
    the LocalTensor carries one type, checked under ``typecheck()``.
    ``self.mode`` is the mode; ``rank_map(cb)`` makes a LocalTensor of
    ``cb(rank)`` for every rank (untyped: annotate it with assert_type)."""

    def setUp(self):
        super().setUp()
        from torch.distributed._local_tensor import LocalTensorMode
        self.mode = LocalTensorMode(self.WORLD_SIZE)
        self.mode.__enter__()
        self.addCleanup(self.mode.__exit__, None, None, None)

    def rank_map(self, cb):
        """A LocalTensor of ``cb(rank)`` for every rank (the callback runs
        with the mode off: its tensors are plain)."""
        return self.mode.rank_map(cb)
