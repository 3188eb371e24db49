/*
 * type_carry.c -- types that move with their values: which type a tensor
 * gets when it replaces another holding the same values (a dtype or device
 * move of a module, a deep copy, a reloaded state_dict), and the stable text
 * form a type is saved in (torch.save / torch.load, across processes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cspmd.h"

cspmd_status_t cspmd_type_carry(cspmd_type_t from, cspmd_type_t to, int to_ndim,
                                const char *what, cspmd_type_t *out)
{
    if (out == NULL || cspmd_type_naxes(from) < 0 || cspmd_type_naxes(to) < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_carry: bad arguments");
    if (from == CSPMD_TYPE_UNTYPED || from == to) {
        *out = to;
        return CSPMD_OK;
    }
    if (to == CSPMD_TYPE_UNTYPED) {
        cspmd_spec_t spec;
        cspmd_status_t st = cspmd_type_spec(from, &spec);
        if (st != CSPMD_OK)
            return st;
        /* A partition spec describes dims: it only carries to the same rank. */
        *out = spec.ndim >= 0 && spec.ndim != to_ndim ? cspmd_type_local(from) : from;
        return CSPMD_OK;
    }
    char fbuf[256], tbuf[256];
    cspmd_type_format(from, fbuf, sizeof fbuf);
    cspmd_type_format(to, tbuf, sizeof tbuf);
    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                           "%s: the tensor is typed %s but the tensor replacing it is typed %s; "
                           "the same values cannot change type on the way (load a state_dict "
                           "saved from a model with the same types, or re-annotate with "
                           "assert_type after loading)",
                           what ? what : "tensor", fbuf, tbuf);
}

/* ---- the saved form -------------------------------------------------------
 *
 * "cspmd1:" then, per axis, "<layout>=<letter>" joined by "|", where a layout
 * is its modes "size:stride" joined by ","; then, with a partition spec,
 * "#" and per tensor dim the layouts of its axes joined by "+" ("-" for no
 * axis), dims joined by "/".  Axes are layouts of ranks, so the text means
 * the same in another process of the same world; names are not saved.
 */

#define PREFIX "cspmd1:"

typedef struct outbuf {
    char *buf;
    size_t len, used;
} outbuf_t;

static void emit(outbuf_t *o, const char *fmt, long long a, long long b)
{
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, fmt, a, b);
    for (int i = 0; i < n; i++, o->used++)
        if (o->used + 1 < o->len)
            o->buf[o->used] = tmp[i];
}

static void emit_str(outbuf_t *o, const char *s)
{
    for (; *s; s++, o->used++)
        if (o->used + 1 < o->len)
            o->buf[o->used] = *s;
}

static void emit_layout(outbuf_t *o, cspmd_axis_t axis)
{
    int64_t sizes[CSPMD_MAX_MODES], strides[CSPMD_MAX_MODES];
    int n = cspmd_axis_layout(axis, sizes, strides);
    for (int k = 0; k < n; k++)
        emit(o, k ? ",%lld:%lld" : "%lld:%lld", (long long)sizes[k], (long long)strides[k]);
}

size_t cspmd_type_encode(cspmd_type_t type, char *buf, size_t len)
{
    outbuf_t o = {buf, buf ? len : 0, 0};
    int n = cspmd_type_naxes(type);
    if (type == CSPMD_TYPE_UNTYPED || n < 0) {
        if (o.len > 0)
            buf[0] = '\0';
        return 0;
    }
    emit_str(&o, PREFIX);
    for (int i = 0; i < n; i++) {
        cspmd_axis_t axis;
        cspmd_ltype_t lt;
        (void)cspmd_type_entry(type, i, &axis, &lt);
        if (i)
            emit_str(&o, "|");
        emit_layout(&o, axis);
        emit_str(&o, "=");
        emit_str(&o, cspmd_ltype_letter(lt));
    }
    cspmd_spec_t spec;
    /* A strided shard has no text form: saved without its spec, it loads
     * as V with no spec entry, which global mode refuses. */
    if (cspmd_type_spec(type, &spec) == CSPMD_OK && spec.ndim >= 0 && !cspmdi_spec_strided(&spec)) {
        emit_str(&o, "#");
        for (int d = 0; d < spec.ndim; d++) {
            if (d)
                emit_str(&o, "/");
            if (spec.nentry[d] == 0)
                emit_str(&o, "-");
            for (int j = 0; j < spec.nentry[d]; j++) {
                if (j)
                    emit_str(&o, "+");
                emit_layout(&o, spec.entry[d][j]);
            }
        }
    }
    if (o.len > 0)
        buf[o.used < o.len ? o.used : o.len - 1] = '\0';
    return o.used;
}

static cspmd_status_t bad(const char *text)
{
    return cspmd_error_set(CSPMD_ERR_VALUE, "cannot read the saved SPMD type '%s'", text);
}

/* Parse "size:stride[,size:stride...]" up to a delimiter in stop; interns it. */
static cspmd_status_t parse_layout(const char **pp, const char *stop, const char *text,
                                   cspmd_axis_t *axis)
{
    int64_t sizes[CSPMD_MAX_MODES], strides[CSPMD_MAX_MODES];
    int n = 0;
    const char *p = *pp;
    for (;;) {
        char *end;
        if (n == CSPMD_MAX_MODES)
            return bad(text);
        long long s = strtoll(p, &end, 10);
        if (end == p || *end != ':')
            return bad(text);
        p = end + 1;
        long long d = strtoll(p, &end, 10);
        if (end == p)
            return bad(text);
        sizes[n] = s;
        strides[n++] = d;
        p = end;
        if (*p != ',')
            break;
        p++;
    }
    if (*p != '\0' && strchr(stop, *p) == NULL)
        return bad(text);
    *pp = p;
    if (cspmd_axis_intern(sizes, strides, n, axis) != CSPMD_OK)
        return bad(text);
    return CSPMD_OK;
}

static int letter_code(char c)
{
    switch (c) {
    case 'R': return CSPMD_LT_R;
    case 'I': return CSPMD_LT_I;
    case 'V': return CSPMD_LT_V;
    case 'P': return CSPMD_LT_P;
    default: return CSPMD_LT_NONE;
    }
}

cspmd_status_t cspmd_type_decode(const char *text, cspmd_type_t *out)
{
    if (text == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_decode: NULL argument");
    if (strncmp(text, PREFIX, strlen(PREFIX)) != 0)
        return bad(text);
    const char *p = text + strlen(PREFIX);
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int n = 0;
    while (*p && *p != '#') {
        if (n == CSPMD_MAX_AXES)
            return bad(text);
        cspmd_status_t st = parse_layout(&p, "=", text, &axes[n]);
        if (st != CSPMD_OK)
            return st;
        if (*p != '=' || letter_code(p[1]) == CSPMD_LT_NONE)
            return bad(text);
        lts[n++] = (cspmd_ltype_t)letter_code(p[1]);
        p += 2;
        if (*p == '|' && (p[1] == '\0' || p[1] == '#'))
            return bad(text);
        if (*p == '|')
            p++;
        else if (*p && *p != '#')
            return bad(text);
    }
    cspmd_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.ndim = -1;
    if (*p == '#') {
        p++;
        spec.ndim = 0;
        for (;;) {
            if (spec.ndim == CSPMD_MAX_DIMS)
                return bad(text);
            int d = spec.ndim++;
            if (*p == '-') {
                p++;
            } else {
                for (;;) {
                    if (spec.nentry[d] == CSPMD_MAX_AXES)
                        return bad(text);
                    cspmd_status_t st =
                        parse_layout(&p, "+/", text, &spec.entry[d][spec.nentry[d]]);
                    if (st != CSPMD_OK)
                        return st;
                    spec.nentry[d]++;
                    if (*p != '+')
                        break;
                    p++;
                }
            }
            if (*p == '\0')
                break;
            if (*p != '/')
                return bad(text);
            p++;
        }
    }
    cspmd_type_t t;
    cspmd_status_t st = cspmd_type_make(axes, lts, n, spec.ndim >= 0 ? &spec : NULL, &t);
    if (st != CSPMD_OK)
        return st;
    *out = t;
    return CSPMD_OK;
}
