// Raw torch.distributed collectives inside a checked region:
// c10d's ops and the _c10d_functional ops get their own kernel on cspmd's
// key (csrc/kernel/raw_dist_kernel.c), which every op reaches whatever its
// backend (see dispatch.cpp).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernel/raw_dist_kernel.h"
#include "shim.h"
#include "shim_internal.h"
#include "torch_compat.h"

namespace cspmd {
namespace {

void raw_trampoline(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
                    torch::jit::Stack *stack) {
    cspmd_call call{&op, ks, stack, op.schema().returns().size()};
    check_raw_call(&call, cspmd_raw_rule_find(op.operator_name().name.c_str()));
}

} // namespace

void check_raw_call(cspmd_call *call, const cspmd_raw_rule_t *rule) {
    if (key_paused() || in_unchecked_code()) {
        redispatch(call);
        return;
    }
    cspmd_status_t st = rule ? cspmd_raw_kernel_run(call, rule) : cspmd_call_redispatch(call);
    if (st != CSPMD_OK)
        raise_status(st);
}

// The c10d ops exist once torch.distributed's library has loaded, before
// cspmd._C does (register_checker_key calls this).
void register_raw_dist_ops() {
    static std::vector<std::unique_ptr<torch::Library>> libs;
    auto &d = c10::Dispatcher::singleton();
    for (int i = 0; i < cspmd_raw_rule_count(); i++) {
        std::string full = cspmd_raw_rule(i)->name;
        auto pos = full.find("::");
        auto op = d.findOp(c10::OperatorName(full, ""));
        if (!op)
            continue;
        libs.push_back(std::make_unique<torch::Library>(
            torch::Library::IMPL, full.substr(0, pos), compat::kCheckerKey, __FILE__,
            static_cast<uint32_t>(__LINE__)));
        libs.back()->impl(full.substr(pos + 2).c_str(),
                          torch::CppFunction::makeFromBoxedFunction<&raw_trampoline>());
    }
}

} // namespace cspmd

extern "C" int cspmd_call_group_name(const cspmd_call_t *call, char *buf, size_t len) {
    try {
        const auto &args = call->op->schema().arguments();
        size_t n = args.size();
        const c10::IValue *first = &*(call->stack->end() - static_cast<ptrdiff_t>(n));
        for (size_t i = 0; i < n; i++) {
            const c10::IValue &v = first[i];
            if (v.isString() && args[i].name() == "group_name") {
                std::snprintf(buf, len, "%s", v.toStringRef().c_str());
                return 1;
            }
            if (v.isCustomClass() && args[i].name() == "process_group") {
                auto pg = v.toCustomClass<c10d::ProcessGroup>();
                std::snprintf(buf, len, "%s", pg->getGroupName().c_str());
                return 1;
            }
        }
    } catch (...) {
    }
    if (len)
        buf[0] = '\0';
    return 0;
}
