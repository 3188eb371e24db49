// The dispatcher side of the shim: the boxed trampoline on cspmd's key, the
// thread-local switch for the key, and the boxed-stack accessors that the C
// kernel (csrc/kernel/op_kernel.c) reads.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/library.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel/op_kernel.h"
#include "shim.h"
#include "shim_internal.h"
#include "torch_compat.h"

// cspmd's dispatch key, chosen per torch minor (torch_compat.h).
static constexpr c10::DispatchKey kKey = cspmd::compat::kCheckerKey;


namespace cspmd {

// Paused: the key stays in the thread's included set but every kernel on it
// passes ops through unchecked.  torch.compile traces a function on fake
// tensors that carry no types, and the guards it builds record the thread's
// included keys, which must then match the checked calls they guard.
static thread_local bool tl_paused = false;

bool key_paused() { return tl_paused; }

bool key_pause(bool paused) {
    bool was = tl_paused;
    tl_paused = paused;
    return was;
}

bool key_enabled(bool unchecked_nodes) {
    return !tl_paused && c10::impl::tls_is_dispatch_key_included(kKey) &&
           !in_unchecked_code(unchecked_nodes);
}

void key_set_enabled(bool on) {
    c10::impl::tls_set_dispatch_key_included(kKey, on);
}

// One read of the thread's key set, one write each way, and the exact saved
// state restored afterwards.  If the key is already off, nothing changes.
KeyOff::KeyOff()
    : saved(c10::impl::tls_local_dispatch_key_set()), changed(saved.included_.has(kKey)) {
    if (!changed)
        return;
    auto local = saved;
    local.included_ = local.included_.remove(kKey);
    c10::impl::_force_tls_local_dispatch_key_set(local);
}

KeyOff::~KeyOff() {
    if (changed)
        c10::impl::_force_tls_local_dispatch_key_set(saved);
}

// Errors and pending exceptions --------------------------------------------

static thread_local std::exception_ptr tls_pending;

cspmd_status_t keep_pending(std::exception_ptr e) {
    tls_pending = std::move(e);
    return CSPMD_ERR_PENDING;
}

[[noreturn]] void raise_status(cspmd_status_t st) {
    if (st == CSPMD_ERR_PENDING && tls_pending) {
        auto e = std::move(tls_pending);
        tls_pending = nullptr;
        std::rethrow_exception(e);
    }
    throw_current_error(st);
}

// The trampoline ------------------------------------------------------------

void check_call(cspmd_call *call) {
    // Flags another thread posted (a region of this thread closed there)
    // may have just turned checking off.
    bool turned_off = mailbox_poll() && !c10::impl::tls_is_dispatch_key_included(kKey);
    if (tl_paused || turned_off) {
        redispatch(call);
        return;
    }
    cspmd_status_t st = cspmd_kernel_run(call);
    if (st != CSPMD_OK)
        raise_status(st);
}

static void fallback(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
                     torch::jit::Stack *stack) {
    cspmd_call call{&op, ks, stack, op.schema().returns().size()};
    check_call(&call);
}

void redispatch(cspmd_call *call) {
    if (call->python_run) {
        run_python_handler(call);
        return;
    }
    KeyOff off;
    call->op->redispatchBoxed(call->ks.remove(kKey), call->stack);
}

// Ops with a CompositeImplicitAutograd kernel are decomposed at the
// Autograd layer, above cspmd's key, so the checker sees their parts.  With
// no autograd key in play (inference_mode, inference tensors, ops without a
// tensor argument) they would arrive whole; this kernel lets them decompose
// below the key with checking still on, so their parts are checked as usual.
static void decompose(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
                      torch::jit::Stack *stack) {
    op.redispatchBoxed(ks.remove(kKey), stack);
}

static std::vector<std::unique_ptr<torch::Library>> &libraries() {
    static std::vector<std::unique_ptr<torch::Library>> libs;
    return libs;
}

static torch::Library &library_for(const std::string &ns) {
    static std::vector<std::string> names;
    for (size_t i = 0; i < names.size(); i++)
        if (names[i] == ns)
            return *libraries()[i];
    names.push_back(ns);
    libraries().push_back(std::make_unique<torch::Library>(
        torch::Library::IMPL, ns, kKey, __FILE__, static_cast<uint32_t>(__LINE__)));
    return *libraries().back();
}

static bool has_backend_kernel(const c10::OperatorHandle &op) {
    for (auto k : {c10::DispatchKey::CompositeExplicitAutograd,
                   c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
                   c10::DispatchKey::CPU, c10::DispatchKey::CUDA, c10::DispatchKey::Meta})
        if (op.hasKernelForDispatchKey(k))
            return true;
    return false;
}

// cspmd's own ops skip the key (their kernels do their own typing); purely
// composite ops decompose below it.  Run once, on the first typecheck(), so
// that the ops of libraries loaded after cspmd are covered too.
int register_key_ops() {
    auto &d = c10::Dispatcher::singleton();
    int n = 0;
    for (const auto &name : d.getAllOpNames()) {
        auto op = d.findOp(name);
        if (!op || op->hasKernelForDispatchKey(kKey))
            continue;
        auto pos = name.name.find("::");
        if (pos == std::string::npos)
            continue;
        std::string ns = name.name.substr(0, pos);
        std::string full = name.name;
        if (!name.overload_name.empty())
            full += "." + name.overload_name;
        if (ns == "cspmd")
            library_for(ns).impl(full.c_str(), torch::CppFunction::makeFallthrough());
        else if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
                 !has_backend_kernel(*op))
            library_for(ns).impl(full.c_str(),
                                 torch::CppFunction::makeFromBoxedFunction<&decompose>());
        else
            continue;
        n++;
    }
    return n;
}

// What already sits on the key, or "": cspmd's kernel would not be reached
// (ops with their own kernel there) or could not be registered (a fallback).
static std::string key_owner() {
    auto &d = c10::Dispatcher::singleton();
    if (d.hasBackendFallbackForDispatchKey(kKey))
        return "a fallback kernel";
    for (const auto &name : d.getAllOpNames()) {
        auto op = d.findOp(name);
        if (op && name.name.rfind("cspmd::", 0) != 0 && op->hasKernelForDispatchKey(kKey))
            return "a kernel for " + name.name +
                   (name.overload_name.empty() ? "" : "." + name.overload_name);
    }
    return "";
}

void register_checker_key() {
    static bool done = false;
    if (done)
        return;
    std::string owner = key_owner();
    if (!owner.empty())
        throw std::runtime_error(
            "cspmd cannot check ops on torch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
            std::to_string(TORCH_VERSION_MINOR) + ": its checker's dispatch key, " +
            c10::toString(kKey) + ", already has " + owner +
            " registered by torch or another library, so ops would not reach the checker. "
            "Load cspmd in a process without that library, or use a torch minor whose key "
            "is free (docs/dev/architecture.md, 'The dispatch key').");
    static torch::Library lib(torch::Library::IMPL, "_", kKey, __FILE__,
                              static_cast<uint32_t>(__LINE__));
    lib.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
    register_raw_dist_ops();
    done = true;
}

const c10::IValue *named_arg(const cspmd_call_t *call, std::initializer_list<const char *> names) {
    const auto &args = call->op->schema().arguments();
    size_t n = args.size();
    const c10::IValue *first = &*(call->stack->end() - static_cast<ptrdiff_t>(n));
    for (size_t i = 0; i < n; i++)
        for (const char *name : names)
            if (args[i].name() == name)
                return &first[i];
    return nullptr;
}

} // namespace cspmd

// The kind of values a dtype holds, for the core's cast rule.
static cspmd_value_kind_t value_kind(at::ScalarType t) {
    if (t == at::kBool)
        return CSPMD_VALUES_BOOL;
    if (c10::isIntegralType(t, /*includeBool=*/false))
        return CSPMD_VALUES_INTEGER;
    if (c10::isFloatingType(t) || c10::isComplexType(t))
        return CSPMD_VALUES_REAL;
    return CSPMD_VALUES_OTHER;
}

// The boxed-stack accessors ------------------------------------------------

extern "C" {

int cspmd_call_cast(const cspmd_call_t *call, int *source, cspmd_value_kind_t *from_kind,
                    cspmd_value_kind_t *to_kind) {
    try {
        // copy_(self, src): src cast into self's dtype; _to_copy / to:
        // self cast into `dtype`, or into `other`'s dtype (to.other).
        const c10::IValue *src = cspmd::named_arg(call, {"src"});
        const c10::IValue *self = cspmd::named_arg(call, {"self"});
        const c10::IValue *from = src ? src : self;
        if (!from || !from->isTensor() || !self || !self->isTensor())
            return 0;
        at::ScalarType to;
        const c10::IValue *dtype = cspmd::named_arg(call, {"dtype"});
        const c10::IValue *other = cspmd::named_arg(call, {"other"});
        if (src)
            to = self->toTensor().scalar_type();
        else if (dtype && dtype->isInt())
            to = static_cast<at::ScalarType>(dtype->toInt());
        else if (other && other->isTensor())
            to = other->toTensor().scalar_type();
        else
            return 0;
        const auto &args = call->op->schema().arguments();
        const char *name = src ? "src" : "self";
        for (size_t i = 0; i < args.size(); i++)
            if (args[i].name() == name) {
                *source = static_cast<int>(i);
                *from_kind = value_kind(from->toTensor().scalar_type());
                *to_kind = value_kind(to);
                return 1;
            }
    } catch (...) {
    }
    return 0;
}

const void *cspmd_call_op_key(const cspmd_call_t *call) {
    return &call->op->schema();
}

const char *cspmd_call_op_name(const cspmd_call_t *call) {
    return call->op->operator_name().name.c_str();
}

const char *cspmd_call_op_overload(const cspmd_call_t *call) {
    return call->op->operator_name().overload_name.c_str();
}

// Room for one more ref: the inline array first, then a heap array that
// doubles (std::bad_alloc propagates to the caller's catch).
static cspmd_tensor_ref_t *next_ref(cspmd_args_t *a) {
    if (a->ntensors == a->cap) {
        int cap = a->cap * 2;
        auto *grown = static_cast<cspmd_tensor_ref_t *>(
            std::malloc(static_cast<size_t>(cap) * sizeof(cspmd_tensor_ref_t)));
        if (!grown)
            throw std::bad_alloc();
        std::memcpy(grown, a->tensors, static_cast<size_t>(a->ntensors) * sizeof *grown);
        if (a->tensors != a->inline_refs)
            std::free(a->tensors);
        a->tensors = grown;
        a->cap = cap;
    }
    return &a->tensors[a->ntensors++];
}

static void add_tensor(cspmd_args_t *a, const at::Tensor &t, int arg, const c10::Argument *s,
                       int32_t elem) {
    if (!t.defined())
        return;
    c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    cspmd_tensor_ref_t *r = next_ref(a);
    r->tensor = reinterpret_cast<cspmd_tensor_t *>(impl);
    uint8_t mark;
    r->type = cspmd::impl_get_type(impl, &mark);
    r->arg = static_cast<uint16_t>(arg);
    // A marked number that takes a gradient (scalar_tensor(...,
    // requires_grad=True), a leaf of the program) is read as a tensor.
    r->requires_grad = impl->requires_grad();
    uint8_t number = mark == CSPMD_MARK_DATA ? 0 : mark;
    r->number = impl->is_wrapped_number() ? CSPMD_NUMBER : r->requires_grad ? 0 : number;
    r->data = mark == CSPMD_MARK_DATA;
    bool written = s && s->alias_info() && s->alias_info()->isWrite();
    r->written = written;
    r->out = written && s->kwarg_only();
    r->elem = elem;
    r->base = nullptr;
    r->base_requires_grad = 0;
    // A view's type follows writes made through other views of its base;
    // is_view() is a flag read on the autograd meta.
    if (s && t.is_view()) {
        c10::TensorImpl *b = t._base().unsafeGetTensorImpl();
        r->base = reinterpret_cast<cspmd_tensor_t *>(b);
        r->base_requires_grad = b->requires_grad();
    }
}

// A schema `Scalar` or `Scalar[]` argument (the numbers of a foreach op's
// ScalarList are weak scalars as a single Scalar is).
static bool is_number_arg(const c10::Argument *s) {
    if (!s)
        return false;
    const auto &t = s->type();
    if (t->kind() == c10::TypeKind::NumberType)
        return true;
    auto list = t->cast<c10::ListType>();
    return list && list->getElementType()->kind() == c10::TypeKind::NumberType;
}

// A plain number equal to zero (a Scalar argument's value).
static bool is_zero_number(const c10::IValue &v) {
    if (v.isInt())
        return v.toInt() == 0;
    if (v.isDouble())
        return v.toDouble() == 0.0;
    if (v.isBool())
        return !v.toBool();
    if (v.isComplexDouble())
        return v.toComplexDouble() == c10::complex<double>(0.0, 0.0);
    return false;
}

static void args_init(cspmd_args_t *a) {
    a->nargs = 0;
    a->grad_enabled = 0;
    a->scalar_args = 0;
    a->zero_scalars = 0;
    a->ntensors = 0;
    a->cap = CSPMD_ARGS_INLINE;
    a->tensors = a->inline_refs;
}

static void read_values(cspmd_args_t *a, const c10::IValue *first, size_t n,
                        const std::vector<c10::Argument> *schema) {
    a->nargs = static_cast<int>(n);
    for (size_t i = 0; i < n; i++) {
        const c10::IValue &v = first[i];
        const c10::Argument *s = schema ? &(*schema)[i] : nullptr;
        if (v.isTensor()) {
            add_tensor(a, v.toTensor(), static_cast<int>(i), s, -1);
        } else if (is_number_arg(s) && i < 64) {
            a->scalar_args |= uint64_t{1} << i;
            if (is_zero_number(v))
                a->zero_scalars |= uint64_t{1} << i;
        } else if (v.isTensorList() || v.isList()) {
            // A Tensor[][] (c10d's allgather_ takes its outputs so) is read
            // flat: elem counts the tensors in order across the inner lists.
            int32_t k = 0;
            for (const c10::IValue &e : v.toListRef()) {
                if (e.isTensor()) {
                    add_tensor(a, e.toTensor(), static_cast<int>(i), s, k);
                } else if (e.isTensorList() || e.isList()) {
                    for (const c10::IValue &inner : e.toListRef())
                        if (inner.isTensor())
                            add_tensor(a, inner.toTensor(), static_cast<int>(i), s, k++);
                    continue;
                }
                k++;
            }
        }
    }
}

void cspmd_args_release(cspmd_args_t *args) {
    if (args->tensors != args->inline_refs)
        std::free(args->tensors);
    args->tensors = args->inline_refs;
    args->cap = CSPMD_ARGS_INLINE;
    args->ntensors = 0;
}

cspmd_status_t cspmd_call_args(const cspmd_call_t *call, cspmd_args_t *args) {
    args_init(args);
    // Gradients flow under grad mode, and in a backward the engine runs
    // (grad mode off there): a saved tensor still says by requires_grad
    // whether its forward operand took a gradient.
    args->grad_enabled = c10::GradMode::is_enabled() ||
                         torch::autograd::get_current_graph_task_id() != -1;
    try {
        const auto &schema = call->op->schema().arguments();
        size_t n = schema.size();
        read_values(args, &*(call->stack->end() - static_cast<ptrdiff_t>(n)), n, &schema);
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

cspmd_status_t cspmd_call_redispatch(cspmd_call_t *call) {
    try {
        cspmd::redispatch(call);
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

cspmd_status_t cspmd_call_results(const cspmd_call_t *call, cspmd_args_t *results) {
    args_init(results);
    try {
        size_t n = call->nreturns;
        if (call->stack->size() < n)
            n = call->stack->size();
        read_values(results, n ? &*(call->stack->end() - static_cast<ptrdiff_t>(n)) : nullptr, n,
                    nullptr);
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

int cspmd_call_nargs(const cspmd_call_t *call) {
    return static_cast<int>(call->op->schema().arguments().size());
}

// Tensor, Tensor?, Tensor[] or Tensor?[].
int cspmd_call_arg_is_tensor(const cspmd_call_t *call, int i) {
    const auto &args = call->op->schema().arguments();
    if (i < 0 || static_cast<size_t>(i) >= args.size())
        return 0;
    c10::TypePtr t = args[static_cast<size_t>(i)].type();
    for (int depth = 0; depth < 3; depth++) {
        if (t->kind() == c10::TypeKind::TensorType)
            return 1;
        if (auto opt = t->cast<c10::OptionalType>())
            t = opt->getElementType();
        else if (auto list = t->cast<c10::ListType>())
            t = list->getElementType();
        else
            return 0;
    }
    return t->kind() == c10::TypeKind::TensorType;
}

const char *cspmd_call_arg_name(const cspmd_call_t *call, int i) {
    const auto &args = call->op->schema().arguments();
    if (i < 0 || static_cast<size_t>(i) >= args.size())
        return "";
    return args[static_cast<size_t>(i)].name().c_str();
}

namespace {

// A double as torch prints an IValue: an integral value that fits int64 as
// "2.", anything else with 17 significant digits.
void append_double(std::string &s, double d) {
    char b[40];
    if (std::isfinite(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
        d == static_cast<double>(static_cast<int64_t>(d)))
        std::snprintf(b, sizeof b, "%" PRId64 ".", static_cast<int64_t>(d));
    else
        std::snprintf(b, sizeof b, "%.17g", d);
    s += b;
}

// A non-tensor argument as torch prints it (a string quoted at the top
// level), formatted here with snprintf rather than by handing a
// std::ostringstream to libtorch's operator<<: a stream built in this library
// and written by libtorch's libstdc++ crashed on a GPU image's toolchain
// (printing a double); the kinds an aten schema takes are all covered.
void append_value(std::string &s, const c10::IValue &v, bool top) {
    char b[32];
    if (v.isNone()) {
        s += "None";
    } else if (v.isBool()) {
        s += v.toBool() ? "True" : "False";
    } else if (v.isInt()) {
        std::snprintf(b, sizeof b, "%" PRId64, v.toInt());
        s += b;
    } else if (v.isDouble()) {
        append_double(s, v.toDouble());
    } else if (v.isComplexDouble()) {
        c10::complex<double> z = v.toComplexDouble();
        append_double(s, z.real());
        s += std::signbit(z.imag()) ? "" : "+";
        append_double(s, z.imag());
        s += "j";
    } else if (v.isString()) {
        if (top)
            s += "'";
        s += v.toStringRef();
        if (top)
            s += "'";
    } else if (v.isList()) {
        s += "[";
        bool first = true;
        for (const c10::IValue &e : v.toListRef()) {
            if (!first)
                s += ", ";
            first = false;
            append_value(s, e, false);
        }
        s += "]";
    } else if (v.isDevice()) {
        s += v.toDevice().str();
    } else if (v.isSymInt() && v.toSymInt().maybe_as_int()) {
        std::snprintf(b, sizeof b, "%" PRId64, *v.toSymInt().maybe_as_int());
        s += b;
    } else {
        s += "<";
        s += v.tagKind();
        s += ">";
    }
}

} // namespace

size_t cspmd_call_arg_text(const cspmd_call_t *call, int i, char *buf, size_t len) {
    try {
        size_t n = call->op->schema().arguments().size();
        if (i < 0 || static_cast<size_t>(i) >= n || call->stack->size() < n)
            return 0;
        std::string s;
        append_value(s, *(call->stack->end() - static_cast<ptrdiff_t>(n) + i), true);
        if (len)
            std::snprintf(buf, len, "%s", s.c_str());
        return s.size();
    } catch (...) {
        if (len)
            buf[0] = '\0';
        return 0;
    }
}

int cspmd_call_nreturns(const cspmd_call_t *call) {
    return static_cast<int>(call->op->schema().returns().size());
}

int cspmd_call_arg_ints(const cspmd_call_t *call, int i, int64_t *v, int cap) {
    try {
        size_t n = call->op->schema().arguments().size();
        if (i < 0 || static_cast<size_t>(i) >= n || call->stack->size() < n)
            return -1;
        const c10::IValue &a = *(call->stack->end() - static_cast<ptrdiff_t>(n) + i);
        if (a.isNone())
            return -2;
        if (a.isInt() || a.isBool()) {
            if (cap > 0)
                v[0] = a.isInt() ? a.toInt() : static_cast<int64_t>(a.toBool());
            return 1;
        }
        if (!a.isList())
            return -1;
        auto l = a.toListRef();
        int k = 0;
        for (const c10::IValue &e : l) {
            int64_t x;
            if (e.isInt())
                x = e.toInt();
            else if (e.isSymInt() && e.toSymInt().maybe_as_int())
                x = *e.toSymInt().maybe_as_int();
            else
                return -1;
            if (k < cap)
                v[k] = x;
            k++;
        }
        return k;
    } catch (...) {
        return -1;
    }
}

} // extern "C"
