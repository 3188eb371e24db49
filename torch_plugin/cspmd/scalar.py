"""``Scalar``: a Python number with an explicit SPMD type.

A Scalar passed to a torch function while checking is on reaches torch as
its raw number; its type is parked in the core, and the first op the kernel
sees takes it as an operand of its inference, in place of the weak scalars
that plain numbers are (``R + Scalar(v, V)`` is V, ``P + Scalar(v, P)`` is
P, ``narrow(R, 0, Scalar(0, V), ...)`` is V).  With checking off,
Scalars are unwrapped to their raw values.
"""

import numbers
from typing import Any, Union

from ._lib import ops
from ._type_ids import _type_id, type_to_dict
from .checker import is_type_checking

__all__ = ["Scalar"]


def _unwrap(v):
    if isinstance(v, Scalar):
        return v.value
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(e) for e in v)
    return v


def _collect(v, out):
    """The Scalars among top-level arguments and directly inside lists."""
    for e in v:
        if isinstance(e, Scalar):
            out.append(e)
        elif isinstance(e, (list, tuple)):
            out.extend(x for x in e if isinstance(x, Scalar))


class Scalar:
    """A number with a local SPMD type.

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import V
    >>> s = Scalar(2.0, {MeshAxis.of(4, 1): V}); float(s)
    2.0
    """

    __slots__ = ("value", "spmd_type", "_type_id")

    def __init__(self, value: Union[int, float, complex], spmd_type: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, numbers.Number):
            raise TypeError(f"Scalar value must be an int, float or complex, got "
                            f"{type(value).__name__}")
        self.value = value
        self._type_id = _type_id(spmd_type, 0)
        self.spmd_type = type_to_dict(self._type_id)

    @property
    def local_type(self):
        """The scalar's type as ``{MeshAxis: R|I|V|P}`` (a copy)."""
        return dict(self.spmd_type)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        raw_args = _unwrap(args)
        raw_kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        if not is_type_checking():
            return func(*raw_args, **raw_kwargs)
        # The raw numbers go to torch; the Scalars' types are parked in the
        # core, and the first op the kernel sees takes them as operands in
        # place of the weak scalars the numbers would be.
        found = []
        _collect(args, found)
        _collect(tuple(kwargs.values()), found)
        ops.pending_scalars([s._type_id for s in found])
        try:
            return func(*raw_args, **raw_kwargs)
        finally:
            ops.pending_scalars([])

    def _merge(self, other, op):
        raw = op(self.value, other.value if isinstance(other, Scalar) else other)
        if not is_type_checking():
            return raw
        if isinstance(other, Scalar):
            try:  # the core merges the types
                merged = ops.type_merge_scalars(self._type_id, other._type_id)
            except TypeError:
                return NotImplemented
            return Scalar._of(raw, merged)
        return Scalar._of(raw, self._type_id)

    @classmethod
    def _of(cls, value, type_id):
        """A Scalar with an already interned type."""
        s = cls.__new__(cls)
        s.value, s._type_id, s.spmd_type = value, type_id, type_to_dict(type_id)
        return s

    def __add__(self, o): return self._merge(o, lambda a, b: a + b)
    def __radd__(self, o): return self._merge(o, lambda a, b: b + a)
    def __sub__(self, o): return self._merge(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._merge(o, lambda a, b: b - a)
    def __mul__(self, o): return self._merge(o, lambda a, b: a * b)
    def __rmul__(self, o): return self._merge(o, lambda a, b: b * a)
    def __truediv__(self, o): return self._merge(o, lambda a, b: a / b)
    def __rtruediv__(self, o): return self._merge(o, lambda a, b: b / a)
    def __neg__(self): return self._merge(0, lambda a, b: -a)
    def __pos__(self): return self._merge(0, lambda a, b: +a)
    def __abs__(self): return self._merge(0, lambda a, b: abs(a))
    def __float__(self): return float(self.value)
    def __int__(self): return int(self.value)
    def __bool__(self): return bool(self.value)
    def __hash__(self): return hash(self.value)
    def __eq__(self, o): return self.value == (o.value if isinstance(o, Scalar) else o)
    def __lt__(self, o): return self.value < (o.value if isinstance(o, Scalar) else o)
    def __repr__(self):
        types = ", ".join(f"{a!r}: {t!r}" for a, t in self.spmd_type.items())
        return f"Scalar({self.value!r}, {{{types}}})"
