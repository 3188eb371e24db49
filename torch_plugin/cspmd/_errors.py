"""cspmd's exception types (importable without the native library)."""

from typing import Optional

__all__ = ["SpmdTypeError", "RedistributeError", "DTensorPropagationError"]


_CONTEXT_MARK = "\n\n  In "


class SpmdTypeError(RuntimeError):
    """A tensor's SPMD type does not fit the operation.

    A ``RuntimeError`` subclass on purpose: Tensor's arithmetic dunders turn a
    ``TypeError`` into ``NotImplemented`` and lose the message.

    >>> str(SpmdTypeError("bad", context="In add(...)"))
    'bad\\n\\nIn add(...)'
    """

    context: Optional[str]

    def __init__(self, msg: str, *, context: Optional[str] = None) -> None:
        if context is None and isinstance(msg, str):
            # The C kernel appends its operator context as "\n\n  In op(...)".
            head, sep, tail = msg.partition(_CONTEXT_MARK)
            if sep:
                msg, context = head, sep.lstrip("\n") + tail
        self.msg = msg
        self.context = context  # may be set later: str() reads it then
        super().__init__(msg)

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n\n{self.context}" if self.context else base


class RedistributeError(SpmdTypeError):
    """A collective on a mesh axis that is not innermost in its spec entry."""


class DTensorPropagationError(SpmdTypeError):
    """Global shard propagation cannot decide an op's output sharding."""
