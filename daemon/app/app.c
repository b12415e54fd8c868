/* app.c -- the data directory's layout: DATA/tmp (uploads streaming in; emptied at start),
 * DATA/uploads (validated uploads), DATA/jobs/ID/output (published outputs).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fsutil.h"

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

qd_status qd_app_dirs(qd_app *app, qd_err *err)
{
    const char *data = app->cfg->data_dir;
    app->uploads_dir = join(data, "uploads");
    app->jobs_dir = join(data, "jobs");
    app->tmp_dir = join(data, "tmp");
    if (!app->uploads_dir || !app->jobs_dir || !app->tmp_dir)
        return qd_fail(err, QD_NOMEM, "out of memory");
    qd_status st = qd_mkdir(data, 0700, err);
    if (st == QD_OK) st = qd_rmtree(app->tmp_dir, err); /* uploads cut off by a stop */
    if (st == QD_OK) st = qd_mkdir(app->tmp_dir, 0700, err);
    if (st == QD_OK) st = qd_mkdir(app->uploads_dir, 0700, err);
    if (st == QD_OK) st = qd_mkdir(app->jobs_dir, 0700, err);
    return st;
}

void qd_app_dirs_free(qd_app *app)
{
    free(app->uploads_dir);
    free(app->jobs_dir);
    free(app->tmp_dir);
    app->uploads_dir = app->jobs_dir = app->tmp_dir = NULL;
}

char *qd_app_job_dir(const qd_app *app, int64_t id)
{
    char name[24];
    snprintf(name, sizeof name, "%lld", (long long)id);
    return join(app->jobs_dir, name);
}
