/*-------------------------------------------------------------------------
 *
 * audit.h
 *		Redis held against PostgreSQL once a second, for every preheated
 *		campaign, whether or not its purchases reach the worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_AUDIT_H
#define SECKILL_AUDIT_H

#include "seckill.h"

extern long sk_audit_wait(void);
extern void sk_audit(void);

#endif							/* SECKILL_AUDIT_H */
