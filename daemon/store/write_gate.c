/* write_gate.c -- a ticket lock: each writer takes the next ticket and waits until it is served,
 * so writers enter in the order they arrived.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <stdint.h>

#include "write_gate.h"

static struct {
    pthread_mutex_t mu;
    pthread_cond_t turn;
    uint64_t next, serving;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

void qd_write_gate_enter(void)
{
    pthread_mutex_lock(&gate.mu);
    uint64_t ticket = gate.next++;
    while (gate.serving != ticket) pthread_cond_wait(&gate.turn, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
}

void qd_write_gate_leave(void)
{
    pthread_mutex_lock(&gate.mu);
    gate.serving++;
    pthread_cond_broadcast(&gate.turn);
    pthread_mutex_unlock(&gate.mu);
}

unsigned long qd_write_gate_depth(void)
{
    pthread_mutex_lock(&gate.mu);
    unsigned long d = (unsigned long)(gate.next - gate.serving);
    pthread_mutex_unlock(&gate.mu);
    return d;
}
