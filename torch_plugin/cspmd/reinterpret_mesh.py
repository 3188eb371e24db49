"""``reinterpret_mesh``: retag a tensor from one mesh presentation to another.

The C core checks compatibility and remaps the type and partition spec;
this module only converts the arguments and stamps the result.
"""

from typing import Any

import torch

from ._codes import STATUS, TYPE
from ._errors import SpmdTypeError
from ._lib import ops
from ._traceback import api_boundary
from .checker import no_typecheck
from .mesh import MeshAxis, _outer_first, normalize_axis
from .runtime import _check_tensor
from .types import normalize_local_type

__all__ = ["reinterpret_mesh"]

_UNTYPED = TYPE.UNTYPED


def _full_type_id(type_):
    """Intern a full destination type ``{axis: R|I|V|P}``, validated like a
    stored type: S(i) and other values are a TypeError."""
    t = normalize_local_type(type_)
    return ops.type_make([a.id for a in t], [lt.value for lt in t.values()], [])


def _dst_axes(type_):
    """The destination axes of the axes-only form."""
    if isinstance(type_, (set, frozenset)):
        return [normalize_axis(a) for a in type_]
    if hasattr(type_, "mesh_dim_names") and hasattr(type_, "get_group"):
        if not type_.mesh_dim_names:
            raise ValueError("reinterpret_mesh: a DeviceMesh type needs mesh_dim_names "
                             "(init_device_mesh(..., mesh_dim_names=...))")
        return [MeshAxis.of(type_.get_group(n)) for n in type_.mesh_dim_names]
    if isinstance(type_, (list, tuple)):
        return [MeshAxis.of(pg) for pg in type_]
    raise TypeError("reinterpret_mesh: type must be a dict {axis: R|I|V|P}, a frozenset of "
                    f"MeshAxis, a DeviceMesh or a sequence of process groups, got "
                    f"{type(type_).__name__}")


def _dst_text(dst):
    if isinstance(dst, dict):
        return "{" + ", ".join(f"{normalize_axis(a)!r}: {t!r}" for a, t in dst.items()) + "}"
    return "frozenset({" + ", ".join(repr(a) for a in _outer_first(dst)) + "})"


@api_boundary
def reinterpret_mesh(tensor: torch.Tensor, type: Any,  # noqa: A002 (the reference's name)
                     *, inplace: bool = False) -> torch.Tensor:
    """Retag a typed tensor onto another presentation of the same ranks.

    No data changes.  ``type`` is a full destination type ``{axis: R|I|V|P}``
    or only the destination axes (a frozenset of MeshAxis, a DeviceMesh, or
    a sequence of process groups), whose types are derived from the
    tensor's.  Returns an alias (the tensor itself if ``inplace``) carrying
    the new type and the remapped partition spec.

    >>> dp, cp, dp_cp = MeshAxis.of(2, 8), MeshAxis.of(2, 4), MeshAxis.of(4, 4)
    >>> x = assert_type(torch.zeros(2), {dp: V, cp: V})
    >>> get_local_type(reinterpret_mesh(x, {dp_cp: V})) == {dp_cp: V}
    True
    """
    _check_tensor(tensor, "reinterpret_mesh")
    if not isinstance(inplace, bool):
        raise TypeError(f"reinterpret_mesh: inplace must be a bool, got {inplace!r}")
    if isinstance(type, dict):
        dst, dst_id, dst_axes = type, _full_type_id(type), []
    else:
        axes = _dst_axes(type)
        dst, dst_id, dst_axes = frozenset(axes), _UNTYPED, [a.id for a in axes]
    src = ops.get_type(tensor)
    try:
        new, failed = ops.type_reinterpret_mesh(src, dst_id, dst_axes), None
    except SpmdTypeError as e:
        new, failed = None, e
    if failed is not None:  # raised again with the call described, as ops' errors are
        ops.error_raise(STATUS.ERR_SPMD_TYPE, failed.msg, "reinterpret_mesh", ["tensor", "type"],
                        [tensor, None], ["", _dst_text(dst)])
    if inplace:
        result = tensor
    else:
        with no_typecheck():
            result = tensor.view_as(tensor)
    ops.set_type(result, new)
    return result
