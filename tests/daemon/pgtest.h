/* pgtest.h -- a throwaway PostgreSQL for the daemon tests: one cluster per run of the test
 * binary (initdb and pg_ctl from Debian's postgresql package on a directory under /tmp, its Unix
 * socket in that directory and no TCP listener, run as the postgres user when the tests run as
 * root, since PostgreSQL refuses root), a fresh database per test case, libpq connection strings
 * for the tests, and the cluster stopped and removed at the end, also when the runner dies (a
 * watchdog process does it when the runner's end of a pipe closes).
 *
 * When PostgreSQL is not installed the PostgreSQL cases fail, naming what is missing: CI installs
 * it (scripts/install-deps). A developer may set QUANT_TEST_NO_POSTGRES=1 to leave those cases
 * out (the runner says so on stderr); QUANT_TEST_PG_BINDIR names the directory of initdb and
 * pg_ctl when they are not under /usr/lib/postgresql/VERSION/bin.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_PGTEST_H
#define QD_PGTEST_H

#include <stdbool.h>

/* In the runner, before the suites run: starts the cluster when a suite that needs it is
 * selected (CK_RUN_SUITE unset, "store", "store_pg" or "stats_store") and PostgreSQL cases are not
 * skipped. A failure is kept for the cases to report (qdt_pg_new_db fails them with it); nothing
 * exits. */
void qdt_pg_start(void);
/* In the runner, after the suites: stops the cluster and removes its directory. */
void qdt_pg_stop(void);
/* QUANT_TEST_NO_POSTGRES is set (and not "0"): the PostgreSQL cases are not registered. */
bool qdt_pg_skipped(void);

/* A new, empty database for the current case; its connection string (malloc'd, no password:
 * the cluster trusts its socket's local users). Fails the case when there is no cluster. */
char *qdt_pg_new_db(void);
/* The connection string of database db as user (NULL: the cluster's superuser), with extra
 * appended (keyword=value pairs; NULL: none); malloc'd. */
char *qdt_pg_conninfo(const char *db, const char *user, const char *extra);
/* Runs sql on the database of conninfo, failing the case on an error. */
void qdt_pg_exec(const char *conninfo, const char *sql);
/* The first column of the first row of sql as text ("" for NULL or no row; caller frees). */
char *qdt_pg_text(const char *conninfo, const char *sql);
/* The socket directory of the run's cluster (NULL when there is none). */
const char *qdt_pg_socket_dir(void);

#endif /* QD_PGTEST_H */
