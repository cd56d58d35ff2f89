/* validate.c - `tfprov validate MANIFEST...`: parse and lint, no other I/O. */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "manifest.h"

int cmd_validate(struct ctx *c, struct opts *o)
{
	int rc = 0;
	for (size_t i = 0; i < o->args.n; i++) {
		struct manifest *m = NULL;
		int r = cli_load_manifest(c, o->args.v[i], &m, 1);
		if (r == 0)
			r = cli_check_signature(c, m, 0);
		if (r == 0)
			ev_log(c, EV_INFO, "%s: valid (stack %s)", o->args.v[i], m->stack.name.s);
		else if (rc == 0)
			rc = r;
		manifest_free(m);
	}
	return rc;
}
