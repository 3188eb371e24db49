// Gradient duality at accumulation into a leaf's .grad.
//
// Before backward() runs, the Python front hands the roots to
// watch_leaves(), which walks the autograd graph and puts one pre-hook on
// every AccumulateGrad node it finds.  The hook runs after the leaf's tensor
// hooks (the user's included), right before the engine adds the gradient
// to .grad, and asks the core two questions about the typed leaf it belongs
// to: is this gradient the dual of the leaf's type (cspmd_grad_check; a V
// gradient where P is due is retyped P), and is the gradient .grad already
// holds one too (cspmd_grad_accum_check: a reduced .grad must not receive a
// pending gradient).  Because it is installed at backward time and reads the
// leaf's type then, it does not matter whether the leaf was annotated before
// or after requires_grad_() was set.  A no-op when the backward runs
// unchecked.
#include <Python.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "shim.h"
#include "shim_internal.h"

namespace cspmd {
namespace {

using torch::autograd::AccumulateGrad;
using torch::autograd::Node;
using torch::autograd::variable_list;

// "parameter float32[4, 3]", as the Python front describes tensors (error
// path only).
std::string describe(const at::Tensor &t) {
    try {
        pybind11::gil_scoped_acquire gil;
        return pybind11::module_::import("cspmd.runtime").attr("_describe")(t).cast<std::string>();
    } catch (...) {
        return "tensor";
    }
}

bool is_zero(const at::Tensor &t) {
    return cspmd_tensor_is_zero(reinterpret_cast<cspmd_tensor_t *>(t.unsafeGetTensorImpl())) != 0;
}

struct AccumulateCheck final : torch::autograd::FunctionPreHook {
    explicit AccumulateCheck(AccumulateGrad *node) : node_(node) {}

    variable_list operator()(const variable_list &grads) override {
        if (!key_enabled() || grads.empty())
            return grads;
        const at::Tensor &leaf = node_->variable;
        cspmd_type_t fwd = impl_get_type(leaf.unsafeGetTensorImpl());
        if (fwd == CSPMD_TYPE_UNTYPED)
            return grads;
        const at::Tensor &g = grads[0];
        if (g.defined()) {
            cspmd_type_t have = impl_get_type(g.unsafeGetTensorImpl()), out;
            cspmd_type_t arrived = have;
            // Global mode: a replicated gradient of a sharded leaf is its shard.
            if (!cspmd_checker_local())
                check(cspmd_grad_global_shard(fwd, arrived, &have));
            if (cspmd_grad_check(fwd, have, "", &out) != CSPMD_OK)
                check(cspmd_grad_check(fwd, have, describe(leaf).c_str(), &out));
            // Global mode: a gradient that carries a spec carries the leaf's;
            // one that carries none takes it (the ops accumulation runs are
            // checked in global mode too).
            cspmd_type_t dual = out;
            if (!cspmd_checker_local() && cspmd_grad_spec(fwd, dual, "", &out) != CSPMD_OK)
                check(cspmd_grad_spec(fwd, dual, describe(leaf).c_str(), &out));
            if (out != arrived) {
                // The engine may hand the same gradient tensor to several
                // leaves (add's backward returns it for both operands):
                // relabel a copy, so the others still see its own type.
                variable_list relabelled = grads;
                {
                    KeyOff off;
                    relabelled[0] = g.clone();
                }
                impl_set_type(relabelled[0].unsafeGetTensorImpl(), out);
                check_held(leaf, fwd);
                return relabelled;
            }
        }
        check_held(leaf, fwd);
        return grads;
    }

    // The .grad a new gradient accumulates into must be of the leaf's dual.
    static void check_held(const at::Tensor &leaf, cspmd_type_t fwd) {
        const at::Tensor &held = leaf.grad();
        if (held.defined()) {
            cspmd_type_t ht = impl_get_type(held.unsafeGetTensorImpl());
            if (cspmd_grad_accum_check(fwd, ht, 0, "") != CSPMD_OK)
                check(cspmd_grad_accum_check(fwd, ht, is_zero(held) ? 1 : 0,
                                             describe(leaf).c_str()));
        }
    }

  private:
    AccumulateGrad *node_;  // owns this hook, so outlives it
};

// Global mode: after the engine accumulated into .grad (which may clone the
// gradient, and the ops backward() runs are checked with local types), .grad
// takes the leaf's spec on the axes where it is V (cspmd_grad_spec).
struct AccumulateSpec final : torch::autograd::FunctionPostHook {
    explicit AccumulateSpec(AccumulateGrad *node) : node_(node) {}

    variable_list operator()(const variable_list &outputs, const variable_list &) override {
        if (!key_enabled() || cspmd_checker_local())
            return outputs;
        const at::Tensor &leaf = node_->variable;
        const at::Tensor &grad = leaf.grad();
        cspmd_type_t fwd = impl_get_type(leaf.unsafeGetTensorImpl());
        if (fwd == CSPMD_TYPE_UNTYPED || !grad.defined())
            return outputs;
        cspmd_type_t have = impl_get_type(grad.unsafeGetTensorImpl()), out;
        if (have == CSPMD_TYPE_UNTYPED)
            return outputs;
        if (cspmd_grad_spec(fwd, have, "", &out) != CSPMD_OK)
            check(cspmd_grad_spec(fwd, have, describe(leaf).c_str(), &out));
        if (out != have)
            impl_set_type(grad.unsafeGetTensorImpl(), out);
        return outputs;
    }

  private:
    AccumulateGrad *node_;
};

bool has_check(Node *node) {
    for (const auto &h : node->pre_hooks())
        if (dynamic_cast<AccumulateCheck *>(h.get()))
            return true;
    return false;
}

} // namespace

// Put the accumulation check on every AccumulateGrad node reachable from
// roots (once per node); returns how many were added.
int64_t watch_leaves(const std::vector<at::Tensor> &roots) {
    std::vector<Node *> stack;
    std::unordered_set<Node *> seen;
    for (const at::Tensor &r : roots) {
        if (!r.defined() || !r.requires_grad())
            continue;
        Node *n = torch::autograd::impl::gradient_edge(r).function.get();
        if (n && seen.insert(n).second)
            stack.push_back(n);
    }
    int64_t added = 0;
    while (!stack.empty()) {
        Node *n = stack.back();
        stack.pop_back();
        if (auto *acc = dynamic_cast<AccumulateGrad *>(n)) {
            if (!has_check(acc)) {
                acc->add_pre_hook(std::make_unique<AccumulateCheck>(acc));
                acc->add_post_hook(std::make_unique<AccumulateSpec>(acc));
                added++;
            }
            continue;
        }
        for (const auto &e : n->next_edges()) {
            Node *m = e.function.get();
            if (m && seen.insert(m).second)
                stack.push_back(m);
        }
    }
    return added;
}

} // namespace cspmd
