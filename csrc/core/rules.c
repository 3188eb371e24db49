/*
 * rules.c -- the op rule table: aten op name + overload -> rule.
 *
 * The checker sees aten-level ops (after CompositeImplicitAutograd
 * decomposition), forward and backward, so this table restates the reference's
 * Python-level tables for aten overloads and adds the ops that a
 * Megatron-style transformer runs forward and backward.  Anything not
 * listed gets rule 0: NONLINEAR inference.
 *
 * Rules are looked up once per operator (the kernel caches the id), by a
 * binary search over a sorted index built on first use.  An entry with
 * overload "*" covers every overload of its name that has no entry of its
 * own; an entry whose name ends in '*' covers every name with that prefix.
 *
 * Notable choices (deviations from the reference, which types Python-level
 * functions, are marked "dev"):
 *   - Backward ops are linear in their incoming gradient (arg 0) and use
 *     every other tensor as a fixed coefficient: MULTILINEAR with every
 *     other argument a nonlinear position.  (dev: the reference never
 *     checks backward.)
 *   - LINEAR rules with nonlinear positions (gather, index_select, index,
 *     embedding, where, masked_fill, scatter*, index_put ...) treat those
 *     arguments (indices, masks, conditions) as coefficients: the result is
 *     MULTILINEAR(LINEAR(other operands), coefficients...), and P there is
 *     an error.  So gather(P, idx:R) -> P.  (dev: the reference counts the
 *     index as a LINEAR operand and rejects P + R.)
 *   - copy_ takes its new type from src alone, LINEAR (dev: the reference
 *     treats Tensor.copy_ as NONLINEAR over (self, src)); the kernel
 *     validates the mutation of self separately.
 *   - _to_copy (dtype/device casts, .to()) is LINEAR (dev: the reference
 *     treats Tensor.to as NONLINEAR, rejecting P.to(bf16)).
 *   - div with rounding_mode (div.Tensor_mode ...) is NONLINEAR (floor and
 *     trunc are not linear); view.dtype (bit reinterpretation) NONLINEAR.
 *   - Ops torch's derivatives.yaml marks auto_linear (upsample_*, pads,
 *     avg pools, pixel/channel shuffles, im2col/col2im, _fft_*, the slice
 *     scatters...) are LINEAR, their backward ops linear in the gradient.
 *     constant_pad_nd and the fills (masked_fill, index_fill, scatter.value)
 *     count their value as the weak scalar unless it is 0.  (dev: the
 *     reference rejects P through them.)  tests/python/
 *     test_linear_from_torch.py checks the list and every row's argument
 *     positions against torch's schemas.
 *   - _foreach_<op> ops are FOREACH: element i of the result is inferred
 *     with <op>'s own rule over element i of every list argument (the id
 *     is CSPMDI_FOREACH_BIT | <op>'s id, so no table entry is needed).
 *     The fused optimizers (_fused_adam_, _fused_adamw_, _fused_sgd_,
 *     _fused_adagrad_) are FOREACH entries with their per-parameter rule:
 *     the update is a function of (param, grad, optimizer state);
 *     state_steps and the AMP scalars are not operands and keep their
 *     types.  (dev: the reference sees neither.)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cspmd.h"
#include "rules.h"

#define B(i) (UINT64_C(1) << (i))
#define ALL_BUT_0 (~UINT64_C(1))

enum { INFER = CSPMD_KIND_INFER, PASS = CSPMD_KIND_PASSTHROUGH, FACT = CSPMD_KIND_FACTORY,
       FILL = CSPMD_KIND_FILL, RFILL = CSPMD_KIND_RANDOM_FILL, EACH = CSPMD_KIND_FOREACH };
enum { NL = CSPMDI_LIN_NONLINEAR, LI = CSPMDI_LIN_LINEAR, ML = CSPMDI_LIN_MULTILINEAR };

/* LINEAR with weak-scalar positions sp. */
#define LIN(n, o, sp) {n, o, LI, INFER, 0, -1, -1, -1, sp, 0, 0, 0, 0}
/* LINEAR in the other operands, coefficients at args cf. */
#define LINC(n, o, sp, cf) {n, o, LI, INFER, 0, -1, -1, -1, sp, cf, 0, 0, 0}
/* LINEAR with weak-scalar positions sp, of which zf are no operand when
 * their number is zero. */
#define LINZ(n, o, sp, zf) {n, o, LI, INFER, 0, -1, -1, -1, sp, 0, 0, 0, zf}
/* LINC whose weak scalars at zf are no operand when zero (filling with
 * 0 keeps P). */
#define LINCZ(n, o, sp, cf, zf) {n, o, LI, INFER, 0, -1, -1, -1, sp, cf, 0, 0, zf}
/* MULTILINEAR. */
#define MUL(n, o) {n, o, ML, INFER, 0, -1, -1, -1, 0, 0, 0, 0, 0}
/* MULTILINEAR with scalar positions and nonlinear positions. */
#define MULN(n, o, sp, nl) {n, o, ML, INFER, 0, -1, -1, -1, sp, nl, 0, 0, 0}
/* NONLINEAR, listed for documentation (same as an unknown op). */
#define NON(n, o) {n, o, NL, INFER, 0, -1, -1, -1, 0, 0, 0, 0, 0}
/* Backward op: linear in the gradient (arg 0), other args coefficients. */
#define BWD(n) {n, "*", ML, INFER, CSPMDI_RF_BACKWARD, -1, -1, -1, 0, ALL_BUT_0, 0, 0, 0}
/* Structural backward op with one tensor (the gradient): LINEAR. */
/* BWD whose operands are the args at op only: nll_loss_backward's
 * total_weight (arg 6) is read by reduction='mean' alone, and global mode
 * makes it P where a batch-sharded reduction='sum' loss is P. */
#define BWDO(n, op) {n, "*", ML, INFER, CSPMDI_RF_BACKWARD, -1, -1, -1, 0, ALL_BUT_0 & (op), op, 0, 0}
#define BWDL(n) {n, "*", LI, INFER, CSPMDI_RF_BACKWARD, -1, -1, -1, 0, 0, 0, 0, 0}
/* LINEAR(MULTILINEAR(arg a, arg b), arg s), nonlinear positions nl. */
#define DEC(n, a, b, s, nl) {n, "*", LI, INFER, CSPMDI_RF_DECOMP, a, b, s, 0, nl, 0, 0, 0}
/* Deterministic factory. */
#define FAC(n, o, f) {n, o, NL, FACT, f, -1, -1, -1, 0, 0, 0, 0, 0}
/* A factory shaped like its operand (CSPMDI_RF_LIKE); its fill is zero
 * with the flag CSPMDI_RF_ZEROS or a zero Scalar at args zf. */
#define LIKE(n, z, zf) {n, "*", NL, FACT, CSPMDI_RF_LIKE | (z), -1, -1, -1, zf, 0, 0, 0, zf}
#define FILLR(n, o) {n, o, NL, FILL, 0, -1, -1, -1, 0, 0, 0, 0, 0}
#define RAND(n, o) {n, o, NL, RFILL, 0, -1, -1, -1, 0, 0, 0, 0, 0}
#define PASSR(n, o) {n, o, NL, PASS, 0, -1, -1, -1, 0, 0, 0, 0, 0}
/* LINEAR over the operands at args op only. */
#define SRC(n, o, op) {n, o, LI, INFER, 0, -1, -1, -1, 0, 0, op, 0, 0}
/* A fused optimizer step, per parameter: linearity lin over the lists at
 * args op; the written lists at args res take the result. */
#define FUSED(n, lin, op, res) {n, "*", lin, EACH, 0, -1, -1, -1, 0, 0, op, res, 0}
#define ADAM_OPERANDS (B(0) | B(1) | B(2) | B(3) | B(4)) /* param grad m v vmax */
#define ADAM_RESULTS (B(0) | B(2) | B(3) | B(4))

static const cspmdi_rule_t rules[] = {
    /* 0: the default for unknown ops. */
    {"", "", NL, INFER, 0, -1, -1, -1, 0, 0, 0, 0, 0},

    /* ---- LINEAR: add / sub families (positions 0, 1) ---------------- */
    LIN("aten::add", "*", B(0) | B(1)),
    LIN("aten::add_", "*", B(0) | B(1)),
    LIN("aten::sub", "*", B(0) | B(1)),
    LIN("aten::sub_", "*", B(0) | B(1)),
    LIN("aten::subtract", "*", B(0) | B(1)),
    LIN("aten::subtract_", "*", B(0) | B(1)),
    LIN("aten::rsub", "*", B(0) | B(1)),
    /* ---- LINEAR: negation ------------------------------------------- */
    LIN("aten::neg", "*", B(0)),
    LIN("aten::neg_", "*", B(0)),
    LIN("aten::negative", "*", B(0)),
    LIN("aten::negative_", "*", B(0)),
    LIN("aten::positive", "*", B(0)),
    /* ---- LINEAR: copies, aliases, casts ------------------------------ */
    LIN("aten::clone", "*", B(0)),
    LIN("aten::contiguous", "*", B(0)),
    LIN("aten::detach", "*", B(0)),
    LIN("aten::detach_", "*", B(0)),
    LIN("aten::detach_copy", "*", B(0)),
    LIN("aten::alias", "*", B(0)),
    LIN("aten::alias_copy", "*", B(0)),
    LIN("aten::lift", "*", B(0)),
    LIN("aten::_to_copy", "*", B(0)),
    LIN("aten::to", "*", B(0)),
    LIN("aten::_pin_memory", "*", B(0)),
    LIN("aten::pin_memory", "*", B(0)),
    LIN("aten::_autocast_to_reduced_precision", "*", B(0)),
    LIN("aten::_autocast_to_full_precision", "*", B(0)),
    LIN("aten::conj", "*", B(0)),
    LIN("aten::_conj", "*", B(0)),
    LIN("aten::conj_physical", "*", B(0)),
    LIN("aten::resolve_conj", "*", B(0)),
    LIN("aten::resolve_neg", "*", B(0)),
    LIN("aten::_fw_primal", "*", B(0)),
    LIN("_c10d_functional::wait_tensor", "*", B(0)),
    LIN("c10d_functional::wait_tensor", "*", B(0)),
    /* copy_(self, src): the new type is src's alone. */
    SRC("aten::copy_", "*", B(1)),
    SRC("aten::copy", "*", B(1)),
    SRC("aten::_copy_from", "*", B(0)),
    SRC("aten::_copy_from_and_resize", "*", B(0)),
    /* ---- LINEAR: reductions ------------------------------------------ */
    LIN("aten::sum", "*", B(0)),
    LIN("aten::mean", "*", B(0)),
    LIN("aten::nansum", "*", B(0)),
    LIN("aten::nanmean", "*", B(0)),
    LIN("aten::cumsum", "*", B(0)),
    LIN("aten::cumsum_", "*", B(0)),
    LIN("aten::trace", "*", B(0)),
    LIN("aten::sum_to_size", "*", B(0)),
    /* ---- LINEAR: concatenation (list at arg 0) ------------------------ */
    LIN("aten::cat", "*", B(0)),
    LIN("aten::concat", "*", B(0)),
    LIN("aten::concatenate", "*", B(0)),
    LIN("aten::stack", "*", B(0)),
    LIN("aten::_stack", "*", B(0)),
    LIN("aten::hstack", "*", B(0)),
    LIN("aten::vstack", "*", B(0)),
    LIN("aten::dstack", "*", B(0)),
    LIN("aten::column_stack", "*", B(0)),
    LIN("aten::row_stack", "*", B(0)),
    LIN("aten::block_diag", "*", B(0)),
    /* ---- LINEAR: structural / view ops ------------------------------ */
    LIN("aten::view", "*", B(0)),
    NON("aten::view", "dtype"), /* bit reinterpretation */
    LIN("aten::_unsafe_view", "*", B(0)),
    LIN("aten::view_copy", "*", B(0)),
    LIN("aten::view_as", "*", B(0)),
    LIN("aten::reshape", "*", B(0)),
    LIN("aten::_reshape_alias", "*", B(0)),
    LIN("aten::_reshape_copy", "*", B(0)),
    LIN("aten::reshape_as", "*", B(0)),
    LIN("aten::flatten", "*", B(0)),
    LIN("aten::unflatten", "*", B(0)),
    LIN("aten::ravel", "*", B(0)),
    LIN("aten::expand", "*", B(0)),
    LIN("aten::expand_copy", "*", B(0)),
    LIN("aten::expand_as", "*", B(0)),
    LIN("aten::broadcast_to", "*", B(0)),
    LIN("aten::permute", "*", B(0)),
    LIN("aten::permute_copy", "*", B(0)),
    LIN("aten::transpose", "*", B(0)),
    LIN("aten::transpose_", "*", B(0)),
    LIN("aten::transpose_copy", "*", B(0)),
    LIN("aten::t", "*", B(0)),
    LIN("aten::t_", "*", B(0)),
    LIN("aten::t_copy", "*", B(0)),
    LIN("aten::adjoint", "*", B(0)),
    LIN("aten::mT", "*", B(0)),
    LIN("aten::mH", "*", B(0)),
    LIN("aten::squeeze", "*", B(0)),
    LIN("aten::squeeze_", "*", B(0)),
    LIN("aten::squeeze_copy", "*", B(0)),
    LIN("aten::unsqueeze", "*", B(0)),
    LIN("aten::unsqueeze_", "*", B(0)),
    LIN("aten::unsqueeze_copy", "*", B(0)),
    LIN("aten::slice", "*", B(0)),
    LIN("aten::slice_copy", "*", B(0)),
    LIN("aten::select", "*", B(0)),
    LIN("aten::select_copy", "*", B(0)),
    LIN("aten::narrow", "*", B(0)),
    LIN("aten::narrow_copy", "*", B(0)),
    LIN("aten::split", "*", B(0)),
    LIN("aten::split_copy", "*", B(0)),
    LIN("aten::split_with_sizes", "*", B(0)),
    LIN("aten::split_with_sizes_copy", "*", B(0)),
    LIN("aten::unsafe_split", "*", B(0)),
    LIN("aten::unsafe_split_with_sizes", "*", B(0)),
    LIN("aten::tensor_split", "*", B(0)),
    LIN("aten::chunk", "*", B(0)),
    LIN("aten::unsafe_chunk", "*", B(0)),
    LIN("aten::unbind", "*", B(0)),
    LIN("aten::unbind_copy", "*", B(0)),
    LIN("aten::flip", "*", B(0)),
    LIN("aten::fliplr", "*", B(0)),
    LIN("aten::flipud", "*", B(0)),
    LIN("aten::roll", "*", B(0)),
    LIN("aten::rot90", "*", B(0)),
    LIN("aten::movedim", "*", B(0)),
    LIN("aten::moveaxis", "*", B(0)),
    LIN("aten::swapaxes", "*", B(0)),
    LIN("aten::swapaxes_", "*", B(0)),
    LIN("aten::swapdims", "*", B(0)),
    LIN("aten::swapdims_", "*", B(0)),
    LIN("aten::diagonal", "*", B(0)),
    LIN("aten::diagonal_copy", "*", B(0)),
    LIN("aten::diag", "*", B(0)),
    LIN("aten::diag_embed", "*", B(0)),
    LIN("aten::repeat", "*", B(0)),
    LIN("aten::tile", "*", B(0)),
    /* repeat_interleave(self, repeats, ...): linear in self; the repeats
     * tensor a coefficient.  repeat_interleave.Tensor(repeats) makes
     * indices from counts: NONLINEAR (the default). */
    LINC("aten::repeat_interleave", "self_Tensor", B(0), B(1)),
    LIN("aten::repeat_interleave", "self_int", B(0)),
    LIN("aten::unfold", "*", B(0)),
    LIN("aten::unfold_copy", "*", B(0)),
    LIN("aten::as_strided", "*", B(0)),
    LIN("aten::as_strided_", "*", B(0)),
    LIN("aten::as_strided_copy", "*", B(0)),
    LIN("aten::view_as_real", "*", B(0)),
    LIN("aten::view_as_complex", "*", B(0)),
    LIN("aten::real", "*", B(0)),
    LIN("aten::imag", "*", B(0)),
    /* complex(real, imag) = real + i imag: linear in both jointly, as add
     * (dev: the reference types torch.complex as non-linear). */
    LIN("aten::complex", "*", 0),
    /* polar(abs, angle) = abs * e^(i angle): linear in abs, the angle a
     * coefficient (dev: non-linear in the reference). */
    LINC("aten::polar", "*", 0, B(1)),
    LIN("aten::_lazy_clone", "*", B(0)),
    /* ---- LINEAR: resampling, padding, pooling, shuffles, FFTs --------
     * (torch's derivatives.yaml marks each auto_linear) */
    LIN("aten::upsample_nearest1d", "*", 0),
    LIN("aten::upsample_nearest2d", "*", 0),
    LIN("aten::upsample_nearest3d", "*", 0),
    LIN("aten::_upsample_nearest_exact1d", "*", 0),
    LIN("aten::_upsample_nearest_exact2d", "*", 0),
    LIN("aten::_upsample_nearest_exact3d", "*", 0),
    LIN("aten::upsample_linear1d", "*", 0),
    LIN("aten::upsample_bilinear2d", "*", 0),
    LIN("aten::_upsample_bilinear2d_aa", "*", 0),
    LIN("aten::upsample_bicubic2d", "*", 0),
    LIN("aten::_upsample_bicubic2d_aa", "*", 0),
    LIN("aten::upsample_trilinear3d", "*", 0),
    /* constant_pad_nd(self, pad, value): padding with 0 is linear; any
     * other value is the weak scalar, and P + scalar is an error. */
    LINZ("aten::constant_pad_nd", "*", B(2), B(2)),
    LIN("aten::reflection_pad1d", "*", 0),
    LIN("aten::reflection_pad2d", "*", 0),
    LIN("aten::reflection_pad3d", "*", 0),
    LIN("aten::replication_pad1d", "*", 0),
    LIN("aten::replication_pad2d", "*", 0),
    LIN("aten::replication_pad3d", "*", 0),
    LIN("aten::_adaptive_avg_pool2d", "*", 0),
    LIN("aten::_adaptive_avg_pool3d", "*", 0),
    LIN("aten::avg_pool2d", "*", 0),
    LIN("aten::avg_pool3d", "*", 0),
    /* max_unpool(self, indices, output_size): the indices a coefficient. */
    LINC("aten::max_unpool2d", "*", 0, B(1)),
    LINC("aten::max_unpool3d", "*", 0, B(1)),
    LIN("aten::col2im", "*", 0),
    LIN("aten::im2col", "*", 0),
    LIN("aten::pixel_shuffle", "*", 0),
    LIN("aten::pixel_unshuffle", "*", 0),
    LIN("aten::channel_shuffle", "*", 0),
    LIN("aten::native_channel_shuffle", "*", 0),
    LIN("aten::_fft_r2c", "*", 0),
    LIN("aten::_fft_c2r", "*", 0),
    LIN("aten::_fft_c2c", "*", 0),
    /* affine_grid_generator(theta, size, align_corners). */
    LIN("aten::affine_grid_generator", "*", 0),
    /* ---- LINEAR jointly in self and src: scatters of a slice ---------- */
    LIN("aten::slice_scatter", "*", 0),
    LIN("aten::select_scatter", "*", 0),
    LIN("aten::diagonal_scatter", "*", 0),
    LIN("aten::slice_inverse", "*", 0),
    LIN("aten::tril", "*", B(0)),
    LIN("aten::tril_", "*", B(0)),
    LIN("aten::triu", "*", B(0)),
    LIN("aten::triu_", "*", B(0)),
    /* ---- LINEAR with coefficients: indexing, masking, selection ------ */
    /* index_select(self, dim, index), gather(self, dim, index, ...). */
    LINC("aten::index_select", "*", B(0), B(2)),
    LINC("aten::gather", "*", B(0), B(2)),
    LINC("aten::take_along_dim", "*", B(0), B(1)),
    LINC("aten::take", "*", B(0), B(1)),
    /* index.Tensor(self, Tensor?[] indices). */
    LINC("aten::index", "*", B(0), B(1)),
    LINC("aten::_unsafe_index", "*", B(0), B(1)),
    /* index_put(self, indices, values, accumulate). */
    LINC("aten::index_put", "*", B(0) | B(2), B(1)),
    LINC("aten::index_put_", "*", B(0) | B(2), B(1)),
    LINC("aten::_index_put_impl_", "*", B(0) | B(2), B(1)),
    LINC("aten::_unsafe_index_put", "*", B(0) | B(2), B(1)),
    /* index_add(self, dim, index, source, *, alpha). */
    LINC("aten::index_add", "*", B(0) | B(3), B(2)),
    LINC("aten::index_add_", "*", B(0) | B(3), B(2)),
    /* index_copy(self, dim, index, source). */
    LINC("aten::index_copy", "*", B(0) | B(3), B(2)),
    LINC("aten::index_copy_", "*", B(0) | B(3), B(2)),
    /* index_fill(self, dim, index, value); a fill value of 0 is no
     * operand (also for scatter's and masked_fill's value). */
    LINCZ("aten::index_fill", "*", B(0) | B(3), B(2), B(3)),
    LINCZ("aten::index_fill_", "*", B(0) | B(3), B(2), B(3)),
    /* scatter(self, dim, index, src|value), scatter_add(self, dim, index, src). */
    LINCZ("aten::scatter", "*", B(0) | B(3), B(2), B(3)),
    LINCZ("aten::scatter_", "*", B(0) | B(3), B(2), B(3)),
    /* scatter(..., reduce="multiply") multiplies self by src. */
    NON("aten::scatter", "reduce"),
    NON("aten::scatter", "value_reduce"),
    NON("aten::scatter_", "reduce"),
    NON("aten::scatter_", "value_reduce"),
    LINC("aten::scatter_add", "*", B(0) | B(3), B(2)),
    LINC("aten::scatter_add_", "*", B(0) | B(3), B(2)),
    /* masked_fill(self, mask, value), masked_scatter(self, mask, source),
     * masked_select(self, mask). */
    LINCZ("aten::masked_fill", "*", B(0) | B(2), B(1), B(2)),
    LINCZ("aten::masked_fill_", "*", B(0) | B(2), B(1), B(2)),
    LINC("aten::masked_scatter", "*", B(0) | B(2), B(1)),
    LINC("aten::masked_scatter_", "*", B(0) | B(2), B(1)),
    LINC("aten::masked_select", "*", B(0), B(1)),
    /* where.self(condition, self, other). */
    LINC("aten::where", "*", B(1) | B(2), B(0)),
    NON("aten::where", ""), /* where(condition): the indices of nonzeros */
    /* lerp(self, end, weight) = (1 - weight) * self + weight * end:
     * linear in (self, end), the weight a coefficient. */
    LINC("aten::lerp", "*", 0, B(2)),
    LINC("aten::lerp_", "*", 0, B(2)),
    /* embedding(weight, indices, ...): linear in the weight. */
    LINC("aten::embedding", "*", 0, B(1)),
    /* ---- MULTILINEAR: division (divisor at arg 1 is nonlinear) -------- */
    MULN("aten::div", "*", B(0) | B(1), B(1)),
    MULN("aten::div_", "*", B(0) | B(1), B(1)),
    MULN("aten::divide", "*", B(0) | B(1), B(1)),
    MULN("aten::divide_", "*", B(0) | B(1), B(1)),
    MULN("aten::true_divide", "*", B(0) | B(1), B(1)),
    MULN("aten::true_divide_", "*", B(0) | B(1), B(1)),
    NON("aten::div", "Tensor_mode"),
    NON("aten::div", "Scalar_mode"),
    NON("aten::div", "out_mode"),
    NON("aten::div", "Scalar_mode_out"),
    NON("aten::div_", "Tensor_mode"),
    NON("aten::div_", "Scalar_mode"),
    NON("aten::divide", "Tensor_mode"),
    NON("aten::divide", "Scalar_mode"),
    NON("aten::divide", "out_mode"),
    NON("aten::divide_", "Tensor_mode"),
    NON("aten::divide_", "Scalar_mode"),
    /* ---- MULTILINEAR: products ---------------------------------------- */
    MUL("aten::mul", "*"),
    MUL("aten::mul_", "*"),
    MUL("aten::multiply", "*"),
    MUL("aten::multiply_", "*"),
    MUL("aten::mm", "*"),
    MUL("aten::bmm", "*"),
    MUL("aten::matmul", "*"),
    MUL("aten::dot", "*"),
    MUL("aten::vdot", "*"),
    MUL("aten::inner", "*"),
    MUL("aten::mv", "*"),
    MUL("aten::outer", "*"),
    MUL("aten::ger", "*"),
    MUL("aten::einsum", "*"),
    MUL("aten::tensordot", "*"),
    MUL("aten::kron", "*"),
    /* ---- decompositions: LINEAR(MULTILINEAR(a, b), self) -------------- */
    DEC("aten::addmm", 1, 2, 0, 0),
    DEC("aten::addmm_", 1, 2, 0, 0),
    DEC("aten::addmv", 1, 2, 0, 0),
    DEC("aten::addmv_", 1, 2, 0, 0),
    DEC("aten::addbmm", 1, 2, 0, 0),
    DEC("aten::addbmm_", 1, 2, 0, 0),
    DEC("aten::baddbmm", 1, 2, 0, 0),
    DEC("aten::baddbmm_", 1, 2, 0, 0),
    DEC("aten::addr", 1, 2, 0, 0),
    DEC("aten::addr_", 1, 2, 0, 0),
    /* addcmul(self, t1, t2, value) = self + value * t1 * t2. */
    DEC("aten::addcmul", 1, 2, 0, 0),
    DEC("aten::addcmul_", 1, 2, 0, 0),
    /* addcdiv(self, t1, t2, value) = self + value * t1 / t2. */
    DEC("aten::addcdiv", 1, 2, 0, B(2)),
    DEC("aten::addcdiv_", 1, 2, 0, B(2)),
    /* linear(input, weight, bias?) and convolution(input, weight, bias?, ...)
     * when they arrive whole (normally decomposed). */
    DEC("aten::linear", 0, 1, 2, 0),
    DEC("aten::convolution", 0, 1, 2, 0),
    DEC("aten::_convolution", 0, 1, 2, 0),
    DEC("aten::conv1d", 0, 1, 2, 0),
    DEC("aten::conv2d", 0, 1, 2, 0),
    DEC("aten::conv3d", 0, 1, 2, 0),
    /* ---- backward ops: linear in grad_output (arg 0) ------------------ */
    BWD("aten::embedding_dense_backward"),
    BWD("aten::embedding_backward"),
    BWD("aten::embedding_sparse_backward"),
    BWDO("aten::nll_loss_backward", B(0) | B(1) | B(2) | B(3)),
    BWDO("aten::nll_loss2d_backward", B(0) | B(1) | B(2) | B(3)),
    BWD("aten::_softmax_backward_data"),
    BWD("aten::_log_softmax_backward_data"),
    BWD("aten::native_layer_norm_backward"),
    BWD("aten::native_group_norm_backward"),
    BWD("aten::native_batch_norm_backward"),
    BWD("aten::_fused_rms_norm_backward"),
    BWD("aten::gelu_backward"),
    BWD("aten::silu_backward"),
    BWD("aten::threshold_backward"),
    BWD("aten::tanh_backward"),
    BWD("aten::sigmoid_backward"),
    BWD("aten::softplus_backward"),
    BWD("aten::hardtanh_backward"),
    BWD("aten::hardswish_backward"),
    BWD("aten::hardsigmoid_backward"),
    BWD("aten::elu_backward"),
    BWD("aten::leaky_relu_backward"),
    BWD("aten::mish_backward"),
    BWD("aten::log_sigmoid_backward"),
    BWD("aten::glu_backward"),
    BWD("aten::mse_loss_backward"),
    BWD("aten::smooth_l1_loss_backward"),
    BWD("aten::huber_loss_backward"),
    BWD("aten::binary_cross_entropy_backward"),
    BWD("aten::native_dropout_backward"),
    BWD("aten::_masked_softmax_backward"),
    BWD("aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    BWD("aten::_scaled_dot_product_efficient_attention_backward"),
    BWD("aten::_scaled_dot_product_flash_attention_backward"),
    BWD("aten::_scaled_dot_product_cudnn_attention_backward"),
    BWD("aten::_scaled_dot_product_fused_attention_overrideable_backward"),
    BWD("aten::_efficient_attention_backward"),
    BWD("aten::_flash_attention_backward"),
    BWD("aten::convolution_backward"),
    BWD("aten::max_pool2d_with_indices_backward"),
    BWD("aten::max_pool3d_with_indices_backward"),
    BWD("aten::avg_pool2d_backward"),
    BWD("aten::avg_pool3d_backward"),
    BWD("aten::_adaptive_avg_pool2d_backward"),
    BWD("aten::_adaptive_avg_pool3d_backward"),
    BWD("aten::index_select_backward"),
    BWD("aten::gather_backward"),
    BWD("aten::masked_select_backward"),
    BWD("aten::trace_backward"),
    BWD("aten::_prelu_kernel_backward"),
    BWDL("aten::slice_backward"),
    BWDL("aten::select_backward"),
    BWDL("aten::diagonal_backward"),
    BWDL("aten::unfold_backward"),
    BWDL("aten::as_strided_scatter"),
    BWDL("aten::upsample_nearest1d_backward"),
    BWDL("aten::upsample_nearest2d_backward"),
    BWDL("aten::upsample_nearest3d_backward"),
    BWDL("aten::_upsample_nearest_exact1d_backward"),
    BWDL("aten::_upsample_nearest_exact2d_backward"),
    BWDL("aten::_upsample_nearest_exact3d_backward"),
    BWDL("aten::upsample_linear1d_backward"),
    BWDL("aten::upsample_bilinear2d_backward"),
    BWDL("aten::_upsample_bilinear2d_aa_backward"),
    BWDL("aten::upsample_bicubic2d_backward"),
    BWDL("aten::_upsample_bicubic2d_aa_backward"),
    BWDL("aten::upsample_trilinear3d_backward"),
    BWDL("aten::affine_grid_generator_backward"),
    /* (grad_output, self, ...): self gives the shape, or the max's place. */
    BWD("aten::reflection_pad1d_backward"),
    BWD("aten::reflection_pad2d_backward"),
    BWD("aten::reflection_pad3d_backward"),
    BWD("aten::replication_pad1d_backward"),
    BWD("aten::replication_pad2d_backward"),
    BWD("aten::replication_pad3d_backward"),
    BWD("aten::max_pool2d_backward"),
    BWD("aten::adaptive_max_pool2d_backward"),
    BWD("aten::adaptive_max_pool3d_backward"),
    BWD("aten::fractional_max_pool2d_backward"),
    BWD("aten::fractional_max_pool3d_backward"),
    /* ---- forward ops with no linearity (listed for clarity) ----------- */
    NON("aten::native_layer_norm", "*"),
    NON("aten::_fused_rms_norm", "*"),
    NON("aten::native_dropout", "*"),
    NON("aten::_softmax", "*"),
    NON("aten::_log_softmax", "*"),
    NON("aten::_safe_softmax", "*"),
    NON("aten::nll_loss_forward", "*"),
    NON("aten::_scaled_dot_product_flash_attention_for_cpu", "*"),
    NON("aten::_scaled_dot_product_efficient_attention", "*"),
    NON("aten::_scaled_dot_product_flash_attention", "*"),
    NON("aten::_scaled_dot_product_cudnn_attention", "*"),
    NON("aten::_local_scalar_dense", "*"), /* .item(): P.item() rejected */
    NON("aten::empty", "*"),               /* no operands -> {}          */
    NON("aten::empty_strided", "*"),
    /* Uninitialized buffers take the operand's type, P included: their
     * contents are only ever overwritten (autograd's clone_obey_contract
     * does new_empty_strided + copy_ on gradients, which may be P). */
    LIN("aten::empty_like", "*", 0),
    LIN("aten::new_empty", "*", 0),
    LIN("aten::new_empty_strided", "*", 0),
    /* Random factories arrive whole at cspmd's key: fresh data, {} */
    RAND("aten::randn", "*"),
    RAND("aten::rand", "*"),
    RAND("aten::randint", "*"),
    RAND("aten::randperm", "*"),
    NON("aten::randn_like", "*"),
    NON("aten::rand_like", "*"),
    NON("aten::randint_like", "*"),
    /* ---- deterministic factories -------------------------- */
    FAC("aten::zeros", "*", 0),
    FAC("aten::ones", "*", 0),
    FAC("aten::full", "*", 0),
    FAC("aten::arange", "*", 0),
    FAC("aten::linspace", "*", 0),
    FAC("aten::logspace", "*", 0),
    FAC("aten::eye", "*", 0),
    FAC("aten::scalar_tensor", "*", 0),
    /* A typed tensor passed through lift_fresh keeps its type (LINEAR). */
    {"aten::lift_fresh", "*", LI, FACT, CSPMDI_RF_FRESH, -1, -1, -1, 0, 0, 0, 0, 0},
    {"aten::lift_fresh_copy", "*", LI, FACT, CSPMDI_RF_FRESH, -1, -1, -1, 0, 0, 0, 0, 0},
    /* *_like: the operand's type; a P operand gives P for a zero fill and
     * R for any other (dev: the reference rejects P through them). */
    LIKE("aten::zeros_like", CSPMDI_RF_ZEROS, 0),
    LIKE("aten::ones_like", 0, 0),
    LIKE("aten::full_like", 0, B(1)),
    FAC("aten::new_zeros", "*", CSPMDI_RF_IGNORE_OPERANDS),
    FAC("aten::new_ones", "*", CSPMDI_RF_IGNORE_OPERANDS),
    FAC("aten::new_full", "*", CSPMDI_RF_IGNORE_OPERANDS),
    /* ---- in-place deterministic fills --------------------------------- */
    FILLR("aten::zero_", "*"),
    FILLR("aten::zero", "*"),
    FILLR("aten::fill_", "*"),
    FILLR("aten::fill", "*"),
    /* ---- in-place random fills --------------------------------------- */
    RAND("aten::normal_", "*"),
    RAND("aten::uniform_", "*"),
    RAND("aten::bernoulli_", "*"),
    RAND("aten::random_", "*"),
    RAND("aten::exponential_", "*"),
    RAND("aten::geometric_", "*"),
    RAND("aten::cauchy_", "*"),
    RAND("aten::log_normal_", "*"),
    /* ---- passthrough: queries, memory management, per-element lists --- */
    PASSR("aten::_has_compatible_shallow_copy_type", "*"),
    PASSR("aten::is_same_size", "*"),
    PASSR("aten::record_stream", "*"),
    PASSR("aten::set_", "*"),
    PASSR("aten::resize_", "*"),
    PASSR("aten::resize_as_", "*"),
    PASSR("aten::_resize_output_", "*"),
    PASSR("aten::is_pinned", "*"),
    PASSR("aten::size", "*"),
    PASSR("aten::stride", "*"),
    PASSR("aten::is_complex", "*"),
    PASSR("aten::is_floating_point", "*"),
    PASSR("aten::is_conj", "*"),
    PASSR("aten::is_neg", "*"),
    PASSR("aten::_is_zerotensor", "*"),
    PASSR("aten::is_inference", "*"),
    PASSR("aten::_version", "*"),
    PASSR("aten::output_nr", "*"),
    PASSR("aten::requires_grad_", "*"),
    PASSR("aten::retain_grad", "*"),
    PASSR("aten::retains_grad", "*"),
    PASSR("aten::_assert_async", "*"),
    PASSR("aten::_assert_scalar", "*"),
    PASSR("aten::_functional_assert_async", "*"),
    PASSR("aten::_functional_assert_scalar", "*"),
    PASSR("aten::sym_constrain_range", "*"),
    PASSR("aten::sym_constrain_range_for_size", "*"),
    PASSR("aten::_amp_foreach_non_finite_check_and_unscale_", "*"),
    PASSR("aten::_amp_update_scale_", "*"),
    PASSR("aten::sym_*", "*"),
    PASSR("aten::_nested_*", "*"),
    /* ---- fused optimizers (FOREACH; _foreach_<op> needs no entry) ---- */
    /* adam(w)(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
     * state_steps, ...): not linear in the gradient. */
    FUSED("aten::_fused_adam_", NL, ADAM_OPERANDS, ADAM_RESULTS),
    FUSED("aten::_fused_adam", NL, ADAM_OPERANDS, ADAM_RESULTS),
    FUSED("aten::_fused_adamw_", NL, ADAM_OPERANDS, ADAM_RESULTS),
    FUSED("aten::_fused_adamw", NL, ADAM_OPERANDS, ADAM_RESULTS),
    /* sgd(self, grads, momentum_buffer_list, ...): linear. */
    FUSED("aten::_fused_sgd_", LI, B(0) | B(1) | B(2), B(0) | B(2)),
    FUSED("aten::_fused_sgd", LI, B(0) | B(1) | B(2), B(0) | B(2)),
    /* adagrad(self, grads, state_sums, state_steps, ...). */
    FUSED("aten::_fused_adagrad_", NL, B(0) | B(1) | B(2), B(0) | B(2)),
    FUSED("aten::_fused_adagrad", NL, B(0) | B(1) | B(2), B(0) | B(2)),
};

#define NRULES ((int)(sizeof rules / sizeof rules[0]))

/* Sorted index of exact-name entries (ids) and the list of prefix entries. */
static int32_t sorted_ids[NRULES];
static int nsorted;
static int32_t prefix_ids[NRULES];
static int nprefix;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static int is_prefix_rule(const cspmdi_rule_t *r)
{
    size_t n = strlen(r->name);
    return n > 0 && r->name[n - 1] == '*';
}

static int key_cmp(const char *n1, const char *o1, const char *n2, const char *o2)
{
    int c = strcmp(n1, n2);
    return c != 0 ? c : strcmp(o1, o2);
}

static int id_cmp(const void *a, const void *b)
{
    const cspmdi_rule_t *x = &rules[*(const int32_t *)a];
    const cspmdi_rule_t *y = &rules[*(const int32_t *)b];
    return key_cmp(x->name, x->overload, y->name, y->overload);
}

static void build_index(void)
{
    for (int32_t i = 1; i < NRULES; i++) {
        if (is_prefix_rule(&rules[i])) {
            prefix_ids[nprefix++] = i;
        } else {
            sorted_ids[nsorted++] = i;
        }
    }
    qsort(sorted_ids, (size_t)nsorted, sizeof sorted_ids[0], id_cmp);
}

static int32_t lookup(const char *name, const char *overload)
{
    int lo = 0, hi = nsorted - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const cspmdi_rule_t *r = &rules[sorted_ids[mid]];
        int c = key_cmp(name, overload, r->name, r->overload);
        if (c == 0)
            return sorted_ids[mid];
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

#define FOREACH_PREFIX "aten::_foreach_"

cspmd_rule_t cspmd_rule_find(const char *name, const char *overload)
{
    if (name == NULL)
        return 0;
    if (strncmp(name, FOREACH_PREFIX, sizeof FOREACH_PREFIX - 1) == 0) {
        /* "aten::_foreach_add_" -> "aten::add_" (any overload: the list
         * overloads' names, List/Scalar/ScalarList/Tensor, are not the
         * single op's). */
        char single[256];
        int len = snprintf(single, sizeof single, "aten::%s", name + sizeof FOREACH_PREFIX - 1);
        if (len < 0 || (size_t)len >= sizeof single)
            return CSPMDI_FOREACH_BIT; /* element rule 0: NONLINEAR */
        cspmd_rule_t el = cspmd_rule_find(single, "");
        return CSPMDI_FOREACH_BIT | el;
    }
    if (overload == NULL || strcmp(overload, "default") == 0)
        overload = "";
    pthread_once(&index_once, build_index);
    int32_t id = lookup(name, overload);
    if (id < 0)
        id = lookup(name, "*");
    if (id >= 0)
        return id;
    for (int i = 0; i < nprefix; i++) {
        const cspmdi_rule_t *r = &rules[prefix_ids[i]];
        size_t n = strlen(r->name) - 1;
        if (strncmp(name, r->name, n) == 0)
            return prefix_ids[i];
    }
    return 0;
}

static int is_foreach_id(cspmd_rule_t rule)
{
    return rule >= 0 && (rule & CSPMDI_FOREACH_BIT) && (rule & ~CSPMDI_FOREACH_BIT) < NRULES;
}

cspmd_rule_t cspmdi_rule_element(cspmd_rule_t rule)
{
    return is_foreach_id(rule) ? rule & ~CSPMDI_FOREACH_BIT : rule;
}

int cspmd_rule_takes_result(cspmd_rule_t rule, int arg)
{
    const cspmdi_rule_t *r = cspmdi_rule_get(cspmdi_rule_element(rule));
    if (r == NULL || r->result_pos == 0)
        return 1;
    return arg >= 0 && arg < 64 && ((r->result_pos >> arg) & 1u);
}

const cspmdi_rule_t *cspmdi_rule_get(cspmd_rule_t rule)
{
    if (rule < 0 || rule >= NRULES)
        return NULL;
    return &rules[rule];
}

const char *cspmdi_rule_short_name(const cspmdi_rule_t *r)
{
    const char *s = strstr(r->name, "::");
    return s != NULL ? s + 2 : r->name;
}

cspmd_rule_kind_t cspmd_rule_kind(cspmd_rule_t rule)
{
    if (is_foreach_id(rule))
        return CSPMD_KIND_FOREACH;
    const cspmdi_rule_t *r = cspmdi_rule_get(rule);
    return r != NULL ? (cspmd_rule_kind_t)r->kind : CSPMD_KIND_INFER;
}

int cspmd_rule_count(void)
{
    return NRULES;
}

cspmd_status_t cspmd_rule_info(cspmd_rule_t rule, cspmd_rule_info_t *out)
{
    const cspmdi_rule_t *r = cspmdi_rule_get(cspmdi_rule_element(rule));
    if (r == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rule_info: unknown rule %d", (int)rule);
    int decomp = (r->flags & CSPMDI_RF_DECOMP) != 0;
    out->name = r->name;
    out->overload = r->overload;
    out->linearity = cspmd_rule_name(rule);
    out->kind = cspmd_rule_kind(rule);
    out->operand_args = decomp ? (B(r->dec_a) | B(r->dec_b) | B(r->dec_self)) : r->operand_pos;
    out->coefficient_args = r->nonlin_pos;
    out->scalar_args = r->scalar_pos;
    out->zero_free_args = r->zero_free_pos;
    out->result_args = r->result_pos;
    out->product_a = decomp ? r->dec_a : -1;
    out->product_b = decomp ? r->dec_b : -1;
    out->sum_self = decomp ? r->dec_self : -1;
    return CSPMD_OK;
}

const char *cspmd_rule_name(cspmd_rule_t rule)
{
    const cspmdi_rule_t *r = cspmdi_rule_get(rule);
    if (is_foreach_id(rule))
        return "FOREACH";
    if (r == NULL)
        return "UNKNOWN";
    switch ((cspmd_rule_kind_t)r->kind) {
    case CSPMD_KIND_FOREACH: return "FOREACH";
    case CSPMD_KIND_PASSTHROUGH: return "PASSTHROUGH";
    case CSPMD_KIND_FACTORY: return "FACTORY";
    case CSPMD_KIND_FILL: return "FILL";
    case CSPMD_KIND_RANDOM_FILL: return "RANDOM_FILL";
    case CSPMD_KIND_INFER: break; /* named by its linearity below */
    }
    if (r->flags & CSPMDI_RF_DECOMP)
        return "DECOMPOSED";
    switch ((cspmdi_lin_t)r->lin) {
    case CSPMDI_LIN_LINEAR: return "LINEAR";
    case CSPMDI_LIN_MULTILINEAR: return "MULTILINEAR";
    case CSPMDI_LIN_NONLINEAR: return "NONLINEAR";
    }
    return "NONLINEAR";
}
