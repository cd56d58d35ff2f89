/*
 * compat_envderived.c - env.vars against what tfprov derives for the stack.
 *
 * stackenv_build (engine/core/stackenv.c) computes PATH, LD_LIBRARY_PATH,
 * CUDA_HOME, CUDA_PATH, XLA_FLAGS, VIRTUAL_ENV/CONDA_PREFIX and PYTHONHOME
 * from the manifest; an env.vars entry of the same name replaces the derived
 * value whole (it is written as is: "$PATH" is not expanded). One rule covers
 * every derived variable, taken from that same computation so a variable the
 * env step learns to derive is covered without a change here:
 *  - a list (PATH, LD_LIBRARY_PATH) that leaves out a directory the stack puts
 *    there, or names another CUDA before it;
 *  - a path (CUDA_HOME, CUDA_PATH, the env's prefix) set to another place;
 *  - XLA_FLAGS without --xla_gpu_cuda_data_dir=<the stack's CUDA>, or with
 *    another one (the last occurrence is the one XLA keeps);
 *  - a variable the stack unsets (PYTHONHOME) set again.
 * Beyond the derived ones: TF_CUDA_PATHS (TensorFlow's configure reads it as a
 * comma-separated list of CUDA roots) naming another CUDA, and in a stack whose
 * CUDA comes from nvidia-*-cu<N> wheels, LD_LIBRARY_PATH or XLA's data dir
 * naming a CUDA, which the loader or XLA searches before the wheels.
 * Each is a warning (compat.env-shadows-stack) at the value's position.
 */
#include "kb.h"
#include "kb_int.h"
#include "stackenv.h"
#include "module.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define XLA_DATA_DIR "--xla_gpu_cuda_data_dir="

/* a == b as directories: a trailing '/' does not count. */
static int same_dir(const char *a, size_t an, const char *b)
{
	size_t bn = strlen(b);

	while (an > 1 && a[an - 1] == '/')
		an--;
	while (bn > 1 && b[bn - 1] == '/')
		bn--;
	return an == bn && strncmp(a, b, an) == 0;
}

/* d[0..n) is dir or below it. */
static int under(const char *d, size_t n, const char *dir)
{
	size_t k = strlen(dir);

	while (k > 1 && dir[k - 1] == '/')
		k--;
	return n >= k && strncmp(d, dir, k) == 0 && (n == k || d[k] == '/');
}

/*
 * Whether directory d[0..n) looks like a CUDA installation: a component named
 * cuda, cuda-X.Y, cuda_X, CUDA (Windows), cudnn..., or a wheel's nvidia/<lib>.
 */
static int cuda_like(const char *d, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t j = i;

		while (j < n && d[j] != '/' && d[j] != '\\')
			j++;
		if (j - i >= 4 && strncasecmp(d + i, "cuda", 4) == 0) {
			size_t k = i + 4;

			if (k < j && (d[k] == '-' || d[k] == '_' || d[k] == '.'))
				k++;
			while (k < j && (isdigit((unsigned char)d[k]) || d[k] == '.'))
				k++;
			if (k == j || (j - i >= 5 && strncasecmp(d + i, "cudnn", 5) == 0))
				return 1;
		}
		if (j - i == 6 && strncmp(d + i, "nvidia", 6) == 0 && n >= 13 &&
		    strstr(d, "-packages/") != NULL)
			return 1;
		i = j + 1;
	}
	return 0;
}

struct own {
	char *cuda;  /* the stack's CUDA prefix, or NULL */
	char *cudnn; /* cuDNN's own prefix when placed separately, or NULL */
	int wheels;  /* CUDA from nvidia-*-cu<N> wheels */
};

static int is_own(const struct own *o, const char *d, size_t n)
{
	return (o->cuda && under(d, n, o->cuda)) || (o->cudnn && under(d, n, o->cudnn));
}

static void warn(struct diags *d, const struct manifest *m, const struct env_var *v,
                 const char *hint, const char *what)
{
	struct strbuf h = STRBUF_INIT;

	strbuf_adds(&h, hint);
	if (strchr(v->value.s, '$') != NULL)
		strbuf_adds(&h, "; tfprov sets the value as written ($NAME is not expanded)");
	diags_add(d, DIAG_WARNING, m->path, v->value.pos, "compat.env-shadows-stack", h.buf,
	          "%s=\"%s\" %s", v->name.s, v->value.s, what);
	strbuf_release(&h);
}

/* The first CUDA-like entry of list (sep-separated) not the stack's, before index stop. */
static int other_cuda(const struct own *o, const char *list, char sep, size_t stop,
                      struct strbuf *out)
{
	size_t idx = 0;

	for (const char *p = list; p && idx < stop; idx++) {
		const char *c = strchr(p, sep);
		size_t k = c ? (size_t)(c - p) : strlen(p);

		if (k > 0 && cuda_like(p, k) && !is_own(o, p, k)) {
			strbuf_add(out, p, k);
			return 1;
		}
		p = c ? c + 1 : NULL;
	}
	return 0;
}

/* Index of the first entry of list equal to one of want's (':'-separated); SIZE_MAX if none. */
static size_t first_of(const char *list, char sep, const char *want)
{
	size_t idx = 0;

	for (const char *p = list; p; idx++) {
		const char *c = strchr(p, sep);
		size_t k = c ? (size_t)(c - p) : strlen(p);

		for (const char *w = want; w;) {
			const char *e = strchr(w, ':');
			char *one = xstrndup(w, e ? (size_t)(e - w) : strlen(w));
			int hit = same_dir(p, k, one);

			free(one);
			if (hit)
				return idx;
			w = e ? e + 1 : NULL;
		}
		p = c ? c + 1 : NULL;
	}
	return (size_t)-1;
}

static int has_entry(const char *list, char sep, const char *d, size_t n)
{
	for (const char *p = list; p;) {
		const char *c = strchr(p, sep);
		size_t k = c ? (size_t)(c - p) : strlen(p);
		char *one = xstrndup(d, n);
		int hit = same_dir(p, k, one);

		free(one);
		if (hit)
			return 1;
		p = c ? c + 1 : NULL;
	}
	return 0;
}

/* A list variable the stack prepends to (PATH, LD_LIBRARY_PATH). */
static void check_list(const struct own *o, const struct senv_var *x, const struct env_var *v,
                       const struct manifest *m, struct diags *d)
{
	struct strbuf dropped = STRBUF_INIT, other = STRBUF_INIT, sb = STRBUF_INIT;
	char *hint;

	for (const char *p = x->value; p;) {
		const char *c = strchr(p, ':');
		size_t k = c ? (size_t)(c - p) : strlen(p);

		if (k > 0 && !has_entry(v->value.s, ':', p, k)) {
			if (dropped.len)
				strbuf_adds(&dropped, ", ");
			strbuf_add(&dropped, p, k);
		}
		p = c ? c + 1 : NULL;
	}
	hint = xasprintf("leave %s out of env.vars: tfprov already puts %s in front of it "
	                 "(stackenv.h), and a value here replaces that",
	                 x->name, x->value);
	if (dropped.len) {
		strbuf_addf(&sb, "drops the stack's %s", dropped.buf);
		if (other_cuda(o, v->value.s, ':', (size_t)-1, &other))
			strbuf_addf(&sb, " and puts another CUDA (%s) in its place", other.buf);
		warn(d, m, v, hint, sb.buf);
	} else if (other_cuda(o, v->value.s, ':', first_of(v->value.s, ':', x->value), &other)) {
		strbuf_addf(&sb, "puts another CUDA (%s) before the stack's %s", other.buf,
		            x->value);
		warn(d, m, v, hint, sb.buf);
	}
	free(hint);
	strbuf_release(&dropped);
	strbuf_release(&other);
	strbuf_release(&sb);
}

/* The value of the last --xla_gpu_cuda_data_dir= in flags, or NULL. */
static char *xla_data_dir(const char *flags)
{
	const char *p = flags, *last = NULL;

	while ((p = strstr(p, XLA_DATA_DIR)) != NULL) {
		if (p == flags || p[-1] == ' ' || p[-1] == '\t')
			last = p + strlen(XLA_DATA_DIR);
		p += strlen(XLA_DATA_DIR);
	}
	if (last == NULL)
		return NULL;
	return xstrndup(last, strcspn(last, " \t"));
}

static void check_xla(const struct own *o, const struct senv_var *x, const struct env_var *v,
                      const struct manifest *m, struct diags *d)
{
	char *dir = xla_data_dir(v->value.s), *hint, *what;

	if (x != NULL) {
		hint = xasprintf("keep %s%s in the value, e.g. \"%s %s\" (XLA runs ptxas and reads "
		                 "libdevice from that directory)",
		                 XLA_DATA_DIR, o->cuda, x->value, v->value.s);
		if (dir == NULL)
			what = xasprintf("drops the stack's %s%s", XLA_DATA_DIR, o->cuda);
		else if (!same_dir(dir, strlen(dir), o->cuda))
			what = xasprintf("points XLA at %s instead of the stack's CUDA %s", dir,
			                 o->cuda);
		else
			what = NULL;
	} else {
		/* nvidia-*-cu<N> wheels: XLA searches the data dir before the nvcc wheel. */
		hint = xstrdup("drop --xla_gpu_cuda_data_dir: XLA finds ptxas and libdevice in the "
		               "stack's nvidia-cuda-nvcc wheel when no data dir is given");
		what = dir && cuda_like(dir, strlen(dir))
		           ? xasprintf("points XLA at %s before the stack's CUDA wheels", dir)
		           : NULL;
	}
	if (what != NULL)
		warn(d, m, v, hint, what);
	free(what);
	free(hint);
	free(dir);
}

static const struct senv_var *derived(const struct stackenv *se, const char *name)
{
	for (size_t i = 0; i < se->n; i++)
		if (strcmp(se->v[i].name, name) == 0)
			return &se->v[i];
	return NULL;
}

static void check_var(const struct own *o, const struct stackenv *se, const struct env_var *v,
                      const struct manifest *m, struct diags *d)
{
	const struct senv_var *x = derived(se, v->name.s);
	struct strbuf other = STRBUF_INIT;
	char *hint, *what;

	if (strcmp(v->name.s, "XLA_FLAGS") == 0) {
		if (x != NULL || o->wheels)
			check_xla(o, x, v, m, d);
	} else if (strcmp(v->name.s, "TF_CUDA_PATHS") == 0) {
		/* TensorFlow's configure: a comma-separated list of CUDA roots, searched in order. */
		size_t at = o->cuda ? first_of(v->value.s, ',', o->cuda) : (size_t)-1;

		if (o->cuda && at == (size_t)-1) {
			hint =
			    xasprintf("name the stack's CUDA first: TF_CUDA_PATHS=\"%s\"", o->cuda);
			warn(d, m, v, hint, "does not name the stack's CUDA");
			free(hint);
		} else if ((o->cuda || o->wheels) && other_cuda(o, v->value.s, ',', at, &other)) {
			hint = o->cuda ? xasprintf("name the stack's CUDA %s first", o->cuda)
			               : xstrdup("drop TF_CUDA_PATHS: the stack's CUDA is its "
			                         "nvidia-*-cu<N> wheels");
			what = xasprintf("puts another CUDA (%s) before the stack's", other.buf);
			warn(d, m, v, hint, what);
			free(what);
			free(hint);
		}
	} else if (x == NULL) {
		if (o->wheels && strcmp(v->name.s, "LD_LIBRARY_PATH") == 0 &&
		    other_cuda(o, v->value.s, ':', (size_t)-1, &other)) {
			what = xasprintf("puts another CUDA (%s) before the stack's nvidia-*-cu<N> "
			                 "wheels: the loader searches LD_LIBRARY_PATH before a "
			                 "library's RUNPATH (ld.so(8))",
			                 other.buf);
			warn(d, m, v,
			     "leave that CUDA out of LD_LIBRARY_PATH; TensorFlow finds the wheels' "
			     "libraries itself",
			     what);
			free(what);
		}
	} else if (x->kind == SENV_PREPEND) {
		check_list(o, x, v, m, d);
	} else if (x->kind == SENV_UNSET) {
		hint =
		    xasprintf("leave %s out of env.vars: the stack unsets it so the env's "
		              "interpreter uses its own library, as venv and conda activation do",
		              x->name);
		warn(d, m, v, hint, "sets what the stack unsets");
		free(hint);
	} else if (x->value && x->value[0] == '/' && v->value.s[0] == '/' &&
	           !same_dir(v->value.s, strlen(v->value.s), x->value)) {
		hint =
		    xasprintf("leave %s out of env.vars: tfprov sets it to %s", x->name, x->value);
		what = xasprintf("replaces the stack's %s", x->value);
		warn(d, m, v, hint, what);
		free(what);
		free(hint);
	}
	strbuf_release(&other);
}

void compat_lint_env_derived(const struct compat *kb, const struct manifest *m, struct diags *d)
{
	struct manifest bare;
	struct stackenv se;
	struct own o = {0};
	const struct pip_req *first = NULL, *rt = NULL, *dnn = NULL;

	if (m->env.nvars == 0 || m->prefix.s == NULL)
		return;
	/* What the stack derives, before env.vars replace any of it. */
	bare = *m;
	bare.env.nvars = 0;
	stackenv_build(&bare, m->stack.name.s ? m->stack.name.s : "stack", NULL, &se);
	if (m->cuda.set) {
		o.cuda = stack_cuda_prefix(m);
		if (m->cudnn.set && m->cudnn.placement == PLACEMENT_SEPARATE)
			o.cudnn = stack_cudnn_prefix(m);
	} else {
		o.wheels = compat_pip_cuda(kb, m, &first, &rt, &dnn) > 0;
	}
	for (size_t i = 0; i < m->env.nvars; i++)
		if (m->env.vars[i].name.s != NULL && m->env.vars[i].value.s != NULL)
			check_var(&o, &se, &m->env.vars[i], m, d);
	stackenv_release(&se);
	free(o.cuda);
	free(o.cudnn);
}
