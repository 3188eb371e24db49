/*
 * error_context.c -- an error's context: the failed call as fields, and
 * the one place that writes it as text.  Also the core's growable string.
 *
 * Per thread, error path only: everything here may allocate.  The heap
 * parts are freed when the thread ends (a pthread key's destructor).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cspmd.h"

/* ---- the growable string ------------------------------------------------ */

void cspmdi_text_init(cspmdi_text_t *t, char *buf, size_t cap)
{
    t->buf = buf;
    t->cap = buf != NULL ? cap : 0;
    t->len = 0;
    t->heap = 0;
    t->failed = 0;
    if (t->cap > 0)
        t->buf[0] = '\0';
}

/* Room for n more bytes and the NUL; 0 when it cannot grow. */
static int text_room(cspmdi_text_t *t, size_t n)
{
    if (t->len + n + 1 <= t->cap)
        return 1;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + n + 1)
        cap *= 2;
    char *p = t->heap ? realloc(t->buf, cap) : malloc(cap);
    if (p == NULL) {
        t->failed = 1;
        return 0;
    }
    if (!t->heap && t->len > 0)
        memcpy(p, t->buf, t->len);
    p[t->len] = '\0';
    t->buf = p;
    t->cap = cap;
    t->heap = 1;
    return 1;
}

static void text_append(cspmdi_text_t *t, const char *s, size_t n)
{
    if (!text_room(t, n)) {
        if (t->cap == 0)
            return;
        n = t->cap - 1 - t->len; /* keep what fits */
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

void cspmdi_text_put(cspmdi_text_t *t, const char *s)
{
    if (s != NULL)
        text_append(t, s, strlen(s));
}

void cspmdi_text_putf(cspmdi_text_t *t, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        text_append(t, small, (size_t)n);
        return;
    }
    if (!text_room(t, (size_t)n)) {
        text_append(t, small, sizeof small - 1);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(t->buf + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void cspmdi_text_clear(cspmdi_text_t *t)
{
    t->len = 0;
    t->failed = 0;
    if (t->cap > 0)
        t->buf[0] = '\0';
}

void cspmdi_text_free(cspmdi_text_t *t)
{
    if (t->heap)
        free(t->buf);
    cspmdi_text_init(t, NULL, 0);
}

static const char *text_str(const cspmdi_text_t *t)
{
    return t->len > 0 ? t->buf : "";
}

/* ---- the per-thread context ---------------------------------------------- */

#define NONE ((size_t)-1)

/* Tensors of one argument that the text shows; the rest are counted. */
#define TENSORS_SHOWN 16

typedef struct entry {
    int arg;                  /* which argument (0, 1, ...) */
    int elem;                 /* index in a list argument, -1 otherwise */
    size_t name, dtype, text; /* offsets into strs; NONE if absent */
    size_t sizes;             /* offset into dims */
    int ndim;
    cspmd_type_t type;
} entry_t;

typedef struct context {
    int state;              /* 0 none, 1 being described, 2 done */
    int narg;               /* arguments begun */
    size_t arg_name, arg_text; /* the current argument's */
    int arg_entries;        /* entries the current argument has */
    cspmdi_text_t strs;     /* NUL-separated strings */
    int64_t *dims;
    size_t ndims, cdims;
    entry_t *v;
    int n, cap;
    size_t field[CSPMD_ERROR_FIELD_COUNT]; /* offsets into strs, NONE if absent */
    cspmdi_text_t context;  /* the text */
    cspmdi_text_t full;     /* message + "\n\n" + context */
    cspmdi_text_t hint;
} context_t;

static _Thread_local context_t tl;
static _Thread_local int tl_registered;
static pthread_key_t free_key;
static pthread_once_t free_once = PTHREAD_ONCE_INIT;

static void context_free(void *p)
{
    context_t *c = p;
    cspmdi_text_free(&c->strs);
    cspmdi_text_free(&c->context);
    cspmdi_text_free(&c->full);
    cspmdi_text_free(&c->hint);
    free(c->dims);
    free(c->v);
    memset(c, 0, sizeof *c);
}

static void make_key(void)
{
    (void)pthread_key_create(&free_key, context_free);
}

/* The thread's context, its heap freed when the thread ends. */
static context_t *ctx(void)
{
    if (!tl_registered) {
        (void)pthread_once(&free_once, make_key);
        (void)pthread_setspecific(free_key, &tl);
        tl_registered = 1;
    }
    return &tl;
}

static size_t save(context_t *c, const char *s)
{
    if (s == NULL)
        return NONE;
    size_t off = c->strs.len;
    text_append(&c->strs, s, strlen(s) + 1); /* keeps the NUL */
    if (c->strs.failed)
        return NONE;
    return off;
}

static const char *str_at(const context_t *c, size_t off)
{
    return off == NONE ? NULL : c->strs.buf + off;
}

static entry_t *push_entry(context_t *c)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        entry_t *v = realloc(c->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return NULL;
        c->v = v;
        c->cap = cap;
    }
    entry_t *e = &c->v[c->n++];
    e->arg = c->narg - 1;
    e->elem = -1;
    e->name = c->arg_name;
    e->dtype = e->text = NONE;
    e->sizes = 0;
    e->ndim = 0;
    e->type = CSPMD_TYPE_UNTYPED;
    c->arg_entries++;
    return e;
}

/* An argument without tensors is one entry: its text. */
static void close_arg(context_t *c)
{
    if (c->narg == 0 || c->arg_entries > 0)
        return;
    entry_t *e = push_entry(c);
    if (e != NULL)
        e->text = c->arg_text != NONE ? c->arg_text : save(c, "");
}

void cspmdi_error_context_reset(void)
{
    context_t *c = &tl;
    c->state = 0;
    c->narg = 0;
    c->n = 0;
    c->ndims = 0;
    cspmdi_text_clear(&c->strs);
    cspmdi_text_clear(&c->context);
    cspmdi_text_clear(&c->full);
    for (int f = 0; f < CSPMD_ERROR_FIELD_COUNT; f++)
        c->field[f] = NONE;
    /* A caller that prefixed the message ("list element [2]: ...") kept
     * the suggestion at its end. */
    if (c->hint.len > 0) {
        const char *m = cspmdi_error_message();
        size_t ml = strlen(m);
        if (ml < c->hint.len || strcmp(m + ml - c->hint.len, c->hint.buf) != 0)
            cspmdi_text_clear(&c->hint);
    }
}

void cspmdi_error_hint_from(size_t from)
{
    context_t *c = ctx();
    const char *m = cspmdi_error_message();
    size_t ml = strlen(m);
    cspmdi_text_clear(&c->hint);
    if (from >= ml)
        return;
    cspmdi_text_put(&c->hint, m + from); /* the field drops leading newlines */
}

void cspmd_error_context_begin(const char *op)
{
    context_t *c = ctx();
    cspmdi_error_context_reset(); /* the message stays, and so does its hint */
    c->state = 1;
    c->field[CSPMD_ERROR_FIELD_OP] = save(c, op != NULL ? op : "?");
}

void cspmd_error_context_arg(const char *name, const char *text)
{
    context_t *c = &tl;
    if (c->state != 1)
        return;
    close_arg(c);
    c->narg++;
    c->arg_entries = 0;
    c->arg_name = save(c, name != NULL ? name : "?");
    c->arg_text = save(c, text);
}

void cspmd_error_context_tensor(int elem, const char *dtype, const int64_t *sizes, int ndim,
                                cspmd_type_t type)
{
    context_t *c = &tl;
    if (c->state != 1 || c->narg == 0)
        return;
    if (ndim < 0 || (ndim > 0 && sizes == NULL))
        ndim = 0;
    if (c->ndims + (size_t)ndim > c->cdims) {
        size_t cap = c->cdims ? c->cdims : 64;
        while (cap < c->ndims + (size_t)ndim)
            cap *= 2;
        int64_t *d = realloc(c->dims, cap * sizeof *d);
        if (d == NULL)
            return;
        c->dims = d;
        c->cdims = cap;
    }
    entry_t *e = push_entry(c);
    if (e == NULL)
        return;
    e->elem = elem;
    e->dtype = save(c, dtype != NULL ? dtype : "?");
    e->sizes = c->ndims;
    e->ndim = ndim;
    e->type = type;
    if (ndim > 0)
        memcpy(c->dims + c->ndims, sizes, (size_t)ndim * sizeof *sizes);
    c->ndims += (size_t)ndim;
}

static void put_type(cspmdi_text_t *t, cspmd_type_t type)
{
    char small[256];
    cspmd_type_t shown = type == CSPMD_TYPE_UNTYPED ? CSPMD_TYPE_EMPTY : type;
    size_t n = cspmd_type_format(shown, small, sizeof small);
    if (n < sizeof small) {
        cspmdi_text_put(t, small);
        return;
    }
    char *big = malloc(n + 1);
    if (big == NULL) {
        cspmdi_text_put(t, small);
        return;
    }
    cspmd_type_format(shown, big, n + 1);
    cspmdi_text_put(t, big);
    free(big);
}

/* "f32[2, ?] {tp: P}" */
static void put_tensor(cspmdi_text_t *t, const context_t *c, const entry_t *e)
{
    cspmdi_text_put(t, str_at(c, e->dtype));
    cspmdi_text_put(t, "[");
    for (int d = 0; d < e->ndim; d++) {
        int64_t n = c->dims[e->sizes + (size_t)d];
        if (d)
            cspmdi_text_put(t, ", ");
        if (n < 0) /* symbolic or ragged */
            cspmdi_text_put(t, "?");
        else
            cspmdi_text_putf(t, "%lld", (long long)n);
    }
    cspmdi_text_put(t, "] ");
    put_type(t, e->type);
}

static void write_text(context_t *c)
{
    cspmdi_text_t *t = &c->context;
    cspmdi_text_clear(t);
    cspmdi_text_put(t, "  In ");
    cspmdi_text_put(t, str_at(c, c->field[CSPMD_ERROR_FIELD_OP]));
    cspmdi_text_put(t, "(\n");
    for (int i = 0; i < c->n;) {
        int arg = c->v[i].arg, shown = 0, hidden = 0;
        cspmdi_text_put(t, "    ");
        cspmdi_text_put(t, str_at(c, c->v[i].name));
        cspmdi_text_put(t, ": ");
        for (; i < c->n && c->v[i].arg == arg; i++) {
            const entry_t *e = &c->v[i];
            if (e->dtype == NONE) {
                cspmdi_text_put(t, str_at(c, e->text));
                continue;
            }
            if (shown == TENSORS_SHOWN) {
                hidden++;
                continue;
            }
            if (shown)
                cspmdi_text_put(t, ",\n      ");
            put_tensor(t, c, e);
            shown++;
        }
        if (hidden)
            cspmdi_text_putf(t, ",\n      ... and %d more", hidden);
        cspmdi_text_put(t, ",\n");
    }
    cspmdi_text_put(t, "  )");
    cspmd_axis_t mesh[CSPMD_MAX_AXES];
    int nm = cspmd_mesh_current(mesh);
    if (nm > 0) {
        cspmdi_text_put(t, " under mesh {");
        for (int i = 0; i < nm; i++) {
            if (i)
                cspmdi_text_put(t, ", ");
            cspmdi_text_put(t, cspmd_axis_display(mesh[i], 0));
        }
        cspmdi_text_put(t, "}");
    }
    const char *node = str_at(c, c->field[CSPMD_ERROR_FIELD_NODE]);
    const char *fwd = str_at(c, c->field[CSPMD_ERROR_FIELD_FORWARD_SITE]);
    const char *site = str_at(c, c->field[CSPMD_ERROR_FIELD_SITE]);
    if (node != NULL) {
        cspmdi_text_put(t, "\n  during backward, in ");
        cspmdi_text_put(t, node);
        cspmdi_text_put(t, " (the gradient of the forward op that created it)");
        if (fwd != NULL) {
            cspmdi_text_put(t, "\n  forward op at ");
            cspmdi_text_put(t, fwd);
        } else {
            cspmdi_text_put(t, "\n  (run under torch.autograd.set_detect_anomaly(True) to see "
                               "the forward op's source line)");
        }
    }
    if (site != NULL) {
        cspmdi_text_put(t, node != NULL ? "\n  backward() called at " : "\n  at ");
        cspmdi_text_put(t, site);
    }
    cspmdi_text_clear(&c->full);
    cspmdi_text_put(&c->full, cspmdi_error_message());
    cspmdi_text_put(&c->full, "\n\n");
    cspmdi_text_put(&c->full, text_str(t));
}

static size_t save_nonempty(context_t *c, const char *s)
{
    return s != NULL && s[0] != '\0' ? save(c, s) : NONE;
}

cspmd_status_t cspmd_error_context_end(cspmd_status_t status, const char *node,
                                       const char *forward_site, const char *site)
{
    context_t *c = &tl;
    if (c->state != 1)
        return status;
    close_arg(c);
    c->field[CSPMD_ERROR_FIELD_NODE] = save_nonempty(c, node);
    if (c->field[CSPMD_ERROR_FIELD_NODE] != NONE)
        c->field[CSPMD_ERROR_FIELD_FORWARD_SITE] = save_nonempty(c, forward_site);
    c->field[CSPMD_ERROR_FIELD_SITE] = save_nonempty(c, site);
    write_text(c);
    c->state = 2;
    return status;
}

const char *cspmdi_error_full_text(void)
{
    return tl.state == 2 ? text_str(&tl.full) : NULL;
}

const char *cspmd_error_field(cspmd_error_field_t field)
{
    const context_t *c = &tl;
    switch (field) {
    case CSPMD_ERROR_FIELD_MESSAGE: return cspmdi_error_message();
    case CSPMD_ERROR_FIELD_CONTEXT: return c->state == 2 ? text_str(&c->context) : "";
    case CSPMD_ERROR_FIELD_HINT: {
        const char *h = text_str(&c->hint);
        while (*h == '\n')
            h++;
        return h;
    }
    case CSPMD_ERROR_FIELD_OP:
    case CSPMD_ERROR_FIELD_NODE:
    case CSPMD_ERROR_FIELD_FORWARD_SITE:
    case CSPMD_ERROR_FIELD_SITE: {
        const char *s = c->state == 2 ? str_at(c, c->field[field]) : NULL;
        return s != NULL ? s : "";
    }
    case CSPMD_ERROR_FIELD_COUNT: break;
    }
    return "";
}

const char *cspmd_error_field_name(cspmd_error_field_t field)
{
    switch (field) {
#define FIELD_NAME(name, attr, doc)                                                           \
    case CSPMD_ERROR_FIELD_##name: return attr;
        CSPMD_ERROR_FIELD_LIST(FIELD_NAME)
#undef FIELD_NAME
    case CSPMD_ERROR_FIELD_COUNT: break;
    }
    return NULL;
}

int cspmd_error_operand_count(void)
{
    return tl.state == 2 ? tl.n : 0;
}

cspmd_status_t cspmd_error_operand(int i, cspmd_error_operand_t *out)
{
    const context_t *c = &tl;
    if (out == NULL || i < 0 || i >= cspmd_error_operand_count())
        return CSPMD_ERR_MISUSE; /* the current error stays as it is */
    const entry_t *e = &c->v[i];
    out->name = str_at(c, e->name);
    out->elem = e->elem;
    out->dtype = str_at(c, e->dtype);
    out->sizes = e->dtype != NONE && e->ndim > 0 ? c->dims + e->sizes : NULL;
    out->ndim = e->ndim;
    out->type = e->type;
    out->text = e->dtype == NONE ? str_at(c, e->text) : NULL;
    return CSPMD_OK;
}
