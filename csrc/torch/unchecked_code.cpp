// register_no_typecheck, the shim's part: whether unchecked code is active
// on this thread (a registered code object on its Python stack, or the
// backward of an op that ran there), and running an op there.  The core
// keeps the registered set and decides what such an op and its gradients
// are typed (csrc/core/unchecked_code.c); nothing here runs unless
// something is registered.
//
// The backward of an op run in unchecked code is unchecked too: the code
// the user exempted has gradients the checker cannot follow either.  Such
// an op's autograd node is not reachable from the kernel (autograd attaches
// it to the results after the kernel returns), so the kernel keeps weak
// references to the results, and the next look at this thread's state
// (the next op, backward(), is_type_checking()) finds the node on them and
// marks it with a post hook.  Its backward ops run unchecked, and the hook
// types each gradient it returns as the core says (the dual of the forward
// input's type), so the checked graph around it sees typed gradients.
#include <Python.h>
#include <frameobject.h>

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <utility>
#include <vector>

#include "shim.h"
#include "shim_internal.h"
#include "torch_compat.h"

namespace cspmd {
namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

// The types due for the gradients an unchecked node returns, one per next
// edge (UNTYPED: left as it comes).  Its presence marks the node.
struct UncheckedGradients final : torch::autograd::FunctionPostHook {
    explicit UncheckedGradients(std::vector<cspmd_type_t> due) : due(std::move(due)) {}
    variable_list operator()(const variable_list &outputs, const variable_list &) override {
        variable_list grads = outputs;
        for (size_t i = 0; i < grads.size() && i < due.size(); i++) {
            if (!grads[i].defined() || due[i] == CSPMD_TYPE_UNTYPED)
                continue;
            cspmd_type_t have = impl_get_type(grads[i].unsafeGetTensorImpl());
            if (have == due[i])
                continue;
            if (have != CSPMD_TYPE_UNTYPED) {  // a gradient passed through: retype an alias
                KeyOff off;
                grads[i] = grads[i].alias();
            }
            impl_set_type(grads[i].unsafeGetTensorImpl(), due[i]);
        }
        return grads;
    }
    std::vector<cspmd_type_t> due;
};

bool marked(const Node &node) {
    for (const auto &hook : node.post_hooks())
        if (dynamic_cast<const UncheckedGradients *>(hook.get()) != nullptr)
            return true;
    return false;
}

// One op run in unchecked code that recorded an autograd node: the node's
// sequence number, the gradient edges of its inputs with their types, and
// its results, on which the node is found.
struct Pending {
    uint64_t seq;
    std::vector<std::pair<torch::autograd::Edge, cspmd_type_t>> inputs;
    std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> results;
};

thread_local std::vector<Pending> tl_pending;

void mark(Node &node, const Pending &p) {
    std::vector<cspmd_type_t> due;
    for (const auto &edge : node.next_edges()) {
        cspmd_type_t t = CSPMD_TYPE_UNTYPED;
        for (const auto &in : p.inputs)
            if (in.first.function == edge.function && in.first.input_nr == edge.input_nr) {
                t = cspmd_unchecked_grad_type(in.second);
                break;
            }
        due.push_back(t);
    }
    node.add_post_hook(std::make_unique<UncheckedGradients>(std::move(due)));
}

// Mark the nodes of this thread's pending ops.  Only a node this op's
// autograd kernel made is marked: the one with the sequence number taken
// just before the kernel ran, made on this thread.
void resolve_pending() {
    if (tl_pending.empty())
        return;
    std::vector<Pending> pending;
    pending.swap(tl_pending);
    uint64_t thread = at::RecordFunction::currentThreadId();
    for (const Pending &p : pending)
        for (const auto &w : p.results) {
            auto strong = w.lock();
            if (!strong)
                continue;
            at::Tensor t(std::move(strong));
            compat::NodeRef node = t.grad_fn();
            if (node && node->sequence_nr() == p.seq && node->thread_id() == thread &&
                !marked(*node))
                mark(*node, p);
        }
}

// Whether a registered code object is on this thread's Python stack.  A
// thread that never ran Python (an autograd device thread has a thread
// state but no frames outside hooks) has none.
bool registered_code_on_stack() {
    if (!Py_IsInitialized())
        return false;
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing())
        return false;
#else
    if (_Py_IsFinalizing())
        return false;
#endif
    if (PyGILState_GetThisThreadState() == nullptr)
        return false;
    PyGILState_STATE g = PyGILState_Ensure();
    bool found = false;
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    while (f != nullptr && !found) {
        PyCodeObject *code = PyFrame_GetCode(f);
        found = cspmd_unchecked_code_has(code) != 0;
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    PyGILState_Release(g);
    return found;
}

void add_inputs(Pending &p, const c10::IValue &v) {
    auto add = [&](const at::Tensor &t) {
        if (t.defined() && t.requires_grad())
            p.inputs.emplace_back(torch::autograd::impl::gradient_edge(t),
                                  impl_get_type(t.unsafeGetTensorImpl()));
    };
    if (v.isTensor())
        add(v.toTensor());
    else if (v.isTensorList() || v.isList())
        for (const c10::IValue &e : v.toListRef())
            if (e.isTensor())
                add(e.toTensor());
}

void add_results(Pending &p, const c10::IValue &v) {
    if (v.isTensor()) {
        if (v.toTensor().defined())
            p.results.emplace_back(v.toTensor().getIntrusivePtr());
    } else if (v.isTensorList() || v.isList()) {
        for (const c10::IValue &e : v.toListRef())
            if (e.isTensor() && e.toTensor().defined())
                p.results.emplace_back(e.toTensor().getIntrusivePtr());
    }
}

} // namespace

bool in_unchecked_code(bool nodes) {
    if (!cspmd_unchecked_code_armed())
        return false;
    try {
        resolve_pending();
        compat::NodeRef node = nodes ? torch::autograd::get_current_node() : nullptr;
        if (node && marked(*node))
            return true;
    } catch (...) {
    }
    return registered_code_on_stack();
}

void mark_unchecked_node(const at::Tensor &result, const std::vector<at::Tensor> &inputs) {
    compat::NodeRef node = result.grad_fn();
    if (!node || marked(*node))
        return;
    Pending p{};
    for (const at::Tensor &t : inputs)
        add_inputs(p, c10::IValue(t));
    mark(*node, p);
}

// cspmd._C: register a function's code object (kept alive for the process,
// as the core keeps it), and the question itself.
void unchecked_code_add(pybind11::object code) {
    if (!PyCode_Check(code.ptr()))
        throw_core_error(CSPMD_ERR_TYPE, "register_no_typecheck: expected a code object");
    check(cspmd_unchecked_code_add(code.ptr()));
    code.inc_ref();
}

bool unchecked_code_active() { return in_unchecked_code(); }

} // namespace cspmd

extern "C" {

int cspmd_in_unchecked_code(void) { return cspmd::in_unchecked_code() ? 1 : 0; }

cspmd_status_t cspmd_call_run_unchecked(cspmd_call_t *call) {
    try {
        // A node is recorded as compute_requires_grad says: grad mode on and
        // an input that requires grad (the engine's own ops record none).
        cspmd::Pending p{};
        bool record = c10::GradMode::is_enabled() && torch::autograd::get_current_node() == nullptr;
        if (record) {
            size_t n = call->op->schema().arguments().size();
            for (size_t i = 0; i < n; i++)
                cspmd::add_inputs(p, *(call->stack->end() - static_cast<ptrdiff_t>(n - i)));
            record = !p.inputs.empty();
        }
        p.seq = at::sequence_number::peek() - 1;
        cspmd::redispatch(call);
        if (record) {
            size_t n = std::min(call->nreturns, call->stack->size());
            for (size_t i = 0; i < n; i++)
                cspmd::add_results(p, *(call->stack->end() - static_cast<ptrdiff_t>(n - i)));
            if (!p.results.empty())
                cspmd::tl_pending.push_back(std::move(p));
        }
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

} // extern "C"
