// cspmd::collective -- one differentiable op for the collectives and
// conversions.  The core validates (src, dst), infers the output type and
// names the backward op; this file runs c10d's functional collectives on the
// process group found by name (NCCL for CUDA tensors, Gloo for CPU, the fake
// backend for single-process checking) and wires autograd, whose backward
// calls cspmd::collective again through the dispatcher, so the backward
// collective is type-checked too.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>

#include "shim.h"
#include "shim_internal.h"

namespace cspmd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

const char *coll_name(int64_t op) {
    switch (op) {
    case CSPMD_COLL_ALL_REDUCE: return "all_reduce";
    case CSPMD_COLL_ALL_GATHER: return "all_gather";
    case CSPMD_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case CSPMD_COLL_ALL_TO_ALL: return "all_to_all";
    case CSPMD_COLL_REINTERPRET: return "reinterpret";
    case CSPMD_COLL_CONVERT: return "convert";
    case CSPMD_COLL_REDISTRIBUTE: return "redistribute";
    case CSPMD_COLL_INVARIANT_TO_REPLICATE: return "invariant_to_replicate";
    default: return "collective";
    }
}

cspmd_ctype_t ctype(int64_t lt, int64_t dim) {
    return cspmd_ctype_t{static_cast<cspmd_ltype_t>(lt), static_cast<int32_t>(dim)};
}

// _c10d_functional ops, called boxed with the group *name* (the schema's
// group argument type has changed across torch versions), then waited on.
at::Tensor functional(const char *name, torch::jit::Stack stack) {
    static const auto wait =
        c10::Dispatcher::singleton().findSchemaOrThrow("_c10d_functional::wait_tensor", "");
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
    op.callBoxed(stack);
    at::Tensor t = stack.at(0).toTensor();
    torch::jit::Stack w{t};
    wait.callBoxed(w);
    return w.at(0).toTensor();
}

at::Tensor run_all_reduce(const at::Tensor &x, const std::string &group, bool inplace) {
    if (!x.is_contiguous())
        throw_core_error(CSPMD_ERR_VALUE, "all_reduce: the input must be contiguous");
    if (inplace) {
        functional("_c10d_functional::all_reduce_", {x, std::string("sum"), group});
        return x;
    }
    return functional("_c10d_functional::all_reduce", {x, std::string("sum"), group});
}

at::Tensor compute(int64_t op, const at::Tensor &x, const std::string &group, cspmd_ctype_t src,
                   cspmd_ctype_t dst, bool inplace) {
    if (op == CSPMD_COLL_ALL_REDUCE)
        return run_all_reduce(x, group, inplace);
    // Conversions whose local data does not change (I<->R).
    if ((op == CSPMD_COLL_CONVERT || op == CSPMD_COLL_INVARIANT_TO_REPLICATE ||
         op == CSPMD_COLL_REINTERPRET) &&
        (src.ltype == CSPMD_LT_I || src.ltype == CSPMD_LT_R) &&
        (dst.ltype == CSPMD_LT_I || dst.ltype == CSPMD_LT_R))
        return x.alias();
    throw_core_error(CSPMD_ERR_VALUE, std::string(coll_name(op)) +
                                          ": this (src, dst) pair is not implemented yet");
}

// The kernel below autograd: validate, check the type, compute, type.
at::Tensor collective_impl(const at::Tensor &x, int64_t op, std::string group, int64_t axis,
                           int64_t src, int64_t src_dim, int64_t dst, int64_t dst_dim,
                           bool expert, bool inplace) {
    if (op < 0 || op >= CSPMD_COLL_COUNT)
        throw_core_error(CSPMD_ERR_MISUSE, "cspmd.collective: unknown op code");
    cspmd_ctype_t s = ctype(src, src_dim), d = ctype(dst, dst_dim);
    check(cspmd_coll_validate(static_cast<cspmd_coll_t>(op), s, d, expert ? 1 : 0));
    bool checking = key_enabled();
    cspmd_type_t out_type = CSPMD_TYPE_UNTYPED;
    if (checking)
        check(cspmd_coll_infer(coll_name(op), static_cast<cspmd_axis_t>(axis), s.ltype, d.ltype,
                               impl_get_type(x.unsafeGetTensorImpl()), &out_type));
    at::Tensor out;
    {
        KeyOff off;
        out = compute(op, x, group, s, d, inplace);
    }
    if (checking)
        impl_set_type(out.unsafeGetTensorImpl(), out_type);
    return out;
}

at::Tensor call_collective(const at::Tensor &x, int64_t op, const std::string &group, int64_t axis,
                           int64_t src, int64_t src_dim, int64_t dst, int64_t dst_dim, bool expert,
                           bool inplace) {
    static auto handle = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("cspmd::collective", "")
                             .typed<at::Tensor(const at::Tensor &, int64_t, std::string, int64_t,
                                               int64_t, int64_t, int64_t, int64_t, bool, bool)>();
    return handle.call(x, op, group, axis, src, src_dim, dst, dst_dim, expert, inplace);
}

struct CollectiveFn : torch::autograd::Function<CollectiveFn> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, int64_t op,
                              std::string group, int64_t axis, int64_t src, int64_t src_dim,
                              int64_t dst, int64_t dst_dim, bool expert, bool inplace) {
        ctx->saved_data["op"] = op;
        ctx->saved_data["group"] = group;
        ctx->saved_data["axis"] = axis;
        ctx->saved_data["src"] = src;
        ctx->saved_data["src_dim"] = src_dim;
        ctx->saved_data["dst"] = dst;
        ctx->saved_data["dst_dim"] = dst_dim;
        at::AutoDispatchBelowADInplaceOrView below;
        at::Tensor out = call_collective(x, op, group, axis, src, src_dim, dst, dst_dim, expert,
                                         inplace);
        if (inplace)
            ctx->mark_dirty({x});
        return out;
    }

    static tensor_list backward(AutogradContext *ctx, tensor_list grads) {
        int64_t op = ctx->saved_data["op"].toInt();
        cspmd_ctype_t s = ctype(ctx->saved_data["src"].toInt(), ctx->saved_data["src_dim"].toInt());
        cspmd_ctype_t d = ctype(ctx->saved_data["dst"].toInt(), ctx->saved_data["dst_dim"].toInt());
        cspmd_coll_t bop;
        cspmd_ctype_t bs, bd;
        check(cspmd_coll_backward(static_cast<cspmd_coll_t>(op), s, d, &bop, &bs, &bd));
        at::Tensor g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
        at::Tensor gx = call_collective(g, bop, ctx->saved_data["group"].toStringRef(),
                                        ctx->saved_data["axis"].toInt(), bs.ltype, bs.shard_dim,
                                        bd.ltype, bd.shard_dim, true, false);
        tensor_list out(10);
        out[0] = gx;
        return out;
    }
};

at::Tensor collective_autograd(const at::Tensor &x, int64_t op, std::string group, int64_t axis,
                               int64_t src, int64_t src_dim, int64_t dst, int64_t dst_dim,
                               bool expert, bool inplace) {
    return CollectiveFn::apply(x, op, std::move(group), axis, src, src_dim, dst, dst_dim, expert,
                               inplace);
}

} // namespace
} // namespace cspmd

TORCH_LIBRARY_FRAGMENT(cspmd, m) {
    m.def("collective(Tensor x, int op, str group, int axis, int src, int src_dim, int dst, "
          "int dst_dim, bool expert, bool inplace) -> Tensor");
}

TORCH_LIBRARY_IMPL(cspmd, CompositeExplicitAutograd, m) {
    m.impl("collective", &cspmd::collective_impl);
}

TORCH_LIBRARY_IMPL(cspmd, Autograd, m) {
    m.impl("collective", &cspmd::collective_autograd);
}
