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

#include "shim.h"
#include "shim_internal.h"

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

} // namespace

void throw_core_error(cspmd_status_t st, const std::string &msg) {
    switch (st) {
    case CSPMD_ERR_SPMD_TYPE: throw SpmdTypeError(msg, 0);
    case CSPMD_ERR_REDISTRIBUTE: throw SpmdTypeError(msg, 1);
    case CSPMD_ERR_PROPAGATION: throw SpmdTypeError(msg, 2);
    case CSPMD_ERR_VALUE: throw PythonError(PyExc_ValueError, msg);
    case CSPMD_ERR_TYPE: throw PythonError(PyExc_TypeError, msg);
    case CSPMD_OK:
    case CSPMD_ERR_MISUSE:
    case CSPMD_ERR_NOMEM:
    case CSPMD_ERR_RUNTIME:
    case CSPMD_ERR_PENDING:
        break;
    }
    throw PythonError(PyExc_RuntimeError, msg.empty() ? std::string(cspmd_status_name(st)) : msg);
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
        std::shared_ptr<torch::autograd::Node> node = torch::autograd::get_current_node();
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
