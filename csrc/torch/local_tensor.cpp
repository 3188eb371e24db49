// LocalTensorMode: the per-rank tensors of a LocalTensor, for the steps of
// a collective that depend on the rank (csrc/kernel/collective_compute.c).
// Which ranks form a group, and a LocalTensor's construction, are Python's:
// cspmd._local_tensor does both; this file only carries tensors across.
#include <Python.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <string>
#include <vector>

#include "shim.h"
#include "shim_internal.h"

struct cspmd_local {
    std::vector<int64_t> ranks;        // the simulated (global) ranks
    std::vector<int64_t> group_ranks;  // each one's index in the group
    std::vector<at::Tensor> tensors;
};

namespace {

namespace py = pybind11;

// Only a Python subclass can be a LocalTensor: plain tensors never take the GIL.
bool maybe_subclass(const at::Tensor &t) {
    return t.key_set().has(c10::DispatchKey::Python);
}

cspmd_tensor_t *give(at::Tensor t) {
    return reinterpret_cast<cspmd_tensor_t *>(t.unsafeReleaseTensorImpl());
}

// The per-rank tensors of a LocalTensor (empty if the object is not one).
std::vector<at::Tensor> inner_tensors(const c10::TensorImpl *impl) {
    std::vector<at::Tensor> out;
    PyObject *obj = impl->pyobj_slot()->load_pyobj();
    if (!obj)
        return out;
    py::gil_scoped_acquire gil;
    try {
        py::object inner =
            py::module_::import("cspmd._local_tensor").attr("inner")(py::handle(obj));
        if (!inner.is_none())
            for (py::handle t : inner)
                out.push_back(t.cast<at::Tensor>());
    } catch (py::error_already_set &e) {
        e.discard_as_unraisable("cspmd: reading a LocalTensor's per-rank tensors");
        out.clear();
    }
    return out;
}

} // namespace

namespace cspmd {

bool impl_is_local_tensor(const c10::TensorImpl *impl) {
    if (!impl->key_set().has(c10::DispatchKey::Python))
        return false;
    // The Python object's class, read without the GIL: both are set once
    // and live as long as the tensor.
    PyObject *obj = impl->pyobj_slot()->load_pyobj();
    return obj && std::strcmp(Py_TYPE(obj)->tp_name, "LocalTensor") == 0;
}

cspmd_type_t local_tensor_inner_type(const c10::TensorImpl *impl) {
    std::vector<at::Tensor> inner = inner_tensors(impl);
    if (inner.empty())
        return CSPMD_TYPE_UNTYPED;
    cspmd_type_t t = impl_get_type(inner[0].unsafeGetTensorImpl());
    for (const at::Tensor &x : inner)
        if (impl_get_type(x.unsafeGetTensorImpl()) != t)
            return CSPMD_TYPE_UNTYPED;
    return t;
}

void local_tensor_set_inner_types(const c10::TensorImpl *impl, cspmd_type_t type) {
    for (const at::Tensor &x : inner_tensors(impl))
        impl_set_type(x.unsafeGetTensorImpl(), type);
}

} // namespace cspmd

extern "C" {

cspmd_status_t cspmd_local_split(cspmd_tensor_t *x, const char *group, cspmd_local_t **out) {
    *out = nullptr;
    try {
        at::Tensor t(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(
            reinterpret_cast<c10::TensorImpl *>(x)));
        if (!maybe_subclass(t))
            return CSPMD_OK;
        py::gil_scoped_acquire gil;
        py::object pieces = py::module_::import("cspmd._local_tensor").attr("split")(
            t, std::string(group));
        if (pieces.is_none())
            return CSPMD_OK;
        auto *l = new cspmd_local();
        try {
            for (py::handle item : pieces) {
                auto tup = item.cast<py::tuple>();
                l->ranks.push_back(tup[0].cast<int64_t>());
                l->group_ranks.push_back(tup[1].cast<int64_t>());
                l->tensors.push_back(tup[2].cast<at::Tensor>());
            }
        } catch (...) {
            delete l;
            throw;
        }
        *out = l;
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

int cspmd_local_count(const cspmd_local_t *l) {
    return static_cast<int>(l->tensors.size());
}

cspmd_tensor_t *cspmd_local_get(const cspmd_local_t *l, int i, int64_t *group_rank) {
    auto k = static_cast<size_t>(i);
    *group_rank = l->group_ranks[k];
    return reinterpret_cast<cspmd_tensor_t *>(l->tensors[k].unsafeGetTensorImpl());
}

void cspmd_local_put(cspmd_local_t *l, int i, cspmd_tensor_t *t) {
    l->tensors[static_cast<size_t>(i)] = at::Tensor(
        c10::intrusive_ptr<c10::TensorImpl>::reclaim(reinterpret_cast<c10::TensorImpl *>(t)));
}

cspmd_status_t cspmd_local_join(cspmd_local_t *l, cspmd_tensor_t **out) {
    try {
        py::gil_scoped_acquire gil;
        py::object joined = py::module_::import("cspmd._local_tensor").attr("join")(
            py::cast(l->ranks), py::cast(l->tensors));
        *out = give(joined.cast<at::Tensor>());
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

void cspmd_local_free(cspmd_local_t *l) {
    delete l;
}

} // extern "C"
