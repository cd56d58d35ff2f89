/*
 * rollback.c - `tfprov rollback STACK [--generation N]`: every generation
 * keeps the manifest it was applied from, so going back is applying that
 * manifest again (by default the last successful generation before the
 * current one). Generations are numbered per stack from 1, as `status`
 * and `show` list them. Artifacts come from the cache, so this works offline.
 * The signature policy is apply's (signature.c): the generation's manifest
 * must carry a trusted signature when one is required, the one apply kept
 * in the state dir when it verified it.
 */
#include "cli.h"
#include "kb.h"
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
	struct state_gen g;
	if (state_gen_rollback_target(c->st, sid, o->generation, &g) != 0 || g.id == 0) {
		state_gen_release(&g);
		ev_log(c, EV_ERROR, "no successful generation %s to roll back to",
		       o->generation ? "with that number" : "before the current one");
		return TF_EFAIL;
	}
	long long gen = g.number;
	const char *text = g.manifest_text, *path = g.manifest_path;

	struct diags d = {0};
	struct manifest *m = NULL;
	struct plan p;
	rc = manifest_load_buf(path, text, strlen(text), &m, &d);
	if (rc != 0) {
		diags_print(&d, stderr, 0);
		goto out;
	}
	/* The policy apply enforces, on the generation's bytes: exit 5 before any change. */
	rc = cli_check_signature_kept(c, m, gen);
	if (rc != 0)
		goto out;
	ev_log(c, EV_INFO, "Rolling %s back to generation %lld:", o->args.v[0], gen);
	plan_build(c, m, &p);
	plan_emit(c, &p);
	if (plan_has_changes(&p)) {
		char *q =
		    xasprintf("Do you want to roll %s back to generation %lld?\n  tfprov will "
		              "perform the actions described above.",
		              o->args.v[0], gen);
		struct why w = {0};
		rc = cli_confirm(c, "rollback", q) ? cli_say_why(c, plan_apply(c, m, &p, &w), &w)
		                                   : TF_EFAIL;
		free(q);
	}
	plan_release(&p);
out:
	diags_release(&d);
	manifest_free(m);
	state_gen_release(&g);
	return rc;
}
