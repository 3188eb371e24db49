"""Every public callable of the reference spmd_types 0.3.1 exists in the
matching cspmd module with the same signature.

Public means: the module's ``__all__`` if it has one, else every name not
starting with ``_`` whose value comes from spmd_types (typing helpers and
stdlib imports a module happens to hold are not API).  Signatures agree when
the parameters have the same names, kinds and defaults (literal defaults
compared by value, R/I/V/P and ``Infer`` by name, other objects only for
presence).  Only the names in SKIP are exempt, each with its reason, and a
skipped name that starts to match fails, so the list stays current.
"""

import importlib
import inspect

import pytest

import reference

MODULES = ["", ".checker", ".runtime", ".types", ".rules", ".rulecheck"]

SKIP = {
    # Constructed differently on purpose; users build axes with MeshAxis.of(...).
    "MeshAxis": "MeshAxis(...) takes the reference's layout object there and the core's axis id "
                "here; both build axes through MeshAxis.of(group or size, stride)",
}

# Keyword-only parameters with defaults that cspmd adds (documented there).
_ERROR_FIELDS = {"op", "hint", "site", "backward_node", "forward_site", "operands"}
EXTENSIONS = {"typecheck": {"backward"},
              # the core's error fields (docs/errors.md)
              "SpmdTypeError": _ERROR_FIELDS, "RedistributeError": _ERROR_FIELDS,
              "DTensorPropagationError": _ERROR_FIELDS}

_LITERALS = (type(None), bool, int, float, str)


def _public(module):
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    out = []
    for name, value in vars(module).items():
        if name.startswith("_") or inspect.ismodule(value):
            continue
        owner = getattr(value, "__module__", None) if (
            inspect.isclass(value) or inspect.isfunction(value)) else None
        if owner is not None and not owner.startswith("spmd_types"):
            continue  # an import such as dataclass, contextmanager, Enum
        if owner is None and type(value).__module__ in ("typing", "typing_extensions",
                                                        "__future__", "builtins"):
            continue  # a typing construct or a plain constant
        out.append(name)
    return out


def _default(value):
    if value is inspect.Parameter.empty:
        return "<required>"
    if isinstance(value, _LITERALS):
        return repr(value)
    name = getattr(value, "name", None) or type(value).__name__
    return f"<{name}>"


def _shape(sig, extra=()):
    return [(p.name, p.kind, _default(p.default)) for p in sig.parameters.values()
            if p.name not in extra]


def _cases():
    ref = reference.load()
    del ref
    for suffix in MODULES:
        if suffix in SKIP:
            yield pytest.param(suffix, None, marks=pytest.mark.skip(reason=SKIP[suffix]),
                               id=f"spmd_types{suffix}")
            continue
        module = importlib.import_module("spmd_types" + suffix)
        for name in _public(module):
            yield pytest.param(suffix, name, id=f"spmd_types{suffix}.{name}")


def pytest_generate_tests(metafunc):
    if "suffix" in metafunc.fixturenames:
        metafunc.parametrize("suffix,name", list(_cases()))


def test_signature(suffix, name):
    ref_mod = importlib.import_module("spmd_types" + suffix)
    mine_mod = importlib.import_module("cspmd" + suffix)
    ref_obj = getattr(ref_mod, name)
    skipped = name in SKIP
    if not hasattr(mine_mod, name):
        if skipped:
            pytest.skip(SKIP[name])
        pytest.fail(f"cspmd{suffix}.{name} is missing")
    mine = getattr(mine_mod, name)
    if not callable(ref_obj):
        assert not skipped
        return
    try:
        ref_sig = inspect.signature(ref_obj)
    except (TypeError, ValueError):
        return  # a builtin or an enum member without a signature: existence only
    mine_sig = inspect.signature(mine)
    extra = EXTENSIONS.get(name, ())
    for p in extra:
        param = mine_sig.parameters[p]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY or p == list(
            mine_sig.parameters)[-1], f"extension {p} must come last"
        assert param.default is not inspect.Parameter.empty
    same = _shape(ref_sig) == _shape(mine_sig, extra)
    if skipped:
        assert not same, f"{name} now matches the reference: remove it from SKIP"
        pytest.skip(SKIP[name])
    assert same, (f"cspmd{suffix}.{name}{mine_sig} differs from "
                  f"spmd_types{suffix}.{name}{ref_sig}")
