/*
 * compat_query.c - the questions other rooms ask the loaded knowledge base
 * (compat.c): PEP 440 specifiers, the tested TF build, driver minimums,
 * kernels per compute capability, sonames, glibc floors, CUDA wheels.
 *
 * The queries are generic over the tables; no fact is known here.
 */
#include "kb.h"
#include "error.h"
#include "version.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

static size_t ncomponents(const char *v)
{
	size_t n = 1;

	for (; *v != '\0'; v++)
		n += *v == '.';
	return n;
}

/* One clause: its operator length (0 when none) and the version after it. */
static size_t spec_op(const char *clause, const char **rhs)
{
	static const char *const ops[] = {"===", "~=", "==", "!=", ">=", "<=", ">", "<", NULL};
	size_t n = 0;

	for (const char *const *o = ops; *o != NULL && n == 0; o++)
		if (strncmp(clause, *o, strlen(*o)) == 0)
			n = strlen(*o);
	*rhs = clause + n;
	while (**rhs == ' ')
		(*rhs)++;
	return n;
}

/* Calls fn on each trimmed clause of spec; stops at the first 0. */
static int spec_each(const char *spec, int (*fn)(const char *clause, const char *v), const char *v)
{
	char *copy = xstrdup(spec), *save = NULL;
	int ok = 1;

	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && ok;
	     tok = strtok_r(NULL, ",", &save)) {
		size_t len;

		while (*tok == ' ')
			tok++;
		len = strlen(tok);
		while (len > 0 && tok[len - 1] == ' ')
			tok[--len] = '\0';
		ok = fn(tok, v);
	}
	free(copy);
	return ok;
}

/*
 * PEP 440's version grammar (https://peps.python.org/pep-0440/#appendix-b-parsing-version-strings-with-regular-expressions),
 * case-insensitive, with the spellings it normalises (alpha, pre, rev, '-'/'_'
 * separators, implicit numbers, a leading 'v'), in POSIX ERE; and the prefix
 * form of == and != ("2.15.*": a release then ".*").
 */
static const char pep440_version_re[] = "^v?([0-9]+!)?[0-9]+(\\.[0-9]+)*"
                                        "([-_.]?(alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?"
                                        "((-[0-9]+)|([-_.]?(post|rev|r)[-_.]?[0-9]*))?"
                                        "([-_.]?dev[-_.]?[0-9]*)?"
                                        "(\\+[a-z0-9]+([-_.][a-z0-9]+)*)?$";
static const char pep440_prefix_re[] = "^v?([0-9]+!)?[0-9]+(\\.[0-9]+)*\\.\\*$";

/* Compiled once per process (a knowledge base load judges thousands of
 * specifiers: compiling per call was 38% of a no-op apply's instructions);
 * regexec on a compiled pattern is safe from several threads. */
static regex_t re_version, re_prefix;
static int re_usable;
static pthread_once_t re_once = PTHREAD_ONCE_INIT;

static void re_compile_once(void)
{
	int f = REG_EXTENDED | REG_ICASE | REG_NOSUB;
	re_usable = regcomp(&re_version, pep440_version_re, f) == 0 &&
	            regcomp(&re_prefix, pep440_prefix_re, f) == 0;
}

static int re_matches(const regex_t *re, const char *s)
{
	pthread_once(&re_once, re_compile_once);
	return re_usable && regexec(re, s, 0, NULL, 0) == 0;
}

/* The release components of a valid version ("1!2.3rc1" -> 2). */
static int release_components(const char *v)
{
	const char *p = v + (tolower((unsigned char)*v) == 'v'), *bang = strchr(p, '!');
	int n = 1;

	if (bang != NULL)
		p = bang + 1;
	for (; *p != '\0'; p++) {
		if (*p == '.' && isdigit((unsigned char)p[1]))
			n++;
		else if (!isdigit((unsigned char)*p))
			break;
	}
	return n;
}

/*
 * One clause as PEP 440's version specifiers allow it
 * (https://peps.python.org/pep-0440/#version-specifiers): a local label
 * ("+cu121") and a ".*" prefix only after == and !=, ~= with two release
 * components at least, === with any string; any other tail ("1.0foo",
 * "1.0-", "2.x") is refused, not taken for a pre-release.
 */
static int clause_valid(const char *clause, const char *unused)
{
	const char *rhs;
	size_t op = spec_op(clause, &rhs);
	int eq = strncmp(clause, "==", 2) == 0 || strncmp(clause, "!=", 2) == 0;

	(void)unused;
	if (op == 0 || *rhs == '\0')
		return 0;
	if (op == 3) /* ===: arbitrary equality, any string without blanks */
		return strpbrk(rhs, " \t") == NULL;
	if (str_ends_with(rhs, ".*"))
		return eq && re_matches(&re_prefix, rhs);
	if (!re_matches(&re_version, rhs))
		return 0;
	if (strchr(rhs, '+') != NULL && !eq)
		return 0;
	return strncmp(clause, "~=", 2) != 0 || release_components(rhs) >= 2;
}

int compat_spec_valid(const char *spec)
{
	return spec != NULL && (*spec == '\0' || (strstr(spec, ",,") == NULL && *spec != ',' &&
	                                          spec[strlen(spec) - 1] != ',' &&
	                                          spec_each(spec, clause_valid, NULL)));
}

static int clause_allows(const char *clause, const char *v)
{
	const char *rhs;
	size_t op = spec_op(clause, &rhs);
	char *base = xstrdup(rhs), *star = strchr(base, '*');
	int c, ok = 1;

	if (star != NULL) /* "==2.15.*": a prefix; the '.' before '*' goes too */
		star[-1] = '\0';
	c = version_cmp(v, base);
	if (star != NULL)
		ok = version_has_prefix(v, base) == (clause[0] == '=');
	else if (strncmp(clause, "~=", 2) == 0) /* >= base, same release but the last */
		ok = c >= 0 && version_cmp_n(v, base, (int)ncomponents(base) - 1) == 0;
	else if (op == 3 || strncmp(clause, "==", 2) == 0)
		ok = c == 0;
	else if (strncmp(clause, "!=", 2) == 0)
		ok = c != 0;
	else if (strncmp(clause, ">=", 2) == 0)
		ok = c >= 0;
	else if (strncmp(clause, "<=", 2) == 0)
		ok = c <= 0;
	else if (*clause == '>')
		ok = c > 0;
	else if (*clause == '<')
		ok = c < 0;
	free(base);
	return ok;
}

int compat_spec_allows(const char *spec, const char *version)
{
	return spec == NULL || *spec == '\0' || spec_each(spec, clause_allows, version);
}

const struct compat_tf_build *compat_tf_build(const struct compat *kb, const char *tf_version,
                                              int windows_native)
{
	const struct compat_tf_build *v = windows_native ? kb->tf_windows : kb->tf_linux;
	size_t n = windows_native ? kb->ntf_windows : kb->ntf_linux;

	if (tf_version == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (version_cmp_n(v[i].version, tf_version, 2) == 0)
			return &v[i];
	return NULL;
}

/* The row of a toolkit: the newest of its major.minor at or below it, else the oldest. */
static const struct compat_driver_row *driver_row(const struct compat *kb, const char *cuda)
{
	const struct compat_driver_row *best = NULL, *lowest = NULL;

	if (cuda == NULL)
		return NULL;
	for (size_t i = 0; i < kb->ndrivers; i++) {
		const struct compat_driver_row *r = &kb->drivers[i];
		if (version_cmp_n(r->cuda, cuda, 2) != 0)
			continue;
		if (lowest == NULL || version_cmp(r->cuda, lowest->cuda) < 0)
			lowest = r;
		if (version_cmp(r->cuda, cuda) <= 0 &&
		    (best == NULL || version_cmp(r->cuda, best->cuda) > 0))
			best = r;
	}
	return best ? best : lowest;
}

const char *compat_cuda_min_driver(const struct compat *kb, const char *cuda, int windows)
{
	const struct compat_driver_row *r = driver_row(kb, cuda);

	if (r == NULL)
		return NULL;
	return windows ? r->windows_min : r->linux_min;
}

static const struct compat_mvc *mvc_row(const struct compat *kb, const char *cuda)
{
	for (size_t i = 0; cuda != NULL && i < kb->nmvc; i++) {
		const struct compat_mvc *r = &kb->mvc[i];
		if (version_cmp(cuda, r->from) >= 0 &&
		    (r->below == NULL || version_cmp(cuda, r->below) < 0))
			return r;
	}
	return NULL;
}

int compat_cuda_in_family(const struct compat *kb, const char *cuda)
{
	return mvc_row(kb, cuda) != NULL;
}

const char *compat_cuda_family_floor(const struct compat *kb, const char *cuda, int windows)
{
	const struct compat_mvc *r = mvc_row(kb, cuda);

	if (r == NULL)
		return NULL;
	return windows ? r->windows_min : r->linux_min;
}

const char *compat_cuda_compat_driver(const struct compat *kb, const char *cuda, int windows)
{
	const char *floor = compat_cuda_family_floor(kb, cuda, windows);
	const char *own = compat_cuda_min_driver(kb, cuda, windows);

	if (floor != NULL && own != NULL && version_cmp(floor, own) >= 0)
		return NULL; /* the family floor does not reach below this toolkit's own */
	return floor;
}

int compat_cc_parse(const char *cc)
{
	long major, minor;

	if (cc == NULL || !version_valid(cc) || strchr(cc, '.') == NULL ||
	    strchr(strchr(cc, '.') + 1, '.') != NULL)
		return -EINVAL;
	major = version_component(cc, 0);
	minor = version_component(cc, 1);
	if (major < 0 || major > 99 || minor < 0 || minor > 9 || strlen(strchr(cc, '.') + 1) != 1)
		return -EINVAL;
	return (int)(major * 10 + minor);
}

static const struct compat_tf_kernels *kernels_row(const struct compat *kb, const char *tf)
{
	if (tf == NULL)
		return NULL;
	for (size_t i = 0; i < kb->nkernels; i++) {
		const struct compat_tf_kernels *k = &kb->kernels[i];
		if (version_cmp_n(tf, k->tf_from, 2) >= 0 &&
		    (k->tf_below == NULL || version_cmp_n(tf, k->tf_below, 2) < 0))
			return k;
	}
	return NULL;
}

int compat_tf_min_cc(const struct compat *kb, const char *tf_version)
{
	const struct compat_tf_kernels *k = kernels_row(kb, tf_version);

	return k ? compat_cc_parse(k->min_cc) : -ENOENT;
}

enum compat_kernel compat_tf_kernels_for(const struct compat *kb, const char *tf_version,
                                         const char *cc, const struct compat_tf_kernels **row)
{
	const struct compat_tf_kernels *k = kernels_row(kb, tf_version);
	int c = compat_cc_parse(cc);

	if (row != NULL)
		*row = k;
	if (k == NULL || c < 0)
		return COMPAT_KERNEL_UNKNOWN;
	if (k->nsass == 0 && k->nptx == 0)
		return c < compat_cc_parse(k->min_cc) ? COMPAT_KERNEL_NONE : COMPAT_KERNEL_UNKNOWN;
	/* SASS runs on the same major with an equal or higher minor. */
	for (size_t i = 0; i < k->nsass; i++) {
		int s = compat_cc_parse(k->sass[i]);
		if (s / 10 == c / 10 && s <= c)
			return COMPAT_KERNEL_SASS;
	}
	/* PTX is JIT-compiled for any equal or newer GPU. */
	for (size_t i = 0; i < k->nptx; i++)
		if (compat_cc_parse(k->ptx[i]) <= c)
			return COMPAT_KERNEL_PTX;
	return COMPAT_KERNEL_NONE;
}

/* The entry with the longest prefix of version (for the cuda or the cudnn key). */
static const struct compat_sonames *sonames_best(const struct compat *kb, enum compat_os os,
                                                 const char *version, int cudnn)
{
	const struct compat_sonames *best = NULL;
	size_t best_len = 0;

	if (version == NULL)
		return NULL;
	for (size_t i = 0; i < kb->nsonames; i++) {
		const struct compat_sonames *s = &kb->sonames[i];
		const char *key = cudnn ? s->cudnn : s->cuda;
		if (s->os != os || key == NULL || !version_has_prefix(version, key))
			continue;
		if (ncomponents(key) > best_len) {
			best = s;
			best_len = ncomponents(key);
		}
	}
	return best;
}

size_t compat_sonames(const struct compat *kb, int windows, const char *cuda, const char *cudnn,
                      struct strvec *out)
{
	enum compat_os os = windows ? COMPAT_WINDOWS : COMPAT_LINUX;
	const struct compat_sonames *s[2];
	size_t added = 0;

	s[0] = sonames_best(kb, os, cuda, 0);
	s[1] = sonames_best(kb, os, cudnn, 1);
	for (size_t k = 0; k < 2; k++) {
		for (size_t i = 0; s[k] != NULL && i < s[k]->nlibs; i++) {
			strvec_push(out, s[k]->libs[i]);
			added++;
		}
	}
	return added;
}

size_t compat_tf_libraries(const struct compat *kb, int windows, const char *cuda,
                           const char *cudnn, struct strvec *out)
{
	enum compat_os os = windows ? COMPAT_WINDOWS : COMPAT_LINUX;
	const struct compat_sonames *s[2];
	size_t added = 0;

	s[0] = sonames_best(kb, os, cuda, 0);
	s[1] = sonames_best(kb, os, cudnn, 1);
	for (size_t k = 0; k < 2; k++) {
		for (size_t i = 0; s[k] != NULL && i < s[k]->nlibs; i++, added++)
			strvec_push(out, s[k]->libs[i]);
		for (size_t i = 0; s[k] != NULL && i < s[k]->ncompanions; i++, added++)
			strvec_push(out, s[k]->companions[i]);
	}
	return added;
}

const struct compat_lib_component *compat_lib_component(const struct compat *kb, const char *soname)
{
	size_t stem = strcspn(soname, ".");

	for (size_t i = 0; i < kb->nlib_components; i++)
		for (size_t j = 0; j < kb->lib_components[i].nlibs; j++)
			if (strlen(kb->lib_components[i].libs[j]) == stem &&
			    strncmp(kb->lib_components[i].libs[j], soname, stem) == 0)
				return &kb->lib_components[i];
	/* cuDNN's sub-libraries (libcudnn_ops_infer.so.8) come with libcudnn. */
	for (size_t i = 0; i < kb->nlib_components; i++)
		for (size_t j = 0; j < kb->lib_components[i].nlibs; j++) {
			size_t n = strlen(kb->lib_components[i].libs[j]);
			if (strncmp(kb->lib_components[i].libs[j], soname, n) == 0 &&
			    soname[n] == '_')
				return &kb->lib_components[i];
		}
	return NULL;
}

const char *compat_tf_min_glibc(const struct compat *kb, const char *tf_version,
                                const struct compat_tf_glibc **row)
{
	if (row != NULL)
		*row = NULL;
	if (tf_version == NULL)
		return NULL;
	for (size_t i = 0; i < kb->ntf_glibc; i++) {
		const struct compat_tf_glibc *g = &kb->tf_glibc[i];

		if (version_cmp_n(tf_version, g->tf_from, 2) < 0)
			continue;
		if (g->tf_below != NULL && version_cmp_n(tf_version, g->tf_below, 2) >= 0)
			continue;
		if (row != NULL)
			*row = g;
		return g->glibc;
	}
	return NULL;
}

const char *compat_manifest_min_glibc(const struct compat *kb, const struct manifest *m,
                                      const char **source, const char **tf)
{
	const struct compat_tf_glibc *row = NULL;
	const char *v = m->versions.tensorflow.s, *need = NULL;
	*source = NULL;
	*tf = NULL;
	for (size_t i = 0; v == NULL && i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name && strcmp(m->pip.reqs[i].name, "tensorflow") == 0)
			v = m->pip.reqs[i].version;
	if (kb != NULL && compat_tf_min_glibc(kb, v, &row)) {
		need = row->glibc;
		*source = row->tag;
		*tf = v;
	}
	if (m->pip.min_glibc.set && (need == NULL || version_cmp(m->pip.min_glibc.s, need) > 0)) {
		need = m->pip.min_glibc.s;
		*source = "pip.min_glibc";
		*tf = NULL;
	}
	return need;
}

int compat_cuda_wheel_major(const struct compat *kb, const char *name)
{
	const struct compat_cuda_wheels *w = &kb->cuda_wheels;
	const char *tag;
	size_t plen;
	long major;
	char *end;

	if (w->source == NULL || name == NULL)
		return 0;
	plen = strlen(w->prefix);
	if (strncmp(name, w->prefix, plen) != 0)
		return 0;
	/* The last "-cu" followed by digits only: "nvidia-cuda-cupti-cu12". */
	tag = NULL;
	for (const char *p = name + plen; (p = strstr(p, w->major_tag)) != NULL; p++)
		tag = p;
	if (tag == NULL || tag == name + plen)
		return 0;
	tag += strlen(w->major_tag);
	if (!isdigit((unsigned char)*tag))
		return 0;
	major = strtol(tag, &end, 10);
	if (*end != '\0' || major <= 0 || major > 1000)
		return 0;
	return (int)major;
}

static int wheel_is(const struct compat *kb, const char *name, const char *stem);

int compat_cuda_wheel_is_runtime(const struct compat *kb, const char *name)
{
	return wheel_is(kb, name, kb->cuda_wheels.runtime);
}

/* name is <stem><major_tag><digits> for the stem (e.g. nvidia-cudnn). */
static int wheel_is(const struct compat *kb, const char *name, const char *stem)
{
	const char *tag = kb->cuda_wheels.major_tag;
	size_t n;

	if (stem == NULL || compat_cuda_wheel_major(kb, name) == 0)
		return 0;
	n = strlen(stem);
	return strncmp(name, stem, n) == 0 && strncmp(name + n, tag, strlen(tag)) == 0 &&
	       isdigit((unsigned char)name[n + strlen(tag)]);
}

size_t compat_pip_cuda(const struct compat *kb, const struct manifest *m,
                       const struct pip_req **first, const struct pip_req **runtime,
                       const struct pip_req **cudnn)
{
	size_t n = 0;

	if (first != NULL)
		*first = NULL;
	if (runtime != NULL)
		*runtime = NULL;
	if (cudnn != NULL)
		*cudnn = NULL;
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *r = &m->pip.reqs[i];

		if (r->name == NULL || compat_cuda_wheel_major(kb, r->name) == 0)
			continue;
		if (n++ == 0 && first != NULL)
			*first = r;
		if (runtime != NULL && *runtime == NULL &&
		    wheel_is(kb, r->name, kb->cuda_wheels.runtime))
			*runtime = r;
		if (cudnn != NULL && *cudnn == NULL && wheel_is(kb, r->name, kb->cuda_wheels.cudnn))
			*cudnn = r;
	}
	return n;
}

const char *compat_stack_cuda(const struct compat *kb, const struct manifest *m,
                              const struct pip_req **from_wheel)
{
	const struct pip_req *rt = NULL;

	if (from_wheel != NULL)
		*from_wheel = NULL;
	if (!m->cuda.set && kb != NULL && compat_pip_cuda(kb, m, NULL, &rt, NULL) > 0 &&
	    rt != NULL && rt->version != NULL) {
		if (from_wheel != NULL)
			*from_wheel = rt;
		return rt->version;
	}
	if (m->cuda.version.set && m->cuda.version.s != NULL)
		return m->cuda.version.s;
	return m->versions.cuda.s;
}
