/*
 * plan.c - the planner and the executor.
 *
 * Planning reads only: the manifest, the state db and stat() of recorded
 * files. A step is
 *   create  when nothing is recorded for its address,
 *   update  when the desired digest differs, or recorded files drifted,
 *   replace when the module says the change needs a new tree (a new CUDA
 *           version lands in a new versioned prefix),
 *   delete  when the state has a resource the manifest no longer has,
 *   read    for checks that change nothing (the driver),
 *   noop    otherwise.
 *
 * Applying: every precheck runs before the first change, so a failed
 * precondition (exit 6) leaves root and state untouched; then one generation
 * is opened and each changing step runs in its own txn.
 */
#include "plan.h"
#include "dirwalk.h"
#include "artifacts.h"
#include "cache.h"
#include "fetch.h"
#include "pkgfiles.h"
#include "error.h"
#include "event.h"
#include "state.h"
#include "util.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

const char *action_name(enum action a)
{
	static const char *names[] = {"noop", "create", "update", "replace", "delete", "read"};
	return names[a];
}

void step_fail(struct step *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	free(s->error);
	s->error = xvasprintf(fmt, ap);
	va_end(ap);
}

/* One recorded file, as the drift check needs it. */
struct drift_row {
	char *path;
	char type;
	unsigned mode;
	int64_t size, mtime_ns;
};

struct drift_part {
	const struct ctx *c;
	struct drift_row *rows;
	size_t n;
	int missing, changed;
};

static void *drift_part_run(void *arg)
{
	struct drift_part *d = arg;
	struct dirwalk w;
	dirwalk_init(&w, d->c);
	for (size_t i = 0; i < d->n; i++) {
		const struct drift_row *r = &d->rows[i];
		struct stat st;
		if (dirwalk_lstat(&w, r->path, &st) != 0) {
			d->missing++;
			continue;
		}
		if (r->type != 'f')
			continue;
		int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
		if (st.st_size != r->size || mt != r->mtime_ns ||
		    (unsigned)(st.st_mode & 07777) != r->mode)
			d->changed++;
	}
	dirwalk_release(&w);
	return NULL;
}

/*
 * Reads the records first, then stats them in two halves on two threads:
 * lstat is kernel time, and the machines this runs on have at least two
 * cores. Each half is sorted by path, so dirwalk reuses directories.
 */
int64_t drift_check(struct ctx *c, int64_t res_id, int *missing, int *changed)
{
	sqlite3_stmt *s = NULL;
	struct drift_row *rows = NULL;
	size_t n = 0, cap = 0;
	*missing = *changed = 0;
	state_prepare(c->st,
	              "SELECT path, type, size, mtime_ns, mode FROM files WHERE resource_id = "
	              "? ORDER BY path",
	              &s);
	sqlite3_bind_int64(s, 1, res_id);
	while (state_step(s) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			rows = xrealloc(rows, cap * sizeof(*rows));
		}
		const unsigned char *t = sqlite3_column_text(s, 1);
		rows[n].path = xstrdup((const char *)sqlite3_column_text(s, 0));
		rows[n].type = t ? (char)t[0] : 'f';
		rows[n].size = sqlite3_column_int64(s, 2);
		rows[n].mtime_ns = sqlite3_column_int64(s, 3);
		rows[n].mode = (unsigned)sqlite3_column_int(s, 4);
		n++;
	}
	sqlite3_finalize(s);
	struct drift_part parts[2] = {{c, rows, n / 2, 0, 0}, {c, rows + n / 2, n - n / 2, 0, 0}};
	pthread_t th;
	int threaded = n >= 2048 && pthread_create(&th, NULL, drift_part_run, &parts[0]) == 0;
	if (!threaded)
		drift_part_run(&parts[0]);
	drift_part_run(&parts[1]);
	if (threaded)
		pthread_join(th, NULL);
	*missing = parts[0].missing + parts[1].missing;
	*changed = parts[0].changed + parts[1].changed;
	for (size_t i = 0; i < n; i++)
		free(rows[i].path);
	free(rows);
	return (int64_t)n;
}

static void digest_hex(const char *text, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int l;
	EVP_Digest(text, len, md, &l, EVP_sha256(), NULL);
	hex_encode(md, 32, out);
}

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
	case ACT_UPDATE:
		p->change++;
		break;
	case ACT_REPLACE:
		p->add++;
		p->destroy++;
		break;
	case ACT_DELETE:
		p->destroy++;
		break;
	case ACT_READ:
		p->read++;
		break;
	case ACT_NOOP:
		break;
	}
}

int plan_build(struct ctx *c, const struct manifest *m, struct plan *p)
{
	memset(p, 0, sizeof(*p));
	p->stack_id = c->st ? state_stack_id(c->st, m->stack.name.s) : 0;
	struct strvec wanted = STRVEC_INIT;
	for (size_t i = 0; i < nmodules; i++) {
		const struct module *mod = modules[i];
		struct strbuf canon = STRBUF_INIT, detail = STRBUF_INIT;
		struct strvec urls = STRVEC_INIT;
		if (mod->desire(c, m, &canon, &detail, &urls) != 0) {
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
		digest_hex(canon.buf ? canon.buf : "", canon.len, s->desired);
		strbuf_release(&canon);
		struct state_resource r;
		if (p->stack_id == 0 ||
		    state_resource_get(c->st, p->stack_id, mod->kind, &r) != 0) {
			s->action = ACT_CREATE;
		} else {
			s->res_id = r.id;
			s->nfiles = drift_check(c, r.id, &s->drift_missing, &s->drift_changed);
			if (strcmp(r.desired, s->desired) != 0) {
				s->action = ACT_UPDATE;
				s->reason = xstrdup("the manifest changed");
			} else if (s->drift_missing || s->drift_changed) {
				s->action = ACT_UPDATE;
				s->reason = xasprintf("drift: %d missing, %d changed of %lld files",
				                      s->drift_missing, s->drift_changed,
				                      (long long)s->nfiles);
			} else {
				s->action = ACT_NOOP;
				for (size_t k = 0; mod->depends_on && k + 1 < p->n; k++)
					if (strcmp(p->steps[k].addr, mod->depends_on) == 0 &&
					    p->steps[k].action != ACT_NOOP &&
					    p->steps[k].action != ACT_READ) {
						s->action = ACT_UPDATE;
						s->reason =
						    xasprintf("%s is rebuilt", mod->depends_on);
					}
			}
			state_resource_release(&r);
		}
		count(p, s);
	}
	/* Recorded resources the manifest no longer wants. */
	if (p->stack_id) {
		sqlite3_stmt *q = NULL;
		state_prepare(c->st,
		              "SELECT id, addr FROM resources WHERE stack_id = ? ORDER BY id DESC",
		              &q);
		sqlite3_bind_int64(q, 1, p->stack_id);
		while (state_step(q) == SQLITE_ROW) {
			const char *addr = (const char *)sqlite3_column_text(q, 1);
			int found = 0;
			for (size_t i = 0; i < wanted.n; i++)
				found |= strcmp(wanted.v[i], addr) == 0;
			if (found)
				continue;
			for (size_t i = 0; i < nmodules; i++) {
				if (strcmp(modules[i]->kind, addr) != 0)
					continue;
				struct step *s = plan_push(p);
				s->mod = modules[i];
				s->addr = modules[i]->kind;
				s->action = ACT_DELETE;
				s->res_id = sqlite3_column_int64(q, 0);
				s->nfiles = state_files_count(c->st, s->res_id);
				s->detail = xasprintf("no longer in the manifest (%lld files)",
				                      (long long)s->nfiles);
				count(p, s);
			}
		}
		sqlite3_finalize(q);
	}
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
		s->action = ACT_DELETE;
		s->res_id = r.id;
		s->nfiles = state_files_count(c->st, r.id);
		s->detail = xasprintf("%lld files", (long long)s->nfiles);
		state_resource_release(&r);
		count(p, s);
	}
	return 0;
}

int plan_foreign(struct ctx *c, int64_t stack_id, struct strvec *out)
{
	struct pkgfiles x;
	sqlite3_stmt *q = NULL;
	char *env = pkgfiles_load_stack(c, stack_id, 0, &x);
	int rc = 0;
	if (state_prepare(c->st,
	                  "SELECT f.path FROM files f JOIN resources r ON r.id = f.resource_id "
	                  "WHERE r.stack_id = ? AND f.type = 'd' ORDER BY f.path",
	                  &q) != SQLITE_OK) {
		rc = TF_ESTATE;
		goto out;
	}
	sqlite3_bind_int64(q, 1, stack_id);
	struct strvec dirs = STRVEC_INIT;
	while (state_step(q) == SQLITE_ROW)
		strvec_push(&dirs, (const char *)sqlite3_column_text(q, 0));
	sqlite3_finalize(q);
	/* Only the top recorded directories: place_foreign walks what they hold. */
	struct strvec tops = STRVEC_INIT;
	for (size_t i = 0; i < dirs.n; i++) {
		int inside = 0;
		for (size_t k = 0; k < tops.n && !inside; k++) {
			size_t tl = strlen(tops.v[k]);
			inside = strncmp(dirs.v[i], tops.v[k], tl) == 0 && dirs.v[i][tl] == '/';
		}
		if (!inside) {
			strvec_push(&tops, dirs.v[i]);
			place_foreign(c, dirs.v[i], &x, out);
		}
	}
	strvec_release(&tops);
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
		if (s->mod->precheck == NULL || s->action == ACT_DELETE)
			continue;
		int rc = s->mod->precheck(c, m, s);
		if (rc == 0)
			continue;
		free(s->blocker);
		s->blocker_rc = rc;
		s->blocker = xasprintf("apply would stop here, before any change (exit %d): %s",
		                       tf_exit_code(rc), s->error ? s->error : tf_strerror(rc));
		free(s->error);
		s->error = NULL;
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
		if (s->action != ACT_NOOP && s->action != ACT_DELETE)
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
		free(p->steps[i].error);
		free(p->steps[i].attrs);
		strvec_release(&p->steps[i].urls);
	}
	free(p->steps);
	memset(p, 0, sizeof(*p));
}

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

static int run_step(struct ctx *c, const struct manifest *m, int64_t stack_id, struct step *s)
{
	struct txn *t = NULL;
	int rc = 0;
	struct event e = {.kind = EV_STEP_START,
	                  .level = EV_INFO,
	                  .step = s->addr,
	                  .action = action_name(s->action),
	                  .msg = s->action == ACT_DELETE ? "removing" : "applying"};
	ev_emit(c, &e);
	txn_begin(c, stack_id, s->addr, s->mod->kind, &t);
	if (s->action == ACT_DELETE) {
		rc = s->mod->remove ? s->mod->remove(c, s, t) : 0;
		if (rc == 0)
			rc = txn_remove_all(t);
		if (rc == 0)
			rc = txn_commit(t, NULL, NULL);
		if (rc != 0 && s->error == NULL)
			step_fail(s, "%s", txn_error(t) ? txn_error(t) : tf_strerror(rc));
		const struct strvec *kept = txn_kept(t);
		for (size_t i = 0; rc == 0 && i < kept->n; i++)
			ev_log(c, EV_WARN, "kept %s: not placed by tfprov", kept->v[i]);
	} else {
		rc = s->mod->apply(c, m, s, t);
		if (rc == 0)
			rc = txn_commit(t, s->desired, s->attrs);
		if (rc != 0 && s->error == NULL)
			step_fail(s, "%s", txn_error(t) ? txn_error(t) : tf_strerror(rc));
	}
	if (rc != 0) {
		txn_abort(t);
		step_event(c, s, 0, 1, s->error);
		return rc;
	}
	txn_abort(t); /* committed: releases memory, nothing left to undo */
	c->changed = 1;
	step_event(c, s, 1, 0, NULL);
	return 0;
}

static int execute(struct ctx *c, const struct manifest *m, struct plan *p, int64_t stack_id)
{
	int rc = 0;
	for (size_t i = 0; i < p->n && rc == 0; i++) {
		struct step *s = &p->steps[i];
		if (s->action == ACT_NOOP || s->action == ACT_READ)
			continue;
		if (tf_interrupted) {
			rc = TF_EINTR;
			break;
		}
		rc = run_step(c, m, stack_id, s);
	}
	return rc;
}

/*
 * Every download of every changing step, fetched and verified into the cache
 * before the first step changes anything: a wrong hash or a missing artifact
 * stops the run with the root as it was (the steps then unpack from the
 * verified cache).
 */
static int prefetch(struct ctx *c, const struct manifest *m, struct plan *p)
{
	struct artset all = {0};
	int rc = 0;
	for (size_t i = 0; i < p->n && rc == 0; i++) {
		struct step *s = &p->steps[i];
		if (s->mod->artifacts == NULL || s->action == ACT_NOOP || s->action == ACT_READ ||
		    s->action == ACT_DELETE)
			continue;
		rc = s->mod->artifacts(c, m, &all, s);
		if (rc != 0)
			step_event(c, s, 0, 1, s->error);
	}
	if (rc != 0 || all.n == 0)
		goto out;
	char *err = NULL;
	if (cache_init(c->cache_dir, &err) < 0) {
		/* An unusable cache (a link where a directory must be, ...): say why. */
		ev_log(c, EV_ERROR, "%s: nothing was changed", err);
		free(err);
		rc = TF_EIO;
		goto out;
	}
	struct fetch_item *items = xcalloc(all.n, sizeof(*items));
	for (size_t i = 0; i < all.n; i++) {
		items[i].name = all.v[i].name;
		items[i].url = all.v[i].url;
		items[i].sha256 = all.v[i].sha256;
		items[i].size = all.v[i].size;
	}
	rc = fetch_all(c, items, all.n); /* it reports what failed (offline: in one error) */
	if (rc != 0 && rc != TF_EOFFLINE)
		ev_log(c, EV_ERROR, "a download failed or did not verify: nothing was changed");
	for (size_t i = 0; i < all.n; i++)
		fetch_item_release(&items[i]);
	free(items);
out:
	artset_release(&all);
	return rc;
}

int plan_apply(struct ctx *c, const struct manifest *m, struct plan *p)
{
	int rc = 0;
	/* Preconditions: nothing has changed yet when one fails. */
	for (size_t i = 0; i < p->n; i++) {
		struct step *s = &p->steps[i];
		if (s->mod->precheck == NULL || s->action == ACT_DELETE)
			continue;
		rc = s->mod->precheck(c, m, s);
		if (rc != 0) {
			step_event(c, s, 0, 1, s->error);
			return rc;
		}
	}
	if ((rc = prefetch(c, m, p)) != 0)
		return rc;
	if (c->st == NULL) {
		/* First run on this root: the state is created only now. */
		rc = place_open_state(c);
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
	rc = execute(c, m, p, stack_id);
	if (rc == 0 && state_stack_applied(c->st, stack_id, m->path) != 0)
		rc = TF_ESTATE;
	state_gen_finish(c->st, gen, rc == 0 ? "ok" : rc == TF_EINTR ? "interrupted" : "failed");
	return rc;
}

int plan_apply_destroy(struct ctx *c, const char *stack, struct plan *p)
{
	int rc = execute(c, NULL, p, p->stack_id);
	if (rc == 0) {
		sqlite3_stmt *s = NULL;
		state_prepare(c->st, "DELETE FROM stacks WHERE id = ?", &s);
		sqlite3_bind_int64(s, 1, p->stack_id);
		if (state_step(s) != SQLITE_DONE)
			rc = TF_ESTATE;
		sqlite3_finalize(s);
	}
	(void)stack;
	return rc;
}
