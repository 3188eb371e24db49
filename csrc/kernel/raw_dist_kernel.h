/*
 * raw_dist_kernel.h -- the kernel for raw torch.distributed collectives reached
 * inside a checked region, over the core's raw rules.
 */
#ifndef CSPMD_RAW_DIST_KERNEL_H
#define CSPMD_RAW_DIST_KERNEL_H

#include "torch/shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Check the call's input (and pre-annotated outputs) on the group's axis,
 * run it with the key off, and type what the rule of the op `name` says
 * (refused on typed tensors where there is none: cspmd_raw_op_is_raw). */
cspmd_status_t cspmd_raw_kernel_run(cspmd_call_t *call, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* CSPMD_RAW_DIST_KERNEL_H */
