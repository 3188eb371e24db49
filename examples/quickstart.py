"""The quick start of spmd_types' README, run under cspmd, showing what the
checker does: the type it infers for each tensor, then the error it raises
for a partial sum fed through a non-linear op.

One process: the `fake` process group stands in for 8 ranks as a 2x4 mesh.
"""
import torch
import torch.distributed as dist
import cspmd as spmd
import cspmd.checker
from torch.distributed.device_mesh import init_device_mesh

# Set up a fake process group (no GPUs needed)
dist.init_process_group(backend="fake", rank=0, world_size=8)
mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
dp = mesh.get_group("dp")
tp = mesh.get_group("tp")


def show(line, t):
    print(f"  {line:<44} # {spmd.get_local_type(t)}")


print(f"cspmd {spmd.__version__}, torch {torch.__version__}: 8 fake ranks as a 2x4 mesh (dp, tp)")
print("Types inferred by the checker (R Replicate, I Invariant, V Varying, P Partial):")
with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
    x = torch.randn(4)
    spmd.assert_type(x, {dp: spmd.R, tp: spmd.P})       # R on dp, partial on tp
    show("spmd.assert_type(x, {dp: R, tp: P})", x)
    y = spmd.all_reduce(x, tp, src=spmd.P, dst=spmd.R)  # sum across tp ranks
    show("y = spmd.all_reduce(x, tp, src=P, dst=R)", y)
    spmd.assert_type(y, {dp: spmd.R, tp: spmd.R})       # now replicated everywhere
    z = torch.mul(y, y)                                 # type inference: R * R -> R
    show("z = torch.mul(y, y)", z)
    spmd.assert_type(z, {dp: spmd.R, tp: spmd.R})
    w = x * 2                                           # linear: P * 2 stays P
    show("w = x * 2", w)

    print("\nA partial sum through a non-linear op is caught before it runs:")
    print("  torch.relu(x)")
    try:
        torch.relu(x)
    except spmd.SpmdTypeError as e:
        lines = str(e).splitlines()
        print("\nSpmdTypeError: " + "\n".join([lines[0]] + ["  " + l if l else l for l in lines[1:]]))

dist.destroy_process_group()
print("\nquickstart: ok")
