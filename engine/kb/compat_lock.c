/*
 * compat_lock.c - the static check of a whole pip lock for its target, what
 * `pip check` would say of the installed env, before anything is installed;
 * and the knowledge base's facts the packages' metadata cannot carry.
 *
 *  - Every pinned distribution's own requirements (pip.requires, recorded by
 *    `tfprov lock` from each wheel's METADATA) are evaluated for the stack's
 *    target: platform, Python, and the distribution's active extras (those
 *    its pin names and those other requirements ask for). Each requirement
 *    that applies must be met by a pin, or by the Python env itself (the
 *    conda lock's packages; pip, and setuptools before Python 3.12, in a
 *    venv). A complete lock must pin every one.
 *  - No two pinned distributions may own the same top-level import package
 *    (pip.import_packages): the one unpacked last would win.
 *  - The known-bad table (pip.caps): releases whose metadata allows a
 *    dependency version that breaks them.
 *  - env.vars against how TensorFlow parses the variables it reads
 *    (env_vars).
 *
 * Invariants: a diagnostic about a requirement points at the requiring
 * distribution's pin (the package's line) and names both packages and the
 * requirement; a pin that an earlier lint already refused (the TF release's
 * own ranges) gets no second error from here, so one mistake reads as one
 * line.
 */
#include "kb.h"
#include "kb_int.h"
#include "pep508.h"
#include "version.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct dist {
	const char *name; /* normalized */
	const char *version;
	struct pos pos;
	const struct pip_requires *req; /* recorded requirements, or NULL */
	struct strvec extras;           /* active extras, normalized */
};

struct lock {
	const struct compat *kb;
	const struct manifest *m;
	struct diags *d;
	const char *file;
	struct pep508_env env;
	struct dist *v;
	size_t n;
	int venv_setuptools; /* a venv seeds setuptools (Python < 3.12) */
};

static struct dist *find_dist(struct lock *k, const char *name)
{
	for (size_t i = 0; i < k->n; i++)
		if (strcmp(k->v[i].name, name) == 0)
			return &k->v[i];
	return NULL;
}

/* An error already at this node (from an earlier lint): say nothing more there. */
static int already_refused(const struct lock *k, struct pos pos)
{
	for (size_t i = 0; i < k->d->n; i++) {
		const struct diag *g = &k->d->v[i];
		if (g->sev == DIAG_ERROR && g->pos.line == pos.line && g->pos.col == pos.col &&
		    strcmp(g->file, k->file) == 0)
			return 1;
	}
	return 0;
}

static int has_extra(const struct dist *x, const char *e)
{
	for (size_t i = 0; i < x->extras.n; i++)
		if (strcmp(x->extras.v[i], e) == 0)
			return 1;
	return 0;
}

/*
 * Whether requirement text applies to distribution x on the target: 1 yes,
 * 0 no, TF_EMANIFEST unreadable (why). r is filled when it parses.
 */
static int applies(struct lock *k, const struct dist *x, const char *text, struct pep508_req *r,
                   struct why *why)
{
	int rc = pep508_parse(text, r, why);
	if (rc != 0)
		return rc;
	if (r->marker == NULL)
		return 1;
	k->env.extras = (const char *const *)x->extras.v;
	k->env.nextras = x->extras.n;
	return pep508_marker_eval(r->marker, &k->env, why);
}

/* Extras that requirements ask of other pinned distributions, to a fixed point. */
static void spread_extras(struct lock *k)
{
	int changed = 1;

	for (size_t round = 0; changed && round <= k->n; round++) {
		changed = 0;
		for (size_t i = 0; i < k->n; i++) {
			const struct pip_requires *q = k->v[i].req;
			for (size_t j = 0; q != NULL && j < q->nreqs; j++) {
				struct pep508_req r;
				struct dist *t;

				if (q->reqs[j].s == NULL ||
				    applies(k, &k->v[i], q->reqs[j].s, &r, NULL) != 1) {
					if (q->reqs[j].s != NULL)
						pep508_req_release(&r);
					continue;
				}
				t = find_dist(k, r.name);
				for (size_t e = 0; t != NULL && e < r.nextras; e++)
					if (!has_extra(t, r.extras[e])) {
						strvec_push(&t->extras, r.extras[e]);
						changed = 1;
					}
				pep508_req_release(&r);
			}
		}
	}
}

/* A requirement the env itself may meet: the conda lock's packages, a venv's seeds. */
static int env_provides(const struct lock *k, const char *name, const char **version)
{
	const struct manifest *m = k->m;

	*version = NULL;
	for (size_t i = 0; i < m->python.npkgs; i++)
		if (m->python.pkgs[i].name != NULL && strcmp(m->python.pkgs[i].name, name) == 0) {
			*version = m->python.pkgs[i].version;
			return 1;
		}
	if (m->python.manager == PYENV_VENV || m->python.npkgs == 0)
		return strcmp(name, "pip") == 0 ||
		       (k->venv_setuptools && strcmp(name, "setuptools") == 0);
	return 0;
}

static void check_requirement(struct lock *k, const struct dist *x, const struct mstr *text,
                              const struct pep508_req *r)
{
	const struct dist *t;
	const char *have = NULL, *where = "the lock pins";
	char *hint;
	int line = 0;

	if (strcmp(r->name, x->name) == 0 || r->url != NULL)
		return; /* its own extras; a direct reference is pinned by URL */
	t = find_dist(k, r->name);
	if (t != NULL) {
		have = t->version;
		line = t->pos.line;
		if (already_refused(k, t->pos) && strcmp(x->name, "tensorflow") == 0)
			return; /* the TF release's range said it at that pin */
	} else if (env_provides(k, r->name, &have)) {
		where = k->m->python.npkgs ? "the conda lock has" : "the venv has";
		if (have == NULL)
			return; /* seeded by venv: its version follows the interpreter */
	} else {
		if (!k->m->pip.complete.set || !k->m->pip.complete.v)
			return; /* pip resolves it at apply */
		hint =
		    xasprintf("pip.complete is true, so pip installs the pins with --no-deps and "
		              "%s will be missing; run `tfprov lock` again or pin it (recorded "
		              "at line %d)",
		              r->name, text->pos.line);
		diags_add(k->d, DIAG_ERROR, k->file, x->pos, "compat.pip-requires-missing", hint,
		          "%s %s requires %s, which the lock does not pin", x->name,
		          x->version ? x->version : "", text->s);
		free(hint);
		return;
	}
	if (have == NULL || r->spec[0] == '\0' || compat_spec_allows(r->spec, have))
		return;
	if (line > 0)
		hint =
		    xasprintf("as `pip check` would report; pin a %s that satisfies %s%s, or a %s "
		              "release made for %s %s (requirement recorded at line %d)",
		              r->name, r->name, r->spec, x->name, r->name, have, text->pos.line);
	else
		hint = xasprintf("as `pip check` would report; make the Python env's %s satisfy "
		                 "%s%s (requirement recorded at line %d)",
		                 r->name, r->name, r->spec, text->pos.line);
	if (line > 0)
		diags_add(k->d, DIAG_ERROR, k->file, x->pos, "compat.pip-requires-unsatisfied",
		          hint, "%s %s requires %s, but %s %s %s (line %d)", x->name,
		          x->version ? x->version : "", text->s, where, r->name, have, line);
	else
		diags_add(k->d, DIAG_ERROR, k->file, x->pos, "compat.pip-requires-unsatisfied",
		          hint, "%s %s requires %s, but %s %s %s", x->name,
		          x->version ? x->version : "", text->s, where, r->name, have);
	free(hint);
}

static void check_dist(struct lock *k, const struct dist *x)
{
	const struct pip_requires *q = x->req;

	for (size_t j = 0; q != NULL && j < q->nreqs; j++) {
		struct pep508_req r;
		struct why why = {0};
		int a;

		if (q->reqs[j].s == NULL)
			continue;
		a = applies(k, x, q->reqs[j].s, &r, &why);
		if (a < 0) {
			diags_add(
			    k->d, DIAG_WARNING, k->file, q->reqs[j].pos,
			    "compat.pip-requires-unreadable",
			    "record Requires-Dist as the wheel's METADATA writes it (PEP 508)",
			    "%s's requirement '%s' cannot be judged: %s", x->name, q->reqs[j].s,
			    why_text(&why));
			why_clear(&why);
			if (r.name != NULL)
				pep508_req_release(&r);
			continue;
		}
		if (a == 1)
			check_requirement(k, x, &q->reqs[j], &r);
		pep508_req_release(&r);
	}
}

/* Does x require y on the target? Then x wraps y (tensorflow on Windows needs tensorflow-intel). */
static int requires_dist(struct lock *k, const struct dist *x, const char *y)
{
	int found = 0;

	for (size_t j = 0; x->req != NULL && j < x->req->nreqs && !found; j++) {
		struct pep508_req r;

		if (x->req->reqs[j].s == NULL)
			continue;
		if (applies(k, x, x->req->reqs[j].s, &r, NULL) == 1)
			found = strcmp(r.name, y) == 0;
		if (r.name != NULL)
			pep508_req_release(&r);
	}
	return found;
}

static void check_imports(struct lock *k)
{
	for (size_t g = 0; g < k->kb->nimports; g++) {
		const struct compat_import_pkg *ip = &k->kb->imports[g];
		const struct dist *first = NULL;

		for (size_t i = 0; i < k->n; i++) {
			const struct dist *x = &k->v[i];
			int member = 0;

			for (size_t j = 0; j < ip->ndists && !member; j++)
				member = strcmp(ip->dists[j], x->name) == 0;
			if (!member)
				continue;
			if (first == NULL) {
				first = x;
				continue;
			}
			if (requires_dist(k, first, x->name) || requires_dist(k, x, first->name))
				continue;
			char *hint = xasprintf("%s (%s)", ip->fix, ip->source);
			diags_add(k->d, DIAG_ERROR, k->file, x->pos, "compat.pip-import-clash",
			          hint,
			          "%s and %s (line %d) both install the import package `%s`: "
			          "whichever is unpacked last overwrites the other",
			          x->name, first->name, first->pos.line, ip->import);
			free(hint);
		}
	}
}

/* The pinned version of name: a pip pin (its node in *pos) or the conda lock's package. */
static const char *version_of(const struct lock *k, const char *name, struct pos *pos)
{
	for (size_t i = 0; i < k->n; i++)
		if (strcmp(k->v[i].name, name) == 0) {
			*pos = k->v[i].pos;
			return k->v[i].version;
		}
	for (size_t i = 0; i < k->m->python.npkgs; i++) {
		const struct conda_pkg *p = &k->m->python.pkgs[i];
		if (p->name != NULL && strcmp(p->name, name) == 0) {
			*pos = p->pos;
			return p->version;
		}
	}
	/* TensorFlow under another distribution name (tensorflow-gpu 1.15): the stack's. */
	if (strcmp(name, "tensorflow") == 0 && k->m->versions.tensorflow.s != NULL) {
		*pos = k->m->versions.tensorflow.pos;
		return k->m->versions.tensorflow.s;
	}
	return NULL;
}

static void check_known_bad(struct lock *k)
{
	for (size_t i = 0; i < k->kb->ncaps; i++) {
		const struct pip_cap *c = &k->kb->caps[i];
		struct pos at = {0, 0}, wat = {0, 0};
		const char *v = version_of(k, c->package, &at);
		const char *w = version_of(k, c->when, &wat);
		int warn = c->severity != NULL && strcmp(c->severity, "warning") == 0;
		char *hint;

		if (v == NULL || w == NULL || version_cmp(w, c->when_below) >= 0 ||
		    version_cmp(v, c->below) < 0 || already_refused(k, at))
			continue;
		hint = xasprintf("pin %s<%s (tfprov lock applies this cap); source: %s", c->package,
		                 c->below, c->source);
		diags_add(k->d, warn ? DIAG_WARNING : DIAG_ERROR, k->file, at,
		          "compat.pip-known-bad", hint,
		          "%s %s with %s %s (line %d) is known to break: %s", c->package, v,
		          c->when, w, wat.line, c->fact);
		free(hint);
	}
}

/*
 * A pin's Requires-Python (pip.requires_python) against the stack's Python, as
 * pip would refuse the file ("requires a different Python"): the full version
 * when it is known (the conda lock's python, or a python given as X.Y.Z), else
 * X.Y, refused only when no X.Y.z release meets it. At the pin's line.
 */
static void check_requires_python(struct lock *k, const struct dist *x, const char *python,
                                  const char *full)
{
	const struct pip_requires *rp = NULL;
	const struct mstr *spec;
	char *hint, *shown;
	int ok = 0;

	for (size_t i = 0; i < k->m->pip.nrequires_python && rp == NULL; i++)
		if (strcmp(k->m->pip.requires_python[i].name, x->name) == 0)
			rp = &k->m->pip.requires_python[i];
	if (rp == NULL || rp->nreqs == 0 || python == NULL)
		return;
	spec = &rp->reqs[0];
	if (!compat_spec_valid(spec->s)) {
		diags_add(k->d, DIAG_WARNING, k->file, spec->pos,
		          "compat.pip-requires-python-unreadable",
		          "record Requires-Python as the wheel's METADATA writes it (PEP 440)",
		          "%s's Requires-Python '%s' cannot be judged: not a PEP 440 specifier",
		          x->name, spec->s);
		return;
	}
	if (full == NULL && strchr(strchr(python, '.') ? strchr(python, '.') + 1 : "", '.'))
		full = python;
	if (full != NULL) {
		ok = compat_spec_allows(spec->s, full);
		shown = xstrdup(full);
	} else {
		for (int z = 0; z < 100 && !ok; z++) {
			char *v = xasprintf("%s.%d", python, z);
			ok = compat_spec_allows(spec->s, v);
			free(v);
		}
		shown = xasprintf("%s (no %s.z release meets it)", python, python);
	}
	if (!ok) {
		hint = xasprintf("pip refuses it for this interpreter; pin a %s release whose "
		                 "Requires-Python admits the stack's Python, or change the stack's "
		                 "Python (Requires-Python recorded at line %d)",
		                 x->name, spec->pos.line);
		diags_add(k->d, DIAG_ERROR, k->file, x->pos, "compat.pip-requires-python", hint,
		          "%s %s requires Python %s, but the stack's Python is %s", x->name,
		          x->version ? x->version : "", spec->s, shown);
		free(hint);
	}
	free(shown);
}

void compat_lint_lock(const struct compat *kb, const struct manifest *m, const char *python,
                      int windows, struct diags *d)
{
	struct lock k = {0};
	const char *full = NULL;

	k.kb = kb;
	k.m = m;
	k.d = d;
	k.file = m->path;
	for (size_t i = 0; i < m->python.npkgs; i++)
		if (m->python.pkgs[i].name != NULL && strcmp(m->python.pkgs[i].name, "python") == 0)
			full = m->python.pkgs[i].version;
	pep508_env_for(&k.env, windows, python, full);
	k.venv_setuptools = python != NULL && version_cmp_n(python, "3.12", 2) < 0;
	k.v = xcalloc(m->pip.nreqs ? m->pip.nreqs : 1, sizeof(*k.v));
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];
		struct dist *x;
		struct pep508_req r;

		if (q->name == NULL || find_dist(&k, q->name) != NULL)
			continue;
		x = &k.v[k.n++];
		x->name = q->name;
		x->version = q->version;
		x->pos = q->pos;
		x->extras = (struct strvec)STRVEC_INIT;
		if (q->spec != NULL && pep508_parse(q->spec, &r, NULL) == 0) {
			for (size_t e = 0; e < r.nextras; e++)
				strvec_push(&x->extras, r.extras[e]);
			pep508_req_release(&r);
		}
		for (size_t j = 0; j < m->pip.nrequires; j++)
			if (strcmp(m->pip.requires[j].name, q->name) == 0)
		x->req = &m->pip.requires[j];
	}
	spread_extras(&k);
	for (size_t i = 0; i < k.n; i++) {
		check_dist(&k, &k.v[i]);
		check_requires_python(&k, &k.v[i], python, full);
	}
	check_imports(&k);
	check_known_bad(&k);
	for (size_t i = 0; i < k.n; i++)
		strvec_release(&k.v[i].extras);
	free(k.v);
}

/* ---- packages that carry CUDA ---- */

/*
 * Matches name against a carrier pattern: literal text, '*' (one character or
 * more), {M} (the CUDA major, 1-2 digits) and {m} (its minor, one digit). On a
 * match *major and *minor (-1 without {m}) are the CUDA the name carries.
 */
static int carrier_match(const char *pat, const char *name, long *major, long *minor)
{
	if (*pat == '\0')
		return *name == '\0';
	if (strncmp(pat, "{M}", 3) == 0 || strncmp(pat, "{m}", 3) == 0) {
		long *slot = pat[1] == 'm' ? minor : major, save = *slot, v = 0;
		size_t max = pat[1] == 'm' ? 1 : 2;

		for (size_t n = 1; n <= max && name[n - 1] >= '0' && name[n - 1] <= '9'; n++) {
			v = v * 10 + (name[n - 1] - '0');
			*slot = v;
			if (carrier_match(pat + 3, name + n, major, minor))
				return 1;
		}
		*slot = save;
		return 0;
	}
	if (*pat == '*') {
		for (size_t n = 1; name[n - 1] != '\0'; n++)
			if (carrier_match(pat + 1, name + n, major, minor))
				return 1;
		return 0;
	}
	return *pat == *name && carrier_match(pat + 1, name + 1, major, minor);
}

/* A package built for CUDA major[.minor] (minor -1: any) against the stack's CUDA. */
static void carrier_diag(const struct manifest *m, struct diags *d, struct pos pos,
                         const char *what, long major, long minor, const struct mstr *cuda,
                         int family, const char *source)
{
	long smaj = version_component(cuda->s, 0), smin = version_component(cuda->s, 1);
	char built[48];
	char *hint;

	if (minor >= 0)
		snprintf(built, sizeof(built), "%ld.%ld", major, minor);
	else
		snprintf(built, sizeof(built), "%ld", major);
	if (major != smaj) {
		hint = xasprintf("TensorFlow and this package would need two CUDA runtimes; take "
		                 "its build for CUDA %ld (%s)",
		                 smaj, source);
		diags_add(d, DIAG_ERROR, m->path, pos, "compat.cuda-package-mismatch", hint,
		          "%s is built for CUDA %s, but the stack is CUDA %s (line %d)", what,
		          built, cuda->s, cuda->pos.line);
	} else if (minor >= 0 && !family && minor != smin) {
		hint = xasprintf("before CUDA 11 each minor release has its own sonames "
		                 "(libcudart.so.%ld.%ld): take the build for CUDA %ld.%ld (%s)",
		                 smaj, smin, smaj, smin, source);
		diags_add(d, DIAG_ERROR, m->path, pos, "compat.cuda-package-mismatch", hint,
		          "%s is built for CUDA %s, but the stack is CUDA %s (line %d)", what,
		          built, cuda->s, cuda->pos.line);
	} else if (minor >= 0 && family && minor > smin) {
		hint =
		    xasprintf("minor-version compatibility runs what was built with an older "
		              "minor of CUDA %ld on a newer one, not the reverse: raise the stack "
		              "to CUDA %ld.%ld or take an older build (%s)",
		              major, major, minor, source);
		diags_add(d, DIAG_WARNING, m->path, pos, "compat.cuda-package-newer", hint,
		          "%s is built for CUDA %s, newer than the stack's CUDA %s (line %d)", what,
		          built, cuda->s, cuda->pos.line);
	} else {
		return;
	}
	free(hint);
}

/* "cuda_nvcc-linux-x86_64-12.5.82-archive.tar.xz": a component versioned by CUDA release. */
static int archive_release(const char *url, char **component, char **version)
{
	const char *b = strrchr(url, '/'), *dash, *v;
	size_t n;

	b = b ? b + 1 : url;
	if (strncmp(b, "cuda_", 5) != 0 && strncmp(b, "libnvjitlink-", 13) != 0)
		return 0;
	if ((dash = strstr(b, "-linux-")) == NULL && (dash = strstr(b, "-windows-")) == NULL)
		return 0;
	v = strchr(dash + 1, '-');         /* after "linux" */
	v = v ? strchr(v + 1, '-') : NULL; /* after the architecture */
	if (v == NULL)
		return 0;
	v++;
	n = strspn(v, "0123456789.");
	if (n == 0 || strncmp(v + n, "-archive", 8) != 0)
		return 0;
	*component = xstrndup(b, (size_t)(dash - b));
	*version = xstrndup(v, n);
	return 1;
}

void compat_lint_cuda_carriers(const struct compat *kb, const struct manifest *m,
                               const struct mstr *cuda, struct diags *d)
{
	int family;

	if (cuda == NULL || cuda->s == NULL)
		return;
	family = compat_cuda_in_family(kb, cuda->s);
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];

		for (size_t j = 0; q->name != NULL && j < kb->ncarriers; j++) {
			long major = -1, minor = -1;
			char *what;

			if (!carrier_match(kb->carriers[j].pattern, q->name, &major, &minor))
				continue;
			what = xasprintf("%s%s%s", q->raw_name ? q->raw_name : q->name,
			                 q->version ? "==" : "", q->version ? q->version : "");
			carrier_diag(m, d, q->pos, what, major, minor, cuda, family,
			             kb->carriers[j].source);
			free(what);
			break;
		}
	}
	for (size_t i = 0; i < m->cuda.artifacts.n; i++) {
		const struct artifact *a = &m->cuda.artifacts.v[i];
		char *comp, *ver, *what;

		if (a->url.s == NULL || !archive_release(a->url.s, &comp, &ver))
			continue;
		/* The section's own release, when it disagrees with versions.cuda, is
		 * compat.version-disagrees' to report; its archives follow it. */
		if (m->cuda.version.s != NULL && cuda != &m->cuda.version &&
		    version_cmp_n(m->cuda.version.s, cuda->s, 2) != 0 &&
		    version_cmp_n(ver, m->cuda.version.s, 2) == 0) {
			free(comp);
			free(ver);
			continue;
		}
		what = xasprintf("the %s archive %s", comp, ver);
		if (version_component(ver, 0) != version_component(cuda->s, 0) ||
		    (!family && version_cmp_n(ver, cuda->s, 2) != 0)) {
			carrier_diag(
			    m, d, a->url.pos, what, version_component(ver, 0),
			    version_component(ver, 1), cuda, 0,
			    "NVIDIA's redistrib_<release>.json lists one release's components");
		} else if (version_cmp_n(ver, cuda->s, 2) != 0) {
			char *hint =
			    xasprintf("take every CUDA component from one release, as NVIDIA's "
			              "redistrib_<release>.json lists them (cuda_* and "
			              "libnvjitlink carry the release's major.minor)");
			diags_add(d, DIAG_WARNING, m->path, a->url.pos,
			          "compat.cuda-component-release", hint,
			          "%s is from CUDA %ld.%ld, but the stack is CUDA %s (line %d)",
			          what, version_component(ver, 0), version_component(ver, 1),
			          cuda->s, cuda->pos.line);
			free(hint);
		}
		free(what);
		free(comp);
		free(ver);
	}
}

/* ---- the libraries TF loads against what the stack ships ---- */

/* The component of a cuda artifact: its name, its resolved component, or its file name. */
static int ships(const struct manifest *m, const char *component)
{
	size_t n = strlen(component);

	for (size_t i = 0; i < m->cuda.artifacts.n; i++) {
		const struct artifact *a = &m->cuda.artifacts.v[i];
		const char *b = a->url.s ? strrchr(a->url.s, '/') : NULL;

		if ((a->name.s && strcmp(a->name.s, component) == 0) ||
		    (a->component.s && strcmp(a->component.s, component) == 0))
			return 1;
		b = b ? b + 1 : a->url.s;
		if (b != NULL && strncmp(b, component, n) == 0 &&
		    (strncmp(b + n, "-linux-", 7) == 0 || strncmp(b + n, "-windows-", 9) == 0))
			return 1;
	}
	for (size_t i = 0; i < m->cuda.redist.ncomponents; i++)
		if (m->cuda.redist.components[i].s &&
		    strcmp(m->cuda.redist.components[i].s, component) == 0)
			return 1;
	return 0;
}

static int pins(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name != NULL && strcmp(m->pip.reqs[i].name, name) == 0)
			return 1;
	return 0;
}

/* The wheel name of a component for CUDA major ("nvidia-cublas-cu{M}" -> -cu12). */
static char *wheel_for(const struct compat_lib_component *c, long major)
{
	const char *at = strstr(c->wheel, "{M}");
	char *w = xasprintf("%.*s%ld%s", (int)(at - c->wheel), c->wheel, major, at + 3);

	return w;
}

void compat_lint_cuda_libs(const struct compat *kb, const struct manifest *m,
                           const struct mstr *cuda, const struct mstr *cudnn, struct diags *d)
{
	struct strvec libs = STRVEC_INIT, missing = STRVEC_INIT;
	struct strbuf sb = STRBUF_INIT;
	long major;
	int wheels;
	char *w;

	if (cuda == NULL || cuda->s == NULL || kb->nlib_components == 0 || m->cuda.has_runfile ||
	    m->stack.platform == PLATFORM_WINDOWS_X86_64)
		return;
	major = version_component(cuda->s, 0);
	w = xasprintf("nvidia-cuda-runtime-cu%ld", major);
	/* The pip-CUDA form: no cuda section, the runtime wheel pinned in a complete lock. */
	wheels = !m->cuda.set && pins(m, w) && m->pip.complete.v;
	free(w);
	if (!m->cuda.set && !wheels)
		return;
	compat_tf_libraries(kb, 0, cuda->s, NULL, &libs);
	for (size_t i = 0; i < libs.n; i++) {
		const struct compat_lib_component *c = compat_lib_component(kb, libs.v[i]);
		char *need;
		int have;

		if (c == NULL || strcmp(c->redist, "cudnn") == 0)
			continue;
		need = wheels ? wheel_for(c, major) : xstrdup(c->redist);
		have = wheels ? pins(m, need) : ships(m, need);
		if (!have) {
			size_t k;
			for (k = 0; k < missing.n && strcmp(missing.v[k], need) != 0; k++)
				;
			if (k == missing.n) {
				strvec_push(&missing, need);
				strbuf_addf(&sb, "%s%s (%s", sb.len ? "), " : "", need, libs.v[i]);
			} else {
				strbuf_addf(&sb, ", %s", libs.v[i]);
			}
		}
		free(need);
	}
	/* cuDNN in the pip-CUDA form is a wheel; a redist stack without a cudnn
	 * section that does not declare it missing gets the cudnn lints. */
	if (wheels && cudnn != NULL && cudnn->s != NULL && !m->cudnn.set) {
		for (size_t i = 0; i < kb->nlib_components; i++) {
			const struct compat_lib_component *c = &kb->lib_components[i];
			char *need;

			if (strcmp(c->redist, "cudnn") != 0)
				continue;
			need = wheel_for(c, major);
			if (!pins(m, need)) {
				strvec_push(&missing, need);
				strbuf_addf(&sb, "%s%s (libcudnn.so.%ld", sb.len ? "), " : "", need,
				            version_component(cudnn->s, 0));
			}
			free(need);
		}
	}
	if (missing.n > 0) {
		char *hint = xasprintf("add %s %s, or TensorFlow fails to load %s at run time; "
		                       "`tfprov verify` dlopens the same list (data/compat.yaml "
		                       "sonames and library_components)",
		                       missing.n == 1 ? "it" : "them",
		                       wheels               ? "to the pip lock"
		                       : m->cuda.redist.set ? "to cuda.redist.components"
		                                            : "to cuda.artifacts",
		                       missing.n == 1 ? "it" : "them");
		diags_add(d, DIAG_ERROR, m->path, wheels ? m->pip.pos : m->cuda.pos,
		          "compat.cuda-libs-missing", hint,
		          "CUDA %s: the stack ships no %s), which TensorFlow loads", cuda->s,
		          sb.buf);
		free(hint);
	}
	strbuf_release(&sb);
	strvec_release(&missing);
	strvec_release(&libs);
}

/* ---- env.vars ---- */

static int in_list(const char *const *v, size_t n, const char *s, int nocase)
{
	for (size_t i = 0; i < n; i++)
		if (nocase ? strcasecmp(v[i], s) == 0 : strcmp(v[i], s) == 0)
			return 1;
	return 0;
}

/* The integer at the start of s, as istringstream >> int64 reads it; 0 if none. */
static int leading_int(const char *s, long long *out)
{
	char *end;

	while (*s == ' ' || *s == '\t' || *s == '\n')
		s++;
	*out = strtoll(s, &end, 10);
	return end != s;
}

static void list_values(struct strbuf *sb, const struct compat_env_var *e)
{
	for (size_t i = 0; i < e->nvalues; i++)
		strbuf_addf(sb, "%s\"%s\"",
		            i == 0                ? ""
		            : i + 1 == e->nvalues ? " or "
		                                  : ", ",
		            e->values[i]);
}

/* A variable set to true that makes TF import a distribution a complete lock lacks. */
static void env_needs(const struct compat_env_var *e, const struct env_var *v,
                      const struct manifest *m, struct diags *d)
{
	const char *tf = m->versions.tensorflow.s;
	char *hint;

	if (tf == NULL || version_cmp_n(tf, e->needs_from_tf, 2) < 0 || !m->pip.complete.v)
		return;
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name != NULL &&
		    strcmp(m->pip.reqs[i].name, e->needs_package) == 0)
			return;
	hint = xasprintf("pin %s (the release of TF's minor) in the lock, or drop %s; %s",
	                 e->needs_package, e->name, e->needs_fact);
	diags_add(d, DIAG_ERROR, m->path, v->value.pos, "compat.env-needs-package", hint,
	          "%s=\"%s\" makes TensorFlow %s import %s, which the complete lock does not pin",
	          e->name, v->value.s, tf, e->needs_package);
	free(hint);
}

void compat_lint_env(const struct compat *kb, const struct manifest *m, struct diags *d)
{
	for (size_t i = 0; i < m->env.nvars; i++) {
		const struct env_var *v = &m->env.vars[i];
		const struct compat_env_var *e = NULL;
		struct strbuf want = STRBUF_INIT;
		long long n;
		int ok = 1;

		if (v->name.s == NULL || v->value.s == NULL)
			continue;
		for (size_t j = 0; j < kb->nenv_vars && e == NULL; j++)
			if (strcmp(kb->env_vars[j].name, v->name.s) == 0)
				e = &kb->env_vars[j];
		if (e == NULL)
			continue;
		switch (e->kind) {
		case COMPAT_ENV_ENUM:
			ok = in_list(e->values, e->nvalues, v->value.s, 0);
			list_values(&want, e);
			break;
		case COMPAT_ENV_PYTRUE:
			/* Anything else is read as false: only a value that looks meant as
			 * true ("yes", "on", "TRUE") is a mistake. */
			ok = in_list(e->values, e->nvalues, v->value.s, 0) ||
			     !(strcasecmp(v->value.s, "yes") == 0 ||
			       strcasecmp(v->value.s, "on") == 0 ||
			       strcasecmp(v->value.s, "true") == 0 ||
			       strcasecmp(v->value.s, "y") == 0);
			list_values(&want, e);
			break;
		case COMPAT_ENV_BOOL: {
			static const char *const b[] = {"0", "1", "true", "false"};
			ok = in_list(b, 4, v->value.s, 1);
			strbuf_adds(&want, "0, 1, true or false (any case)");
			break;
		}
		case COMPAT_ENV_INT:
			ok = leading_int(v->value.s, &n);
			if (ok && e->min != NULL && n < atoll(e->min))
				ok = 0;
			if (ok && e->max != NULL && n > atoll(e->max))
				ok = 0;
			if (e->min != NULL && e->max != NULL)
				strbuf_addf(&want, "an integer from %s to %s", e->min, e->max);
			else
				strbuf_adds(&want, "an integer");
			break;
		}
		if (ok && e->needs_package != NULL && in_list(e->values, e->nvalues, v->value.s, 0))
			env_needs(e, v, m, d);
		if (!ok) {
			char *hint =
			    xasprintf("%s accepts %s; source: %s", e->name, want.buf, e->source);
			diags_add(d, DIAG_ERROR, m->path, v->value.pos, "compat.env-value-rejected",
			          hint, "%s=\"%s\" is not a value TensorFlow accepts: %s", e->name,
			          v->value.s, e->otherwise);
			free(hint);
		}
		strbuf_release(&want);
	}
}
