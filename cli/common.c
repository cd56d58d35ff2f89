/* common.c - what several subcommands share: loading and linting a manifest. */
#include "cli.h"
#include "compat.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int cli_load_manifest(struct ctx *c, const char *path, struct manifest **out, int print_warnings)
{
	struct diags d = {0};
	struct compat *kb = NULL;
	int rc = manifest_load(path, out, &d);
	if (rc == 0) {
		struct diags kd = {0};
		if (compat_load(compat_default_path(), &kb, &kd) != 0) {
			diags_print(&kd, stderr, 0);
			ev_log(c, EV_ERROR, "cannot load the compatibility knowledge base %s",
			       compat_default_path());
			diags_release(&kd);
			rc = TF_EFAIL;
			goto out;
		}
		diags_release(&kd);
		compat_lint(kb, *out, &d);
	}
	diags_sort(&d);
	if (d.errors || print_warnings) {
		if (c->flags & CTX_JSON) {
			for (size_t i = 0; i < d.n; i++) {
				struct diag *g = &d.v[i];
				char *msg = xasprintf(
				    "%s:%d:%d: %s: %s%s%s [%s]", g->file, g->pos.line, g->pos.col,
				    g->sev == DIAG_ERROR ? "error" : "warning", g->msg,
				    g->hint ? " hint: " : "", g->hint ? g->hint : "", g->code);
				ev_log(c, g->sev == DIAG_ERROR ? EV_ERROR : EV_WARN, "%s", msg);
				free(msg);
			}
		} else {
			fflush(stdout);
			diags_print(&d, stderr, (c->flags & CTX_COLOR) && isatty(STDERR_FILENO));
		}
	}
	if (d.errors) {
		rc = TF_EMANIFEST;
		ev_log(c, EV_ERROR, "%s: %zu error%s, %zu warning%s", path, d.errors,
		       d.errors == 1 ? "" : "s", d.warnings, d.warnings == 1 ? "" : "s");
	}
out:
	if (rc != 0) {
		manifest_free(*out);
		*out = NULL;
	}
	compat_free(kb);
	diags_release(&d);
	return rc;
}

int cli_stack_arg(struct ctx *c, const struct opts *o, const char *usage, int64_t *sid)
{
	if (o->args.n != 1) {
		ev_log(c, EV_ERROR, "%s", usage);
		return TF_EXIT_USAGE;
	}
	*sid = c->st ? state_stack_id(c->st, o->args.v[0]) : 0;
	if (*sid == 0) {
		ev_log(c, EV_ERROR, "no stack named '%s' under %s", o->args.v[0], c->root);
		return TF_EFAIL;
	}
	return 0;
}
