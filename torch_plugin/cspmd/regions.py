"""Typed regions: ``local()``, ``local_map`` and the typed ``no_typecheck``.

A region boundary checks (and refines) the types of the arguments with
``assert_type`` in the caller's mode, runs the body, and stamps the results
with ``assert_type``.  Nothing here runs per op: the body's ops reach the C
kernel as usual.
"""

import contextlib
import functools
from typing import Any, Callable, TypeVar
from typing import Iterator

import torch

from ._errors import SpmdTypeError
from ._lib import ops
from ._traceback import api_boundary
from . import checker as _checker
from .checker import is_type_checking, no_typecheck, typecheck
from .types import PartitionSpec, PerMeshAxisLocalSpmdType, SpmdType

__all__ = ["local", "local_map", "Infer", "out_partial_axes"]


class _InferType:
    """``Infer``: let the body's ops infer the types (``in_types`` only)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "Infer"

    def __reduce__(self):
        return (_InferType, ())


Infer = _InferType()


@contextlib.contextmanager
def local() -> Iterator[None]:
    """Local SPMD for the block (global shard propagation suspended); a no-op
    when checking is off.

    >>> with local():
    ...     pass
    """
    if not is_type_checking():
        yield
        return
    with typecheck(local=True):
        yield


@contextlib.contextmanager
def out_partial_axes(*axes: Any) -> Iterator[None]:
    """Declare the mesh axes on which the ops of the block make their results
    Partial (a contraction or a sum over a sharded dim), in global mode.

    The core checks the declaration against what shard propagation derives:
    an op of the block whose result becomes Partial on an undeclared axis
    raises ``SpmdTypeError`` before it runs, and so does the end of the
    block when some declared axis was never made Partial.  Regions nest (the
    innermost declares; a Partial made in it counts for the outer ones too).  Local mode has nothing to check it against
    (``ValueError``); with checking off the block runs unchecked.

    >>> with out_partial_axes("tp"):  # doctest: +SKIP
    ...     y = x @ w                  # x: S(1), w: S(0) on tp -> y: P on tp
    """
    if len(axes) == 1 and isinstance(axes[0], (set, frozenset, list, tuple)):
        axes = tuple(axes[0])
    if not is_type_checking():
        yield
        return
    from .mesh import normalize_axis
    ids = [normalize_axis(a).id for a in axes]
    region = None
    try:
        region = ops.partial_decl_open(ids)
        yield
    except BaseException:
        if region is not None:
            _end(region, check=False)  # the body's own error is the one to see
        raise
    # The region's own end, wherever it is among the open ones: regions
    # held by generators may end in any order.
    _end(region, check=True)


def _end(region, check):
    """End an out_partial_axes region.  check: raise its end check (a
    declared axis never made Partial).  A region closed on another thread
    than its opener's raises RuntimeError (the core's regions are the
    opener's).  An interrupt of the end is finished (retried once, an end
    that had happened already is fine), then raised."""
    try:
        ops.partial_decl_end(region)
    except SpmdTypeError:
        if check:
            raise
    except BaseException as e:
        if isinstance(e, Exception):
            raise  # not open on this thread
        try:
            ops.partial_decl_end(region)
        except Exception:  # noqa: BLE001 -- the end check, or ended already
            pass
        raise


def _is_spec_leaf(spec):
    return (spec is None or isinstance(spec, (dict, PartitionSpec, SpmdType,
                                              PerMeshAxisLocalSpmdType))
            or spec is Infer)


def _stamp_leaf(name, what, x, spec, path):
    from .runtime import assert_type
    where = f"local_map[{name}]: {what}{path}"
    if spec is Infer:
        raise SpmdTypeError(f"local_map[{name}]: {what} contains Infer at a leaf; only the bare "
                            "value of in_types may be Infer.")
    is_tensor = isinstance(x, torch.Tensor)
    if spec is None:
        if is_tensor:
            raise SpmdTypeError(f"{where} is a tensor but its type is None; give it a type "
                                "({axis: R|I|V|P|S(i)}) or pass a non-tensor there")
        return
    if not is_tensor:
        raise SpmdTypeError(f"{where} has a type {spec!r} but the value is not a tensor "
                            f"({type(x).__name__}); use None for non-tensor leaves")
    if isinstance(spec, (dict, SpmdType, PerMeshAxisLocalSpmdType)):
        assert_type(x, spec)
    elif isinstance(spec, PartitionSpec):
        assert_type(x, {}, spec)
    elif (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], dict)
          and (spec[1] is None or isinstance(spec[1], (tuple, list)))):
        assert_type(x, spec[0], spec[1])  # a plain tuple spec as spmd_types 0.2.x took it
    else:
        raise SpmdTypeError(f"{where}: unrecognized type {spec!r}; expected a dict "
                            "{axis: R|I|V|P|S(i)}, a PartitionSpec, a (dict, PartitionSpec) "
                            "pair or None")


def _walk(name, what, x, spec, path=""):
    """Walk ``x`` (the prototype) against ``spec``; stamp each leaf."""
    if isinstance(x, (list, tuple)) and not isinstance(x, PartitionSpec):
        if spec is Infer:
            _stamp_leaf(name, what, x, spec, path)
        if (not isinstance(spec, (list, tuple)) or isinstance(spec, PartitionSpec)
                or len(spec) != len(x)):
            n = len(spec) if isinstance(spec, (list, tuple)) else None
            raise SpmdTypeError(
                f"local_map[{name}]: {what} pytree structure does not match "
                f"{'input' if what == 'input_types' else 'output'}: at {path or 'the root'} "
                f"the value is a {type(x).__name__} of {len(x)} items but the types are "
                f"{'a sequence of %d items' % n if n is not None else repr(spec)}")
        for i, (a, b) in enumerate(zip(x, spec)):
            _walk(name, what, a, b, f"{path}[{i}]")
        return
    if isinstance(x, dict):
        if not isinstance(spec, dict) or set(spec) != set(x):
            raise SpmdTypeError(
                f"local_map[{name}]: {what} pytree structure does not match "
                f"{'input' if what == 'input_types' else 'output'}: at {path or 'the root'} "
                f"the value is a dict with keys {sorted(map(str, x))} but the types are "
                f"{spec!r}")
        for k in x:
            _walk(name, what, x[k], spec[k], f"{path}[{k!r}]")
        return
    _stamp_leaf(name, what, x, spec, path)


def _boundary(fn, in_types, out_types, body_context):
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not is_type_checking():
            return fn(*args, **kwargs)
        return _checked(args, kwargs)

    @api_boundary
    def _checked(args, kwargs):
        if in_types is not Infer:
            spec = in_types
            if isinstance(spec, list) or (isinstance(spec, tuple)
                                          and not isinstance(spec, PartitionSpec)):
                spec = tuple(spec)
            _walk(name, "input_types", args, spec)
        if out_types is Infer:
            raise SpmdTypeError(f"local_map[{name}]: output_types contains Infer at a leaf; "
                                "only the bare value of in_types may be Infer.")
        with body_context():
            out = fn(*args, **kwargs)
        _walk(name, "output_types", out, out_types)
        return out

    return wrapper


_F = TypeVar("_F", bound=Callable[..., Any])


def local_map(*, in_types: Any = Infer, out_types: Any) -> Callable[[_F], _F]:
    """Decorator: a local region with a typed boundary.

    Under checking, each positional argument is checked against
    ``in_types`` (same structure as the arguments; a leaf is a dict
    ``{axis: R|I|V|P|S(i)}``, a PartitionSpec, a ``(dict, PartitionSpec)``
    pair or None for a non-tensor), the body runs under ``local()``, and the
    results are stamped with ``out_types``.  Off checking it just calls the
    function.  String axes resolve at call time.

    >>> @local_map(in_types=({"tp": V},), out_types={"tp": P})  # doctest: +SKIP
    ... def partial_sum(x):
    ...     return x.sum(0)
    """
    def deco(fn):
        if not callable(fn):
            raise TypeError(f"local_map: expected a function to decorate, got "
                            f"{type(fn).__name__}")
        return _boundary(fn, in_types, out_types, local)

    return deco


class _TypedNoTypecheck:
    """``@no_typecheck(out_types=..., in_types=Infer)``: the local_map
    boundary with the body run unchecked."""

    def __init__(self, in_types, out_types):
        self._in, self._out = in_types, out_types

    def __call__(self, fn):
        if not callable(fn):
            raise TypeError(f"no_typecheck(out_types=...): expected a function to decorate, "
                            f"got {type(fn).__name__}")
        return _boundary(fn, self._in, self._out, no_typecheck)

    def __enter__(self):
        raise TypeError("no_typecheck(out_types=...) is a decorator, not a context manager; "
                        "use plain no_typecheck() as a context manager")

    def __exit__(self, *exc):
        return False


def _typed_no_typecheck(kwargs):
    if set(kwargs) - {"in_types", "out_types"} or "out_types" not in kwargs:
        raise TypeError("out_types is required for typed no_typecheck")
    return _TypedNoTypecheck(kwargs.get("in_types", Infer), kwargs["out_types"])


_checker._typed_region[0] = _typed_no_typecheck
