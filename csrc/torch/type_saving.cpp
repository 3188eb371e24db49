// Types saved with tensors: torch.save pickles a tensor's metadata (a
// str -> bool map, torch::jit::getTensorMetadata) and torch.load hands it
// back (setTensorMetadata), asking the serializer registered for the
// tensor's device type.  cspmd registers one for CPU and CUDA tensors: a
// typed tensor's entry is its type's stable text form (the core's
// cspmd_type_encode) as the key, and loading reads it back.  The same path
// carries types through multiprocessing's tensor pickling.  Nothing else
// registers serializers for these device types; if something has, it is
// left in place and types are not saved for that device (the Python front
// reports it).
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <string>
#include <unordered_map>

#include "shim_internal.h"

namespace cspmd {
namespace {

constexpr const char *kPrefix = "cspmd1:";

void save_type(const at::Tensor &t, std::unordered_map<std::string, bool> &meta) {
    cspmd_type_t type = impl_get_type(t.unsafeGetTensorImpl());
    if (type == CSPMD_TYPE_UNTYPED)
        return;
    char buf[512];
    size_t n = cspmd_type_encode(type, buf, sizeof buf);
    std::string text(n, '\0');
    if (n < sizeof buf)
        text.assign(buf, n);
    else
        cspmd_type_encode(type, text.data(), n + 1);
    meta[text] = true;
}

void load_type(const at::Tensor &t, std::unordered_map<std::string, bool> &meta) {
    for (const auto &kv : meta) {
        if (kv.first.rfind(kPrefix, 0) != 0)
            continue;
        cspmd_type_t type;
        cspmd_status_t st = cspmd_type_decode(kv.first.c_str(), &type);
        TORCH_CHECK(st == CSPMD_OK, "cspmd: ", cspmd_last_error());
        impl_set_type(t.unsafeGetTensorImpl(), type);
    }
}

} // namespace

// Register the serializers for CPU and CUDA tensors; returns the device
// types registered now or earlier by cspmd ("cpu", "cuda"), skipping one
// that another library took.
std::vector<std::string> register_type_saving() {
    static std::vector<std::string> done = [] {
        std::vector<std::string> out;
        auto &table = torch::jit::GetBackendMetaSerialization();
        for (auto dev : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
            auto &slot = table[static_cast<size_t>(dev)];
            if (slot.has_value())
                continue;
            slot = std::make_pair(torch::jit::BackendMetaPtr(save_type),
                                  torch::jit::BackendMetaPtr(load_type));
            out.push_back(c10::DeviceTypeName(dev, /*lower_case=*/true));
        }
        return out;
    }();
    return done;
}

} // namespace cspmd
