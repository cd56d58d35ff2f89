/*
 * state_bench.c - the bench_results table: one row per benchmark run.
 *
 * Rows outlive their stack (stack_id is set NULL when the stack is
 * destroyed) so a history survives a reinstall.
 */
#include "error.h"
#include "state_private.h"
#include "util.h"

#include <sqlite3.h>

int state_bench_add(struct state *st, int64_t stack_id, const struct state_bench_row *r)
{
	sqlite3_stmt *s = NULL;
	int rc = TF_ESTATE;
	if (sqlite3_prepare_v2(
	        st->db,
	        "INSERT INTO bench_results(stack_id, at, gpu, precision, ms_per_step, "
	        "images_per_sec, tf_version, cuda_version, cudnn_version, source, raw) "
	        "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
	        -1, &s, NULL) != SQLITE_OK)
		goto out;
	if (sqlite3_bind_int64(s, 1, stack_id) != SQLITE_OK ||
	    sqlite3_bind_int64(s, 2, r->at ? r->at : now_unix()) != SQLITE_OK ||
	    sqlite3_bind_text(s, 3, r->gpu, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(s, 4, r->precision, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_double(s, 5, r->ms) != SQLITE_OK ||
	    sqlite3_bind_double(s, 6, r->ips) != SQLITE_OK ||
	    sqlite3_bind_text(s, 7, r->tf, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(s, 8, r->cuda, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(s, 9, r->cudnn, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(s, 10, r->source, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(s, 11, r->raw, -1, SQLITE_STATIC) != SQLITE_OK)
		goto out;
	if (sqlite3_step(s) == SQLITE_DONE)
		rc = 0;
out:
	sqlite3_finalize(s);
	return rc;
}

static const char *col_text(sqlite3_stmt *s, int i)
{
	return (const char *)sqlite3_column_text(s, i);
}

int state_bench_each(struct state *st, const char *stack,
                     int (*fn)(void *arg, const struct state_bench_row *r), void *arg)
{
	sqlite3_stmt *s = NULL;
	int rc = TF_ESTATE, step;
	if (sqlite3_prepare_v2(st->db,
	                       "SELECT b.at, s.name, b.source, b.precision, b.gpu, b.ms_per_step, "
	                       "b.images_per_sec, b.tf_version, b.cuda_version, b.cudnn_version "
	                       "FROM bench_results b LEFT JOIN stacks s ON s.id = b.stack_id "
	                       "WHERE ?1 IS NULL OR s.name = ?1 ORDER BY b.id",
	                       -1, &s, NULL) != SQLITE_OK)
		goto out;
	if (stack && sqlite3_bind_text(s, 1, stack, -1, SQLITE_STATIC) != SQLITE_OK)
		goto out;
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		struct state_bench_row r = {
		    .at = sqlite3_column_int64(s, 0),
		    .stack = col_text(s, 1),
		    .source = col_text(s, 2),
		    .precision = col_text(s, 3),
		    .gpu = col_text(s, 4),
		    .ms = sqlite3_column_double(s, 5),
		    .ips = sqlite3_column_double(s, 6),
		    .tf = col_text(s, 7),
		    .cuda = col_text(s, 8),
		    .cudnn = col_text(s, 9),
		};
		int r2 = fn(arg, &r);
		if (r2 != 0) {
			rc = r2;
			goto out;
		}
	}
	if (step == SQLITE_DONE)
		rc = 0;
out:
	sqlite3_finalize(s);
	return rc;
}
