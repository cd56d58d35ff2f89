/*
 * destroy.c - `tfprov destroy STACK`: removes exactly what tfprov placed for
 * the stack, in reverse dependency order, and forgets the stack.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "plan.h"

int cmd_destroy(struct ctx *c, struct opts *o)
{
	struct plan p;
	int rc = 0;
	if (o->args.n != 1) {
		ev_log(c, EV_ERROR, "usage: tfprov destroy STACK");
		return TF_EXIT_USAGE;
	}
	plan_build_destroy(c, o->args.v[0], &p);
	if (p.stack_id == 0) {
		ev_log(c, EV_ERROR, "no stack named '%s' under %s", o->args.v[0], c->root);
		plan_release(&p);
		return TF_EFAIL;
	}
	plan_emit(c, &p);
	rc = plan_apply_destroy(c, o->args.v[0], &p);
	if (rc == 0)
		ev_log(c, EV_INFO, "Destroyed stack %s.", o->args.v[0]);
	plan_release(&p);
	return rc;
}
