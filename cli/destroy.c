/*
 * destroy.c - `tfprov destroy STACK`: removes exactly what tfprov placed for
 * the stack, in reverse dependency order, and forgets the stack. Files it did
 * not place are listed before the question and kept (a directory goes only
 * when nothing is left in it). Asks like apply (cli_confirm).
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "plan.h"

#include <stdlib.h>

int cmd_destroy(struct ctx *c, struct opts *o)
{
	struct plan p;
	struct strvec foreign = STRVEC_INIT;
	int rc = 0;
	plan_build_destroy(c, o->args.v[0], &p);
	if (p.stack_id == 0) {
		ev_log(c, EV_ERROR, "no stack named '%s' under %s", o->args.v[0], c->root);
		rc = TF_EFAIL;
		goto out;
	}
	plan_emit(c, &p);
	rc = plan_foreign(c, p.stack_id, &foreign);
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < foreign.n; i++)
		ev_log(c, EV_WARN, "will keep %s: not placed by tfprov", foreign.v[i]);
	char *q = xasprintf("Do you really want to destroy stack %s?\n  tfprov will remove "
	                    "every file it placed for it, as shown above.",
	                    o->args.v[0]);
	int ok = cli_confirm(c, "destroy", q);
	free(q);
	if (!ok) {
		rc = TF_EFAIL;
		goto out;
	}
	rc = plan_apply_destroy(c, o->args.v[0], &p);
	if (rc == 0)
		ev_log(c, EV_INFO, "Destroyed stack %s%s.", o->args.v[0],
		       foreign.n ? "; what tfprov did not place was kept (listed above)" : "");
out:
	strvec_release(&foreign);
	plan_release(&p);
	return rc;
}
