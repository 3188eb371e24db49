"""Which ops and tensor kinds reach a candidate dispatch key, on the torch of
this Python: the evidence behind the checker's key (docs/dev/architecture.md,
"The dispatch key").

    python tools/key_probe/run.py [KEY ...]     # default: the candidates below

For each key, in a fresh process: compiles key_probe.cpp against this torch
(once, into ~/.cache/cspmd/key_probe/), registers a recording fallback on the
key, turns the key on in the thread's included set and runs one small program
per tensor kind or mode, printing which ops arrived.  An op name ending in
@python arrived with a Python-key operand (a tensor subclass not yet
unwrapped, i.e. the key is reached before the Python key); @meta with a meta
operand; @before-mode with a TorchDispatchMode still on the stack (the key
is reached before the mode's handler runs).  "-" means nothing arrived: that kind runs unchecked on the key.
"""

import json
import os
import subprocess
import sys

CANDIDATES = ["Fake", "PrivateUse3", "FPGA"]
HERE = os.path.dirname(os.path.abspath(__file__))


def build():
    import torch

    minor = int(torch.__version__.split(".")[1])
    cache = os.path.expanduser(f"~/.cache/cspmd/key_probe/torch{torch.__version__}")
    lib = os.path.join(cache, "key_probe.so")
    src = os.path.join(HERE, "key_probe.cpp")
    if os.path.exists(lib) and os.path.getmtime(lib) > os.path.getmtime(src):
        return lib
    os.makedirs(cache, exist_ok=True)
    root = os.path.dirname(torch.__file__)
    inc = os.path.join(root, "include")
    cmd = ["c++", "-shared", "-fPIC", "-O1", "-std=c++20" if minor >= 14 else "-std=c++17",
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           "-isystem", inc, "-isystem", os.path.join(inc, "torch", "csrc", "api", "include"),
           src, "-o", lib, "-L" + os.path.join(root, "lib"), "-ltorch", "-ltorch_cpu", "-lc10"]
    subprocess.run(cmd, check=True)
    return lib


def scenarios():
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    def cpu_add():
        torch.ones(3) + torch.ones(3)

    def composite_explicit():
        torch.ones(3).unsqueeze(0)

    def factories():
        torch.zeros(3)
        torch.randn(3)

    def backward():
        a = torch.ones(3, requires_grad=True)
        b = (a * 2).sum()
        probe.take()
        b.backward()

    def meta():
        torch.empty(3, device="meta") + torch.empty(3, device="meta")

    def fake_tensor_mode():
        with FakeTensorMode():
            x = torch.empty(3)
            probe.take()
            torch.relu(x)

    def subclass():
        from torch.testing._internal.two_tensor import TwoTensor

        t = TwoTensor(torch.ones(3), torch.ones(3))
        probe.take()
        t + t

    def dispatch_mode():
        from torch.utils._python_dispatch import TorchDispatchMode

        class PassThrough(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        x = torch.ones(3)
        probe.take()
        with PassThrough():
            x + x

    def sparse():
        s = torch.ones(2, 2).to_sparse()
        probe.take()
        s + s

    def nested():
        n = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
        probe.take()
        n * 2

    def quantized():
        q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
        probe.take()
        q.dequantize()

    def inference_mode():
        with torch.inference_mode():
            torch.ones(3) + torch.ones(3)

    return [cpu_add, composite_explicit, factories, backward, meta, fake_tensor_mode,
            subclass, dispatch_mode, sparse, nested, quantized, inference_mode]


probe = None


def run_one(key):
    global probe
    import torch

    torch.ops.load_library(build())
    probe = torch.ops.key_probe
    out = {"torch": torch.__version__, "key": key}
    owners = list(probe.owners(key))
    out["registered_by_others"] = owners[:5] + ([f"... {len(owners)} in all"] if len(owners) > 5 else [])
    err = probe.arm(key)
    if err:
        out["arm"] = err.splitlines()[0]
        return out
    before = probe.included()
    for fn in scenarios():
        probe.include(True)
        probe.take()
        try:
            fn()
            seen = list(dict.fromkeys(probe.take()))
        except Exception as e:  # noqa: BLE001 -- the probe reports what broke
            seen = [f"error: {type(e).__name__}: {str(e).splitlines()[0][:100]}"]
        probe.include(False)
        out[fn.__name__] = seen[:6] + (["..."] if len(seen) > 6 else []) if seen else ["-"]
    after = probe.included()
    probe.take()
    torch.ones(3) + torch.ones(3)
    late = list(probe.take())
    out["off_leaves_nothing"] = after == before and not late or [before, after, late]
    return out


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(run_one(sys.argv[2])))
        return
    build()
    for key in sys.argv[1:] or CANDIDATES:
        r = subprocess.run([sys.executable, __file__, "--one", key], capture_output=True, text=True)
        if r.returncode != 0:
            print(json.dumps({"key": key, "crashed": r.stderr.strip().splitlines()[-1:]}))
        else:
            print(r.stdout.strip())


if __name__ == "__main__":
    main()
