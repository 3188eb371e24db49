"""``NdimWithSpmdType``: a value as a typing rule sees it -- a rank and an
SPMD type, no data.  The ``cspmd.rules`` operations return it; the
annotation functions of ``cspmd.runtime`` read and write its type as they
do a tensor's (a core type id, here held in a slot instead of the
tensor's BackendMeta).
"""

from ._codes import TYPE
from ._lib import ops

__all__ = ["NdimWithSpmdType"]


class NdimWithSpmdType:
    """A stand-in for a tensor in a typing rule: its rank and SPMD type.

    Returned by every ``cspmd.rules`` operation and accepted wherever a
    tensor is (``assert_type``, ``get_local_type``, ``get_partition_spec``,
    ``rules.*``).  It never claims sizes an opaque kernel might not keep.

    >>> NdimWithSpmdType(2)
    NdimWithSpmdType(ndim=2, {})
    """

    __slots__ = ("ndim", "_cspmd_type")

    def __init__(self, ndim: int) -> None:
        if isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 0:
            raise TypeError(f"NdimWithSpmdType: ndim must be a non-negative int, got {ndim!r}")
        self.ndim = ndim
        self._cspmd_type = TYPE.UNTYPED

    def dim(self) -> int:
        """The rank, as ``Tensor.dim()``."""
        return self.ndim

    def __repr__(self) -> str:
        return f"NdimWithSpmdType(ndim={self.ndim}, {ops.type_format(self._cspmd_type)})"
