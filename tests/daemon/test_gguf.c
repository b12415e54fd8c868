/* test_gguf.c -- the gguf suite: gguf-layout jobs through the real quantd. A rule set with a
 * gguf_mix is stored and read back with it; a job on a server-side GGUF file succeeds and lists
 * one output, model.gguf, which downloads (as itself and in outputs.tar) as a GGUF whose tensors
 * have the mix's types; a rule GGUF cannot hold is refused when the job is asked for (422 naming
 * the rule and the nearest type), as is an uploaded safetensors shard.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdproc.h"
#include "qdtest.h"
#include "quant_gguf.h"
#include "quant_imatrix.h"

#define ROW 256

/* A 1-layer Llama GGUF (F32) at `path`: token_embd, one attn_q, one norm. */
static void make_gguf(const char *path)
{
    quant_gguf_writer *w;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_writer_new(path, &w, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_writer_set_string(w, "general.architecture", "llama", &err), 0);
    ck_assert_int_eq(quant_gguf_writer_set_u32(w, "llama.block_count", 1, &err), 0);
    int64_t ne2[2] = {ROW, 8}, ne1[1] = {ROW};
    ck_assert_int_eq(
        quant_gguf_writer_add_tensor(w, "token_embd.weight", 2, ne2, QUANT_GGML_F32, NULL, &err),
        0);
    ck_assert_int_eq(
        quant_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", 2, ne2, QUANT_GGML_F32, NULL, &err),
        0);
    ck_assert_int_eq(quant_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 1, ne1,
                                                  QUANT_GGML_F32, NULL, &err),
                     0);
    ck_assert_int_eq(quant_gguf_writer_begin(w, &err), QUANT_CK_OK);
    float x[ROW * 8];
    for (int i = 0; i < ROW * 8; i++) x[i] = (float)((i * 37) % 101 - 50) / 64.0f;
    ck_assert_int_eq(quant_gguf_writer_write(w, x, sizeof x, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_write(w, x, sizeof x, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_write(w, x, ROW * 4, &err), 0);
    ck_assert_int_eq(quant_gguf_writer_commit(w, &err), QUANT_CK_OK);
    quant_gguf_writer_free(w);
}

static qdp_resp post_json(qdp *d, const char *path, const char *body)
{
    return qdp_req(d, "POST", path, "application/json", body, strlen(body), NULL);
}

START_TEST(test_gguf_path_job)
{
    char *src = qdt_tmpdir(), *model = kit_join(src, "model-f32.gguf");
    make_gguf(model);
    qdp d;
    qdp_start(&d, (const char *[]){"--source-root", src, "--workers", "1", NULL});
    const char *rs = "{\"gguf_mix\":\"Q8_0\",\"rules\":[]}";
    qdp_resp r = qdp_req(&d, "PUT", "/v1/rulesets/q8", "application/json", rs, strlen(rs), NULL);
    ck_assert_msg(r.status == 201 && strstr(r.body, "\"gguf_mix\":\"Q8_0\""), "%ld %s", r.status,
                  r.body);
    qdp_resp_free(&r);
    char body[4400];
    snprintf(body, sizeof body,
             "{\"ruleset\":\"q8\",\"layout\":\"gguf\",\"source\":{\"path\":\"%s\"}}", model);
    r = post_json(&d, "/v1/jobs", body);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    long long id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    qdp_resp_free(&r);
    j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_t *outs = json_object_get(j, "outputs");
    ck_assert_uint_eq(json_array_size(outs), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(outs, 0), "name")),
                     "model.gguf");
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs/model.gguf", id);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    quant_gguf_file *g;
    quant_ck_error err;
    ck_assert_int_eq(quant_gguf_open_buffer(r.body, r.len, "model.gguf", &g, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, QUANT_GGML_Q8_0);
    ck_assert_int_eq(quant_gguf_find_tensor(g, "blk.0.attn_norm.weight")->type, QUANT_GGML_F32);
    quant_gguf_close(g);
    qdp_resp_free(&r);
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs.tar", id);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(memmem(r.body, r.len, "model.gguf", 10));
    qdp_resp_free(&r);

    /* refused when asked for: a qtype GGUF cannot hold */
    snprintf(body, sizeof body,
             "{\"rules\":[{\"module_path\":\".*attn_q\",\"weight_qtype\":\"int8\"}],"
             "\"layout\":\"gguf\",\"source\":{\"path\":\"%s\"}}",
             model);
    r = post_json(&d, "/v1/jobs", body);
    ck_assert_msg(r.status == 422 && strstr(r.body, "GGUF cannot hold int8") &&
                      strstr(r.body, "q8_0") && !strstr(r.body, src),
                  "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
    free(model);
}
END_TEST

/* GET /v1/models/{m}/imatrix: the posted mean_sq as a llama.cpp imatrix, GGUF names, the
 * averages exact; a model without mean_sq and an unknown model answer 404. */
START_TEST(test_imatrix_export)
{
    qdp d;
    qdp_start(&d, NULL);
    const char *post =
        "{\"stats\": {\"model/layers/0/self_attn/q_proj/dot_general0_lhs\": "
        "{\"mean_sq\": [1.5, 0.25, 4]}, \"blk/1/ffn_down/x\": {\"mean_sq\": [2, 6]}}}";
    qdp_resp r = post_json(&d, "/v1/models/m/stats", post);
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    r = post_json(&d, "/v1/models/m/stats",
                  "{\"stats\": {\"model/layers/0/self_attn/q_proj/"
                  "dot_general0_lhs\": {\"mean_sq\": [0.5, 0.75, 2]}}}");
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/v1/models/m/imatrix", NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    char *cd = qdp_header(&r, "content-disposition");
    ck_assert_ptr_nonnull(strstr(cd, "m-imatrix.gguf"));
    free(cd);
    char *file = kit_join(d.root, "m-imatrix.gguf");
    FILE *f = fopen(file, "wb");
    ck_assert_uint_eq(fwrite(r.body, 1, r.len, f), r.len);
    fclose(f);
    qdp_resp_free(&r);
    quant_imatrix *m;
    quant_ck_error err;
    ck_assert_int_eq(quant_imatrix_load(file, &m, &err), QUANT_CK_OK);
    size_t n;
    const quant_importance *e = quant_imatrix_entries(m, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(e[0].act, "blk.0.attn_q.weight");
    ck_assert(e[0].n == 3 && e[0].w[0] == 1.0f && e[0].w[1] == 0.5f && e[0].w[2] == 3.0f);
    ck_assert_str_eq(e[1].act, "blk.1.ffn_down.weight");
    quant_imatrix_free(m);
    free(file);
    r = post_json(&d, "/v1/models/plain/stats", "{\"stats\": {\"a/b\": {\"absmax\": 1}}}");
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/v1/models/plain/imatrix", NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 404 && strstr(r.body, "no mean_sq"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    r = qdp_req(&d, "GET", "/v1/models/nope/imatrix", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 404);
    qdp_resp_free(&r);
    qdp_stop(&d);
}
END_TEST

Suite *suite_gguf(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("gguf");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gguf_path_job);
    tcase_add_test(tc, test_imatrix_export);
    suite_add_tcase(s, tc);
    return s;
}
