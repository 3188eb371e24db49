/* The C suites' stand-in for torch's schemas: one overload's argument list
 * for each op rule the suites use that names its arguments, bound with
 * cspmd_rule_bind as the kernel binds an operator at its first call
 * (names as torch 2.11 spells them; ":T" marks a tensor argument). */
#ifndef CSPMD_TEST_RULE_SCHEMAS_H
#define CSPMD_TEST_RULE_SCHEMAS_H

#include <stdio.h>
#include <string.h>

#include "cspmd.h"
#include "suites.h"

typedef struct h_schema {
    const char *name, *overload, *args;
} h_schema_t;

static const h_schema_t h_schemas[] = {
    {"_c10d_functional::wait_tensor", "", "tensor:T"},
    {"aten::_foreach_add_", "List", "self:T other:T alpha"},
    {"aten::_fused_adagrad_", "",
     "self:T grads:T state_sums:T state_steps:T lr lr_decay weight_decay eps maximize "
     "grad_scale:T found_inf:T"},
    {"aten::_fused_adam", "",
     "self:T grads:T exp_avgs:T exp_avg_sqs:T max_exp_avg_sqs:T state_steps:T lr "
     "beta1 beta2 weight_decay eps amsgrad maximize grad_scale:T found_inf:T"},
    {"aten::_fused_adam_", "",
     "self:T grads:T exp_avgs:T exp_avg_sqs:T max_exp_avg_sqs:T state_steps:T lr "
     "beta1 beta2 weight_decay eps amsgrad maximize grad_scale:T found_inf:T"},
    {"aten::_fused_adamw_", "",
     "self:T grads:T exp_avgs:T exp_avg_sqs:T max_exp_avg_sqs:T state_steps:T lr "
     "beta1 beta2 weight_decay eps amsgrad maximize grad_scale:T found_inf:T"},
    {"aten::_fused_rms_norm_backward", "",
     "grad_out:T input:T normalized_shape rstd:T weight:T output_mask"},
    {"aten::_fused_sgd_", "",
     "self:T grads:T momentum_buffer_list:T weight_decay momentum lr dampening "
     "nesterov maximize is_first_step grad_scale:T found_inf:T"},
    {"aten::_log_softmax_backward_data", "", "grad_output:T output:T dim input_dtype"},
    {"aten::_scaled_dot_product_cudnn_attention_backward", "",
     "grad_out:T query:T key:T value:T out:T logsumexp:T philox_seed:T "
     "philox_offset:T attn_bias:T cum_seq_q:T cum_seq_k:T max_q max_k dropout_p "
     "is_causal scale"},
    {"aten::_scaled_dot_product_efficient_attention_backward", "",
     "grad_out_:T query:T key:T value:T attn_bias:T out:T logsumexp:T philox_seed:T "
     "philox_offset:T dropout_p grad_input_mask is_causal scale"},
    {"aten::_scaled_dot_product_flash_attention_backward", "",
     "grad_out:T query:T key:T value:T out:T logsumexp:T cum_seq_q:T cum_seq_k:T "
     "max_q max_k dropout_p is_causal philox_seed:T philox_offset:T scale"},
    {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", "",
     "grad_out:T query:T key:T value:T out:T logsumexp:T dropout_p is_causal "
     "attn_mask:T scale"},
    {"aten::_softmax_backward_data", "", "grad_output:T output:T dim input_dtype"},
    {"aten::_to_copy", "", "self:T dtype layout device pin_memory non_blocking memory_format"},
    {"aten::_unsafe_view", "", "self:T size"},
    {"aten::adaptive_max_pool2d_backward", "", "grad_output:T self:T indices:T"},
    {"aten::add", "Tensor", "self:T other:T alpha"},
    {"aten::add_", "Tensor", "self:T other:T alpha"},
    {"aten::addbmm", "", "self:T batch1:T batch2:T beta alpha"},
    {"aten::addcdiv_", "", "self:T tensor1:T tensor2:T value"},
    {"aten::addcmul_", "", "self:T tensor1:T tensor2:T value"},
    {"aten::addmm", "", "self:T mat1:T mat2:T beta alpha"},
    {"aten::addmv", "", "self:T mat:T vec:T beta alpha"},
    {"aten::addr", "", "self:T vec1:T vec2:T beta alpha"},
    {"aten::alias", "", "self:T"},
    {"aten::as_strided", "", "self:T size stride storage_offset"},
    {"aten::baddbmm", "", "self:T batch1:T batch2:T beta alpha"},
    {"aten::cat", "", "tensors:T dim"},
    {"aten::chunk", "", "self:T chunks dim"},
    {"aten::clone", "", "self:T memory_format"},
    {"aten::constant_pad_nd", "", "self:T pad value"},
    {"aten::copy_", "", "self:T src:T non_blocking"},
    {"aten::detach", "", "self:T"},
    {"aten::div", "Tensor", "self:T other:T"},
    {"aten::div_", "Tensor", "self:T other:T"},
    {"aten::embedding", "", "weight:T indices:T padding_idx scale_grad_by_freq sparse"},
    {"aten::embedding_dense_backward", "",
     "grad_output:T indices:T num_weights padding_idx scale_grad_by_freq"},
    {"aten::expand", "", "self:T size implicit"},
    {"aten::flip", "", "self:T dims"},
    {"aten::full_like", "", "self:T fill_value dtype layout device pin_memory memory_format"},
    {"aten::gather", "", "self:T dim index:T sparse_grad"},
    {"aten::gelu_backward", "", "grad_output:T self:T approximate"},
    {"aten::index", "Tensor", "self:T indices:T"},
    {"aten::index_add_", "", "self:T dim index:T source:T alpha"},
    {"aten::index_fill", "Dimname_Scalar", "self:T dim index:T value"},
    {"aten::index_put_", "", "self:T indices:T values:T accumulate"},
    {"aten::index_select", "", "self:T dim index:T"},
    {"aten::linear", "", "input:T weight:T bias:T"},
    {"aten::masked_fill", "Tensor", "self:T mask:T value:T"},
    {"aten::masked_fill_", "Tensor", "self:T mask:T value:T"},
    {"aten::max_unpool2d", "", "self:T indices:T output_size"},
    {"aten::mean", "", "self:T dtype"},
    {"aten::narrow", "", "self:T dim start length"},
    {"aten::native_dropout_backward", "", "grad_output:T mask:T scale"},
    {"aten::native_layer_norm_backward", "",
     "grad_out:T input:T normalized_shape mean:T rstd:T weight:T bias:T output_mask"},
    {"aten::neg", "", "self:T"},
    {"aten::nll_loss_backward", "",
     "grad_output:T self:T target:T weight:T reduction ignore_index total_weight:T"},
    {"aten::permute", "", "self:T dims"},
    {"aten::polar", "", "abs:T angle:T"},
    {"aten::reflection_pad2d_backward", "", "grad_output:T self:T padding"},
    {"aten::replication_pad1d_backward", "", "grad_output:T self:T padding"},
    {"aten::rsub", "Tensor", "self:T other:T alpha"},
    {"aten::scalar_tensor", "", "s dtype layout device pin_memory"},
    {"aten::scatter", "dimname_src", "self:T dim index:T src:T"},
    {"aten::scatter_add", "", "self:T dim index:T src:T"},
    {"aten::select", "Dimname", "self:T dim index"},
    {"aten::sigmoid_backward", "", "grad_output:T output:T"},
    {"aten::silu_backward", "", "grad_output:T self:T"},
    {"aten::slice", "Tensor", "self:T dim start end step"},
    {"aten::split", "Tensor", "self:T split_size dim"},
    {"aten::split_with_sizes", "", "self:T split_sizes dim"},
    {"aten::squeeze", "", "self:T"},
    {"aten::stack", "", "tensors:T dim"},
    {"aten::sub", "Tensor", "self:T other:T alpha"},
    {"aten::sub_", "Tensor", "self:T other:T alpha"},
    {"aten::sum", "", "self:T dtype"},
    {"aten::t", "", "self:T"},
    {"aten::tanh_backward", "", "grad_output:T output:T"},
    {"aten::threshold_backward", "", "grad_output:T self:T threshold"},
    {"aten::transpose", "Dimname", "self:T dim0 dim1"},
    {"aten::tril", "", "self:T diagonal"},
    {"aten::unbind", "Dimname", "self:T dim"},
    {"aten::unsqueeze", "", "self:T dim"},
    {"aten::view", "", "self:T size"},
    {"aten::where", "Scalar", "condition:T self other"},
};

/* Bind rule (op name.overload) to the arguments written as in h_schemas;
 * returns cspmd_rule_bind's status. */
static inline cspmd_status_t h_bind(cspmd_rule_t rule, const char *op, const char *args)
{
    enum { MAX_ARGS = 128 };
    static char names[MAX_ARGS][48];
    const char *ptrs[MAX_ARGS];
    uint8_t tensor[MAX_ARGS];
    size_t n = 0;
    for (const char *p = args; *p != '\0';) {
        size_t len = strcspn(p, " ");
        if (len > 0) {
            ck_assert_msg(n < MAX_ARGS && len < sizeof names[0], "%s: argument list too long", op);
            int is_tensor = len > 2 && strncmp(p + len - 2, ":T", 2) == 0;
            snprintf(names[n], sizeof names[0], "%.*s", (int)(len - (is_tensor ? 2u : 0u)), p);
            ptrs[n] = names[n];
            tensor[n++] = (uint8_t)is_tensor;
        }
        p += len + (p[len] == ' ');
    }
    return cspmd_rule_bind(rule, op, ptrs, tensor, n);
}

/* Bind every rule of h_schemas (idempotent: a row agrees with itself). */
static inline void h_bind_rules(void)
{
    for (size_t i = 0; i < sizeof h_schemas / sizeof h_schemas[0]; i++) {
        const h_schema_t *s = &h_schemas[i];
        cspmd_status_t st = h_bind(cspmd_rule_find(s->name, s->overload), s->name, s->args);
        ck_assert_msg(st == CSPMD_OK, "%s.%s: %s", s->name, s->overload, cspmd_last_error());
    }
}

#endif
