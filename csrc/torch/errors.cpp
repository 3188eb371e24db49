// Core errors as Python exceptions.  A core status maps to the exception the
// Python front documents: SPMD_TYPE -> cspmd.SpmdTypeError (a RuntimeError
// subclass, so Tensor dunders do not swallow it), VALUE -> ValueError, TYPE
// -> TypeError, the rest -> RuntimeError.  The class is looked up lazily in
// the Python front (the GIL is held wherever torch translates exceptions).
#include <Python.h>
#include <frameobject.h>
#include <torch/csrc/Exceptions.h>

#include <cstdio>
#include <cstring>
#include <string>

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
