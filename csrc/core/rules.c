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
 * Rows name their arguments as torch's schemas spell them; the kernel binds
 * the names to an overload's positions at its first call (cspmd_rule_bind,
 * below; docs/dev/rule-arguments.md).
 *
 * Notable choices (deviations from the reference, which types Python-level
 * functions, are marked "dev"):
 *   - Backward ops are linear in their incoming gradient (named) and use
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
 *     treats Tensor.to as NONLINEAR, rejecting P.to(bf16)); a cast that
 *     truncates refuses P (CSPMD_OPERAND_TRUNCATED).
 *   - div with rounding_mode (div.Tensor_mode ...) is NONLINEAR (floor and
 *     trunc are not linear); view.dtype (bit reinterpretation) NONLINEAR.
 *   - Ops torch's derivatives.yaml marks auto_linear (upsample_*, pads,
 *     avg pools, pixel/channel shuffles, im2col/col2im, _fft_*, the slice
 *     scatters...) are LINEAR, their backward ops linear in the gradient.
 *     constant_pad_nd and the fills (masked_fill, index_fill, scatter.value)
 *     count their value as the weak scalar unless it is 0.  (dev: the
 *     reference rejects P through them.)  tests/python/
 *     test_linear_from_torch.py checks the list and binds every row's
 *     argument names against torch's schemas.
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cspmd.h"
#include "rules.h"

/* One row of the table.  Each role names schema arguments: names separated
 * by spaces, spellings of the same argument in different overloads by '|'
 * ("self other|scalar|scalars").  cspmd_rule_bind resolves the names
 * against an overload's argument list into the positional masks of the
 * row's bound record (cspmdi_rule_t), which inference reads. */
typedef struct rule_row {
    const char *name;     /* "aten::add"                                    */
    const char *overload; /* "Tensor"; "" = default; "*" = any overload     */
    uint8_t lin;          /* CSPMDI_LIN_*                                   */
    uint8_t kind;         /* cspmd_rule_kind_t                              */
    uint16_t flags;       /* CSPMDI_RF_*                                    */
    const char *scalars;  /* a SCALAR operand there is the weak _S          */
    const char *coefs;    /* P there is an error; for LINEAR rules fixed
                             coefficients                                   */
    const char *operands; /* "" = every argument is an operand              */
    const char *results;  /* "" = every written argument takes the result   */
    const char *zero_free; /* weak scalars that are no operand when zero    */
    const char *grad;     /* backward rows: the incoming gradient; every
                             other argument (operand) is a coefficient      */
    const char *dec_a, *dec_b, *dec_self; /* CSPMDI_RF_DECOMP               */
} rule_row_t;

enum { INFER = CSPMD_KIND_INFER, PASS = CSPMD_KIND_PASSTHROUGH, FACT = CSPMD_KIND_FACTORY,
       FILL = CSPMD_KIND_FILL, RFILL = CSPMD_KIND_RANDOM_FILL, EACH = CSPMD_KIND_FOREACH };
enum { NL = CSPMDI_LIN_NONLINEAR, LI = CSPMDI_LIN_LINEAR, ML = CSPMDI_LIN_MULTILINEAR };

#define ROW(n, o, l, k, f) .name = n, .overload = o, .lin = l, .kind = k, .flags = f

/* LINEAR with weak-scalar arguments sp. */
#define LIN(n, o, sp) {ROW(n, o, LI, INFER, 0), .scalars = sp}
/* LINEAR in the other operands, coefficients at arguments cf. */
#define LINC(n, o, sp, cf) {ROW(n, o, LI, INFER, 0), .scalars = sp, .coefs = cf}
/* LINEAR with weak-scalar arguments sp, of which zf are no operand when
 * their number is zero. */
#define LINZ(n, o, sp, zf) {ROW(n, o, LI, INFER, 0), .scalars = sp, .zero_free = zf}
/* LINC whose weak scalars zf are no operand when zero (filling with 0
 * keeps P). */
#define LINCZ(n, o, sp, cf, zf) \
    {ROW(n, o, LI, INFER, 0), .scalars = sp, .coefs = cf, .zero_free = zf}
/* MULTILINEAR. */
#define MUL(n, o) {ROW(n, o, ML, INFER, 0)}
/* MULTILINEAR with weak-scalar arguments and nonlinear arguments. */
#define MULN(n, o, sp, nl) {ROW(n, o, ML, INFER, 0), .scalars = sp, .coefs = nl}
/* NONLINEAR, listed for documentation (same as an unknown op). */
#define NON(n, o) {ROW(n, o, NL, INFER, 0)}
/* Backward op: linear in the gradient g, every other argument a
 * coefficient. */
#define BWD(n, g) {ROW(n, "*", ML, INFER, CSPMDI_RF_BACKWARD), .grad = g}
/* BWD whose operands are the arguments op only: nll_loss_backward's
 * total_weight is read by reduction='mean' alone, and global mode makes it
 * P where a batch-sharded reduction='sum' loss is P. */
#define BWDO(n, g, op) {ROW(n, "*", ML, INFER, CSPMDI_RF_BACKWARD), .grad = g, .operands = op}
/* Structural backward op with one tensor (the gradient): LINEAR. */
#define BWDL(n) {ROW(n, "*", LI, INFER, CSPMDI_RF_BACKWARD)}
/* LINEAR(MULTILINEAR(a, b), s), nonlinear arguments nl. */
#define DEC(n, a, b, s, nl) \
    {ROW(n, "*", LI, INFER, CSPMDI_RF_DECOMP), .coefs = nl, .dec_a = a, .dec_b = b, .dec_self = s}
/* Deterministic factory. */
#define FAC(n, o, f) {ROW(n, o, NL, FACT, (f) | CSPMDI_RF_DATA)}
/* A factory shaped like its operand (CSPMDI_RF_LIKE); its fill is zero
 * with the flag CSPMDI_RF_ZEROS or a zero Scalar at arguments zf. */
#define LIKE(n, z, zf) \
    {ROW(n, "*", NL, FACT, CSPMDI_RF_LIKE | CSPMDI_RF_DATA | (z)), .scalars = zf, .zero_free = zf}
#define FILLR(n, o) {ROW(n, o, NL, FILL, 0)}
#define RAND(n, o) {ROW(n, o, NL, RFILL, 0)}
/* A random factory (out of place): new data. */
#define RANDNEW(n, k) {ROW(n, "*", NL, k, CSPMDI_RF_DATA)}
#define PASSR(n, o) {ROW(n, o, NL, PASS, 0)}
/* LINEAR over the operands at arguments op only. */
#define SRC(n, o, op) {ROW(n, o, LI, INFER, 0), .operands = op}
/* A fused optimizer step, per parameter: linearity lin over the lists op;
 * the written lists res take the result. */
#define FUSED(n, lin, op, res) {ROW(n, "*", lin, EACH, 0), .operands = op, .results = res}
#define ADAM_OPERANDS "self grads exp_avgs exp_avg_sqs max_exp_avg_sqs"
#define ADAM_RESULTS "self exp_avgs exp_avg_sqs max_exp_avg_sqs"

static const rule_row_t rules[] = {
    /* 0: the default for unknown ops. */
    {ROW("", "", NL, INFER, 0)},

    /* ---- LINEAR: add / sub families (positions 0, 1) ---------------- */
    LIN("aten::add", "*", "self other|scalar|scalars"),
    LIN("aten::add_", "*", "self other|scalar|scalars"),
    LIN("aten::sub", "*", "self other|scalar|scalars"),
    LIN("aten::sub_", "*", "self other|scalar|scalars"),
    LIN("aten::subtract", "*", "self other"),
    LIN("aten::subtract_", "*", "self other"),
    LIN("aten::rsub", "*", "self other"),
    /* ---- LINEAR: negation ------------------------------------------- */
    LIN("aten::neg", "*", "self"),
    LIN("aten::neg_", "*", "self"),
    LIN("aten::negative", "*", "self"),
    LIN("aten::negative_", "*", "self"),
    LIN("aten::positive", "*", "self"),
    /* ---- LINEAR: copies, aliases, casts ------------------------------ */
    LIN("aten::clone", "*", "self"),
    LIN("aten::contiguous", "*", "self"),
    LIN("aten::detach", "*", "self"),
    LIN("aten::detach_", "*", "self"),
    LIN("aten::detach_copy", "*", "self"),
    LIN("aten::alias", "*", "self"),
    LIN("aten::alias_copy", "*", "self"),
    LIN("aten::lift", "*", "self"),
    {ROW("aten::_to_copy", "*", LI, INFER, CSPMDI_RF_CAST), .scalars = "self"},
    {ROW("aten::to", "*", LI, INFER, CSPMDI_RF_CAST), .scalars = "self"},
    LIN("aten::_pin_memory", "*", "self"),
    LIN("aten::pin_memory", "*", "self"),
    LIN("aten::_autocast_to_reduced_precision", "*", "self"),
    LIN("aten::_autocast_to_full_precision", "*", "self"),
    LIN("aten::conj", "*", "self"),
    LIN("aten::_conj", "*", "self"),
    LIN("aten::conj_physical", "*", "self"),
    LIN("aten::resolve_conj", "*", "self"),
    LIN("aten::resolve_neg", "*", "self"),
    LIN("aten::_fw_primal", "*", "self"),
    LIN("_c10d_functional::wait_tensor", "*", "tensor"),
    LIN("c10d_functional::wait_tensor", "*", "self"),
    /* funcol's wrap of a collective's result (an identity, autograd-aware). */
    LIN("_c10d_functional::_wrap_tensor_autograd", "*", "input"),
    /* copy_(self, src): the new type is src's alone. */
    {ROW("aten::copy_", "*", LI, INFER, CSPMDI_RF_CAST), .operands = "src"},
    {ROW("aten::copy", "*", LI, INFER, CSPMDI_RF_CAST), .operands = "src"},
    SRC("aten::_copy_from", "*", "self"),
    SRC("aten::_copy_from_and_resize", "*", "self"),
    /* ---- LINEAR: reductions ------------------------------------------ */
    LIN("aten::sum", "*", "self"),
    LIN("aten::mean", "*", "self"),
    LIN("aten::nansum", "*", "self"),
    LIN("aten::nanmean", "*", "self"),
    LIN("aten::cumsum", "*", "self"),
    LIN("aten::cumsum_", "*", "self"),
    LIN("aten::trace", "*", "self"),
    LIN("aten::sum_to_size", "*", "self"),
    /* ---- LINEAR: concatenation (list at arg 0) ------------------------ */
    LIN("aten::cat", "*", "tensors"),
    LIN("aten::concat", "*", "tensors"),
    LIN("aten::concatenate", "*", "tensors"),
    LIN("aten::stack", "*", "tensors"),
    LIN("aten::_stack", "*", "tensors"),
    LIN("aten::hstack", "*", "tensors"),
    LIN("aten::vstack", "*", "tensors"),
    LIN("aten::dstack", "*", "tensors"),
    LIN("aten::column_stack", "*", "tensors"),
    LIN("aten::row_stack", "*", "tensors"),
    LIN("aten::block_diag", "*", "tensors"),
    /* ---- LINEAR: structural / view ops ------------------------------ */
    LIN("aten::view", "*", "self"),
    NON("aten::view", "dtype"), /* bit reinterpretation */
    LIN("aten::_unsafe_view", "*", "self"),
    LIN("aten::view_copy", "*", "self"),
    LIN("aten::view_as", "*", "self"),
    LIN("aten::reshape", "*", "self"),
    LIN("aten::_reshape_alias", "*", "self"),
    LIN("aten::_reshape_copy", "*", "self"),
    LIN("aten::reshape_as", "*", "self"),
    LIN("aten::flatten", "*", "self"),
    LIN("aten::unflatten", "*", "self"),
    LIN("aten::ravel", "*", "self"),
    LIN("aten::expand", "*", "self"),
    LIN("aten::expand_copy", "*", "self"),
    LIN("aten::expand_as", "*", "self"),
    LIN("aten::broadcast_to", "*", "self"),
    LIN("aten::permute", "*", "self"),
    LIN("aten::permute_copy", "*", "self"),
    LIN("aten::transpose", "*", "self"),
    LIN("aten::transpose_", "*", "self"),
    LIN("aten::transpose_copy", "*", "self"),
    LIN("aten::t", "*", "self"),
    LIN("aten::t_", "*", "self"),
    LIN("aten::t_copy", "*", "self"),
    LIN("aten::adjoint", "*", "self"),
    LIN("aten::mT", "*", "self"),
    LIN("aten::mH", "*", "self"),
    LIN("aten::squeeze", "*", "self"),
    LIN("aten::squeeze_", "*", "self"),
    LIN("aten::squeeze_copy", "*", "self"),
    LIN("aten::unsqueeze", "*", "self"),
    LIN("aten::unsqueeze_", "*", "self"),
    LIN("aten::unsqueeze_copy", "*", "self"),
    LIN("aten::slice", "*", "self"),
    LIN("aten::slice_copy", "*", "self"),
    LIN("aten::select", "*", "self"),
    LIN("aten::select_copy", "*", "self"),
    LIN("aten::narrow", "*", "self"),
    LIN("aten::narrow_copy", "*", "self"),
    LIN("aten::split", "*", "self"),
    LIN("aten::split_copy", "*", "self"),
    LIN("aten::split_with_sizes", "*", "self"),
    LIN("aten::split_with_sizes_copy", "*", "self"),
    LIN("aten::unsafe_split", "*", "self"),
    LIN("aten::unsafe_split_with_sizes", "*", "self"),
    LIN("aten::tensor_split", "*", "self"),
    LIN("aten::chunk", "*", "self"),
    LIN("aten::unsafe_chunk", "*", "self"),
    LIN("aten::unbind", "*", "self"),
    LIN("aten::unbind_copy", "*", "self"),
    LIN("aten::flip", "*", "self"),
    LIN("aten::fliplr", "*", "self"),
    LIN("aten::flipud", "*", "self"),
    LIN("aten::roll", "*", "self"),
    LIN("aten::rot90", "*", "self"),
    LIN("aten::movedim", "*", "self"),
    LIN("aten::moveaxis", "*", "self"),
    LIN("aten::swapaxes", "*", "self"),
    LIN("aten::swapaxes_", "*", "self"),
    LIN("aten::swapdims", "*", "self"),
    LIN("aten::swapdims_", "*", "self"),
    LIN("aten::diagonal", "*", "self"),
    LIN("aten::diagonal_copy", "*", "self"),
    LIN("aten::diag", "*", "self"),
    LIN("aten::diag_embed", "*", "self"),
    LIN("aten::repeat", "*", "self"),
    LIN("aten::tile", "*", "self"),
    /* repeat_interleave(self, repeats, ...): linear in self; the repeats
     * tensor a coefficient.  repeat_interleave.Tensor(repeats) makes
     * indices from counts: NONLINEAR (the default). */
    LINC("aten::repeat_interleave", "self_Tensor", "self", "repeats"),
    LIN("aten::repeat_interleave", "self_int", "self"),
    LIN("aten::unfold", "*", "self"),
    LIN("aten::unfold_copy", "*", "self"),
    LIN("aten::as_strided", "*", "self"),
    LIN("aten::as_strided_", "*", "self"),
    LIN("aten::as_strided_copy", "*", "self"),
    LIN("aten::view_as_real", "*", "self"),
    LIN("aten::view_as_complex", "*", "self"),
    LIN("aten::real", "*", "self"),
    LIN("aten::imag", "*", "self"),
    /* complex(real, imag) = real + i imag: linear in both jointly, as add
     * (dev: the reference types torch.complex as non-linear). */
    LIN("aten::complex", "*", ""),
    /* polar(abs, angle) = abs * e^(i angle): linear in abs, the angle a
     * coefficient (dev: non-linear in the reference). */
    LINC("aten::polar", "*", "", "angle"),
    LIN("aten::_lazy_clone", "*", "self"),
    /* ---- LINEAR: resampling, padding, pooling, shuffles, FFTs --------
     * (torch's derivatives.yaml marks each auto_linear) */
    LIN("aten::upsample_nearest1d", "*", ""),
    LIN("aten::upsample_nearest2d", "*", ""),
    LIN("aten::upsample_nearest3d", "*", ""),
    LIN("aten::_upsample_nearest_exact1d", "*", ""),
    LIN("aten::_upsample_nearest_exact2d", "*", ""),
    LIN("aten::_upsample_nearest_exact3d", "*", ""),
    LIN("aten::upsample_linear1d", "*", ""),
    LIN("aten::upsample_bilinear2d", "*", ""),
    LIN("aten::_upsample_bilinear2d_aa", "*", ""),
    LIN("aten::upsample_bicubic2d", "*", ""),
    LIN("aten::_upsample_bicubic2d_aa", "*", ""),
    LIN("aten::_upsample_lanczos2d_aa", "*", ""), /* torch 2.15 */
    LIN("aten::upsample_trilinear3d", "*", ""),
    /* constant_pad_nd(self, pad, value): padding with 0 is linear; any
     * other value is the weak scalar, and P + scalar is an error. */
    LINZ("aten::constant_pad_nd", "*", "value", "value"),
    LIN("aten::reflection_pad1d", "*", ""),
    LIN("aten::reflection_pad2d", "*", ""),
    LIN("aten::reflection_pad3d", "*", ""),
    LIN("aten::replication_pad1d", "*", ""),
    LIN("aten::replication_pad2d", "*", ""),
    LIN("aten::replication_pad3d", "*", ""),
    LIN("aten::_adaptive_avg_pool2d", "*", ""),
    LIN("aten::_adaptive_avg_pool3d", "*", ""),
    LIN("aten::avg_pool2d", "*", ""),
    LIN("aten::avg_pool3d", "*", ""),
    /* max_unpool(self, indices, output_size): the indices a coefficient. */
    LINC("aten::max_unpool2d", "*", "", "indices"),
    LINC("aten::max_unpool3d", "*", "", "indices"),
    LIN("aten::col2im", "*", ""),
    LIN("aten::im2col", "*", ""),
    LIN("aten::pixel_shuffle", "*", ""),
    LIN("aten::pixel_unshuffle", "*", ""),
    LIN("aten::channel_shuffle", "*", ""),
    LIN("aten::native_channel_shuffle", "*", ""),
    LIN("aten::_fft_r2c", "*", ""),
    LIN("aten::_fft_c2r", "*", ""),
    LIN("aten::_fft_c2c", "*", ""),
    /* affine_grid_generator(theta, size, align_corners). */
    LIN("aten::affine_grid_generator", "*", ""),
    /* ---- LINEAR jointly in self and src: scatters of a slice ---------- */
    LIN("aten::slice_scatter", "*", ""),
    LIN("aten::select_scatter", "*", ""),
    LIN("aten::diagonal_scatter", "*", ""),
    LIN("aten::slice_inverse", "*", ""),
    LIN("aten::tril", "*", "self"),
    LIN("aten::tril_", "*", "self"),
    LIN("aten::triu", "*", "self"),
    LIN("aten::triu_", "*", "self"),
    /* ---- LINEAR with coefficients: indexing, masking, selection ------ */
    /* index_select(self, dim, index), gather(self, dim, index, ...). */
    LINC("aten::index_select", "*", "self", "index"),
    LINC("aten::gather", "*", "self", "index"),
    LINC("aten::take_along_dim", "*", "self", "indices"),
    LINC("aten::take", "*", "self", "index"),
    /* index.Tensor(self, Tensor?[] indices). */
    LINC("aten::index", "*", "self", "indices"),
    LINC("aten::_unsafe_index", "*", "self", "indices"),
    /* index_put(self, indices, values, accumulate). */
    LINC("aten::index_put", "*", "self values", "indices"),
    LINC("aten::index_put_", "*", "self values", "indices"),
    LINC("aten::_index_put_impl_", "*", "self values", "indices"),
    LINC("aten::_unsafe_index_put", "*", "self values", "indices"),
    /* index_add(self, dim, index, source, *, alpha). */
    LINC("aten::index_add", "*", "self source", "index"),
    LINC("aten::index_add_", "*", "self source", "index"),
    /* index_copy(self, dim, index, source). */
    LINC("aten::index_copy", "*", "self source", "index"),
    LINC("aten::index_copy_", "*", "self source", "index"),
    /* index_fill(self, dim, index, value); a fill value of 0 is no
     * operand (also for scatter's and masked_fill's value). */
    LINCZ("aten::index_fill", "*", "self value", "index", "value"),
    LINCZ("aten::index_fill_", "*", "self value", "index", "value"),
    /* scatter(self, dim, index, src|value), scatter_add(self, dim, index, src). */
    LINCZ("aten::scatter", "*", "self value|src", "index", "value|src"),
    LINCZ("aten::scatter_", "*", "self value|src", "index", "value|src"),
    /* scatter(..., reduce="multiply") multiplies self by src. */
    NON("aten::scatter", "reduce"),
    NON("aten::scatter", "value_reduce"),
    NON("aten::scatter_", "reduce"),
    NON("aten::scatter_", "value_reduce"),
    LINC("aten::scatter_add", "*", "self src", "index"),
    LINC("aten::scatter_add_", "*", "self src", "index"),
    /* masked_fill(self, mask, value), masked_scatter(self, mask, source),
     * masked_select(self, mask). */
    LINCZ("aten::masked_fill", "*", "self value", "mask", "value"),
    LINCZ("aten::masked_fill_", "*", "self value", "mask", "value"),
    LINC("aten::masked_scatter", "*", "self source", "mask"),
    LINC("aten::masked_scatter_", "*", "self source", "mask"),
    LINC("aten::masked_select", "*", "self", "mask"),
    /* where.self(condition, self, other). */
    /* A zero in a value position keeps P (masking with zero is linear). */
    LINCZ("aten::where", "*", "self other", "condition", "self other"),
    NON("aten::where", ""), /* where(condition): the indices of nonzeros */
    /* lerp(self, end, weight) = (1 - weight) * self + weight * end:
     * linear in (self, end), the weight a coefficient. */
    LINC("aten::lerp", "*", "", "weight|weights"),
    LINC("aten::lerp_", "*", "", "weight|weights"),
    /* embedding(weight, indices, ...): linear in the weight. */
    LINC("aten::embedding", "*", "", "indices"),
    /* ---- MULTILINEAR: division (divisor at arg 1 is nonlinear) -------- */
    MULN("aten::div", "*", "self other|scalar|scalars", "other|scalar|scalars"),
    MULN("aten::div_", "*", "self other|scalar|scalars", "other|scalar|scalars"),
    MULN("aten::divide", "*", "self other", "other"),
    MULN("aten::divide_", "*", "self other", "other"),
    MULN("aten::true_divide", "*", "self other", "other"),
    MULN("aten::true_divide_", "*", "self other", "other"),
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
    DEC("aten::addmm", "mat1", "mat2", "self", ""),
    DEC("aten::addmm_", "mat1", "mat2", "self", ""),
    DEC("aten::addmv", "mat", "vec", "self", ""),
    DEC("aten::addmv_", "mat", "vec", "self", ""),
    DEC("aten::addbmm", "batch1", "batch2", "self", ""),
    DEC("aten::addbmm_", "batch1", "batch2", "self", ""),
    DEC("aten::baddbmm", "batch1", "batch2", "self", ""),
    DEC("aten::baddbmm_", "batch1", "batch2", "self", ""),
    DEC("aten::addr", "vec1", "vec2", "self", ""),
    DEC("aten::addr_", "vec1", "vec2", "self", ""),
    /* addcmul(self, t1, t2, value) = self + value * t1 * t2. */
    DEC("aten::addcmul", "tensor1", "tensor2", "self", ""),
    DEC("aten::addcmul_", "tensor1", "tensor2", "self", ""),
    /* addcdiv(self, t1, t2, value) = self + value * t1 / t2. */
    DEC("aten::addcdiv", "tensor1", "tensor2", "self", "tensor2"),
    DEC("aten::addcdiv_", "tensor1", "tensor2", "self", "tensor2"),
    /* linear(input, weight, bias?) and convolution(input, weight, bias?, ...)
     * when they arrive whole (normally decomposed). */
    DEC("aten::linear", "input", "weight", "bias", ""),
    DEC("aten::convolution", "input", "weight", "bias", ""),
    DEC("aten::_convolution", "input", "weight", "bias", ""),
    DEC("aten::conv1d", "input", "weight", "bias", ""),
    DEC("aten::conv2d", "input", "weight", "bias", ""),
    DEC("aten::conv3d", "input", "weight", "bias", ""),
    /* ---- backward ops: linear in grad_output (arg 0) ------------------ */
    BWD("aten::embedding_dense_backward", "grad_output"),
    BWD("aten::embedding_backward", "grad"),
    BWD("aten::embedding_sparse_backward", "grad"),
    BWDO("aten::nll_loss_backward", "grad_output", "grad_output self target weight"),
    BWDO("aten::nll_loss2d_backward", "grad_output", "grad_output self target weight"),
    BWD("aten::_softmax_backward_data", "grad_output"),
    BWD("aten::_log_softmax_backward_data", "grad_output"),
    BWD("aten::native_layer_norm_backward", "grad_out"),
    BWD("aten::native_group_norm_backward", "grad_out"),
    BWD("aten::native_batch_norm_backward", "grad_out"),
    BWD("aten::_fused_rms_norm_backward", "grad_out"),
    BWD("aten::gelu_backward", "grad_output"),
    BWD("aten::silu_backward", "grad_output"),
    BWD("aten::threshold_backward", "grad_output"),
    BWD("aten::tanh_backward", "grad_output"),
    BWD("aten::sigmoid_backward", "grad_output"),
    BWD("aten::softplus_backward", "grad_output"),
    BWD("aten::hardtanh_backward", "grad_output"),
    BWD("aten::hardswish_backward", "grad_output"),
    BWD("aten::hardsigmoid_backward", "grad_output"),
    BWD("aten::elu_backward", "grad_output"),
    BWD("aten::leaky_relu_backward", "grad_output"),
    BWD("aten::mish_backward", "grad_output"),
    BWD("aten::log_sigmoid_backward", "grad_output"),
    BWD("aten::glu_backward", "grad_output"),
    BWD("aten::mse_loss_backward", "grad_output"),
    BWD("aten::smooth_l1_loss_backward", "grad_output"),
    BWD("aten::huber_loss_backward", "grad_output"),
    BWD("aten::binary_cross_entropy_backward", "grad_output"),
    BWD("aten::native_dropout_backward", "grad_output"),
    BWD("aten::_masked_softmax_backward", "grad_output"),
    BWD("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "grad_out"),
    BWD("aten::_scaled_dot_product_efficient_attention_backward", "grad_out_"),
    BWD("aten::_scaled_dot_product_flash_attention_backward", "grad_out"),
    BWD("aten::_scaled_dot_product_cudnn_attention_backward", "grad_out"),
    BWD("aten::_scaled_dot_product_fused_attention_overrideable_backward", "grad_out"),
    BWD("aten::_efficient_attention_backward", "grad_out_"),
    BWD("aten::_flash_attention_backward", "grad_out"),
    BWD("aten::convolution_backward", "grad_output"),
    BWD("aten::max_pool2d_with_indices_backward", "grad_output"),
    BWD("aten::max_pool3d_with_indices_backward", "grad_output"),
    BWD("aten::avg_pool2d_backward", "grad_output"),
    BWD("aten::avg_pool3d_backward", "grad_output"),
    BWD("aten::_adaptive_avg_pool2d_backward", "grad_output"),
    BWD("aten::_adaptive_avg_pool3d_backward", "grad_output"),
    BWD("aten::index_select_backward", "grad"),
    BWD("aten::gather_backward", "grad"),
    BWD("aten::masked_select_backward", "grad"),
    BWD("aten::trace_backward", "grad"),
    BWD("aten::_prelu_kernel_backward", "grad_output"),
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
    BWDL("aten::_upsample_lanczos2d_aa_backward"), /* torch 2.15 */
    BWDL("aten::upsample_trilinear3d_backward"),
    BWDL("aten::affine_grid_generator_backward"),
    /* (grad_output, self, ...): self gives the shape, or the max's place. */
    BWD("aten::reflection_pad1d_backward", "grad_output"),
    BWD("aten::reflection_pad2d_backward", "grad_output"),
    BWD("aten::reflection_pad3d_backward", "grad_output"),
    BWD("aten::replication_pad1d_backward", "grad_output"),
    BWD("aten::replication_pad2d_backward", "grad_output"),
    BWD("aten::replication_pad3d_backward", "grad_output"),
    BWD("aten::max_pool2d_backward", "grad_output"),
    BWD("aten::adaptive_max_pool2d_backward", "grad_output"),
    BWD("aten::adaptive_max_pool3d_backward", "grad_output"),
    BWD("aten::fractional_max_pool2d_backward", "grad_output"),
    BWD("aten::fractional_max_pool3d_backward", "grad_output"),
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
    {ROW("aten::empty", "*", NL, INFER, CSPMDI_RF_DATA)},        /* no operands -> {} */
    {ROW("aten::empty_strided", "*", NL, INFER, CSPMDI_RF_DATA)},
    /* Uninitialized buffers take the operand's type, P included: their
     * contents are only ever overwritten (autograd's clone_obey_contract
     * does new_empty_strided + copy_ on gradients, which may be P). */
    {ROW("aten::empty_like", "*", LI, INFER, CSPMDI_RF_DATA)},
    LIN("aten::new_empty", "*", ""),
    LIN("aten::new_empty_strided", "*", ""),
    /* Random factories arrive whole at cspmd's key: fresh data, {} */
    RANDNEW("aten::randn", RFILL),
    RANDNEW("aten::rand", RFILL),
    RANDNEW("aten::randint", RFILL),
    RANDNEW("aten::randperm", RFILL),
    RANDNEW("aten::randn_like", INFER),
    RANDNEW("aten::rand_like", INFER),
    RANDNEW("aten::randint_like", INFER),
    /* ---- deterministic factories -------------------------- */
    FAC("aten::zeros", "*", 0),
    FAC("aten::ones", "*", 0),
    FAC("aten::full", "*", 0),
    FAC("aten::arange", "*", 0),
    FAC("aten::linspace", "*", 0),
    FAC("aten::logspace", "*", 0),
    FAC("aten::eye", "*", 0),
    {ROW("aten::scalar_tensor", "*", NL, FACT, CSPMDI_RF_NUMBER), .scalars = "s"},
    /* A typed tensor passed through lift_fresh keeps its type (LINEAR). */
    {ROW("aten::lift_fresh", "*", LI, FACT, CSPMDI_RF_FRESH | CSPMDI_RF_DATA)},
    {ROW("aten::lift_fresh_copy", "*", LI, FACT, CSPMDI_RF_FRESH | CSPMDI_RF_DATA)},
    /* *_like: the operand's type; a P operand gives P for a zero fill and
     * R for any other (dev: the reference rejects P through them). */
    LIKE("aten::zeros_like", CSPMDI_RF_ZEROS, ""),
    LIKE("aten::ones_like", 0, ""),
    LIKE("aten::full_like", 0, "fill_value"),
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
    FUSED("aten::_fused_sgd_", LI, "self grads momentum_buffer_list", "self momentum_buffer_list"),
    FUSED("aten::_fused_sgd", LI, "self grads momentum_buffer_list", "self momentum_buffer_list"),
    /* adagrad(self, grads, state_sums, state_steps, ...). */
    FUSED("aten::_fused_adagrad_", NL, "self grads state_sums", "self state_sums"),
    FUSED("aten::_fused_adagrad", NL, "self grads state_sums", "self state_sums"),
};

#define NRULES ((int)(sizeof rules / sizeof rules[0]))

/* Sorted index of exact-name entries (ids) and the list of prefix entries. */
static int32_t sorted_ids[NRULES];
static int nsorted;
static int32_t prefix_ids[NRULES];
static int nprefix;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

/* The bound record of each row, beside the const table: inference reads
 * it once state is BOUND (published with release, read with acquire).  A
 * row that names no argument is bound from the start; the others by
 * cspmd_rule_bind, under bind_mutex. */
enum { UNBOUND = 0, BOUND = 1 };
typedef struct bound_row {
    cspmdi_rule_t r;
    int grad;             /* the gradient's position (backward rows), or -1 */
    char *first;          /* the overload that bound it first ("aten::add.Tensor") */
    _Atomic int state;
} bound_row_t;
static bound_row_t bound[NRULES];
static pthread_mutex_t bind_mutex = PTHREAD_MUTEX_INITIALIZER;

static int named(const char *role)
{
    return role != NULL && role[0] != '\0';
}

static int row_names_arguments(const rule_row_t *w)
{
    return named(w->scalars) || named(w->coefs) || named(w->operands) || named(w->results) ||
           named(w->zero_free) || named(w->grad) || named(w->dec_a) || named(w->dec_b) ||
           named(w->dec_self);
}

static int is_prefix_rule(const rule_row_t *r)
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
    const rule_row_t *x = &rules[*(const int32_t *)a];
    const rule_row_t *y = &rules[*(const int32_t *)b];
    return key_cmp(x->name, x->overload, y->name, y->overload);
}

static void build_index(void)
{
    for (int32_t i = 0; i < NRULES; i++) {
        const rule_row_t *w = &rules[i];
        cspmdi_rule_t *r = &bound[i].r;
        r->name = w->name;
        r->overload = w->overload;
        r->lin = w->lin;
        r->kind = w->kind;
        r->flags = w->flags;
        r->dec_a = r->dec_b = r->dec_self = -1;
        bound[i].grad = -1;
        atomic_store_explicit(&bound[i].state, row_names_arguments(w) ? UNBOUND : BOUND,
                              memory_order_release);
        if (i == 0)
            continue;
        if (is_prefix_rule(w)) {
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
        const rule_row_t *r = &rules[sorted_ids[mid]];
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
        const rule_row_t *r = &rules[prefix_ids[i]];
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

/* The const row of an id (a FOREACH id: its element rule's), or NULL. */
static const rule_row_t *row_of(cspmd_rule_t rule)
{
    rule = cspmdi_rule_element(rule);
    return rule >= 0 && rule < NRULES ? &rules[rule] : NULL;
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
    pthread_once(&index_once, build_index);
    if (atomic_load_explicit(&bound[rule].state, memory_order_acquire) != BOUND)
        return NULL;
    return &bound[rule].r;
}

cspmd_status_t cspmdi_rule_missing(cspmd_rule_t rule, const char *who)
{
    if (rule < 0 || rule >= NRULES)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: unknown rule id %d", who, (int)rule);
    return cspmd_error_set(CSPMD_ERR_MISUSE,
                           "%s: the rule of %s.%s names its arguments, and no overload's schema "
                           "has been bound to it (cspmd_rule_bind)",
                           who, rules[rule].name, rules[rule].overload);
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
    const rule_row_t *w = row_of(rule);
    return w != NULL ? (cspmd_rule_kind_t)w->kind : CSPMD_KIND_INFER;
}

int cspmd_rule_result_number(cspmd_rule_t rule, const cspmd_operand_t *ops, int n)
{
    const cspmdi_rule_t *r = cspmdi_rule_get(rule);
    if (r == NULL || !(r->flags & CSPMDI_RF_NUMBER) || is_foreach_id(rule))
        return 0;
    int number = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].kind != CSPMD_OPERAND_SCALAR)
            return 0; /* a typed Scalar or a tensor: the result is typed data */
        if (ops[i].arg < 64 && ((r->scalar_pos >> ops[i].arg) & 1u))
            number = (ops[i].flags & CSPMD_OPERAND_ZERO) ? CSPMD_NUMBER_ZERO : CSPMD_NUMBER;
    }
    return number;
}

int cspmd_rule_casts(cspmd_rule_t rule)
{
    const cspmdi_rule_t *r = cspmdi_rule_get(rule);
    return r != NULL && !is_foreach_id(rule) && (r->flags & CSPMDI_RF_CAST) != 0;
}

int cspmd_cast_truncates(cspmd_value_kind_t from, cspmd_value_kind_t to)
{
    if (to == CSPMD_VALUES_BOOL)
        return from != CSPMD_VALUES_BOOL;
    return to == CSPMD_VALUES_INTEGER && from == CSPMD_VALUES_REAL;
}

int cspmd_rule_result_data(cspmd_rule_t rule, const cspmd_operand_t *ops, int n)
{
    const cspmdi_rule_t *r = cspmdi_rule_get(rule);
    if (r == NULL || is_foreach_id(rule) || (r->flags & CSPMDI_RF_NUMBER))
        return 0;
    if (r->flags & CSPMDI_RF_DATA)
        return 1;
    int data = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].kind == CSPMD_OPERAND_TYPED)
            return 0;
        if (ops[i].kind != CSPMD_OPERAND_TENSOR)
            continue; /* a number */
        if (ops[i].flags & CSPMD_OPERAND_DATA)
            data = 1;
        else if (ops[i].type != CSPMD_TYPE_UNTYPED)
            return 0; /* a value the program computed */
    }
    return data;
}

int cspmd_rule_count(void)
{
    return NRULES;
}

/* ---- binding argument names to an overload's positions --------------- */

typedef struct schema {
    const char *op; /* the overload being bound, for messages */
    const char *const *names;
    const uint8_t *is_tensor;
    size_t n;
} schema_t;

/* The argument one name of a role denotes (len bytes of spellings split by
 * '|'): its position, -1 if no spelling is an argument, -2 if two
 * arguments are. */
static int name_position(const schema_t *s, const char *name, size_t len)
{
    int found = -1;
    const char *end = name + len;
    for (const char *p = name; p < end;) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        size_t l = bar != NULL ? (size_t)(bar - p) : (size_t)(end - p);
        for (size_t i = 0; i < s->n; i++) {
            if (strlen(s->names[i]) != l || memcmp(s->names[i], p, l) != 0)
                continue;
            if (found >= 0 && found != (int)i)
                return -2;
            found = (int)i;
        }
        p += l + 1;
    }
    return found;
}

/* The schema's argument names, "self, other, alpha" (malloc'd; NULL when
 * out of memory). */
static char *argument_list(const schema_t *s)
{
    size_t len = 1;
    for (size_t i = 0; i < s->n; i++)
        len += strlen(s->names[i]) + 2;
    char *text = malloc(len), *q = text;
    if (text == NULL)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        q += sprintf(q, "%s%s", i ? ", " : "", s->names[i]);
    *q = '\0';
    return text;
}

static cspmd_status_t defect(const schema_t *s, const rule_row_t *w, const char *role,
                             const char *name, size_t len, const char *what, int pos)
{
    char *args = argument_list(s), at[32] = "";
    if (pos >= 0)
        snprintf(at, sizeof at, "argument %d; ", pos);
    cspmd_status_t st = cspmd_error_set(
        CSPMD_ERR_RUNTIME,
        "%s: cspmd's rule table is wrong for this op: its row %s.%s names '%.*s' as %s, %s "
        "(%sthe overload's arguments: %s)",
        s->op, w->name, w->overload, (int)len, name, role, what, at, args ? args : "?");
    free(args);
    return st;
}

/* Resolve the names of one role into a mask; with need_tensor each must be
 * a tensor argument.  *single (if not NULL) is the position of a role
 * that names exactly one argument. */
static cspmd_status_t resolve(const schema_t *s, const rule_row_t *w, const char *role,
                              const char *spec, int need_tensor, uint64_t *mask, int *single)
{
    *mask = 0;
    int count = 0, last = -1;
    for (const char *p = named(spec) ? spec : ""; *p != '\0';) {
        size_t len = strcspn(p, " ");
        if (len == 0) {
            p++;
            continue;
        }
        int pos = name_position(s, p, len);
        if (pos == -1)
            return defect(s, w, role, p, len, "which this overload does not have", -1);
        if (pos == -2)
            return defect(s, w, role, p, len, "whose spellings are two different arguments here",
                          -1);
        if (pos >= 64)
            return defect(s, w, role, p, len,
                          "past the 64 arguments a rule can describe, so this op cannot be "
                          "checked", pos);
        if (need_tensor && !s->is_tensor[pos])
            return defect(s, w, role, p, len, "which is no tensor argument here", pos);
        *mask |= UINT64_C(1) << pos;
        last = pos;
        count++;
        p += len;
    }
    if (single != NULL) {
        if (named(spec) && count != 1)
            return defect(s, w, role, spec, strlen(spec), "which must be one argument", -1);
        *single = last;
    }
    return CSPMD_OK;
}

/* The bound record of row w for schema s into r (metadata already there)
 * and the gradient's position into *grad. */
static cspmd_status_t bind_row(const schema_t *s, const rule_row_t *w, cspmdi_rule_t *r,
                               int *grad)
{
    uint64_t unused = 0;
    int a = -1, b = -1, self = -1;
    cspmd_status_t st;
    if ((st = resolve(s, w, "a weak scalar", w->scalars, 0, &r->scalar_pos, NULL)) != CSPMD_OK ||
        (st = resolve(s, w, "a coefficient", w->coefs, 0, &r->nonlin_pos, NULL)) != CSPMD_OK ||
        (st = resolve(s, w, "an operand", w->operands, 1, &r->operand_pos, NULL)) != CSPMD_OK ||
        (st = resolve(s, w, "a result", w->results, 1, &r->result_pos, NULL)) != CSPMD_OK ||
        (st = resolve(s, w, "a zero-free scalar", w->zero_free, 0, &r->zero_free_pos, NULL)) !=
            CSPMD_OK ||
        (st = resolve(s, w, "the gradient", w->grad, 1, &unused, grad)) != CSPMD_OK ||
        (st = resolve(s, w, "product operand a", w->dec_a, 1, &unused, &a)) != CSPMD_OK ||
        (st = resolve(s, w, "product operand b", w->dec_b, 1, &unused, &b)) != CSPMD_OK ||
        (st = resolve(s, w, "the summand", w->dec_self, 1, &unused, &self)) != CSPMD_OK)
        return st;
    if (r->zero_free_pos & ~r->scalar_pos)
        return defect(s, w, "a zero-free scalar", w->zero_free, strlen(w->zero_free),
                      "which is no weak scalar of the row", -1);
    if (*grad >= 0) /* every other argument (operand) is a coefficient */
        r->nonlin_pos |= (r->operand_pos ? r->operand_pos : ~UINT64_C(0)) &
                         ~(UINT64_C(1) << *grad);
    r->dec_a = (int8_t)a;
    r->dec_b = (int8_t)b;
    r->dec_self = (int8_t)self;
    return CSPMD_OK;
}

static int same_binding(const cspmdi_rule_t *x, int xg, const cspmdi_rule_t *y, int yg)
{
    return x->scalar_pos == y->scalar_pos && x->nonlin_pos == y->nonlin_pos &&
           x->operand_pos == y->operand_pos && x->result_pos == y->result_pos &&
           x->zero_free_pos == y->zero_free_pos && x->dec_a == y->dec_a &&
           x->dec_b == y->dec_b && x->dec_self == y->dec_self && xg == yg;
}

/* Why schema s binds row w (bound first by b) differently: the first name
 * whose position here is not one it had there. */
static cspmd_status_t disagreement(const schema_t *s, const rule_row_t *w, const bound_row_t *b)
{
    const struct {
        const char *role, *spec;
        uint64_t first;
    } roles[] = {
        {"a weak scalar", w->scalars, b->r.scalar_pos},
        {"a coefficient", w->coefs, b->r.nonlin_pos},
        {"an operand", w->operands, b->r.operand_pos},
        {"a result", w->results, b->r.result_pos},
        {"a zero-free scalar", w->zero_free, b->r.zero_free_pos},
        {"the gradient", w->grad, b->grad >= 0 ? UINT64_C(1) << b->grad : 0},
        {"product operand a", w->dec_a, b->r.dec_a >= 0 ? UINT64_C(1) << b->r.dec_a : 0},
        {"product operand b", w->dec_b, b->r.dec_b >= 0 ? UINT64_C(1) << b->r.dec_b : 0},
        {"the summand", w->dec_self, b->r.dec_self >= 0 ? UINT64_C(1) << b->r.dec_self : 0},
    };
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) {
        for (const char *p = named(roles[k].spec) ? roles[k].spec : ""; *p != '\0';) {
            size_t len = strcspn(p, " ");
            int pos = len ? name_position(s, p, len) : -1;
            if (pos >= 0 && pos < 64 && !((roles[k].first >> pos) & 1u)) {
                char what[160];
                snprintf(what, sizeof what, "at another position than in %s, bound first",
                         b->first);
                return defect(s, w, roles[k].role, p, len, what, pos);
            }
            p += len ? len : 1;
        }
    }
    return cspmd_error_set(CSPMD_ERR_RUNTIME,
                           "%s: cspmd's rule table is wrong for this op: its row %s.%s binds "
                           "this overload's arguments differently than %s's, bound first",
                           s->op, w->name, w->overload, b->first);
}

cspmd_status_t cspmd_rule_bind(cspmd_rule_t rule, const char *op, const char *const *arg_names,
                               const uint8_t *arg_is_tensor, size_t n_args)
{
    cspmd_rule_t el = cspmdi_rule_element(rule);
    if (el < 0 || el >= NRULES)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rule_bind: unknown rule id %d",
                               (int)rule);
    if (op == NULL || (n_args > 0 && (arg_names == NULL || arg_is_tensor == NULL)))
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_rule_bind: NULL op name or argument list");
    for (size_t i = 0; i < n_args; i++)
        if (arg_names[i] == NULL)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_rule_bind: %s: argument %zu has no name", op, i);
    pthread_once(&index_once, build_index);
    const rule_row_t *w = &rules[el];
    if (!row_names_arguments(w))
        return CSPMD_OK;
    schema_t s = {op, arg_names, arg_is_tensor, n_args};
    cspmdi_rule_t r = {w->name, w->overload, w->lin, w->kind, w->flags, -1, -1, -1, 0, 0, 0, 0, 0};
    int grad = -1;
    cspmd_status_t st = bind_row(&s, w, &r, &grad);
    if (st != CSPMD_OK)
        return st;
    bound_row_t *b = &bound[el];
    pthread_mutex_lock(&bind_mutex);
    if (atomic_load_explicit(&b->state, memory_order_relaxed) == BOUND) {
        if (!same_binding(&b->r, b->grad, &r, grad))
            st = disagreement(&s, w, b);
    } else {
        size_t len = strlen(op) + 1;
        b->first = malloc(len);
        if (b->first == NULL) {
            st = cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd_rule_bind: out of memory");
        } else {
            memcpy(b->first, op, len);
            b->r = r;
            b->grad = grad;
            atomic_store_explicit(&b->state, BOUND, memory_order_release);
        }
    }
    pthread_mutex_unlock(&bind_mutex);
    return st;
}

int cspmd_rule_bound(cspmd_rule_t rule)
{
    return cspmdi_rule_get(cspmdi_rule_element(rule)) != NULL;
}

cspmd_status_t cspmd_rule_info(cspmd_rule_t rule, cspmd_rule_info_t *out)
{
    const rule_row_t *w = row_of(rule);
    if (w == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rule_info: unknown rule %d", (int)rule);
    static const cspmdi_rule_t unbound = {"", "", 0, 0, 0, -1, -1, -1, 0, 0, 0, 0, 0};
    const cspmdi_rule_t *r = cspmdi_rule_get(cspmdi_rule_element(rule));
    out->bound = r != NULL;
    if (r == NULL)
        r = &unbound;
    int decomp = (w->flags & CSPMDI_RF_DECOMP) != 0 && r->dec_a >= 0;
    out->name = w->name;
    out->overload = w->overload;
    out->linearity = cspmd_rule_name(rule);
    out->kind = cspmd_rule_kind(rule);
    out->operand_args = decomp ? ((UINT64_C(1) << r->dec_a) | (UINT64_C(1) << r->dec_b) |
                                  (r->dec_self >= 0 ? UINT64_C(1) << r->dec_self : 0))
                               : r->operand_pos;
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
    const rule_row_t *r = row_of(rule);
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
