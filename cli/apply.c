/* apply.c - `tfprov apply MANIFEST`: plan, ask (on a TTY), apply, verify. */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "plan.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cmd_apply(struct ctx *c, struct opts *o)
{
	struct manifest *m = NULL;
	struct plan p;
	uint64_t t0 = now_ns();
	int rc = cli_load_manifest(c, o->args.v[0], &m, 1); /* warnings too, as plan shows them */
	if (rc == 0)
		rc = cli_check_signature(c, m, 1);
	if (rc != 0) {
		manifest_free(m);
		return rc;
	}
	plan_build(c, m, &p);
	if (!plan_has_changes(&p)) {
		plan_emit(c, &p);
		ev_log(c, EV_DEBUG, "checked in %.1f ms", (double)(now_ns() - t0) / 1e6);
		goto out;
	}
	ev_log(c, EV_INFO, "Stack %s (%s) from %s:\n", m->stack.name.s,
	       platform_name(m->stack.platform), m->path);
	plan_emit(c, &p);
	if (!cli_confirm(c, "apply",
	                 "Do you want to perform these actions?\n  tfprov will perform the "
	                 "actions described above.")) {
		rc = TF_EFAIL;
		goto out;
	}
	rc = plan_apply(c, m, &p);
	if (rc == 0)
		ev_log(c, EV_INFO, "\nApply complete: %d added, %d changed, %d destroyed (%.1f s).",
		       p.add, p.change, p.destroy, (double)(now_ns() - t0) / 1e9);
	else if (rc == TF_EINTR)
		ev_log(c, EV_ERROR,
		       "interrupted; every finished step is recorded, the rest will "
		       "be done by the next apply");
out:
	plan_release(&p);
	manifest_free(m);
	return rc;
}
