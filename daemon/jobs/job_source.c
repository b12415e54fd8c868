/* job_source.c -- a job's input and pipeline options (job_source.h): where it reads from (an
 * upload from its own directory in DATA/uploads, so that messages name model.safetensors; a
 * server-side path confined below its source root), the options every run of it gets, and
 * planning it (before it is accepted, or for POST /v1/plans).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "job_source.h"
#include "jobs.h"

quant_ck_status qd_job_source_open(const qd_app *app, const qd_job *j, qd_job_source *src,
                                   quant_ck_error *ck)
{
    const qd_config *cfg = app->cfg;
    struct stat sb;
    qd_err err;
    *src = (qd_job_source){.dir_fd = AT_FDCWD, .in = NULL, .confined = false};
    if (strcmp(j->source_kind, "upload") == 0) { /* DATA/uploads/ID/model.safetensors */
        const char *base = strrchr(j->source_path, '/');
        char *dir = base ? strndup(j->source_path, (size_t)(base - j->source_path)) : NULL;
        src->dir_fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        free(dir);
        if (src->dir_fd < 0 || fstatat(src->dir_fd, base + 1, &sb, 0) != 0) {
            quant_ck_status st = quant_ck_fail(ck, QUANT_CK_ERR_IO, "%s: %s",
                                               base ? base + 1 : "upload", strerror(errno));
            if (src->dir_fd >= 0) close(src->dir_fd);
            src->dir_fd = AT_FDCWD;
            return st;
        }
        src->in = strdup(base + 1); /* messages name model.safetensors, not where it is kept */
        src->is_dir = S_ISDIR(sb.st_mode); /* a checkpoint job's inputs directory */
        return src->in ? QUANT_CK_OK : quant_ck_fail(ck, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    if (qd_source_locate(j->source_path, cfg->source_roots, cfg->n_source_roots, &src->dir_fd,
                         &src->in, NULL, &err) != QD_OK) {
        src->dir_fd = AT_FDCWD;
        return quant_ck_fail(ck, QUANT_CK_ERR_ACCESS, "%s", err.message);
    }
    src->confined = true;
    int fd = quant_open_beneath(src->dir_fd, src->in, O_RDONLY, ck);
    if (fd < 0) return ck->status;
    bool ok = fstat(fd, &sb) == 0;
    close(fd);
    src->is_dir = ok && S_ISDIR(sb.st_mode);
    return ok ? QUANT_CK_OK
              : quant_ck_fail(ck, QUANT_CK_ERR_IO, "%s: %s", src->in, strerror(errno));
}

void qd_job_source_close(qd_job_source *src)
{
    if (src->dir_fd >= 0) close(src->dir_fd);
    free(src->in);
    src->dir_fd = AT_FDCWD;
    src->in = NULL;
}

void qd_job_options(const qd_app *app, const qd_job *j, const qd_job_source *src,
                    quant_pipeline_options *o)
{
    quant_pipeline_options_init(o);
    quant_layout_parse(j->layout, &o->layout);
    o->threads =
        qd_jobs_threads(app->cfg->quant_threads, sysconf(_SC_NPROCESSORS_ONLN), app->cfg->workers);
    /* an upload lives in quantd's own data directory: nobody truncates it under the mapping */
    o->map_input = strcmp(j->source_kind, "upload") == 0;
    o->input_dir_fd = src->dir_fd;
    o->no_symlinks = src->confined;
    o->allow_static_acts = j->stats_model != NULL;
}

quant_ck_status qd_job_plan(const qd_app *app, const qd_job *j, bool stats_later, quant_plan **plan,
                            quant_ck_error *ck)
{
    *plan = NULL;
    quant_ruleset *rs = NULL;
    quant_ck_status st = quant_ruleset_parse(j->rules, strlen(j->rules), "job rules", &rs, ck);
    qd_job_source src = {.dir_fd = AT_FDCWD};
    if (st == QUANT_CK_OK) st = qd_job_source_open(app, j, &src, ck);
    if (st == QUANT_CK_OK) {
        quant_pipeline_options o;
        qd_job_options(app, j, &src, &o);
        o.allow_static_acts |= stats_later;
        st = quant_plan_path(rs, src.in, &o, plan, ck);
    }
    qd_job_source_close(&src);
    quant_ruleset_free(rs);
    return st;
}

char *qd_plan_unused_json(const quant_plan *plan)
{
    size_t n;
    const long *unused = quant_plan_unused_rules(plan, &n);
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(unused[i]));
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return text;
}
