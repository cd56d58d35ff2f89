/*
 * plan.c - the planner: desired (manifest) vs recorded (state) vs observed
 * (disk) gives each step's action.
 *
 * Planning reads only: the manifest, the state db and stat() of recorded
 * files (drift.c). A step is
 *   create  when nothing is recorded for its address,
 *   update  when the desired digest differs, or recorded files drifted,
 *   replace when the module says the change needs a new tree (a new CUDA
 *           version lands in a new versioned prefix),
 *   delete  when the state has a resource the manifest no longer has,
 *   read    for checks that change nothing (the driver),
 *   noop    otherwise.
 * The executor is exec.c.
 */
#include "plan.h"
#include "digest.h"
#include "python.h"
#include "error.h"
#include "event.h"
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct step *plan_push(struct plan *p)
{
	p->steps = xrealloc(p->steps, (p->n + 1) * sizeof(*p->steps));
	struct step *s = &p->steps[p->n++];
	memset(s, 0, sizeof(*s));
	return s;
}

static void count(struct plan *p, const struct step *s)
{
	switch (s->action) {
	case ACT_CREATE:
		p->add++;
		break;
	case ACT_CHANGE:
		p->change++;
		break;
	case ACT_REPLACE:
		p->add++;
		p->destroy++;
		break;
	case ACT_DESTROY:
		p->destroy++;
		break;
	case ACT_READ:
		p->read++;
		break;
	case ACT_NOOP:
		break;
	}
}

void plan_resolve_placement(struct ctx *c, struct manifest *m)
{
	if (m->cudnn.placement_auto) { /* a second plan of the same run decides again */
		m->cudnn.placement = PLACEMENT_MERGE;
		m->cudnn.placement_auto = 0;
		m->cudnn.placement_why[0] = '\0';
	}
	if (!m->cudnn.set || !m->cuda.set || m->cudnn.placement != PLACEMENT_MERGE || c->st == NULL)
		return;
	/* What this stack would record for a merged cuDNN, against what each sharer did. */
	struct strbuf canon = STRBUF_INIT, detail = STRBUF_INIT;
	struct strvec urls = STRVEC_INIT, stacks = STRVEC_INIT, desired = STRVEC_INIT;
	char want[65], *prefix = stack_cuda_prefix(m);
	module_cudnn.desire(c, m, &canon, &detail, &urls);
	sha256_buf(canon.buf ? canon.buf : "", canon.len, want);
	place_sharers(c, "cudnn", m->stack.name.s, prefix, &stacks, &desired, NULL);
	struct strbuf who = STRBUF_INIT;
	for (size_t i = 0; i < stacks.n; i++)
		if (strcmp(desired.v[i], want) != 0)
			strbuf_addf(&who, "%s'%s'", who.len ? ", " : "", stacks.v[i]);
	if (who.len) {
		m->cudnn.placement = PLACEMENT_SEPARATE;
		m->cudnn.placement_auto = 1;
		snprintf(m->cudnn.placement_why, sizeof(m->cudnn.placement_why),
		         "stack %s merged another cuDNN into the shared %s", who.buf, prefix);
	}
	strbuf_release(&who);
	strbuf_release(&canon);
	strbuf_release(&detail);
	strvec_release(&urls);
	strvec_release(&stacks);
	strvec_release(&desired);
	free(prefix);
}

/*
 * The action of step s (its desired digest set) against what the state
 * recorded for it: create, change (the manifest changed, drift its files or
 * its drift hook show, or the step it depends on is rebuilt), or noop.
 */
static void step_compare(struct ctx *c, struct plan *p, struct step *s)
{
	const struct module *mod = s->mod;
	struct state_resource r;
	if (p->stack_id == 0 || state_resource_get(c->st, p->stack_id, mod->kind, &r) != 0) {
		s->action = ACT_CREATE;
		return;
	}
	s->res_id = r.id;
	/* The step's apply reads what it recorded (pip: its repair). */
	s->attrs = r.attrs ? xstrdup(r.attrs) : NULL;
	s->nfiles = drift_check(c, r.id, &s->drift_missing, &s->drift_changed);
	struct strvec found = STRVEC_INIT;
	if (module_drift(c, mod->kind, p->stack_id, r.attrs, &found) != 0)
		strvec_push(&found, "its env's distributions cannot be read");
	if (strcmp(r.desired, s->desired) != 0) {
		s->action = ACT_CHANGE;
		s->reason = xstrdup("the manifest changed");
	} else if (found.n) {
		struct strbuf why = STRBUF_INIT;
		strbuf_adds(&why, "drift: ");
		for (size_t k = 0; k < found.n; k++)
			strbuf_addf(&why, "%s%s", k ? ", " : "", found.v[k]);
		if (s->drift_missing || s->drift_changed)
			strbuf_addf(&why, "; %d missing, %d changed of %lld files",
			            s->drift_missing, s->drift_changed, (long long)s->nfiles);
		s->action = ACT_CHANGE;
		s->reason = strbuf_detach(&why);
	} else if (s->drift_missing || s->drift_changed) {
		s->action = ACT_CHANGE;
		s->reason =
		    xasprintf("drift: %d missing, %d changed of %lld file%s", s->drift_missing,
		              s->drift_changed, (long long)s->nfiles, plural_s(s->nfiles));
	} else {
		s->action = ACT_NOOP;
		for (size_t k = 0; mod->depends_on && k + 1 < p->n; k++)
			if (strcmp(p->steps[k].addr, mod->depends_on) == 0 &&
			    p->steps[k].action != ACT_NOOP && p->steps[k].action != ACT_READ) {
				s->action = ACT_CHANGE;
				s->reason = xasprintf("%s is rebuilt", mod->depends_on);
			}
	}
	strvec_release(&found);
	state_resource_release(&r);
}

/* A destroy step for each recorded resource the manifest no longer wants. */
static void plan_unwanted(struct ctx *c, struct plan *p, const struct strvec *wanted)
{
	struct state_resource *res = NULL;
	size_t nres = 0;
	state_resources_list(c->st, p->stack_id, &res, &nres);
	for (size_t r = nres; r-- > 0;) {
		const char *addr = res[r].addr;
		int found = 0;
		for (size_t i = 0; i < wanted->n; i++)
			found |= strcmp(wanted->v[i], addr) == 0;
		if (found)
			continue;
		for (size_t i = 0; i < nmodules; i++) {
			if (strcmp(modules[i]->kind, addr) != 0)
				continue;
			struct step *s = plan_push(p);
			s->mod = modules[i];
			s->addr = modules[i]->kind;
			s->action = ACT_DESTROY;
			s->res_id = res[r].id;
			s->attrs = res[r].attrs ? xstrdup(res[r].attrs) : NULL;
			s->nfiles = state_files_count(c->st, s->res_id);
			s->detail = xasprintf("no longer in the manifest (%lld file%s)",
			                      (long long)s->nfiles, plural_s(s->nfiles));
			count(p, s);
		}
	}
	state_resources_free(res, nres);
}

int plan_build(struct ctx *c, struct manifest *m, struct plan *p)
{
	memset(p, 0, sizeof(*p));
	plan_resolve_placement(c, m);
	p->stack_id = c->st ? state_stack_id(c->st, m->stack.name.s) : 0;
	struct strvec wanted = STRVEC_INIT;
	for (size_t i = 0; i < nmodules; i++) {
		const struct module *mod = modules[i];
		struct strbuf canon = STRBUF_INIT, detail = STRBUF_INIT;
		struct strvec urls = STRVEC_INIT;
		if (mod->desire(c, m, &canon, &detail, &urls) == DESIRE_NONE) {
			strbuf_release(&canon);
			strbuf_release(&detail);
			strvec_release(&urls);
			continue;
		}
		struct step *s = plan_push(p);
		s->mod = mod;
		s->addr = mod->kind;
		s->detail = strbuf_detach(&detail);
		s->urls = urls;
		strvec_push(&wanted, mod->kind);
		if (mod->apply == NULL) {
			s->action = ACT_READ;
			strbuf_release(&canon);
			count(p, s);
			continue;
		}
		sha256_buf(canon.buf ? canon.buf : "", canon.len, s->desired);
		strbuf_release(&canon);
		step_compare(c, p, s);
		count(p, s);
	}
	if (p->stack_id)
		plan_unwanted(c, p, &wanted);
	strvec_release(&wanted);
	return 0;
}

int plan_build_destroy(struct ctx *c, const char *stack, struct plan *p)
{
	memset(p, 0, sizeof(*p));
	p->stack_id = c->st ? state_stack_id(c->st, stack) : 0;
	if (p->stack_id == 0)
		return 0;
	/* Reverse dependency order: pip before pyenv before cudnn before cuda. */
	for (size_t i = nmodules; i-- > 0;) {
		struct state_resource r;
		if (state_resource_get(c->st, p->stack_id, modules[i]->kind, &r) != 0)
			continue;
		struct step *s = plan_push(p);
		s->mod = modules[i];
		s->addr = modules[i]->kind;
		s->action = ACT_DESTROY;
		s->res_id = r.id;
		s->attrs = r.attrs ? xstrdup(r.attrs) : NULL; /* for its remove (pip) */
		s->nfiles = state_files_count(c->st, r.id);
		s->detail = xasprintf("%lld file%s", (long long)s->nfiles, plural_s(s->nfiles));
		state_resource_release(&r);
		count(p, s);
	}
	return 0;
}

/* The distributions the stack's steps installed, as each step's installed hook reads its attrs. */
static int stack_dists(struct ctx *c, int64_t stack_id, struct strvec *names)
{
	for (size_t i = 0; i < nmodules; i++) {
		struct state_resource r;
		int listed, rc;
		int64_t n;
		if (modules[i]->installed == NULL ||
		    state_resource_get(c->st, stack_id, modules[i]->kind, &r) != 0)
			continue;
		rc = modules[i]->installed(r.attrs, names, &listed, &n);
		state_resource_release(&r);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int plan_foreign(struct ctx *c, int64_t stack_id, struct strvec *out)
{
	struct pkgfiles x = {0};
	struct strvec dirs = STRVEC_INIT, names = STRVEC_INIT;
	char *env = NULL;
	int rc = stack_dists(c, stack_id, &names);
	if (rc == 0)
		env = pkgfiles_load_stack(c, stack_id, &names, &x);
	strvec_release(&names);
	if (rc == 0)
		rc = state_stack_dirs(c->st, stack_id, &dirs);
	if (rc != 0) {
		strvec_release(&dirs);
		goto out;
	}
	place_foreign_dirs(c, &dirs, pkgfiles_owned, &x, out);
	strvec_release(&dirs);
out:
	pkgfiles_release(&x);
	free(env);
	return rc;
}

void plan_observe(struct ctx *c, const struct manifest *m, struct plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		struct step *s = &p->steps[i];
		if (s->mod->precheck == NULL || s->action == ACT_DESTROY)
			continue;
		int rc = s->mod->precheck(c, m, s);
		if (rc == 0)
			continue;
		why_code(&s->why, rc);
		free(s->blocker);
		s->blocker_rc = rc;
		s->blocker = xasprintf("apply would stop here, before any change (exit %d): %s",
		                       tf_exit_code(rc), why_text(&s->why));
		why_clear(&s->why);
	}
}

int plan_has_changes(const struct plan *p)
{
	return p->add + p->change + p->destroy > 0;
}

void plan_emit(struct ctx *c, const struct plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct step *s = &p->steps[i];
		if (s->action == ACT_NOOP && !(c->flags & CTX_VERBOSE) && !(c->flags & CTX_JSON))
			continue;
		struct strbuf msg = STRBUF_INIT;
		strbuf_adds(&msg, s->detail ? s->detail : "");
		if (s->reason)
			strbuf_addf(&msg, " (%s)", s->reason);
		if (s->blocker)
			strbuf_addf(&msg, "\n        ! %s", s->blocker);
		if (s->action != ACT_NOOP && s->action != ACT_DESTROY)
			for (size_t u = 0; u < s->urls.n; u++)
				strbuf_addf(&msg, "\n        fetch %s", s->urls.v[u]);
		struct event e = {.kind = EV_PLAN_STEP,
		                  .level = EV_INFO,
		                  .step = s->addr,
		                  .action = action_name(s->action),
		                  .msg = msg.buf};
		ev_emit(c, &e);
		strbuf_release(&msg);
	}
	struct event e = {.kind = EV_PLAN_SUMMARY,
	                  .level = EV_INFO,
	                  .add = p->add,
	                  .change = p->change,
	                  .destroy = p->destroy,
	                  .read = p->read};
	ev_emit(c, &e);
}

void plan_release(struct plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->steps[i].detail);
		free(p->steps[i].reason);
		free(p->steps[i].blocker);
		why_clear(&p->steps[i].why);
		free(p->steps[i].attrs);
		strvec_release(&p->steps[i].urls);
	}
	free(p->steps);
	memset(p, 0, sizeof(*p));
}
