// A probe for choosing the checker's dispatch key: registers an empty,
// recording boxed fallback on a key named at run time, switches the key on in
// the thread's included set, and reports which ops reached it and whether
// their operands were Python-key tensors and whether a TorchDispatchMode was
// still on the stack (the key is reached before subclasses and modes).  Built and driven by run.py; not part of cspmd.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

c10::DispatchKey g_key = c10::DispatchKey::Undefined;
std::vector<std::string> g_seen;
std::mutex g_mu;
std::unique_ptr<torch::Library> g_lib;

bool per_backend() { return c10::isPerBackendFunctionalityKey(c10::toFunctionalityKey(g_key)); }

// The key as an included-set edit: a per-backend key is its backend bit.
c10::DispatchKeySet key_set() { return c10::DispatchKeySet(g_key); }

c10::DispatchKeySet without(c10::DispatchKeySet ks) {
    if (per_backend())
        return ks.remove_backend(c10::toBackendComponent(g_key));
    return ks.remove(g_key);
}

void record(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack) {
    // The probe's own ops edit the thread's key set: pass them through, or
    // the restore below would undo include(false).
    if (op.operator_name().name.rfind("key_probe::", 0) == 0) {
        op.redispatchBoxed(without(ks), stack);
        return;
    }
    const auto &schema = op.schema();
    size_t n = schema.arguments().size();
    bool python = false, meta = false;
    for (size_t i = 0; i < n; i++) {
        const c10::IValue &v = *(stack->end() - static_cast<ptrdiff_t>(n - i));
        if (v.isTensor() && v.toTensor().defined()) {
            python |= v.toTensor().key_set().has(c10::DispatchKey::Python);
            meta |= v.toTensor().is_meta();
        }
    }
    std::string name = op.operator_name().name;
    if (!op.operator_name().overload_name.empty())
        name += "." + op.operator_name().overload_name;
    name += python ? "@python" : meta ? "@meta" : "";
    // A mode still on the stack: the op reached the key before the mode ran.
    if (c10::impl::TorchDispatchModeTLS::stack_len() > 0)
        name += "@before-mode";
    {
        std::lock_guard<std::mutex> g(g_mu);
        g_seen.push_back(name);
    }
    auto saved = c10::impl::tls_local_dispatch_key_set();
    auto off = saved;
    off.included_ = without(off.included_);
    c10::impl::_force_tls_local_dispatch_key_set(off);
    try {
        op.redispatchBoxed(without(ks), stack);
    } catch (...) {
        c10::impl::_force_tls_local_dispatch_key_set(saved);
        throw;
    }
    c10::impl::_force_tls_local_dispatch_key_set(saved);
}

// Registers the fallback on `key`; returns "" or why it could not.
std::string arm(const std::string &key) {
    g_key = c10::parseDispatchKey(key);
    try {
        g_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", g_key, __FILE__,
                                                 static_cast<uint32_t>(__LINE__));
        g_lib->fallback(torch::CppFunction::makeFromBoxedFunction<&record>());
    } catch (const std::exception &e) {
        g_lib.reset();
        return e.what();
    }
    return "";
}

// Ops that already have a kernel of their own on `key` (registered by torch
// or another library), and whether a fallback is already there.
std::vector<std::string> owners(const std::string &key) {
    auto k = c10::parseDispatchKey(key);
    auto &d = c10::Dispatcher::singleton();
    std::vector<std::string> out;
    if (d.hasBackendFallbackForDispatchKey(k))
        out.push_back("<fallback>");
    for (const auto &name : d.getAllOpNames()) {
        auto op = d.findOp(name);
        if (op && op->hasKernelForDispatchKey(k))
            out.push_back(name.name);
    }
    return out;
}

void include(bool on) {
    auto local = c10::impl::tls_local_dispatch_key_set();
    local.included_ = on ? (local.included_ | key_set()) : without(local.included_);
    c10::impl::_force_tls_local_dispatch_key_set(local);
}

std::vector<std::string> take() {
    std::lock_guard<std::mutex> g(g_mu);
    std::vector<std::string> out;
    out.swap(g_seen);
    return out;
}

std::string included() { return c10::toString(c10::impl::tls_local_dispatch_key_set().included_); }

} // namespace

TORCH_LIBRARY(key_probe, m) {
    m.def("owners(str key) -> str[]", [](std::string k) { return owners(k); });
    m.def("arm(str key) -> str", [](std::string k) { return arm(k); });
    m.def("include(bool on) -> ()", [](bool on) { include(on); });
    m.def("take() -> str[]", []() { return take(); });
    m.def("included() -> str", []() { return included(); });
}
