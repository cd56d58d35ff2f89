/* apply.c - `tfprov apply MANIFEST`: plan, ask (on a TTY), apply, verify. */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "plan.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int confirm(struct ctx *c)
{
	if ((c->flags & CTX_YES) || !isatty(STDIN_FILENO) || (c->flags & CTX_JSON))
		return 1;
	printf("\nApply these changes? Only 'yes' is accepted: ");
	fflush(stdout);
	char line[64];
	if (fgets(line, sizeof(line), stdin) == NULL)
		return 0;
	line[strcspn(line, "\n")] = '\0';
	return strcmp(line, "yes") == 0;
}

int cmd_apply(struct ctx *c, struct opts *o)
{
	struct manifest *m = NULL;
	struct plan p;
	uint64_t t0 = now_ns();
	int rc = cli_load_manifest(c, o->args.v[0], &m, 0);
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
	if (!confirm(c)) {
		ev_log(c, EV_ERROR, "apply cancelled; nothing was changed");
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
