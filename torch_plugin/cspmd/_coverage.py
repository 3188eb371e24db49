"""Which tensor arguments a running ``spmd_typecheck`` hook has accounted
for (passed to a ``cspmd.rules`` operation, ``assert_type`` or
``rules.ignore``).  A leaf module: ``cspmd.runtime`` (``assert_type``) and
``cspmd.rules`` (which runs the hook and checks coverage) both record here.
"""

import contextlib
import threading
from typing import Iterator, Optional, Set

import torch

__all__: list = []

# A thread-local, not a ContextVar: assert_type also runs under Dynamo
# tracing, which cannot trace ContextVar.get.
_tls = threading.local()


class _Coverage:
    """The ids of the tensors the running hook has accounted for."""

    __slots__ = ("touched",)

    def __init__(self) -> None:
        self.touched: Set[int] = set()


def _cov() -> Optional[_Coverage]:
    """The record of the hook running on this thread, if any."""
    return getattr(_tls, "coverage", None)


def _touch(*values: object) -> None:
    """Record every tensor among ``values`` as accounted for."""
    cov = getattr(_tls, "coverage", None)
    if cov is None:
        return
    for v in values:
        if isinstance(v, torch.Tensor):
            cov.touched.add(id(v))


@contextlib.contextmanager
def _coverage() -> Iterator[_Coverage]:
    """Run a hook with a fresh record (nested hooks keep their own)."""
    prev = _cov()
    cov = _tls.coverage = _Coverage()
    try:
        yield cov
    finally:
        _tls.coverage = prev
