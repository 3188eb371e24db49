"""Op-level tracing: each checked op logged with its operand and result types.

Lines go to the logger ``cspmd.runtime.trace`` at INFO:
``<user file:line>  aten::add.Tensor({tp: R}, {tp: V}) -> {tp: V}``; lines
whose types are all ``{}`` are left out.  Off by default (one relaxed load per
op); ``CSPMD_TRACE=1`` (or ``SPMD_TYPES_TRACE=1``) turns it on at import.
Unlike the reference, the context manager affects op lines too.
"""

import contextlib
import logging
import os
from typing import Iterator

from ._lib import ops
from ._settings import ScopedSetting

__all__ = ["trace"]

logger = logging.getLogger("cspmd.runtime.trace")


def _emit(line):
    """Called by the C kernel for each traced op."""
    logger.info(line)


@contextlib.contextmanager
def trace(enabled: bool = True) -> Iterator[None]:
    """Trace every checked op (and assert_type) inside the block.

    >>> with trace():
    ...     pass
    """
    with _tracing.scoped(bool(enabled)):
        yield


# Blocks may close in any order; the innermost open one decides.
_tracing = ScopedSetting(ops.trace_enabled, ops.trace_set)


if os.environ.get("CSPMD_TRACE", os.environ.get("SPMD_TYPES_TRACE")) == "1":
    ops.trace_set(True)
