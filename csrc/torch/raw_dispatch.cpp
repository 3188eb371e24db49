// Raw torch.distributed collectives inside a checked region: every op of
// torch.distributed's namespaces that the core sends to the raw kernel
// (cspmd_raw_op_is_raw) gets its own kernel on cspmd's key
// (csrc/kernel/raw_dist_kernel.c), which every op reaches whatever its
// backend (see dispatch.cpp).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "kernel/raw_dist_kernel.h"
#include "shim.h"
#include "shim_internal.h"
#include "torch_compat.h"

namespace cspmd {
namespace {

void raw_trampoline(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
                    torch::jit::Stack *stack) {
    cspmd_call call{&op, ks, stack, op.schema().returns().size()};
    check_raw_call(&call, op.operator_name().name.c_str());
}

// c10d's ReduceOp as the core spells reductions.
const char *reduce_op_name(c10d::ReduceOp::RedOpType op) {
    switch (op) {
    case c10d::ReduceOp::SUM: return "sum";
    case c10d::ReduceOp::AVG: return "avg";
    case c10d::ReduceOp::PRODUCT: return "product";
    case c10d::ReduceOp::MIN: return "min";
    case c10d::ReduceOp::MAX: return "max";
    case c10d::ReduceOp::BAND: return "band";
    case c10d::ReduceOp::BOR: return "bor";
    case c10d::ReduceOp::BXOR: return "bxor";
    case c10d::ReduceOp::PREMUL_SUM: return "premul_sum";
    case c10d::ReduceOp::UNUSED: return "unused";
    }
    return "unknown";
}

} // namespace

void check_raw_call(cspmd_call *call, const char *name) {
    if (key_paused() || in_unchecked_code()) {
        redispatch(call);
        return;
    }
    cspmd_status_t st = cspmd_raw_kernel_run(call, name);
    if (st != CSPMD_OK)
        raise_status(st);
}

// The c10d ops exist once torch.distributed's library has loaded, before
// cspmd._C does (register_checker_key calls this).  Every overload of an
// op the core sends to the raw kernel gets it, one library per namespace.
void register_raw_dist_ops() {
    static std::map<std::string, std::unique_ptr<torch::Library>> libs;
    static std::set<std::string> done;
    for (const c10::OperatorName &op : c10::Dispatcher::singleton().getAllOpNames()) {
        const std::string &full = op.name;
        if (!cspmd_raw_op_is_raw(full.c_str()) || !done.insert(full).second)
            continue;
        auto pos = full.find("::");
        std::string ns = full.substr(0, pos);
        auto &lib = libs[ns];
        if (!lib)
            lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, compat::kCheckerKey,
                                                   __FILE__, static_cast<uint32_t>(__LINE__));
        lib->impl(full.substr(pos + 2).c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&raw_trampoline>());
    }
}

} // namespace cspmd

namespace {

using cspmd::named_arg;

int no_answer(char *buf, size_t len) {
    if (len)
        buf[0] = '\0';
    return 0;
}

// As much of name as fits; returns the size the whole of it needs.
int copy_name(const std::string &name, char *buf, size_t len) {
    if (len)
        std::snprintf(buf, len, "%s", name.c_str());
    return static_cast<int>(std::min<size_t>(name.size() + 1, INT_MAX));
}

} // namespace

extern "C" int cspmd_call_group_name(const cspmd_call_t *call, char *buf, size_t len) {
    try {
        // A name, or a ProcessGroup (from torch 2.15 also where the schema
        // says group_name, typed Any).
        const c10::IValue *v = named_arg(call, {"group_name", "process_group"});
        if (v && v->isString())
            return copy_name(v->toStringRef(), buf, len);
        if (v && v->isCustomClass())
            return copy_name(v->toCustomClass<c10d::ProcessGroup>()->getGroupName(), buf, len);
    } catch (...) {
    }
    return no_answer(buf, len);
}

extern "C" int cspmd_call_reduce_op(const cspmd_call_t *call, char *buf, size_t len) {
    try {
        const c10::IValue *v = named_arg(call, {"reduce_op", "reduceOp"});
        if (v && v->isString()) {
            std::snprintf(buf, len, "%s", v->toStringRef().c_str());
            return 1;
        }
        if (v && v->isCustomClass()) {
            std::snprintf(buf, len, "%s",
                          cspmd::reduce_op_name(v->toCustomClass<c10d::ReduceOp>()->op_));
            return 1;
        }
    } catch (...) {
    }
    return no_answer(buf, len);
}
