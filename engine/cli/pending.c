/*
 * pending.c - subcommands whose engines land with their issues (doctor).
 * They say so plainly instead of pretending.
 */
#include "cli.h"
#include "error.h"
#include "event.h"

static int pending(struct ctx *c, const char *what)
{
	ev_log(c, EV_ERROR, "`tfprov %s` is not implemented yet", what);
	return TF_ENOTIMPL;
}

int cmd_doctor(struct ctx *c, struct opts *o)
{
	(void)o;
	return pending(c, "doctor");
}
