// cspmd::collective -- one differentiable op for the collectives and
// conversions.  The core validates (src, dst), resolves dims and dtypes,
// infers the output type and names the backward op; csrc/kernel/collective_compute.c moves
// the data with c10d's functional collectives on the process group found by
// name (NCCL for CUDA tensors, Gloo for CPU, the fake backend for
// single-process checking).  Autograd's backward calls cspmd::collective
// again through the dispatcher, so the backward collective is type-checked.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kernel/collective_compute.h"
#include "shim.h"
#include "shim_internal.h"

namespace cspmd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using IntList = c10::ArrayRef<int64_t>;

// Whether the collective's input can receive a gradient, as its caller
// sees it (1: it cannot).  collective_autograd records it before the
// autograd Function runs the kernel with grad mode off; -1 elsewhere (a
// backward collective, a direct call), where it is read off x.
thread_local int tl_caller_input_no_grad = -1;

int input_no_grad(const at::Tensor &x) {
    if (tl_caller_input_no_grad >= 0)
        return tl_caller_input_no_grad;
    return !(x.requires_grad() && at::GradMode::is_enabled());
}

struct CallerInputNoGrad {
    int saved;
    explicit CallerInputNoGrad(int no_grad) : saved(tl_caller_input_no_grad) {
        tl_caller_input_no_grad = no_grad;
    }
    ~CallerInputNoGrad() { tl_caller_input_no_grad = saved; }
    CallerInputNoGrad(const CallerInputNoGrad &) = delete;
    CallerInputNoGrad &operator=(const CallerInputNoGrad &) = delete;
};

cspmd_ctype_t ctype(int64_t lt, int64_t dim) {
    return cspmd_ctype_t{static_cast<cspmd_ltype_t>(lt), static_cast<int32_t>(dim)};
}

// A call with routing and collective dims resolved by the core.
struct Resolved {
    cspmd_coll_t op;
    cspmd_ctype_t src, dst;
    int64_t a, b;
    bool expert;
    bool noop;  // redistribute between equal types: the input itself
};

Resolved resolve(int64_t op, IntList types, IntList dims, bool has_sizes, bool expert) {
    if (op < 0 || op >= CSPMD_COLL_COUNT || types.size() != 4 || dims.size() != 2)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd.collective: malformed arguments");
    Resolved r{static_cast<cspmd_coll_t>(op), ctype(types[0], types[1]), ctype(types[2], types[3]),
               dims[0], dims[1], expert, false};
    if (r.op == CSPMD_COLL_REDISTRIBUTE) {
        cspmd_coll_t routed;
        check(cspmd_coll_route(r.src, r.dst, &routed));
        r.noop = routed == CSPMD_COLL_REDISTRIBUTE;
        r.op = routed;
        r.expert = true;  // redistribute bypasses the expert gate
        if (r.noop)
            return r;
    }
    check(cspmd_coll_validate(r.op, r.src, r.dst, r.expert ? 1 : 0));
    check(cspmd_coll_dims(r.op, r.src, r.dst, has_sizes ? 1 : 0, &r.a, &r.b));
    return r;
}

// needs_grad: the input requires grad and grad mode is on *at the call*
// (known in the Autograd kernel; autograd turns grad mode off inside).
std::pair<int, int> resolve_dtypes(const Resolved &r, const at::Tensor &x, IntList dtypes,
                                   bool needs_grad) {
    if (dtypes.size() < 2 || dtypes.size() % 2)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd.collective: malformed dtypes");
    cspmd_dtype_info_t info{};
    info.in_dtype = static_cast<int>(x.scalar_type());
    info.in_bits = cspmd_dtype_float_bits(info.in_dtype);
    info.op_dtype = static_cast<int>(dtypes[0]);
    info.op_bits = cspmd_dtype_float_bits(info.op_dtype);
    info.out_dtype = static_cast<int>(dtypes[1]);
    info.out_bits = cspmd_dtype_float_bits(info.out_dtype);
    info.needs_grad = needs_grad ? 1 : 0;
    info.has_backward_op_dtype = dtypes.size() > 2 && dtypes[2] >= 0;
    int op = -1, out = -1;
    check(cspmd_coll_dtypes(r.op, r.src, r.dst, &info, &op, &out));
    return {op, out};
}

const char *ctype_text(cspmd_ctype_t t, char *buf, size_t len) {
    if (t.ltype == CSPMD_LT_V && t.shard_dim >= 0)
        std::snprintf(buf, len, "S(%d)", static_cast<int>(t.shard_dim));
    else
        std::snprintf(buf, len, "%s", cspmd_ltype_letter(t.ltype));
    return buf;
}

// A type error of a collective, described as the C kernel describes an
// op's (the core's error context): x, axis, src and dst.
[[noreturn]] void raise_with_context(cspmd_status_t st, const char *fn, const at::Tensor &x,
                                     cspmd_axis_t axis, cspmd_ctype_t src, cspmd_ctype_t dst) {
    char buf[64];
    cspmd_error_context_begin(fn);
    cspmd_error_context_arg("x", nullptr);
    error_context_tensor(x);
    cspmd_error_context_arg("axis", cspmd_axis_display(axis, 0));
    cspmd_error_context_arg("src", ctype_text(src, buf, sizeof buf));
    cspmd_error_context_arg("dst", ctype_text(dst, buf, sizeof buf));
    raise_status(cspmd_error_context_finish(st));
}

// "<user file:line>  cspmd::all_reduce({tp: P}, axis=tp, src=P, dst=R) -> {tp: R}",
// the line trace() logs for a collective (the C kernel logs aten ops alike).
void trace_collective(const char *fn, const at::Tensor &x, cspmd_axis_t axis, cspmd_ctype_t src,
                      cspmd_ctype_t dst, cspmd_type_t out) {
    char buf[512];
    std::string line;
    if (cspmd_python_user_frame(buf, sizeof buf) > 0)
        line += std::string(buf) + "  ";
    cspmd_type_t t = impl_get_type(x.unsafeGetTensorImpl());
    cspmd_type_format(t == CSPMD_TYPE_UNTYPED ? CSPMD_TYPE_EMPTY : t, buf, sizeof buf);
    line += std::string("cspmd::") + fn + "(" + buf + ", axis=" + cspmd_axis_display(axis, 0);
    line += std::string(", src=") + ctype_text(src, buf, sizeof buf);
    line += std::string(", dst=") + ctype_text(dst, buf, sizeof buf) + ") -> ";
    cspmd_type_format(out, buf, sizeof buf);
    line += buf;
    cspmd_trace_emit(line.c_str());
}

} // namespace

namespace {
// Global mode's spec handling, forward and backward (gradients carry
// specs too, as in the op kernel).
bool global_active() { return !cspmd_checker_local(); }
} // namespace

namespace {
at::Tensor call_collective(const at::Tensor &x, int64_t op, const std::string &group, int64_t axis,
                           IntList types, IntList dims, IntList sizes_a, IntList sizes_b,
                           IntList dtypes, bool expert, bool inplace);

// x is V on axis (a V input that a reduction's src=P reads as P).
bool varying_on(const at::Tensor &x, int64_t axis) {
    cspmd_type_t in = impl_get_type(x.unsafeGetTensorImpl());
    return in != CSPMD_TYPE_UNTYPED &&
           cspmd_type_get(in, static_cast<cspmd_axis_t>(axis)) == CSPMD_LT_V;
}

const std::vector<int64_t> kNoDims{-1, -1}, kNoSizes{}, kNoDtypes{-1, -1};

// reinterpret(x, axis, src, dst) as a full call (recorded by autograd).
at::Tensor reinterpret_call(const at::Tensor &x, const std::string &group, int64_t axis,
                            cspmd_ltype_t src, cspmd_ltype_t dst) {
    std::vector<int64_t> types{src, -1, dst, -1};
    return call_collective(x, CSPMD_COLL_REINTERPRET, group, axis, types, kNoDims, kNoSizes,
                           kNoSizes, kNoDtypes, true, false);
}
} // namespace

// A conversion whose src and dst agree changes nothing, but its input must
// still be src on a known axis: checked like any collective's input.  The
// result takes the type the core gives it; where that differs from x's own
// (x accepted by a coercion) it is a new tensor, so x keeps its type: V read
// as P is reinterpret(V, P) (its gradient comes back V), and R and I taken
// for each other (x takes no gradient) an alias.
at::Tensor collective_check_input(const at::Tensor &x, std::string fn, std::string group,
                                  int64_t axis, int64_t src_lt, int64_t src_dim) {
    mailbox_poll();  // state posted by another thread (a region of ours closed there)
    if (!key_enabled())
        return x;
    cspmd_type_t out;
    cspmd_ctype_t src = ctype(src_lt, src_dim);
    cspmd_type_t in = impl_get_type(x.unsafeGetTensorImpl());
    cspmd_status_t st = cspmd_coll_infer_input(fn.c_str(), static_cast<cspmd_axis_t>(axis),
                                               src.ltype, src.ltype, in, input_no_grad(x),
                                               &out);
    if (st == CSPMD_OK && global_active())
        st = cspmd_global_coll(fn.c_str(), static_cast<cspmd_axis_t>(axis), src, src, in, out,
                               static_cast<int>(x.dim()), &out);
    if (st != CSPMD_OK)
        raise_with_context(st, fn.c_str(), x, static_cast<cspmd_axis_t>(axis), src, src);
    if (out == in || in == CSPMD_TYPE_UNTYPED)
        return x;
    if (src.ltype == CSPMD_LT_P && varying_on(x, axis))
        return reinterpret_call(x, group, axis, CSPMD_LT_V, CSPMD_LT_P);
    at::Tensor y = x.alias();
    impl_set_type(y.unsafeGetTensorImpl(), out);
    return y;
}

namespace {

// The kernel below autograd: check the type, compute in C, type the result.
at::Tensor collective_impl(const at::Tensor &x, int64_t op, std::string group, int64_t axis,
                           IntList types, IntList dims, IntList sizes_a, IntList sizes_b,
                           IntList dtypes, bool expert, bool inplace,
                           const std::string &bad_options) {
    if (!bad_options.empty())
        throw_core_error(CSPMD_ERR_VALUE, bad_options);
    Resolved r = resolve(op, types, dims, !sizes_a.empty() || !sizes_b.empty(), expert);
    const char *fn = cspmd_coll_name(static_cast<cspmd_coll_t>(op));  // as called
    if (r.noop) {
        at::Tensor y = collective_check_input(x, fn, group, axis, r.src.ltype, r.src.shard_dim);
        return y.is_same(x) ? x.alias() : y;
    }
    auto dt = resolve_dtypes(r, x, dtypes, false);
    bool checking = key_enabled();
    cspmd_type_t out_type = CSPMD_TYPE_UNTYPED;
    if (checking) {
        cspmd_type_t in = impl_get_type(x.unsafeGetTensorImpl());
        cspmd_status_t st = cspmd_coll_infer_input(fn, static_cast<cspmd_axis_t>(axis),
                                                   r.src.ltype, r.dst.ltype, in,
                                                   input_no_grad(x), &out_type);
        // Global mode: the result's partition spec (checked before anything runs;
        // rechecked below for the rare result whose dims differ).
        if (st == CSPMD_OK && global_active())
            st = cspmd_global_coll(fn, static_cast<cspmd_axis_t>(axis), r.src, r.dst, in,
                                   out_type, static_cast<int>(x.dim()), &out_type);
        if (st != CSPMD_OK)
            raise_with_context(st, fn, x, static_cast<cspmd_axis_t>(axis), r.src, r.dst);
    }
    if (checking && cspmd_trace_enabled())
        trace_collective(fn, x, static_cast<cspmd_axis_t>(axis), r.src, r.dst, out_type);
    cspmd_coll_call_t call{};
    call.op = r.op;
    call.group = group.c_str();
    call.src = r.src;
    call.dst = r.dst;
    call.inplace = inplace ? 1 : 0;
    call.dim_a = r.a;
    call.dim_b = r.b;
    call.sizes_a = sizes_a.empty() ? nullptr : sizes_a.data();
    call.nsizes_a = static_cast<int>(sizes_a.size());
    call.sizes_b = sizes_b.empty() ? nullptr : sizes_b.data();
    call.nsizes_b = static_cast<int>(sizes_b.size());
    call.op_dtype = dt.first;
    call.out_dtype = dt.second;
    cspmd_tensor_t *res = nullptr;
    {
        KeyOff off;
        check(cspmd_collective_compute(
            &call, reinterpret_cast<cspmd_tensor_t *>(x.unsafeGetTensorImpl()), &res));
    }
    at::Tensor out(
        c10::intrusive_ptr<c10::TensorImpl>::reclaim(reinterpret_cast<c10::TensorImpl *>(res)));
    if (checking && global_active() && out.dim() != x.dim()) {
        cspmd_type_t in = impl_get_type(x.unsafeGetTensorImpl());
        cspmd_status_t st = cspmd_coll_infer_input(fn, static_cast<cspmd_axis_t>(axis),
                                                   r.src.ltype, r.dst.ltype, in,
                                                   input_no_grad(x), &out_type);
        if (st == CSPMD_OK)
            st = cspmd_global_coll(fn, static_cast<cspmd_axis_t>(axis), r.src, r.dst, in,
                                   out_type, static_cast<int>(out.dim()), &out_type);
        if (st != CSPMD_OK)
            raise_with_context(st, fn, x, static_cast<cspmd_axis_t>(axis), r.src, r.dst);
    }
    if (checking)
        impl_set_type(out.unsafeGetTensorImpl(), out_type);
    return out;
}

at::Tensor call_collective(const at::Tensor &x, int64_t op, const std::string &group, int64_t axis,
                           IntList types, IntList dims, IntList sizes_a, IntList sizes_b,
                           IntList dtypes, bool expert, bool inplace) {
    static auto handle =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("cspmd::collective", "")
            .typed<at::Tensor(const at::Tensor &, int64_t, std::string, int64_t, IntList, IntList,
                              IntList, IntList, IntList, bool, bool, const std::string &)>();
    return handle.call(x, op, group, axis, types, dims, sizes_a, sizes_b, dtypes, expert, inplace,
                       std::string());
}

std::vector<int64_t> vec(IntList v) { return std::vector<int64_t>(v.begin(), v.end()); }

struct CollectiveFn : torch::autograd::Function<CollectiveFn> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, int64_t op,
                              std::string group, int64_t axis, IntList types, IntList dims,
                              IntList sizes_a, IntList sizes_b, IntList dtypes, bool expert,
                              bool inplace, std::string unused_bad_options) {
        bool has_sizes = !sizes_a.empty() || !sizes_b.empty();
        Resolved r = resolve(op, types, dims, has_sizes, expert);
        // The core names the backward call now; it is saved packed, one
        // entry per kind (saved_data is a string-keyed map).
        cspmd_coll_step_t fwd{r.op, r.src, r.dst, r.a, r.b}, bwd{};
        cspmd_coll_sizes_t bsizes = CSPMD_COLL_SIZES_SAME;
        if (!r.noop)
            check(cspmd_coll_backward_step(&fwd, has_sizes ? 1 : 0, &bwd, &bsizes));
        ctx->saved_data["p"] = std::vector<int64_t>{
            r.noop ? 1 : 0,   axis,          bwd.op,    bwd.src.ltype,
            bwd.src.shard_dim, bwd.dst.ltype, bwd.dst.shard_dim, bwd.dim_a,
            bwd.dim_b,        static_cast<int64_t>(x.scalar_type())};
        ctx->saved_data["group"] = group;
        // A V input read as P (src=P): the gradient the backward call gives
        // is that of a P input (R); reinterpret(R, V) makes it x's dual.
        ctx->saved_data["v_as_p"] = !r.noop && r.src.ltype == CSPMD_LT_P && key_enabled() &&
                                    varying_on(x, axis);
        if (bsizes == CSPMD_COLL_SIZES_CHUNKS) {
            int64_t rank = 0, ws = 1, off = 0, len = 0;
            check(cspmd_group_info(group.c_str(), &rank, &ws));
            int64_t n = x.size(r.dst.shard_dim);
            std::vector<int64_t> pieces;
            for (int64_t s = 0; s < ws; s++) {
                check(cspmd_coll_chunk(n, ws, s, &off, &len));
                pieces.push_back(len);
            }
            ctx->saved_data["sizes_a"] = pieces;
            ctx->saved_data["sizes_b"] = std::vector<int64_t>();
        } else if (has_sizes) {
            bool swap = bsizes == CSPMD_COLL_SIZES_SWAPPED;
            ctx->saved_data["sizes_a"] = vec(swap ? sizes_b : sizes_a);
            ctx->saved_data["sizes_b"] = vec(swap ? sizes_a : sizes_b);
        }
        if (dtypes.size() > 2)
            ctx->saved_data["dtypes"] = vec(dtypes);
        at::AutoDispatchBelowADInplaceOrView below;
        at::Tensor out = call_collective(x, op, group, axis, types, dims, sizes_a, sizes_b, dtypes,
                                         expert, inplace);
        if (inplace)
            ctx->mark_dirty({x});
        return out;
    }

    static tensor_list backward(AutogradContext *ctx, tensor_list grads) {
        tensor_list out(12);
        auto p = ctx->saved_data["p"].toIntVector();
        if (p[0]) {  // a no-op forward: the gradient passes through
            out[0] = grads[0];
            return out;
        }
        auto saved = [&](const char *k) {
            auto it = ctx->saved_data.find(k);
            return it == ctx->saved_data.end() ? std::vector<int64_t>() : it->second.toIntVector();
        };
        auto sa = saved("sizes_a"), sb = saved("sizes_b"), dtypes = saved("dtypes");
        // backward_options: the next level of (op_dtype, out_dtype); a
        // missing out_dtype brings gradients back in the input's dtype.
        std::vector<int64_t> bdt;
        if (dtypes.size() > 2)
            bdt.assign(dtypes.begin() + 2, dtypes.end());
        else
            bdt = {-1, -1};
        if (bdt[1] < 0)
            bdt[1] = p[9];
        std::vector<int64_t> btypes{p[3], p[4], p[5], p[6]}, bdims{p[7], p[8]};
        const std::string &group = ctx->saved_data["group"].toStringRef();
        out[0] = call_collective(grads[0], p[2], group, p[1], btypes, bdims, sa, sb, bdt, true,
                                 false);
        if (ctx->saved_data["v_as_p"].toBool() && key_enabled())
            out[0] = reinterpret_call(out[0], group, p[1], CSPMD_LT_R, CSPMD_LT_V);
        return out;
    }
};

at::Tensor collective_autograd(const at::Tensor &x, int64_t op, std::string group, int64_t axis,
                               IntList types, IntList dims, IntList sizes_a, IntList sizes_b,
                               IntList dtypes, bool expert, bool inplace,
                               const std::string &bad_options) {
    mailbox_poll();  // state posted by another thread (a region of ours closed there)
    // The reduced-precision rule looks at grad mode as the caller has it,
    // and comes before the unknown-backward_options error.
    Resolved r = resolve(op, types, dims, !sizes_a.empty() || !sizes_b.empty(), expert);
    if (!r.noop)
        resolve_dtypes(r, x, dtypes, x.requires_grad() && at::GradMode::is_enabled());
    if (!bad_options.empty())
        throw_core_error(CSPMD_ERR_VALUE, bad_options);
    CallerInputNoGrad caller(!(x.requires_grad() && at::GradMode::is_enabled()));
    if (!(x.requires_grad() && at::GradMode::is_enabled())) {
        // No graph to record: skip the autograd Function's bookkeeping.
        at::AutoDispatchBelowADInplaceOrView below;
        return call_collective(x, op, group, axis, types, dims, sizes_a, sizes_b, dtypes, expert,
                               inplace);
    }
    bool unchecked = in_unchecked_code() && !torch::autograd::get_current_node();
    at::Tensor out = CollectiveFn::apply(x, op, std::move(group), axis, types, dims, sizes_a,
                                         sizes_b, dtypes, expert, inplace, std::string());
    if (unchecked)  // run in register_no_typecheck code: so is its backward
        mark_unchecked_node(out, {x});
    return out;
}

} // namespace
} // namespace cspmd

TORCH_LIBRARY_FRAGMENT(cspmd, m) {
    m.def("collective(Tensor x, int op, str group, int axis, int[] types, int[] dims, "
          "int[] sizes_a, int[] sizes_b, int[] dtypes, bool expert, bool inplace, "
          "str bad_options=\"\") -> Tensor");
}

TORCH_LIBRARY_IMPL(cspmd, CompositeExplicitAutograd, m) {
    m.impl("collective", &cspmd::collective_impl);
}

TORCH_LIBRARY_IMPL(cspmd, Autograd, m) {
    m.impl("collective", &cspmd::collective_autograd);
}

// A user's TorchDispatchMode (CommDebugMode, say) sees the functional
// collectives that cspmd::collective runs -- _c10d_functional.all_reduce and
// its wait_tensor, as the reference's collectives show up -- rather than one
// opaque op: the op itself falls through the Python key.
TORCH_LIBRARY_IMPL(cspmd, Python, m) {
    m.impl("collective", torch::CppFunction::makeFallthrough());
}
