/*
 * rollback.c - `tfprov rollback STACK [--generation N]`: every generation
 * keeps the manifest it was applied from, so going back is applying that
 * manifest again (by default the last successful generation before the
 * current one). Artifacts come from the cache, so this works offline.
 */
#include "cli.h"
#include "compat.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "plan.h"
#include "state.h"

#include <stdlib.h>
#include <string.h>

int cmd_rollback(struct ctx *c, struct opts *o)
{
	int64_t sid = 0;
	int rc = cli_stack_arg(c, o, "usage: tfprov rollback STACK [--generation N]", &sid);
	if (rc != 0)
		return rc;
	sqlite3_stmt *s = NULL;
	sqlite3_prepare_v2(
	    c->st->db,
	    "SELECT id, manifest_text, manifest_path FROM generations WHERE stack_id = ?1 "
	    "AND result = 'ok' AND (?2 > 0 AND id = ?2 OR ?2 = 0 AND id < (SELECT "
	    "current_gen FROM stacks WHERE id = ?1)) ORDER BY id DESC LIMIT 1",
	    -1, &s, NULL);
	sqlite3_bind_int64(s, 1, sid);
	sqlite3_bind_int64(s, 2, o->generation);
	if (sqlite3_step(s) != SQLITE_ROW) {
		sqlite3_finalize(s);
		ev_log(c, EV_ERROR, "no successful generation %s to roll back to",
		       o->generation ? "with that number" : "before the current one");
		return TF_EFAIL;
	}
	long long gen = sqlite3_column_int64(s, 0);
	char *text = xstrdup((const char *)sqlite3_column_text(s, 1));
	char *path = xstrdup((const char *)sqlite3_column_text(s, 2));
	sqlite3_finalize(s);

	struct diags d = {0};
	struct manifest *m = NULL;
	struct plan p;
	rc = manifest_load_buf(path, text, strlen(text), &m, &d);
	if (rc != 0) {
		diags_print(&d, stderr, 0);
		goto out;
	}
	ev_log(c, EV_INFO, "Rolling %s back to generation %lld:", o->args.v[0], gen);
	plan_build(c, m, &p);
	plan_emit(c, &p);
	if (plan_has_changes(&p))
		rc = plan_apply(c, m, &p);
	plan_release(&p);
out:
	diags_release(&d);
	manifest_free(m);
	free(text);
	free(path);
	return rc;
}
