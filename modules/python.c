/*
 * python.c - the `pyenv` and `pip` steps.
 *
 * pyenv: manager conda installs the manifest's explicit lock natively
 * (conda.c: extract, link, prefix replacement, conda-meta into a journaled
 * stage, placed by txn_replace_dir; the packages were fetched and verified
 * before any step ran, pyenv_artifacts) and writes the stack's activation hook into
 * etc/conda/activate.d so `conda activate` sets the CUDA environment;
 * manager venv uses a system interpreter of exactly the manifest's X.Y.
 * Every file of the env is recorded.
 *
 * pip: installs the pins with the env's own pip, hashes required, isolated
 * from the user's PIP_* settings (pipdrv.c), or, for a complete lock of
 * wheels, with the native installer it chooses (wheelhouse.c, unless
 * pip.installer is pip). It depends on pyenv: a rebuilt
 * env has lost its pip packages, so pip runs again. What pip changed in the
 * env is re-recorded, so the env's own drift check does not mistake pip's
 * work for drift.
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

static enum desire pyenv_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                                struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	if (!m->python.set)
		return DESIRE_NONE;
	char *prefix = stack_env_prefix(m);
	strbuf_addf(canon, "prefix=%s\nmanager=%d\nversion=%s\ninterpreter=%s\n", prefix,
	            (int)m->python.manager, m->python.version.s ? m->python.version.s : "",
	            m->python.interpreter.s ? m->python.interpreter.s : "");
	for (size_t i = 0; i < m->python.npkgs; i++) {
		strbuf_addf(canon, "pkg=%s %s%s\n", m->python.pkgs[i].url, m->python.pkgs[i].sha256,
		            m->python.pkgs[i].md5);
		strvec_push(urls, m->python.pkgs[i].url);
	}
	if (m->python.manager == PYENV_CONDA)
		strbuf_addf(detail, "conda env %s from an explicit lock (%zu packages)", prefix,
		            m->python.npkgs);
	else
		strbuf_addf(detail, "venv %s with the system's Python %s", prefix,
		            m->python.version.s ? m->python.version.s : "?");
	free(prefix);
	return DESIRE_WANTED;
}

/* Records every path of an env that was built outside the txn (conda swap, venv). */
static int record_env(struct ctx *c, struct txn *t, const char *prefix)
{
	char *host = ctx_host_path(c, prefix);
	struct staged tree = {0};
	staged_record_tree(&tree, host);
	int rc = txn_record_tree(t, prefix, tree.v, tree.n);
	staged_release(&tree);
	free(host);
	return rc;
}

/*
 * The conda env is built in a journaled stage beside the prefix (files carry
 * the final prefix) and put in place by the placement layer's journaled
 * replace: a kill at any point leaves the old env (or none) for recovery to
 * restore, or the new one committed.
 */
static int conda_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                       const char *prefix)
{
	struct conda_result res = {0};
	char *err = NULL, *stage = NULL;
	int rc = txn_stage_dir(t, prefix, &stage);
	if (rc == 0)
		rc = conda_fetch_install(c, prefix, 0, m->python.pkgs, m->python.npkgs, stage, &res,
		                         &err);
	else
		err = xstrdup(txn_error(t) ? txn_error(t) : tf_strerror(rc));
	if (rc == 0 && (rc = txn_replace_dir(t, stage, prefix)) != 0)
		err = xstrdup(txn_error(t) ? txn_error(t) : tf_strerror(rc));
	if (rc != 0)
		step_fail(s, "%s", err ? err : tf_strerror(rc));
	else
		ev_log(c, EV_INFO,
		       "pyenv: conda env %s: %zu packages (%zu extracted, %zu from the cache)",
		       prefix, m->python.npkgs, res.extracted, res.reused);
	free(err);
	free(stage);
	conda_result_release(&res);
	return rc;
}

/*
 * A venv records its own path (bin/activate, pyvenv.cfg, pip's script
 * shebangs, its .pyc files), so it is built at its final path: an env of the
 * same X.Y is kept; any other is moved aside by the journal first
 * (txn_will_create: the row's backup), so a kill or failure puts it back and
 * the commit deletes it.
 */
static int venv_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                      const char *prefix)
{
	char *python = NULL, *err = NULL;
	char *host = ctx_host_path(c, prefix);
	int created = 0;
	int rc = pyenv_find_python(c, m->python.version.s, m->python.interpreter.s, &python, &err);
	if (rc == 0 && !venv_reusable(python, host) && (rc = txn_will_create(t, prefix)) != 0)
		err = xstrdup(txn_error(t) ? txn_error(t) : tf_strerror(rc));
	if (rc == 0)
		rc = venv_create(c, python, host, &created, &err);
	if (rc != 0)
		step_fail(s, "%s", err ? err : tf_strerror(rc));
	else
		ev_log(c, EV_INFO, "pyenv: venv %s %s with %s", prefix,
		       created ? "created" : "kept", python);
	free(python);
	free(err);
	free(host);
	return rc;
}

/* `conda activate` sources the scripts in etc/conda/activate.d: the stack environment. */
static int write_hook(struct ctx *c, const struct manifest *m, struct txn *t, const char *prefix)
{
	(void)c;
	if (!m->env.set && !m->cuda.set)
		return 0;
	char *hook = xasprintf("%s/etc/conda/activate.d/tfprov-%s.sh", prefix, m->stack.name.s);
	char *profile = xasprintf("%s/tfprov-%s.sh", m->env.profile_dir.s, m->stack.name.s);
	char *text = xasprintf("# Written by tfprov: the environment of stack '%s'.\n"
	                       "[ -r '%s' ] && . '%s'\n",
	                       m->stack.name.s, profile, profile);
	/* The hook is part of the freshly built env tree, so it is placed in it directly. */
	int rc = txn_put_file(t, hook, text, strlen(text), 0644);
	free(hook);
	free(profile);
	free(text);
	return rc;
}

/*
 * A venv has no activate.d: the stack's environment is sourced from the end
 * of bin/activate (once; the line is marked). The new bin/activate is a
 * placed file (journaled, renamed over the old one), after the env's tree
 * was recorded.
 */
static int venv_hook(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                     const char *prefix)
{
	if (!m->env.set && !m->cuda.set)
		return 0;
	char *rel = xasprintf("%s/bin/activate", prefix);
	char *host = ctx_host_path(c, rel);
	char *text = NULL;
	size_t len = 0;
	int rc = 0;
	struct stat st;
	if (read_file_at(AT_FDCWD, host, 1 << 20, &text, &len) != 0 || stat(host, &st) != 0) {
		step_fail(s, "cannot read %s", rel);
		rc = TF_EIO;
	} else if (strstr(text, "# tfprov stack env") == NULL) {
		struct strbuf b = STRBUF_INIT;
		strbuf_add(&b, text, len);
		if (len > 0 && text[len - 1] != '\n')
			strbuf_adds(&b, "\n");
		strbuf_addf(
		    &b, "[ -r '%s/tfprov-%s.sh' ] && . '%s/tfprov-%s.sh'  # tfprov stack env\n",
		    m->env.profile_dir.s, m->stack.name.s, m->env.profile_dir.s, m->stack.name.s);
		rc = txn_put_file(t, rel, b.buf, b.len, st.st_mode & 07777);
		strbuf_release(&b);
	}
	free(text);
	free(host);
	free(rel);
	return rc;
}

/*
 * manager: venv needs a system interpreter of exactly X.Y. Looking for it
 * changes nothing, so it is a precondition: a missing python3.X stops apply
 * (exit 6) before the cuda/cudnn/env steps write anything, rather than half-way.
 */
static int pyenv_precheck(struct ctx *c, const struct manifest *m, struct step *s)
{
	if (m->python.manager != PYENV_VENV)
		return 0;
	char *python = NULL, *err = NULL;
	int rc = pyenv_find_python(c, m->python.version.s, m->python.interpreter.s, &python, &err);
	if (rc != 0)
		step_fail(s, "%s", err ? err : tf_strerror(rc));
	free(python);
	free(err);
	return rc;
}

/*
 * The conda packages of the lock, fetched and verified into the cache with
 * every other download of the plan before the first step changes anything;
 * conda_fetch_install then finds each one there.
 */
static int pyenv_artifacts(struct ctx *c, const struct manifest *m, struct artset *out,
                           struct step *s)
{
	if (m->python.manager != PYENV_CONDA)
		return 0;
	for (size_t i = 0; i < m->python.npkgs; i++) {
		const struct conda_pkg *p = &m->python.pkgs[i];
		if (p->sha256[0] == '\0') {
			step_fail(s,
			          "%s:%d:%d: %s-%s-%s is pinned by md5 only; tfprov verifies "
			          "downloads by sha256: regenerate the lock with `conda list "
			          "--explicit --sha256`",
			          m->path, p->pos.line, p->pos.col, p->name, p->version, p->build);
			return TF_EMANIFEST;
		}
		char *name = xasprintf("%s-%s-%s", p->name, p->version, p->build);
		artset_add(out, name, p->url, p->sha256, -1, 0);
		free(name);
		/* Extracted ahead, while the other downloads run, unless the
		 * package cache has it already (conda.c reuses that). */
		if (!conda_pkg_extracted(c, p))
			artset_mark_python(out, out->n - 1, ART_CONDA);
	}
	return 0;
}

static int pyenv_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t)
{
	char *prefix = stack_env_prefix(m);
	int rc;
	/* The old records go; the rebuilt env is recorded afresh. */
	rc = txn_forget_all(t);
	if (rc == 0 && m->python.manager == PYENV_CONDA)
		rc = conda_apply(c, m, s, t, prefix);
	else if (rc == 0)
		rc = venv_apply(c, m, s, t, prefix);
	/* The conda hook first, so its directories (etc/conda/activate.d) are
	 * recorded with the env and go with it when the env is removed. */
	if (rc == 0 && m->python.manager == PYENV_CONDA)
		rc = write_hook(c, m, t, prefix);
	/* A failed txn call keeps its message in the txn: the executor makes it the step's. */
	if (rc == 0)
		rc = record_env(c, t, prefix);
	if (rc == 0 && m->python.manager == PYENV_VENV)
		rc = venv_hook(c, m, s, t, prefix);
	free(prefix);
	return rc;
}

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
	const struct compat_tf_glibc *row = NULL;
	const char *tf = m->versions.tensorflow.s, *need = NULL, *why = NULL;
	const char *host = getenv("TFPROV_GLIBC_VERSION");
	int rc = 0, from_tf = 0;
	if (m->stack.platform != PLATFORM_LINUX_X86_64 && m->stack.platform != PLATFORM_WSL2)
		return 0;
	if (host == NULL || *host == '\0')
		host = gnu_get_libc_version();
	for (size_t i = 0; tf == NULL && i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name && strcmp(m->pip.reqs[i].name, "tensorflow") == 0)
			tf = m->pip.reqs[i].version;
	if (compat_load(compat_default_path(), &kb, &d) == 0 && compat_tf_min_glibc(kb, tf, &row)) {
		need = row->glibc;
		why = row->tag;
		from_tf = 1;
	}
	if (m->pip.min_glibc.set && (need == NULL || version_cmp(m->pip.min_glibc.s, need) > 0)) {
		need = m->pip.min_glibc.s;
		why = "pip.min_glibc";
		from_tf = 0;
	}
	if (need != NULL && version_valid(host) && version_cmp(host, need) < 0) {
		step_fail(s,
		          "this machine's glibc %s is older than %s, which the pip lock's wheels "
		          "need (%s%s%s): pip would find no installable file for them. Use a "
		          "distribution with glibc >= %s, or a stack whose wheels need less",
		          host, need, why, from_tf ? " of TensorFlow " : "", from_tf ? tf : "",
		          need);
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
	char *simple = NULL, *pyver = env_pyver(m), *err = NULL;
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
		step_fail(s, "%s", err ? err : tf_strerror(rc));
	else if (!m->pip.use_pip) {
		char *prefix = stack_env_prefix(m);
		pipart_mark_predecode(c, out, from, prefix, pyver);
		free(prefix);
	}
	free(err);
	free(simple);
	free(pyver);
	return rc;
}

static int pip_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t)
{
	char *prefix = stack_env_prefix(m);
	char *host = ctx_host_path(c, prefix);
	char *cache = path_join(c->cache_dir, "pip");
	char *err = NULL;
	struct pip_result res = {0}, before = {0};
	struct pip_opts o = {0};
	json_t *unhashed = NULL;
	char *simple = NULL;
	const char *links[2] = {NULL, NULL}, *verified[2] = {NULL, NULL};
	char *house = NULL;
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
	/* A mirror: a directory of wheels (find-links only) or, served over http(s),
	 * the PEP 503 pages `mirror build` writes under its simple/. */
	if (c->mirrors.n)
		pip_opts_mirror(&o, c->mirrors.v[0], links, &simple);
	/* A complete lock's files were verified into the cache before any step ran
	 * (pip_artifacts): pip and the native installer take them from there. */
	if (m->pip.complete.v && m->pip.nreqs > 0) {
		rc = txn_stage_dir(t, prefix, &house);
		if (rc == 0 && mkdir(house, 0755) != 0) {
			step_fail(s, "%s: cannot create: %s", house, strerror(errno));
			rc = TF_EIO;
		}
		if (rc != 0)
			goto out;
		int complete = 0;
		int r = pipart_wheelhouse(c, m->pip.reqs, m->pip.nreqs, house, &complete, &err);
		if (r < 0) {
			step_fail(s, "%s", err ? err : tf_strerror(r));
			rc = r;
			goto out;
		}
		if (complete) {
			verified[0] = house;
			o.find_links = verified;
			o.no_index = 1;
			o.index_url = NULL;
		}
	}
	if (c->flags & CTX_OFFLINE && !o.no_index) {
		step_fail(s, "--offline: pip needs a local wheel directory (--mirror DIR)");
		rc = TF_EOFFLINE;
		goto out;
	}
	if (m->pip.nreqs == 0)
		goto out;
	/* Opted in to an incomplete lock: what pip adds beyond the pins is named. */
	if (!o.complete) {
		rc = pip_list(c, host, &before, &err);
		if (rc != 0) {
			step_fail(s, "%s", err ? err : tf_strerror(rc));
			goto out;
		}
	}
	rc = pip_install(c, host, m->pip.reqs, m->pip.nreqs, &o, &res, &err);
	if (rc != 0) {
		step_fail(s, "%s%s%s", err ? err : tf_strerror(rc),
		          res.failed_pkg ? "; package: " : "",
		          res.failed_pkg ? res.failed_pkg : "");
		goto out;
	}
	ev_log(c, EV_INFO, "pip: %zu pins installed; the env holds %zu distributions", m->pip.nreqs,
	       res.n);
	json_t *arr = json_array();
	for (size_t i = 0; i < res.n; i++) {
		json_t *d = json_object();
		json_object_set_new(d, "name", json_string(res.v[i].name));
		json_object_set_new(d, "version", json_string(res.v[i].version));
		if (res.v[i].sha256)
			json_object_set_new(d, "sha256", json_string(res.v[i].sha256));
		json_array_append_new(arr, d);
	}
	json_t *top = json_pack("{s:o}", "installed", arr);
	if (!o.complete) {
		unhashed = unhashed_dists(&before, &res, m->pip.reqs, m->pip.nreqs);
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
	free(s->attrs);
	s->attrs = json_dumps(top, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(top);
	/* What pip changed in the env belongs to the env now. */
	rc = txn_refresh_resource(t, "pyenv");
out:
	if (house) {
		fs_rmtree(house);
		free(house);
	}
	pip_result_release(&res);
	pip_result_release(&before);
	free(simple);
	free(prefix);
	free(host);
	free(cache);
	free(err);
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

const struct module module_pyenv = {
    .kind = "pyenv",
    .desire = pyenv_desire,
    .precheck = pyenv_precheck,
    .apply = pyenv_apply,
    .artifacts = pyenv_artifacts,
};

const struct module module_pip = {
    .kind = "pip",
    .desire = pip_desire,
    .precheck = pip_precheck,
    .apply = pip_apply,
    .remove = pip_remove,
    .artifacts = pip_artifacts,
    .depends_on = "pyenv",
    .installed = pip_installed,
};
