"""Mesh axes and the per-thread current mesh.

A ``MeshAxis`` is an interned layout id of the C core; equal layouts are the
same object.  The open set_current_mesh() regions of a thread are kept here,
in the order they were entered, with what only Python needs (axis names,
the process groups of a DeviceMesh); the core holds the innermost one's
interned mesh id, the only one the checker reads.
"""

import contextlib
import os
import threading
import weakref
from typing import Any, FrozenSet, Iterable, Iterator, Optional

from ._errors import SpmdTypeError
from ._lib import ops
from ._open_regions import OpenRegions
from ._settings import ScopedSetting

__all__ = ["MeshAxis", "set_current_mesh", "current_mesh", "current_mesh_names",
           "current_mesh_all_names", "normalize_axis", "flatten_axes", "set_printoptions"]


def _check_axis_id(axis_id):
    """A core axis id, or TypeError/ValueError saying what was given."""
    if not isinstance(axis_id, int) or isinstance(axis_id, bool):
        raise TypeError(f"MeshAxis(axis_id) takes a core axis id (an int); got "
                        f"{type(axis_id).__name__} {axis_id!r}. Use MeshAxis.of(process_group) "
                        f"or MeshAxis.of(size, stride)")
    try:
        ops.axis_layout(axis_id)
    except RuntimeError:
        raise ValueError(f"MeshAxis({axis_id}): no axis has this id. Use "
                         f"MeshAxis.of(process_group) or MeshAxis.of(size, stride)") from None


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
            if obj is None or axis_id.__class__ is not int:  # True would hit id 1
                _check_axis_id(axis_id)
                obj = super().__new__(cls)
                obj._id = axis_id
                cls._by_id[axis_id] = obj
            return obj

    @classmethod
    def of(cls: Any, group_or_size: Any, stride: Any = None) -> "MeshAxis":
        """``MeshAxis.of(pg)`` (cached per group) or ``MeshAxis.of(size, stride)``."""
        if isinstance(group_or_size, MeshAxis):
            return group_or_size
        if isinstance(group_or_size, (int, list, tuple)) and not isinstance(group_or_size, bool):
            if stride is None:
                raise TypeError("MeshAxis.of(size) needs a stride: MeshAxis.of(size, stride)")
            sizes = list(group_or_size) if isinstance(group_or_size, (list, tuple)) else [group_or_size]
            strides = list(stride) if isinstance(stride, (list, tuple)) else [stride]
            try:
                return cls(ops.axis_intern(sizes, strides))
            except RuntimeError as e:  # the core's misuse of a layout is the caller's ValueError
                raise ValueError(f"MeshAxis.of({group_or_size!r}, {stride!r}): "
                                 f"{str(e).removeprefix('cspmd_axis_intern: ')}") from None
        if stride is not None:
            raise TypeError("MeshAxis.of(process_group) takes no stride")
        return _axis_of_group(group_or_size)

    @property
    def id(self):
        """The core's id for this axis."""
        return self._id

    def size(self) -> int:
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
        """The names registered for this axis (a frozenset; empty if none).

        >>> MeshAxis.of(3, 7).names
        frozenset()
        """
        # The core's debug display lists every name: "a/b(trivial){layout}".
        text = ops.axis_display(self._id, True)
        if text.startswith("MeshAxis(") or text.startswith("{"):
            return frozenset()
        text = text[:text.rfind("{")]
        if text.endswith("(trivial)"):
            text = text[:-len("(trivial)")]
        return frozenset(text.split("/"))

    def isorthogonal(self, *others):
        """True if this axis and ``others`` are jointly radix separable."""
        return bool(ops.axes_orthogonal([self._id] + [MeshAxis.of(o)._id for o in others]))

    def __le__(self, other):
        """Subgroup order: ``a <= b`` iff a's ranks-from-zero are b's.

        >>> MeshAxis.of(2, 2) <= MeshAxis.of(4, 1)
        True
        """
        if not isinstance(other, MeshAxis):
            return NotImplemented
        return bool(ops.axis_le_checked(self._id, other._id))

    def __lt__(self, other):
        if not isinstance(other, MeshAxis):
            return NotImplemented
        return self is not other and bool(ops.axis_le_checked(self._id, other._id))

    def __ge__(self, other):
        if not isinstance(other, MeshAxis):
            return NotImplemented
        return bool(ops.axis_le_checked(other._id, self._id))

    def __gt__(self, other):
        if not isinstance(other, MeshAxis):
            return NotImplemented
        return self is not other and bool(ops.axis_le_checked(other._id, self._id))

    def __repr__(self):
        return ops.axis_display(self._id, _debug[0])

    def __reduce__(self):
        sizes, strides = self.layout()
        return (MeshAxis.of, (list(sizes) or [1], list(strides) or [1]))


_debug = [os.environ.get("MESH_AXIS_DEBUG", "") == "1"]
ops.axis_print_debug_set(_debug[0])
_names = {}  # every registered name -> axis
_dist_state = {"module": None}  # set_dist's stand-in for torch.distributed


def set_dist(module: Any) -> None:
    """Use ``module`` instead of torch.distributed for rank and group queries
    (None restores torch.distributed)."""
    _dist_state["module"] = module


_group_axes = weakref.WeakKeyDictionary()


def _ranks_axis(pg):
    import torch.distributed as dist

    d = _dist_state["module"] or dist
    try:
        ranks = d.get_process_group_ranks(pg)
    except Exception as e:  # not a process group
        raise TypeError(f"expected a ProcessGroup, MeshAxis or axis name, got {pg!r}") from e
    return MeshAxis(ops.axis_from_ranks(sorted(ranks)))


def _group_desc(pg):
    desc = getattr(pg, "group_desc", None)
    return desc if desc and desc != "undefined" else None


def bind_group(pg):
    """Let raw torch.distributed collectives on ``pg`` find its axis, without
    naming the axis: the group's description names it on the group's first
    use (here or in a raw collective), as in the reference."""
    axis = _ranks_axis(pg)
    name = getattr(pg, "group_name", None)
    if name:
        ops.group_bind(name, axis.id, _group_desc(pg) or "")
    return axis


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
    axis = bind_group(pg)
    desc = _group_desc(pg)
    if desc:
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


def flatten_axes(axes: Iterable[Any]) -> "MeshAxis":
    """The axis spanning all of ``axes`` (at least one; mutually orthogonal,
    else ValueError).

    >>> flatten_axes([MeshAxis.of(2, 8), MeshAxis.of(2, 4)]) == MeshAxis.of(4, 4)
    True
    """
    if isinstance(axes, (MeshAxis, str)) or not hasattr(axes, "__iter__"):
        raise TypeError(f"flatten_axes: axes must be a sequence of mesh axes, got {axes!r}")
    axes = [MeshAxis.of(a) for a in axes]
    return MeshAxis(ops.axes_flatten([a.id for a in axes]))


class set_printoptions:
    """Set how MeshAxis values print: ``debug=True`` shows every name and the
    layout (``SP/TP{4:1}``).  Works as a statement or as a context manager
    that restores the previous options on exit.  The environment variable
    ``MESH_AXIS_DEBUG=1`` sets the initial value.

    >>> with set_printoptions(debug=True):
    ...     repr(MeshAxis.of(4, 1)).endswith("4:1)") or "{4:1}" in repr(MeshAxis.of(4, 1))
    True
    """

    def __init__(self, *, debug=None):
        if debug is not None and not isinstance(debug, bool):
            raise TypeError(f"set_printoptions: debug must be a bool, got {debug!r}")
        # The statement applies at once; entering the with block turns it
        # into a block (what it replaced goes back below the block).
        self._debug = debug
        self._replaced = _printoptions.set(debug) if debug is not None else None
        self._cell = None

    def __enter__(self):
        cell = [_debug[0] if self._debug is None else self._debug]
        self._cell = cell  # known before it opens: __exit__ closes it
        try:
            _printoptions.open(cell, self._replaced)
        except BaseException:  # no block: the statement is taken back too
            if self._replaced is not None:
                _printoptions.revert(self._replaced)
            raise
        return self

    def __exit__(self, *exc):
        cell, self._cell = self._cell, None
        if cell is not None:
            _printoptions.close(cell)
        return False


def _set_debug(debug):
    _debug[0] = bool(debug)
    ops.axis_print_debug_set(_debug[0])


# set_printoptions blocks may close in any order; the innermost open one
# decides, and the statement form sets the innermost one's value.
_printoptions = ScopedSetting(lambda: _debug[0], _set_debug)


def _reset_names():
    """Forget every registered axis name (between tests).  The process
    groups' axes are forgotten too, so that a group resolved again registers
    its name again: a reset never leaves a group's axis unnamed for good."""
    ops.axis_names_reset()
    _names.clear()
    _group_axes.clear()


# ---- the current mesh ------------------------------------------------------

class _Entry:
    __slots__ = ("axes", "names", "all_names", "pgs", "local_axes", "id")

    def __init__(self, axes, names, all_names, pgs, local_axes=frozenset(), id=0):
        self.axes, self.names, self.all_names, self.pgs = axes, names, all_names, pgs
        self.local_axes, self.id = local_axes, id

    def with_local_axes(self, local_axes):
        """A new entry (each open region is its own object) with these local
        axes and its interned core mesh id."""
        mesh_id = ops.mesh_intern([a.id for a in self.axes], [a.id for a in local_axes])
        return _Entry(self.axes, self.names, self.all_names, self.pgs, local_axes, mesh_id)


_tls = threading.local()


class _MeshState(OpenRegions):
    """A thread's open set_current_mesh() regions (each an _Entry): the
    core's current mesh is the innermost one's interned id, 0 for none."""

    __slots__ = ()

    def _apply(self, entry):
        mesh_id = entry.id if entry is not None else 0
        if self.on_owner():
            ops.mesh_apply(mesh_id)
        else:
            # A region of another thread closed here: this thread's mesh
            # stays; the owner applies the posted one at its next op or
            # collective.
            ops.mesh_post(self.mailbox, mesh_id)


def _state():
    s = getattr(_tls, "mesh", None)
    if s is None:
        s = _tls.mesh = _MeshState()
    return s


def _stack():
    return _state().frames


def _entry_of(axes):
    """Build a mesh entry from what set_current_mesh accepts."""
    names, pgs = {}, {}
    if axes is None:
        stack = _stack()
        if not stack:
            raise RuntimeError("set_current_mesh() without axes requires a current mesh")
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


def _outer_first(axes):
    """The axes outermost first, in the core's one order (cspmd_axes_sort_outer)."""
    return [MeshAxis(i) for i in ops.axes_sort_outer([a.id for a in axes])]


def _resolve_local_axes(local_axes, entry):
    """Validate ``local_axes`` against a mesh entry: names,
    MeshAxis or process groups, no duplicates, inside the mesh, and exactly
    the outermost axes.  Returns a frozenset of MeshAxis."""
    if isinstance(local_axes, (str, MeshAxis)) or not hasattr(local_axes, "__iter__"):
        raise TypeError(f"set_current_mesh: local_axes must be a tuple of axes or names, got "
                        f"{local_axes!r}")
    local_axes = tuple(local_axes)
    unknown = tuple(a for a in local_axes if isinstance(a, str) and a not in entry.all_names)
    if unknown:
        raise ValueError(f"local_axes contains names not present in this mesh: {unknown!r}; "
                         f"available names: {tuple(sorted(entry.all_names))!r}")
    resolved = tuple(entry.all_names[a] if isinstance(a, str) else MeshAxis.of(a)
                     for a in local_axes)
    if len(set(resolved)) != len(resolved):
        dups = ", ".join(repr(a) for a in _outer_first({a for a in resolved
                                                         if resolved.count(a) > 1}))
        raise ValueError(f"local_axes must not contain duplicate axes; got {local_axes!r}; "
                         f"duplicate axes: ({dups})")
    rset = frozenset(resolved)
    if not rset <= entry.axes:
        outside = ", ".join(repr(a) for a in _outer_first(rset - entry.axes))
        mesh_names = ", ".join(repr(a) for a in sorted(entry.axes, key=repr))
        raise ValueError(f"local_axes contains axes outside this mesh: ({outside}); current "
                         f"mesh axes: ({mesh_names})")
    ordered = _outer_first(entry.axes)
    if rset != frozenset(ordered[:len(rset)]):
        local_names = ", ".join(repr(a) for a in resolved)
        mesh_names = ", ".join(repr(a) for a in ordered)
        raise ValueError("local_axes must come before all global axes in outer-to-inner mesh "
                         f"order; got local_axes=({local_names}) for mesh=({mesh_names})")
    return rset


@contextlib.contextmanager
def set_current_mesh(axes: Any = None, *, local_axes: Iterable[Any] = ()) -> Iterator[Any]:
    """Make ``axes`` the current mesh of this thread for the block.

    Accepts a DeviceMesh (named dims), a dict ``{name: axis}``, a set of
    axes or process groups, or None (re-push the current mesh, e.g. to
    change ``local_axes``).  Size-1 axes are dropped but stay resolvable by
    name.  ``local_axes`` (names, MeshAxis or process groups) marks an
    outermost prefix of the mesh's axes as local under global checking: V
    needs no partition spec there and no shard propagation happens.

    >>> with set_current_mesh({"tp": MeshAxis.of(4, 1)}):
    ...     sorted(current_mesh_names())
    ['tp']
    """
    entry = _entry_of(axes)
    entry = entry.with_local_axes(_resolve_local_axes(local_axes, entry))
    s = _state()  # the opener's, wherever the region is closed
    try:
        s.enter(entry)
        yield
    finally:
        s.leave(entry)


def _current():
    stack = _stack()
    return stack[-1] if stack else None


def current_mesh() -> Optional[FrozenSet["MeshAxis"]]:
    """The current mesh's non-trivial axes (a frozenset), or None."""
    e = _current()
    return None if e is None else e.axes


def current_mesh_names() -> Any:
    """``{name: axis}`` of the current mesh's non-trivial axes."""
    e = _current()
    return {} if e is None else dict(e.names)


def current_mesh_all_names() -> Any:
    """``{name: axis}`` of every axis of the current mesh, size-1 ones too."""
    e = _current()
    return {} if e is None else dict(e.all_names)


def current_local_axes():
    """The current mesh's ``local_axes`` (a frozenset; empty without a mesh).

    >>> current_local_axes()
    frozenset()
    """
    e = _current()
    return frozenset() if e is None else e.local_axes


def normalize_axis(axis: Any) -> "MeshAxis":
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
            avail = ", ".join(sorted(e.all_names)) or "(no named axes)"
            msg = f"No mesh axis named {axis!r} in the current mesh. Available: {avail}"
            if any(axis in outer.all_names for outer in _stack()):
                msg += (f". Note: {axis!r} exists in an outer mesh on the stack -- did you "
                        f"mean to use it outside the current set_current_mesh() context?")
            raise SpmdTypeError(msg)
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
                           "an ambient DeviceMesh. Wrap the call in set_current_mesh(device_mesh), "
                           "or pass a ProcessGroup directly.")
    a = normalize_axis(axis) if isinstance(axis, str) else axis
    pg = e.pgs.get(a)
    if pg is None:
        raise RuntimeError(f"Axis {axis!r} is not in the current mesh.")
    return pg
