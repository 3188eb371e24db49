// Type ids stored on tensors: a c10::BackendMeta on the TensorImpl, one
// shared immutable object per type id, so that writing a type allocates
// nothing after the first use of that id.  detach() and .data copy it
// (ExtraMeta's copy clones the pointer); views and fresh outputs start
// without one and are typed by the kernel.
#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <mutex>
#include <typeinfo>

#include "shim.h"
#include "shim_internal.h"

namespace cspmd {
namespace {

struct TypeMeta final : c10::BackendMeta {
    TypeMeta(cspmd_type_t t, uint8_t m) : type(t), mark(m) {}
    const cspmd_type_t type;
    // CSPMD_NUMBER(_ZERO): the tensor stands for a plain number (the core's
    // cspmd_rule_result_number); CSPMD_MARK_DATA: it is the user's data
    // (cspmd_rule_result_data); 0 otherwise.
    const uint8_t mark;
};

// Two-level table per mark: 1024 chunks of 1024 slots covers every id the
// core can intern; chunks are published with release stores and never
// freed.
constexpr size_t kChunk = 1024;
constexpr size_t kChunks = 1024;
constexpr size_t kMarks = 4; // 0, CSPMD_NUMBER, CSPMD_NUMBER_ZERO, CSPMD_MARK_DATA
static_assert(CSPMD_NUMBER < kMarks && CSPMD_NUMBER_ZERO < kMarks && CSPMD_MARK_DATA < kMarks,
              "a mark without a table");
std::atomic<c10::BackendMeta *> *chunks[kMarks][kChunks];
std::mutex grow_mutex;

c10::BackendMeta *meta_for(cspmd_type_t type, uint8_t mark) {
    size_t hi = type / kChunk, lo = type % kChunk;
    if (hi >= kChunks || mark >= kMarks)
        return nullptr;
    auto *chunk = __atomic_load_n(&chunks[mark][hi], __ATOMIC_ACQUIRE);
    if (chunk) {
        c10::BackendMeta *m = chunk[lo].load(std::memory_order_acquire);
        if (m)
            return m;
    }
    std::lock_guard<std::mutex> lock(grow_mutex);
    chunk = __atomic_load_n(&chunks[mark][hi], __ATOMIC_ACQUIRE);
    if (!chunk) {
        chunk = new std::atomic<c10::BackendMeta *>[kChunk]();
        __atomic_store_n(&chunks[mark][hi], chunk, __ATOMIC_RELEASE);
    }
    c10::BackendMeta *m = chunk[lo].load(std::memory_order_acquire);
    if (!m) {
        // One reference held by the table forever; tensors add their own.
        m = c10::make_intrusive<TypeMeta>(type, mark).release();
        chunk[lo].store(m, std::memory_order_release);
    }
    return m;
}

} // namespace

namespace {

const TypeMeta *find_meta(const c10::TensorImpl *impl) {
    // get_backend_meta() is non-const only because it hands out a pointer.
    auto *m = const_cast<c10::TensorImpl *>(impl)->get_backend_meta();
    // TypeMeta is final, so comparing type_info is exact (and cheaper than
    // dynamic_cast); a vendor plugin's BackendMeta reads as untyped.
    if (!m || typeid(*m) != typeid(TypeMeta))
        return nullptr;
    return static_cast<const TypeMeta *>(m);
}

void write_meta(c10::TensorImpl *impl, cspmd_type_t type, uint8_t mark = 0) {
    if (type == CSPMD_TYPE_UNTYPED) {
        if (impl->get_backend_meta())
            impl->set_backend_meta(nullptr);
        return;
    }
    c10::BackendMeta *m = meta_for(type, mark);
    if (!m)
        throw_core_error(CSPMD_ERR_NOMEM, "cspmd: type id out of range");
    if (impl->get_backend_meta() == m)
        return;
    impl->set_backend_meta(c10::intrusive_ptr<c10::BackendMeta>::reclaim_copy(m));
}

} // namespace

// A LocalTensor's type is also written on its per-rank tensors: torch
// detaches a LocalTensor (autograd saving an op's output, .data) in
// Python, per rank, into a new LocalTensor that cspmd never sees made.
// Its per-rank tensors keep their types, and the first read takes the
// type from them (local_tensor.cpp).
cspmd_type_t impl_get_type(const c10::TensorImpl *impl, uint8_t *mark) {
    const TypeMeta *m = find_meta(impl);
    cspmd_type_t t = m ? m->type : CSPMD_TYPE_UNTYPED;
    if (mark)
        *mark = m ? m->mark : 0;
    if (t == CSPMD_TYPE_UNTYPED && impl_is_local_tensor(impl)) {
        t = local_tensor_inner_type(impl);
        if (t != CSPMD_TYPE_UNTYPED)
            write_meta(const_cast<c10::TensorImpl *>(impl), t);
    }
    return t;
}

void impl_set_type(c10::TensorImpl *impl, cspmd_type_t type) {
    write_meta(impl, type);
    if (impl_is_local_tensor(impl))
        local_tensor_set_inner_types(impl, type);
}

} // namespace cspmd

extern "C" {

cspmd_type_t cspmd_tensor_get_type(const cspmd_tensor_t *t) {
    return cspmd::impl_get_type(reinterpret_cast<const c10::TensorImpl *>(t));
}

int cspmd_tensor_is_data(const cspmd_tensor_t *t) {
    uint8_t mark;
    cspmd::impl_get_type(reinterpret_cast<const c10::TensorImpl *>(t), &mark);
    return mark == CSPMD_MARK_DATA;
}

cspmd_status_t cspmd_tensor_set_type(cspmd_tensor_t *t, cspmd_type_t type) {
    try {
        cspmd::impl_set_type(reinterpret_cast<c10::TensorImpl *>(t), type);
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

cspmd_status_t cspmd_tensor_set_marked_type(cspmd_tensor_t *t, cspmd_type_t type, int mark) {
    try {
        auto *impl = reinterpret_cast<c10::TensorImpl *>(t);
        // A LocalTensor's per-rank tensors carry no mark: cspmd only reads
        // the mark on the tensor the op returned.
        cspmd::write_meta(impl, type, static_cast<uint8_t>(mark));
        if (cspmd::impl_is_local_tensor(impl))
            cspmd::local_tensor_set_inner_types(impl, type);
        return CSPMD_OK;
    } catch (...) {
        return cspmd::keep_pending(std::current_exception());
    }
}

int cspmd_tensor_is_zero(cspmd_tensor_t *t) {
    try {
        auto *impl = reinterpret_cast<c10::TensorImpl *>(t);
        if (impl->is_meta() || !impl->has_storage())
            return 0;
        cspmd::KeyOff off;
        at::Tensor x(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(impl));
        return x.numel() == 0 || !x.any().item<bool>();
    } catch (...) {
        return 0;
    }
}

int64_t cspmd_tensor_dim(const cspmd_tensor_t *t) {
    try {
        return reinterpret_cast<const c10::TensorImpl *>(t)->dim();
    } catch (...) {
        return 0;
    }
}

// -1 where the extent is not one number: a symbolic size (FakeTensor under
// a ShapeEnv, torch.compile's dynamic shapes) or a ragged dim of a nested
// tensor, whose sizes() throws.
int64_t cspmd_tensor_size(const cspmd_tensor_t *t, int64_t d) {
    try {
        auto *impl = reinterpret_cast<const c10::TensorImpl *>(t);
        if (d < 0 || d >= impl->dim())
            return -1;
        auto v = impl->sym_size(d).maybe_as_int();
        return v ? *v : -1;
    } catch (...) {
        return -1;
    }
}

void cspmd_tensor_sizes(const cspmd_tensor_t *t, int64_t *sizes, int64_t n) {
    auto *impl = reinterpret_cast<const c10::TensorImpl *>(t);
    try {
        c10::SymIntArrayRef s = impl->sym_sizes();
        for (int64_t d = 0; d < n; d++) {
            auto v = d < static_cast<int64_t>(s.size()) ? s[d].maybe_as_int() : std::nullopt;
            sizes[d] = v ? *v : -1;
        }
    } catch (...) { // a nested tensor's ragged sizes: dim by dim
        for (int64_t d = 0; d < n; d++)
            sizes[d] = cspmd_tensor_size(t, d);
    }
}

// -Wswitch-enum is for cspmd's enums: torch's ScalarType grows with each
// minor (torch 2.15 added Int1..Int7, BComplex32, ...), and `default` names
// them all.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wswitch-enum"
const char *cspmd_tensor_dtype_abbrev(const cspmd_tensor_t *t) {
    switch (reinterpret_cast<const c10::TensorImpl *>(t)->dtype().toScalarType()) {
    case c10::ScalarType::Float: return "f32";
    case c10::ScalarType::Double: return "f64";
    case c10::ScalarType::Half: return "f16";
    case c10::ScalarType::BFloat16: return "bf16";
    case c10::ScalarType::Long: return "i64";
    case c10::ScalarType::Int: return "i32";
    case c10::ScalarType::Short: return "i16";
    case c10::ScalarType::Char: return "i8";
    case c10::ScalarType::Byte: return "u8";
    case c10::ScalarType::Bool: return "b8";
    case c10::ScalarType::ComplexFloat: return "c64";
    case c10::ScalarType::ComplexDouble: return "c128";
    default: return "?";
    }
}
#pragma GCC diagnostic pop

} // extern "C"
