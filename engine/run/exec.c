/*
 * exec.c - the executor: applies a plan (plan.c).
 *
 * Every precheck runs before the first change, so a failed precondition
 * (exit 6) leaves root and state untouched; every download of every changing
 * step is fetched and verified next (prefetch); then one generation is
 * opened and each changing step runs in its own txn (place.h), the step that
 * activates the stack (the env step's scripts) last.
 *
 * What prefetch made for a step (its own artifacts, verified, and the trees
 * decode-ahead decoded) is handed to the step's apply as an argument
 * (struct prepared, artifact.h): the executor owns it, by step address, so
 * it survives the plan being built again once the state exists.
 */
#include "plan.h"
#include "artifact.h"
#include "python.h"
#include "step_artifacts.h"
#include "error.h"
#include "event.h"
#include "state.h"

#include <stdlib.h>
#include <string.h>

static void step_event(struct ctx *c, const struct step *s, int changed, int failed,
                       const char *msg)
{
	struct event e = {.kind = EV_STEP_DONE,
	                  .level = failed ? EV_ERROR : EV_INFO,
	                  .step = s->addr,
	                  .action = action_name(s->action),
	                  .msg = msg,
	                  .changed = changed,
	                  .failed = failed};
	ev_emit(c, &e);
}

/*
 * A step failed with rc: its own words, else w's (a callee's; NULL: none),
 * with the code, then its one failed event (the words, else the code's).
 * Returns rc.
 */
static int step_failed(struct ctx *c, struct step *s, int rc, struct why *w)
{
	if (w && s->why.msg == NULL)
		why_move(&s->why, w);
	why_code(&s->why, rc);
	step_event(c, s, 0, 1, why_text(&s->why));
	return rc;
}

/* What the executor prepared for the steps of one apply, by step address. */
struct preps {
	struct prepared *v;
	char **addr;
	size_t n;
	struct ahead *scratch; /* decode-ahead's scratch of this run (artifact.h), or NULL */
};

static struct prepared *preps_add(struct preps *ps, const char *addr)
{
	ps->v = xrealloc(ps->v, (ps->n + 1) * sizeof(*ps->v));
	ps->addr = xrealloc(ps->addr, (ps->n + 1) * sizeof(*ps->addr));
	memset(&ps->v[ps->n], 0, sizeof(ps->v[ps->n]));
	ps->addr[ps->n] = xstrdup(addr);
	return &ps->v[ps->n++];
}

static struct prepared *preps_find(struct preps *ps, const char *addr)
{
	for (size_t i = 0; i < ps->n; i++)
		if (strcmp(ps->addr[i], addr) == 0)
			return &ps->v[i];
	return NULL;
}

/* Releases every prepared artset and this run's decode-ahead scratch, taken over or not. */
static void preps_release(struct preps *ps)
{
	for (size_t i = 0; i < ps->n; i++) {
		artset_release(&ps->v[i].arts);
		free(ps->addr[i]);
	}
	free(ps->v);
	free(ps->addr);
	artset_decode_ahead_release(ps->scratch);
	memset(ps, 0, sizeof(*ps));
}

/*
 * A step prefetch did not prepare (the plan was built again once the state
 * existed, and the step changed meanwhile): its artifacts named by its hook
 * and fetched now, without decode-ahead. 0 or TF_E* (s->why set).
 */
static int prepare_late(struct ctx *c, const struct manifest *m, struct step *s,
                        struct prepared *prep)
{
	if (s->mod->artifacts == NULL)
		return 0;
	int rc = s->mod->artifacts(c, m, &prep->arts, s);
	if (rc == 0 && prep->arts.n)
		rc = artset_fetch(c, &prep->arts, s);
	return rc;
}

static int run_step(struct ctx *c, const struct manifest *m, int64_t stack_id, struct step *s,
                    struct prepared *prep)
{
	struct txn *t = NULL;
	int rc = 0;
	struct event e = {.kind = EV_STEP_START,
	                  .level = EV_INFO,
	                  .step = s->addr,
	                  .action = action_name(s->action),
	                  .msg = s->action == ACT_DESTROY ? "removing" : "applying"};
	ev_emit(c, &e);
	txn_begin(c, stack_id, s->addr, s->mod->kind, &t);
	if (s->action == ACT_DESTROY) {
		rc = s->mod->remove ? s->mod->remove(c, s, t) : 0;
		if (rc == 0)
			rc = txn_remove_all(t);
		if (rc == 0)
			rc = txn_commit(t, NULL, NULL);
		const struct strvec *kept = txn_kept(t);
		for (size_t i = 0; rc == 0 && i < kept->n; i++)
			ev_emit(c, &(struct event){.kind = EV_KEPT,
			                           .level = EV_WARN,
			                           .step = s->addr,
			                           .place = {.path = kept->v[i],
			                                     .why = "not placed by tfprov"}});
	} else {
		rc = s->mod->apply(c, m, s, t, prep);
		if (rc == 0)
			rc = txn_commit(t, s->desired, s->attrs);
	}
	if (rc != 0) {
		if (s->why.msg == NULL)
			why_move(&s->why, txn_why(t)); /* the txn's words, if it has any */
		txn_abort(t);
		return step_failed(c, s, rc, NULL);
	}
	txn_abort(t); /* committed: releases memory, nothing left to undo */
	c->changed = 1;
	step_event(c, s, 1, 0, NULL);
	return 0;
}

/*
 * The changing steps in dependency order; an apply runs the steps that
 * activate the stack (module.h) last, once every other step committed, so a
 * failure anywhere leaves the stack's activation as it was. A destroy (m
 * NULL) keeps the plan's order.
 */
static int execute(struct ctx *c, const struct manifest *m, struct plan *p, int64_t stack_id,
                   struct preps *ps)
{
	int rc = 0;
	for (int pass = 0; pass < 2 && rc == 0; pass++)
		for (size_t i = 0; i < p->n && rc == 0; i++) {
			struct step *s = &p->steps[i];
			if (s->action == ACT_NOOP || s->action == ACT_READ)
				continue;
			if ((m != NULL && s->mod->activates) != (pass == 1))
				continue;
			if (tf_interrupted) {
				rc = TF_EINTR;
				break;
			}
			struct prepared *prep = preps_find(ps, s->addr);
			if (prep == NULL) {
				prep = preps_add(ps, s->addr);
				if (s->action != ACT_DESTROY &&
				    (rc = prepare_late(c, m, s, prep)) != 0) {
					step_failed(c, s, rc, NULL);
					break;
				}
			}
			rc = run_step(c, m, stack_id, s, prep);
		}
	return rc;
}

/*
 * Every download of every changing step, fetched and verified into the cache
 * before the first step changes anything: a wrong hash or a missing artifact
 * stops the run with the root as it was. The archives the cuda and cudnn
 * steps unpack, the conda packages of the pyenv step and the wheels of the
 * native installer are decoded meanwhile (decode-ahead, artset_decode_ahead: one
 * pool over every step's archives, largest first, the archives following
 * their downloads, a wheel or package once it is verified) into a scratch
 * directory in the cache; each step's artifacts, with their trees, are then
 * handed to its apply (preps_split), which renames the trees into its stage
 * (or the package cache). An archive of cuda or cudnn that does not decode fails
 * its step here, also before anything changed; a wheel or package that does
 * not is decoded again by its step, which reports why as it always did.
 */
/*
 * Moves each step's share of `all` (its artifacts, contiguous from its
 * hook's call) into the prepared set by the step's address.
 */
static void preps_split(struct preps *ps, struct artset *all, struct step **owner)
{
	for (size_t k = 0; k < all->n; k++) {
		struct prepared *prep = preps_find(ps, owner[k]->addr);
		if (prep == NULL)
			prep = preps_add(ps, owner[k]->addr);
		struct artset *a = &prep->arts;
		a->v = xrealloc(a->v, (a->n + 1) * sizeof(*a->v));
		a->v[a->n++] = all->v[k];
		memset(&all->v[k], 0, sizeof(all->v[k]));
	}
}

static int prefetch(struct ctx *c, const struct manifest *m, struct plan *p, struct preps *ps,
                    struct why *why)
{
	struct artset all = {0};
	struct step **owner = NULL;
	int rc = 0;
	for (size_t i = 0; i < p->n && rc == 0; i++) {
		struct step *s = &p->steps[i];
		if (s->mod->artifacts == NULL || s->action == ACT_NOOP || s->action == ACT_READ ||
		    s->action == ACT_DESTROY)
			continue;
		size_t from = all.n;
		rc = s->mod->artifacts(c, m, &all, s);
		if (rc != 0)
			step_failed(c, s, rc, NULL);
		owner = xrealloc(owner, (all.n ? all.n : 1) * sizeof(*owner));
		for (size_t k = from; k < all.n; k++)
			owner[k] = s;
	}
	if (rc != 0 || all.n == 0)
		goto out;
	struct why w = {0};
	if (cache_init(c->cache_dir, &w) < 0) {
		/* An unusable cache (a link where a directory must be, ...): say why. */
		rc = why_fail(why, TF_EIO, "%s: nothing was changed", why_text(&w));
		why_clear(&w);
		goto out;
	}
	size_t failed = all.n;
	rc = artset_decode_ahead(c, &all, &ps->scratch, &failed, &w);
	if (rc != 0 && failed < all.n) {
		step_failed(c, owner[failed], rc, &w);
	} else if (rc != 0 && rc != TF_EOFFLINE) {
		/* Each failed download had its event (offline: one for all of them). */
		why_fail(why, rc, "a download failed or did not verify: nothing was changed");
	}
	why_clear(&w);
	/* The pip step's wheels: no two ship one path with other bytes (python.h). */
	struct strvec wheels = STRVEC_INIT, names = STRVEC_INIT;
	struct step *pip = NULL;
	for (size_t k = 0; rc == 0 && k < all.n; k++)
		if (all.v[k].unpack == ART_WHEEL && all.v[k].path &&
		    strcmp(owner[k]->addr, "pip") == 0) {
			strvec_push(&wheels, all.v[k].path);
			strvec_push(&names, all.v[k].name ? all.v[k].name : all.v[k].path);
			pip = owner[k];
		}
	if (rc == 0 && wheels.n > 1 &&
	    (rc = wheel_overlaps((const char *const *)wheels.v, (const char *const *)names.v,
	                         wheels.n, &w)) != 0) {
		step_failed(c, pip, rc, &w);
	}
	strvec_release(&wheels);
	strvec_release(&names);
out:
	/* Every step that named artifacts gets them, even with none (an empty artset). */
	for (size_t i = 0; i < p->n; i++)
		if (p->steps[i].mod->artifacts && p->steps[i].action != ACT_NOOP &&
		    p->steps[i].action != ACT_READ && p->steps[i].action != ACT_DESTROY &&
		    preps_find(ps, p->steps[i].addr) == NULL)
			preps_add(ps, p->steps[i].addr);
	preps_split(ps, &all, owner);
	free(owner);
	artset_release(&all);
	return rc;
}

static int apply_plan(struct ctx *c, struct manifest *m, struct plan *p, struct preps *ps,
                      struct why *why);

int plan_apply(struct ctx *c, struct manifest *m, struct plan *p, struct why *why)
{
	struct preps ps = {0};
	int rc = apply_plan(c, m, p, &ps, why);
	preps_release(&ps); /* with this run's decode-ahead scratch, taken over or not */
	return rc;
}

int plan_precheck(struct ctx *c, const struct manifest *m, struct plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		struct step *s = &p->steps[i];
		if (s->mod->precheck == NULL || s->action == ACT_DESTROY)
			continue;
		int rc = s->mod->precheck(c, m, s);
		if (rc != 0)
			return step_failed(c, s, rc, NULL);
	}
	return 0;
}

static int apply_plan(struct ctx *c, struct manifest *m, struct plan *p, struct preps *ps,
                      struct why *why)
{
	/* Preconditions: nothing has changed yet when one fails. */
	int rc = plan_precheck(c, m, p);
	if (rc != 0)
		return rc;
	if ((rc = prefetch(c, m, p, ps, why)) != 0)
		return rc;
	if (c->st == NULL) {
		/* First run on this root: the state is created only now. */
		rc = place_open_state(c, why);
		if (rc != 0)
			return rc;
		/* Another run may have applied while we waited for the lock. */
		plan_release(p);
		plan_build(c, m, p);
	}
	int64_t stack_id = state_stack_ensure(c->st, m->stack.name.s, m->path);
	int64_t gen = state_gen_begin(c->st, stack_id, m->path, m->sha256, m->text);
	if (stack_id == 0 || gen == 0)
		return TF_ESTATE;
	rc = execute(c, m, p, stack_id, ps);
	if (rc == 0 && state_stack_applied(c->st, stack_id, m->path) != 0)
		rc = TF_ESTATE;
	state_gen_finish(c->st, gen, rc == 0 ? "ok" : rc == TF_EINTR ? "interrupted" : "failed");
	return rc;
}

int plan_apply_destroy(struct ctx *c, const char *stack, struct plan *p)
{
	struct preps ps = {0};
	int rc = execute(c, NULL, p, p->stack_id, &ps);
	preps_release(&ps);
	if (rc == 0)
		rc = state_stack_delete(c->st, p->stack_id);
	(void)stack;
	return rc;
}
