"""The one definition of "the user's frame" (error messages, traces, filtered
tracebacks, the anomaly-mode forward-op note).

A frame is the library's own when its file lies in the real install folder
of the ``cspmd`` or ``torch`` package, or in the standard-library modules
their calls pass through (``contextlib``, ``importlib``).  Locations, not
names: a user script in a folder called ``cspmd`` or ``torch_work`` is the
user's.  Error path only (and tracing): nothing here runs per op.
"""

import contextlib
import importlib
import os
import re
import sys
import threading

__all__ = ["is_library_file", "user_frame", "user_site", "user_site_of_stack", "site_override"]

_override = threading.local()


def _folder(path):
    return os.path.dirname(os.path.realpath(path)) + os.sep


_CSPMD_DIR = _folder(__file__)
_STDLIB_FILES = (os.path.realpath(contextlib.__file__),)
_STDLIB_DIRS = (_folder(importlib.__file__),)
_verdicts = {}  # filename -> bool


def _library_dirs():
    dirs = [_CSPMD_DIR, *_STDLIB_DIRS]
    torch = sys.modules.get("torch")
    if getattr(torch, "__file__", None):
        dirs.append(_folder(torch.__file__))
    return tuple(dirs)


def is_library_file(filename):
    """True for a file of cspmd, torch or the stdlib plumbing between them
    (``<frozen importlib...>`` included); False for the user's files.

    >>> is_library_file(__file__), is_library_file("/home/me/cspmd/train.py")
    (True, False)
    """
    verdict = _verdicts.get(filename)
    if verdict is None:
        if filename.startswith("<frozen importlib"):
            verdict = True
        elif filename.startswith("<"):
            verdict = False  # <stdin>, <string>: the user's
        else:
            path = os.path.realpath(filename)
            verdict = path in _STDLIB_FILES or path.startswith(_library_dirs())
        if "torch" in sys.modules:  # torch's folder is known: the verdict is final
            _verdicts[filename] = verdict
    return verdict


def user_frame(frame=None):
    """The innermost frame outside the library, starting at ``frame``
    (default: the caller's), and outside any ``__torch_dispatch__``: an op
    that a tensor subclass or dispatch mode forwards (where the checker sits
    below the Python key, torch 2.13+) is the op its caller ran.  None when
    the whole stack is the library's."""
    f = sys._getframe(0).f_back if frame is None else frame
    first = outside = None
    while f is not None:
        if f.f_code.co_name == "__torch_dispatch__":
            outside = None  # what ran inside a handler is not the op's site
        elif not is_library_file(f.f_code.co_filename):
            first = first or f
            outside = outside or f
        f = f.f_back
    return outside or first


def user_site(frame=None):
    """``"file.py:12"`` of :func:`user_frame`, or ``""`` when there is none
    (or the site a :func:`site_override` block gives)."""
    site = getattr(_override, "site", "")
    if site:
        return site
    f = user_frame(sys._getframe(0).f_back if frame is None else frame)
    return "" if f is None else f"{f.f_code.co_filename}:{f.f_lineno}"


_STACK_LINE = re.compile(r'\s*File "(?P<file>.*)", line (?P<line>\d+)')


def user_site_of_stack(lines):
    """``"file.py:12"`` of the innermost user entry of a formatted stack
    (``traceback.format_stack()`` strings, outermost first: what autograd's
    anomaly mode records for a forward op), or ``""``."""
    for text in reversed(lines):
        m = _STACK_LINE.match(text) if isinstance(text, str) else None
        if m and not is_library_file(m.group("file")):
            return f"{m.group('file')}:{m.group('line')}"
    return ""


@contextlib.contextmanager
def site_override(site):
    """Inside the block, :func:`user_site` is ``site`` (when not ``""``):
    the line a torch.compile'd graph node came from, while cspmd checks the
    graph (cspmd.compiled)."""
    saved = getattr(_override, "site", "")
    _override.site = site
    try:
        yield
    finally:
        _override.site = saved
