/* common.c - what several subcommands share: loading and linting a manifest. */
#include "cli.h"
#include "kb.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "state.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_diag_event(struct ctx *c, const struct diag *g)
{
	const char *sev = g->sev == DIAG_ERROR ? "error" : "warning";
	json_t *o =
	    json_pack("{s:s,s:s,s:s,s:s,s:i,s:i}", "severity", sev, "code", g->code, "message",
	              g->msg, "file", g->file, "line", g->pos.line, "col", g->pos.col);
	json_object_set_new(o, "hint", g->hint ? json_string(g->hint) : json_null());
	char *msg = xasprintf("%s:%d:%d: %s: %s [%s]", g->file, g->pos.line, g->pos.col, sev,
	                      g->msg, g->code);
	struct event e = {.kind = EV_DATA,
	                  .level = g->sev == DIAG_ERROR ? EV_ERROR : EV_WARN,
	                  .type = "diagnostic",
	                  .data = o,
	                  .msg = msg};
	ev_emit(c, &e);
	free(msg);
	json_decref(o);
}

int cli_lint_manifest(struct ctx *c, const char *path, struct manifest **out, struct diags *d)
{
	struct compat *kb = NULL;
	int rc = manifest_load(path, out, d);
	if (rc == 0) {
		struct diags kd = {0};
		if (compat_load(compat_default_path(), &kb, &kd) != 0) {
			diags_print(&kd, stderr, 0);
			ev_log(c, EV_ERROR, "cannot load the compatibility knowledge base %s",
			       compat_default_path());
			diags_release(&kd);
			manifest_free(*out);
			*out = NULL;
			return TF_EFAIL;
		}
		diags_release(&kd);
		compat_lint(kb, *out, d);
		compat_free(kb);
	}
	return rc;
}

void cli_print_diags(struct ctx *c, struct diags *d)
{
	diags_sort(d);
	if (c->flags & CTX_JSON) {
		for (size_t i = 0; i < d->n; i++) {
			cli_diag_event(
			    c, &d->v[i]); /* structured: file, line, col, severity, code, ... */
		}
	} else {
		fflush(stdout);
		diags_print(d, stderr, (c->flags & CTX_COLOR) && isatty(STDERR_FILENO));
	}
}

int cli_load_manifest(struct ctx *c, const char *path, struct manifest **out, int print_warnings)
{
	struct diags d = {0};
	int rc = cli_lint_manifest(c, path, out, &d);
	if (rc == TF_EFAIL) /* the knowledge base, reported */
		goto out;
	if (d.errors || print_warnings)
		cli_print_diags(c, &d);
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
	diags_release(&d);
	return rc;
}

int cli_confirm(struct ctx *c, const char *action, const char *question)
{
	if (c->flags & CTX_YES)
		return 1;
	if (!isatty(STDIN_FILENO) || (c->flags & CTX_JSON)) {
		ev_log(c, EV_ERROR,
		       "%s cancelled: %s, so tfprov cannot ask for approval; pass -y "
		       "(--auto-approve) to %s without asking. Nothing was changed.",
		       action, (c->flags & CTX_JSON) ? "--json output" : "stdin is not a terminal",
		       action);
		return 0;
	}
	printf("\n%s\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: ", question);
	fflush(stdout);
	char line[64];
	if (fgets(line, sizeof(line), stdin) == NULL)
		line[0] = '\0';
	line[strcspn(line, "\n")] = '\0';
	if (strcmp(line, "yes") == 0)
		return 1;
	ev_log(c, EV_ERROR, "%s cancelled. Nothing was changed.", action);
	return 0;
}

int cli_say_why(struct ctx *c, int rc, struct why *w)
{
	if (rc != 0 && w->msg)
		ev_log(c, EV_ERROR, "%s", w->msg);
	why_clear(w);
	return rc;
}

int cli_stack_arg(struct ctx *c, const struct opts *o, const char *usage, int64_t *sid)
{
	if (o->args.n != 1) {
		ev_log(c, EV_ERROR, "%s", usage);
		return TF_EUSAGE;
	}
	*sid = c->st ? state_stack_id(c->st, o->args.v[0]) : 0;
	if (*sid == 0) {
		ev_log(c, EV_ERROR, "no stack named '%s' under %s", o->args.v[0], c->root);
		return TF_EFAIL;
	}
	return 0;
}
