/* qdproc.h -- integration-test plumbing: start the real quantd ($QUANTD_BIN) on an ephemeral
 * loopback port with a temporary data directory, talk HTTP to it with libcurl, stop it with a
 * signal.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QDPROC_H
#define QDPROC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct qdp {
    char *root;     /* temporary directory (data dir is root/var) */
    char *data_dir; /* root/var */
    pid_t pid;
    int port;
    char base[64];       /* http://127.0.0.1:PORT, or https:// (qdp_start_tls) */
    const char *token;   /* when set, requests carry "Authorization: Bearer TOKEN" (borrowed) */
    const char *ca_file; /* HTTPS: the PEM certificate curl trusts (borrowed), else NULL */
} qdp;

/* Starts quantd with the given extra arguments (NULL-terminated, may be NULL) in a fresh
 * temporary root; fails the test if it does not listen within 20 s. */
void qdp_start(qdp *d, const char *const *extra);
/* The same over HTTPS: extra must hold --tls-cert/--tls-key; curl trusts ca_file (kept by the
 * caller) and checks the name 127.0.0.1 against it. */
void qdp_start_tls(qdp *d, const char *const *extra, const char *ca_file);
/* Starts it again on the same data directory (after qdp_kill/qdp_stop). */
void qdp_restart(qdp *d, const char *const *extra);
/* Sends sig and waits; returns the exit status (or 128 + signal). */
int qdp_signal(qdp *d, int sig);
/* Stops (SIGTERM, expecting exit 0) and removes the root. */
void qdp_stop(qdp *d);

typedef struct qdp_resp {
    long status;
    char *body; /* NUL-terminated */
    size_t len;
    char *headers; /* raw header block, names lower-cased */
} qdp_resp;

/* One request; body may be NULL. content_type NULL: none sent. extra_header: "Name: value" or
 * NULL. Returns the response (free with qdp_resp_free). */
qdp_resp qdp_req(qdp *d, const char *method, const char *path, const char *content_type,
                 const void *body, size_t len, const char *extra_header);
/* A bodiless request with two extra headers ("Name: value"). */
qdp_resp qdp_req_headers(qdp *d, const char *method, const char *path, const char *h1,
                         const char *h2);
/* Runs `quantd ARGS...` (a subcommand such as "token", "create", ...) on d's data directory and
 * waits for it; stdout (malloc'd, NUL-terminated) to *out when out is not NULL, stderr to
 * *errout likewise. Returns the exit status. */
int qdp_run(qdp *d, char **out, char **errout, const char *const *args);
/* POST of a file's bytes as application/octet-stream. */
qdp_resp qdp_upload(qdp *d, const char *path_and_query, const char *file);
/* The same; chunked: no Content-Length (Transfer-Encoding: chunked), so limits apply mid-way. */
qdp_resp qdp_upload_mode(qdp *d, const char *path_and_query, const char *file, bool chunked);
void qdp_resp_free(qdp_resp *r);
/* The value of header `name` (lower-case) in r, malloc'd, or NULL. */
char *qdp_header(const qdp_resp *r, const char *name);
/* The body as JSON (fails the test if not JSON). */
json_t *qdp_json(const qdp_resp *r);
/* Polls GET /v1/jobs/ID until its state is not receiving/queued/running (or timeout_s passes);
 * returns the job JSON. */
json_t *qdp_wait_job(qdp *d, long long id, double timeout_s);
/* GET /v1/jobs/ID, which must answer 200: the job's JSON (the caller decrefs). */
json_t *qdp_get_job(qdp *d, long long id);

/* Raw sockets, for what libcurl would normalize: a connection to d (fails the test when it
 * cannot be made), and every byte of p sent (false when the server closed or failed). */
int qdp_raw_connect(const qdp *d);
bool qdp_send_all(int fd, const void *p, size_t n);
/* Polls until the job's state equals `state`; returns the job JSON. */
json_t *qdp_wait_state(qdp *d, long long id, const char *state, double timeout_s);

/* Starts quantd like qdp_start, in a fresh root, expecting it to refuse to start: fails the
 * test if it listens or still runs after 20 s. Returns its exit status (or 128 + signal) and,
 * when log is not NULL, what it logged (malloc'd). d->pid is 0 after; qdp_stop(d) removes the
 * root. */
int qdp_start_fail(qdp *d, const char *const *extra, char **log);

#endif /* QDPROC_H */
