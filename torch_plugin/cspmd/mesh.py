"""Mesh axes and the per-thread current mesh.

A ``MeshAxis`` is an interned layout id of the C core; equal layouts are the
same object.  The current-mesh stack lives in the core (per thread); this
module keeps, beside it, what only Python needs: axis names and the process
groups of a DeviceMesh.
"""

import contextlib
import threading
import weakref

from ._errors import SpmdTypeError
from ._lib import ops

__all__ = ["MeshAxis", "set_current_mesh", "current_mesh", "current_mesh_names",
           "current_mesh_all_names", "normalize_axis", "flatten_axes"]


class MeshAxis:
    """Which ranks communicate together: a layout of (size, stride) modes.

    >>> MeshAxis.of(4, 1) == MeshAxis.of([2, 2], [2, 1])
    True
    """

    _by_id = {}
    _lock = threading.Lock()
    __slots__ = ("_id", "__weakref__")

    def __new__(cls, axis_id):
        with cls._lock:
            obj = cls._by_id.get(axis_id)
            if obj is None:
                obj = super().__new__(cls)
                obj._id = axis_id
                cls._by_id[axis_id] = obj
            return obj

    @classmethod
    def of(cls, group_or_size, stride=None):
        """``MeshAxis.of(pg)`` (cached per group) or ``MeshAxis.of(size, stride)``."""
        if isinstance(group_or_size, MeshAxis):
            return group_or_size
        if isinstance(group_or_size, (int, list, tuple)) and not isinstance(group_or_size, bool):
            if stride is None:
                raise TypeError("MeshAxis.of(size) needs a stride: MeshAxis.of(size, stride)")
            sizes = list(group_or_size) if isinstance(group_or_size, (list, tuple)) else [group_or_size]
            strides = list(stride) if isinstance(stride, (list, tuple)) else [stride]
            return cls(ops.axis_from_layout(sizes, strides))
        if stride is not None:
            raise TypeError("MeshAxis.of(process_group) takes no stride")
        return _axis_of_group(group_or_size)

    @property
    def id(self):
        """The core's id for this axis."""
        return self._id

    def size(self):
        """Number of ranks on the axis."""
        n = 1
        for s in self.layout()[0]:
            n *= s
        return n

    def layout(self):
        """``(sizes, strides)`` of the canonical layout, outermost first."""
        flat = ops.axis_layout(self._id)
        return tuple(flat[0::2]), tuple(flat[1::2])

    @property
    def names(self):
        """The names registered for this axis."""
        return frozenset(n for n, a in _names.items() if a is self)

    def isorthogonal(self, *others):
        """True if this axis and ``others`` are jointly radix separable."""
        return ops.axes_orthogonal([self._id] + [MeshAxis.of(o)._id for o in others])

    def __le__(self, other):
        return ops.axis_le(self._id, other._id)

    def __lt__(self, other):
        return self != other and self <= other

    def __ge__(self, other):
        return other <= self

    def __gt__(self, other):
        return other < self

    def __repr__(self):
        return ops.axis_display(self._id, _debug[0])

    def __reduce__(self):
        sizes, strides = self.layout()
        return (MeshAxis.of, (list(sizes) or [1], list(strides) or [1]))


_debug = [False]
_names = {}  # every registered name -> axis
_group_axes = weakref.WeakKeyDictionary()


def _axis_of_group(pg):
    hook = getattr(pg, "__mesh_axis__", None)
    if callable(hook):
        return hook()
    try:
        cached = _group_axes.get(pg)
    except TypeError:
        cached = None
    if cached is not None:
        return cached
    import torch.distributed as dist

    from .runtime import _dist
    d = _dist() or dist
    try:
        ranks = d.get_process_group_ranks(pg)
    except Exception as e:  # not a process group
        raise TypeError(f"expected a ProcessGroup, MeshAxis or axis name, got {pg!r}") from e
    axis = MeshAxis(ops.axis_from_ranks(sorted(ranks)))
    desc = getattr(pg, "group_desc", None)
    if desc and desc != "undefined":
        register_name(axis, desc)
    try:
        _group_axes[pg] = axis
    except TypeError:
        pass
    return axis


def register_name(axis, name):
    """Register a display name for an axis."""
    ops.axis_name_add(axis.id, name)
    _names[name] = axis


def flatten_axes(axes):
    """The axis spanning all of ``axes`` (which must be mutually orthogonal)."""
    axes = [MeshAxis.of(a) for a in axes]
    return MeshAxis(ops.axes_flatten([a.id for a in axes]))


# ---- the current mesh ------------------------------------------------------

class _Entry:
    __slots__ = ("axes", "names", "all_names", "pgs")

    def __init__(self, axes, names, all_names, pgs):
        self.axes, self.names, self.all_names, self.pgs = axes, names, all_names, pgs


_tls = threading.local()


def _stack():
    s = getattr(_tls, "stack", None)
    if s is None:
        s = _tls.stack = []
    return s


def _entry_of(axes):
    """Build a mesh entry from what set_current_mesh accepts."""
    names, pgs = {}, {}
    if axes is None:
        stack = _stack()
        if not stack:
            raise RuntimeError("set_current_mesh(None) needs a current mesh to re-push")
        return stack[-1]
    if isinstance(axes, dict):
        for name, a in axes.items():
            names[name] = MeshAxis.of(a)
    elif hasattr(axes, "mesh_dim_names") and hasattr(axes, "get_group"):
        if not axes.mesh_dim_names:
            raise ValueError("set_current_mesh: the DeviceMesh needs mesh_dim_names")
        for name in axes.mesh_dim_names:
            pg = axes.get_group(name)
            axis = MeshAxis.of(pg)
            names[name] = axis
            pgs[axis] = pg
    elif isinstance(axes, (set, frozenset, list, tuple)):
        # A set of axes or process groups: no names.
        for a in axes:
            axis = MeshAxis.of(a)
            if not isinstance(a, MeshAxis):
                pgs[axis] = a
        nontrivial = frozenset(a for a in map(MeshAxis.of, axes) if a.size() > 1)
        return _Entry(nontrivial, {}, {}, pgs)
    else:
        raise TypeError(f"set_current_mesh: expected a dict of axes, a DeviceMesh or a set of "
                        f"axes, got {type(axes).__name__}")
    nontrivial = frozenset(a for a in names.values() if a.size() > 1)
    return _Entry(nontrivial, {n: a for n, a in names.items() if a.size() > 1}, names, pgs)


@contextlib.contextmanager
def set_current_mesh(axes=None):
    """Make ``axes`` the current mesh of this thread for the block.

    Accepts a DeviceMesh (named dims), a dict ``{name: axis}``, a set of
    axes or process groups, or None (re-push the current mesh).  Size-1 axes
    are dropped but stay resolvable by name.

    >>> with set_current_mesh({"tp": MeshAxis.of(4, 1)}):
    ...     sorted(current_mesh_names())
    ['tp']
    """
    entry = _entry_of(axes)
    ops.mesh_push([a.id for a in entry.axes])
    stack = _stack()
    stack.append(entry)
    try:
        yield
    finally:
        stack.pop()
        ops.mesh_pop()


def _current():
    stack = _stack()
    return stack[-1] if stack else None


def current_mesh():
    """The current mesh's non-trivial axes (a frozenset), or None."""
    e = _current()
    return None if e is None else e.axes


def current_mesh_names():
    """``{name: axis}`` of the current mesh's non-trivial axes."""
    e = _current()
    return {} if e is None else dict(e.names)


def current_mesh_all_names():
    """``{name: axis}`` of every axis of the current mesh, size-1 ones too."""
    e = _current()
    return {} if e is None else dict(e.all_names)


def normalize_axis(axis):
    """A MeshAxis from a MeshAxis, a ProcessGroup or a name in the current mesh."""
    if isinstance(axis, MeshAxis):
        return axis
    if isinstance(axis, str):
        e = _current()
        if e is None:
            raise SpmdTypeError(f"Cannot resolve axis name {axis!r}: no current mesh is set. "
                                "Use set_current_mesh() or pass a MeshAxis/ProcessGroup.")
        found = e.all_names.get(axis)
        if found is None:
            avail = ", ".join(sorted(e.all_names))
            raise SpmdTypeError(f"No mesh axis named {axis!r} in the current mesh. "
                                f"Available: {avail}")
        return found
    return MeshAxis.of(axis)


def process_group_for(axis):
    """The process group of ``axis``: a ProcessGroup is returned as is; a name
    or MeshAxis is looked up in the current mesh (which must be a DeviceMesh)."""
    if not isinstance(axis, (str, MeshAxis)):
        return axis
    e = _current()
    if e is None or not e.pgs:
        raise RuntimeError("Passing an axis name to a redistribution or collective API requires "
                           "an ambient DeviceMesh: use set_current_mesh(device_mesh).")
    a = normalize_axis(axis) if isinstance(axis, str) else axis
    pg = e.pgs.get(a)
    if pg is None:
        raise RuntimeError(f"Axis {axis!r} is not in the current mesh.")
    return pg
