/* write_gate.h -- one SQLite writer at a time in the process, in arrival order. The job store
 * and the statistics writer use the same database file from different connections; SQLite's
 * own lock is not fair (a busy connection polls while the stats writer, committing group after
 * group, takes the lock again at once), so every write transaction passes this ticket gate
 * first and waits its turn instead of timing out as "database is locked".
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_WRITE_GATE_H
#define QD_WRITE_GATE_H

void qd_write_gate_enter(void);
void qd_write_gate_leave(void);
/* Tickets taken and not yet done: the holder plus the writers waiting. */
unsigned long qd_write_gate_depth(void);

#endif /* QD_WRITE_GATE_H */
