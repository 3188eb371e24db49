// Core errors as Python exceptions.  A core status maps to the exception the
// Python front documents: SPMD_TYPE -> cspmd.SpmdTypeError (a RuntimeError
// subclass, so Tensor dunders do not swallow it), VALUE -> ValueError, TYPE
// -> TypeError, the rest -> RuntimeError.  The class is looked up lazily in
// the Python front (the GIL is held wherever torch translates exceptions).
#include <Python.h>
#include <frameobject.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/python_anomaly_mode.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <typeinfo>

#include "shim.h"
#include "shim_internal.h"

namespace cspmd {
namespace {

PyObject *lookup_error_class() {
    static PyObject *cls = nullptr;
    if (cls)
        return cls;
    PyObject *mod = PyImport_ImportModule("cspmd._errors");
    if (mod) {
        cls = PyObject_GetAttrString(mod, "SpmdTypeError");
        Py_DECREF(mod);
    }
    if (!cls) {
        PyErr_Clear();
        return PyExc_RuntimeError;
    }
    return cls;
}

struct SpmdTypeError final : torch::PyTorchError {
    explicit SpmdTypeError(std::string m) : torch::PyTorchError(std::move(m)) {}
    PyObject *python_type() override { return lookup_error_class(); }
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
    case CSPMD_ERR_SPMD_TYPE: throw SpmdTypeError(msg);
    case CSPMD_ERR_VALUE: throw PythonError(PyExc_ValueError, msg);
    case CSPMD_ERR_TYPE: throw PythonError(PyExc_TypeError, msg);
    default:
        throw PythonError(PyExc_RuntimeError,
                          msg.empty() ? std::string(cspmd_status_name(st)) : msg);
    }
}

} // namespace cspmd

// Frames of these modules are cspmd's or torch's own, not the user's.
static bool internal_module(PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *globals = PyFrame_GetGlobals(f);
#else
    PyObject *globals = f->f_globals;
    Py_XINCREF(globals);
#endif
    if (!globals)
        return false;
    PyObject *name = PyDict_GetItemString(globals, "__name__");  // borrowed
    const char *mod = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : nullptr;
    bool internal = false;
    if (mod) {
        auto starts = [mod](const char *p) {
            size_t n = std::strlen(p);
            return std::strncmp(mod, p, n) == 0 && (mod[n] == '\0' || mod[n] == '.');
        };
        internal = starts("torch") || starts("cspmd") || starts("contextlib") ||
                   starts("importlib");
    } else {
        PyErr_Clear();
    }
    Py_DECREF(globals);
    return internal;
}

// torch releases the GIL around op calls; take it back (error path only).
static size_t user_frame_locked(char *buf, size_t len) {
    PyFrameObject *f = PyEval_GetFrame();
    if (f)
        Py_INCREF(f);
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *name = code ? code->co_filename : nullptr;
        const char *file = name ? PyUnicode_AsUTF8(name) : nullptr;
        if (!file)
            PyErr_Clear();
        if (file && !internal_module(f)) {
            int line = PyFrame_GetLineNumber(f);
            int n = std::snprintf(buf, len, "%s:%d", file, line);
            Py_XDECREF(code);
            Py_DECREF(f);
            return n < 0 ? 0 : static_cast<size_t>(n);
        }
        Py_XDECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    return 0;
}

extern "C" size_t cspmd_python_user_frame(char *buf, size_t len) {
    if (len)
        buf[0] = '\0';
    if (!Py_IsInitialized())
        return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    size_t n = user_frame_locked(buf, len);
    PyGILState_Release(g);
    return n;
}

// The innermost user frame of an anomaly-mode traceback (a list of
// traceback.format_stack() strings: '  File "x.py", line 12, in f\n ...').
static void forward_site(torch::autograd::Node *node, char *where, size_t len) {
    // libtorch_python does not export PyAnomalyMetadata's typeinfo, so
    // compare the dynamic type's name instead of dynamic_cast.
    torch::autograd::AnomalyMetadata *base = node->metadata();
    if (!base || std::strcmp(typeid(*base).name(), "N5torch8autograd17PyAnomalyMetadataE") != 0)
        return;
    auto *meta = static_cast<torch::autograd::PyAnomalyMetadata *>(base);
    PyObject *tb = PyDict_GetItemString(meta->dict(), "traceback_");  // borrowed
    if (!tb || !PyList_Check(tb))
        return;
    for (Py_ssize_t i = PyList_Size(tb) - 1; i >= 0; i--) {
        const char *line = PyUnicode_AsUTF8(PyList_GetItem(tb, i));
        if (!line) {
            PyErr_Clear();
            continue;
        }
        if (std::strstr(line, "/torch/") || std::strstr(line, "/cspmd/"))
            continue;
        const char *file = std::strstr(line, "File \"");
        const char *ln = std::strstr(line, "\", line ");
        if (!file || !ln)
            continue;
        file += 6;
        std::snprintf(where, len, "%.*s:%d", static_cast<int>(ln - file), file,
                      std::atoi(ln + 7));
        return;
    }
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
