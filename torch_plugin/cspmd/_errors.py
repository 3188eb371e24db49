"""cspmd's exception types (importable without the native library)."""

from typing import Any, Callable, NamedTuple, Optional, Tuple

__all__ = ["SpmdTypeError", "RedistributeError", "DTensorPropagationError", "ErrorOperand"]

# Set by cspmd._type_ids (a higher layer): type id -> {MeshAxis: type}.
_decode_type: Optional[Callable[[int], Any]] = None


class ErrorOperand(NamedTuple):
    """One argument of the call an error describes: a tensor (``dtype``,
    ``shape`` with None for an unknown size, and its type) or, for any
    other argument, its ``text``.  ``index`` is the tensor's position in a
    list argument, -1 otherwise."""

    name: str
    index: int
    dtype: Optional[str]
    shape: Optional[Tuple[Optional[int], ...]]
    type_id: int
    text: Optional[str]

    @property
    def type(self):
        """The tensor's local type ``{MeshAxis: R|I|V|P}`` (``{}`` when it
        has none); None for a non-tensor argument."""
        if self.dtype is None:
            return None
        return _decode_type(self.type_id) if _decode_type is not None else None


class SpmdTypeError(RuntimeError):
    """A tensor's SPMD type does not fit the operation.

    A ``RuntimeError`` subclass on purpose: Tensor's arithmetic dunders turn a
    ``TypeError`` into ``NotImplemented`` and lose the message.

    Raised by the checker, it carries the core's fields: ``msg`` (the error),
    ``context`` (the failed call described), ``op``, ``operands``
    (:class:`ErrorOperand` each), ``hint`` (the fix the message suggests),
    ``site`` (the user's line), and in backward ``backward_node`` and
    ``forward_site``.  Fields that do not apply are None (``operands``: ``()``).

    >>> str(SpmdTypeError("bad", context="In add(...)"))
    'bad\\n\\nIn add(...)'
    """

    context: Optional[str]

    def __init__(self, msg: str, *, context: Optional[str] = None, op: Optional[str] = None,
                 hint: Optional[str] = None, site: Optional[str] = None,
                 backward_node: Optional[str] = None, forward_site: Optional[str] = None,
                 operands=()) -> None:
        self.msg = msg
        self.context = context  # may be set later: str() reads it then
        self.op = op
        self.hint = hint
        self.site = site
        self.backward_node = backward_node
        self.forward_site = forward_site
        self.operands = tuple(o if isinstance(o, ErrorOperand) else ErrorOperand(*o)
                              for o in operands)
        super().__init__(msg)

    def fields(self) -> dict:
        """The keyword fields, to raise the same error with another ``msg``."""
        return {"context": self.context, "op": self.op, "hint": self.hint, "site": self.site,
                "backward_node": self.backward_node, "forward_site": self.forward_site,
                "operands": self.operands}

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n\n{self.context}" if self.context else base


class RedistributeError(SpmdTypeError):
    """A collective on a mesh axis that is not innermost in its spec entry."""


class DTensorPropagationError(SpmdTypeError):
    """Global shard propagation cannot decide an op's output sharding."""
