"""cspmd.rules and spmd_typecheck hooks against the reference (spmd_types
0.3.1): the same autograd Functions, with hooks written with ``rules``, run
under each library on the same inputs; both must agree on error-or-not
(the exception class) and on every output's type per axis with its
partition spec."""

import pytest
import torch

import cspmd as spmd
import differential
import reference


def _functions(lib, dp, tp):
    """Functions with spmd_typecheck hooks, written against ``lib``."""
    rules = lib.rules
    R, I, V, P, S = lib.R, lib.I, lib.V, lib.P, lib.S

    def fn(forward, hook, name):
        return type(name, (torch.autograd.Function,), {
            "forward": staticmethod(forward), "spmd_typecheck": staticmethod(hook),
            "backward": staticmethod(lambda ctx, *g: tuple(g) + (None,) * 3)})

    def mm(ctx, x, w):
        return x @ w.t()

    def mm_ar(src):
        def hook(*, x, w):
            return rules.all_reduce(rules.einsum("mk,nk->mn", x, w), tp, src=src, dst=I)
        return hook

    def ident(ctx, x):
        return x.clone()

    def ident2(ctx, x, y):
        return x.clone(), y.clone()

    def relu(ctx, x):
        return torch.relu(x)  # rejected on P op by op: the hook is the rule here

    def stack(ctx, x):
        return torch.stack([x] * 4)

    def unbind(ctx, x):
        return x[0].clone()

    return {
        "mm_allreduce_P": fn(mm, mm_ar(P), "MmAllReduceP"),
        "mm_allreduce_V": fn(mm, mm_ar(V), "MmAllReduceV"),
        "ignore_missing": fn(ident2, lambda *, x, y: rules.einsum("ij->ij", x), "IgnoreMissing"),
        "ignore_given": fn(ident2, lambda *, x, y: (rules.ignore(y),
                                                    rules.einsum("ij->ij", x))[1],
                           "IgnoreGiven"),
        "two_outputs": fn(ident2, lambda *, x, y: (rules.einsum("ij->ij", x),
                                                   rules.einsum("ij->ji", y)), "TwoOutputs"),
        "stamp_form": fn(ident2, lambda outs, *, x, y: rules.output(
            outs, (rules.einsum("ij->ij", x), rules.reinterpret(y, tp, src=V, dst=P))),
            "StampForm"),
        "stamp_untyped": fn(ident2, lambda outs, *, x, y: rules.ignore(x, y), "StampUntyped"),
        "returns_none": fn(ident, lambda *, x: rules.ignore(x), "ReturnsNone"),
        "rank_mismatch": fn(ident, lambda *, x: rules.einsum("ij->i", x), "RankMismatch"),
        "label_count": fn(ident, lambda *, x: rules.einsum("i->i", x), "LabelCount"),
        "relu_on_P": fn(relu, lambda *, x: rules.einsum("ij->ij", x), "ReluOnP"),
        "linear_P": fn(ident, lambda *, x: rules.einsum("ij->ij", x, linear_in=(0,)),
                       "LinearP"),
        "joint_add": fn(ident2, lambda *, x, y: rules.einsum("ij,ij->ij", x, y,
                                                             linear_in=((0, 1),)), "JointAdd"),
        "multi_mul": fn(ident2, lambda *, x, y: rules.einsum("ij,ij->ij", x, y,
                                                             linear_in=(0, 1)), "MultiMul"),
        "gather_stack": fn(stack, lambda *, x: rules.all_gather(x, tp, dst=R), "GatherStack"),
        "scatter_unbind": fn(unbind, lambda *, x: rules.reduce_scatter(x, tp), "ScatterUnbind"),
        "convert_shard": fn(ident, lambda *, x: rules.convert(x, tp, src=R, dst=S(0)),
                            "ConvertShard"),
        "convert_I_to_R": fn(ident, lambda *, x: rules.convert(x, tp, src=I, dst=R),
                             "ConvertIR"),
        "reinterpret_bad": fn(ident, lambda *, x: rules.reinterpret(x, tp, src=P, dst=V),
                              "ReinterpretBad"),
        "all_to_all": fn(ident, lambda *, x: rules.all_to_all(x, tp, src=S(0), dst=S(1)),
                         "AllToAll"),
        "wrong_src": fn(ident, lambda *, x: rules.all_reduce(x, tp, src=P, dst=R), "WrongSrc"),
        "opaque_dim": fn(ident, lambda *, x: rules.einsum("i_->i_", x), "OpaqueDim"),
        "broadcast_V": fn(mm, lambda *, x, w: rules.einsum("mk,nk->mn", x, w), "BroadcastV"),
        "default_param": fn(ident, lambda *, x, scale=2: rules.einsum("ij->ij", x),
                            "DefaultParam"),
        "missing_param": fn(ident, lambda *, x, nope: rules.einsum("ij->ij", x),
                            "MissingParam"),
    }


# name -> (the inputs' types, whether they require grad, local)
_T = {"dp": "R"}
CASES = [
    ("mm_allreduce_P", [{"tp": "V"}, {"tp": "V"}], False, True),
    ("mm_allreduce_V", [{"tp": "V"}, {"tp": "V"}], False, True),
    ("mm_allreduce_P", [{"tp": "S1"}, {"tp": "S1"}], False, False),
    ("mm_allreduce_V", [{"tp": "S1"}, {"tp": "S1"}], False, False),
    ("ignore_missing", [{"tp": "R"}, {"tp": "R"}], False, True),
    ("ignore_given", [{"tp": "R"}, {"tp": "V"}], False, True),
    ("two_outputs", [{"tp": "R"}, {"tp": "V"}], False, True),
    ("stamp_form", [{"tp": "R"}, {"tp": "V"}], False, True),
    ("stamp_form", [{"tp": "R"}, {"tp": "R"}], False, True),
    ("stamp_untyped", [{"tp": "R"}, {"tp": "R"}], False, True),
    ("returns_none", [{"tp": "R"}], False, True),
    ("rank_mismatch", [{"tp": "R"}], False, True),
    ("label_count", [{"tp": "R"}], False, True),
    ("relu_on_P", [{"tp": "P"}], False, True),
    ("relu_on_P", [{"tp": "V"}], False, True),
    ("linear_P", [{"tp": "P"}], False, True),
    ("joint_add", [{"tp": "P"}, {"tp": "P"}], False, True),
    ("joint_add", [{"tp": "P"}, {"tp": "R"}], False, True),
    ("multi_mul", [{"tp": "P"}, {"tp": "R"}], False, True),
    ("multi_mul", [{"tp": "P"}, {"tp": "P"}], False, True),
    ("multi_mul", [{"tp": "P"}, {"tp": "V"}], False, True),
    ("gather_stack", [{"tp": "V"}], False, True),
    ("gather_stack", [{"tp": "R"}], False, True),
    ("scatter_unbind", [{"tp": "P"}], False, True),
    ("convert_shard", [{"tp": "R"}], False, True),
    ("convert_shard", [{"tp": "R"}], False, False),
    ("convert_I_to_R", [{"tp": "I"}], True, True),
    ("convert_I_to_R", [{"tp": "R"}], False, True),
    ("convert_I_to_R", [{"tp": "R"}], True, True),
    ("reinterpret_bad", [{"tp": "P"}], False, True),
    ("all_to_all", [{"tp": "S0"}], False, True),
    ("all_to_all", [{"tp": "V"}], False, True),
    ("all_to_all", [{"tp": "S1"}], False, False),
    ("wrong_src", [{"tp": "V"}], False, True),
    ("wrong_src", [{}], False, True),
    ("opaque_dim", [{"tp": "S1"}], False, False),
    ("opaque_dim", [{"tp": "S0"}], False, False),
    ("broadcast_V", [{"tp": "S0"}, {"tp": "V"}], False, False),
    ("broadcast_V", [{"tp": "S0"}, {"tp": "R"}], False, False),
    ("default_param", [{"tp": "R"}], False, True),
    ("missing_param", [{"tp": "R"}], False, True),
]


def _typ(lib, letter):
    return lib.S(int(letter[1])) if letter.startswith("S") else getattr(lib, letter)


def _outcome(lib, mesh, dp, tp, name, types, grad, local):
    cls = _functions(lib, dp, tp)[name]
    groups = {"dp": dp, "tp": tp}
    with lib.set_current_mesh(mesh), lib.checker.typecheck(local=local):
        args = []
        for t in types:
            with lib.no_typecheck():
                x = torch.randn(4, 4, requires_grad=grad)
            args.append(lib.assert_type(x, {groups[a]: _typ(lib, c) for a, c in
                                            {**_T, **t}.items()}))
        try:
            out = cls.apply(*args)
        except Exception as e:  # noqa: BLE001 -- the class is the outcome
            return type(e).__name__, str(e).splitlines()[0] if str(e) else ""
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(differential.types_text(lib, o) for o in outs), ""


@pytest.mark.parametrize("name,types,grad,local", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_same_outcome_as_reference(mesh, dp, tp, name, types, grad, local):
    ref = reference.load()
    reference.load("spmd_types.checker")
    reference.load("spmd_types.rules")
    mine, why = _outcome(spmd, mesh, dp, tp, name, types, grad, local)
    theirs, their_why = _outcome(ref, mesh, dp, tp, name, types, grad, local)
    assert mine == theirs, f"cspmd: {mine} {why}\nreference: {theirs} {their_why}"


def test_apply_with_keywords_is_a_type_error(mesh, dp, tp):
    cls = _functions(spmd, dp, tp)["default_param"]
    x = spmd.assert_type(torch.randn(4, 4), {dp: spmd.R, tp: spmd.R})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        with pytest.raises(TypeError, match=r"apply\(\) accepts positional arguments only"):
            cls.apply(x=x)


class _TwoIn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g, None

    @staticmethod
    def spmd_typecheck(*, x, y):
        return spmd.rules.einsum("ij->ij", x)


def test_coverage_message(mesh, dp, tp):
    cls = _TwoIn
    x, y = (spmd.assert_type(torch.randn(4, 4), {dp: spmd.R, tp: spmd.R}) for _ in range(2))
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError, match="tensor argument 'y' was not accounted "
                           r"for.*rules.ignore\(y\)"):
            cls.apply(x, y)


# ---- the rules alone, on NdimWithSpmdType values (no typecheck) ----------------

def _ndim(lib, ndim, types, spec=None):
    d = lib.rules.NdimWithSpmdType(ndim)
    return lib.assert_type(d, types, partition_spec=spec)


@pytest.mark.parametrize("case", range(9))
def test_rules_on_stand_ins_match_reference(mesh, dp, tp, case):
    ref = reference.load()
    reference.load("spmd_types.rules")

    def run(lib):
        R, V, P = lib.R, lib.V, lib.P
        ps = lib.PartitionSpec
        try:
            if case == 0:  # contraction of a sharded label: P
                r = lib.rules.einsum("mk,nk->mn", _ndim(lib, 2, {tp: V}, ps(None, tp)),
                                     _ndim(lib, 2, {tp: V}, ps(None, tp)))
            elif case == 1:  # a kept sharded label keeps its spec
                r = lib.rules.einsum("mk,kn->mn", _ndim(lib, 2, {tp: V}, ps(tp, None)),
                                     _ndim(lib, 2, {tp: R}))
            elif case == 2:  # inconsistent sharding of one label
                r = lib.rules.einsum("mk,nk->mn", _ndim(lib, 2, {tp: V}, ps(None, tp)),
                                     _ndim(lib, 2, {tp: V}, ps(tp, None)))
            elif case == 3:  # ellipsis ranks must agree
                r = lib.rules.einsum("...k,...k->...", _ndim(lib, 3, {tp: R}),
                                     _ndim(lib, 2, {tp: R}))
            elif case == 4:  # ellipsis pass-through keeps the spec
                r = lib.rules.einsum("...->...", _ndim(lib, 3, {tp: V}, ps(None, tp, None)))
            elif case == 5:  # unbind of a sharded dim 0
                r = lib.rules.reduce_scatter(_ndim(lib, 2, {tp: V}, ps(tp, None)), tp,
                                             src=V)
            elif case == 6:  # stack form prepends a dim
                r = lib.rules.all_gather(_ndim(lib, 2, {tp: V, dp: V}, ps(None, dp)), tp,
                                         dst=R)
            elif case == 7:  # a bad pair
                r = lib.rules.all_reduce(_ndim(lib, 2, {tp: P}), tp, src=P, dst=V)
            else:  # an axis the input lacks is established as src
                r = lib.rules.all_reduce(_ndim(lib, 1, {dp: R}), tp, src=P, dst=R)
        except Exception as e:  # noqa: BLE001
            return type(e).__name__
        spec = lib.get_partition_spec(r)
        lt = {str(a): repr(t).split(".")[-1] for a, t in lib.get_local_type(r).items()}
        return r.ndim, sorted(lt.items()), None if spec is None else tuple(str(e) for e in spec)

    assert run(spmd) == run(ref)


def test_einsum_syntax_errors():
    rules = spmd.rules
    x = rules.NdimWithSpmdType(2)
    for eq, msg in [("ij", "exactly one '->'"), ("ij->i,j", "several outputs"),
                    ("ii->i", "repeats a label"), ("ij->k", "output label 'k'"),
                    ("i$->i", "unexpected '\\$'"), ("ij->...", "output uses '...'")]:
        with pytest.raises(TypeError, match=msg):
            rules.einsum(eq, x)
    with pytest.raises(TypeError, match="linear_in refers to operand 3"):
        rules.einsum("ij->ij", x, linear_in=(3,))
    with pytest.raises(TypeError, match="appears twice"):
        rules.einsum("ij,ij->ij", x, x, linear_in=(0, (0, 1)))
    with pytest.raises(TypeError, match="must be R, I, V, P or S"):
        rules.convert(x, "tp", src="R", dst=spmd.V)


def test_einsum_unicode_labels_and_dim_limit(tp_axis):
    rules = spmd.rules
    a = spmd.assert_type(rules.NdimWithSpmdType(2), {tp_axis: spmd.V},
                         partition_spec=spmd.PartitionSpec(None, tp_axis))
    r = rules.einsum("αβ->α", a)
    assert spmd.get_local_type(r) == {tp_axis: spmd.P} and r.ndim == 1
    with pytest.raises(ValueError, match="at most 16"):
        rules.einsum("...->...", rules.NdimWithSpmdType(17))


# ---- the reference's own hook examples (its docstrings), applied -------------

def _forward_for(hook):
    """A forward for a docstring class that shows only its hook, with the
    hook's parameter names: x @ weight.T, all-reduced over ``group`` with a
    raw collective, plus ``bias`` when given."""
    import inspect

    names = list(inspect.signature(hook).parameters)
    ns = {}
    exec(f"def forward(ctx, {', '.join(names)}):\n"
         "    y = x @ weight.t()\n"
         "    torch.distributed.all_reduce(y, group=group)\n"
         "    b = locals().get('bias')\n"
         "    return y if b is None else y + b\n", {"torch": torch}, ns)
    return ns["forward"]


def _doc_functions(lib, tp):
    import test_reference_examples as docs

    out = {}
    for name, code in docs.reference_examples():
        if "spmd_typecheck" not in code:
            continue
        ns = {"torch": torch, "rules": lib.rules, "pg": tp, **{k: getattr(lib, k) for k in (
            "R", "I", "V", "P", "S", "assert_type", "assert_type_like")}}
        exec(compile(docs._for(lib.__name__, code), name, "exec"), ns)
        for obj in list(ns.values()):
            if isinstance(obj, type) and issubclass(obj, torch.autograd.Function) and \
                    obj is not torch.autograd.Function:
                if "forward" not in obj.__dict__:
                    obj.forward = staticmethod(_forward_for(obj.spmd_typecheck))
                    obj.backward = staticmethod(lambda ctx, g: (g, g, None, None))
                out[f"{name}:{obj.__name__}"] = obj
    return out


def _doc_args(lib, name, dp, tp, variant):
    def t(types, *shape):
        with lib.no_typecheck():
            x = torch.randn(*shape)
        return lib.assert_type(x, {dp: lib.R, **types})

    if "MyCollectiveOp" in name:
        return (t({tp: lib.S(1)}, 4, 4), t({tp: (lib.R, lib.V)[variant % 2]}, 4, 4))
    x, w = t({tp: lib.S(1)}, 4, 8), t({tp: lib.S(1)}, 3, 8)
    if "rules.py" in name:
        return (x, w, t({tp: lib.I}, 3) if variant % 2 else None, tp)
    return (x, w, tp)


@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("variant", [0, 1])
def test_reference_docstring_hooks_agree(mesh, dp, tp, local, variant):
    """LinearAllReduce types {dp: R, tp: I} in global mode and is rejected in
    local mode (src=P on a V product) under both; MyCollectiveOp's example
    is rejected under both (assert_type_like copies x's S(-1) spec onto an R
    type)."""
    ref = reference.load()
    reference.load("spmd_types.rules")
    reference.load("spmd_types.checker")
    results = {}
    for lib in (spmd, ref):
        fns = _doc_functions(lib, tp)
        assert len(fns) == 3, sorted(fns)
        for name, cls in sorted(fns.items()):
            with lib.set_current_mesh(mesh), lib.checker.typecheck(local=local):
                args = _doc_args(lib, name, dp, tp, variant)
                try:
                    out = differential.types_text(lib, cls.apply(*args))
                except Exception as e:  # noqa: BLE001
                    out = type(e).__name__
            results.setdefault(name, []).append(out)
    assert all(a == b for a, b in results.values()), results
