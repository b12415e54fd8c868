/* h_imatrix.c -- GET /v1/models/{model}/imatrix: a model's posted statistics as a llama.cpp
 * importance matrix (GGUF imatrix format), so that llama-quantize --imatrix, and any tool that
 * reads llama.cpp's imatrix files, can use what training jobs posted: each activation with
 * mean_sq (its average, as GET .../stats shows it, rounded to float32) becomes the weight of its
 * module path, named as GGUF names it (quant_imatrix_write). The file is built in the data
 * directory's tmp/, read back and removed before the answer.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "h_models.h"
#include "quant_imatrix.h"
#include "quant_srq.h"

#define IMATRIX_MAX (256u << 20) /* far above any model's: n_layers x 7 x hidden x 4 bytes */

/* The importance entries of the model's averages, through the library's SRQ engine (as a job's
 * weight_importance takes them); *srq keeps them alive. */
static quant_ck_status importance_of(const qd_stat_avg *avg, size_t n, quant_srq **srq,
                                     quant_pipeline_options *o, quant_ck_error *ck)
{
    quant_ruleset *none = NULL;
    quant_ck_status st = quant_ruleset_parse("[]", 2, "none", &none, ck);
    quant_act_stat *views = n ? qd_stat_views(avg, n) : NULL;
    if (st == QUANT_CK_OK && n && !views) st = quant_ck_fail(ck, QUANT_CK_ERR_NOMEM, "no memory");
    if (st == QUANT_CK_OK) st = quant_srq_compute(views, n, none, NULL, srq, ck);
    if (st == QUANT_CK_OK) {
        quant_pipeline_options_init(o);
        quant_srq_apply(*srq, o);
    }
    free(views);
    quant_ruleset_free(none);
    return st;
}

/* The file at `path` whole, then removed; NULL (and errno) on failure. */
static char *take_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    char *buf = NULL;
    if (fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size > 0 && sb.st_size <= IMATRIX_MAX &&
        (buf = malloc((size_t)sb.st_size)) && pread(fd, buf, (size_t)sb.st_size, 0) == sb.st_size) {
        *len = (size_t)sb.st_size;
    } else {
        free(buf);
        buf = NULL;
    }
    if (fd >= 0) close(fd);
    unlink(path);
    return buf;
}

static enum MHD_Result reply_file(qd_req *r, const char *model, char *buf, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(buf);
        return MHD_NO;
    }
    char disposition[128];
    snprintf(disposition, sizeof disposition, "attachment; filename=\"%s-imatrix.gguf\"", model);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(resp, "Content-Disposition", disposition);
    return qd_reply(r, MHD_HTTP_OK, resp);
}

static enum MHD_Result reply_imatrix(qd_req *r, const char *model, const qd_stat_avg *avg, size_t n)
{
    static atomic_ulong serial;
    quant_srq *srq = NULL;
    quant_pipeline_options o;
    quant_ck_error ck;
    quant_ck_status st = importance_of(avg, n, &srq, &o, &ck);
    enum MHD_Result ret;
    if (st == QUANT_CK_OK && o.n_importance == 0) {
        ret = qd_reply_ec(r, QD_EC_NOT_FOUND, "model",
                          "model '%s' has no mean_sq statistics: post mean_sq (the mean of "
                          "each input column's squared activations) to make an importance "
                          "matrix",
                          model);
    } else if (st != QUANT_CK_OK) {
        ret = qd_reply_ec(r, QD_EC_INVALID_SCALES, "model", "%s", ck.message);
    } else {
        char path[4200], dataset[128];
        snprintf(path, sizeof path, "%s/imatrix-%ld-%lu.gguf", r->app->tmp_dir, (long)getpid(),
                 atomic_fetch_add(&serial, 1));
        snprintf(dataset, sizeof dataset, "quantd model %s", model);
        size_t len = 0;
        char *buf = NULL;
        st = quant_imatrix_write(path, o.importance, o.n_importance, dataset, &ck);
        if (st == QUANT_CK_OK) buf = take_file(path, &len);
        if (st == QUANT_CK_ERR_ARG)
            ret = qd_reply_ec(r, QD_EC_INVALID_SCALES, "model", "%s", ck.message);
        else if (!buf) { /* ck names a server path: logged, not answered */
            qd_log(QD_LOG_ERROR, "writing an importance matrix failed", "error",
                   st == QUANT_CK_OK ? strerror(errno) : ck.message, NULL);
            ret = qd_reply_ec(r, QD_EC_INTERNAL, NULL, "cannot build the importance matrix");
        } else {
            ret = reply_file(r, model, buf, len);
        }
    }
    quant_srq_free(srq);
    return ret;
}

/* GET /v1/models/{model}/imatrix[?name=REGEX] */
enum MHD_Result qd_h_imatrix_get(qd_req *r)
{
    const char *model = qd_model_param(r);
    if (!model) return r->replied ? MHD_YES : MHD_NO;
    qd_stat_avg *avg = NULL;
    size_t n = 0;
    qd_err err;
    qd_status st = qd_stats_read(r->app->stats, model, qd_req_query(r, "name"), &avg, &n, &err);
    enum MHD_Result ret;
    if (st == QD_INVALID)
        ret = qd_reply_ec(r, QD_EC_INVALID, "name", "%s", err.message);
    else if (st != QD_OK)
        ret = qd_reply_store_error(r, st, &err);
    else
        ret = reply_imatrix(r, model, avg, n);
    qd_stat_avgs_free(avg, n);
    return ret;
}
