/*
 * op_kernel.c -- the boxed kernel on cspmd's dispatch key, in C.
 *
 * Per op: find the op's rule (cached per operator), turn the arguments into
 * core operands, infer the output type, validate in-place/out= mutations,
 * redispatch with the key off, then write the type on every result.  Type
 * errors are raised before the real kernel runs, so a rejected op has no
 * side effects (the reference runs the op first; see docs/errors.md).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "cspmd.h"
#include "op_kernel.h"
#include "kernel_internal.h"

/* ---- op -> rules cache ------------------------------------------------ */

/* Open addressing over the operator's identity pointer.  Reads are lock-free;
 * a miss looks both rules (local, global shard) up by name, binds the local
 * rule's argument names to the overload's schema, and inserts under a
 * mutex.  The table
 * never shrinks: there are a few thousand operators at most. */
#define RULE_SLOTS 8192u

typedef struct rule_slot {
    _Atomic(const void *) key;
    cspmdk_op_rules_t rules;
} rule_slot_t;

static rule_slot_t rule_slots[RULE_SLOTS];
static pthread_mutex_t rule_mutex = PTHREAD_MUTEX_INITIALIZER;

static uint32_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* Bind the rule's argument names to this overload's schema (the op's first
 * call; a table defect fails here, and the op is not cached, so every call
 * raises it).  Errors: RUNTIME, NOMEM. */
static cspmd_status_t bind_rule(const cspmd_call_t *call, cspmd_rule_t rule, const char *display)
{
    int n = cspmd_call_nargs(call);
    size_t cap = n > 0 ? (size_t)n : 1;
    const char **names = malloc(cap * sizeof *names);
    uint8_t *tensor = malloc(cap);
    cspmd_status_t st;
    if (names == NULL || tensor == NULL) {
        st = cspmd_error_set(CSPMD_ERR_NOMEM, "%s: out of memory binding its rule", display);
    } else {
        for (int i = 0; i < n; i++) {
            names[i] = cspmd_call_arg_name(call, i);
            tensor[i] = (uint8_t)cspmd_call_arg_is_tensor(call, i);
        }
        st = cspmd_rule_bind(rule, display, names, tensor, n > 0 ? (size_t)n : 0);
    }
    free(names);
    free(tensor);
    return st;
}

cspmd_status_t cspmdk_op_rules(const cspmd_call_t *call, cspmdk_op_rules_t *out)
{
    const void *key = cspmd_call_op_key(call);
    uint32_t h = hash_ptr(key) & (RULE_SLOTS - 1);
    for (uint32_t i = 0; i < RULE_SLOTS; i++) {
        rule_slot_t *s = &rule_slots[(h + i) & (RULE_SLOTS - 1)];
        const void *k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key) {
            *out = s->rules;
            return CSPMD_OK;
        }
        if (k == NULL)
            break;
    }
    const char *name = cspmd_call_op_name(call), *overload = cspmd_call_op_overload(call);
    cspmdk_op_rules_t rules = {cspmd_rule_find(name, overload),
                               cspmd_shard_rule_find(name, overload), name};
    /* "name.overload", made once per operator (kept for the process, as the
     * table is); the bare name if out of memory */
    size_t nlen = strlen(name), olen = strlen(overload);
    char *display = malloc(nlen + olen + 2);
    if (display != NULL) {
        memcpy(display, name, nlen);
        display[nlen] = '.';
        memcpy(display + nlen + (olen ? 1 : 0), overload, olen + 1);
        rules.display = display;
    }
    cspmd_status_t st = bind_rule(call, rules.local, rules.display);
    if (st != CSPMD_OK) {
        free(display);
        return st;
    }
    int stored = 0;
    pthread_mutex_lock(&rule_mutex);
    for (uint32_t i = 0; i < RULE_SLOTS; i++) {
        rule_slot_t *s = &rule_slots[(h + i) & (RULE_SLOTS - 1)];
        const void *k = atomic_load_explicit(&s->key, memory_order_relaxed);
        if (k == key) { /* another thread inserted it first */
            rules.display = s->rules.display;
            break;
        }
        if (k == NULL) {
            s->rules = rules;
            atomic_store_explicit(&s->key, key, memory_order_release);
            stored = 1;
            break;
        }
    }
    pthread_mutex_unlock(&rule_mutex);
    if (!stored) {
        if (rules.display == display)
            rules.display = name;
        free(display);
    }
    *out = rules;
    return CSPMD_OK;
}

/* ---- operands ----------------------------------------------------------- */

void cspmdk_operands_init(operands_t *o)
{
    o->n = 0;
    o->cap = OPERANDS_INLINE;
    o->v = o->inl;
}

void cspmdk_operands_free(operands_t *o)
{
    if (o->v != o->inl)
        free(o->v);
    cspmdk_operands_init(o);
}

/* Room for `need` operands in total.  Errors: NOMEM. */
cspmd_status_t cspmdk_operands_reserve(operands_t *o, int need)
{
    if (need <= o->cap)
        return CSPMD_OK;
    cspmd_operand_t *v = malloc((size_t)need * sizeof *v);
    if (v == NULL)
        return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd: out of memory for %d operands", need);
    memcpy(v, o->v, (size_t)o->n * sizeof *v);
    if (o->v != o->inl)
        free(o->v);
    o->v = v;
    o->cap = need;
    return CSPMD_OK;
}

void cspmdk_operand_push(operands_t *o, cspmd_type_t type, int arg, cspmd_operand_kind_t kind)
{
    cspmd_operand_t *op = &o->v[o->n++];
    op->type = type;
    op->arg = (uint16_t)arg;
    op->kind = (uint8_t)kind;
    op->flags = 0;
}

void cspmdk_operand_push_ref(operands_t *o, const cspmd_args_t *args, const cspmd_tensor_ref_t *r,
                             int arg)
{
    cspmdk_operand_push(o, r->type, arg, r->number ? CSPMD_OPERAND_SCALAR : CSPMD_OPERAND_TENSOR);
    if (!(args->grad_enabled && r->requires_grad))
        o->v[o->n - 1].flags = CSPMD_OPERAND_NO_GRAD;
    if (r->number == CSPMD_NUMBER_ZERO)
        o->v[o->n - 1].flags |= CSPMD_OPERAND_ZERO;
    if (r->data)
        o->v[o->n - 1].flags |= CSPMD_OPERAND_DATA;
}

/* Tensors (out= excluded) and Scalar arguments, in argument order, then
 * the parked typed Scalars (cspmd.Scalar), which stand in for the weak
 * scalars of their numbers.  Errors: NOMEM. */
static cspmd_status_t collect_operands(const cspmd_args_t *args, operands_t *o)
{
    int npending = cspmd_pending_scalars_count();
    cspmd_status_t st = cspmdk_operands_reserve(o, args->nargs + args->ntensors + npending);
    if (st != CSPMD_OK) {
        cspmd_pending_scalars_take(NULL, 0);
        return st;
    }
    int t = 0;
    for (int arg = 0; arg < args->nargs; arg++) {
        if (arg < 64 && (args->scalar_args >> arg) & 1u) {
            cspmdk_operand_push(o, CSPMD_TYPE_UNTYPED, arg, CSPMD_OPERAND_SCALAR);
            if ((args->zero_scalars >> arg) & 1u)
                o->v[o->n - 1].flags = CSPMD_OPERAND_ZERO;
            continue;
        }
        for (; t < args->ntensors && args->tensors[t].arg == arg; t++) {
            const cspmd_tensor_ref_t *r = &args->tensors[t];
            if (r->out)
                continue;
            cspmdk_operand_push_ref(o, args, r, arg);
        }
    }
    if (npending > 0) {
        int k = 0;
        for (int i = 0; i < o->n; i++)
            if (o->v[i].kind != CSPMD_OPERAND_SCALAR)
                o->v[k++] = o->v[i];
        o->n = k + cspmd_pending_scalars_take(o->v + k, o->cap - k);
    }
    return CSPMD_OK;
}

int cspmdk_any_typed(const cspmd_operand_t *ops, int n)
{
    for (int i = 0; i < n; i++)
        if (ops[i].kind != CSPMD_OPERAND_SCALAR && ops[i].type != CSPMD_TYPE_UNTYPED)
            return 1;
    return 0;
}

/* ---- error context, error path only ------------------------- */

typedef struct text {
    char *buf;
    size_t len, cap;
} text_t;

static void put(text_t *t, const char *s)
{
    size_t n = strlen(s);
    if (t->len + 1 >= t->cap)
        return;
    size_t room = t->cap - 1 - t->len;
    if (n > room)
        n = room;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

/* "aten::add.Tensor" ("aten::mm" for a default overload). */
static void put_op_name(text_t *t, const cspmd_call_t *call)
{
    const char *ov = cspmd_call_op_overload(call);
    put(t, cspmd_call_op_name(call));
    if (ov[0]) {
        put(t, ".");
        put(t, ov);
    }
}

/* One tensor of the failed call, for the error's context. */
void cspmdk_context_tensor(int elem, const cspmd_tensor_t *tensor, cspmd_type_t type)
{
    int64_t small[16];
    int64_t nd = cspmd_tensor_dim(tensor);
    int64_t *sizes = nd <= 16 ? small : malloc((size_t)nd * sizeof *sizes);
    if (sizes == NULL)
        nd = 0, sizes = small;
    for (int64_t d = 0; d < nd; d++)
        sizes[d] = cspmd_tensor_size(tensor, d);
    cspmd_error_context_tensor(elem, cspmd_tensor_dtype_abbrev(tensor), sizes, (int)nd, type);
    if (sizes != small)
        free(sizes);
}

/* Describe the call (its arguments and their types) as the context of the
 * thread's current error, keeping its status. */
cspmd_status_t cspmdk_with_context(cspmd_status_t st, const cspmd_call_t *call,
                                   const cspmd_args_t *args)
{
    /* On the stack when they fit, else on the heap: the context never
     * cuts an op's name or an argument's text short (a custom op's long
     * name, a list of hundreds of ints). */
    char name_small[192], text_small[512];
    size_t name_len = strlen(cspmd_call_op_name(call)) + strlen(cspmd_call_op_overload(call)) + 2;
    char *name = name_len <= sizeof name_small ? name_small : malloc(name_len);
    if (name == NULL) { /* out of memory: the name as far as it fits */
        name = name_small;
        name_len = sizeof name_small;
    }
    text_t t = {name, 0, name_len};
    name[0] = '\0';
    put_op_name(&t, call);
    cspmd_error_context_begin(name);
    if (name != name_small)
        free(name);
    int ti = 0;
    for (int arg = 0; arg < args->nargs; arg++) {
        int first = ti;
        while (ti < args->ntensors && args->tensors[ti].arg == arg)
            ti++;
        char *text = text_small;
        if (ti == first) {
            size_t n = cspmd_call_arg_text(call, arg, text_small, sizeof text_small);
            char *big = n >= sizeof text_small ? malloc(n + 1) : NULL;
            if (big != NULL) {
                cspmd_call_arg_text(call, arg, big, n + 1);
                text = big;
            }
        }
        cspmd_error_context_arg(cspmd_call_arg_name(call, arg), ti == first ? text : NULL);
        if (text != text_small)
            free(text);
        for (int i = first; i < ti; i++)
            cspmdk_context_tensor(args->tensors[i].elem, args->tensors[i].tensor,
                                  args->tensors[i].type);
    }
    return cspmd_error_context_finish(st);
}

cspmd_status_t cspmdk_check_mutation(const cspmd_call_t *call, const cspmd_args_t *args,
                                     const cspmd_tensor_ref_t *r, cspmd_type_t out)
{
    cspmd_type_t checked;
    if (cspmd_type_check_mutation("", r->type, out, r->requires_grad, &checked) == CSPMD_OK)
        return CSPMD_OK;
    char name[192], tmp[48];
    text_t t = {name, 0, sizeof name};
    name[0] = '\0';
    put_op_name(&t, call);
    if (r->elem >= 0) {
        snprintf(tmp, sizeof tmp, " (list element [%d])", (int)r->elem);
        put(&t, tmp);
    }
    cspmd_status_t st = cspmd_type_check_mutation(name, r->type, out, r->requires_grad, &checked);
    return cspmdk_with_context(st, call, args);
}

void cspmdk_refresh_view_types(cspmd_args_t *args)
{
    for (int i = 0; i < args->ntensors; i++) {
        cspmd_tensor_ref_t *r = &args->tensors[i];
        if (r->base != NULL)
            r->type = cspmd_type_view_read(r->type, cspmd_tensor_get_type(r->base));
    }
}

cspmd_status_t cspmdk_view_write_join(const cspmd_call_t *call, const cspmd_args_t *args,
                                      const cspmd_tensor_ref_t *r, cspmd_type_t out,
                                      cspmd_type_t *joined)
{
    *joined = CSPMD_TYPE_UNTYPED;
    if (!r->written || r->base == NULL || out == CSPMD_TYPE_UNTYPED)
        return CSPMD_OK;
    cspmd_type_t base = cspmd_tensor_get_type(r->base);
    if (cspmd_type_join_view_write("", base, out, r->base_requires_grad, joined) == CSPMD_OK)
        return CSPMD_OK;
    char name[160];
    text_t t = {name, 0, sizeof name};
    name[0] = '\0';
    put_op_name(&t, call);
    cspmd_status_t st =
        cspmd_type_join_view_write(name, base, out, r->base_requires_grad, joined);
    return cspmdk_with_context(st, call, args);
}

void cspmdk_view_write_apply(const cspmd_call_t *call, const cspmd_args_t *args,
                             const cspmd_tensor_ref_t *r, cspmd_type_t out)
{
    cspmd_type_t joined;
    if (cspmdk_view_write_join(call, args, r, out, &joined) == CSPMD_OK && r->base != NULL &&
        joined != CSPMD_TYPE_UNTYPED && joined != cspmd_tensor_get_type(r->base))
        (void)cspmd_tensor_set_type(r->base, joined);
}

/* ---- tracing (only when on) ---------------------------------------------- */

/* "<user file:line>  aten::add.Tensor({tp: R}, {tp: V}) -> {tp: V}" */
static void trace(const cspmd_call_t *call, const cspmd_operand_t *ops, int n, cspmd_type_t out)
{
    char line[2048], tmp[512];
    text_t t = {line, 0, sizeof line};
    line[0] = '\0';
    int any = out > CSPMD_TYPE_EMPTY;
    for (int i = 0; i < n; i++)
        any |= ops[i].kind != CSPMD_OPERAND_SCALAR && ops[i].type > CSPMD_TYPE_EMPTY;
    if (!any) /* lines where every type is {} are left out */
        return;
    if (cspmd_python_user_frame(tmp, sizeof tmp) > 0) {
        put(&t, tmp);
        put(&t, "  ");
    }
    put_op_name(&t, call);
    put(&t, "(");
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (ops[i].kind == CSPMD_OPERAND_SCALAR)
            continue;
        if (!first)
            put(&t, ", ");
        cspmd_type_format(ops[i].type == CSPMD_TYPE_UNTYPED ? CSPMD_TYPE_EMPTY : ops[i].type, tmp,
                          sizeof tmp);
        put(&t, tmp);
        first = 0;
    }
    put(&t, ") -> ");
    cspmd_type_format(out, tmp, sizeof tmp);
    put(&t, tmp);
    cspmd_trace_emit(line);
}

int cspmdk_in_backward(void)
{
    char name[8], where[8];
    return cspmd_autograd_node(name, sizeof name, where, sizeof where);
}

int cspmdk_global_active(void)
{
    return !cspmd_checker_local();
}

/* Two things autograd's own backward formulas do that are sound but that the
 * forward rules reject; recognized on the error path only:
 *  - accumulating a gradient adds a pending sum (P) and a per-rank
 *    contribution (V) to it: retried with V read as P;
 *  - combining a gradient with fresh zeros: scattering it into a zero
 *    buffer in place (index_add_, scatter_add_, index_put_ of gather/index
 *    backward), or placing it into zeros (slice_scatter(grad,
 *    zeros_like(src)) of slice_scatter's backward).  Zeros are every type
 *    at once, so the zero tensors are left out; a zero buffer written in
 *    place takes the result's type.
 * If neither applies, the original error is regenerated for the message. */

/* Schema arguments (< 64) whose tensors are all plain (not list) tensors
 * filled with zeros. */
static uint64_t zero_args(const cspmd_args_t *args)
{
    uint64_t zero = 0, other = 0;
    for (int i = 0; i < args->ntensors; i++) {
        const cspmd_tensor_ref_t *r = &args->tensors[i];
        if (r->arg >= 64 || r->out)
            continue;
        uint64_t bit = UINT64_C(1) << r->arg;
        if (r->elem < 0 && !(other & bit) && cspmd_tensor_is_zero(r->tensor))
            zero |= bit;
        else
            other |= bit;
    }
    return zero & ~other;
}

static cspmd_status_t retry_in_backward(cspmd_rule_t rule, const cspmd_args_t *args,
                                        const cspmd_operand_t *ops, int n, cspmd_type_t *out,
                                        int *zero_self)
{
    cspmd_infer_backward_relax(1);
    cspmd_status_t st = cspmd_infer(rule, ops, n, out);
    uint64_t zero = st != CSPMD_OK ? zero_args(args) : 0;
    if (zero != 0) {
        operands_t rest;
        cspmdk_operands_init(&rest);
        if (cspmdk_operands_reserve(&rest, n) == CSPMD_OK) {
            for (int i = 0; i < n; i++)
                if (!(ops[i].kind == CSPMD_OPERAND_TENSOR && ops[i].arg < 64 &&
                      ((zero >> ops[i].arg) & 1u)))
                    rest.v[rest.n++] = ops[i];
            st = cspmd_infer(rule, rest.v, rest.n, out);
            int self_written = 0;
            for (int i = 0; i < args->ntensors; i++)
                self_written |= args->tensors[i].arg == 0 && args->tensors[i].written;
            *zero_self = st == CSPMD_OK && self_written && (zero & 1u);
        }
        cspmdk_operands_free(&rest);
    }
    cspmd_infer_backward_relax(0);
    if (st != CSPMD_OK)
        (void)cspmd_infer(rule, ops, n, out);
    return st;
}

/* Backward formulas also copy a gradient into part of a fresh zero buffer
 * (rfft's backward: zeros of the full size, then copy_ into a slice).  Zeros
 * are every type at once, so in backward a write the checks reject is
 * allowed when the whole buffer it writes into is zeros, and the buffer
 * takes the written type.  On the error path only. */
static int writes_into_zeros(const cspmd_tensor_ref_t *r)
{
    if (!r->written || !cspmdk_in_backward())
        return 0;
    return cspmd_tensor_is_zero(r->base != NULL ? r->base : r->tensor);
}

/* The autograd engine accumulates a second gradient contribution into a
 * buffer it owns with add_ (grad mode off): the result of add may differ
 * from the buffer's type only in ways that are sound for a gradient (an R
 * contribution into an I buffer, a pending sum into a V buffer).  The core
 * decides the buffer's type under the backward relaxation; only when the
 * op writes one tensor (its result is that tensor).  On the error path
 * only; overwrites the thread's error message.  Returns 1 and the written
 * type in *kept if it applies. */
static int accumulates_in_backward(const cspmd_args_t *args, const cspmd_tensor_ref_t *r,
                                   cspmd_type_t out, cspmd_type_t *kept)
{
    int written = 0;
    for (int i = 0; i < args->ntensors; i++)
        written += args->tensors[i].written;
    if (written != 1 || r->elem >= 0 || !cspmdk_in_backward())
        return 0;
    cspmd_infer_backward_relax(1);
    cspmd_status_t st = cspmd_type_check_mutation("", r->type, out, r->requires_grad, kept);
    cspmd_infer_backward_relax(0);
    return st == CSPMD_OK;
}

/* ---- the kernel --------------------------------------------------------- */

static cspmd_status_t run_checked(cspmd_call_t *call, cspmd_rule_t rule, cspmd_args_t *args,
                                  operands_t *o, cspmd_args_t *results)
{
    cspmd_status_t st = cspmd_call_args(call, args);
    if (st != CSPMD_OK)
        return st;
    cspmdk_refresh_view_types(args);
    st = collect_operands(args, o);
    if (st != CSPMD_OK)
        return st;
    if (cspmd_rule_casts(rule)) {
        /* A cast that truncates: its source may not be Partial. */
        int source = -1;
        cspmd_value_kind_t from, to;
        if (!cspmd_call_cast(call, &source, &from, &to) || !cspmd_cast_truncates(from, to))
            source = -1;
        for (int i = 0; source >= 0 && i < o->n; i++)
            if (o->v[i].kind == CSPMD_OPERAND_TENSOR && o->v[i].arg == source)
                o->v[i].flags |= CSPMD_OPERAND_TRUNCATED;
    }
    const cspmd_operand_t *ops = o->v;
    int n = o->n;
    /* Ops over tensors none of which carries a type (module construction,
     * bookkeeping inside torch functions) are not SPMD data: they run
     * unchecked and their results stay untyped.  Factories and fills still
     * type their fresh results. */
    if (cspmd_rule_kind(rule) == CSPMD_KIND_INFER && !cspmdk_any_typed(ops, n))
        return cspmd_call_redispatch(call);
    cspmd_type_t out = CSPMD_TYPE_UNTYPED;
    st = cspmd_infer(rule, ops, n, &out);
    int zero_self = 0;
    if (st != CSPMD_OK && cspmdk_in_backward())
        st = retry_in_backward(rule, args, ops, n, &out, &zero_self);
    if (st != CSPMD_OK)
        return cspmdk_with_context(st, call, args);

    /* In-place and out=: the written tensor may not change its type.  The
     * op's name is only formatted when the check fails. */
    int zero_ref = -1; /* the write into a zero buffer that takes out */
    for (int i = 0; i < args->ntensors; i++) {
        const cspmd_tensor_ref_t *r = &args->tensors[i];
        if (!r->written || r->type == CSPMD_TYPE_UNTYPED || r->type == out ||
            (zero_self && r->arg == 0))
            continue;
        st = cspmdk_check_mutation(call, args, r, out);
        cspmd_type_t kept;
        if (st != CSPMD_OK && cspmdk_in_backward()) {
            if (accumulates_in_backward(args, r, out, &kept)) {
                out = kept;
                continue;
            }
            st = cspmdk_check_mutation(call, args, r, out); /* the message again */
        }
        if (st != CSPMD_OK && zero_ref < 0 && writes_into_zeros(r)) {
            zero_ref = i;
            continue;
        }
        if (st != CSPMD_OK)
            return st;
    }
    /* A write through a view changes the tensor it views: checked here,
     * applied after the kernel ran. */
    for (int i = 0; i < args->ntensors; i++) {
        cspmd_type_t joined;
        if (i == zero_ref)
            continue;
        st = cspmdk_view_write_join(call, args, &args->tensors[i], out, &joined);
        if (st != CSPMD_OK && zero_ref < 0 && writes_into_zeros(&args->tensors[i])) {
            zero_ref = i;
            continue;
        }
        if (st != CSPMD_OK)
            return st;
    }

    /* Global mode: each result's partition spec, and V -> P where a
     * sharded dim was contracted or reduced (before the op runs, too).
     * The ops backward() runs keep local checking (gradients carry no
     * spec yet). */
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    int global = cspmdk_global_active();
    if (global) {
        st = cspmdk_global_types(call, args, out, outs);
        if (st != CSPMD_OK)
            return cspmdk_with_context(st, call, args);
        out = outs[0];
    }

    if (cspmd_trace_enabled())
        trace(call, ops, n, out);
    st = cspmd_call_redispatch(call);
    if (st != CSPMD_OK)
        return st;

    for (int i = 0, w = 0; i < args->ntensors; i++)
        if (args->tensors[i].written) {
            /* out= tensors in result order (max.dim_max's values, indices) */
            cspmd_type_t t = global && args->tensors[i].out && w < CSPMD_MAX_RESULTS
                                 ? outs[w++] : out;
            (void)cspmd_tensor_set_type(args->tensors[i].tensor, t);
            if (i == zero_ref && args->tensors[i].base != NULL)
                (void)cspmd_tensor_set_type(args->tensors[i].base, t);
            else
                cspmdk_view_write_apply(call, args, &args->tensors[i], t);
        }
    st = cspmd_call_results(call, results);
    if (st != CSPMD_OK)
        return st;
    /* A constant made from a number (scalar_tensor) is read as that number
     * by later ops; the user's data (a factory's result) is marked so. */
    int mark = cspmd_rule_kind(rule) == CSPMD_KIND_FACTORY ? cspmd_rule_result_number(rule, ops, n)
                                                            : 0;
    if (!mark && cspmd_rule_result_data(rule, ops, n))
        mark = CSPMD_MARK_DATA;
    for (int i = 0; i < results->ntensors; i++) {
        int r = results->tensors[i].arg;
        cspmd_type_t t = global && r < CSPMD_MAX_RESULTS ? outs[r] : out;
        if (mark) {
            st = cspmd_tensor_set_marked_type(results->tensors[i].tensor, t, mark);
            if (st != CSPMD_OK)
                return st;
        } else if (results->tensors[i].type != t || results->tensors[i].data) {
            st = cspmd_tensor_set_type(results->tensors[i].tensor, t);
            if (st != CSPMD_OK)
                return st;
        }
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_kernel_run(cspmd_call_t *call)
{
    /* register_no_typecheck: one relaxed load while nothing is registered */
    if (cspmd_unchecked_code_armed() && cspmd_in_unchecked_code())
        return cspmd_call_run_unchecked(call);
    cspmdk_op_rules_t rules;
    cspmd_status_t st = cspmdk_op_rules(call, &rules);
    if (st != CSPMD_OK)
        return st;
    cspmd_rule_t rule = rules.local;
    if (cspmd_rule_kind(rule) == CSPMD_KIND_PASSTHROUGH)
        return cspmd_call_redispatch(call);
    if (cspmd_rule_kind(rule) == CSPMD_KIND_FOREACH)
        return cspmdk_foreach_run(call, rule);
    cspmd_args_t args, results;
    operands_t o;
    cspmdk_operands_init(&o);
    args.tensors = args.inline_refs;
    results.tensors = results.inline_refs;
    st = run_checked(call, rule, &args, &o, &results);
    cspmdk_operands_free(&o);
    cspmd_args_release(&args);
    cspmd_args_release(&results);
    return st;
}
