// Checking an op at a Python handler.  From torch 2.13 the checker's key
// sits below the Python key (docs/dev/architecture.md, "The dispatch key"):
// an op on a tensor subclass or under a TorchDispatchMode reaches the
// handler (__torch_dispatch__) first, and the key sees only what the handler
// runs inside.  For the handlers whose tensors carry cspmd's types
// (cspmd/_handlers.py lists them) the front calls handler_call instead of
// the handler: the op is checked here on the handler's own operands, as the
// key checks it on older torch, and the handler runs in place of the
// redispatch with the key off, so what it runs inside is not checked again.
// On older torch the key has checked the op and turned itself off before
// the handler runs, so only what C++ hands a handler directly (a detach of
// a saved FakeTensor) is checked here.
#include <ATen/ScalarOps.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernel/raw_dist_kernel.h"
#include "shim.h"
#include "shim_internal.h"
#include "torch_compat.h"

namespace py = pybind11;

namespace cspmd {

namespace {
// The handler returned NotImplemented (LocalTensorMode does for a tensor
// subclass it does not know): torch then asks the next handler, and so
// does handler_call, with nothing typed.
struct HandlerDeclined {};
} // namespace

void run_python_handler(cspmd_call *call) {
    py::gil_scoped_acquire gil;
    KeyOff off;
    const auto &schema = call->op->schema();
    torch::jit::drop(*call->stack, schema.arguments().size());
    py::object r = py::reinterpret_borrow<py::object>(static_cast<PyObject *>(call->python_run))();
    if (r.ptr() == Py_NotImplemented)
        throw HandlerDeclined{};
    const auto &rets = schema.returns();
    if (rets.size() == 1) {
        call->stack->push_back(torch::jit::toIValue(r, rets[0].type()));
    } else if (rets.size() > 1) {
        py::sequence seq = r.cast<py::sequence>();
        for (size_t i = 0; i < rets.size(); i++)
            call->stack->push_back(torch::jit::toIValue(seq[i], rets[i].type()));
    }
    call->python_result = r.release().ptr();
}

namespace {

// A Tensor (or Tensor?) argument that a Python handler received as a
// number: torch hands a wrapped-number tensor (the 2 of x * 2) to Python
// as the number, and this turns it back.
bool is_tensor_arg(const c10::TypePtr &t) {
    if (auto opt = t->cast<c10::OptionalType>())
        return opt->getElementType()->kind() == c10::TypeKind::TensorType;
    return t->kind() == c10::TypeKind::TensorType;
}

c10::IValue to_ivalue(py::handle v, const c10::Argument &a) {
    if (is_tensor_arg(a.type()) && (PyBool_Check(v.ptr()) || PyLong_Check(v.ptr()) ||
                                    PyFloat_Check(v.ptr()) || PyComplex_Check(v.ptr()))) {
        at::Tensor t = at::scalar_to_tensor(torch::jit::toIValue(v, c10::NumberType::get()).toScalar());
        t.unsafeGetTensorImpl()->set_wrapped_number(true);
        return t;
    }
    return torch::jit::toIValue(v, a.type());
}

// The handler's arguments as the op's boxed stack: positional, then by
// name, then the schema's defaults.
torch::jit::Stack make_stack(const c10::FunctionSchema &schema, const py::tuple &args,
                             const py::dict &kwargs) {
    torch::jit::Stack stack;
    const auto &params = schema.arguments();
    if (args.size() > params.size())
        throw std::runtime_error(schema.name() + ": too many arguments");
    for (size_t i = 0; i < params.size(); i++) {
        const c10::Argument &a = params[i];
        if (i < args.size()) {
            stack.push_back(to_ivalue(args[i], a));
        } else if (kwargs.contains(a.name().c_str())) {
            stack.push_back(to_ivalue(kwargs[a.name().c_str()], a));
        } else if (a.default_value()) {
            stack.push_back(*a.default_value());
        } else {
            throw std::runtime_error(schema.name() + ": missing argument " + a.name());
        }
    }
    return stack;
}

// The op `func` (an OpOverload) on (args, kwargs), run by run(): checked,
// run, its results typed; returns what run() returned.
py::object handler_call(py::object func, py::tuple args, py::dict kwargs, py::object run) {
    if (!key_enabled())
        return run();
    py::object schema = func.attr("_schema");
    auto name = schema.attr("name").cast<std::string>();
    auto overload = schema.attr("overload_name").cast<std::string>();
    // The metadata queries that C++ makes of a Python tensor (its sizes,
    // strides, device: the kernel reading an operand makes them too) reach
    // the handler from TensorImpl, not through the dispatcher: no key ever
    // sees them, so neither does the check.
    static const char *const queries[] = {
        "aten::dim", "aten::size", "aten::stride", "aten::numel", "aten::sym_size",
        "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset",
        "aten::storage_offset", "aten::is_contiguous", "aten::is_strides_like_format",
        "aten::is_non_overlapping_and_dense"};
    for (const char *q : queries)
        if (name == q)
            return run();
    auto found = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!found)  // prim::device, prim::layout
        return run();
    const c10::OperatorHandle &op = *found;
    torch::jit::Stack stack = make_stack(op.schema(), args, kwargs);
    cspmd_call call{&op, c10::DispatchKeySet(), &stack, op.schema().returns().size(),
                    run.ptr(), nullptr};
    struct Result {  // the handler's result, released if the check throws
        cspmd_call &c;
        ~Result() { Py_XDECREF(static_cast<PyObject *>(c.python_result)); }
    } result{call};
    try {
        if (cspmd_raw_op_is_raw(name.c_str()))
            check_raw_call(&call, name.c_str());
        else
            check_call(&call);
    } catch (const HandlerDeclined &) {
        return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    }
    py::object out = py::reinterpret_steal<py::object>(static_cast<PyObject *>(call.python_result));
    call.python_result = nullptr;
    return out;
}

// The classes whose handlers cspmd/_handlers.py wraps (a test keeps the
// two lists equal).  Read by class name, without the GIL.
const char *const kHandled[] = {"FakeTensor", "LocalTensor", "DTensor"};

std::vector<std::string> handled_classes() {
    return std::vector<std::string>(std::begin(kHandled), std::end(kHandled));
}

} // namespace

void require_checked_kind(const c10::TensorImpl *impl) {
    if (!compat::kCheckerBelowPython || !impl->key_set().has(c10::DispatchKey::Python))
        return;
    PyObject *obj = impl->pyobj_slot()->load_pyobj();
    if (!obj)
        return;
    const char *cls = Py_TYPE(obj)->tp_name;
    for (const char *h : kHandled)
        if (std::strcmp(cls, h) == 0)
            return;
    throw_core_error(
        CSPMD_ERR_TYPE,
        std::string("cspmd cannot type a ") + cls + " on torch " +
            std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
            ": from torch 2.13 a tensor subclass's __torch_dispatch__ runs before the checker, "
            "which sees only the ops it runs on the tensors inside it; annotate those tensors "
            "instead (docs/limits.md, 'Other tensor subclasses')");
}

c10::TensorImpl *collective_result_inner(const c10::TensorImpl *impl) {
    if (!compat::kCheckerBelowPython || !impl->key_set().has(c10::DispatchKey::Python))
        return nullptr;
    PyObject *obj = impl->pyobj_slot()->load_pyobj();
    if (!obj || std::strcmp(Py_TYPE(obj)->tp_name, "AsyncCollectiveTensor") != 0)
        return nullptr;
    py::gil_scoped_acquire gil;
    py::object elem = py::reinterpret_borrow<py::object>(obj).attr("elem");
    if (!THPVariable_Check(elem.ptr()))
        return nullptr;
    // The wrapper holds elem, so the pointer outlives this call.
    return THPVariable_Unpack(elem.ptr()).unsafeGetTensorImpl();
}

void bind_handler_call(py::module_ &m) {
    m.def("handler_call", torch::wrap_pybind_function(handler_call));
    m.def("handled_classes", torch::wrap_pybind_function(handled_classes));
}

} // namespace cspmd
