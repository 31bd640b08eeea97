/*-------------------------------------------------------------------------
 *
 * sql.h
 *		How the files of store/ run their statements (store.c): inside
 *		store_begin/store_commit, or a backend's store_backend_spi_begin.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_STORE_SQL_H
#define SECKILL_STORE_SQL_H

#include "postgres.h"

#include "executor/spi.h"

/* Where results that outlive SPI_finish are allocated: see store_begin. */
extern MemoryContext store_caller_cxt;

extern SPIPlanPtr store_prepare(const char *sql, int nargs, Oid *types);
extern void store_run(const char *sql, int nargs, Oid *types, Datum *values, int expected);
extern void store_run_kept(const char *sql, int nargs, Oid *types, Datum *values, int expected);
extern int	store_setting_save(const char *name, const char *value);
extern void store_setting_restore(int level);

/* round_rows.c: a round's rows, for group_commit.c */
struct SkOrder;
extern bool store_count_sold(int64 campaign_id, int32 qty);
extern void store_insert_order_rows(const struct SkOrder *rows, const int *which, int n);

#endif							/* SECKILL_STORE_SQL_H */
