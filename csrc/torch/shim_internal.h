// Declarations shared by the shim's C++ files.  Not part of the C API.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "cspmd.h"

// A dispatcher call in flight; opaque to the C kernels.  An op checked at a
// Python handler (python_handlers.cpp) has python_run set: the callable
// that runs it there, called in place of the redispatch, with
// python_result its result (both owned references).
struct cspmd_call {
    const c10::OperatorHandle *op;
    c10::DispatchKeySet ks;
    torch::jit::Stack *stack;
    size_t nreturns;
    void *python_run = nullptr;
    void *python_result = nullptr;
};

namespace pybind11 {
class module_;
}

namespace cspmd {

// The key in this thread's included set (checking reaches the kernel), not
// paused, and no unchecked code active (in_unchecked_code below, which
// unchecked_nodes passes on).
bool key_enabled(bool unchecked_nodes = true);
// Unchecked code active on this thread (register_no_typecheck;
// unchecked_code.cpp): false at the cost of one load while nothing is
// registered.  nodes=false leaves out the backward of unchecked ops: the
// check of a gradient arriving at an annotated tensor made there still runs
// (that gradient comes from checked code).
bool in_unchecked_code(bool nodes = true);
// Mark result's autograd node (made by an op run in unchecked code) so
// that its backward runs unchecked, its gradients typed for inputs.
void mark_unchecked_node(const at::Tensor &result, const std::vector<at::Tensor> &inputs);
void key_set_enabled(bool on);
// Pause every kernel on the key while the key stays included (dispatch.cpp);
// returns the previous setting.
bool key_paused();
bool key_pause(bool paused);

// Flags posted to a thread by another (thread_mailbox.cpp): the calling
// thread's mailbox id (made on first use); post the opener's flags to a
// mailbox (false if its thread has ended); drop what was posted to the
// calling thread (it set its flags itself); apply what was posted to it
// (true if something was).
// The current mesh (an interned id, 0 for none) is posted, dropped and
// applied the same way, on its own.  mailbox_poll returns true only if
// flags were posted.
int64_t mailbox_open();
bool mailbox_post(int64_t id, bool enabled, bool strict, bool local);
bool mailbox_post_mesh(int64_t id, uint32_t mesh);
void mailbox_discard();
void mailbox_discard_mesh();
bool mailbox_poll();

// A conversion that changes nothing (collective_autograd.cpp): checks (when
// checking) that x is src on axis, raising the collective's type error;
// returns x itself, or, where x was accepted as src by a coercion, a new
// tensor typed as the core says the result is (x keeps its own type):
// reinterpret(x, V, P) for V read as P, an alias for R and I taken for
// each other.
at::Tensor collective_check_input(const at::Tensor &x, std::string fn, std::string group,
                                  int64_t axis, int64_t src_lt, int64_t src_dim);

// Turns the key off for a scope (ops run inside are not checked).
struct KeyOff {
    KeyOff();
    ~KeyOff();
    KeyOff(const KeyOff &) = delete;
    KeyOff &operator=(const KeyOff &) = delete;
    c10::impl::LocalDispatchKeySet saved;
    bool changed;
};

// Register the checker's fallback and the raw collectives' kernels on the
// key (once, when cspmd._C loads); throws std::runtime_error naming what
// already sits on the key if torch or another library took it.
void register_checker_key();
void register_raw_dist_ops();

// Check a call on the key (the checker's entry, from the key's fallback or
// from a Python handler): the kernel checks, runs and types it, or the op
// just runs where checking is paused; raises what the kernel reports.
void check_call(cspmd_call *call);
// The same for an op of torch.distributed (cspmd_raw_op_is_raw), under its
// raw rule.
void check_raw_call(cspmd_call *call, const char *name);
// Run the call's op the rest of the way with the key off: the kernels
// below cspmd's key, or its Python handler (run_python_handler).
void redispatch(cspmd_call *call);
void run_python_handler(cspmd_call *call);

// Per-op registrations on the key: fallthrough for cspmd's own ops, decompose
// for purely composite ops (see dispatch.cpp).
int register_key_ops();

// Put the gradient-accumulation check on every AccumulateGrad node reachable
// from roots (grad_accumulate.cpp); returns how many were added.
int64_t watch_leaves(const std::vector<at::Tensor> &roots);

// Save types with tensors in torch.save / torch.load (type_saving.cpp);
// the device types covered.
std::vector<std::string> register_type_saving();

// The call's argument whose schema name is one of `names` (on the stack,
// below the call's own frame, before redispatch), or null (dispatch.cpp).
const c10::IValue *named_arg(const ::cspmd_call *call, std::initializer_list<const char *> names);

// Type ids on TensorImpls.
// The stored type id; *mark (if given) gets the tensor's mark
// (CSPMD_NUMBER, CSPMD_NUMBER_ZERO, CSPMD_MARK_DATA or 0).
cspmd_type_t impl_get_type(const c10::TensorImpl *impl, uint8_t *mark = nullptr);
void impl_set_type(c10::TensorImpl *impl, cspmd_type_t type);

// LocalTensorMode (local_tensor.cpp): whether impl is a LocalTensor (no
// GIL taken), and its per-rank tensors' common type (UNTYPED if they
// disagree) or writing one type on all of them.
bool impl_is_local_tensor(const c10::TensorImpl *impl);
cspmd_type_t local_tensor_inner_type(const c10::TensorImpl *impl);
void local_tensor_set_inner_types(const c10::TensorImpl *impl, cspmd_type_t type);

// Keep a torch exception for the outermost C++ frame; returns PENDING.
cspmd_status_t keep_pending(std::exception_ptr e);
// Rethrow a pending exception, or throw the core's error as the Python
// exception its status maps to (SpmdTypeError, ValueError, ...).
[[noreturn]] void raise_status(cspmd_status_t st);
[[noreturn]] void throw_core_error(cspmd_status_t st, const std::string &msg);
// Throw the thread's current core error: an SpmdTypeError with its fields
// (msg, context, op, site, operands, ...), else as throw_core_error.
[[noreturn]] void throw_current_error(cspmd_status_t st);
// Describe x (dtype, sizes, type) as a plain-tensor argument of the error
// context being built (cspmd_error_context_tensor).
void error_context_tensor(const at::Tensor &x);
// Throw if st is not OK.
inline void check(cspmd_status_t st) {
    if (st != CSPMD_OK)
        raise_status(st);
}

// Bind the rows of CSPMD_PY_CALL_LIST on cspmd._C (core_calls.cpp).
void bind_core_calls(pybind11::module_ &m);
// Throw a TypeError for a tensor the checker cannot see whole: from torch
// 2.13 (key below Python) a tensor subclass whose handler cspmd does not
// wrap (python_handlers.cpp).
void require_checked_kind(const c10::TensorImpl *impl);
// The tensor a functional collective's AsyncCollectiveTensor wraps (its
// elem), whose type ops on the wrapper read from torch 2.13; nullptr for
// any other tensor.
c10::TensorImpl *collective_result_inner(const c10::TensorImpl *impl);
// Bind handler_call, the check of an op at a Python handler
// (python_handlers.cpp), on cspmd._C.
void bind_handler_call(pybind11::module_ &m);

} // namespace cspmd
