/*
 * shard_loss_rules.c -- shard rules of the negative log-likelihood loss
 * (cross_entropy is log_softmax then nll_loss) and its backward op, one
 * mesh axis at a time as in shard_rules.c.  The class dim must not be
 * sharded; the batch dim may be, on the input and the target alike: the
 * per-sample losses stay sharded, their sum becomes a Partial sum, and
 * their mean is rejected (a mean of per-shard means is not a sum).
 */
#define SHARD_RULE_FILE
#include "shard_rules.h"

enum { REDUCE_NONE = 0, REDUCE_MEAN = 1, REDUCE_SUM = 2 };

/* The input (arg in_arg) and target (the next arg) placements checked:
 * the batch shard (or R) of both, through *p. */
static int loss_operands(shard_io_t *io, int in_arg, int8_t *p)
{
    int ii = tensor_of_arg(io, in_arg), it = tensor_of_arg(io, in_arg + 1);
    int iw = tensor_of_arg(io, in_arg + 2);
    if (ii < 0 || it < 0)
        return fail(io, "expected the input and the target");
    const cspmd_gtensor_t *in = tensor(io, ii);
    int cdim = in->ndim >= 2 ? 1 : 0;
    int8_t pi = io->in[ii], pt = io->in[it];
    if (pi == cdim)
        return fail(io, "the class dim %d of the input is sharded", cdim);
    if (pi == P_ || pt == P_)
        return fail(io, "a Partial input or target");
    if (pi != pt) {
        char a[16], b[16];
        return fail(io, "the input is placed %s but the target %s",
                    place_text(pi, a, sizeof a), place_text(pt, b, sizeof b));
    }
    if (iw >= 0 && io->in[iw] != R_)
        return fail(io, "the class weights are not replicated");
    *p = pi;
    return CSPMD_OK;
}

/* nll_loss_forward(self, target, weight, reduction, ignore_index) ->
 * (output, total_weight) */
int cspmdi_shard_nll_loss(shard_io_t *io)
{
    int8_t p = R_;
    int st = loss_operands(io, 0, &p);
    if (st != CSPMD_OK)
        return st;
    int64_t red = int_arg(io, 3, REDUCE_MEAN);
    int tnd = tensor(io, tensor_of_arg(io, 1))->ndim;
    if (red == REDUCE_NONE) {
        /* per-sample losses; total_weight is not computed (left unplaced) */
        all_results(io, p, tnd);
        io->out[1] = CSPMD_PLACE_NONE;
        io->ndim[1] = 0;
        return CSPMD_OK;
    }
    if (p >= 0 && red != REDUCE_SUM)
        return fail(io, "reduction='mean' over the sharded batch dim %d is a mean of per-shard "
                        "means, not a sum (use reduction='sum' and divide)", p);
    all_results(io, p >= 0 ? P_ : R_, 0);
    return CSPMD_OK;
}

/* nll_loss_backward(grad_output, self, target, weight, reduction,
 * ignore_index, total_weight) -> grad_input, placed as self.  grad_output
 * is placed as the target without reduction, else replicated. */
int cspmdi_shard_nll_loss_backward(shard_io_t *io)
{
    int8_t p = R_;
    int st = loss_operands(io, 1, &p);
    if (st != CSPMD_OK)
        return st;
    int ig = tensor_of_arg(io, 0);
    int8_t pg = ig >= 0 ? io->in[ig] : R_;
    int64_t red = int_arg(io, 4, REDUCE_MEAN);
    if (red == REDUCE_NONE ? pg != p : pg != R_) {
        char a[16];
        return fail(io, "grad_output is placed %s", place_text(pg, a, sizeof a));
    }
    if (p >= 0 && red == REDUCE_MEAN)
        return fail(io, "reduction='mean' over the sharded batch dim %d", p);
    all_results(io, p, tensor(io, tensor_of_arg(io, 1))->ndim);
    return CSPMD_OK;
}
