"""``annotate_module``: type a module's parameters and buffers once, by name.

A real model has hundreds of parameters; writing ``assert_type`` for each is
where annotations go missing.  ``annotate_module(model, {pattern: type})``
walks ``named_parameters()`` and ``named_buffers()`` and asserts, for each
name, the type of the first pattern that matches it.  Names no pattern
matches (without ``default``) and patterns that match no name are errors:
a typo must not leave a parameter silently untyped.

Python only carries data here: each type is interned and refined against
the tensor's current one by the core (``assert_type``'s path); all of them
are checked before any is set, so an error changes nothing.
"""

from fnmatch import fnmatchcase
from typing import Any

import torch

from . import _lib
from ._errors import SpmdTypeError
from ._type_ids import _type_id
from .runtime import assert_type
from .types import SpmdType

ops = _lib.ops

__all__ = ["annotate_module"]

_SHOWN = 8  # names listed in an error before "..."


def _listing(names):
    shown = ", ".join(names[:_SHOWN])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _SHOWN else "")


def _split(type_):
    if isinstance(type_, SpmdType):
        return type_.local_type, type_.partition_spec
    return type_, None


def annotate_module(module: torch.nn.Module, types: Any, *, default: Any = None) -> torch.nn.Module:
    """Assert the type of every parameter and buffer of ``module`` by name.

    ``types`` maps name patterns (``fnmatch``-style: ``*`` matches any
    characters, dots included; an exact name matches itself) to anything
    ``assert_type`` accepts: ``{axis: R|I|V|P|S(d)}``, a bare type for every
    current mesh axis, or an ``SpmdType``.  Patterns are tried in order and
    the first match wins, so put specific patterns before general ones.
    ``default`` types the names no pattern matches; without it they raise
    ``ValueError``, as does a pattern matching nothing.  Tied parameters
    are annotated once.  Returns ``module``.

    >>> lin = torch.nn.Linear(4, 4)
    >>> _ = annotate_module(lin, {"weight": {tp: V}, "bias": {tp: R}})
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"annotate_module: expected a torch.nn.Module, got "
                        f"{type(module).__name__}")
    if not isinstance(types, dict):
        raise TypeError(f"annotate_module: types must be a dict {{name pattern: type}}, got "
                        f"{type(types).__name__}")
    for pattern in types:
        if not isinstance(pattern, str) or not pattern:
            raise TypeError(f"annotate_module: name patterns must be non-empty strings, got "
                            f"{pattern!r}")
    kind = type(module).__name__
    named = list(module.named_parameters()) + list(module.named_buffers())
    plan, unmatched, used = [], [], set()
    for name, tensor in named:
        pattern = next((p for p in types if fnmatchcase(name, p)), None)
        if pattern is not None:
            used.add(pattern)
            plan.append((name, tensor, types[pattern]))
        elif default is not None:
            plan.append((name, tensor, default))
        else:
            unmatched.append(name)
    unused = [p for p in types if p not in used]
    if unused:
        raise ValueError(f"annotate_module: pattern(s) {_listing([repr(p) for p in unused])} "
                         f"match no parameter or buffer of {kind} (names: "
                         f"{_listing([n for n, _ in named]) or 'none'})")
    if unmatched:
        raise ValueError(f"annotate_module: no pattern matches {_listing(unmatched)} of {kind}: "
                         f"add a pattern for them or pass default=")
    # Every type is interned and refined against the current one first:
    # an error names the tensor and leaves every tensor as it was.
    for name, tensor, type_ in plan:
        local, spec = _split(type_)
        try:
            ops.type_refine(ops.get_type(tensor), _type_id(local, tensor.dim(), spec))
        except SpmdTypeError as e:
            raise type(e)(f"annotate_module: {kind}.{name}: {e.msg}", **e.fields()) from None
        except (TypeError, ValueError) as e:
            raise type(e)(f"annotate_module: {kind}.{name}: {e}") from None
    for name, tensor, type_ in plan:
        assert_type(tensor, type_)
    return module
