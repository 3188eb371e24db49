"""unittest cases for cspmd.testing, run in a fresh interpreter by
test_testing.py (they create and destroy default process groups, which the
pytest session's shared fake mesh cannot allow)."""

import contextlib
import io
import unittest
from unittest import mock

import torch
import torch.distributed as dist

import cspmd as spmd
from cspmd.checker import typecheck
from cspmd.testing import (FakeProcessGroupTestCase, LocalTensorTestCase, fake_mesh,
                           fake_pg)

import exits


def _relu_of_partial_raises(test, axis):
    """Checking is live: relu of a Partial tensor is a type error."""
    p = torch.randn(4)
    spmd.assert_type(p, {axis: spmd.P})
    with typecheck(), test.assertRaises(spmd.SpmdTypeError):
        torch.relu(p)


class FakePgTest(unittest.TestCase):
    def test_group_for_the_block_then_gone(self):
        with fake_pg(4) as pg:
            self.assertTrue(dist.is_initialized())
            self.assertEqual((pg.size(), dist.get_rank()), (4, 0))
            x = torch.randn(4)
            spmd.assert_type(x, {pg: spmd.P})
            with typecheck():
                y = spmd.all_reduce(x, pg, src=spmd.P, dst=spmd.R)
            self.assertEqual(spmd.get_local_type(y), {spmd.MeshAxis.of(pg): spmd.R})
            _relu_of_partial_raises(self, pg)
        self.assertFalse(dist.is_initialized())
        with fake_pg(8) as pg:  # torn down fully: a second group of another size
            self.assertEqual(pg.size(), 8)
        self.assertFalse(dist.is_initialized())

    def test_default_world_size_matches_the_reference(self):
        with fake_pg() as pg:
            self.assertEqual(pg.size(), 4)

    def test_torn_down_on_error(self):
        with self.assertRaises(KeyError), fake_pg(2):
            raise KeyError("boom")
        self.assertFalse(dist.is_initialized())

    def test_bad_world_size(self):
        for bad in (0, -1, 2.0, True, "4"):
            with self.assertRaisesRegex(ValueError, "world_size must be a positive int"):
                fake_pg(bad)
        self.assertFalse(dist.is_initialized())

    def test_nested_group_is_refused_and_changes_nothing(self):
        with fake_pg(4) as pg:
            with self.assertRaisesRegex(RuntimeError, "already initialized"), fake_pg(2):
                pass
            self.assertTrue(dist.is_initialized())
            self.assertEqual(dist.get_world_size(), 4)
            self.assertIs(dist.distributed_c10d._get_default_group(), pg)


class FakeMeshTest(unittest.TestCase):
    def test_mesh_of_shape_and_names(self):
        with fake_mesh((2, 4), ("dp", "tp")) as mesh:
            self.assertEqual(tuple(mesh.shape), (2, 4))
            self.assertEqual(mesh.mesh_dim_names, ("dp", "tp"))
            self.assertEqual(dist.get_world_size(), 8)
            self.assertEqual(mesh.get_group("tp").size(), 4)
            with spmd.set_current_mesh(mesh):
                x = torch.randn(4)
                spmd.assert_type(x, {"dp": spmd.R, "tp": spmd.V})
                with typecheck():
                    self.assertEqual(spmd.get_local_type(x * 2), {
                        spmd.normalize_axis("dp"): spmd.R, spmd.normalize_axis("tp"): spmd.V})
                    with self.assertRaises(spmd.SpmdTypeError):
                        x + torch.randn(4)  # strict: no type on the mesh's axes
        self.assertFalse(dist.is_initialized())

    def test_one_dim_default_name(self):
        with fake_mesh(3) as mesh:
            self.assertEqual(mesh.mesh_dim_names, ("tp",))
            self.assertEqual(mesh.get_group("tp").size(), 3)

    def test_bad_shapes_and_names(self):
        cases = [((2, 4), None, "needs mesh_dim_names"), ((2, 0), ("a", "b"), "positive ints"),
                 ((), None, "positive ints"), ((2, 4), ("a",), "2 non-empty names"),
                 ((2, 2), ("a", "a"), "distinct")]
        for shape, names, msg in cases:
            with self.assertRaisesRegex(ValueError, msg):
                fake_mesh(shape, names)
        with self.assertRaisesRegex(TypeError, "int or a tuple of ints"):
            fake_mesh(None)
        self.assertFalse(dist.is_initialized())


class InterruptedTest(unittest.TestCase):
    """A KeyboardInterrupt at any step of entering or leaving fake_pg() /
    fake_mesh() -- before or after the group exists -- leaves no group."""

    def patch_steps(self, inject):
        import torch.distributed.device_mesh as device_mesh

        import cspmd.mesh as mesh_mod
        targets = [(dist, "init_process_group"), (dist.distributed_c10d, "_get_default_group"),
                   (device_mesh, "init_device_mesh"), (dist, "destroy_process_group"),
                   (mesh_mod, "_reset_names")]
        stack = contextlib.ExitStack()
        for owner, name in targets:
            stack.enter_context(mock.patch.object(owner, name, inject.wrap(getattr(owner, name))))
        return stack

    def every_step(self, run):
        probe = exits.Inject(0)
        with self.patch_steps(probe):
            run()
        self.assertGreaterEqual(probe.calls, 3)
        for n in range(1, probe.calls + 1):
            with self.patch_steps(exits.Inject(n)):
                with self.assertRaisesRegex(KeyboardInterrupt, f"injected at step {n}"):
                    run()
            self.assertFalse(dist.is_initialized(), f"a group is left after step {n}")
        run()
        self.assertFalse(dist.is_initialized())

    def test_fake_pg(self):
        def run():
            with fake_pg(4) as pg:
                self.assertEqual(pg.size(), 4)
        self.every_step(run)

    def test_fake_mesh(self):
        def run():
            with fake_mesh((2, 2), ("dp", "tp")) as mesh:
                self.assertEqual(mesh.get_group("tp").size(), 2)
        self.every_step(run)


class WorldSizeOnly(FakeProcessGroupTestCase):
    WORLD_SIZE = 4

    def test_pg_and_1d_mesh(self):
        self.assertEqual(self.pg.size(), 4)
        self.assertEqual(self.mesh.mesh_dim_names, ("tp",))
        self.assertIs(dist.distributed_c10d._get_default_group(), self.pg)
        _relu_of_partial_raises(self, self.mesh.get_group("tp"))


class MeshShape(FakeProcessGroupTestCase):
    MESH_SHAPE = (2, 3)
    MESH_DIM_NAMES = ("dp", "tp")

    def test_world_size_from_shape(self):
        self.assertEqual(self.WORLD_SIZE, 6)
        self.assertEqual(tuple(self.mesh.shape), (2, 3))
        self.assertEqual(self.mesh.get_group("dp").size(), 2)
        _relu_of_partial_raises(self, self.mesh.get_group("dp"))


class LocalTensors(LocalTensorTestCase):
    WORLD_SIZE = 4

    def test_every_rank_computed_and_checked(self):
        from torch.distributed._local_tensor import LocalTensor
        x = self.rank_map(lambda r: torch.full((2,), float(r)))
        self.assertIsInstance(x, LocalTensor)
        spmd.assert_type(x, {self.pg: spmd.P})
        with typecheck():
            with self.assertRaises(spmd.SpmdTypeError):
                torch.relu(x)
            y = spmd.all_reduce(x, self.pg, src=spmd.P, dst=spmd.R)
            z = spmd.convert(y, self.pg, src=spmd.R, dst=spmd.P)
        self.assertIs(spmd.get_axis_local_type(z, self.pg), spmd.P)
        for r, t in z._local_tensors.items():
            self.assertTrue(torch.equal(t, torch.full((2,), 6.0 if r == 0 else 0.0)))

    def test_mode_is_left_after_the_test(self):
        from torch.distributed._local_tensor import local_tensor_mode
        self.assertIs(local_tensor_mode(), self.mode)


class LocalTensorModeEnds(unittest.TestCase):
    def test_no_mode_after_the_class(self):
        from torch.distributed._local_tensor import local_tensor_mode

        class One(LocalTensorTestCase):
            WORLD_SIZE = 2

            def test_anything(self):
                pass

        out = io.StringIO()
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(One)
        result = unittest.TextTestRunner(stream=out).run(suite)
        self.assertTrue(result.wasSuccessful(), out.getvalue())
        self.assertIsNone(local_tensor_mode())
        self.assertFalse(dist.is_initialized())

if __name__ == "__main__":
    unittest.main()
