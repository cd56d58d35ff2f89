/*
 * pep508.c - dependency specifiers and environment markers (see pep508.h).
 *
 * The marker grammar of PEP 508: or-expressions of and-expressions of
 * comparisons (`var op 'literal'`, either side a variable or a quoted string)
 * and parenthesised groups. A comparison whose both sides are versions is a
 * PEP 440 comparison (python_version >= '3.10' is true for 3.10 and false for
 * 3.9, which a string compare gets wrong); otherwise it compares strings, and
 * `in`/`not in` look for a substring. `extra` is the set of the
 * distribution's active extras, names normalized as PEP 685 says.
 */
#include "pep508.h"

#include "kb.h"
#include "kb_int.h"
#include "error.h"
#include "util.h"
#include "version.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_ws(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

static int name_char(char c)
{
	return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

/* The specifier without blanks or the optional parentheses. */
static char *clean_spec(const char *s, size_t n)
{
	struct strbuf sb = STRBUF_INIT;

	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)s[i]) && s[i] != '(' && s[i] != ')')
			strbuf_add(&sb, &s[i], 1);
	return strbuf_detach(&sb);
}

int pep508_parse(const char *text, struct pep508_req *out, struct why *why)
{
	const char *s = skip_ws(text), *start, *semi;
	char *raw;

	memset(out, 0, sizeof(*out));
	start = s;
	while (name_char(*s))
		s++;
	if (s == start)
		return why_fail(why, TF_EMANIFEST, "no distribution name");
	raw = xstrndup(start, (size_t)(s - start));
	out->name = pip_normalize_name(raw);
	free(raw);
	s = skip_ws(s);
	if (*s == '[') {
		for (s++;;) {
			s = skip_ws(s);
			start = s;
			while (name_char(*s))
				s++;
			if (s > start) {
				raw = xstrndup(start, (size_t)(s - start));
				out->extras =
				    xrealloc(out->extras, (out->nextras + 1) * sizeof(char *));
				out->extras[out->nextras++] = pip_normalize_name(raw);
				free(raw);
			}
			s = skip_ws(s);
			if (*s == ',') {
				s++;
				continue;
			}
			if (*s != ']') {
				why_fail(why, TF_EMANIFEST, "an unclosed extras list");
				goto bad;
			}
			s++;
			break;
		}
	}
	s = skip_ws(s);
	semi = strchr(s, ';');
	if (*s == '@') {
		const char *end = semi ? semi : s + strlen(s);
		out->url = xstrndup(skip_ws(s + 1), (size_t)(end - skip_ws(s + 1)));
		out->spec = xstrdup("");
	} else {
		out->spec = clean_spec(s, semi ? (size_t)(semi - s) : strlen(s));
		if (!compat_spec_valid(out->spec)) {
			why_fail(why, TF_EMANIFEST, "a version specifier PEP 440 does not know");
			goto bad;
		}
	}
	if (semi != NULL) {
		const char *m = skip_ws(semi + 1);
		if (*m == '\0') {
			why_fail(why, TF_EMANIFEST, "an empty marker after ';'");
			goto bad;
		}
		out->marker = xstrdup(m);
	}
	return 0;
bad:
	pep508_req_release(out);
	return TF_EMANIFEST;
}

void pep508_req_release(struct pep508_req *r)
{
	free(r->name);
	for (size_t i = 0; i < r->nextras; i++)
		free(r->extras[i]);
	free(r->extras);
	free(r->spec);
	free(r->url);
	free(r->marker);
	memset(r, 0, sizeof(*r));
}

void pep508_env_for(struct pep508_env *env, int windows, const char *python_version,
                    const char *python_full_version)
{
	memset(env, 0, sizeof(*env));
	env->python_version = python_version;
	env->python_full_version = python_full_version ? python_full_version : python_version;
	env->sys_platform = windows ? "win32" : "linux";
	env->platform_system = windows ? "Windows" : "Linux";
	env->platform_machine = windows ? "AMD64" : "x86_64";
	env->os_name = windows ? "nt" : "posix";
}

/* ---- the marker evaluator ---- */

enum { V_STR, V_EXTRA };

struct mparse {
	const char *s;
	const struct pep508_env *env;
	const char *err;
};

struct mval {
	int kind;
	char buf[128];
};

static int word(struct mparse *p, const char *w)
{
	size_t n = strlen(w);
	const char *s = skip_ws(p->s);

	if (strncmp(s, w, n) != 0 || name_char(s[n]))
		return 0;
	p->s = s + n;
	return 1;
}

static int value(struct mparse *p, struct mval *v)
{
	const char *s = skip_ws(p->s), *start;
	static const struct {
		const char *name;
		size_t off;
	} vars[] = {
	    {"python_version", offsetof(struct pep508_env, python_version)},
	    {"python_full_version", offsetof(struct pep508_env, python_full_version)},
	    {"sys_platform", offsetof(struct pep508_env, sys_platform)},
	    {"platform_system", offsetof(struct pep508_env, platform_system)},
	    {"platform_machine", offsetof(struct pep508_env, platform_machine)},
	    {"os_name", offsetof(struct pep508_env, os_name)},
	};
	size_t n;

	v->kind = V_STR;
	if (*s == '\'' || *s == '"') {
		const char *end = strchr(s + 1, *s);
		if (end == NULL || (size_t)(end - s - 1) >= sizeof(v->buf)) {
			p->err = "an unterminated or overlong string";
			return TF_EMANIFEST;
		}
		memcpy(v->buf, s + 1, (size_t)(end - s - 1));
		v->buf[end - s - 1] = '\0';
		p->s = end + 1;
		return 0;
	}
	start = s;
	while (isalnum((unsigned char)*s) || *s == '_' || *s == '.')
		s++;
	n = (size_t)(s - start);
	p->s = s;
	if (n == 5 && strncmp(start, "extra", 5) == 0) {
		v->kind = V_EXTRA;
		return 0;
	}
	if (n == 19 && strncmp(start, "implementation_name", n) == 0) {
		snprintf(v->buf, sizeof(v->buf), "cpython");
		return 0;
	}
	if (n == 30 && strncmp(start, "platform_python_implementation", n) == 0) {
		snprintf(v->buf, sizeof(v->buf), "CPython");
		return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
		if (strlen(vars[i].name) == n && strncmp(start, vars[i].name, n) == 0) {
			const char *x = *(const char *const *)((const char *)p->env + vars[i].off);
			if (x == NULL) {
				p->err = "a variable the stack does not define (no Python version)";
				return TF_EMANIFEST;
			}
			snprintf(v->buf, sizeof(v->buf), "%s", x);
			return 0;
		}
	}
	p->err = n ? "an environment marker variable PEP 508 does not define"
	           : "a marker operand is missing";
	return TF_EMANIFEST;
}

static const char *const ops[] = {"===", "==", "!=", "<=", ">=", "~=", "<", ">", NULL};

static int op(struct mparse *p, char out[8])
{
	const char *s = skip_ws(p->s);

	for (int i = 0; ops[i] != NULL; i++)
		if (strncmp(s, ops[i], strlen(ops[i])) == 0) {
			snprintf(out, 8, "%s", ops[i]);
			p->s = s + strlen(ops[i]);
			return 0;
		}
	if (word(p, "in")) {
		snprintf(out, 8, "in");
		return 0;
	}
	if (word(p, "not")) {
		if (word(p, "in")) {
			snprintf(out, 8, "not in");
			return 0;
		}
	}
	p->err = "a marker comparison without an operator";
	return TF_EMANIFEST;
}

static int is_extra_member(const struct pep508_env *env, const char *name)
{
	char *n = pip_normalize_name(name);
	int found = 0;

	for (size_t i = 0; i < env->nextras && !found; i++)
		found = strcmp(env->extras[i], n) == 0;
	free(n);
	return found;
}

static int compare(struct mparse *p, const struct mval *a, const char *o, const struct mval *b)
{
	int c;

	if (a->kind == V_EXTRA || b->kind == V_EXTRA) {
		const char *lit = a->kind == V_EXTRA ? b->buf : a->buf;
		if (strcmp(o, "==") == 0)
			return is_extra_member(p->env, lit);
		if (strcmp(o, "!=") == 0)
			return !is_extra_member(p->env, lit);
		p->err = "extra compared with an operator other than == or !=";
		return TF_EMANIFEST;
	}
	if (strcmp(o, "in") == 0)
		return strstr(b->buf, a->buf) != NULL;
	if (strcmp(o, "not in") == 0)
		return strstr(b->buf, a->buf) == NULL;
	if (strcmp(o, "===") == 0)
		return strcmp(a->buf, b->buf) == 0;
	if (version_valid(a->buf) && version_valid(b->buf)) {
		char clause[160];
		snprintf(clause, sizeof(clause), "%s%s", o, b->buf);
		return compat_spec_allows(clause, a->buf);
	}
	c = strcmp(a->buf, b->buf);
	if (strcmp(o, "==") == 0)
		return c == 0;
	if (strcmp(o, "!=") == 0)
		return c != 0;
	if (strcmp(o, "<") == 0)
		return c < 0;
	if (strcmp(o, "<=") == 0)
		return c <= 0;
	if (strcmp(o, ">") == 0)
		return c > 0;
	if (strcmp(o, ">=") == 0)
		return c >= 0;
	p->err = "~= between values that are not versions";
	return TF_EMANIFEST;
}

static int m_or(struct mparse *p);

static int m_expr(struct mparse *p)
{
	struct mval a, b;
	char o[8];
	int v;

	p->s = skip_ws(p->s);
	if (*p->s == '(') {
		p->s++;
		v = m_or(p);
		p->s = skip_ws(p->s);
		if (v < 0)
			return TF_EMANIFEST;
		if (*p->s != ')') {
			p->err = "an unclosed parenthesis";
			return TF_EMANIFEST;
		}
		p->s++;
		return v;
	}
	if (value(p, &a) < 0 || op(p, o) < 0 || value(p, &b) < 0)
		return TF_EMANIFEST;
	return compare(p, &a, o, &b);
}

static int m_and(struct mparse *p)
{
	int v = m_expr(p), r;

	while (v >= 0 && word(p, "and")) {
		r = m_expr(p);
		if (r < 0)
			return TF_EMANIFEST;
		v = v && r;
	}
	return v;
}

static int m_or(struct mparse *p)
{
	int v = m_and(p), r;

	while (v >= 0 && word(p, "or")) {
		r = m_and(p);
		if (r < 0)
			return TF_EMANIFEST;
		v = v || r;
	}
	return v;
}

int pep508_marker_eval(const char *marker, const struct pep508_env *env, struct why *why)
{
	struct mparse p = {marker, env, NULL};
	int v = m_or(&p);

	if (v >= 0 && *skip_ws(p.s) != '\0') {
		p.err = "text after the marker's end";
		v = TF_EMANIFEST;
	}
	if (v < 0)
		return why_fail(why, v, "%s", p.err ? p.err : "a malformed marker");
	return v;
}
