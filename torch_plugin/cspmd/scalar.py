"""``Scalar``: a Python number with an explicit SPMD type.

A Scalar passed to a torch function while checking is on reaches the op as
a 0-d tensor carrying its type, so the type is an operand of the op's
inference (``R + Scalar(v, V)`` is V).  Where a function needs a plain
number (a size, a dim), the raw value is passed instead.  With checking off,
Scalars are unwrapped to their raw values.
"""

import numbers

import torch

__all__ = ["Scalar"]


def _unwrap(v):
    if isinstance(v, Scalar):
        return v.value
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(e) for e in v)
    return v


class Scalar:
    """A number with a local SPMD type.

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import V
    >>> s = Scalar(2.0, {MeshAxis.of(4, 1): V}); float(s)
    2.0
    """

    __slots__ = ("value", "spmd_type", "_type_id")

    def __init__(self, value, spmd_type):
        if isinstance(value, bool) or not isinstance(value, numbers.Number):
            raise TypeError(f"Scalar value must be an int, float or complex, got "
                            f"{type(value).__name__}")
        from .runtime import _type_id, type_to_dict
        self.value = value
        self._type_id = _type_id(spmd_type, 0)
        self.spmd_type = type_to_dict(self._type_id)

    def _typed_tensor(self):
        from ._lib import ops
        t = torch.tensor(self.value)
        ops.set_type(t, self._type_id)
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from .checker import is_type_checking, no_typecheck
        kwargs = kwargs or {}
        if is_type_checking():
            def typed(v):
                if isinstance(v, Scalar):
                    with no_typecheck():
                        return v._typed_tensor()
                if isinstance(v, (list, tuple)):
                    return type(v)(typed(e) for e in v)
                return v
            try:
                return func(*typed(args), **{k: typed(v) for k, v in kwargs.items()})
            except TypeError:
                pass  # a position that needs a plain number
        return func(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()})

    def _merge(self, other, op):
        from .checker import is_type_checking
        raw = op(self.value, other.value if isinstance(other, Scalar) else other)
        if not is_type_checking():
            return raw
        if isinstance(other, Scalar):
            if set(self.spmd_type) != set(other.spmd_type):
                return NotImplemented
            merged = {}
            for a, t in self.spmd_type.items():
                u = other.spmd_type[a]
                if t == u:
                    merged[a] = t
                elif {t.name, u.name} == {"R", "V"}:
                    merged[a] = t if t.name == "V" else u
                else:
                    return NotImplemented
            return Scalar(raw, merged)
        return Scalar(raw, self.spmd_type)

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
