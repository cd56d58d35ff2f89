/*
 * pip.c - the `pip` step: the manifest's pins in the stack's env.
 *
 * Installs the pins with the env's own pip, hashes required, isolated from
 * the user's PIP_* settings (pipdrv.c), or, for a complete lock of wheels,
 * with the native installer it chooses (wheelhouse.c, unless pip.installer
 * is pip). It depends on pyenv (pyenv.c): a rebuilt env has lost its pip
 * packages, so pip runs again. What pip changed in the env is re-recorded,
 * so the env's own drift check does not mistake pip's work for drift. What
 * it installed is its attrs, which only it reads (pip_installed, the
 * installed hook).
 */
#include "artifact.h"
#include "kb.h"
#include "python.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "module.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static enum desire pip_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                              struct strbuf *detail, struct strvec *urls)
{
	(void)urls;
	if (!m->pip.set)
		return DESIRE_NONE;
	strbuf_addf(canon, "index=%s\ncomplete=%d\n", m->pip.index_url.s ? m->pip.index_url.s : "",
	            m->pip.complete.v);
	for (size_t i = 0; i < c->mirrors.n; i++)
		strbuf_addf(canon, "mirror=%s\n", c->mirrors.v[i]);
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		strbuf_addf(canon, "req=%s", m->pip.reqs[i].spec);
		for (size_t j = 0; j < m->pip.reqs[i].nhashes; j++)
			strbuf_addf(canon, " %s", m->pip.reqs[i].hashes[j]);
		strbuf_adds(canon, "\n");
	}
	strbuf_addf(detail, "%zu pinned package%s from %s%s", m->pip.nreqs,
	            m->pip.nreqs == 1 ? "" : "s",
	            c->mirrors.n         ? c->mirrors.v[0]
	            : m->pip.index_url.s ? m->pip.index_url.s
	                                 : "the default index",
	            m->pip.complete.v ? " (complete lock, --no-deps)"
	                              : " (incomplete lock: the rest is resolved at apply by pip, "
	                                "unhashed)");
	return DESIRE_WANTED;
}

/*
 * A pip lock that is not the full closure makes pip resolve the rest at apply
 * time, after the CUDA, cuDNN and Python steps have run, from whatever the index
 * serves then: refused before any change unless --allow-incomplete-lock.
 */
/*
 * The glibc the lock's Linux wheels need: the manylinux floor of TensorFlow's own
 * wheel (the knowledge base, by TF series) and pip.min_glibc (the highest floor
 * of the rest of the lock, written by scripts/closure-to-requirements.py). A host
 * below it gets "no matching distribution" from pip only after the CUDA, cuDNN
 * and Python steps ran: refused before any change instead (exit 6).
 * TFPROV_GLIBC_VERSION stands in for the host's glibc in tests.
 */
static int pip_glibc_precheck(const struct manifest *m, struct step *s)
{
	struct compat *kb = NULL;
	struct diags d = {0};
	const char *need, *source = NULL, *tf = NULL;
	const char *host = getenv("TFPROV_GLIBC_VERSION");
	int rc = 0;
	if (m->stack.platform != PLATFORM_LINUX_X86_64 && m->stack.platform != PLATFORM_WSL2)
		return 0;
	if (host == NULL || *host == '\0')
		host = gnu_get_libc_version();
	int loaded = compat_load(compat_default_path(), &kb, &d) == 0;
	need = compat_manifest_min_glibc(loaded ? kb : NULL, m, &source, &tf);
	if (need != NULL && version_valid(host) && version_cmp(host, need) < 0) {
		step_fail(s,
		          "this machine's glibc %s is older than %s, which the pip lock's wheels "
		          "need (%s%s%s): pip would find no installable file for them. Use a "
		          "distribution with glibc >= %s, or a stack whose wheels need less",
		          host, need, source, tf ? " of TensorFlow " : "", tf ? tf : "", need);
		rc = TF_EPRECOND;
	}
	compat_free(kb);
	diags_release(&d);
	return rc;
}

static int pip_precheck(struct ctx *c, const struct manifest *m, struct step *s)
{
	if (m->pip.set) {
		int rc = pip_glibc_precheck(m, s);
		if (rc != 0)
			return rc;
	}
	if (!m->pip.set || m->pip.complete.v || (c->flags & CTX_ALLOW_INCOMPLETE))
		return 0;
	struct pos at = m->pip.complete.set ? m->pip.complete.pos : m->pip.pos;
	step_fail(s,
	          "%s:%d:%d: the pip lock is not complete (%s): pip would resolve unpinned "
	          "dependencies during apply, after the other steps have run; complete it with "
	          "`tfprov lock %s` (or pass --allow-incomplete-lock to let pip resolve them "
	          "unhashed)",
	          m->path, at.line, at.col,
	          m->pip.complete.set ? "complete: false" : "no `complete: true`", m->path);
	return TF_EMANIFEST;
}

/* Names (name==version) in after that are neither in before nor pinned in reqs. */
static json_t *unhashed_dists(const struct pip_result *before, const struct pip_result *after,
                              const struct pip_req *reqs, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < after->n; i++) {
		const struct pip_dist *d = &after->v[i];
		int known = 0;
		for (size_t j = 0; j < before->n && !known; j++)
			known = strcmp(before->v[j].name, d->name) == 0 &&
			        strcmp(before->v[j].version, d->version) == 0;
		for (size_t j = 0; j < n && !known; j++) {
			char *nm =
			    pip_normalize_name(reqs[j].name ? reqs[j].name : reqs[j].raw_name);
			known = strcmp(nm, d->name) == 0 && reqs[j].nhashes > 0;
			free(nm);
		}
		if (!known)
			json_array_append_new(arr, json_sprintf("%s==%s", d->name, d->version));
	}
	return arr;
}

/* X.Y of the env's interpreter: the conda lock's python, or the venv's version. */
static char *env_pyver(const struct manifest *m)
{
	if (m->python.manager != PYENV_CONDA)
		return m->python.version.s ? xstrdup(m->python.version.s) : NULL;
	for (size_t i = 0; i < m->python.npkgs; i++) {
		const char *v = m->python.pkgs[i].version;
		if (strcmp(m->python.pkgs[i].name, "python") != 0 || v == NULL)
			continue;
		const char *d1 = strchr(v, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
		return d2 ? xstrndup(v, (size_t)(d2 - v)) : xstrdup(v);
	}
	return NULL;
}

/*
 * The files of a complete lock (wheels, pinned sdists), named from the index
 * or wheel directory pip would use and fetched and verified into the cache
 * before any step changes anything (python.h). An incomplete lock (opted in
 * with --allow-incomplete-lock) is resolved by pip at apply, as the plan says.
 */
static int pip_artifacts(struct ctx *c, const struct manifest *m, struct artset *out,
                         struct step *s)
{
	if (!m->pip.set || !m->pip.complete.v || m->pip.nreqs == 0)
		return 0;
	struct pipart_src src = {.index_url = m->pip.index_url.s, .arch = "x86_64"};
	char *simple = NULL, *pyver = env_pyver(m);
	struct why err = {0};
	src.pyver = pyver;
	if (c->mirrors.n) {
		const char *mr = c->mirrors.v[0];
		if (str_starts_with(mr, "http://") || str_starts_with(mr, "https://"))
			src.index_url = simple = pip_mirror_index(mr);
		else
			src.dir = mr;
	}
	size_t from = out->n;
	int rc = pipart_resolve(c, m->pip.reqs, m->pip.nreqs, &src, out, &err);
	if (rc != 0)
		step_fail_why(s, rc, &err);
	else if (!m->pip.use_pip) {
		char *prefix = stack_env_prefix(m);
		pipart_mark_predecode(c, out, from, prefix, pyver);
		int venv = m->python.manager == PYENV_VENV;
		pyc_ahead_attach(c, out, prefix, pyver, venv ? m->python.version.s : NULL,
		                 venv ? m->python.interpreter.s : NULL);
		free(prefix);
	}
	why_clear(&err);
	free(simple);
	free(pyver);
	return rc;
}

/* ------------------------------------------------------------ the env's drift */

/*
 * The env's distributions against what the step recorded ({"installed":
 * [{name, version, stamp, pinned, kept}]}): env_dist_stamps (python.h) for
 * the distributions there now. A recorded one missing, at another version,
 * or with another stamp (a file of it patched, removed or replaced) is drift;
 * one not recorded was added by someone else. Stamps missing from older
 * records are not compared.
 */
struct envdiff {
	struct strvec lines;  /* one per difference, for plan and status */
	struct strvec redo;   /* pinned at the same version, files changed: reinstalled */
	struct strvec extra;  /* not pinned and not the env's own: added, or kept before */
	struct strvec xlabel; /* "name version" of each of extra */
};

static void envdiff_release(struct envdiff *d)
{
	strvec_release(&d->lines);
	strvec_release(&d->redo);
	strvec_release(&d->extra);
	strvec_release(&d->xlabel);
}

static const struct pip_dist *find_dist(const struct pip_result *r, const char *name)
{
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->v[i].name, name) == 0)
			return &r->v[i];
	return NULL;
}

static int env_compare(struct ctx *c, const char *env, const char *attrs, struct envdiff *d,
                       struct why *why)
{
	struct pip_result now = {0};
	json_t *j = attrs ? json_loads(attrs, JSON_DECODE_ANY, NULL) : NULL;
	json_t *inst = json_object_get(j, "installed"), *o;
	size_t i;
	int rc = 0;
	if (!json_is_array(inst))
		goto out; /* nothing recorded to compare with */
	if ((rc = env_dist_stamps(c, env, &now, why)) != 0)
		goto out;
	json_array_foreach(inst, i, o)
	{
		const char *nm = json_string_value(json_object_get(o, "name"));
		const char *ver = json_string_value(json_object_get(o, "version"));
		const char *stamp = json_string_value(json_object_get(o, "stamp"));
		if (nm == NULL || ver == NULL)
			continue;
		const struct pip_dist *d2 = find_dist(&now, nm);
		if (json_is_true(json_object_get(o, "kept")) && d2) {
			strvec_push(&d->extra, nm);
			strvec_pushf(&d->xlabel, "%s %s", nm, d2->version);
			if (c->flags & CTX_REMOVE_UNPINNED)
				strvec_pushf(&d->lines, "%s %s not pinned (--remove-unpinned)", nm,
				             d2->version);
		}
		if (d2 == NULL)
			strvec_pushf(&d->lines, "%s %s removed", nm, ver);
		else if (strcmp(d2->version, ver) != 0)
			strvec_pushf(&d->lines, "%s %s replaced by %s", nm, ver, d2->version);
		else if (stamp && d2->stamp && strcmp(stamp, d2->stamp) != 0) {
			strvec_pushf(&d->lines, "%s %s: files changed in place", nm, ver);
			strvec_push(&d->redo, nm);
		}
	}
	for (i = 0; i < now.n; i++) {
		int known = 0;
		json_t *x;
		size_t k;
		json_array_foreach(inst, k, x)
		{
			const char *nm = json_string_value(json_object_get(x, "name"));
			known |= nm && strcmp(nm, now.v[i].name) == 0;
		}
		if (known)
			continue;
		strvec_pushf(&d->lines, "%s %s added (not recorded)", now.v[i].name,
		             now.v[i].version);
		strvec_push(&d->extra, now.v[i].name);
		strvec_pushf(&d->xlabel, "%s %s", now.v[i].name, now.v[i].version);
	}
out:
	pip_result_release(&now);
	json_decref(j);
	return rc;
}

static int pip_drift(struct ctx *c, int64_t stack_id, const char *attrs, struct strvec *found)
{
	struct envdiff d = {STRVEC_INIT, STRVEC_INIT, STRVEC_INIT, STRVEC_INIT};
	char *env = pkgfiles_stack_env(c, stack_id);
	int rc = 0;
	if (env == NULL || attrs == NULL)
		goto out;
	char *host = ctx_host_path(c, env);
	int there = access(host, F_OK) == 0;
	free(host);
	if (!there)
		goto out; /* the env itself is gone: its own step's drift says so */
	rc = env_compare(c, env, attrs, &d, NULL);
	for (size_t i = 0; rc == 0 && i < d.lines.n; i++)
		strvec_push(found, d.lines.v[i]);
out:
	envdiff_release(&d);
	free(env);
	return rc;
}

/* The recorded attrs with each distribution's stamp taken again from the env. */
static int pip_restamp(struct ctx *c, int64_t stack_id, const char *attrs, char **out)
{
	struct pip_result now = {0};
	char *env = pkgfiles_stack_env(c, stack_id);
	json_t *j = attrs ? json_loads(attrs, JSON_DECODE_ANY, NULL) : NULL;
	json_t *inst = json_object_get(j, "installed"), *o;
	size_t i;
	int rc = 0;
	*out = NULL;
	if (env == NULL || !json_is_array(inst))
		goto out;
	if ((rc = env_dist_stamps(c, env, &now, NULL)) != 0)
		goto out;
	json_array_foreach(inst, i, o)
	{
		const struct pip_dist *d =
		    find_dist(&now, json_string_value(json_object_get(o, "name")));
		const char *ver = json_string_value(json_object_get(o, "version"));
		if (d && d->stamp && ver && strcmp(d->version, ver) == 0 &&
		    json_object_get(o, "stamp") != NULL)
			json_object_set_new(o, "stamp", json_string(d->stamp));
	}
	*out = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
out:
	pip_result_release(&now);
	json_decref(j);
	free(env);
	return rc;
}

static int is_pinned(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name && strcmp(m->pip.reqs[i].name, name) == 0)
			return 1;
	return 0;
}

/*
 * The repair's sets from the old attrs: pinned distributions whose files
 * changed are reinstalled; one the lock no longer pins that the step had
 * installed is uninstalled, and so is an unpinned one the user added that
 * ships a file of a pinned one with other bytes (it overwrote it) or, with
 * --remove-unpinned, any the user added. The others are kept (*kept).
 */
static int repair_sets(struct ctx *c, const struct manifest *m, const char *env, const char *attrs,
                       struct strvec *redo, struct strvec *drop, struct strvec *kept,
                       struct why *why)
{
	struct envdiff d = {STRVEC_INIT, STRVEC_INIT, STRVEC_INIT, STRVEC_INIT};
	struct pkgfiles x = {0};
	json_t *j = attrs ? json_loads(attrs, JSON_DECODE_ANY, NULL) : NULL, *o;
	size_t i;
	int rc = env_compare(c, env, attrs, &d, why);
	if (rc != 0)
		goto out;
	for (i = 0; i < d.redo.n; i++)
		if (is_pinned(m, d.redo.v[i]))
			strvec_push(redo, d.redo.v[i]);
	json_array_foreach(json_object_get(j, "installed"), i, o)
	{
		const char *nm = json_string_value(json_object_get(o, "name"));
		if (nm && json_is_true(json_object_get(o, "pinned")) && !is_pinned(m, nm))
			strvec_push(drop, nm);
	}
	if (d.extra.n)
		pkgfiles_load(c, env, &x);
	for (i = 0; i < d.extra.n; i++) {
		const char *nm = d.extra.v[i];
		const char *over = NULL, *whose = NULL;
		if (is_pinned(m, nm))
			continue;
		/* x is sorted by path: the owners of one path are neighbours. */
		for (size_t k = 0; k < x.n && over == NULL; k++) {
			if (x.v[k].src != 'p' || strcmp(x.v[k].norm, nm) != 0)
				continue;
			for (size_t q = k; q-- > 0 && strcmp(x.v[q].path, x.v[k].path) == 0;)
				if (is_pinned(m, x.v[q].norm) &&
				    strcmp(x.v[q].sha256, x.v[k].sha256))
					over = x.v[k].path, whose = x.v[q].pkg;
			for (size_t q = k + 1; q < x.n && strcmp(x.v[q].path, x.v[k].path) == 0;
			     q++)
				if (is_pinned(m, x.v[q].norm) &&
				    strcmp(x.v[q].sha256, x.v[k].sha256))
					over = x.v[k].path, whose = x.v[q].pkg;
		}
		if (over) {
			ev_log(c, EV_WARN,
			       "pip: %s is not pinned and overwrote %s of %s: it is uninstalled",
			       d.xlabel.v[i], over, whose);
			strvec_push(drop, nm);
		} else if (c->flags & CTX_REMOVE_UNPINNED) {
			ev_log(c, EV_WARN, "pip: %s is not pinned: --remove-unpinned uninstalls it",
			       d.xlabel.v[i]);
			strvec_push(drop, nm);
		} else {
			strvec_push(kept, nm);
			ev_log(c, EV_WARN,
			       "pip: %s is not pinned by the lock: kept (--remove-unpinned "
			       "uninstalls it)",
			       d.xlabel.v[i]);
		}
	}
out:
	pkgfiles_release(&x);
	envdiff_release(&d);
	json_decref(j);
	return rc;
}

/*
 * A complete lock's files were verified into the cache before any step ran
 * (pip_artifacts): linked into *house, a journaled directory beside the env,
 * which pip and the native installer take them from (o's find-links) when
 * every pin is there. 0 or TF_E* (s failed).
 */
static int pip_wheelhouse(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                          const char *prefix, struct pip_opts *o, const char **verified,
                          char **house)
{
	struct why err = {0};
	int rc = txn_stage_dir(t, prefix, house);
	if (rc == 0 && mkdir(*house, 0755) != 0) {
		step_fail(s, "%s: cannot create: %s", *house, strerror(errno));
		rc = TF_EIO;
	}
	if (rc != 0)
		return rc;
	int complete = 0;
	int r = pipart_wheelhouse(c, m->pip.reqs, m->pip.nreqs, *house, &complete, &err);
	if (r < 0) {
		step_fail_why(s, r, &err);
		return r;
	}
	if (complete) {
		verified[0] = *house;
		o->find_links = verified;
		o->no_index = 1;
		o->links_verified = 1;
		o->index_url = NULL;
	}
	why_clear(&err);
	return 0;
}

/*
 * A repair (the env drifted from what this step recorded): exactly the
 * distributions that differ, by the native installer (o's reinstall and
 * drop). 0 or TF_E* (s failed).
 */
static int pip_repair(struct ctx *c, const struct manifest *m, struct step *s, const char *prefix,
                      struct pip_opts *o, struct strvec *redo, struct strvec *drop,
                      struct strvec *kept)
{
	struct why err = {0};
	int rc = repair_sets(c, m, prefix, s->attrs, redo, drop, kept, &err);
	if (rc != 0) {
		step_fail_why(s, rc, &err);
		return rc;
	}
	o->reinstall = redo;
	o->drop = drop;
	for (size_t i = 0; !o->native && i < drop->n; i++)
		ev_log(c, EV_WARN,
		       "pip: %s is kept: pip.installer: pip uninstalls nothing (the native "
		       "installer would)",
		       drop->v[i]);
	for (size_t i = 0; i < redo->n; i++)
		ev_log(c, EV_INFO, "pip: %s: files changed in place, reinstalled", redo->v[i]);
	return 0;
}

/*
 * The step's attrs after pip_install: {"installed": [{name, version, sha256,
 * stamp, pinned, kept}]} with each distribution's stamp taken now (for
 * pip_drift), and for an incomplete lock what was installed without a
 * pinned hash ("unhashed", named in a warning). Malloc'd.
 */
static char *pip_attrs(struct ctx *c, const struct manifest *m, const char *prefix,
                       const struct pip_result *res, const struct pip_result *before,
                       const struct strvec *kept, int complete)
{
	struct pip_result now = {0};
	if (env_dist_stamps(c, prefix, &now, NULL) != 0)
		pip_result_release(&now);
	json_t *arr = json_array();
	for (size_t i = 0; i < res->n; i++) {
		json_t *d = json_object();
		const struct pip_dist *st = find_dist(&now, res->v[i].name);
		json_object_set_new(d, "name", json_string(res->v[i].name));
		json_object_set_new(d, "version", json_string(res->v[i].version));
		if (res->v[i].sha256)
			json_object_set_new(d, "sha256", json_string(res->v[i].sha256));
		if (st && st->stamp && strcmp(st->version, res->v[i].version) == 0)
			json_object_set_new(d, "stamp", json_string(st->stamp));
		if (is_pinned(m, res->v[i].name))
			json_object_set_new(d, "pinned", json_true());
		for (size_t k = 0; k < kept->n; k++)
			if (strcmp(kept->v[k], res->v[i].name) == 0)
				json_object_set_new(d, "kept", json_true());
		json_array_append_new(arr, d);
	}
	json_t *top = json_pack("{s:o}", "installed", arr);
	if (!complete) {
		json_t *unhashed = unhashed_dists(before, res, m->pip.reqs, m->pip.nreqs);
		struct strbuf names = STRBUF_INIT;
		for (size_t i = 0; i < json_array_size(unhashed); i++)
			strbuf_addf(&names, "%s%s", i ? ", " : "",
			            json_string_value(json_array_get(unhashed, i)));
		ev_log(c, EV_WARN,
		       "pip: --allow-incomplete-lock: %zu package%s installed without a pinned "
		       "hash: %s",
		       json_array_size(unhashed), json_array_size(unhashed) == 1 ? "" : "s",
		       json_array_size(unhashed) ? names.buf : "(none)");
		strbuf_release(&names);
		json_object_set_new(top, "unhashed", unhashed);
	}
	char *attrs = json_dumps(top, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(top);
	pip_result_release(&now);
	return attrs;
}

/* prep: the files of a complete lock, as pip_artifacts named them (module.h). */
static int pip_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                     struct prepared *prep)
{
	char *prefix = stack_env_prefix(m);
	char *host = ctx_host_path(c, prefix);
	char *cache = path_join(c->cache_dir, "pip");
	struct why err = {0};
	struct pip_result res = {0}, before = {0};
	struct pip_opts o = {0};
	char *simple = NULL;
	const char *links[2] = {NULL, NULL}, *verified[2] = {NULL, NULL};
	char *house = NULL;
	struct strvec redo = STRVEC_INIT, drop = STRVEC_INIT, kept = STRVEC_INIT;
	int rc = 0;
	o.index_url = m->pip.index_url.s;
	o.complete = m->pip.complete.v;
	/* A complete lock is a reviewed closure: an sdist pinned in it is built offline. */
	o.allow_sdist = o.complete;
	o.resolve_rest = !o.complete && (c->flags & CTX_ALLOW_INCOMPLETE);
	o.cache_dir = cache;
	o.cert = c->ca_bundle;
	o.txn = t;
	o.env_path = prefix;
	o.native = m->pip.use_pip ? NULL : &wheelhouse_installer;
	o.ahead = &prep->arts;
	/* A mirror: a directory of wheels (find-links only) or, served over http(s),
	 * the PEP 503 pages `mirror build` writes under its simple/. */
	if (c->mirrors.n)
		pip_opts_mirror(&o, c->mirrors.v[0], links, &simple);
	if (m->pip.complete.v && m->pip.nreqs > 0 &&
	    (rc = pip_wheelhouse(c, m, s, t, prefix, &o, verified, &house)) != 0)
		goto out;
	if (c->flags & CTX_OFFLINE && !o.no_index) {
		step_fail(s, "--offline: pip needs a local wheel directory (--mirror DIR)");
		rc = TF_EOFFLINE;
		goto out;
	}
	if (m->pip.nreqs == 0)
		goto out;
	/* Opted in to an incomplete lock: what pip adds beyond the pins is named. */
	if (!o.complete && (rc = env_dists(host, &before, &err)) != 0) {
		step_fail_why(s, rc, &err);
		goto out;
	}
	if (s->attrs && o.complete &&
	    (rc = pip_repair(c, m, s, prefix, &o, &redo, &drop, &kept)) != 0)
		goto out;
	rc = pip_install(c, host, m->pip.reqs, m->pip.nreqs, &o, &res, &err);
	if (rc != 0) {
		step_fail(s, "%s%s%s", why_text(&err), res.failed_pkg ? "; package: " : "",
		          res.failed_pkg ? res.failed_pkg : "");
		goto out;
	}
	ev_log(c, EV_INFO, "pip: %zu pin%s installed; the env holds %zu distribution%s",
	       m->pip.nreqs, plural_s((long long)m->pip.nreqs), res.n, plural_s((long long)res.n));
	free(s->attrs);
	s->attrs = pip_attrs(c, m, prefix, &res, &before, &kept, o.complete);
	/* What pip changed in the env belongs to the env now. */
	rc = txn_refresh_resource(t, "pyenv");
out:
	if (house) {
		fs_rmtree(house);
		free(house);
	}
	pip_result_release(&res);
	pip_result_release(&before);
	strvec_release(&redo);
	strvec_release(&drop);
	strvec_release(&kept);
	free(simple);
	free(prefix);
	free(host);
	free(cache);
	why_clear(&err);
	return rc;
}

/*
 * Removing the pip step: the distributions it installed lose the files their
 * RECORDs list, with the directories that leaves empty. Files a resource
 * records are left to that resource; other distributions (a user's own
 * `pip install`) are not touched.
 */
static int pip_installed(const char *attrs, struct strvec *names, int *listed, int64_t *n);

static int pip_remove(struct ctx *c, struct step *s, struct txn *t)
{
	struct strvec files = STRVEC_INIT, dirs = STRVEC_INIT, mine = STRVEC_INIT;
	struct pkgfiles x = {0};
	int listed;
	int64_t ndists;
	/* What this step installed: its own recorded attrs (the planner hands them over). */
	if (pip_installed(s->attrs, &mine, &listed, &ndists) != 0) {
		strvec_release(&mine);
		return TF_ESTATE;
	}
	char *env = pkgfiles_load_stack(c, txn_stack_id(t), &mine, &x);
	strvec_release(&mine);
	for (size_t i = 0; env && i < x.n; i++) {
		const struct pkgfile *f = &x.v[i];
		if (place_is_owned(c, f->path))
			continue;
		/* Two distributions may own one file (nvidia/__init__.py of every
		 * nvidia-*-cu<N> wheel): the index is sorted by path, remove it once. */
		if (i > 0 && strcmp(x.v[i - 1].path, f->path) == 0)
			continue;
		strvec_push(&files, f->path);
		char *dir = xstrdup(f->path);
		for (char *sl = strrchr(dir, '/'); sl && (size_t)(sl - dir) > strlen(env);
		     sl = strrchr(dir, '/')) {
			*sl = '\0';
			if (!place_is_owned(c, dir))
				strvec_push(&dirs, dir);
		}
		free(dir);
	}
	int rc = files.n ? txn_remove_paths(t, &files, &dirs) : 0;
	pkgfiles_release(&x);
	strvec_release(&files);
	strvec_release(&dirs);
	free(env);
	return rc;
}

/* The distributions pip_apply recorded in the attrs ({"installed": [...]}). */
static int pip_installed(const char *attrs, struct strvec *names, int *listed, int64_t *n)
{
	json_t *j = attrs ? json_loads(attrs, JSON_DECODE_ANY, NULL) : NULL;
	json_t *inst = json_object_get(j, "installed");
	*listed = inst != NULL;
	*n = (int64_t)json_array_size(inst);
	size_t i;
	json_t *d;
	json_array_foreach(inst, i, d)
	{
		const char *name = json_string_value(json_object_get(d, "name"));
		if (names && name) {
			char *norm = pip_normalize_name(name);
			strvec_push(names, norm);
			free(norm);
		}
	}
	json_decref(j);
	return attrs && j == NULL ? TF_ESTATE : 0;
}

const struct module module_pip = {
    .kind = "pip",
    .desire = pip_desire,
    .precheck = pip_precheck,
    .apply = pip_apply,
    .remove = pip_remove,
    .artifacts = pip_artifacts,
    .depends_on = "pyenv",
    .installed = pip_installed,
    .drift = pip_drift,
    .restamp = pip_restamp,
};
