"""The local SPMD types: R, I, V, P and Shard(d), and partition specs.

Each value carries the integer code the C core uses; the core does all
reasoning over those codes.
"""

import enum

__all__ = [
    "PerMeshAxisLocalSpmdType", "R", "I", "V", "P", "Replicate", "Invariant", "Varying",
    "Partial", "Shard", "S", "PartitionSpec",
]


class PerMeshAxisLocalSpmdType(enum.Enum):
    """The local type of a tensor on one mesh axis.

    >>> R, R.backward_type()
    (R, P)
    """

    R = 1  # Replicate: same value on every rank, used independently
    I = 2  # noqa: E741  Invariant: same value, one computation duplicated
    V = 3  # Varying: a different value per rank
    P = 4  # Partial: the true value is the pending sum over ranks

    def __repr__(self):
        return self.name

    def backward_type(self):
        """The type of this type's gradient: R<->P, I->I, V->V."""
        return _DUAL[self]


R = Replicate = PerMeshAxisLocalSpmdType.R
I = Invariant = PerMeshAxisLocalSpmdType.I  # noqa: E741
V = Varying = PerMeshAxisLocalSpmdType.V
P = Partial = PerMeshAxisLocalSpmdType.P
_DUAL = {R: P, I: I, V: V, P: R}
_BY_CODE = {t.value: t for t in PerMeshAxisLocalSpmdType}


class Shard:
    """``S(d)``: Varying, and the global tensor is the concatenation of the
    per-rank tensors along dim ``d``.

    >>> S(0), S(0) == Shard(0), S(1).backward_type()
    (S(0), True, S(1))
    """

    __slots__ = ("dim",)

    def __init__(self, dim):
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"Shard dim must be an int, got {dim!r}")
        object.__setattr__(self, "dim", dim)

    def __setattr__(self, name, value):
        raise AttributeError("Shard is immutable")

    def __repr__(self):
        return f"S({self.dim})"

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def backward_type(self):
        """A shard's gradient is sharded the same way."""
        return self


S = Shard


def ltype_code(t, what="type"):
    """The core's code for R/I/V/P (S(d) counts as V)."""
    if isinstance(t, PerMeshAxisLocalSpmdType):
        return t.value
    if isinstance(t, Shard):
        return V.value
    raise TypeError(f"{what} must be one of R, I, V, P or S(i), got {t!r}")


def ltype_of(code):
    """The type for a core code."""
    return _BY_CODE[code]


class PartitionSpec(tuple):
    """One entry per tensor dim: None, a mesh axis, or a tuple of axes
    (major to minor).

    >>> PartitionSpec("tp", None)
    PartitionSpec(tp, None)
    """

    def __new__(cls, *entries):
        for e in entries:
            if isinstance(e, tuple) and not e:
                raise ValueError("PartitionSpec entries may not be empty tuples")
        return super().__new__(cls, entries)

    def __repr__(self):
        def one(e):
            if isinstance(e, tuple):
                return "(" + ", ".join(_axis_text(a) for a in e) + ")"
            return "None" if e is None else _axis_text(e)

        return "PartitionSpec(" + ", ".join(one(e) for e in self) + ")"


def _axis_text(a):
    return a if isinstance(a, str) else repr(a)
