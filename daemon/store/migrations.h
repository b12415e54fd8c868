/* migrations.h -- the schema migrations compiled into quantd: migrations/NNNN_name.sql, embedded by
 * scripts/embed-migrations into $(BUILD)/gen/migrations.c. Entry i upgrades schema version i to
 * i + 1 (PRAGMA user_version); store_sqlite.c applies the pending ones at open.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_MIGRATIONS_H
#define QD_MIGRATIONS_H

typedef struct qd_migration {
    const char *name; /* "0001_init": the file name without .sql */
    const char *sql;  /* the file's text, run with sqlite3_exec inside the start-up transaction */
} qd_migration;

extern const qd_migration qd_migrations[];
extern const int qd_n_migrations;

/* The PostgreSQL engine's own: migrations/postgresql/NNNN_name.sql, embedded the same way into
 * $(BUILD)/gen/migrations_pg.c; entry i upgrades its schema version i to i + 1 (store_pg.c). */
extern const qd_migration qd_pg_migrations[];
extern const int qd_pg_n_migrations;

#endif /* QD_MIGRATIONS_H */
