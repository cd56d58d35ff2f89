/*
 * stackuse.c - using an applied stack: `tfprov run STACK -- CMD`, `tfprov env
 * STACK`, `tfprov shell STACK`, `tfprov default STACK`; the machine's login
 * script; and the in-use mark that keeps a stack from being changed under a
 * command running in it.
 *
 * Every environment here is the one stackenv.c computes from the stack's
 * recorded generation: these commands, the login script and the activation
 * hooks cannot disagree.
 *
 * run replaces itself with CMD (execve: no child in between, nothing
 * captured, signals reach CMD as they would without tfprov, the exit status
 * is CMD's). Its own failures use env(1)'s and chroot(1)'s codes: 125
 * tfprov failed (an unknown stack, no command, a state that cannot be read),
 * 126 CMD found but not executable, 127 CMD not found. 64 is not used: a
 * command's own exit status may well be 64 (EX_USAGE), and a script must be
 * able to tell tfprov's failure from CMD's.
 *
 * In use: run (and shell) take a shared flock on <state_dir>/inuse/<stack>
 * on a descriptor CMD inherits, so the mark lasts as long as CMD and what it
 * starts holding it. destroy, and an apply that would change the stack, take
 * it exclusively: they wait --lock-timeout, then exit 4 naming the pids
 * (/proc/locks).
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "manifest.h"
#include "module.h"
#include "spawn.h"
#include "stackenv.h"
#include "stackinfo.h"
#include "state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* --- which stack ------------------------------------------------------- */

static void say_stacks(struct ctx *c, const char *cmd, const char *what)
{
	struct strvec names = STRVEC_INIT;
	struct strbuf sb = STRBUF_INIT;
	if (c->st)
		state_stack_names(c->st, &names);
	for (size_t i = 0; i < names.n; i++)
		strbuf_addf(&sb, "%s%s", i ? ", " : "", names.v[i]);
	if (names.n == 0)
		fprintf(stderr, "tfprov %s: %s: no stack is applied under %s\n", cmd, what,
		        c->root);
	else
		fprintf(stderr, "tfprov %s: %s; the stacks under %s: %s\n", cmd, what, c->root,
		        sb.buf);
	strvec_release(&names);
	strbuf_release(&sb);
}

/*
 * The stack a command names, or the only one when it names none. *out is
 * the manifest of its current generation. 0, or TF_EFAIL (said, with the
 * stack names).
 */
static int load_stack(struct ctx *c, const char *cmd, const char *name, char **name_out,
                      struct manifest **out)
{
	struct strvec names = STRVEC_INIT;
	struct state_gen g = {0};
	struct diags d = {0};
	int rc = TF_EFAIL;
	*out = NULL;
	*name_out = NULL;
	if (name == NULL) {
		if (c->st)
			state_stack_names(c->st, &names);
		if (names.n != 1) {
			say_stacks(c, cmd,
			           names.n ? "several stacks: name one" : "no stack to use");
			goto out;
		}
		name = names.v[0];
	}
	if (c->st == NULL || state_gen_current(c->st, name, &g) != 0 || g.id == 0) {
		char *what = xasprintf("no stack named '%s'", name);
		say_stacks(c, cmd, what);
		free(what);
		goto out;
	}
	const char *t = g.manifest_text ? g.manifest_text : "";
	if (manifest_load_shape(g.manifest_path, t, strlen(t), out, &d) != 0) {
		fprintf(stderr,
		        "tfprov %s: the manifest recorded for stack %s no longer parses: %s\n", cmd,
		        name, d.n ? d.v[0].msg : "unknown error");
		goto out;
	}
	stackinfo_recorded_placement(c, g.stack_id, *out);
	*name_out = xstrdup(name);
	rc = 0;
out:
	state_gen_release(&g);
	diags_release(&d);
	strvec_release(&names);
	return rc;
}

/* --- in use ------------------------------------------------------------ */

static char *inuse_path(const struct ctx *c, const char *name)
{
	return xasprintf("%s/inuse/%s", c->state_dir, name);
}

int cli_stack_mark(struct ctx *c, const char *name)
{
	char *dir = path_join(c->state_dir, "inuse"), *p = inuse_path(c, name);
	int fd = -1;
	if (mkdirs_at(AT_FDCWD, dir, 0755) == 0)
		fd = open(p, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0)
		close(fd);
	free(dir);
	free(p);
	return fd >= 0 ? 0 : -errno;
}

void cli_stack_unmark(struct ctx *c, const char *name)
{
	char *p = inuse_path(c, name), *dir = path_join(c->state_dir, "inuse");
	unlink(p);
	rmdir(dir); /* the last stack gone: nothing of the marks is left (README.Debian) */
	free(dir);
	free(p);
}

/* "1234 (python3), 1240 (sleep)": who holds a lock on the file open at fd. */
static char *lock_holders(int fd)
{
	struct stat st;
	struct strbuf sb = STRBUF_INIT;
	FILE *f = fopen("/proc/locks", "re");
	char line[512];
	if (f == NULL || fstat(fd, &st) != 0)
		goto out;
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long ino;
		long pid;
		char kind[16], adv[16], mode[16];
		if (strstr(line, "->") != NULL)
			continue; /* a waiter, not a holder */
		if (sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%lu", kind, adv, mode, &pid, &maj,
		           &min, &ino) != 7 ||
		    ino != (unsigned long)st.st_ino || maj != major(st.st_dev) ||
		    min != minor(st.st_dev) || pid == (long)getpid())
			continue;
		char comm_path[64], comm[64] = "?";
		snprintf(comm_path, sizeof(comm_path), "/proc/%ld/comm", pid);
		FILE *cf = fopen(comm_path, "re");
		if (cf && fgets(comm, sizeof(comm), cf))
			comm[strcspn(comm, "\n")] = '\0';
		if (cf)
			fclose(cf);
		strbuf_addf(&sb, "%s%ld (%s)", sb.len ? ", " : "", pid, comm);
	}
out:
	if (f)
		fclose(f);
	return sb.len ? strbuf_detach(&sb) : xstrdup("a process tfprov cannot name");
}

/* flock with --lock-timeout: 0, or -EWOULDBLOCK when it stayed taken. */
static int flock_wait(int fd, int how, double timeout)
{
	struct timespec t0, now, nap = {0, 50 * 1000 * 1000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (flock(fd, how | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 >=
		        timeout ||
		    tf_interrupted)
			return -EWOULDBLOCK;
		nanosleep(&nap, NULL);
	}
}

int cli_stack_claim(struct ctx *c, const char *name, const char *doing)
{
	char *p = inuse_path(c, name);
	int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	free(p);
	if (fd < 0)
		return 0; /* never marked: no run of it can hold it */
	if (flock_wait(fd, LOCK_EX, c->lock_timeout) != 0) {
		char *who = lock_holders(fd);
		ev_log(c, EV_ERROR,
		       "stack %s is in use by %s (tfprov run/shell of it); %s would change it "
		       "under them: wait for them to end, or pass --lock-timeout SEC to wait "
		       "(waited %.0f s)",
		       name, who, doing, c->lock_timeout);
		free(who);
		close(fd);
		return TF_ELOCKED;
	}
	/* Held until this process ends: no run of the stack starts meanwhile. */
	return 0;
}

/* The shared mark run and shell hold; fd is inherited by CMD. 0 or 125 (said). */
static int hold_stack(struct ctx *c, const char *cmd, const char *name)
{
	char *p = inuse_path(c, name);
	int fd = open(p, O_RDONLY | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT && cli_stack_mark(c, name) == 0)
		fd = open(p, O_RDONLY | O_NOFOLLOW);
	free(p);
	if (fd < 0) {
		/* A state this user cannot write to, from before the mark existed. */
		fprintf(stderr,
		        "tfprov %s: warning: cannot mark stack %s in use (%s): destroy will not "
		        "wait for this command\n",
		        cmd, name, strerror(errno));
		return 0;
	}
	if (flock_wait(fd, LOCK_SH, c->lock_timeout) != 0) {
		char *who = lock_holders(fd);
		fprintf(stderr,
		        "tfprov %s: stack %s is being changed by tfprov (%s); try again when it "
		        "is done, or pass --lock-timeout SEC to wait\n",
		        cmd, name, who);
		free(who);
		close(fd);
		return 125;
	}
	return 0; /* fd stays open, without FD_CLOEXEC */
}

/* --- the conda env's own activation scripts ----------------------------- */

/*
 * The scripts conda packages installed into <env>/etc/conda/<phase>.d with
 * the given suffix (".sh", ".fish", ".ps1"), in the order conda sources them
 * (sorted), tfprov's own hook left out. Host paths.
 */
static void conda_scripts(struct ctx *c, const struct manifest *m, const char *phase,
                          const char *suffix, struct strvec *out)
{
	if (!m->python.set || m->python.manager != PYENV_CONDA)
		return;
	char *env = stack_env_prefix(m);
	char *rel = xasprintf("%s/etc/conda/%s.d", env, phase);
	char *dir = ctx_host_dir(c, rel);
	struct dirent **v = NULL;
	int n = dir ? scandir(dir, &v, NULL, alphasort) : -1;
	for (int i = 0; i < n; i++) {
		const char *f = v[i]->d_name;
		if (f[0] != '.' && str_ends_with(f, suffix) && !str_starts_with(f, "tfprov-"))
			strvec_pushf(out, "%s/%s", dir, f);
		free(v[i]);
	}
	free(v);
	free(dir);
	free(rel);
	free(env);
}

/* --- run ---------------------------------------------------------------- */

static void envp_of(struct strvec *env)
{
	env->v = xrealloc(env->v, (env->n + 1) * sizeof(char *));
	env->v[env->n] = NULL;
}

/* The program CMD names, searched on the stack's PATH. NULL: not found (errno). */
static char *find_program(const char *cmd, const char *path)
{
	if (strchr(cmd, '/') != NULL)
		return xstrdup(cmd);
	char *copy = xstrdup(path ? path : "/usr/bin:/bin"), *save = NULL, *found = NULL;
	int denied = 0;
	for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		char *cand = path_join(*d ? d : ".", cmd);
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
			if (access(cand, X_OK) == 0)
				found = cand;
			else
				denied = 1;
		}
		if (!found)
			free(cand);
	}
	free(copy);
	errno = found ? 0 : denied ? EACCES : ENOENT;
	return found;
}

static void name_not_run(const char *cmd, const struct strvec *scripts, const char *how)
{
	for (size_t i = 0; i < scripts->n; i++)
		fprintf(stderr,
		        "tfprov %s: not run: %s (a conda package's activation script; %s)\n", cmd,
		        scripts->v[i], how);
}

/*
 * Replaces tfprov with argv[0] in the stack's environment. Returns only on
 * failure: 125, 126 or 127 (said).
 */
static int exec_in_stack(struct ctx *c, const char *cmd, const char *name, const struct manifest *m,
                         char **argv)
{
	struct stackenv se;
	struct strvec env = STRVEC_INIT;
	stackenv_build(m, name, c->root, &se);
	stackenv_environ(&env);
	stackenv_enter(&se, &env);
	stackenv_release(&se);
	envp_of(&env);
	int rc = hold_stack(c, cmd, name);
	if (rc != 0)
		goto out;
	char *prog = find_program(argv[0], spawn_env_get(&env, "PATH"));
	if (prog == NULL) {
		rc = errno == EACCES ? 126 : 127;
		fprintf(stderr, "tfprov %s: %s: %s in stack %s's PATH\n", cmd, argv[0],
		        rc == 126 ? "not executable" : "command not found", name);
		goto out;
	}
	state_close(c->st);
	c->st = NULL;
	fflush(stdout);
	fflush(stderr);
	execve(prog, argv, env.v);
	int e = errno;
	rc = e == ENOENT ? 127 : 126;
	fprintf(stderr, "tfprov %s: cannot run %s: %s\n", cmd, prog, strerror(e));
	free(prog);
out:
	strvec_release(&env);
	return rc;
}

int cmd_run(struct ctx *c, struct opts *o)
{
	struct manifest *m = NULL;
	char *name = NULL;
	const char *stack = NULL;
	char **argv = o->cmdv.v;
	size_t argc = o->cmdv.n;
	/* Without `--`: tfprov run STACK CMD [ARGS...]. */
	if (!o->dashdash && o->args.n >= 1) {
		stack = o->args.v[0];
		argv = o->args.v + 1;
		argc = o->args.n - 1;
	} else if (o->dashdash && o->args.n == 1) {
		stack = o->args.v[0];
	} else if (o->args.n > 1) {
		fprintf(stderr, "tfprov run: one STACK before `--`, then the command\n"
		                "usage: tfprov run [STACK] -- CMD [ARGS...]\n");
		return 125;
	}
	if (argc == 0) {
		fprintf(stderr, "tfprov run: no command given\n"
		                "usage: tfprov run [STACK] -- CMD [ARGS...]\n");
		return 125;
	}
	if (load_stack(c, "run", stack, &name, &m) != 0)
		return 125;
	struct strvec scripts = STRVEC_INIT;
	conda_scripts(c, m, "activate", ".sh", &scripts);
	name_not_run("run", &scripts, "`tfprov shell` and `tfprov env` run it");
	strvec_release(&scripts);
	/* exec_in_stack wants a NULL-terminated argv. */
	char **av = xcalloc(argc + 1, sizeof(char *));
	memcpy(av, argv, argc * sizeof(char *));
	int rc = exec_in_stack(c, "run", name, m, av);
	free(av);
	free(name);
	manifest_free(m);
	return rc;
}

/* --- env ---------------------------------------------------------------- */

enum shell { SH, FISH, PWSH };

static const struct {
	const char *name;
	enum shell kind;
	const char *suffix; /* conda's activation scripts for it */
} shells[] = {
    {"sh", SH, ".sh"},  {"bash", SH, ".sh"},     {"zsh", SH, ".sh"},     {"dash", SH, ".sh"},
    {"ksh", SH, ".sh"}, {"fish", FISH, ".fish"}, {"pwsh", PWSH, ".ps1"},
};

/* The index of shell `name` in shells[], or ARRAY_SIZE(shells) when it is not one. */
static size_t find_shell(const char *name)
{
	size_t i = 0;
	while (name && i < ARRAY_SIZE(shells) && strcmp(shells[i].name, name) != 0)
		i++;
	return name ? i : ARRAY_SIZE(shells);
}

static void quote_for(struct strbuf *sb, enum shell sh, const char *v)
{
	if (sh == SH) {
		sh_quote(sb, v);
		return;
	}
	strbuf_adds(sb, "'");
	for (; *v; v++) {
		if (sh == FISH && (*v == '\'' || *v == '\\'))
			strbuf_addf(sb, "\\%c", *v);
		else if (sh == PWSH && *v == '\'')
			strbuf_adds(sb, "''");
		else
			strbuf_add(sb, v, 1);
	}
	strbuf_adds(sb, "'");
}

static void say_unset(struct strbuf *sb, enum shell sh, const char *n)
{
	if (sh == SH)
		strbuf_addf(sb, "unset %s\n", n);
	else if (sh == FISH)
		strbuf_addf(sb, "set -e %s\n", n);
	else
		strbuf_addf(sb, "Remove-Item -ErrorAction SilentlyContinue Env:%s\n", n);
}

static void say_set(struct strbuf *sb, enum shell sh, const char *n, const char *v)
{
	strbuf_adds(sb, sh == SH ? "export " : sh == FISH ? "set -gx " : "$env:");
	strbuf_adds(sb, n);
	strbuf_adds(sb, sh == SH ? "=" : sh == FISH ? " " : " = ");
	quote_for(sb, sh, v);
	strbuf_adds(sb, "\n");
}

static void say_source(struct strbuf *sb, enum shell sh, const char *script)
{
	strbuf_adds(sb, sh == FISH ? "source " : ". ");
	quote_for(sb, sh, script);
	strbuf_adds(sb, "\n");
}

/* NAME=VALUE: VALUE, and the length of NAME in *namelen. */
static const char *value_of(const char *entry, size_t *namelen)
{
	const char *eq = strchr(entry, '=');
	*namelen = (size_t)(eq - entry);
	return eq + 1;
}

/* What changed from `from` to `to`: JSON {"set": {...}, "unset": [...]} and the shell's lines. */
static void env_changes(const struct strvec *from, const struct strvec *to, enum shell sh,
                        struct strbuf *out, json_t *set, json_t *unset)
{
	for (size_t i = 0; i < from->n; i++) {
		size_t k;
		value_of(from->v[i], &k);
		char *n = xstrndup(from->v[i], k);
		if (spawn_env_get(to, n) == NULL) {
			say_unset(out, sh, n);
			json_array_append_new(unset, json_string(n));
		}
		free(n);
	}
	for (size_t i = 0; i < to->n; i++) {
		size_t k;
		const char *v = value_of(to->v[i], &k);
		char *n = xstrndup(to->v[i], k);
		const char *was = spawn_env_get(from, n);
		if (was == NULL || strcmp(was, v) != 0) {
			say_set(out, sh, n, v);
			json_object_set_new(set, n, json_string(v));
		}
		free(n);
	}
}

int cmd_env(struct ctx *c, struct opts *o)
{
	const char *shname = o->shell;
	if (shname == NULL) {
		const char *s = getenv("SHELL"), *base = s ? strrchr(s, '/') : NULL;
		shname = find_shell(base ? base + 1 : s) < ARRAY_SIZE(shells)
		             ? (base ? base + 1 : s)
		             : "sh";
	}
	size_t si = find_shell(shname);
	if (si == ARRAY_SIZE(shells)) {
		fprintf(
		    stderr,
		    "tfprov env: --shell %s is not supported: sh, bash, zsh, dash, ksh, fish or "
		    "pwsh (--json for other tools)\n",
		    shname);
		return TF_EUSAGE;
	}
	enum shell sh = shells[si].kind;
	struct manifest *m = NULL;
	char *name = NULL;
	struct strvec before = STRVEC_INIT, after = STRVEC_INIT, run = STRVEC_INIT;
	struct strbuf out = STRBUF_INIT;
	int rc = 0;
	stackenv_environ(&before);
	stackenv_environ(&after);
	if (o->unset) {
		/* Leaving: the stack this shell is in runs its conda deactivate scripts first. */
		const char *in = getenv("TFPROV_STACK");
		if (o->args.n) {
			fprintf(stderr, "tfprov env: --unset leaves the stack this shell is in; it "
			                "takes no STACK\n");
			rc = TF_EUSAGE;
			goto out;
		}
		if (in && c->st && state_stack_id(c->st, in) != 0 &&
		    load_stack(c, "env", in, &name, &m) == 0)
			conda_scripts(c, m, "deactivate", shells[si].suffix, &run);
		stackenv_leave(&after);
	} else {
		rc = load_stack(c, "env", o->args.n ? o->args.v[0] : NULL, &name, &m);
		if (rc != 0)
			goto out;
		struct stackenv se;
		stackenv_build(m, name, c->root, &se);
		stackenv_enter(&se, &after);
		stackenv_release(&se);
		conda_scripts(c, m, "activate", shells[si].suffix, &run);
	}
	json_t *set = json_object(), *unset = json_array(), *scripts = json_array();
	if (o->unset)
		for (size_t i = 0; i < run.n; i++)
			say_source(&out, sh, run.v[i]);
	env_changes(&before, &after, sh, &out, set, unset);
	if (!o->unset)
		for (size_t i = 0; i < run.n; i++)
			say_source(&out, sh, run.v[i]);
	for (size_t i = 0; i < run.n; i++)
		json_array_append_new(scripts, json_string(run.v[i]));
	if (c->flags & CTX_JSON) {
		json_t *j =
		    json_pack("{s:s?,s:s,s:o,s:o,s:o}", "stack", o->unset ? NULL : name, "shell",
		              shname, "set", set, "unset", unset, "source", scripts);
		if (o->unset)
			json_object_set_new(j, "left", json_string(getenv("TFPROV_STACK") ?: ""));
		ev_data(c, "stack_env", j);
		json_decref(j);
	} else {
		json_decref(set);
		json_decref(unset);
		json_decref(scripts);
		fputs(out.buf ? out.buf : "", stdout);
	}
out:
	strvec_release(&before);
	strvec_release(&after);
	strvec_release(&run);
	strbuf_release(&out);
	manifest_free(m);
	free(name);
	return rc;
}

/* --- shell -------------------------------------------------------------- */

int cmd_shell(struct ctx *c, struct opts *o)
{
	struct manifest *m = NULL;
	char *name = NULL;
	if (load_stack(c, "shell", o->args.n ? o->args.v[0] : NULL, &name, &m) != 0)
		return 125;
	const char *sh = getenv("SHELL");
	if (sh == NULL || sh[0] != '/')
		sh = "/bin/sh";
	const char *base = strrchr(sh, '/') + 1;
	struct strvec scripts = STRVEC_INIT;
	size_t si = find_shell(base);
	conda_scripts(c, m, "activate", si < ARRAY_SIZE(shells) ? shells[si].suffix : ".sh",
	              &scripts);
	char *argv[5] = {(char *)sh, NULL, NULL, NULL, NULL};
	char rcfile[64] = "";
	if (scripts.n && strcmp(base, "bash") == 0) {
		/* bash runs them from an rc file of ours that reads the user's first. */
		struct strbuf rcb = STRBUF_INIT;
		strbuf_adds(&rcb, "[ -r ~/.bashrc ] && . ~/.bashrc\n");
		for (size_t i = 0; i < scripts.n; i++)
			say_source(&rcb, SH, scripts.v[i]);
		int fd = memfd_create("tfprov-shell-rc", 0);
		if (fd >= 0 && fs_write_all(fd, rcb.buf, rcb.len) == 0) {
			snprintf(rcfile, sizeof(rcfile), "/proc/self/fd/%d", fd);
			argv[1] = "--rcfile";
			argv[2] = rcfile;
			argv[3] = "-i";
		}
		strbuf_release(&rcb);
	}
	if (rcfile[0] == '\0')
		name_not_run("shell", &scripts,
		             "`eval \"$(tfprov env STACK)\"` in a POSIX shell or fish runs it");
	strvec_release(&scripts);
	fprintf(stderr, "tfprov shell: entering stack %s (%s); `exit` leaves it\n", name, sh);
	int rc = exec_in_stack(c, "shell", name, m, argv);
	free(name);
	manifest_free(m);
	return rc;
}

/* --- default and the login script -------------------------------------- */

char *cli_default_stack(struct ctx *c)
{
	char *v = NULL;
	if (c->st)
		state_setting_get(c->st, "default_stack", &v);
	if (v && v[0] == '\0') {
		free(v);
		v = NULL;
	}
	return v;
}

static int remove_login_script(struct ctx *c, const char *rel)
{
	char *host = ctx_host_path(c, rel);
	int rc = host && unlink(host) != 0 && errno != ENOENT ? -errno : 0;
	if (rc != 0)
		ev_log(c, EV_ERROR, "cannot remove the login script %s: %s", rel, strerror(-rc));
	free(host);
	return rc ? TF_EIO : 0;
}

/* Whether path is a regular 0644 file holding exactly data (nothing to write). */
static int login_script_holds(const char *path, const char *data, size_t len)
{
	struct stat st;
	char *buf = NULL;
	int same = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 07777) != 0644 ||
	    (size_t)st.st_size != len)
		goto out;
	buf = xmalloc(len + 1);
	same = read(fd, buf, len + 1) == (ssize_t)len && memcmp(buf, data, len) == 0;
out:
	free(buf);
	close(fd);
	return same;
}

/*
 * Makes the login script match the state: <profile_dir>/tfprov.sh of the
 * default stack sourcing its activate.sh, or no script when there is no
 * default. The state is written first and the script follows it, so a kill
 * between the two is put right by the next apply, default or destroy.
 */
int cli_login_sync(struct ctx *c, const struct manifest *applied)
{
	char *def = NULL, *old = NULL, *name = NULL;
	struct manifest *loaded = NULL;
	const struct manifest *m = NULL;
	int rc = 0;
	if (c->st == NULL)
		return 0;
	def = cli_default_stack(c);
	state_setting_get(c->st, "login_script", &old);
	/*
	 * The manifest just applied, when it is the default's: what was placed,
	 * even where a killed run left the recorded generation behind it.
	 */
	if (def && applied && strcmp(applied->stack.name.s, def) == 0) {
		m = applied;
		name = xstrdup(def);
	} else if (def && state_stack_id(c->st, def) != 0 &&
	           load_stack(c, "login", def, &name, &loaded) == 0) {
		m = loaded;
	}
	if (m) {
		char *rel = path_join(m->env.profile_dir.s, "tfprov.sh");
		char *act = stack_script_path(m, "activate.sh");
		struct strbuf sb = STRBUF_INIT;
		strbuf_addf(&sb,
		            "# Login shells enter the machine's default tfprov stack, %s.\n"
		            "# Generated by tfprov; do not edit: `tfprov default STACK` chooses "
		            "another,\n# `tfprov default --none` none. A shell already in a stack "
		            "stays in it.\n"
		            "if [ -z \"${TFPROV_STACK+x}\" ] && [ -r ",
		            name);
		sh_quote(&sb, act);
		strbuf_adds(&sb, " ]; then . ");
		sh_quote(&sb, act);
		strbuf_adds(&sb, "; fi\n");
		char *dir = ctx_host_dir(c, m->env.profile_dir.s), *host = ctx_host_path(c, rel);
		/* A run that changes nothing leaves the script as it is, mtime included. */
		int kept = host && login_script_holds(host, sb.buf, sb.len);
		int w = kept ? 0
		        : dir && host && mkdirs_at(AT_FDCWD, dir, 0755) == 0
		            ? fs_write_atomic(host, sb.buf, sb.len, 0644, 0)
		            : -EIO;
		if (w == 0 && !kept) {
			/* The rename made durable before the state names the new script. */
			int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (dfd < 0 || fsync(dfd) != 0)
				w = -errno;
			if (dfd >= 0)
				close(dfd);
		}
		if (w != 0) {
			ev_log(c, EV_ERROR, "cannot write the login script %s: %s", rel,
			       strerror(w < 0 ? -w : EIO));
			rc = TF_EIO;
		} else {
			if (old && strcmp(old, rel) != 0)
				rc = remove_login_script(c, old);
			if (rc == 0)
				rc = state_setting_set(c->st, "login_script", rel);
		}
		free(dir);
		free(host);
		free(rel);
		free(act);
		strbuf_release(&sb);
	} else if (old) {
		rc = remove_login_script(c, old);
		if (rc == 0)
			rc = state_setting_set(c->st, "login_script", NULL);
	}
	free(def);
	free(old);
	free(name);
	manifest_free(loaded);
	return rc;
}

int cli_set_default(struct ctx *c, const char *name, const struct manifest *applied)
{
	int rc = state_setting_set(c->st, "default_stack", name ? name : "");
	return rc ? rc : cli_login_sync(c, applied);
}

int cmd_default(struct ctx *c, struct opts *o)
{
	char *cur = cli_default_stack(c);
	int rc = 0;
	if (o->none && o->args.n) {
		fprintf(stderr, "tfprov default: STACK or --none, not both\n");
		rc = TF_EUSAGE;
	} else if (!o->none && o->args.n == 0) {
		if (c->flags & CTX_JSON) {
			json_t *j = json_pack("{s:s?}", "stack", cur);
			ev_data(c, "default_stack", j);
			json_decref(j);
		} else
			printf("%s\n", cur ? cur : "(none: login shells get no tfprov stack)");
	} else if (c->st == NULL && !o->none) {
		say_stacks(c, "default", "nothing to choose");
		rc = TF_EFAIL;
	} else if (o->none) {
		rc = c->st ? cli_set_default(c, NULL, NULL) : 0;
		if (rc == 0)
			ev_log(c, EV_INFO, "Login shells get no tfprov stack now%s%s%s.",
			       cur ? " (the default was " : "", cur ? cur : "", cur ? ")" : "");
	} else if (state_stack_id(c->st, o->args.v[0]) == 0) {
		char *what = xasprintf("no stack named '%s'", o->args.v[0]);
		say_stacks(c, "default", what);
		free(what);
		rc = TF_EFAIL;
	} else {
		rc = cli_set_default(c, o->args.v[0], NULL);
		if (rc == 0)
			ev_log(c, EV_INFO, "Login shells now enter stack %s%s%s%s.", o->args.v[0],
			       cur && strcmp(cur, o->args.v[0]) ? " (it was " : "",
			       cur && strcmp(cur, o->args.v[0]) ? cur : "",
			       cur && strcmp(cur, o->args.v[0]) ? ")" : "");
	}
	free(cur);
	return rc;
}

/* --- saying how to use a stack ------------------------------------------ */

void cli_stack_usage(struct ctx *c, const char *name, const struct manifest *m, json_t *o,
                     struct strbuf *line)
{
	char *def = cli_default_stack(c), *env = m && m->python.set ? stack_env_prefix(m) : NULL;
	char *root = strcmp(c->root, "/") ? xasprintf("--root %s ", c->root) : xstrdup("");
	char *cmd = xasprintf("tfprov %srun %s -- %s", root, name, env ? "python" : "CMD");
	int is_def = def && strcmp(def, name) == 0;
	if (o) {
		json_object_set_new(o, "env", env ? json_string(env) : json_null());
		json_object_set_new(o, "default", json_boolean(is_def));
		json_object_set_new(o, "run", json_string(cmd));
	}
	if (line) {
		if (env)
			strbuf_addf(line, "env %s; ", env);
		strbuf_addf(line, "use: %s%s", cmd,
		            is_def ? " (the default stack: login shells enter it)" : "");
	}
	free(def);
	free(env);
	free(root);
	free(cmd);
}
