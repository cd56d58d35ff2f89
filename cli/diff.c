/*
 * diff.c - `tfprov diff OLD NEW` and `tfprov diff --generation N STACK MANIFEST`:
 * what changes for the machine between two manifests, grouped by step, for the
 * reviewer of a pull request that bumps a stack.
 *
 * OLD is a manifest file, or the manifest an applied generation of STACK was
 * applied from (the state keeps its text). Reads only; nothing is fetched.
 *
 * Groups, in apply order: driver (min_version), cuda and cudnn (version,
 * archives added/removed/changed with the version in their file name and size),
 * pyenv (manager, Python version, conda packages), pip (packages added, removed,
 * upgraded, downgraded, or re-hashed at the same version), env (variables).
 * Text by default; with --json one line {"type":"diff", "old", "new",
 * "steps":[{"step", "changes":[...]}]}. Exit 0, or 2 with --detailed-exitcode
 * when there is a difference.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "state.h"
#include "version.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *S(const struct mstr *s)
{
	return s->s ? s->s : "";
}

static void add(json_t *steps, const char *step, json_t *change)
{
	size_t i;
	json_t *g;
	json_array_foreach(steps, i, g)
	{
		if (strcmp(json_string_value(json_object_get(g, "step")), step) == 0) {
			json_array_append_new(json_object_get(g, "changes"), change);
			return;
		}
	}
	json_array_append_new(steps, json_pack("{s:s,s:[o]}", "step", step, "changes", change));
}

/* A scalar setting that differs. */
static void setting(json_t *steps, const char *step, const char *what, const char *a, const char *b)
{
	if (strcmp(a, b) != 0)
		add(steps, step,
		    json_pack("{s:s,s:s,s:s,s:s}", "change",
		              !*a   ? "added"
		              : !*b ? "removed"
		                    : "changed",
		              "name", what, "old", a, "new", b));
}

/* The version in an archive's file name: <name>-<platform>-<VERSION>-archive.tar.xz. */
static char *archive_version(const char *url)
{
	const char *base = strrchr(url, '/');
	base = base ? base + 1 : url;
	const char *end = strstr(base, "-archive");
	if (end == NULL)
		return xstrdup(base);
	const char *dash = end;
	while (dash > base && dash[-1] != '-')
		dash--;
	return xstrndup(dash, (size_t)(end - dash));
}

/* A JSON string of s, which it frees. */
static json_t *json_string_own(char *s)
{
	json_t *j = json_string(s);
	free(s);
	return j;
}

static json_t *art_json(const char *change, const char *name, const struct artifact *a,
                        const struct artifact *b)
{
	json_t *o = json_pack("{s:s,s:s}", "change", change, "name", name);
	if (a) {
		json_object_set_new(o, "old", json_string_own(archive_version(S(&a->url))));
		if (a->size.set)
			json_object_set_new(o, "old_size", json_integer(a->size.v));
	}
	if (b) {
		json_object_set_new(o, "new", json_string_own(archive_version(S(&b->url))));
		if (b->size.set)
			json_object_set_new(o, "new_size", json_integer(b->size.v));
	}
	return o;
}

struct named {
	const char *name;
	const struct artifact *a;
};

static size_t artifacts_of(const struct manifest *m, const char *step, struct named *v)
{
	size_t n = 0;
	if (strcmp(step, "cuda") == 0) {
		for (size_t i = 0; i < m->cuda.artifacts.n && n < 128; i++) {
			const struct artifact *a = &m->cuda.artifacts.v[i];
			v[n++] = (struct named){a->name.s ? a->name.s : S(&a->url), a};
		}
		if (m->cuda.has_runfile)
			v[n++] = (struct named){"runfile", &m->cuda.runfile};
	} else if (m->cudnn.has_artifact) {
		v[n++] = (struct named){"cudnn", &m->cudnn.artifact};
	}
	return n;
}

static void artifacts(json_t *steps, const char *step, const struct manifest *a,
                      const struct manifest *b)
{
	struct named va[130], vb[130];
	size_t na = artifacts_of(a, step, va), nb = artifacts_of(b, step, vb);
	for (size_t i = 0; i < na; i++) {
		const struct named *hit = NULL;
		for (size_t j = 0; j < nb && !hit; j++)
			if (strcmp(va[i].name, vb[j].name) == 0)
				hit = &vb[j];
		if (hit == NULL)
			add(steps, step, art_json("removed", va[i].name, va[i].a, NULL));
		else if (strcmp(S(&va[i].a->sha256), S(&hit->a->sha256)) != 0)
			add(steps, step, art_json("changed", va[i].name, va[i].a, hit->a));
	}
	for (size_t j = 0; j < nb; j++) {
		int found = 0;
		for (size_t i = 0; i < na && !found; i++)
			found = strcmp(va[i].name, vb[j].name) == 0;
		if (!found)
			add(steps, step, art_json("added", vb[j].name, NULL, vb[j].a));
	}
}

static const struct conda_pkg *conda_find(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->python.npkgs; i++)
		if (m->python.pkgs[i].name && strcmp(m->python.pkgs[i].name, name) == 0)
			return &m->python.pkgs[i];
	return NULL;
}

static void conda(json_t *steps, const struct manifest *a, const struct manifest *b)
{
	for (int pass = 0; pass < 2; pass++) {
		const struct manifest *x = pass ? b : a, *y = pass ? a : b;
		for (size_t i = 0; i < x->python.npkgs; i++) {
			const struct conda_pkg *p = &x->python.pkgs[i], *q = NULL;
			if (p->name == NULL)
				continue;
			q = conda_find(y, p->name);
			char *pv = xasprintf("%s-%s", p->version ? p->version : "",
			                     p->build ? p->build : "");
			if (q == NULL) {
				add(steps, "pyenv",
				    json_pack("{s:s,s:s,s:s,s:s}", "change",
				              pass ? "added" : "removed", "name", p->name, "kind",
				              "conda", pass ? "new" : "old", pv));
			} else if (!pass && strcmp(p->sha256, q->sha256) != 0) {
				char *qv = xasprintf("%s-%s", q->version ? q->version : "",
				                     q->build ? q->build : "");
				add(steps, "pyenv",
				    json_pack("{s:s,s:s,s:s,s:s,s:s}", "change", "changed", "name",
				              p->name, "kind", "conda", "old", pv, "new", qv));
				free(qv);
			}
			free(pv);
		}
	}
}

static const struct pip_req *pip_find(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name && strcmp(m->pip.reqs[i].name, name) == 0)
			return &m->pip.reqs[i];
	return NULL;
}

static int same_hashes(const struct pip_req *p, const struct pip_req *q)
{
	if (p->nhashes != q->nhashes)
		return 0;
	for (size_t i = 0; i < p->nhashes; i++) {
		int found = 0;
		for (size_t j = 0; j < q->nhashes && !found; j++)
			found = strcmp(p->hashes[i], q->hashes[j]) == 0;
		if (!found)
			return 0;
	}
	return 1;
}

static void pip(json_t *steps, const struct manifest *a, const struct manifest *b)
{
	setting(steps, "pip", "complete", a->pip.set ? (a->pip.complete.v ? "true" : "false") : "",
	        b->pip.set ? (b->pip.complete.v ? "true" : "false") : "");
	for (int pass = 0; pass < 2; pass++) {
		const struct manifest *x = pass ? b : a, *y = pass ? a : b;
		for (size_t i = 0; i < x->pip.nreqs; i++) {
			const struct pip_req *p = &x->pip.reqs[i];
			if (p->name == NULL)
				continue;
			const struct pip_req *q = pip_find(y, p->name);
			const char *pv = p->version ? p->version : (p->url ? p->url : "");
			if (q == NULL) {
				add(steps, "pip",
				    json_pack("{s:s,s:s,s:s}", "change", pass ? "added" : "removed",
				              "name", p->name, pass ? "new" : "old", pv));
				continue;
			}
			if (pass)
				continue;
			const char *qv = q->version ? q->version : (q->url ? q->url : "");
			const char *ch = NULL;
			if (strcmp(pv, qv) != 0)
				ch = p->version && q->version &&
				             version_cmp(p->version, q->version) > 0
				         ? "downgraded"
				         : "upgraded";
			else if (!same_hashes(p, q))
				ch = "rehashed";
			if (ch)
				add(steps, "pip",
				    json_pack("{s:s,s:s,s:s,s:s}", "change", ch, "name", p->name,
				              "old", pv, "new", qv));
		}
	}
}

static const char *env_find(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->env.nvars; i++)
		if (m->env.vars[i].name.s && strcmp(m->env.vars[i].name.s, name) == 0)
			return S(&m->env.vars[i].value);
	return NULL;
}

static void env(json_t *steps, const struct manifest *a, const struct manifest *b)
{
	setting(steps, "env", "profile_dir", S(&a->env.profile_dir), S(&b->env.profile_dir));
	for (int pass = 0; pass < 2; pass++) {
		const struct manifest *x = pass ? b : a, *y = pass ? a : b;
		for (size_t i = 0; i < x->env.nvars; i++) {
			const char *n = S(&x->env.vars[i].name), *v = S(&x->env.vars[i].value);
			const char *w = env_find(y, n);
			if (w == NULL)
				add(steps, "env",
				    json_pack("{s:s,s:s,s:s}", "change", pass ? "added" : "removed",
				              "name", n, pass ? "new" : "old", v));
			else if (!pass && strcmp(v, w) != 0)
				add(steps, "env",
				    json_pack("{s:s,s:s,s:s,s:s}", "change", "changed", "name", n,
				              "old", v, "new", w));
		}
	}
}

static json_t *diff(const struct manifest *a, const struct manifest *b)
{
	json_t *steps = json_array();
	/* A new stack name or env name is not an upgrade: applying makes a second one. */
	setting(steps, "stack", "name", S(&a->stack.name), S(&b->stack.name));
	setting(steps, "pyenv", "name", a->python.set ? S(&a->python.name) : "",
	        b->python.set ? S(&b->python.name) : "");
	setting(steps, "stack", "tensorflow", S(&a->versions.tensorflow),
	        S(&b->versions.tensorflow));
	setting(steps, "stack", "prefix", S(&a->prefix), S(&b->prefix));
	setting(steps, "driver", "min_version", S(&a->driver.min_version),
	        S(&b->driver.min_version));
	setting(steps, "cuda", "version",
	        a->cuda.version.s ? a->cuda.version.s : S(&a->versions.cuda),
	        b->cuda.version.s ? b->cuda.version.s : S(&b->versions.cuda));
	artifacts(steps, "cuda", a, b);
	setting(steps, "cudnn", "version",
	        a->cudnn.version.s ? a->cudnn.version.s : S(&a->versions.cudnn),
	        b->cudnn.version.s ? b->cudnn.version.s : S(&b->versions.cudnn));
	setting(steps, "cudnn", "placement", S(&a->cudnn.placement_s), S(&b->cudnn.placement_s));
	artifacts(steps, "cudnn", a, b);
	setting(steps, "pyenv", "manager", S(&a->python.manager_s), S(&b->python.manager_s));
	setting(steps, "pyenv", "python",
	        a->python.version.s ? a->python.version.s : S(&a->versions.python),
	        b->python.version.s ? b->python.version.s : S(&b->versions.python));
	conda(steps, a, b);
	pip(steps, a, b);
	env(steps, a, b);
	return steps;
}

static void print_text(json_t *steps)
{
	size_t i, k, n = 0;
	json_t *g, *ch;
	json_array_foreach(steps, i, g)
	{
		printf("%s:\n", json_string_value(json_object_get(g, "step")));
		json_array_foreach(json_object_get(g, "changes"), k, ch)
		{
			const char *c = json_string_value(json_object_get(ch, "change"));
			const char *name = json_string_value(json_object_get(ch, "name"));
			const char *kind = json_string_value(json_object_get(ch, "kind"));
			const char *o = json_string_value(json_object_get(ch, "old"));
			const char *nw = json_string_value(json_object_get(ch, "new"));
			json_t *os = json_object_get(ch, "old_size"),
			       *ns = json_object_get(ch, "new_size");
			char mark = strcmp(c, "added") == 0     ? '+'
			            : strcmp(c, "removed") == 0 ? '-'
			                                        : '~';
			printf("  %c %s%s%s", mark, kind ? kind : "", kind ? " " : "", name);
			if (o && nw)
				printf(": %s -> %s", o, nw);
			else
				printf(" %s", o ? o : nw ? nw : "");
			if (os && ns)
				printf(" (%lld -> %lld bytes)", (long long)json_integer_value(os),
				       (long long)json_integer_value(ns));
			else if (os || ns)
				printf(" (%lld bytes)",
				       (long long)json_integer_value(os ? os : ns));
			if (strcmp(c, "upgraded") == 0 || strcmp(c, "downgraded") == 0 ||
			    strcmp(c, "rehashed") == 0)
				printf(" (%s)", c);
			printf("\n");
			n++;
		}
	}
	if (n == 0)
		printf("No differences.\n");
	else
		printf("\n%zu change%s in %zu step%s.\n", n, n == 1 ? "" : "s",
		       json_array_size(steps), json_array_size(steps) == 1 ? "" : "s");
}

/*
 * What applying NEW does beside OLD, when it is not an update of the same
 * stack or env: "second_stack" or "new_env" (NULL: an update).
 */
static const char *beside(const struct manifest *a, const struct manifest *b)
{
	if (strcmp(S(&a->stack.name), S(&b->stack.name)) != 0)
		return "second_stack";
	if (a->python.set && b->python.set && strcmp(S(&a->python.name), S(&b->python.name)) != 0)
		return "new_env";
	return NULL;
}

/* The manifest generation N of STACK was applied from; 0 or an error (logged). */
static int load_generation(struct ctx *c, const char *stack, long gen, struct manifest **m,
                           char **label)
{
	int64_t sid = c->st ? state_stack_id(c->st, stack) : 0;
	if (sid == 0) {
		ev_log(c, EV_ERROR, "no stack named '%s' under %s", stack, c->root);
		return TF_EFAIL;
	}
	struct state_gen g;
	if (state_gen_by_number(c->st, sid, gen, &g) != 0 || g.id == 0) {
		state_gen_release(&g);
		ev_log(c, EV_ERROR, "stack %s has no generation %ld (see `tfprov show %s`)", stack,
		       gen, stack);
		return TF_EFAIL;
	}
	const char *text = g.manifest_text;
	*label = xasprintf("%s generation %ld (%s)", stack, gen, g.manifest_path);
	struct diags d = {0};
	int rc = manifest_load_buf(*label, text, strlen(text), m, &d);
	if (rc != 0)
		diags_print(&d, stderr, 0);
	diags_release(&d);
	state_gen_release(&g);
	return rc;
}

int cmd_diff(struct ctx *c, struct opts *o)
{
	struct manifest *a = NULL, *b = NULL;
	char *label = NULL;
	int rc;
	if (o->args.n != 2) {
		ev_log(c, EV_ERROR,
		       "usage: tfprov diff OLD NEW | tfprov diff --generation N STACK "
		       "MANIFEST");
		return TF_EUSAGE;
	}
	if (o->generation > 0)
		rc = load_generation(c, o->args.v[0], o->generation, &a, &label);
	else
		rc = cli_load_manifest(c, o->args.v[0], &a, 0);
	if (rc == 0)
		rc = cli_load_manifest(c, o->args.v[1], &b, 0);
	if (rc != 0)
		goto out;
	json_t *steps = diff(a, b);
	const char *old = label ? label : o->args.v[0];
	const char *kind = beside(a, b);
	if (c->flags & CTX_JSON) {
		json_t *doc =
		    json_pack("{s:s,s:s,s:s,s:O,s:s}", "type", "diff", "old", old, "new",
		              o->args.v[1], "steps", steps, "applying", kind ? kind : "update");
		char *s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
		printf("%s\n", s);
		free(s);
		json_decref(doc);
	} else {
		printf("--- %s\n+++ %s\n", old, o->args.v[1]);
		print_text(steps);
		if (kind && strcmp(kind, "second_stack") == 0)
			printf("\nApplying %s creates a second stack, %s, beside %s: it is not an "
			       "upgrade of it (`tfprov destroy %s` removes the old one).\n",
			       o->args.v[1], S(&b->stack.name), S(&a->stack.name),
			       S(&a->stack.name));
		else if (kind)
			printf(
			    "\nApplying %s builds a new Python env, %s, for stack %s, in place of "
			    "%s.\n",
			    o->args.v[1], S(&b->python.name), S(&b->stack.name),
			    S(&a->python.name));
	}
	fflush(stdout);
	if (o->detailed_exitcode && json_array_size(steps) > 0)
		rc = TF_ECHANGES;
	json_decref(steps);
out:
	free(label);
	manifest_free(a);
	manifest_free(b);
	return rc;
}
