// The handful of tensor ops and c10d functional collectives that the C
// collectives (csrc/kernel/collective_compute.c) are written with.  Each returns an owned
// TensorImpl reference as an opaque cspmd_tensor_t.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <string>
#include <vector>

#include "shim.h"
#include "shim_internal.h"

namespace {

const at::Tensor &borrow(cspmd_tensor_t *t, at::Tensor &slot) {
    auto *impl = reinterpret_cast<c10::TensorImpl *>(t);
    slot = at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(impl));
    return slot;
}

cspmd_tensor_t *give(at::Tensor t) {
    return reinterpret_cast<cspmd_tensor_t *>(t.unsafeReleaseTensorImpl());
}

template <class F> cspmd_status_t guarded(F f) {
    try {
        f();
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

// Called boxed, then waited on.  `op` is looked up once by each caller.
at::Tensor functional(const c10::OperatorHandle &op, torch::jit::Stack stack) {
    static const auto wait =
        c10::Dispatcher::singleton().findSchemaOrThrow("_c10d_functional::wait_tensor", "");
    op.callBoxed(stack);
    torch::jit::Stack w{stack.at(0)};
    wait.callBoxed(w);
    return w.at(0).toTensor();
}

// Each handle is looked up on first use and kept (never freed: operators
// live as long as the process).
const c10::OperatorHandle &find(const char *name) {
    return *new c10::OperatorHandle(c10::Dispatcher::singleton().findSchemaOrThrow(name, ""));
}

#define FUNCTIONAL_OP(fn, name)                                                                    \
    const c10::OperatorHandle &fn() {                                                              \
        static const c10::OperatorHandle &h = find("_c10d_functional::" name);                     \
        return h;                                                                                  \
    }
FUNCTIONAL_OP(OP_ALL_REDUCE_, "all_reduce_")
FUNCTIONAL_OP(OP_ALL_REDUCE, "all_reduce")
FUNCTIONAL_OP(OP_ALL_GATHER_INTO_TENSOR, "all_gather_into_tensor")
FUNCTIONAL_OP(OP_REDUCE_SCATTER_TENSOR, "reduce_scatter_tensor")
FUNCTIONAL_OP(OP_ALL_TO_ALL_SINGLE, "all_to_all_single")
FUNCTIONAL_OP(OP_BROADCAST, "broadcast")

} // namespace

extern "C" {

void cspmd_tensor_release(cspmd_tensor_t *t) {
    if (t)
        c10::raw::intrusive_ptr::decref(reinterpret_cast<c10::TensorImpl *>(t));
}

cspmd_tensor_t *cspmd_tensor_retain(cspmd_tensor_t *t) {
    c10::raw::intrusive_ptr::incref(reinterpret_cast<c10::TensorImpl *>(t));
    return t;
}

int cspmd_tensor_dtype(const cspmd_tensor_t *t) {
    return static_cast<int>(reinterpret_cast<const c10::TensorImpl *>(t)->dtype().toScalarType());
}

int cspmd_dtype_float_bits(int dtype) {
    if (dtype < 0 || dtype >= static_cast<int>(c10::ScalarType::NumOptions))
        return 0;
    auto st = static_cast<c10::ScalarType>(dtype);
    if (!c10::isFloatingType(st))
        return 0;
    return static_cast<int>(c10::elementSize(st) * 8);
}

cspmd_status_t cspmd_op_alias(cspmd_tensor_t *x, cspmd_tensor_t **out) {
    return guarded([&] { at::Tensor s; *out = give(borrow(x, s).alias()); });
}

cspmd_status_t cspmd_op_clone(cspmd_tensor_t *x, cspmd_tensor_t **out) {
    return guarded([&] { at::Tensor s; *out = give(borrow(x, s).clone()); });
}

cspmd_status_t cspmd_op_contiguous(cspmd_tensor_t *x, cspmd_tensor_t **out) {
    return guarded([&] { at::Tensor s; *out = give(borrow(x, s).contiguous()); });
}

cspmd_status_t cspmd_op_to_dtype(cspmd_tensor_t *x, int dtype, cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        *out = give(dtype < 0 ? t : t.to(static_cast<c10::ScalarType>(dtype)));
    });
}

cspmd_status_t cspmd_op_select(cspmd_tensor_t *x, int64_t dim, int64_t index,
                               cspmd_tensor_t **out) {
    // A copy: results of conversions never alias the input's storage.
    return guarded([&] {
        at::Tensor s;
        *out = give(borrow(x, s).select(dim, index).clone(at::MemoryFormat::Contiguous));
    });
}

cspmd_status_t cspmd_op_narrow(cspmd_tensor_t *x, int64_t dim, int64_t start, int64_t length,
                               cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        *out = give(borrow(x, s).narrow(dim, start, length).clone(at::MemoryFormat::Contiguous));
    });
}

cspmd_status_t cspmd_op_movedim(cspmd_tensor_t *x, int64_t from, int64_t to,
                                cspmd_tensor_t **out) {
    return guarded([&] { at::Tensor s; *out = give(borrow(x, s).movedim(from, to)); });
}

cspmd_status_t cspmd_op_unsqueeze(cspmd_tensor_t *x, int64_t dim, cspmd_tensor_t **out) {
    return guarded([&] { at::Tensor s; *out = give(borrow(x, s).unsqueeze(dim)); });
}

cspmd_status_t cspmd_op_cat(cspmd_tensor_t *const *xs, int n, int64_t dim, cspmd_tensor_t **out) {
    return guarded([&] {
        std::vector<at::Tensor> ts(static_cast<size_t>(n));
        for (int i = 0; i < n; i++)
            borrow(xs[i], ts[static_cast<size_t>(i)]);
        *out = give(at::cat(ts, dim));
    });
}

cspmd_status_t cspmd_op_zeros(cspmd_tensor_t *x, int64_t dim, int64_t extent, int new_dim,
                              cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
        if (new_dim)
            shape.insert(shape.begin() + dim, extent);
        else if (extent >= 0)
            shape[static_cast<size_t>(dim)] = extent;
        // new_zeros, not the factory: under LocalTensorMode a factory call
        // would make a LocalTensor out of one rank's piece.
        *out = give(t.new_zeros(shape));
    });
}

cspmd_status_t cspmd_op_copy_into(cspmd_tensor_t *dst, int64_t dim, int64_t start,
                                  cspmd_tensor_t *src) {
    return guarded([&] {
        at::Tensor sd, ss;
        const at::Tensor &d = borrow(dst, sd);
        const at::Tensor &s = borrow(src, ss);
        d.narrow(dim, start, s.size(dim)).copy_(s);
    });
}

cspmd_status_t cspmd_group_info(const char *group, int64_t *rank, int64_t *size) {
    return guarded([&] {
        auto pg = c10d::resolve_process_group(group);
        *rank = pg->getRank();
        *size = pg->getSize();
    });
}

// Meta tensors carry no data: c10d has no Meta kernels for every collective,
// so the result's shape is made here (dim 0 scaled as the collective would).
at::Tensor meta_result(const at::Tensor &t, int64_t dim0) {
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    if (!shape.empty())
        shape[0] = dim0;
    return at::empty(shape, t.options());
}

cspmd_status_t cspmd_c10d_all_reduce(cspmd_tensor_t *x, const char *group, int inplace,
                                     cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        if (t.is_meta()) {
            *out = give(inplace ? t : at::empty_like(t));
        } else if (inplace) {
            functional(OP_ALL_REDUCE_(), {t, std::string("sum"), std::string(group)});
            *out = give(t);
        } else {
            *out = give(functional(OP_ALL_REDUCE(),
                                   {t, std::string("sum"), std::string(group)}));
        }
    });
}

cspmd_status_t cspmd_c10d_all_gather(cspmd_tensor_t *x, const char *group, int64_t size,
                                     cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        if (t.is_meta()) {
            *out = give(meta_result(t, t.size(0) * size));
            return;
        }
        *out = give(functional(OP_ALL_GATHER_INTO_TENSOR(),
                               {t, size, std::string(group)}));
    });
}

cspmd_status_t cspmd_c10d_reduce_scatter(cspmd_tensor_t *x, const char *group, int64_t size,
                                         cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        if (t.is_meta()) {
            *out = give(meta_result(t, t.size(0) / size));
            return;
        }
        *out = give(functional(OP_REDUCE_SCATTER_TENSOR(),
                               {t, std::string("sum"), size, std::string(group)}));
    });
}

cspmd_status_t cspmd_c10d_all_to_all(cspmd_tensor_t *x, const int64_t *out_sizes,
                                     const int64_t *in_sizes, int n, const char *group,
                                     cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        std::vector<int64_t> o(out_sizes, out_sizes + n), i(in_sizes, in_sizes + n);
        if (t.is_meta()) {
            int64_t total = 0;
            for (int64_t v : o)
                total += v;
            *out = give(meta_result(t, total));
            return;
        }
        *out = give(functional(OP_ALL_TO_ALL_SINGLE(),
                               {t, o, i, std::string(group)}));
    });
}

cspmd_status_t cspmd_c10d_broadcast(cspmd_tensor_t *x, const char *group, int64_t root,
                                    cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        if (t.is_meta()) {
            *out = give(at::empty_like(t));
            return;
        }
        *out = give(functional(OP_BROADCAST(), {t, root, std::string(group)}));
    });
}

// c10d's functional ops have no reduce: the process group's own, on a copy
// (it reduces in place), waited on.
cspmd_status_t cspmd_c10d_reduce(cspmd_tensor_t *x, const char *group, int64_t root,
                                 cspmd_tensor_t **out) {
    return guarded([&] {
        at::Tensor s;
        const at::Tensor &t = borrow(x, s);
        at::Tensor r = t.clone(at::MemoryFormat::Contiguous);
        if (!t.is_meta()) {
            std::vector<at::Tensor> v{r};
            c10d::ReduceOptions opts;
            opts.reduceOp = c10d::ReduceOp::SUM;
            opts.rootRank = root;
            c10d::resolve_process_group(group)->reduce(v, opts)->wait();
        }
        *out = give(r);
    });
}

} // extern "C"
