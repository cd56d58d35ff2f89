/* plan.c - `tfprov plan MANIFEST`: what apply would do; reads only. */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "plan.h"

int cmd_plan(struct ctx *c, struct opts *o)
{
	struct manifest *m = NULL;
	struct plan p;
	int rc = cli_load_manifest(c, o->args.v[0], &m, 1);
	if (rc == 0)
		rc = cli_check_signature(c, m, 1);
	if (rc != 0) {
		manifest_free(m);
		return rc;
	}
	ev_log(c, EV_INFO, "Stack %s (%s) from %s:\n", m->stack.name.s,
	       platform_name(m->stack.platform), m->path);
	plan_build(c, m, &p);
	plan_observe(c, m, &p);
	plan_emit(c, &p);
	/* plan fails as apply would: a precondition that stops apply is its exit code (6) here too. */
	for (size_t i = 0; i < p.n && rc == 0; i++)
		rc = p.steps[i].blocker_rc;
	if (rc != 0)
		ev_log(c, EV_ERROR, "apply would stop before any change: see the step marked '!'");
	else if (o->detailed_exitcode && plan_has_changes(&p))
		rc = TF_ECHANGES;
	plan_release(&p);
	manifest_free(m);
	return rc;
}
