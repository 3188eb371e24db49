"""Run a function on N local Gloo ranks (loopback only), bounded in time.

``run_world(ws, fn, *args, timeout=60)`` spawns ``ws`` processes (start
method "spawn"), initializes ``dist.init_process_group("gloo",
init_method="tcp://127.0.0.1:<free port>", ...)`` in each, calls
``fn(rank, ws, *args)`` and returns the list of per-rank return values.
``fn`` must be a top-level function of an importable module (it is looked
up by module name, falling back to the module's file).  If any rank raises,
``WorkerError`` carries every rank's traceback; if the ranks do not all
finish within ``timeout`` seconds, they are killed and ``TimeoutError`` is
raised.  Nothing is left running either way.

The limits (``timeout``, ``grace``, and Gloo's own ``pg_timeout``) are
idle-machine seconds (time_limits.py): a loaded machine stretches them, so a
slow start is not taken for a hang.
"""

import datetime
import importlib
import importlib.util
import os
import pickle
import queue
import socket
import sys
import time
import traceback

import torch.multiprocessing as mp

from time_limits import Deadline, load_factor

__all__ = ["run_world", "free_port", "WorkerError"]


class WorkerError(AssertionError):
    """One or more ranks raised; the message holds their tracebacks."""


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load(module, path, name):
    try:
        mod = importlib.import_module(module)
    except ImportError:
        spec = importlib.util.spec_from_file_location(module, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module] = mod
        spec.loader.exec_module(mod)
    return getattr(mod, name)


def _entry(rank, ws, port, module, path, name, args, pg_timeout, q):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ws,
            timeout=datetime.timedelta(seconds=pg_timeout))
        fn = _load(module, path, name)
        # Plain pickle, by value: a tensor put on the queue as-is travels as a
        # shared-memory handle that dies with this process, which may exit
        # before the parent unpickles it.
        res = pickle.dumps(fn(rank, ws, *args))
        q.put((rank, True, res))
    except BaseException:  # noqa: BLE001 -- report everything to the parent
        q.put((rank, False, traceback.format_exc()))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def run_world(ws, fn, *args, timeout=60.0, pg_timeout=30.0, grace=10.0):
    """Run ``fn(rank, ws, *args)`` on ``ws`` Gloo ranks; per-rank results.

    Once a rank has failed, the others get ``grace`` more seconds (they may be
    blocked in a collective the failed rank never joins), then are killed."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    module = fn.__module__
    path = os.path.abspath(sys.modules[module].__file__)
    # Gloo counts wall-clock seconds: scaled to the load at the start
    pg_seconds = pg_timeout * load_factor()
    procs = [ctx.Process(target=_entry, daemon=True,
                         args=(r, ws, port, module, path, fn.__name__, args, pg_seconds, q))
             for r in range(ws)]
    for p in procs:
        p.start()
    deadline = Deadline(timeout)
    grace_deadline = None  # from the first failure on
    results, errors = {}, {}
    try:
        while len(results) + len(errors) < ws:
            grace_over = grace_deadline is not None and grace_deadline.expired()
            if (grace_over or deadline.expired()) and errors:
                within = f"the {grace} s grace" if grace_over else f"{timeout} s"
                raise WorkerError(
                    f"ranks {sorted(errors)} failed; the others did not finish within "
                    f"{within} (killed)" +
                    "".join(f"\n--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items())))
            if deadline.expired():
                raise TimeoutError(
                    f"run_world({ws}, {fn.__name__}): ranks "
                    f"{sorted(set(range(ws)) - set(results) - set(errors))} did not finish "
                    f"within {timeout} s (finished: {sorted(results)}, failed: "
                    f"{sorted(errors)})" + "".join(
                        f"\n--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items())))
            try:
                rank, ok, payload = q.get(timeout=max(0.01, deadline.wait_time()))
            except queue.Empty:
                dead = [r for r, p in enumerate(procs)
                        if not p.is_alive() and p.exitcode not in (0, None)
                        and r not in results and r not in errors]
                if dead:
                    # A rank died without reporting (segfault, os._exit): give
                    # the queue a moment, then fail instead of waiting.
                    time.sleep(0.5)
                    if q.empty():
                        raise WorkerError(
                            f"rank(s) {dead} exited with codes "
                            f"{[procs[r].exitcode for r in dead]} without a result")
                continue
            if ok:
                results[rank] = pickle.loads(payload)
            else:
                errors[rank] = payload
                if grace_deadline is None:  # the others may now wait forever in a collective
                    grace_deadline = Deadline(grace)
        for p in procs:
            p.join(max(1.0, deadline.left()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
        q.close()
    if errors:
        raise WorkerError("".join(f"\n--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items())))
    return [results[r] for r in range(ws)]
