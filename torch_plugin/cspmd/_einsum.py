"""torch.einsum under checking: torch decomposes it into permute, view and
bmm, and its views merge dims and split them back.  In global mode such a
split of a sharded dim is the einsum's own bookkeeping (the shard goes to
the outermost piece, as DTensor propagates it), not a user's reshape, which
would raise the reference's error.  While checking is on, torch.einsum is
wrapped to say so to the core for the duration of the call."""

import functools

import torch

from ._lib import ops
from .checker import _register_patch

_saved = {}


def _wrap(inner):
    @functools.wraps(inner)
    def einsum(*args, **kwargs):
        was = ops.global_view_split(True)
        try:
            return inner(*args, **kwargs)
        finally:
            ops.global_view_split(was)

    einsum._cspmd_inner = inner
    return einsum


def _on():
    for mod in (torch, torch.functional):
        current = mod.einsum
        if getattr(current, "_cspmd_inner", None) is None:
            _saved[mod] = current
            mod.einsum = _wrap(current)


def _off():
    for mod, inner in list(_saved.items()):
        if getattr(mod.einsum, "_cspmd_inner", None) is inner:
            mod.einsum = inner
        del _saved[mod]


_register_patch(_on, _off)
