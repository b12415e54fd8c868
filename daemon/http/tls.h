/* tls.h -- quantd's TLS credentials: the PEM certificate chain and private key (checked to
 * belong together), the GnuTLS priority string, reloading both files on SIGHUP without a
 * restart, and what libmicrohttpd needs to serve HTTPS with them.
 *
 * There is one qd_tls per process: libmicrohttpd's certificate callback
 * (gnutls_certificate_retrieve_function2) carries no user pointer, so it reaches the credentials
 * through a process-global pointer that qd_tls_open sets and qd_tls_free clears.
 *
 * Each load makes a "generation" (the chain, the key and what describe reports). A reload
 * builds a new generation and swaps it in atomically; handshakes that start afterwards use it.
 * The replaced generation may still be in use by a handshake in flight, so it is not freed
 * then but kept until qd_tls_free: a few KB per SIGHUP, never more.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_TLS_H
#define QD_TLS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct qd_tls qd_tls;

/* Files larger than this are refused (a certificate chain or key is a few KB). */
#define QD_TLS_MAX_FILE ((size_t)1 << 20)
/* qd_tls_log warns when the certificate expires within this many days (or has expired). */
#define QD_TLS_EXPIRY_WARN_DAYS 14
/* Size of the array qd_tls_mhd_options fills. */
#define QD_TLS_MHD_OPTIONS 3

/* Loads the PEM certificate chain (the server's certificate first, then each issuer in order)
 * and the unencrypted PEM private key (PKCS#8, or the RSA/EC forms); checks that the key belongs
 * to the first certificate; validates the GnuTLS priority string (NULL: libmicrohttpd's
 * default). Also checks that libmicrohttpd was built with TLS and the certificate callback.
 * err names the file or the setting and the problem, e.g. "cert.pem: no certificate found",
 * "key.pem: the key does not match the certificate in cert.pem", "[tls] priorities
 * (--tls-priorities): syntax error at 'XYZ'". The paths and the priority string are copied.
 * *out becomes the process's credentials (see above). */
qd_status qd_tls_open(const char *cert_path, const char *key_path, const char *priorities,
                      qd_tls **out, qd_err *err);
/* Re-reads both files (same paths). On success handshakes from now on use the new pair; on
 * failure nothing changes (the old pair stays in use) and err says why. Thread-safe. */
qd_status qd_tls_reload(qd_tls *t, qd_err *err);
/* Frees everything, every generation included. Call it only once the HTTP server has stopped
 * (no handshake may be running). NULL is a no-op. */
void qd_tls_free(qd_tls *t);

/* The current certificate for the log, written into buf (truncated to len):
 *   CN=localhost SANs=2 chain=1 not_after=2026-11-24T14:00:00Z
 * CN is "-" when the subject has none; SANs counts the subject alternative names; chain is the
 * number of certificates sent. */
void qd_tls_describe(const qd_tls *t, char *buf, size_t len);
/* Seconds until the current certificate expires (negative once it has expired). */
int64_t qd_tls_expires_in(const qd_tls *t);
/* The current key file was readable by group or others when it was read (it is used anyway;
 * qd_tls_log warns). */
bool qd_tls_key_exposed(const qd_tls *t);
/* Logs msg at info with tls=on, the files and the description, then a warning when the
 * certificate expires within QD_TLS_EXPIRY_WARN_DAYS days or has expired, and one when the key
 * file is readable by group or others. */
void qd_tls_log(const qd_tls *t, const char *msg);

/* For MHD_start_daemon: fills opts with the certificate callback and the priority string
 * (ended by MHD_OPTION_END, to pass as MHD_OPTION_ARRAY) and returns the flag to OR into the
 * daemon's flags (MHD_USE_TLS). When t is NULL (plain HTTP) opts holds only the end and the
 * flag is 0. The strings stay owned by t. */
unsigned qd_tls_mhd_options(const qd_tls *t, struct MHD_OptionItem opts[QD_TLS_MHD_OPTIONS]);

#endif /* QD_TLS_H */
