"""The Python front's codes come from the library, which generates them from
the X-macro lists of include/cspmd.h: the lists, the library and the front
agree, and the front spells no number of its own."""

import os
import re

from cspmd import _codes
from cspmd.collectives import all_reduce  # noqa: F401  (imports use the codes)
from cspmd.types import I, P, R, V

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _list(name):
    with open(os.path.join(ROOT, "include", "cspmd.h")) as f:
        text = f.read()
    body = re.search(r"#define %s\(X\)(.*?)\n\n" % name, text, re.S).group(1)
    return re.findall(r"X\((\w+)(?:, (-?\d+))?", body)


def test_status_codes_follow_the_header():
    rows = _list("CSPMD_STATUS_LIST")
    assert rows and {k: int(v) for k, v in rows} == vars(_codes.STATUS)
    for name, value in rows:
        assert _codes.status_name(int(value)) == "CSPMD_" + name
    assert _codes.status_name(12345) == "CSPMD_ERR_UNKNOWN"


def test_local_types_and_collectives_follow_the_header():
    assert {k: int(v) for k, v in _list("CSPMD_LTYPE_LIST")} == vars(_codes.LT)
    assert [R.value, I.value, V.value, P.value] == [_codes.LT.R, _codes.LT.I, _codes.LT.V,
                                                    _codes.LT.P]
    names = [k for k, _ in _list("CSPMD_COLL_LIST")]
    assert {k: i for i, k in enumerate(names)} == vars(_codes.COLL)


def test_front_spells_no_core_code():
    pkg = os.path.join(ROOT, "torch_plugin", "cspmd")
    for name in ("collectives.py", "types.py", "runtime.py", "reinterpret_mesh.py"):
        with open(os.path.join(pkg, name)) as f:
            text = f.read()
        assert not re.search(r"^\s*_?[A-Z_]+ = -?\d+\s*(#.*)?$", text, re.M), name
        assert not re.search(r"^\s+[RIVP] = \d", text, re.M), name


def test_collectives_exported_from_one_list():
    # cspmd exports cspmd.collectives.__all__ as it is: a collective is
    # written once, in collectives.py, already wrapped at the API boundary
    import cspmd
    from cspmd import collectives
    for name in collectives.__all__:
        assert name in cspmd.__all__
        fn = getattr(cspmd, name)
        assert fn is getattr(collectives, name)
        assert callable(getattr(fn, "__wrapped_api__", None)), name
    assert len(set(cspmd.__all__)) == len(cspmd.__all__)


def test_noop_table_covers_every_collective():
    # the front's no-op table is read from the core for every row of
    # CSPMD_COLL_LIST; a row's NOOP column says which equal pairs change
    # nothing: NEVER none, EQUAL every one, REPLICATED R -> R and I -> I
    from cspmd import collectives
    with open(os.path.join(ROOT, "include", "cspmd.h")) as f:
        body = re.search(r"#define CSPMD_COLL_LIST\(X\)(.*?)\n\n", f.read(), re.S).group(1)
    rows = re.findall(r'X\((\w+), "\w+", (\w+)\)', body)
    assert len(rows) == len(vars(_codes.COLL))
    admits = {"NEVER": set(), "EQUAL": {"R", "I", "V", "P"}, "REPLICATED": {"R", "I"}}
    for name, noop in rows:
        op = getattr(_codes.COLL, name)
        for lt in ("R", "I", "V", "P"):
            code = getattr(_codes.LT, lt)
            assert collectives._NOOP[op, code, code, False] is (lt in admits[noop]), (name, lt)


def test_split_tables_come_from_the_core():
    # reinterpret I -> V|P runs as two nodes through R, and the first node's
    # backward dtype source: both the core's answers, read once at import
    from cspmd import collectives
    from cspmd._codes import COLL, DTSRC, LT
    assert collectives._SPLIT == {(COLL.REINTERPRET, LT.I, LT.V): R,
                                  (COLL.REINTERPRET, LT.I, LT.P): R}
    table = collectives._SPLIT_BW_DTYPE
    assert table[True, False, False] == DTSRC.BACKWARD
    assert table[False, True, True] == DTSRC.OP
    assert table[False, True, False] == DTSRC.INPUT
    assert table[False, False, True] == DTSRC.NONE
    names = [k for k, _ in _list("CSPMD_DTYPE_SOURCE_LIST")]
    assert {k: i for i, k in enumerate(names)} == vars(DTSRC)
