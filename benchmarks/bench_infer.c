/*
 * bench_infer -- calls the core's inference for one op N times, for
 * instruction counting under callgrind (see benchmarks/callgrind.sh):
 * instructions per call = (Ir(N) - Ir(0)) / N, a figure that machine noise
 * does not move.
 *
 *   bench_infer N
 */
#include <stdio.h>
#include <stdlib.h>

#include "cspmd.h"

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    cspmd_axis_t dp, tp;
    int64_t s1[] = {2}, d1[] = {4}, s2[] = {4}, d2[] = {1};
    if (cspmd_axis_intern(s1, d1, 1, &dp) || cspmd_axis_intern(s2, d2, 1, &tp))
        return 1;
    cspmd_axis_t mesh[] = {dp, tp};
    cspmd_mesh_push(mesh, 2);
    cspmd_checker_set(1, 1);
    cspmd_ltype_t a_t[] = {CSPMD_LT_R, CSPMD_LT_V}, b_t[] = {CSPMD_LT_R, CSPMD_LT_R};
    cspmd_type_t a, b;
    if (cspmd_type_make(mesh, a_t, 2, NULL, &a) || cspmd_type_make(mesh, b_t, 2, NULL, &b))
        return 1;
    cspmd_rule_t add = cspmd_rule_find("aten::add", "Tensor");
    /* bind add's argument names as the kernel does at the op's first call */
    const char *arg_names[] = {"self", "other", "alpha"};
    const uint8_t arg_is_tensor[] = {1, 1, 0};
    if (cspmd_rule_bind(add, "aten::add.Tensor", arg_names, arg_is_tensor, 3) != CSPMD_OK)
        return 1;
    cspmd_operand_t ops[] = {{a, 0, CSPMD_OPERAND_TENSOR, 0}, {b, 1, CSPMD_OPERAND_TENSOR, 0},
                             {0, 2, CSPMD_OPERAND_SCALAR, 0}};
    cspmd_type_t out = 0, acc = 0;
    for (long i = 0; i < n; i++) {
        if (cspmd_infer(add, ops, 3, &out) != CSPMD_OK)
            return 1;
        acc ^= out;
    }
    printf("%ld calls, result type %u\n", n, (unsigned)acc);
    return 0;
}
