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
    ck_tensor_plan *tp;
} member;

/* The fused_members row of a leaf module name, or -1. */
static int fused_row(const char *leaf)
{
    for (int r = 0; r < N_FUSED; r++)
        for (int k = 0; k < 4 && fused_members[r][k]; k++)
            if (strcmp(leaf, fused_members[r][k]) == 0) return r;
    return -1;
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
    int row = fused_row(leaf);
    if (row < 0) return false;
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

/* One group m[0..n): refused when it mixes nvfp4 with anything else, else linked (nvfp4). */
static quant_ck_status link_group(member *m, size_t n, quant_ck_error *err)
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
        const char *const *names = fused_members[nv->row];
        char shown[CK_SHORT_MAX];
        return quant_ck_fail(
            err, QUANT_CK_ERR_UNSUPPORTED,
            "tensor '%s' (rule %ld): the compressed-tensors layout cannot express this: vLLM "
            "loads %s, %s%s%s of module '%s' as one layer with one scheme and one nvfp4 global "
            "scale, and '%s' is %s; quantize all of them with nvfp4, or none",
            nv->tp->in->name, nv->tp->rule, names[0], names[1], names[2] ? ", " : "",
            names[2] ? names[2] : "", ck_short_text(nv->parent, shown, sizeof shown),
            other->tp->in->name, other->tp->quantize ? "not nvfp4" : "not quantized");
    }
    for (size_t i = 0; i < n; i++) m[i].tp->fuse_next = m[(i + 1) % n].tp;
    return QUANT_CK_OK;
}

quant_ck_status ck_ct_fuse_groups(ck_shard_plan *plans, size_t n_plans, quant_ck_error *err)
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
        st = link_group(m + i, j - i, err);
    }
    for (size_t i = 0; m && i < n; i++) free(m[i].parent);
    free(m);
    return st;
}
