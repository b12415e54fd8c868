/* tls.c -- quantd's TLS credentials: reading the PEM files (capped, key permissions noted),
 * the chain and key as GnuTLS needs them in a handshake, the check that they belong together,
 * the priority string's validation, generations swapped atomically on reload, and
 * libmicrohttpd's certificate callback that hands out the current one.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "tls.h"

/* One load of the two files; immutable once published. */
typedef struct gen {
    gnutls_pcert_st *certs; /* the chain, server's certificate first */
    unsigned n_certs;
    gnutls_privkey_t key;
    int64_t not_after; /* unix seconds, of the first certificate */
    char cn[128];      /* its subject CN, or "-" */
    unsigned n_san;
    bool key_exposed;  /* the key file was readable by group or others */
    struct gen *older; /* the generation this one replaced (kept until qd_tls_free) */
} gen;

struct qd_tls {
    char *cert_path, *key_path, *priorities;
    gen *_Atomic cur;
    pthread_mutex_t reload_lock; /* one reload at a time */
};

/* The credentials the certificate callback hands out (see tls.h: one qd_tls per process). */
static qd_tls *_Atomic process_tls;

/* ---- files ------------------------------------------------------------------------------------
 */

static qd_status read_all(int fd, const char *path, size_t size, gnutls_datum_t *out, qd_err *err)
{
    unsigned char *buf = malloc(size + 1);
    if (!buf) return qd_fail(err, QD_NOMEM, "out of memory");
    size_t got = 0;
    while (got < size) {
        ssize_t k = read(fd, buf + got, size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            free(buf);
            return qd_fail(err, QD_IO, "%s: %s", path, strerror(errno));
        }
        if (k == 0) break;
        got += (size_t)k;
    }
    buf[got] = '\0';
    out->data = buf;
    out->size = (unsigned)got;
    return QD_OK;
}

/* The whole file (at most QD_TLS_MAX_FILE bytes); *exposed (may be NULL): readable by group or
 * others. */
static qd_status read_pem(const char *path, gnutls_datum_t *out, bool *exposed, qd_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qd_fail(err, QD_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    qd_status rc = QD_OK;
    if (fstat(fd, &st) != 0)
        rc = qd_fail(err, QD_IO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = qd_fail(err, QD_INVALID, "%s: not a regular file", path);
    else if ((uint64_t)st.st_size > QD_TLS_MAX_FILE)
        rc = qd_fail(err, QD_INVALID, "%s: larger than %zu bytes, not a PEM file", path,
                     QD_TLS_MAX_FILE);
    else
        rc = read_all(fd, path, (size_t)st.st_size, out, err);
    if (rc == QD_OK && exposed) *exposed = (st.st_mode & (S_IRGRP | S_IROTH)) != 0;
    close(fd);
    return rc;
}

static void wipe_free(gnutls_datum_t *d)
{
    if (d->data) gnutls_memset(d->data, 0, d->size);
    free(d->data);
    d->data = NULL;
}

/* ---- a generation -----------------------------------------------------------------------------
 */

static void gen_free(gen *g)
{
    while (g) {
        gen *older = g->older;
        for (unsigned i = 0; i < g->n_certs; i++) gnutls_pcert_deinit(&g->certs[i]);
        free(g->certs);
        if (g->key) gnutls_privkey_deinit(g->key);
        free(g);
        g = older;
    }
}

static unsigned count_sans(gnutls_x509_crt_t crt)
{
    unsigned n = 0;
    for (;; n++) {
        char buf[512];
        size_t size = sizeof buf;
        int rc = gnutls_x509_crt_get_subject_alt_name(crt, n, buf, &size, NULL);
        if (rc < 0 && rc != GNUTLS_E_SHORT_MEMORY_BUFFER) return n;
    }
}

static void cert_info(gen *g, gnutls_x509_crt_t crt)
{
    size_t size = sizeof g->cn;
    if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, g->cn, &size) < 0)
        snprintf(g->cn, sizeof g->cn, "-");
    g->n_san = count_sans(crt);
    g->not_after = (int64_t)gnutls_x509_crt_get_expiration_time(crt);
}

static qd_status chain_error(const char *path, int rc, qd_err *err)
{
    if (rc == GNUTLS_E_NO_CERTIFICATE_FOUND)
        return qd_fail(err, QD_INVALID, "%s: no certificate found", path);
    if (rc == GNUTLS_E_CERTIFICATE_LIST_UNSORTED)
        return qd_fail(err, QD_INVALID,
                       "%s: the certificates are out of order (the server's first, then each "
                       "issuer)",
                       path);
    return qd_fail(err, QD_INVALID, "%s: not a PEM certificate chain (%s)", path,
                   gnutls_strerror(rc));
}

static qd_status load_chain(gen *g, const char *path, qd_err *err)
{
    gnutls_datum_t pem = {NULL, 0};
    qd_status st = read_pem(path, &pem, NULL, err);
    if (st != QD_OK) return st;
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    int rc = gnutls_x509_crt_list_import2(&crts, &n, &pem, GNUTLS_X509_FMT_PEM,
                                          GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED);
    free(pem.data);
    if (rc == 0 && n == 0) rc = GNUTLS_E_NO_CERTIFICATE_FOUND;
    if (rc < 0) return chain_error(path, rc, err);
    cert_info(g, crts[0]);
    g->certs = calloc(n, sizeof *g->certs);
    if (!g->certs) st = qd_fail(err, QD_NOMEM, "out of memory");
    unsigned imported = n;
    if (st == QD_OK && (rc = gnutls_pcert_import_x509_list(g->certs, crts, &imported, 0)) < 0)
        st = qd_fail(err, QD_INVALID, "%s: %s", path, gnutls_strerror(rc));
    if (st == QD_OK) g->n_certs = imported;
    for (unsigned i = 0; i < n; i++) gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    return st;
}

static qd_status load_key(gen *g, const char *path, qd_err *err)
{
    gnutls_datum_t pem = {NULL, 0};
    qd_status st = read_pem(path, &pem, &g->key_exposed, err);
    if (st != QD_OK) return st;
    int rc = gnutls_privkey_init(&g->key);
    if (rc == 0) rc = gnutls_privkey_import_x509_raw(g->key, &pem, GNUTLS_X509_FMT_PEM, NULL, 0);
    wipe_free(&pem);
    if (rc < 0)
        return qd_fail(err, QD_INVALID, "%s: not an unencrypted PEM private key (%s)", path,
                       gnutls_strerror(rc));
    return QD_OK;
}

/* The SHA-256 key id of the key's public half equals the first certificate's. */
static qd_status check_match(gen *g, const char *cert_path, const char *key_path, qd_err *err)
{
    unsigned char a[64], b[64];
    size_t na = sizeof a, nb = sizeof b;
    gnutls_pubkey_t pub = NULL;
    int rc = gnutls_pubkey_init(&pub);
    if (rc == 0) rc = gnutls_pubkey_import_privkey(pub, g->key, 0, 0);
    if (rc == 0) rc = gnutls_pubkey_get_key_id(pub, GNUTLS_KEYID_USE_SHA256, a, &na);
    if (rc == 0) rc = gnutls_pubkey_get_key_id(g->certs[0].pubkey, GNUTLS_KEYID_USE_SHA256, b, &nb);
    if (pub) gnutls_pubkey_deinit(pub);
    if (rc < 0) return qd_fail(err, QD_INVALID, "%s: %s", key_path, gnutls_strerror(rc));
    if (na != nb || memcmp(a, b, na) != 0)
        return qd_fail(err, QD_INVALID, "%s: the key does not match the certificate in %s",
                       key_path, cert_path);
    return QD_OK;
}

static qd_status gen_load(const char *cert_path, const char *key_path, gen **out, qd_err *err)
{
    gen *g = calloc(1, sizeof *g);
    if (!g) return qd_fail(err, QD_NOMEM, "out of memory");
    qd_status st = load_chain(g, cert_path, err);
    if (st == QD_OK) st = load_key(g, key_path, err);
    if (st == QD_OK) st = check_match(g, cert_path, key_path, err);
    if (st != QD_OK) {
        gen_free(g);
        return st;
    }
    *out = g;
    return QD_OK;
}

/* ---- open, reload, free -----------------------------------------------------------------------
 */

static qd_status check_priorities(const char *priorities, qd_err *err)
{
    if (!priorities) return QD_OK;
    gnutls_priority_t cache;
    const char *pos = NULL;
    int rc = gnutls_priority_init(&cache, priorities, &pos);
    if (rc == 0) {
        gnutls_priority_deinit(cache);
        return QD_OK;
    }
    if (rc == GNUTLS_E_INVALID_REQUEST && pos) {
        int n = (int)strcspn(pos, ":");
        return qd_fail(err, QD_INVALID,
                       "[tls] priorities (--tls-priorities): syntax error at '%.*s'",
                       n > 64 ? 64 : n, pos);
    }
    return qd_fail(err, QD_INVALID, "[tls] priorities (--tls-priorities): %s", gnutls_strerror(rc));
}

static qd_status check_mhd(qd_err *err)
{
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES &&
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) == MHD_YES)
        return QD_OK;
    return qd_fail(err, QD_INVALID,
                   "libmicrohttpd %s was built without HTTPS or without its certificate "
                   "callback: quantd cannot serve TLS with it",
                   MHD_get_version());
}

static qd_tls *tls_new(const char *cert_path, const char *key_path, const char *priorities)
{
    qd_tls *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cert_path = strdup(cert_path);
    t->key_path = strdup(key_path);
    t->priorities = priorities ? strdup(priorities) : NULL;
    pthread_mutex_init(&t->reload_lock, NULL);
    if (!t->cert_path || !t->key_path || (priorities && !t->priorities)) {
        qd_tls_free(t);
        return NULL;
    }
    return t;
}

qd_status qd_tls_open(const char *cert_path, const char *key_path, const char *priorities,
                      qd_tls **out, qd_err *err)
{
    qd_status st = check_mhd(err);
    if (st == QD_OK) st = check_priorities(priorities, err);
    gen *g = NULL;
    if (st == QD_OK) st = gen_load(cert_path, key_path, &g, err);
    if (st != QD_OK) return st;
    qd_tls *t = tls_new(cert_path, key_path, priorities);
    if (!t) {
        gen_free(g);
        return qd_fail(err, QD_NOMEM, "out of memory");
    }
    atomic_store(&t->cur, g);
    atomic_store(&process_tls, t);
    *out = t;
    return QD_OK;
}

qd_status qd_tls_reload(qd_tls *t, qd_err *err)
{
    gen *g = NULL;
    qd_status st = gen_load(t->cert_path, t->key_path, &g, err);
    if (st != QD_OK) return st;
    pthread_mutex_lock(&t->reload_lock);
    g->older = atomic_load(&t->cur); /* a handshake in flight may still use it */
    atomic_store(&t->cur, g);
    pthread_mutex_unlock(&t->reload_lock);
    return QD_OK;
}

void qd_tls_free(qd_tls *t)
{
    if (!t) return;
    qd_tls *expected = t;
    atomic_compare_exchange_strong(&process_tls, &expected, NULL);
    gen_free(atomic_load(&t->cur));
    pthread_mutex_destroy(&t->reload_lock);
    free(t->cert_path);
    free(t->key_path);
    free(t->priorities);
    free(t);
}

/* ---- what the log shows -----------------------------------------------------------------------
 */

void qd_tls_describe(const qd_tls *t, char *buf, size_t len)
{
    const gen *g = atomic_load(&((qd_tls *)t)->cur);
    char when[32] = "?";
    time_t na = (time_t)g->not_after;
    struct tm tm;
    if (gmtime_r(&na, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(buf, len, "CN=%s SANs=%u chain=%u not_after=%s", g->cn, g->n_san, g->n_certs, when);
}

int64_t qd_tls_expires_in(const qd_tls *t)
{
    const gen *g = atomic_load(&((qd_tls *)t)->cur);
    return g->not_after - (int64_t)time(NULL);
}

bool qd_tls_key_exposed(const qd_tls *t)
{
    const gen *g = atomic_load(&((qd_tls *)t)->cur);
    return g->key_exposed;
}

void qd_tls_log(const qd_tls *t, const char *msg)
{
    char desc[256], days[32];
    qd_tls_describe(t, desc, sizeof desc);
    qd_log(QD_LOG_INFO, msg, "tls", "on", "cert", t->cert_path, "key", t->key_path, "certificate",
           desc, NULL);
    int64_t left = qd_tls_expires_in(t);
    if (left < (int64_t)QD_TLS_EXPIRY_WARN_DAYS * 86400) {
        snprintf(days, sizeof days, "%.1f", (double)left / 86400.0);
        qd_log(QD_LOG_WARN,
               left < 0 ? "tls certificate has expired" : "tls certificate expires soon", "cert",
               t->cert_path, "expires_in_days", days, NULL);
    }
    if (qd_tls_key_exposed(t))
        qd_log(QD_LOG_WARN, "tls key file is readable by group or others (chmod 600 it)", "key",
               t->key_path, NULL);
}

/* ---- libmicrohttpd ----------------------------------------------------------------------------
 */

/* gnutls_certificate_retrieve_function2: the current generation, for every handshake. */
static int retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                    const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                    gnutls_pcert_st **pcert, unsigned int *pcert_length, gnutls_privkey_t *privkey)
{
    (void)session, (void)req_ca_rdn, (void)nreqs, (void)pk_algos, (void)pk_algos_length;
    qd_tls *t = atomic_load(&process_tls);
    if (!t) return -1;
    gen *g = atomic_load(&t->cur);
    *pcert = g->certs;
    *pcert_length = g->n_certs;
    *privkey = g->key;
    return 0;
}

unsigned qd_tls_mhd_options(const qd_tls *t, struct MHD_OptionItem opts[QD_TLS_MHD_OPTIONS])
{
    size_t i = 0;
    if (t) {
        /* MHD_OPTION_ARRAY carries the callback in ptr_value; ISO C has no cast from a function
         * pointer to void *, so its bytes are copied */
        gnutls_certificate_retrieve_function2 *fn = retrieve;
        void *p;
        _Static_assert(sizeof fn == sizeof p, "a function pointer fits in void *");
        memcpy(&p, &fn, sizeof p);
        opts[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0, p};
        if (t->priorities)
            opts[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, t->priorities};
    }
    opts[i] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return t ? (unsigned)MHD_USE_TLS : 0u;
}
