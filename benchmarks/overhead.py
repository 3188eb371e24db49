"""Per-op overhead of cspmd's checker on small CPU tensors.

Plain eager vs checked, measured side by side in one run (implementations
alternate in rounds so machine noise hits both alike); prints microseconds
per op and the ratio.  Not a test.

    python benchmarks/overhead.py [--rounds N]
"""

import argparse
import sys
import timeit

import torch
import torch.distributed as dist
import torch.nn.functional as F

import cspmd as spmd
import cspmd.checker


def workloads(dp, tp):
    def typed(shape, t_dp, t_tp, grad=False):
        x = torch.randn(*shape, requires_grad=grad)
        spmd.assert_type(x, {dp: t_dp, tp: t_tp})
        return x

    R, V, P = spmd.R, spmd.V, spmd.P
    a, b = typed((8,), R, V), typed((8,), R, V)
    m1, m2 = typed((8, 8), R, V), typed((8, 8), R, R)
    ln_w, ln_b = typed((8,), R, R), typed((8,), R, R)
    p = typed((8,), R, P)
    return {
        "add": lambda: torch.add(a, b),
        "mul": lambda: torch.mul(a, b),
        "div_scalar": lambda: a / 2.0,
        "mm": lambda: torch.mm(m1, m2),
        "view": lambda: m1.view(64),
        "transpose": lambda: m1.t(),
        "sum": lambda: a.sum(),
        "cat": lambda: torch.cat([a, b]),
        "layer_norm": lambda: F.layer_norm(m1, (8,), ln_w, ln_b),
        "softmax": lambda: torch.softmax(m1, -1),
        "gelu": lambda: F.gelu(a),
        "all_reduce": lambda: spmd.all_reduce(p, tp, src=P, dst=spmd.R),
    }


def per_op_us(fn, number):
    return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(backend="fake", rank=0, world_size=8)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    with spmd.set_current_mesh(mesh):
        with spmd.checker.typecheck():
            work = workloads(dp, tp)
        best = {name: [float("inf"), float("inf")] for name in work}
        for _ in range(args.rounds):
            for name, fn in work.items():
                best[name][0] = min(best[name][0], per_op_us(fn, args.number))
                with spmd.checker.typecheck():
                    best[name][1] = min(best[name][1], per_op_us(fn, args.number))
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, 1 thread, "
          f"best of {args.rounds} rounds x 3 x {args.number} calls")
    print(f"| op | plain µs | checked µs | overhead µs | ratio |")
    print(f"|---|---:|---:|---:|---:|")
    for name, (plain, checked) in best.items():
        print(f"| {name} | {plain:.2f} | {checked:.2f} | {checked - plain:+.2f} | "
              f"{checked / plain:.2f}x |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
