/*
 * state_image.c - a state database sealed to go into a container image
 * (cli/image.c): the same stack, files and generations an apply recorded,
 * with every time set to the image's epoch (SOURCE_DATE_EPOCH), the
 * manifest's host path replaced by the path given, and what belongs to the
 * build machine (the journal, benchmark results) dropped, then rebuilt by
 * VACUUM so that the bytes of the file depend on its rows only, not on the
 * order they were written in. Two builds of one manifest thus give the same
 * state.db, and `tfprov status` / `verify` inside the image compare the
 * files' mtimes against the epoch the image's layers carry.
 */
#include "state.h"

#include "error.h"
#include "state_private.h"
#include "util.h"

int state_image_seal(struct state *st, int64_t epoch, const char *manifest_path)
{
	static const char *const sql[] = {
	    "UPDATE stacks SET created = ?1, updated = ?1, manifest_path = ?2",
	    "UPDATE generations SET started = ?1, finished = ?1, manifest_path = ?2",
	    "UPDATE resources SET updated = ?1",
	    "UPDATE files SET mtime_ns = ?1 * 1000000000",
	    "DELETE FROM journal",
	    "DELETE FROM bench_results",
	};
	struct state_stmt *q = NULL;
	int rc = state_begin(st);
	for (size_t i = 0; rc == 0 && i < ARRAY_SIZE(sql); i++) {
		rc = state_prepare(st, sql[i], &q);
		if (rc == 0 && i < 4)
			rc = state_bind_int64(q, 1, epoch);
		if (rc == 0 && i < 2)
			rc = state_bind_text(q, 2, manifest_path);
		if (rc == 0)
			rc = state_run(q);
		else
			state_finalize(q);
		q = NULL;
	}
	if (rc == 0)
		rc = state_commit(st);
	else
		state_rollback(st);
	if (rc == 0)
		rc = state_exec(st, "VACUUM; PRAGMA wal_checkpoint(TRUNCATE);");
	return rc;
}
