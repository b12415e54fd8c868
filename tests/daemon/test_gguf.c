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

Suite *suite_gguf(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("gguf");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gguf_path_job);
    suite_add_tcase(s, tc);
    return s;
}
