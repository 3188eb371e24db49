// The control functions of the extension module `cspmd._C` that cannot be
// rows of CSPMD_PY_CALL_LIST (include/cspmd.h, bound by core_calls.cpp).
// They only translate: every decision is the core's.  Each is here for one
// of three reasons:
//   - it takes or returns a torch object (a Tensor, a dtype): get_type,
//     set_type, grad_watch_check, watch_leaves, register_type_saving,
//     collective_check_input, error_raise, dtype_code;
//   - it drives the shim's own state, not only the core's: the dispatch
//     key (checker_set, checker_pause, checker_state, register_explicit,
//     trace_set, trace_enabled) or the thread mailboxes (checker_mailbox,
//     checker_post, mesh_post, and mesh_apply and mesh_current, which
//     settle this thread's mailbox first);
//   - the core hands back a C struct or writes a variable-length array or
//     text into the caller's storage: axis_layout, axes_sort_outer (sorts
//     in place), type_make, type_entries, type_spec, spec_from_shards
//     (cspmd_spec_t), type_format, rules_einsum (an array of operand
//     structs), redistribute_plan, rule_info, rule_bind, rule_infer, codes.
#include <Python.h>
#include <torch/csrc/Exceptions.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "shim.h"
#include "shim_internal.h"
#include "torch_compat.h"

namespace cspmd {
// register_no_typecheck (unchecked_code.cpp).
void unchecked_code_add(pybind11::object code);
bool unchecked_code_active();

namespace {

using IntList = c10::ArrayRef<int64_t>;

std::vector<cspmd_axis_t> to_axes(IntList v) {
    std::vector<cspmd_axis_t> out;
    out.reserve(v.size());
    for (int64_t a : v) {
        if (a < 0 || a > UINT32_MAX)
            throw_core_error(CSPMD_ERR_MISUSE, "cspmd: axis id out of range");
        out.push_back(static_cast<cspmd_axis_t>(a));
    }
    if (out.size() > CSPMD_MAX_AXES)
        throw_core_error(CSPMD_ERR_VALUE, "cspmd: at most 8 mesh axes are supported");
    return out;
}

cspmd_type_t to_type(int64_t t) {
    if (t < 0 || t > UINT32_MAX)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd: type id out of range");
    return static_cast<cspmd_type_t>(t);
}

// ---- axes -----------------------------------------------------------------

std::vector<int64_t> axis_layout(int64_t axis) {
    int64_t sizes[CSPMD_MAX_MODES], strides[CSPMD_MAX_MODES];
    int n = cspmd_axis_layout(static_cast<cspmd_axis_t>(axis), sizes, strides);
    if (n < 0)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd: unknown axis id");
    std::vector<int64_t> out;  // [s0, d0, s1, d1, ...]
    for (int i = 0; i < n; i++) {
        out.push_back(sizes[i]);
        out.push_back(strides[i]);
    }
    return out;
}

// The core's one outermost-first order.
std::vector<int64_t> axes_sort_outer(IntList axes) {
    std::vector<cspmd_axis_t> a;
    for (int64_t x : axes) {
        if (x < 0 || x > UINT32_MAX)
            throw_core_error(CSPMD_ERR_MISUSE, "cspmd: axis id out of range");
        a.push_back(static_cast<cspmd_axis_t>(x));
    }
    cspmd_axes_sort_outer(a.data(), static_cast<int>(a.size()));
    return std::vector<int64_t>(a.begin(), a.end());
}

// ---- types ----------------------------------------------------------------

// spec: [ndim, n_0, axes of dim 0..., n_1, ...]; empty for "no spec".
int64_t type_make(IntList axes, IntList ltypes, IntList spec) {
    auto a = to_axes(axes);
    if (ltypes.size() != a.size())
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd: axes and types differ in length");
    std::vector<cspmd_ltype_t> lt;
    for (int64_t t : ltypes)
        lt.push_back(static_cast<cspmd_ltype_t>(t));
    cspmd_spec_t s{};
    s.ndim = -1;
    if (!spec.empty()) {
        size_t k = 0;
        int64_t nd = spec[k++];
        if (nd < 0 || nd > CSPMD_MAX_DIMS)
            throw_core_error(CSPMD_ERR_VALUE,
                             "cspmd: partition specs support at most 16 tensor dims");
        s.ndim = static_cast<int8_t>(nd);
        for (int64_t d = 0; d < nd; d++) {
            if (k >= spec.size())
                throw_core_error(CSPMD_ERR_MISUSE, "cspmd: malformed spec encoding");
            int64_t n = spec[k++];
            if (n < 0 || n > CSPMD_MAX_AXES || k + static_cast<size_t>(n) > spec.size())
                throw_core_error(CSPMD_ERR_MISUSE, "cspmd: malformed spec encoding");
            s.nentry[d] = static_cast<uint8_t>(n);
            for (int64_t j = 0; j < n; j++)
                s.entry[d][j] = static_cast<cspmd_axis_t>(spec[k++]);
        }
    }
    cspmd_type_t out;
    check(cspmd_type_make(a.data(), lt.data(), static_cast<int>(a.size()),
                          s.ndim >= 0 ? &s : nullptr, &out));
    return out;
}

// [axis, ltype, axis, ltype, ...] in canonical order.
std::vector<int64_t> type_entries(int64_t type) {
    int n = cspmd_type_naxes(to_type(type));
    if (n < 0)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd: unknown type id");
    std::vector<int64_t> out;
    for (int i = 0; i < n; i++) {
        cspmd_axis_t a;
        cspmd_ltype_t lt;
        check(cspmd_type_entry(to_type(type), i, &a, &lt));
        out.push_back(a);
        out.push_back(lt);
    }
    return out;
}

std::vector<int64_t> type_spec(int64_t type) {
    cspmd_spec_t s;
    check(cspmd_type_spec_plain(to_type(type), "get_partition_spec", &s));
    std::vector<int64_t> out;
    if (s.ndim < 0)
        return out;
    out.push_back(s.ndim);
    for (int d = 0; d < s.ndim; d++) {
        out.push_back(s.nentry[d]);
        for (int j = 0; j < s.nentry[d]; j++)
            out.push_back(s.entry[d][j]);
    }
    return out;
}

std::string type_format(int64_t type) {
    char buf[1024];
    size_t n = cspmd_type_format(to_type(type), buf, sizeof buf);
    if (n < sizeof buf)
        return std::string(buf, n);
    std::string big(n + 1, '\0');
    cspmd_type_format(to_type(type), big.data(), big.size());
    big.resize(n);
    return big;
}

// [ndim, n0, axes..., n1, ...]: the spec that S(d) annotations describe,
// in the encoding type_make takes.
std::vector<int64_t> spec_from_shards(IntList axes, IntList dims, int64_t ndim) {
    auto a = to_axes(axes);
    if (dims.size() != a.size())
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd: axes and dims differ in length");
    auto clamp = [](int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; };
    std::vector<int32_t> d;
    for (int64_t v : dims)
        d.push_back(static_cast<int32_t>(clamp(v, INT32_MIN, INT32_MAX)));
    cspmd_spec_t s;
    check(cspmd_spec_from_shards(a.data(), d.data(), static_cast<int>(a.size()),
                                 static_cast<int>(clamp(ndim, -1, CSPMD_MAX_DIMS + 1)), &s));
    std::vector<int64_t> out{s.ndim};
    for (int k = 0; k < s.ndim; k++) {
        out.push_back(s.nentry[k]);
        for (int j = 0; j < s.nentry[k]; j++)
            out.push_back(s.entry[k][j]);
    }
    return out;
}

// torch's code for a dtype (the collectives' dtype options travel as codes).
int64_t dtype_code(at::ScalarType t) { return static_cast<int64_t>(t); }

// ---- cspmd.rules: the typing rules of spmd_typecheck hooks ------------------

// rules.einsum: labels of every term flattened (counts[i] of operand i),
// their ranks, types and linear_in groups.  Returns [type, ndim].
std::vector<int64_t> rules_einsum(std::string equation, IntList labels, IntList counts,
                                  IntList ndims, IntList types, IntList groups,
                                  IntList out_labels) {
    size_t n = counts.size();
    if (ndims.size() != n || types.size() != n || groups.size() != n)
        throw_core_error(CSPMD_ERR_MISUSE, "rules_einsum: the operand lists differ in length");
    auto to_i32 = [](int64_t v) {
        if (v < INT32_MIN || v > INT32_MAX)
            throw_core_error(CSPMD_ERR_MISUSE, "rules_einsum: value out of range");
        return static_cast<int32_t>(v);
    };
    std::vector<int32_t> lab, out;
    for (int64_t v : labels)
        lab.push_back(to_i32(v));
    for (int64_t v : out_labels)
        out.push_back(to_i32(v));
    std::vector<cspmd_einsum_operand_t> ops(n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = to_i32(counts[i]);
        if (c < 0 || k + static_cast<size_t>(c) > lab.size())
            throw_core_error(CSPMD_ERR_MISUSE, "rules_einsum: label counts out of range");
        ops[i].labels = lab.data() + k;
        ops[i].nlabels = c;
        ops[i].ndim = to_i32(ndims[i]);
        ops[i].type = to_type(types[i]);
        ops[i].linear_group = to_i32(groups[i]);
        k += static_cast<size_t>(c);
    }
    cspmd_type_t t;
    int32_t nd;
    check(cspmd_rules_einsum(equation.c_str(), ops.data(), static_cast<int>(n), out.data(),
                             static_cast<int>(out.size()), &t, &nd));
    return {static_cast<int64_t>(t), nd};
}



// Inside torch.func.vmap Python code holds BatchedTensors (one per vmap
// level), and inside torch.func.grad/vjp/jacrev TensorWrappers (one per
// grad level); the ops reach the checker on the tensors they wrap, which
// hold the types.  A BatchedTensor is unwrapped through its header.  The
// TensorWrapper's header pulls in nlohmann/json, which torch does not ship,
// so its value comes from functorch's own binding (get_unwrapped), called
// only for a tensor that carries the FuncTorchGradWrapper key; the caller
// holds the GIL (every function here is called from Python).
at::Tensor grad_wrapper_value(const at::Tensor &t) {
    static PyObject *get_unwrapped = [] {
        py::object fn = py::module_::import("torch._C._functorch").attr("get_unwrapped");
        return fn.release().ptr(); // kept for the life of the process
    }();
    return py::reinterpret_borrow<py::object>(get_unwrapped)(t).cast<at::Tensor>();
}

at::Tensor functorch_unwrapped(const at::Tensor &t) {
    at::Tensor cur = t;
    for (;;) {
        if (auto *b = at::functorch::maybeGetBatchedImpl(cur))
            cur = b->value();
        else if (cur.defined() && cur.key_set().has(c10::DispatchKey::FuncTorchGradWrapper))
            cur = grad_wrapper_value(cur);
        else
            return cur;
    }
}

// The gradient-duality check of one gradient, in one call from a Python
// hook: the forward type is the tensor's if it is alive, else `fallback`;
// a V gradient where P is due is retyped P in place.  A no-op when the key
// is off (a backward run unchecked).
void grad_watch_check(const std::optional<at::Tensor> &t, int64_t fallback,
                      const at::Tensor &grad, std::string what) {
    if (!key_enabled(false) || !grad.defined())
        return;
    cspmd_type_t fwd = t && t->defined()
                           ? impl_get_type(functorch_unwrapped(*t).unsafeGetTensorImpl())
                           : to_type(fallback);
    if (fwd == CSPMD_TYPE_UNTYPED)
        return;
    const at::Tensor inner = functorch_unwrapped(grad);
    cspmd_type_t g = impl_get_type(inner.unsafeGetTensorImpl()), out;
    check(cspmd_grad_check(fwd, g, what.c_str(), &out));
    if (out != g)
        impl_set_type(inner.unsafeGetTensorImpl(), out);
}

int64_t get_type(const at::Tensor &wrapped) {
    const at::Tensor t = functorch_unwrapped(wrapped);
    cspmd_type_t own = impl_get_type(t.unsafeGetTensorImpl());
    if (t.is_view())
        return cspmd_type_view_read(own, impl_get_type(t._base().unsafeGetTensorImpl()));
    return own;
}

// Whether the tensor is the user's data (a factory's result inside a
// region): explicit gradients seed as untyped then (cspmd_grad_seed).
bool tensor_is_data(const at::Tensor &wrapped) {
    const at::Tensor t = functorch_unwrapped(wrapped);
    return cspmd_tensor_is_data(reinterpret_cast<const cspmd_tensor_t *>(t.unsafeGetTensorImpl()));
}

void set_type(const at::Tensor &t, int64_t type) {
    c10::TensorImpl *impl = functorch_unwrapped(t).unsafeGetTensorImpl();
    if (c10::TensorImpl *inner = collective_result_inner(impl)) {
        // funcol's result: ops on it run on the tensor inside, after the wait.
        impl_set_type(inner, to_type(type));
        impl_set_type(impl, to_type(type));
        return;
    }
    require_checked_kind(impl);
    impl_set_type(impl, to_type(type));
}

// ---- checker state ---------------------------------------------------------

std::vector<int64_t> mesh_current() {
    mailbox_poll();
    cspmd_axis_t a[CSPMD_MAX_AXES];
    int n = cspmd_mesh_current(a);
    if (n < 0)
        return {-1};
    return std::vector<int64_t>(a, a + n);
}

// Enable or pause checking on this thread: the core's flags and the key.
void checker_set(bool enabled, bool strict) {
    mailbox_discard();  // this thread's own change supersedes a post
    cspmd_checker_set(enabled ? 1 : 0, strict ? 1 : 0);
    key_set_enabled(enabled);
}

// Pause (or resume) checking for this thread, the key staying included:
// torch.compile's tracing (cspmd/compiled.py).  Returns the previous setting.
bool checker_pause(bool paused) { return key_pause(paused); }

// spmd.redistribute_spec: the core's plan as [op, axis, src lt, src dim,
// dst lt, dst dim] per step.
std::vector<int64_t> redistribute_plan(int64_t cur, int64_t src, int64_t dst, IntList sizes) {
    std::vector<int64_t> sz(sizes.begin(), sizes.end());
    std::vector<cspmd_redist_step_t> steps(3 * CSPMD_MAX_AXES);
    int n = 0;
    check(cspmd_redistribute_plan(to_type(cur), to_type(src), to_type(dst), sz.data(),
                                  static_cast<int>(sz.size()), steps.data(),
                                  static_cast<int>(steps.size()), &n));
    std::vector<int64_t> out;
    for (int i = 0; i < n; i++) {
        const auto &s = steps[static_cast<size_t>(i)];
        out.insert(out.end(), {static_cast<int64_t>(s.op), static_cast<int64_t>(s.axis),
                               static_cast<int64_t>(s.src.ltype), s.src.shard_dim,
                               static_cast<int64_t>(s.dst.ltype), s.dst.shard_dim});
    }
    return out;
}

void mesh_apply(int64_t id) {
    if (id < 0 || id > INT32_MAX)
        check(cspmd_error_set(CSPMD_ERR_MISUSE, "mesh_apply: bad mesh id %lld",
                              static_cast<long long>(id)));
    mailbox_discard_mesh();  // this thread's own change supersedes a post
    check(cspmd_mesh_apply(static_cast<uint32_t>(id)));
}

// A region closed on another thread than its opener's: the opener's flags
// (or mesh) go to its mailbox (thread_mailbox.cpp).
bool mesh_post(int64_t mailbox, int64_t mesh) {
    return mailbox_post_mesh(mailbox, static_cast<uint32_t>(mesh));
}

int64_t checker_mailbox() { return mailbox_open(); }
bool checker_post(int64_t mailbox, bool enabled, bool strict, bool local) {
    return mailbox_post(mailbox, enabled, strict, local);
}

// ---- the op rule table (tests check it against torch's schemas) -------

// (name, overload, linearity, kind, operand, coefficient, scalar,
//  zero_free, result masks, product_a, product_b, sum_self, bound)
std::tuple<std::string, std::string, std::string, int64_t, uint64_t, uint64_t, uint64_t,
           uint64_t, uint64_t, int64_t, int64_t, int64_t, bool>
rule_info(int64_t rule) {
    cspmd_rule_info_t r;
    if (rule < INT32_MIN || rule > INT32_MAX)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd_rule_info: unknown rule");
    check(cspmd_rule_info(static_cast<cspmd_rule_t>(rule), &r));
    return {r.name,           r.overload,         r.linearity,   static_cast<int64_t>(r.kind),
            r.operand_args,   r.coefficient_args, r.scalar_args, r.zero_free_args,
            r.result_args,    r.product_a,        r.product_b,   r.sum_self,
            r.bound != 0};
}

// cspmd_rule_bind over one overload's argument names (op names the
// overload in messages): the kernel's first-call binding, for the test that
// binds every row against every overload it covers.
void rule_bind(int64_t rule, const std::string &op, const std::vector<std::string> &names,
               const std::vector<bool> &is_tensor) {
    if (rule < INT32_MIN || rule > INT32_MAX)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd_rule_bind: unknown rule");
    if (names.size() != is_tensor.size())
        throw_core_error(CSPMD_ERR_VALUE, "rule_bind: the argument lists differ in length");
    std::vector<const char *> ptrs(names.size());
    std::vector<uint8_t> tensors(names.size());
    for (size_t i = 0; i < names.size(); i++) {
        ptrs[i] = names[i].c_str();
        tensors[i] = is_tensor[i] ? 1 : 0;
    }
    check(cspmd_rule_bind(static_cast<cspmd_rule_t>(rule), op.c_str(), ptrs.data(),
                          tensors.data(), names.size()));
}

// cspmd_infer over operands given as parallel lists (schema argument index,
// operand kind, type id, flags): the output type id, or the core's error.
int64_t rule_infer(int64_t rule, IntList args, IntList kinds, IntList types, IntList flags) {
    size_t n = args.size();
    if (kinds.size() != n || types.size() != n || flags.size() != n)
        throw_core_error(CSPMD_ERR_VALUE, "rule_infer: the operand lists differ in length");
    std::vector<cspmd_operand_t> ops(n);
    for (size_t i = 0; i < n; i++) {
        if (args[i] < 0 || args[i] > UINT16_MAX || kinds[i] < 0 || kinds[i] > 2 ||
            flags[i] < 0 || flags[i] > 255)
            throw_core_error(CSPMD_ERR_VALUE, "rule_infer: operand out of range");
        ops[i].arg = static_cast<uint16_t>(args[i]);
        ops[i].kind = static_cast<uint8_t>(kinds[i]);
        ops[i].type = to_type(types[i]);
        ops[i].flags = static_cast<uint8_t>(flags[i]);
    }
    if (rule < INT32_MIN || rule > INT32_MAX)
        throw_core_error(CSPMD_ERR_MISUSE, "rule_infer: unknown rule");
    cspmd_type_t out;
    check(cspmd_infer(static_cast<cspmd_rule_t>(rule), ops.data(), static_cast<int>(n), &out));
    return out;
}

std::vector<int64_t> checker_state() {
    return {cspmd_checker_enabled(), cspmd_checker_strict(), key_enabled() ? 1 : 0};
}

void trace_set(bool on) { cspmd_trace_set(on ? 1 : 0); }
bool trace_enabled() { return cspmd_trace_enabled() != 0; }

// The checker's dispatch key on this torch (torch's Python bindings name
// neither Fake nor the other slots cspmd could use).
std::string checker_key() { return c10::toString(compat::kCheckerKey); }
// Whether the key sits below the Python key on this torch (2.13 and newer),
// so that cspmd checks some Python handlers' ops at the handler.
bool checker_below_python() { return compat::kCheckerBelowPython; }

int64_t register_explicit() {
    static int64_t n = register_key_ops();
    return n;
}

// Raise msg with status st the way the kernel raises an op's error: the
// call described by the core's error context (arguments named `names`,
// each a tensor or, where tensors[i] is None, texts[i]).  For the Python
// front's own checks that name a call (reinterpret_mesh).
void error_raise(int64_t st, const std::string &msg, const std::string &op,
                 const std::vector<std::string> &names,
                 const std::vector<std::optional<at::Tensor>> &tensors,
                 const std::vector<std::string> &texts) {
    auto status = static_cast<cspmd_status_t>(st);
    if (st >= 0 || std::string(cspmd_status_name(status)) == "CSPMD_ERR_UNKNOWN" ||
        names.size() != tensors.size() || names.size() != texts.size())
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd: error_raise: bad arguments");
    cspmd_error_set(status, "%s", msg.c_str());
    cspmd_error_context_begin(op.c_str());
    for (size_t i = 0; i < names.size(); i++) {
        cspmd_error_context_arg(names[i].c_str(), tensors[i] ? nullptr : texts[i].c_str());
        if (tensors[i])
            error_context_tensor(*tensors[i]);
    }
    raise_status(cspmd_error_context_finish(status));
}

// The core's enum lists (cspmd.h's X-macros) as (names, values), so the
// Python front spells no number: "STATUS_ERR_VALUE", "LT_R", "COLL_CONVERT",
// "PLACEMENT_SHARD", "TYPE_UNTYPED".
std::tuple<std::vector<std::string>, std::vector<int64_t>> codes() {
    std::vector<std::string> names;
    std::vector<int64_t> values;
#define CSPMD_CODE_STATUS_(name, value, doc)                                                  \
    names.push_back("STATUS_" #name);                                                         \
    values.push_back(CSPMD_##name);
#define CSPMD_CODE_LTYPE_(name, value, doc)                                                   \
    names.push_back("LT_" #name);                                                             \
    values.push_back(CSPMD_LT_##name);
#define CSPMD_CODE_COLL_(name, text, noop)                                                    \
    names.push_back("COLL_" #name);                                                           \
    values.push_back(CSPMD_COLL_##name);
    CSPMD_STATUS_LIST(CSPMD_CODE_STATUS_)
    CSPMD_LTYPE_LIST(CSPMD_CODE_LTYPE_)
    CSPMD_COLL_LIST(CSPMD_CODE_COLL_)
#define CSPMD_CODE_DTSRC_(name, doc)                                                          \
    names.push_back("DTSRC_" #name);                                                          \
    values.push_back(CSPMD_DTYPE_FROM_##name);
    CSPMD_DTYPE_SOURCE_LIST(CSPMD_CODE_DTSRC_)
#undef CSPMD_CODE_DTSRC_
#define CSPMD_CODE_PLACE_(name, doc)                                                          \
    names.push_back("PLACEMENT_" #name);                                                          \
    values.push_back(CSPMD_PLACEMENT_##name);
    CSPMD_PLACEMENT_LIST(CSPMD_CODE_PLACE_)
#undef CSPMD_CODE_PLACE_
    names.insert(names.end(), {"TYPE_UNTYPED", "TYPE_EMPTY"});
    values.insert(values.end(), {CSPMD_TYPE_UNTYPED, CSPMD_TYPE_EMPTY});
#undef CSPMD_CODE_STATUS_
#undef CSPMD_CODE_LTYPE_
#undef CSPMD_CODE_COLL_
    return {names, values};
}

} // namespace
} // namespace cspmd

// The control functions as a Python extension module, `cspmd._C` (loaded by
// cspmd/_lib.py from this same library).  Not dispatcher ops on purpose:
// bookkeeping such as get_type/set_type must never show up as ops in a
// user's TorchDispatchMode or in a profiler trace, and a plain call is also
// far cheaper than a dispatcher round trip.  torch::wrap_pybind_function
// raises the shim's C++ errors as their Python exceptions.
PyMODINIT_FUNC PyInit__C(void) {
    using namespace cspmd;
    using torch::wrap_pybind_function;
    static PyModuleDef def;
    pybind11::module_ m;
    try {
        register_checker_key();
        m = pybind11::module_::create_extension_module(
            "cspmd._C", "cspmd's control functions (axes, types, mesh stack, checker state)",
            &def);
#define CSPMD_BIND(fn) m.def(#fn, wrap_pybind_function(fn))
        CSPMD_BIND(error_raise);
        CSPMD_BIND(axis_layout);
        CSPMD_BIND(axes_sort_outer);
        CSPMD_BIND(type_make);
        CSPMD_BIND(type_entries);
        CSPMD_BIND(type_spec);
        CSPMD_BIND(type_format);
        CSPMD_BIND(spec_from_shards);
        CSPMD_BIND(dtype_code);
        CSPMD_BIND(rules_einsum);
        CSPMD_BIND(grad_watch_check);
        CSPMD_BIND(watch_leaves);
        CSPMD_BIND(register_type_saving);
        CSPMD_BIND(collective_check_input);
        CSPMD_BIND(get_type);
        CSPMD_BIND(tensor_is_data);
        CSPMD_BIND(set_type);
        CSPMD_BIND(mesh_current);
        CSPMD_BIND(checker_set);
        CSPMD_BIND(checker_state);
        CSPMD_BIND(checker_pause);
        CSPMD_BIND(unchecked_code_add);
        CSPMD_BIND(unchecked_code_active);
        CSPMD_BIND(redistribute_plan);
        CSPMD_BIND(mesh_apply);
        CSPMD_BIND(mesh_post);
        CSPMD_BIND(checker_mailbox);
        CSPMD_BIND(checker_post);
        CSPMD_BIND(rule_info);
        CSPMD_BIND(rule_bind);
        CSPMD_BIND(rule_infer);
        CSPMD_BIND(register_explicit);
        CSPMD_BIND(checker_key);
        CSPMD_BIND(checker_below_python);
        CSPMD_BIND(trace_set);
        CSPMD_BIND(trace_enabled);
        CSPMD_BIND(codes);
#undef CSPMD_BIND
        bind_core_calls(m);  // the rows of CSPMD_PY_CALL_LIST
        bind_handler_call(m);
    } catch (pybind11::error_already_set &e) {
        e.restore();
        return nullptr;
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_ImportError, e.what());
        return nullptr;
    }
    return m.release().ptr();
}
