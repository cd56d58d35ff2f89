/*
 * destroy.c - `tfprov destroy STACK` and `tfprov destroy --all`: removes
 * exactly what tfprov placed for the stack (or for every stack), in reverse
 * dependency order, and forgets it; its activation scripts go with it,
 * being files the env step placed. A stack in use (a `tfprov run` of it
 * still running) is not destroyed: destroy waits --lock-timeout, then exits
 * 4 naming the pids. Destroying the default stack leaves the machine with
 * none (the login script goes) and says so. Files it did not place are listed before the question and
 * kept (a directory goes only when nothing is left in it, the prefix's
 * layout directories too). One question for
 * all the stacks, asked like apply (cli_confirm). The download cache stays:
 * `tfprov gc` prunes it.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "plan.h"
#include "state.h"

#include "stackinfo.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The layout directories tfprov made under a stack's prefix (stacks/<stack>/,
 * stacks/, cuda/, cudnn/, envs/ and the prefix itself) are not recorded as placed: each goes once it
 * is empty, so a destroyed machine has no empty /opt/tfprov. rmdir never
 * removes a directory that still holds anything (another stack's, a user's).
 */
static void remove_empty_layout(struct ctx *c, const char *prefix, const char *stack)
{
	char *own = xasprintf("stacks/%s", stack);
	const char *const sub[] = {own, "stacks", "cuda", "cudnn", "envs", ""};
	for (size_t i = 0; prefix && i < ARRAY_SIZE(sub); i++) {
		char *rel = sub[i][0] ? path_join(prefix, sub[i]) : xstrdup(prefix);
		char *host = ctx_host_path(c, rel);
		if (host)
			rmdir(host);
		free(host);
		free(rel);
	}
	free(own);
}

/* Every stack's name, in name order. 0 or TF_ESTATE. */
static int all_stacks(struct ctx *c, struct strvec *out)
{
	return c->st == NULL ? 0 : state_stack_names(c->st, out);
}

/* Each stack's plan, shown; what tfprov will keep gathered in foreign. 0, TF_EFAIL (no
 * such stack) or plan_foreign's error. */
static int destroy_plan(struct ctx *c, const struct strvec *names, struct plan *p,
                        struct strvec *foreign)
{
	for (size_t i = 0; i < names->n; i++) {
		plan_build_destroy(c, names->v[i], &p[i]);
		if (p[i].stack_id == 0) {
			ev_log(c, EV_ERROR, "no stack named '%s' under %s", names->v[i], c->root);
			return TF_EFAIL;
		}
		if (names->n > 1 && p[i].n > 0)
			ev_log(c, EV_INFO, "Stack %s:", names->v[i]);
		/* A stack whose applies placed nothing (the first failed before a step
		 * committed): no plan to show, and "No changes" would be wrong. */
		if (p[i].n == 0)
			ev_log(c, EV_INFO,
			       "Stack %s has nothing placed (no step of its applies committed): "
			       "destroy removes its record only.",
			       names->v[i]);
		else
			plan_emit(c, &p[i]);
		int rc = plan_foreign(c, p[i].stack_id, foreign);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The destroyed stack was the default: none now, and the ones left are named. */
static int destroy_default(struct ctx *c, const char *name)
{
	struct strvec left = STRVEC_INIT;
	int rc = cli_set_default(c, NULL, NULL);
	state_stack_names(c->st, &left);
	struct strbuf sb = STRBUF_INIT;
	for (size_t k = 0; k < left.n; k++)
		strbuf_addf(&sb, "%s%s", k ? ", " : "", left.v[k]);
	if (rc == 0)
		ev_log(c, EV_INFO,
		       "%s was the default stack: login shells get no tfprov stack "
		       "now%s%s%s",
		       name, left.n ? "; `tfprov default STACK` picks one of: " : ".",
		       left.n ? sb.buf : "", left.n ? "." : "");
	strbuf_release(&sb);
	strvec_release(&left);
	return rc;
}

/* One claimed stack destroyed: its plan applied, its empty layout, its in-use mark and
 * its place as the default (def) gone. */
static int destroy_one(struct ctx *c, const char *name, struct plan *p, const char *def,
                       int kept_foreign)
{
	struct stackinfo si;
	char *prefix = NULL;
	struct why err = {0};
	if (stackinfo_load(c, name, &si, &err) == 0) {
		prefix = si.m->prefix.s ? xstrdup(si.m->prefix.s) : NULL;
		stackinfo_release(&si);
	}
	why_clear(&err);
	int rc = plan_apply_destroy(c, name, p);
	if (rc == 0)
		remove_empty_layout(c, prefix, name);
	free(prefix);
	if (rc == 0)
		ev_log(c, EV_INFO, "Destroyed stack %s%s.", name,
		       kept_foreign ? "; what tfprov did not place was kept (listed above)" : "");
	if (rc == 0)
		cli_stack_unmark(c, name);
	if (rc == 0 && def && strcmp(def, name) == 0)
		rc = destroy_default(c, name);
	return rc;
}

int cmd_destroy(struct ctx *c, struct opts *o)
{
	struct strvec names = STRVEC_INIT, foreign = STRVEC_INIT;
	struct plan *p = NULL;
	int rc = 0;
	if (o->all == (o->args.n == 1)) {
		ev_log(c, EV_ERROR, "usage: tfprov destroy STACK | tfprov destroy --all");
		return TF_EUSAGE;
	}
	if (o->all) {
		rc = all_stacks(c, &names);
		if (rc != 0)
			goto out;
		if (names.n == 0) {
			ev_log(c, EV_INFO, "No stacks under %s: nothing to destroy.", c->root);
			goto out;
		}
	} else {
		strvec_push(&names, o->args.v[0]);
	}
	p = xcalloc(names.n, sizeof(*p));
	rc = destroy_plan(c, &names, p, &foreign);
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < foreign.n; i++)
		ev_log(c, EV_WARN, "will keep %s: not placed by tfprov", foreign.v[i]);
	char *q = o->all ? xasprintf("Do you really want to destroy all %zu stack%s under %s?\n  "
	                             "tfprov will remove every file it placed for them, as shown "
	                             "above.",
	                             names.n, names.n == 1 ? "" : "s", c->root)
	                 : xasprintf("Do you really want to destroy stack %s?\n  tfprov will "
	                             "remove every file it placed for it, as shown above.",
	                             names.v[0]);
	int ok = cli_confirm(c, "destroy", q);
	free(q);
	if (!ok) {
		rc = TF_EFAIL;
		goto out;
	}
	/* Every stack claimed before the first is touched: all of them go, or none. */
	for (size_t i = 0; i < names.n && rc == 0; i++)
		rc = cli_stack_claim(c, names.v[i], "destroy");
	if (rc != 0)
		goto out;
	char *def = cli_default_stack(c);
	for (size_t i = 0; i < names.n && rc == 0; i++)
		rc = destroy_one(c, names.v[i], &p[i], def, foreign.n != 0);
	free(def);
	if (rc == 0 && o->all)
		ev_log(c, EV_INFO,
		       "The download cache is kept: `tfprov gc` removes what no recorded "
		       "generation needs.");
out:
	for (size_t i = 0; p && i < names.n; i++)
		plan_release(&p[i]);
	free(p);
	strvec_release(&foreign);
	strvec_release(&names);
	return rc;
}
