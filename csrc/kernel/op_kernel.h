/*
 * op_kernel.h -- the C kernel that cspmd registers on its dispatch key.
 *
 * For every op that reaches the key: read the operands' type ids, infer the
 * output type with the core, validate in-place/out= mutations, redispatch
 * to the real kernel with the key off, and attach the output type.  A type
 * error is reported before the real kernel runs, so a rejected op changes
 * nothing.
 */
#ifndef CSPMD_OP_KERNEL_H
#define CSPMD_OP_KERNEL_H

#include "torch/shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Run one call.  CSPMD_OK, a core error (message in cspmd_last_error), or
 * CSPMD_ERR_PENDING (a torch exception for the trampoline to rethrow). */
cspmd_status_t cspmd_kernel_run(cspmd_call_t *call);

#ifdef __cplusplus
}
#endif

#endif /* CSPMD_OP_KERNEL_H */
