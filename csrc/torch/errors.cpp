// Core errors as Python exceptions.  A core status maps to the exception the
// Python front documents: SPMD_TYPE -> cspmd.SpmdTypeError (a RuntimeError
// subclass, so Tensor dunders do not swallow it; REDISTRIBUTE and
// PROPAGATION -> its subclasses RedistributeError and
// DTensorPropagationError), VALUE -> ValueError, TYPE
// -> TypeError, the rest -> RuntimeError.  The class is looked up lazily in
// the Python front (the GIL is held wherever torch translates exceptions).
#include <Python.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/python_anomaly_mode.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <typeinfo>
#include <vector>

#include "shim.h"
#include "shim_internal.h"
#include "torch_compat.h"

namespace cspmd {
namespace {

// kind: 0 SpmdTypeError, 1 RedistributeError, 2 DTensorPropagationError.
PyObject *lookup_error_class(int kind) {
    static PyObject *cls[3] = {nullptr, nullptr, nullptr};
    static const char *const names[3] = {"SpmdTypeError", "RedistributeError",
                                         "DTensorPropagationError"};
    if (cls[kind])
        return cls[kind];
    PyObject *mod = PyImport_ImportModule("cspmd._errors");
    if (mod) {
        cls[kind] = PyObject_GetAttrString(mod, names[kind]);
        Py_DECREF(mod);
    }
    if (!cls[kind]) {
        PyErr_Clear();
        return PyExc_RuntimeError;
    }
    return cls[kind];
}

struct SpmdTypeError final : torch::PyTorchError {
    SpmdTypeError(std::string m, int k) : torch::PyTorchError(std::move(m)), kind(k) {}
    PyObject *python_type() override { return lookup_error_class(kind); }
    int kind;
};

// A C++ exception that torch's handlers raise in Python as `*cls`.
struct PythonError final : torch::PyTorchError {
    PythonError(PyObject *c, std::string m) : torch::PyTorchError(std::move(m)), cls(c) {}
    PyObject *python_type() override { return cls; }
    PyObject *cls;
};

// The SpmdTypeError class a status raises: 0, 1, 2 as in lookup_error_class;
// -1 for the statuses that raise a builtin exception.
int spmd_error_kind(cspmd_status_t st) {
    switch (st) {
    case CSPMD_ERR_SPMD_TYPE: return 0;
    case CSPMD_ERR_REDISTRIBUTE: return 1;
    case CSPMD_ERR_PROPAGATION: return 2;
    case CSPMD_OK:
    case CSPMD_ERR_VALUE:
    case CSPMD_ERR_TYPE:
    case CSPMD_ERR_MISUSE:
    case CSPMD_ERR_NOMEM:
    case CSPMD_ERR_RUNTIME:
    case CSPMD_ERR_PENDING:
        break;
    }
    return -1;
}

PyObject *text_or_none(const char *s) {
    if (s == nullptr || s[0] == '\0')
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(std::strlen(s)), "replace");
}

// (name, index, dtype, shape, type id, text) for each operand the core's
// context describes; the Python front names them (cspmd._errors).
PyObject *operands_tuple() {
    int n = cspmd_error_operand_count();
    PyObject *tup = PyTuple_New(n);
    for (int i = 0; tup && i < n; i++) {
        cspmd_error_operand_t o;
        if (cspmd_error_operand(i, &o) != CSPMD_OK) {
            Py_CLEAR(tup);
            break;
        }
        PyObject *shape = Py_None;
        Py_INCREF(shape);
        if (o.dtype) {
            Py_DECREF(shape);
            shape = PyTuple_New(o.ndim);
            for (int d = 0; shape && d < o.ndim; d++) {
                PyObject *v = o.sizes[d] < 0 ? (Py_INCREF(Py_None), Py_None)
                                             : PyLong_FromLongLong(o.sizes[d]);
                if (!v) {
                    Py_CLEAR(shape);
                    break;
                }
                PyTuple_SET_ITEM(shape, d, v);
            }
        }
        PyObject *item = shape ? Py_BuildValue("(NiNNIN)", text_or_none(o.name), o.elem,
                                               text_or_none(o.dtype), shape,
                                               static_cast<unsigned>(o.type),
                                               text_or_none(o.text))
                               : nullptr;
        if (!item) {
            Py_CLEAR(tup);
            break;
        }
        PyTuple_SET_ITEM(tup, i, item);
    }
    return tup;
}

// cls(msg, context=..., op=..., ..., operands=...) from the thread's current
// error, its fields read one by one; nullptr (no Python error set) if that
// fails.  GIL held.
PyObject *structured_error(PyObject *cls) {
    PyObject *kw = PyDict_New();
    bool ok = kw != nullptr;
    for (int f = 0; ok && f < CSPMD_ERROR_FIELD_COUNT; f++) {
        auto field = static_cast<cspmd_error_field_t>(f);
        if (field == CSPMD_ERROR_FIELD_MESSAGE)
            continue;
        PyObject *v = text_or_none(cspmd_error_field(field));
        ok = v && PyDict_SetItemString(kw, cspmd_error_field_name(field), v) == 0;
        Py_XDECREF(v);
    }
    PyObject *ops = ok ? operands_tuple() : nullptr;
    ok = ops && PyDict_SetItemString(kw, "operands", ops) == 0;
    Py_XDECREF(ops);
    const char *msg = cspmd_error_field(CSPMD_ERROR_FIELD_MESSAGE);
    PyObject *args =
        ok ? Py_BuildValue("(N)", PyUnicode_DecodeUTF8(msg, static_cast<Py_ssize_t>(
                                                                std::strlen(msg)), "replace"))
           : nullptr;
    PyObject *exc = args ? PyObject_Call(cls, args, kw) : nullptr;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (!exc)
        PyErr_Clear();
    return exc;
}

} // namespace

void throw_core_error(cspmd_status_t st, const std::string &msg) {
    int kind = spmd_error_kind(st);
    if (kind >= 0)
        throw SpmdTypeError(msg, kind);
    switch (st) {
    case CSPMD_ERR_VALUE: throw PythonError(PyExc_ValueError, msg);
    case CSPMD_ERR_TYPE: throw PythonError(PyExc_TypeError, msg);
    case CSPMD_OK:
    case CSPMD_ERR_SPMD_TYPE:
    case CSPMD_ERR_REDISTRIBUTE:
    case CSPMD_ERR_PROPAGATION:
    case CSPMD_ERR_MISUSE:
    case CSPMD_ERR_NOMEM:
    case CSPMD_ERR_RUNTIME:
    case CSPMD_ERR_PENDING:
        break;
    }
    throw PythonError(PyExc_RuntimeError, msg.empty() ? std::string(cspmd_status_name(st)) : msg);
}

void error_context_tensor(const at::Tensor &x) {
    std::vector<int64_t> sizes(static_cast<size_t>(x.dim()));
    for (int64_t d = 0; d < x.dim(); d++)
        sizes[static_cast<size_t>(d)] = x.size(d);
    cspmd_error_context_tensor(
        -1, cspmd_tensor_dtype_abbrev(reinterpret_cast<cspmd_tensor_t *>(x.unsafeGetTensorImpl())),
        sizes.data(), static_cast<int>(sizes.size()), impl_get_type(x.unsafeGetTensorImpl()));
}

// An SpmdTypeError carries the core's fields (msg, context, op, site, ...,
// operands) as attributes: the exception object is made here, with the GIL,
// and travels as a python_error (torch restores it in Python, across
// autograd's threads too).  Other statuses, or no Python: the text.
void throw_current_error(cspmd_status_t st) {
    int kind = spmd_error_kind(st);
    if (kind >= 0 && Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        PyObject *cls = lookup_error_class(kind);
        PyObject *exc = cls != PyExc_RuntimeError ? structured_error(cls) : nullptr;
        if (exc) {
            PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc)), exc);
            Py_DECREF(exc);
            python_error e;
            e.persist();
            PyGILState_Release(g);
            throw e;
        }
        PyGILState_Release(g);
    }
    throw_core_error(st, cspmd_last_error());
}

} // namespace cspmd

// The user's source line comes from the Python front's one frame finder
// (cspmd._frames), so the kernel, the collectives and tracebacks agree on
// what "the user's frame" is.  Error path only; the GIL is taken because
// torch releases it around op calls.
static size_t call_frame_finder(const char *fn, PyObject *arg, char *buf, size_t len) {
    PyObject *mod = PyImport_ImportModule("cspmd._frames");
    PyObject *res = nullptr;
    if (mod)
        res = arg ? PyObject_CallMethod(mod, fn, "O", arg) : PyObject_CallMethod(mod, fn, nullptr);
    const char *text = res && PyUnicode_Check(res) ? PyUnicode_AsUTF8(res) : nullptr;
    int n = text ? std::snprintf(buf, len, "%s", text) : 0;
    if (!text)
        PyErr_Clear();  // a message without its line is better than none
    Py_XDECREF(res);
    Py_XDECREF(mod);
    return n < 0 ? 0 : static_cast<size_t>(n);
}

extern "C" size_t cspmd_python_user_frame(char *buf, size_t len) {
    if (len)
        buf[0] = '\0';
    if (!Py_IsInitialized())
        return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    size_t n = call_frame_finder("user_site", nullptr, buf, len);
    PyGILState_Release(g);
    return n;
}

// The forward op's user line, from the stack anomaly mode recorded for the
// node (a list of traceback.format_stack() strings).
static void forward_site(torch::autograd::Node *node, char *where, size_t len) {
    // libtorch_python does not export PyAnomalyMetadata's typeinfo, so
    // compare the dynamic type's name instead of dynamic_cast.
    torch::autograd::AnomalyMetadata *base = node->metadata();
    if (!base || std::strcmp(typeid(*base).name(), "N5torch8autograd17PyAnomalyMetadataE") != 0)
        return;
    auto *meta = static_cast<torch::autograd::PyAnomalyMetadata *>(base);
    PyObject *tb = PyDict_GetItemString(meta->dict(), "traceback_");  // borrowed
    if (tb && PyList_Check(tb))
        call_frame_finder("user_site_of_stack", tb, where, len);
}

extern "C" int cspmd_autograd_node(char *name, size_t name_len, char *where, size_t where_len) {
    if (name_len)
        name[0] = '\0';
    if (where_len)
        where[0] = '\0';
    try {
        cspmd::compat::NodeRef node = torch::autograd::get_current_node();
        if (!node)
            return 0;
        std::snprintf(name, name_len, "%s", node->name().c_str());
        if (torch::autograd::AnomalyMode::is_enabled() && Py_IsInitialized()) {
            PyGILState_STATE g = PyGILState_Ensure();
            forward_site(node.get(), where, where_len);
            PyGILState_Release(g);
        }
        return 1;
    } catch (...) {
        return 0;
    }
}

extern "C" cspmd_status_t cspmd_error_context_finish(cspmd_status_t status) {
    char node[256], forward[512], site[512];
    if (!cspmd_autograd_node(node, sizeof node, forward, sizeof forward))
        node[0] = forward[0] = '\0';
    cspmd_python_user_frame(site, sizeof site);
    return cspmd_error_context_end(status, node, forward, site);
}

// Tracing ---------------------------------------------------------------

static std::atomic<int> trace_on{0};

extern "C" int cspmd_trace_enabled(void) { return trace_on.load(std::memory_order_relaxed); }

extern "C" void cspmd_trace_set(int on) { trace_on.store(on ? 1 : 0, std::memory_order_relaxed); }

extern "C" void cspmd_trace_emit(const char *line) {
    if (!Py_IsInitialized())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *mod = PyImport_ImportModule("cspmd.trace");
    PyObject *res = mod ? PyObject_CallMethod(mod, "_emit", "s", line) : nullptr;
    if (!res)
        PyErr_Clear();  // tracing never breaks the program
    Py_XDECREF(res);
    Py_XDECREF(mod);
    PyGILState_Release(g);
}
