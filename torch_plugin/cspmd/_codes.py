"""The core's codes, read from the library: the lists in cspmd.h (status
codes, local types, collectives, the reserved type ids) are the only place
a number is spelled.

>>> STATUS.OK, LT.NONE, COLL.ALL_REDUCE, TYPE.UNTYPED
(0, 0, 0, 0)
"""

import types as _types

from ._lib import ops

__all__ = ["STATUS", "LT", "COLL", "DTSRC", "PLACEMENT", "TYPE", "status_name"]


def _groups():
    names, values = ops.codes()
    groups = {}
    for name, value in zip(names, values):
        group, _, member = name.partition("_")
        groups.setdefault(group, {})[member] = value
    return groups


_all = _groups()
STATUS = _types.SimpleNamespace(**_all["STATUS"])
"""``STATUS.OK``, ``STATUS.ERR_SPMD_TYPE``, ... (cspmd_status_t)."""
LT = _types.SimpleNamespace(**_all["LT"])
"""``LT.NONE``, ``LT.R``, ``LT.I``, ``LT.V``, ``LT.P`` (cspmd_ltype_t)."""
COLL = _types.SimpleNamespace(**_all["COLL"])
"""``COLL.ALL_REDUCE``, ... (cspmd_coll_t)."""
DTSRC = _types.SimpleNamespace(**_all["DTSRC"])
"""``DTSRC.NONE``, ``DTSRC.BACKWARD``, ``DTSRC.OP``, ``DTSRC.INPUT`` (cspmd_dtype_source_t)."""
PLACEMENT = _types.SimpleNamespace(**_all["PLACEMENT"])
"""``PLACEMENT.NONE``, ``PLACEMENT.REPLICATE``, ``PLACEMENT.SHARD``, ``PLACEMENT.PARTIAL`` (cspmd_placement_t)."""
TYPE = _types.SimpleNamespace(**_all["TYPE"])
"""``TYPE.UNTYPED`` (no type attribute) and ``TYPE.EMPTY`` (``{}``)."""
_STATUS_NAMES = {v: "CSPMD_" + k for k, v in _all["STATUS"].items()}


def status_name(code):
    """``"CSPMD_ERR_VALUE"`` for -2 (the C ``cspmd_status_name``).

    >>> status_name(STATUS.ERR_VALUE)
    'CSPMD_ERR_VALUE'
    """
    return _STATUS_NAMES.get(code, "CSPMD_ERR_UNKNOWN")
