"""LocalTensorMode support for cspmd's collectives (called by the C++ shim).

A ``LocalTensor`` holds one tensor per simulated rank.  Ops on it, and the
functional collectives, already run per rank inside PyTorch's
``LocalTensorMode``; what cspmd adds is the steps of a collective that
depend on the rank (``convert(R, S(0))`` keeps the rank's own chunk), run
once per rank with the rank's index in the collective's group.
"""

__all__ = ["split", "join", "inner"]


def _local_tensor_class():
    try:
        from torch.distributed._local_tensor import LocalTensor
    except ImportError:  # a torch without LocalTensorMode
        return None
    return LocalTensor


def _group_index(group_name):
    """{global rank: index in its group} for every copy of the group.

    Under LocalTensorMode one process group object stands for every group
    of the same layout (ranks 0,1 and 2,3 for a 2-wide axis of 4 ranks), as
    PyTorch's local collectives read it."""
    from torch.distributed.distributed_c10d import _resolve_process_group
    from torch.distributed._local_tensor._c10d import _prepare_collective_groups

    # (ranks relative to the group's first, every copy's first rank): the
    # first two results on every torch (2.15 dropped a third).
    ranks, offsets = _prepare_collective_groups(_resolve_process_group(group_name))[:2]
    return {offset + r: i for offset in offsets for i, r in enumerate(ranks)}


def split(x, group_name):
    """``[(rank, index of rank in the group, tensor), ...]`` for a LocalTensor
    x, in rank order; None for any other tensor."""
    cls = _local_tensor_class()
    if cls is None or not isinstance(x, cls):
        return None
    index = _group_index(group_name)
    missing = sorted(r for r in x._local_tensors if r not in index)
    if missing:
        raise ValueError(f"cspmd: LocalTensor ranks {missing} are not in process group "
                         f"{group_name!r}'s layout")
    return [(r, index[r], t) for r, t in sorted(x._local_tensors.items())]


def join(ranks, tensors):
    """A LocalTensor of the per-rank tensors."""
    return _local_tensor_class()(dict(zip(ranks, tensors)))


def inner(x):
    """A LocalTensor's per-rank tensors (None for any other object): cspmd
    writes the LocalTensor's type on them too, and reads it back from them
    when torch has detached the LocalTensor in Python (where cspmd does not
    see it) into a new, untyped one."""
    cls = _local_tensor_class()
    if cls is None or not isinstance(x, cls):
        return None
    return list(x._local_tensors.values())
