/*
 * stackenv.c - a stack's environment, computed once, entered and left by the
 * rules in stackenv.h, in C and as POSIX sh.
 */
#include "stackenv.h"

#include "manifest.h"
#include "module.h"
#include "spawn.h"

#include <stdlib.h>
#include <string.h>

extern char **environ;

static void add(struct stackenv *se, const char *name, enum senv_kind kind, const char *value)
{
	/* A later entry for the same name (the manifest's env.vars) replaces an earlier one. */
	for (size_t i = 0; i < se->n; i++)
		if (strcmp(se->v[i].name, name) == 0) {
			free(se->v[i].value);
			se->v[i].kind = kind;
			se->v[i].value = value ? xstrdup(value) : NULL;
			return;
		}
	se->v = xrealloc(se->v, (se->n + 1) * sizeof(*se->v));
	se->v[se->n++] = (struct senv_var){xstrdup(name), kind, value ? xstrdup(value) : NULL};
}

static char *at_root(const char *host_root, const char *p)
{
	if (host_root == NULL || strcmp(host_root, "/") == 0)
		return xstrdup(p);
	return xasprintf("%s%s", host_root, p);
}

void stackenv_build(const struct manifest *m, const char *name, const char *host_root,
                    struct stackenv *out)
{
	struct strbuf sb = STRBUF_INIT;
	char *cuda = NULL, *env = NULL;
	memset(out, 0, sizeof(*out));
	out->stack = xstrdup(name);
	if (m->cuda.set) {
		char *p = stack_cuda_prefix(m);
		cuda = at_root(host_root, p);
		free(p);
	}
	if (m->python.set) {
		char *p = stack_env_prefix(m);
		env = at_root(host_root, p);
		free(p);
	}
	if (env)
		strbuf_addf(&sb, "%s/bin", env);
	if (cuda)
		strbuf_addf(&sb, "%s%s/bin", sb.len ? ":" : "", cuda);
	if (sb.len)
		add(out, "PATH", SENV_PREPEND, sb.buf);
	if (cuda) {
		strbuf_reset(&sb);
		/* A separate cuDNN comes first: the CUDA prefix may be shared with a
		 * stack that merged another cuDNN (same soname) into its lib64. */
		if (m->cudnn.set && m->cudnn.placement == PLACEMENT_SEPARATE) {
			char *p = stack_cudnn_prefix(m), *h = at_root(host_root, p);
			strbuf_addf(&sb, "%s/lib:", h);
			free(h);
			free(p);
		}
		strbuf_addf(&sb, "%s/lib64", cuda);
		add(out, "LD_LIBRARY_PATH", SENV_PREPEND, sb.buf);
		add(out, "CUDA_HOME", SENV_SET, cuda);
		add(out, "CUDA_PATH", SENV_SET, cuda);
		strbuf_reset(&sb);
		strbuf_addf(&sb, "--xla_gpu_cuda_data_dir=%s", cuda);
		add(out, "XLA_FLAGS", SENV_SET, sb.buf);
	}
	if (env && m->python.manager == PYENV_CONDA) {
		add(out, "CONDA_PREFIX", SENV_SET, env);
		add(out, "CONDA_DEFAULT_ENV", SENV_SET, m->python.name.s ? m->python.name.s : name);
	} else if (env) {
		add(out, "VIRTUAL_ENV", SENV_SET, env);
	}
	if (env)
		add(out, "PYTHONHOME", SENV_UNSET, NULL);
	add(out, "TF_FORCE_GPU_ALLOW_GROWTH", SENV_SET, "true");
	for (size_t i = 0; i < m->env.nvars; i++)
		add(out, m->env.vars[i].name.s, SENV_SET, m->env.vars[i].value.s);
	strbuf_release(&sb);
	free(cuda);
	free(env);
}

void stackenv_release(struct stackenv *se)
{
	for (size_t i = 0; i < se->n; i++) {
		free(se->v[i].name);
		free(se->v[i].value);
	}
	free(se->v);
	free(se->stack);
	memset(se, 0, sizeof(*se));
}

int stackenv_reserved(const char *name)
{
	return strcmp(name, "TFPROV_STACK") == 0 || str_starts_with(name, "_TFPROV_");
}

void stackenv_environ(struct strvec *env)
{
	for (char **e = environ; e && *e; e++)
		if (strchr(*e, '=') != NULL)
			strvec_push(env, *e);
}

/* Whether word w is in the space-separated list. */
static int in_list(const char *list, const char *w)
{
	size_t n = strlen(w);
	for (const char *p = list; p && *p;) {
		p += strspn(p, " ");
		size_t k = strcspn(p, " ");
		if (k == n && strncmp(p, w, n) == 0)
			return 1;
		p += k;
	}
	return 0;
}

/* Whether directory d is one of the ':'-separated entries of list. */
static int has_dir(const char *list, const char *d, size_t dn)
{
	for (const char *p = list; p;) {
		const char *c = strchr(p, ':');
		size_t k = c ? (size_t)(c - p) : strlen(p);
		if (k == dn && strncmp(p, d, dn) == 0)
			return 1;
		p = c ? c + 1 : NULL;
	}
	return 0;
}

/* list without the first entry equal to d[0..dn). */
static char *drop_dir(const char *list, const char *d, size_t dn)
{
	struct strbuf sb = STRBUF_INIT;
	int dropped = 0, first = 1;
	for (const char *p = list; p;) {
		const char *c = strchr(p, ':');
		size_t k = c ? (size_t)(c - p) : strlen(p);
		if (!dropped && k == dn && strncmp(p, d, dn) == 0) {
			dropped = 1;
		} else {
			if (!first)
				strbuf_adds(&sb, ":");
			strbuf_add(&sb, p, k);
			first = 0;
		}
		p = c ? c + 1 : NULL;
	}
	if (sb.buf == NULL)
		strbuf_adds(&sb, "");
	return strbuf_detach(&sb);
}

/* The words of a space-separated list. */
static void words(const char *list, struct strvec *out)
{
	char *copy = xstrdup(list ? list : ""), *save = NULL;
	for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save))
		strvec_push(out, w);
	free(copy);
}

int stackenv_leave(struct strvec *env)
{
	if (spawn_env_get(env, "TFPROV_STACK") == NULL)
		return 0;
	const char *u = spawn_env_get(env, "_TFPROV_UNSET");
	char *unset = xstrdup(u ? u : "");
	struct strvec paths = STRVEC_INIT, vars = STRVEC_INIT;
	words(spawn_env_get(env, "_TFPROV_PATHS"), &paths);
	words(spawn_env_get(env, "_TFPROV_VARS"), &vars);
	for (size_t i = 0; i < paths.n; i++) {
		const char *v = paths.v[i];
		char *key = xasprintf("_TFPROV_ADD_%s", v);
		const char *addv = spawn_env_get(env, key), *cur = spawn_env_get(env, v);
		char *now = xstrdup(cur ? cur : "");
		for (const char *p = addv; p && cur;) {
			const char *c = strchr(p, ':');
			size_t k = c ? (size_t)(c - p) : strlen(p);
			char *next = drop_dir(now, p, k);
			free(now);
			now = next;
			p = c ? c + 1 : NULL;
		}
		if (cur != NULL && now[0] == '\0' && in_list(unset, v))
			spawn_env_unset(env, v);
		else if (cur != NULL)
			spawn_env_set(env, v, now);
		spawn_env_unset(env, key);
		free(now);
		free(key);
	}
	for (size_t i = 0; i < vars.n; i++) {
		const char *v = vars.v[i];
		char *key = xasprintf("_TFPROV_OLD_%s", v);
		const char *old = spawn_env_get(env, key);
		if (old != NULL && !in_list(unset, v)) {
			char *keep = xstrdup(old);
			spawn_env_set(env, v, keep);
			free(keep);
		} else {
			spawn_env_unset(env, v);
		}
		spawn_env_unset(env, key);
		free(key);
	}
	strvec_release(&paths);
	strvec_release(&vars);
	free(unset);
	spawn_env_unset(env, "TFPROV_STACK");
	spawn_env_unset(env, "_TFPROV_*");
	return 1;
}

static void list_add(struct strbuf *sb, const char *w)
{
	strbuf_addf(sb, "%s%s", sb->len ? " " : "", w);
}

void stackenv_enter(const struct stackenv *se, struct strvec *env)
{
	struct strbuf vars = STRBUF_INIT, paths = STRBUF_INIT, unset = STRBUF_INIT;
	stackenv_leave(env);
	for (size_t i = 0; i < se->n; i++) {
		const struct senv_var *x = &se->v[i];
		const char *cur = spawn_env_get(env, x->name);
		char *key = NULL;
		if (x->kind == SENV_PREPEND) {
			struct strbuf added = STRBUF_INIT;
			for (const char *p = x->value; p;) {
				const char *c = strchr(p, ':');
				size_t k = c ? (size_t)(c - p) : strlen(p);
				if (k > 0 && !(cur && has_dir(cur, p, k)) &&
				    !(added.len && has_dir(added.buf, p, k))) {
					if (added.len)
						strbuf_adds(&added, ":");
					strbuf_add(&added, p, k);
				}
				p = c ? c + 1 : NULL;
			}
			if (added.len) {
				if (cur == NULL)
					list_add(&unset, x->name);
				list_add(&paths, x->name);
				key = xasprintf("_TFPROV_ADD_%s", x->name);
				spawn_env_set(env, key, added.buf);
				if (cur && *cur)
					strbuf_addf(&added, ":%s", cur);
				spawn_env_set(env, x->name, added.buf);
			}
			strbuf_release(&added);
		} else if (x->kind == SENV_SET || cur != NULL) {
			list_add(&vars, x->name);
			if (cur == NULL) {
				list_add(&unset, x->name);
			} else {
				key = xasprintf("_TFPROV_OLD_%s", x->name);
				spawn_env_set(env, key, cur);
			}
			if (x->kind == SENV_SET)
				spawn_env_set(env, x->name, x->value);
			else
				spawn_env_unset(env, x->name);
		}
		free(key);
	}
	spawn_env_set(env, "_TFPROV_VARS", vars.len ? vars.buf : "");
	spawn_env_set(env, "_TFPROV_PATHS", paths.len ? paths.buf : "");
	spawn_env_set(env, "_TFPROV_UNSET", unset.len ? unset.buf : "");
	spawn_env_set(env, "TFPROV_STACK", se->stack);
	strbuf_release(&vars);
	strbuf_release(&paths);
	strbuf_release(&unset);
}

void sh_quote(struct strbuf *sb, const char *v)
{
	strbuf_add(sb, "'", 1);
	for (; *v; v++) {
		if (*v == '\'')
			strbuf_adds(sb, "'\\''");
		else
			strbuf_add(sb, v, 1);
	}
	strbuf_add(sb, "'", 1);
}

/*
 * The sh side of stackenv_leave. Only the shell's own words: no external
 * program, no function left defined; every helper variable is unset at the end.
 */
static const char sh_leave[] =
    "if [ -n \"${TFPROV_STACK+x}\" ]; then\n"
    "\t_tfprov_ifs=$IFS\n"
    "\tIFS=' '\n"
    "\tfor _tfprov_v in ${_TFPROV_PATHS-}; do\n"
    "\t\teval \"_tfprov_set=\\${$_tfprov_v+x} _tfprov_now=:\\${$_tfprov_v-}: "
    "_tfprov_add=\\${_TFPROV_ADD_$_tfprov_v-}\"\n"
    "\t\tIFS=:\n"
    "\t\tfor _tfprov_d in $_tfprov_add; do\n"
    "\t\t\tcase $_tfprov_now in\n"
    "\t\t\t*:\"$_tfprov_d\":*) "
    "_tfprov_now=\"${_tfprov_now%%:\"$_tfprov_d\":*}:${_tfprov_now#*:\"$_tfprov_d\":}\" ;;\n"
    "\t\t\tesac\n"
    "\t\tdone\n"
    "\t\tIFS=' '\n"
    "\t\t_tfprov_now=${_tfprov_now#:}\n"
    "\t\t_tfprov_now=${_tfprov_now%:}\n"
    "\t\tif [ -z \"$_tfprov_set\" ]; then\n"
    "\t\t\t:\n"
    "\t\telif [ -z \"$_tfprov_now\" ] && case \" ${_TFPROV_UNSET-} \" in *\" $_tfprov_v \"*) "
    "true ;; *) false ;; esac; then\n"
    "\t\t\tunset \"$_tfprov_v\"\n"
    "\t\telse\n"
    "\t\t\teval \"$_tfprov_v=\\$_tfprov_now; export $_tfprov_v\"\n"
    "\t\tfi\n"
    "\t\tunset \"_TFPROV_ADD_$_tfprov_v\"\n"
    "\tdone\n"
    "\tfor _tfprov_v in ${_TFPROV_VARS-}; do\n"
    "\t\teval \"_tfprov_set=\\${_TFPROV_OLD_$_tfprov_v+x}\"\n"
    "\t\tif [ -n \"$_tfprov_set\" ] && ! case \" ${_TFPROV_UNSET-} \" in *\" $_tfprov_v \"*) "
    "true ;; *) false ;; esac; then\n"
    "\t\t\teval \"$_tfprov_v=\\$_TFPROV_OLD_$_tfprov_v; export $_tfprov_v\"\n"
    "\t\telse\n"
    "\t\t\tunset \"$_tfprov_v\"\n"
    "\t\tfi\n"
    "\t\tunset \"_TFPROV_OLD_$_tfprov_v\"\n"
    "\tdone\n"
    "\tIFS=$_tfprov_ifs\n"
    "\tunset TFPROV_STACK _TFPROV_VARS _TFPROV_PATHS _TFPROV_UNSET _tfprov_v _tfprov_set "
    "_tfprov_now _tfprov_add _tfprov_d _tfprov_ifs\n"
    "fi\n";

void stackenv_sh_deactivate(struct strbuf *sb)
{
	strbuf_adds(sb,
	            "# Leaves the tfprov stack this shell is in, whichever it is, restoring what\n"
	            "# it changed (`tfprov env --unset` does the same). Generated by tfprov; do "
	            "not edit.\n");
	strbuf_adds(sb, sh_leave);
}

void stackenv_sh_activate(const struct stackenv *se, const char *deactivate_path, struct strbuf *sb)
{
	strbuf_addf(
	    sb,
	    "# The environment of the tfprov stack '%s', for POSIX shells (`tfprov env %s`\n"
	    "# prints the same for this and other shells). Generated by tfprov; do not edit:\n"
	    "# `tfprov apply` rewrites it. A stack already entered is left first.\n",
	    se->stack, se->stack);
	strbuf_adds(sb, "if [ -n \"${TFPROV_STACK+x}\" ]; then . ");
	sh_quote(sb, deactivate_path);
	strbuf_adds(sb, "; fi\n_TFPROV_VARS= _TFPROV_PATHS= _TFPROV_UNSET=\n");
	for (size_t i = 0; i < se->n; i++) {
		const struct senv_var *x = &se->v[i];
		const char *n = x->name;
		if (x->kind == SENV_PREPEND) {
			strbuf_adds(sb, "_tfprov_add=\n");
			char *copy = xstrdup(x->value), *save = NULL;
			for (char *d = strtok_r(copy, ":", &save); d;
			     d = strtok_r(NULL, ":", &save)) {
				strbuf_addf(sb,
				            "case :${%s-}:${_tfprov_add:+$_tfprov_add:} in *:", n);
				sh_quote(sb, d);
				strbuf_adds(sb,
				            ":*) ;; *) _tfprov_add=${_tfprov_add:+$_tfprov_add:}");
				sh_quote(sb, d);
				strbuf_adds(sb, " ;; esac\n");
			}
			free(copy);
			strbuf_addf(sb,
			            "if [ -n \"$_tfprov_add\" ]; then\n"
			            "\t[ -n \"${%s+x}\" ] || _TFPROV_UNSET=\"$_TFPROV_UNSET %s\"\n"
			            "\t_TFPROV_PATHS=\"$_TFPROV_PATHS %s\"\n"
			            "\t_TFPROV_ADD_%s=$_tfprov_add\n"
			            "\texport _TFPROV_ADD_%s\n"
			            "\t%s=\"$_tfprov_add${%s:+:$%s}\"\n"
			            "\texport %s\n"
			            "fi\n",
			            n, n, n, n, n, n, n, n, n);
			continue;
		}
		strbuf_addf(
		    sb, "if [ -n \"${%s+x}\" ]; then _TFPROV_OLD_%s=$%s; export _TFPROV_OLD_%s; ",
		    n, n, n, n);
		if (x->kind == SENV_SET) {
			strbuf_addf(sb, "else _TFPROV_UNSET=\"$_TFPROV_UNSET %s\"; fi\n", n);
			strbuf_addf(sb, "_TFPROV_VARS=\"$_TFPROV_VARS %s\"\nexport %s=", n, n);
			sh_quote(sb, x->value);
			strbuf_adds(sb, "\n");
		} else {
			strbuf_addf(sb, "_TFPROV_VARS=\"$_TFPROV_VARS %s\"; unset %s; fi\n", n, n);
		}
	}
	strbuf_adds(sb, "TFPROV_STACK=");
	sh_quote(sb, se->stack);
	strbuf_adds(sb, "\nexport TFPROV_STACK _TFPROV_VARS _TFPROV_PATHS _TFPROV_UNSET\n"
	                "unset _tfprov_add\n");
}
