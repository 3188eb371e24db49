"""The op rule table against torch's own metadata.

torch ships torchgen's ``derivatives.yaml``: an entry whose result is
``auto_linear`` declares the op linear in its differentiable inputs
(jointly), and the derivative formulas name the backward op of each input.
Every such op must be linear in cspmd (P in, P out), or be listed below with
the reason.  A new torch that adds a linear op without a rule fails here.

Every row of the core's rule table must also name an op the dispatcher
knows, and bind (its argument names resolved to positions, as the kernel
does at an op's first call) against every overload it covers, _foreach_
overloads included, with each bound position an argument of its kind (a
tensor where an operand or coefficient is meant, a number or a tensor where
a weak scalar is).
"""

import collections
import os
import re

import pytest
import torch

import cspmd as spmd
from cspmd import MeshAxis
from cspmd._codes import STATUS  # noqa: F401  (the codes load with the library)
from cspmd._lib import ops
from cspmd._type_ids import _type_id

# auto_linear entries cspmd does not treat as linear, with the reason.
NOT_LINEAR = {
    "_test_autograd_multiple_dispatch.fullcoverage":
        "a test op of torch's own autograd tests; no program calls it",
}

# Ops named by the backward formulas of linear ops that are not linear in
# their gradient in cspmd, with the reason.
BACKWARD_NOT_LINEAR = {
    "zeros_like": "a factory: its values do not depend on the input (typed as a factory)",
    "_nested_select_backward": "nested tensors only, which cspmd passes through unchecked "
                               "(docs/limits.md)",
    "_nested_sum_backward": "nested tensors only, which cspmd passes through unchecked "
                            "(docs/limits.md)",
}

TENSOR, SCALAR = 0, 1
ZERO = 0x2  # CSPMD_OPERAND_ZERO
_META_KEYS = {"name", "result", "output_differentiability", "dispatch"}


def _derivatives_path():
    try:
        import torchgen
    except ImportError:
        pytest.skip("torchgen is not installed with this torch")
    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "autograd",
                        "derivatives.yaml")
    if not os.path.exists(path):
        pytest.skip(f"this torch ships no derivatives.yaml ({path})")
    return path


def _entries():
    """derivatives.yaml as [{'name': signature, key: formula}] (its simple
    subset of YAML: '- name:' starts an entry, '  key: value' lines)."""
    entries = []
    with open(_derivatives_path()) as f:
        for line in f:
            if line.startswith("- name:"):
                entries.append({"name": line[len("- name:"):].strip()})
                continue
            m = re.match(r"^  ([A-Za-z_0-9, ]+): (.*)$", line)
            if m and entries:
                entries[-1][m.group(1).strip()] = m.group(2).strip()
    return entries


def _linear_entries():
    return [e for e in _entries() if e.get("result") == "auto_linear"]


def _op_name(entry):
    return entry["name"].split("(")[0]


def _differentiable(entry):
    """Inputs the result depends on: a formula that is neither
    non_differentiable nor zero (zeros_like: shape only, or a max's place)."""
    names = set()
    for key, formula in entry.items():
        if key in _META_KEYS or formula == "non_differentiable" or \
                formula.startswith("zeros_like("):
            continue
        names.update(k.strip() for k in key.split(","))
    return names


def _schema(name):
    base, _, overload = name.partition(".")
    return torch._C._get_schema(f"aten::{base}", overload)


def _is_tensor(arg):
    return "Tensor" in str(arg.type)


def _bind(rule, op, schema):
    """Bind rule's argument names to schema's arguments, as the kernel does
    at the op's first call (raises the core's error on a table defect)."""
    ops.rule_bind(rule, op, [a.name for a in schema.arguments],
                  [_is_tensor(a) for a in schema.arguments])


def _is_number(arg):
    return str(arg.type) in ("number", "Optional[number]", "List[number]")


@pytest.fixture(scope="module")
def axis_types():
    axis = MeshAxis.of(4, 1)
    return _type_id({axis: spmd.P}, 0), _type_id({axis: spmd.R}, 0)


def _infer(name, schema, partial_args, axis_types, zero_args=()):
    """cspmd's rule for the op over: P at the tensor arguments named in
    partial_args, R at the other tensors, zero numbers at Scalar arguments.
    Tensors at zero_args (fresh zeros) are left out, as the kernel leaves
    them out in backward.  Returns the output type id or raises the core's
    error."""
    p, r = axis_types
    base, _, overload = name.partition(".")
    args, kinds, types, flags = [], [], [], []
    for i, a in enumerate(schema.arguments):
        if i in zero_args:
            continue
        if _is_tensor(a):
            args.append(i), kinds.append(TENSOR), flags.append(0)
            types.append(p if a.name in partial_args else r)
        elif _is_number(a):
            args.append(i), kinds.append(SCALAR), types.append(0), flags.append(ZERO)
    rule = ops.rule_find(f"aten::{base}", overload)
    _bind(rule, f"aten::{name}", schema)
    return ops.rule_infer(rule, args, kinds, types, flags)


def test_derivatives_yaml_lists_the_linear_ops():
    entries = _linear_entries()
    assert len(entries) > 100, "derivatives.yaml no longer marks ops auto_linear"
    assert {"avg_pool2d", "_fft_r2c", "slice_scatter"} <= {_op_name(e) for e in entries}


def test_every_op_torch_marks_linear_is_linear(axis_types):
    p, _ = axis_types
    unexplained, stale = [], []
    for entry in _linear_entries():
        name = _op_name(entry)
        schema = _schema(name)
        # no differentiable input (zero_: the result is 0): P in self
        diff = _differentiable(entry) or {schema.arguments[0].name}
        try:
            linear = _infer(name, schema, diff, axis_types) == p
            why = "" if linear else "the result is not P"
        except spmd.SpmdTypeError as e:
            linear, why = False, str(e).split("\n")[0]
        if name in NOT_LINEAR:
            if linear:
                stale.append(name)
        elif not linear:
            unexplained.append(f"{name} (P at {sorted(diff)}): {why}")
    assert not unexplained, ("ops torch marks auto_linear that cspmd rejects P through, and "
                             "that NOT_LINEAR does not explain:\n  " + "\n  ".join(unexplained))
    assert not stale, f"NOT_LINEAR lists ops that are linear now: {stale}"


def _top_level_args(call):
    """'f(a, g(b, c), d)' -> ['a', 'g(b, c)', 'd']."""
    inner = call[call.index("(") + 1:call.rindex(")")]
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "({[" and 1 or (ch in ")}]" and -1 or 0)
        cur += ch
    return out + [cur.strip()] if cur.strip() else out


def _backward_calls():
    """(backward op, forward op, zero positions): the aten op a linear op's
    derivative formula calls with the incoming gradient as its first
    argument, and the positions it passes fresh zeros (zeros_like(...))."""
    calls = set()
    for entry in _linear_entries():
        for key, formula in entry.items():
            if key in _META_KEYS:
                continue
            m = re.match(r"^([A-Za-z_0-9]+)\(grad\b", formula)
            if m:
                fn = m.group(1).removesuffix("_symint")
                if hasattr(torch.ops.aten, fn):
                    zeros = tuple(i for i, a in enumerate(_top_level_args(formula))
                                  if a.startswith("zeros_like("))
                    calls.add((fn, _op_name(entry), zeros))
    return sorted(calls)


def test_backward_of_every_linear_op_is_linear_in_the_gradient(axis_types):
    p, _ = axis_types
    calls = _backward_calls()
    assert len(calls) > 30
    unexplained = []
    for fn, forward, zeros in calls:
        if fn in BACKWARD_NOT_LINEAR:
            continue
        schema = _schema(fn)
        grad = schema.arguments[0].name
        try:
            ok = _infer(fn, schema, {grad}, axis_types, zeros) == p
            why = "the result is not P"
        except spmd.SpmdTypeError as e:
            ok, why = False, str(e).split("\n")[0]
        if not ok:
            unexplained.append(f"{fn} (backward of {forward}, P at {grad}): {why}")
    assert not unexplained, "\n  ".join(["backward ops not linear in the gradient:"]
                                        + unexplained)


# ---- the rule table against the dispatcher's schemas -----------------------

def _registered_ops():
    import torch.distributed  # noqa: F401  (registers the c10d namespaces)

    out = collections.defaultdict(set)
    for full in torch._C._dispatch_get_all_op_names():
        name, _, overload = full.partition(".")
        out[name].add(overload)
    return out


def _rows():
    keys = ("name", "overload", "linearity", "kind", "operands", "coefficients", "scalars",
            "zero_free", "results", "product_a", "product_b", "sum_self")
    return [dict(zip(keys, ops.rule_info(i)), id=i) for i in range(1, ops.rule_count())]


def _row(rule):
    keys = ("name", "overload", "linearity", "kind", "operands", "coefficients", "scalars",
            "zero_free", "results", "product_a", "product_b", "sum_self", "bound")
    return dict(zip(keys, ops.rule_info(rule)), id=rule)


def _bits(mask):
    return [i for i in range(64) if (mask >> i) & 1]


ALL_BUT_0 = (1 << 64) - 2  # backward rows: every argument but the gradient


def _check_row(row, overload, schema):
    """Problems of one row against one overload's schema (strings)."""
    args = schema.arguments
    where = f"{row['name']}.{overload or 'default'} ({schema})"
    bad = []

    def need(i, ok, role):
        if i >= len(args):
            bad.append(f"{where}: {role} position {i} is past its {len(args)} arguments")
        elif not ok(args[i]):
            bad.append(f"{where}: {role} position {i} is '{args[i].name}' "
                       f"of type {args[i].type}")

    for i in _bits(row["operands"]):
        need(i, _is_tensor, "operand")
    for i in _bits(row["results"]):
        need(i, _is_tensor, "result")
    tensor_or_number = lambda a: _is_tensor(a) or _is_number(a)  # noqa: E731
    if row["coefficients"] == ALL_BUT_0:
        need(0, lambda a: _is_tensor(a) and "grad" in a.name, "gradient")
    else:  # a number there is a typed cspmd.Scalar's place
        for i in _bits(row["coefficients"]):
            need(i, tensor_or_number, "coefficient")
    for i in _bits(row["scalars"]):
        need(i, tensor_or_number, "weak-scalar")
    for i in _bits(row["zero_free"]):
        if not (row["scalars"] >> i) & 1:
            bad.append(f"{where}: zero-free position {i} is no weak-scalar position")
    return bad


def _bind_and_check(rule, name, overload):
    """Problems of binding rule against one overload (strings)."""
    schema = torch._C._get_schema(name, overload)
    try:
        _bind(rule, f"{name}.{overload}" if overload else name, schema)
    except RuntimeError as e:
        return [str(e)]
    return _check_row(_row(rule), overload, schema)


# Ops the rule table covers that first exist in torch 2.N (the minor): on an
# older torch their rows match nothing.
NEWER_OPS = {"aten::_upsample_lanczos2d_aa": 15, "aten::_upsample_lanczos2d_aa_backward": 15}
MINOR = int(torch.__version__.split(".")[1])


def test_every_rule_names_a_real_op_and_real_arguments():
    registered = _registered_ops()
    problems = []
    rows = _rows()
    assert len(rows) > 300
    for row in rows:
        name, overload = row["name"], row["overload"]
        if name.endswith("*"):
            if not any(k.startswith(name[:-1]) for k in registered):
                problems.append(f"{name}: no op has this prefix")
            continue
        if name not in registered and MINOR < NEWER_OPS.get(name, 0):
            continue
        if name not in registered:
            problems.append(f"{name}: no such op in torch {torch.__version__}")
            continue
        if overload == "*":
            covered = [o for o in registered[name]
                       if ops.rule_find(name, o) == row["id"]]
            if not covered:
                problems.append(f"{name}: every overload has a row of its own")
        elif overload not in registered[name]:
            problems.append(f"{name}.{overload}: no such overload "
                            f"(has {sorted(registered[name])})")
            continue
        else:
            covered = [overload]
        for o in sorted(covered):
            problems += _bind_and_check(row["id"], name, o)
    # a _foreach_ op binds its element rule against its own schema
    foreach = [n for n in registered if n.startswith("aten::_foreach_")]
    assert len(foreach) > 50
    for name in sorted(foreach):
        for o in sorted(registered[name]):
            problems += _bind_and_check(ops.rule_find(name, o), name, o)
    assert not problems, "rule table vs torch's schemas:\n  " + "\n  ".join(problems)
    unbound = [r["name"] for r in map(_row, range(1, ops.rule_count())) if not r["bound"]]
    assert not unbound, f"rows no overload binds: {unbound}"


def test_the_schema_check_catches_a_wrong_position():
    # gather(self, dim, index): position 1 is the int dim, not a tensor
    row = {"name": "aten::gather", "operands": 0, "results": 0, "coefficients": 1 << 1,
           "scalars": 0, "zero_free": 0}
    bad = _check_row(row, "", torch._C._get_schema("aten::gather", ""))
    assert len(bad) == 1 and "coefficient position 1 is 'dim'" in bad[0]
    row["coefficients"] = 1 << 7
    assert "past its 4 arguments" in _check_row(row, "", torch._C._get_schema(
        "aten::gather", ""))[0]


def test_binding_catches_a_wrong_name():
    # gather's row names 'index'; an overload spelling it otherwise (as a
    # misspelt row would) fails to bind, naming the row, name and arguments
    gather = ops.rule_find("aten::gather", "")
    with pytest.raises(RuntimeError, match=r"aten::gather.bad: cspmd's rule table is wrong "
                       r"for this op: its row aten::gather.\* names 'index' as a coefficient, "
                       r"which this overload does not have .*self, dim, idx"):
        ops.rule_bind(gather, "aten::gather.bad", ["self", "dim", "idx"], [True, False, True])
    # and one with 'index' elsewhere disagrees with the overloads bound first
    _bind(gather, "aten::gather", torch._C._get_schema("aten::gather", ""))
    with pytest.raises(RuntimeError, match=r"names 'index' as a coefficient, at another "
                       r"position than in aten::gather(\.\w+)?, bound first \(argument 1"):
        ops.rule_bind(gather, "aten::gather.moved", ["self", "index", "dim"],
                      [True, True, False])
