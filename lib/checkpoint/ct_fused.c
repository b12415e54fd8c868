/* ct_fused.c -- the fused groups of nvfp4 weights in the compressed-tensors layout. vLLM loads
 * some sibling Linear weights as one layer (its packed_modules_mapping: Llama's qkv_proj =
 * q_proj + k_proj + v_proj and gate_up_proj = gate_proj + up_proj, DeepSeek's fused_qkv_a_proj =
 * q_a_proj + kv_a_proj_with_mqa; FusedMoE's w13 = gate_proj + up_proj, or Mixtral's w1 + w3, of
 * one expert), and for nvfp4 that layer has ONE global scale: W4A16Fp4 takes the max over the
 * members' weight_global_scale, the nvfp4 MoE methods take w13's first (the gate's) and only log
 * when the up's differs. So the members must have been quantized under one shared g, as
 * llm-compressor's update_fused_layer_weight_global_scales makes them (the minimum of the
 * members' g). This file finds the groups over all the run's shards (a group may span shards),
 * links their members through fuse_next (global_scale.c then gives them g of the max |x| over the
 * group), and refuses a group that mixes nvfp4 with anything else (vLLM wants one scheme per
 * fused layer).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"

/* The members of each fused layer, by the last component of their module path. */
static const char *const fused_members[][4] = {
    {"q_proj", "k_proj", "v_proj", NULL},
    {"gate_proj", "up_proj", NULL, NULL},
    {"q_a_proj", "kv_a_proj_with_mqa", NULL, NULL},
    {"w1", "w3", NULL, NULL},
};
enum { N_FUSED = sizeof fused_members / sizeof fused_members[0] };

typedef struct member {
    char *parent; /* the module path without its last component (malloc'd) */
    int row;      /* index into fused_members */
    int slot;     /* its name's index in that row */
    ck_tensor_plan *tp;
} member;

/* The fused_members row of a leaf module name (and its slot there), or -1. */
static int fused_row(const char *leaf, int *slot)
{
    for (int r = 0; r < N_FUSED; r++)
        for (int k = 0; k < 4 && fused_members[r][k]; k++)
            if (strcmp(leaf, fused_members[r][k]) == 0) {
                *slot = k;
                return r;
            }
    return -1;
}

static int row_size(int row)
{
    int k = 0;
    while (k < 4 && fused_members[row][k]) k++;
    return k;
}

/* A rank-2 `P.weight` whose P ends in a fused member name: its entry (parent malloc'd); false
 * when it is none, or out of memory (*nomem). */
static bool as_member(ck_tensor_plan *tp, member *m, bool *nomem)
{
    const char *name = tp->in->name;
    size_t len = strlen(name);
    if (tp->in->rank != 2 || len < 8 || strcmp(name + len - 7, ".weight") != 0) return false;
    size_t mlen = len - 7, cut = mlen;
    while (cut > 0 && name[cut - 1] != '.' && name[cut - 1] != '/') cut--;
    char leaf[32];
    if (cut == 0 || mlen - cut >= sizeof leaf) return false;
    memcpy(leaf, name + cut, mlen - cut);
    leaf[mlen - cut] = '\0';
    int slot = 0, row = fused_row(leaf, &slot);
    if (row < 0) return false;
    m->slot = slot;
    m->parent = strndup(name, cut - 1);
    m->row = row;
    m->tp = tp;
    *nomem = m->parent == NULL;
    return !*nomem;
}

static int member_cmp(const void *a, const void *b)
{
    const member *x = a, *y = b;
    int c = strcmp(x->parent, y->parent);
    if (c == 0) c = x->row - y->row;
    return c ? c : strcmp(x->tp->in->name, y->tp->in->name);
}

static bool same_group(const member *a, const member *b)
{
    return a->row == b->row && strcmp(a->parent, b->parent) == 0;
}

static bool is_nvfp4(const ck_tensor_plan *tp)
{
    return tp->quantize && tp->how.qtype == QUANT_QTYPE_NVFP4;
}

/* "q_proj, k_proj, v_proj" or "gate_proj, up_proj" into buf. */
static const char *row_names(int row, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < row_size(row) && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", k ? ", " : "", fused_members[row][k]);
    return buf;
}

/* The first name of the group's row that no member has, or NULL when all are there. */
static const char *missing_member(const member *m, size_t n)
{
    for (int k = 0; k < row_size(m[0].row); k++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++) found = m[i].slot == k;
        if (!found) return fused_members[m[0].row][k];
    }
    return NULL;
}

/* A one-file run cannot see the members of an nvfp4 group that lie in other shards. */
static quant_ck_status partial_group(const member *nv, const member *m, size_t n,
                                     quant_ck_error *err)
{
    char names[64], shown[CK_SHORT_MAX];
    return quant_ck_fail(
        err, QUANT_CK_ERR_UNSUPPORTED,
        "tensor '%s' (rule %ld): the compressed-tensors layout cannot express this from one "
        "file: vLLM loads %s of module '%s' as one layer with one nvfp4 global scale, and "
        "%s is not in this file; if it lies in another shard of the checkpoint, the members "
        "cannot be given one global scale here: quantize the checkpoint directory (or a quantd "
        "job with a source path)",
        nv->tp->in->name, nv->tp->rule, row_names(nv->row, names, sizeof names),
        ck_short_text(nv->parent, shown, sizeof shown), missing_member(m, n));
}

/* One group m[0..n): refused when it mixes nvfp4 with anything else, or when the run is one file
 * and a member is missing; else linked (nvfp4). */
static quant_ck_status link_group(member *m, size_t n, bool whole, quant_ck_error *err)
{
    const member *nv = NULL, *other = NULL;
    for (size_t i = 0; i < n; i++) {
        if (is_nvfp4(m[i].tp))
            nv = nv ? nv : &m[i];
        else
            other = other ? other : &m[i];
    }
    if (!nv) return QUANT_CK_OK;
    if (other) {
        char names[64], shown[CK_SHORT_MAX];
        return quant_ck_fail(
            err, QUANT_CK_ERR_UNSUPPORTED,
            "tensor '%s' (rule %ld): the compressed-tensors layout cannot express this: vLLM "
            "loads %s of module '%s' as one layer with one scheme and one nvfp4 global scale, "
            "and '%s' is %s; quantize all of them with nvfp4, or none",
            nv->tp->in->name, nv->tp->rule, row_names(nv->row, names, sizeof names),
            ck_short_text(nv->parent, shown, sizeof shown), other->tp->in->name,
            other->tp->quantize ? "not nvfp4" : "not quantized");
    }
    if (!whole && missing_member(m, n)) return partial_group(nv, m, n, err);
    for (size_t i = 0; i < n; i++) m[i].tp->fuse_next = m[(i + 1) % n].tp;
    return QUANT_CK_OK;
}

quant_ck_status ck_ct_fuse_groups(ck_shard_plan *plans, size_t n_plans, bool whole,
                                  quant_ck_error *err)
{
    size_t total = 0, n = 0;
    for (size_t s = 0; s < n_plans; s++) total += plans[s].n;
    member *m = calloc(total ? total : 1, sizeof *m);
    bool nomem = m == NULL;
    for (size_t s = 0; !nomem && s < n_plans; s++)
        for (size_t i = 0; !nomem && i < plans[s].n; i++)
            if (as_member(&plans[s].t[i], &m[n], &nomem)) n++;
    quant_ck_status st =
        nomem ? quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory") : QUANT_CK_OK;
    if (st == QUANT_CK_OK) qsort(m, n, sizeof *m, member_cmp);
    for (size_t i = 0, j; st == QUANT_CK_OK && i < n; i = j) {
        for (j = i + 1; j < n && same_group(&m[i], &m[j]); j++) continue;
        st = link_group(m + i, j - i, whole, err);
    }
    for (size_t i = 0; m && i < n; i++) free(m[i].parent);
    free(m);
    return st;
}
