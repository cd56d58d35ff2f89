/*
 * pyenv.c - the interpreter and the venv: finding a Python of the manifest's
 * X.Y, creating (or keeping) the venv at the env's path, and running the
 * env's interpreter with the hardened environment (python.h's pyenv invariants).
 * It owns the env's busy file (place.h, PLACE_BUSY_NAME), which the venv
 * module and pip hold as their stdin while they change the env in place.
 *
 * Its neighbours: pipdrv.c drives pip (install, list, lock), wheelhouse.c
 * installs a verified wheelhouse without pip (wheel.c); pyenv_int.h is what
 * this file shares with pipdrv.c.
 */
#include "python.h"
#include "python_int.h"
#include "pyenv_int.h"

#include "artifact.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "spawn.h"
#include "place.h"
#include "wheel.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* X.Y, whether it can make venvs, and the real file it runs from (through
 * a shim that execs it, and symlinks). */
static const char probe_src[] =
    "import os, sys\n"
    "try:\n"
    "    import ensurepip, venv\n"
    "    ok = 1\n"
    "except ImportError:\n"
    "    ok = 0\n"
    "print('%d.%d %d %s' % (sys.version_info[0], sys.version_info[1], ok,\n"
    "                       os.path.realpath(sys.executable)))\n";

int pyenv_run_python_in(struct ctx *c, char *const *argv, double timeout_s, int stdin_fd,
                        struct spawn_result *r)
{
	struct strvec env = STRVEC_INIT;
	spawn_env_base(&env);
	spawn_env_python(&env);
	struct spawn_opts o = {
	    .argv = argv,
	    .envp = env.v,
	    .stdin_fd = stdin_fd,
	    .timeout_s = timeout_s,
	    .flags = SPAWN_KILL_ON_INTR,
	};
	if (c != NULL) {
		struct strbuf cmd = STRBUF_INIT;
		for (size_t i = 0; argv[i]; i++)
			strbuf_addf(&cmd, "%s%s", i ? " " : "", argv[i]);
		dlog(c, "run: %s", cmd.buf);
		strbuf_release(&cmd);
	}
	int rc = spawn_run(&o, r);
	strvec_release(&env);
	return rc;
}

int pyenv_run_python(struct ctx *c, char *const *argv, double timeout_s, struct spawn_result *r)
{
	return pyenv_run_python_in(c, argv, timeout_s, 0, r);
}

/*
 * What probe_python learnt of each interpreter in this run: the plan's
 * precheck, the pyenv step, byte-compiling ahead and venv_reusable all ask,
 * and an interpreter behind a pyenv shim takes a tenth of a second to answer.
 */
static struct probed {
	char *path, *ver, *real;
	int has_venv;
} * probed;
static size_t nprobed;
static pthread_mutex_t probed_mu = PTHREAD_MUTEX_INITIALIZER;

struct probe {
	char *ver;  /* "3.11" */
	char *real; /* the file it runs from */
	int has_venv;
};

static void probe_release(struct probe *pr)
{
	free(pr->ver);
	free(pr->real);
}

static int probe_run(const char *path, struct probe *pr);

/* Asks a candidate what it is (once a run); 0 and *pr (probe_release). */
static int probe_python(const char *path, struct probe *pr)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&probed_mu);
	for (size_t i = 0; i < nprobed && rc != 0; i++)
		if (strcmp(probed[i].path, path) == 0) {
			pr->ver = xstrdup(probed[i].ver);
			pr->real = xstrdup(probed[i].real);
			pr->has_venv = probed[i].has_venv;
			rc = 0;
		}
	pthread_mutex_unlock(&probed_mu);
	if (rc == 0 || (rc = probe_run(path, pr)) != 0)
		return rc;
	pthread_mutex_lock(&probed_mu);
	probed = xrealloc(probed, (nprobed + 1) * sizeof(*probed));
	probed[nprobed++] =
	    (struct probed){xstrdup(path), xstrdup(pr->ver), xstrdup(pr->real), pr->has_venv};
	pthread_mutex_unlock(&probed_mu);
	return 0;
}

static int probe_run(const char *path, struct probe *pr)
{
	char *argv[] = {(char *)path, "-I", "-c", (char *)probe_src, NULL};
	struct spawn_result r = {0};
	int rc = pyenv_run_python(NULL, argv, 30, &r);
	memset(pr, 0, sizeof(*pr));
	if (rc == 0 && r.status == 0 && r.out.buf) {
		char v[32];
		int ok = 0, at = 0;
		if (sscanf(r.out.buf, "%31s %d %n", v, &ok, &at) == 2 && at > 0 &&
		    r.out.buf[at] == '/') {
			pr->ver = xstrdup(v);
			pr->has_venv = ok;
			pr->real = xstrndup(r.out.buf + at, strcspn(r.out.buf + at, "\n"));
		} else {
			rc = TF_EFAIL;
		}
	} else if (rc == 0) {
		rc = TF_EFAIL;
	}
	spawn_result_release(&r);
	return rc;
}

/*
 * Whether every user can run `real`: each directory from / down searchable
 * by others and the file executable by others. 1, or 0 with why naming the
 * first one that is not.
 */
static int runnable_by_all(const char *real, struct why *why)
{
	char *p = xstrdup(real);
	struct stat st;
	int ok = 1;
	for (char *s = p + 1;; s++) {
		char c = *s;
		if (c != '/' && c != '\0')
			continue;
		*s = '\0';
		if (stat(p, &st) != 0) {
			why_fail(why, TF_EPRECOND, "%s cannot be read: %s", p, strerror(errno));
			ok = 0;
		} else if ((st.st_mode & S_IXOTH) == 0) {
			why_fail(why, TF_EPRECOND, "%s is mode %04o", p,
			         (unsigned)(st.st_mode & 07777));
			ok = 0;
		}
		*s = c;
		if (!ok || c == '\0')
			break;
	}
	free(p);
	return ok;
}

int pyenv_for_all_users(const char *host_prefix)
{
	const char *home = getenv("HOME");
	size_t n = home ? strlen(home) : 0;
	while (n > 1 && home[n - 1] == '/')
		n--;
	if (n <= 1 || host_prefix == NULL)
		return 1;
	return !(strncmp(host_prefix, home, n) == 0 &&
	         (host_prefix[n] == '/' || host_prefix[n] == '\0'));
}

static char *which(const char *name)
{
	const char *path = getenv("PATH");
	if (path == NULL)
		return NULL;
	char *copy = xstrdup(path), *save = NULL, *found = NULL;
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char *cand = path_join(*d ? d : ".", name);
		if (access(cand, X_OK) == 0) {
			found = cand;
			break;
		}
		free(cand);
	}
	free(copy);
	return found;
}

/*
 * Why no interpreter of `version` was taken (malloc'd): one every user
 * cannot run (locked), one without venv (no_venv), or none at all, naming
 * what was tried and how to fix it.
 */
static char *no_python_why(const char *version, const char *locked, const char *no_venv,
                           const struct strvec *tried)
{
	struct strbuf sb = STRBUF_INIT;
	if (locked != NULL && no_venv == NULL) {
		strbuf_addf(&sb,
		            "no Python %s that every user can run: %s; the stack is for all users "
		            "and its venv would point there, so every other user would get "
		            "\"Permission denied\" (tried ",
		            version, locked);
		for (size_t i = 0; i < tried->n; i++)
			strbuf_addf(&sb, "%s%s", i ? ", " : "", tried->v[i]);
		strbuf_addf(
		    &sb,
		    "); install python%s for everyone (`apt install python%s python%s-venv`) "
		    "or set python.interpreter to a path every user can run",
		    version, version, version);
	} else if (no_venv != NULL) {
		strbuf_addf(
		    &sb,
		    "Python %s at %s cannot create virtual environments (no venv/ensurepip);"
		    " install it with `apt install python%s-venv`",
		    version, no_venv, version);
	} else {
		strbuf_addf(&sb, "no Python %s interpreter found", version);
		if (tried->n) {
			strbuf_adds(&sb, " (tried ");
			for (size_t i = 0; i < tried->n; i++)
				strbuf_addf(&sb, "%s%s", i ? ", " : "", tried->v[i]);
			strbuf_adds(&sb, ")");
		}
		strbuf_addf(&sb,
		            "; manager: venv needs python%s: install it (`apt install python%s "
		            "python%s-venv`, or `pyenv install %s`), set python.interpreter to its "
		            "path, or use manager: conda, which brings its own Python",
		            version, version, version, version);
	}
	return strbuf_detach(&sb);
}

int pyenv_find_python(struct ctx *c, const char *version, const char *explicit_path, int shared,
                      char **path, struct why *why)
{
	struct strvec cands = STRVEC_INIT, tried = STRVEC_INIT;
	char *name = xasprintf("python%s", version);
	char *no_venv = NULL, *locked = NULL;
	int rc = TF_EPRECOND;
	*path = NULL;

	if (explicit_path != NULL) {
		strvec_push(&cands, explicit_path);
	} else {
		/* The system's interpreter first: it is every user's, and apt updates it. */
		const char *sys = getenv("TFPROV_SYSTEM_PYTHON_DIRS"); /* tests only */
		char *dirs = xstrdup(sys ? sys : "/usr/bin:/usr/local/bin"), *save = NULL;
		for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
			strvec_pushf(&cands, "%s/%s", d, name);
		free(dirs);
		char *w = which(name);
		if (w != NULL) {
			strvec_push(&cands, w);
			free(w);
		}
	}
	for (size_t i = 0; i < cands.n; i++) {
		struct probe pr = {0};
		struct why reason = {0};
		if (access(cands.v[i], X_OK) != 0)
			continue;
		if (probe_python(cands.v[i], &pr) != 0) {
			strvec_pushf(&tried, "%s (does not run)", cands.v[i]);
			continue;
		}
		dlog(c, "python candidate %s is %s at %s", cands.v[i], pr.ver, pr.real);
		if (strcmp(pr.ver, version) != 0) {
			strvec_pushf(&tried, "%s (is %s)", cands.v[i], pr.ver);
		} else if (!pr.has_venv) {
			if (no_venv == NULL)
				no_venv = xstrdup(cands.v[i]);
			strvec_pushf(&tried, "%s (no venv/ensurepip module)", cands.v[i]);
		} else if (explicit_path == NULL && shared && !runnable_by_all(pr.real, &reason)) {
			char *t = strcmp(pr.real, cands.v[i]) == 0
			              ? xasprintf("%s", cands.v[i])
			              : xasprintf("%s, which runs %s", cands.v[i], pr.real);
			if (locked == NULL)
				locked =
				    xasprintf("%s: other users cannot run it (%s)", t, reason.msg);
			strvec_pushf(&tried, "%s (other users cannot run it: %s)", t, reason.msg);
			free(t);
		} else {
			/* Unset: the real file, so the venv never points through a shim. */
			*path = xstrdup(explicit_path ? cands.v[i] : pr.real);
			rc = 0;
		}
		why_clear(&reason);
		probe_release(&pr);
		if (rc == 0)
			goto out;
	}

	char *m = no_python_why(version, locked, no_venv, &tried);
	why_fail(why, rc, "%s", m);
	free(m);
out:
	free(name);
	free(no_venv);
	free(locked);
	strvec_release(&cands);
	strvec_release(&tried);
	return rc;
}

/* X.Y of an existing venv from pyvenv.cfg ("version = 3.11.2"), or NULL. */
static char *venv_version(const char *prefix)
{
	char *cfg = path_join(prefix, "pyvenv.cfg"), *text = NULL, *ver = NULL;
	size_t len = 0;
	if (read_file_at(AT_FDCWD, cfg, 1 << 16, &text, &len) == 0) {
		for (char *line = text; line && *line;) {
			char *nl = strchr(line, '\n');
			if (nl)
				*nl = '\0';
			int maj, min;
			if ((sscanf(line, "version = %d.%d", &maj, &min) == 2 ||
			     sscanf(line, "version_info = %d.%d", &maj, &min) == 2) &&
			    ver == NULL)
				ver = xasprintf("%d.%d", maj, min);
			line = nl ? nl + 1 : NULL;
		}
	}
	free(text);
	free(cfg);
	return ver;
}

int venv_reusable(const char *python, const char *prefix)
{
	char *have = NULL, *py = NULL;
	struct probe pr = {0};
	int ok = 0;
	if (probe_python(python, &pr) == 0 && (have = venv_version(prefix)) != NULL) {
		py = path_join(prefix, "bin/python");
		ok = strcmp(have, pr.ver) == 0 && access(py, X_OK) == 0;
	}
	probe_release(&pr);
	free(have);
	free(py);
	return ok;
}

int pyenv_busy_hold(const char *prefix)
{
	char *busy = path_join(prefix, PLACE_BUSY_NAME);
	int fd = open(busy, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	int e = fd < 0 ? errno : 0;
	free(busy);
	if (fd >= 0 && flock(fd, LOCK_SH) != 0) {
		e = errno;
		close(fd);
		fd = -1;
	}
	return fd >= 0 ? fd : -e;
}

void pyenv_busy_release(const char *prefix, int fd)
{
	if (fd < 0)
		return;
	char *busy = path_join(prefix, PLACE_BUSY_NAME);
	unlink(busy);
	free(busy);
	close(fd);
}

/*
 * The wheels ensurepip would install into a venv of `python` (pip, and
 * setuptools before 3.12), copied into `out`: ensurepip's own choice, read
 * by letting it prepare its install and taking the wheels it hands to pip
 * (on the sys.path it gives pip, or in its --find-links directory) instead
 * of running pip. One name per line on stdout.
 */
static const char bundled_src[] =
    "import ensurepip, os, shutil, sys\n"
    "# Debian's ensurepip refuses to run outside a virtual environment; this\n"
    "# only asks which wheels it would install, and installs nothing.\n"
    "sys.real_prefix = getattr(sys, 'real_prefix', sys.prefix)\n"
    "out, got = sys.argv[1], []\n"
    "def grab(args, additional_paths=None):\n"
    "    found = [p for p in (additional_paths or []) if p.endswith('.whl')]\n"
    "    for i, a in enumerate(args[:-1]):\n"
    "        if a == '--find-links':\n"
    "            found += [os.path.join(args[i + 1], f) for f in sorted(os.listdir(args[i + 1]))\n"
    "                      if f.endswith('.whl')]\n"
    "    for p in found:\n"
    "        if os.path.basename(p) not in got:\n"
    "            shutil.copy(p, out)\n"
    "            got.append(os.path.basename(p))\n"
    "    return 0\n"
    "ensurepip._run_pip = grab\n"
    "ensurepip._bootstrap(upgrade=True, default_pip=True)\n"
    "print('\\n'.join(got))\n";

/*
 * Runs bundled_src with `python` into the directory dir: the names of the
 * wheels it copied there (wheel file names only) into *names.
 */
static void bundled_wheels(struct ctx *c, const char *python, const char *dir, struct strvec *names,
                           struct spawn_result *r)
{
	char *argv[] = {(char *)python, "-I", "-c", (char *)bundled_src, (char *)dir, NULL};
	if (pyenv_run_python(c, argv, 120, r) == 0 && r->status == 0 && r->out.buf)
		for (char *sv = NULL, *t = strtok_r(r->out.buf, "\n", &sv); t;
		     t = strtok_r(NULL, "\n", &sv))
			if (wheel_name_ok(t) && strchr(t, '/') == NULL)
				strvec_push(names, t);
}

/* Removes what a killed run left of bundled-XXXXXX in the cache's partial/
 * (a live one exists for a fraction of a second: an hour old is dead). */
static void bundled_sweep(const char *partial)
{
	DIR *d = opendir(partial);
	struct dirent *de;
	time_t now = time(NULL);
	while (d && (de = readdir(d)) != NULL) {
		struct stat st;
		char *p = path_join(partial, de->d_name);
		if (strncmp(de->d_name, "bundled-", 8) == 0 && lstat(p, &st) == 0 &&
		    S_ISDIR(st.st_mode) && st.st_mtime < now - 3600)
			fs_rmtree(p);
		free(p);
	}
	if (d)
		closedir(d);
}

int venv_bundled_artifacts(struct ctx *c, const char *python, struct artset *out)
{
	struct spawn_result r = {0};
	struct strvec names = STRVEC_INIT;
	if (c->cache_dir == NULL || cache_init(c->cache_dir, NULL) < 0)
		return 0;
	char *partial = path_join(c->cache_dir, "partial");
	bundled_sweep(partial);
	char *dir = xasprintf("%s/bundled-XXXXXX", partial);
	free(partial);
	if (mkdtemp(dir) == NULL) {
		free(dir);
		return 0;
	}
	bundled_wheels(c, python, dir, &names, &r);
	for (size_t i = 0; i < names.n; i++) {
		char *path = path_join(dir, names.v[i]), *final = NULL, hex[65];
		int64_t size = 0;
		if (sha256_file(path, hex, &size) == 0 &&
		    cache_commit(c->cache_dir, hex, path, &final) == 0) {
			/* Named by the wheel's file name (the installer finds the tree by
			 * it, its size and its sha256); the cache holds it already, so
			 * the URL is never fetched. */
			char *url = xasprintf("file://%s", path);
			artset_add(out, names.v[i], url, hex, size, 0);
			artset_mark_python(out, out->n - 1, ART_WHEEL);
			free(url);
		}
		free(final);
		free(path);
	}
	if (names.n)
		dlog(c, "venv: %zu bundled wheels of %s into the download cache, to unpack ahead",
		     names.n, python);
	fs_rmtree(dir);
	strvec_release(&names);
	spawn_result_release(&r);
	free(dir);
	return 0;
}

/*
 * pip (and what else ensurepip installs) into the fresh venv at env_path,
 * by the native installer from the interpreter's own bundled wheels; 1 when
 * it declined (the interpreter does not say which wheels: ensurepip then
 * runs as venv would run it), 0 when installed, or an error with why.
 */
static int venv_pip_native(struct ctx *c, const char *python, const char *exec_cmd,
                           const char *host, const char *env_path, struct artset *ahead,
                           struct why *why)
{
	char *dir = path_join(host, ".tfprov-bundled");
	struct spawn_result r = {0};
	struct strvec names = STRVEC_INIT;
	int rc = 1;
	if (mkdir(dir, 0700) != 0) {
		free(dir);
		return 1;
	}
	/* The venv's own interpreter, as venv runs ensurepip. */
	bundled_wheels(c, exec_cmd, dir, &names, &r);
	if (names.n > 0) {
		struct wheel_src *src = xcalloc(names.n, sizeof(*src));
		for (size_t i = 0; i < names.n; i++) {
			char *p = path_join(dir, names.v[i]);
			free(names.v[i]);
			names.v[i] = p;
			src[i].path = p;
			src[i].ahead = wheel_ahead_art(ahead, p);
		}
		struct wheel_stats st;
		rc = wheel_install_fresh(c, env_path, src, names.n, exec_cmd, &st, why);
		if (rc == 0)
			dlog(c, "venv: %zu bundled wheels of %s installed natively (%zu files)",
			     st.installed, python, st.files);
		free(src);
	} else {
		dlog(c, "venv: %s does not name its bundled wheels (%s): ensurepip installs pip",
		     python,
		     r.err.buf   ? r.err.buf
		     : r.why.msg ? r.why.msg
		                 : "no output");
	}
	fs_rmtree(dir);
	strvec_release(&names);
	spawn_result_release(&r);
	free(dir);
	return rc;
}

/*
 * The venv made as `python -m venv` makes it (symlinks on POSIX, with_pip,
 * so that pyvenv.cfg's `command` line is that one too), except that its
 * step that runs ensurepip (_setup_pip) does nothing; venv's documented
 * post_setup hook prints the interpreter venv would run ensurepip with
 * (pip's scripts name it).
 */
static const char venv_src[] = "import os, sys, venv\n"
                               "class B(venv.EnvBuilder):\n"
                               "    def _setup_pip(self, context):\n"
                               "        pass\n"
                               "    def post_setup(self, context):\n"
                               "        print(getattr(context, 'env_exec_cmd', context.env_exe))\n"
                               "B(with_pip=True, symlinks=os.name != 'nt').create(sys.argv[1])\n";

/* Runs argv with the env's busy file as stdin; its stdout into *out when out. */
static int run_busy(struct ctx *c, const char *host, char *const *argv, char **out, struct why *why)
{
	struct spawn_result r = {0};
	int bfd = pyenv_busy_hold(host);
	if (bfd < 0)
		return why_fail(why, TF_EIO, "%s: cannot create: %s", host, strerror(-bfd));
	int rc = pyenv_run_python_in(c, argv, 600, bfd, &r);
	pyenv_busy_release(host, bfd);
	if (rc == 0 && r.status != 0) {
		rc = why_fail(why, TF_EFAIL, "%s %s %s failed (exit %d): %s", argv[0], argv[2],
		              argv[3], r.status, r.err.buf ? r.err.buf : "");
	} else if (rc != 0) {
		why_fail(why, rc, "%s %s %s: %s", argv[0], argv[2], argv[3], why_text(&r.why));
	} else if (out != NULL) {
		*out =
		    xstrndup(r.out.buf ? r.out.buf : "", strcspn(r.out.buf ? r.out.buf : "", "\n"));
	}
	spawn_result_release(&r);
	return rc;
}

/* venv_create; with env_path (root-relative), pip goes in natively. */
static int make_venv(struct ctx *c, const char *python, const char *prefix, const char *env_path,
                     struct artset *ahead, int *created, struct why *why)
{
	struct stat st;
	*created = 0;

	if (venv_reusable(python, prefix)) {
		dlog(c, "venv %s already exists for %s", prefix, python);
		return 0;
	}
	if (lstat(prefix, &st) == 0) {
		/* The caller moves an env it replaces aside first (txn_will_create). */
		return why_fail(why, TF_ECONFLICT, "%s exists and is not a venv of %s", prefix,
		                python);
	}
	/* A venv records its own path (activate, script shebangs), so it is
	 * created at the final path; on failure the caller's txn removes it.
	 * The busy file (place.h) is the stdin of venv and of the pip that its
	 * ensurepip starts, so a recovery after a kill -9 waits for that pip. */
	if (mkdir(prefix, 0755) != 0)
		return why_fail(why, TF_EIO, "%s: cannot create: %s", prefix, strerror(errno));
	char *plain[] = {(char *)python, "-I", "-m", "venv", (char *)prefix, NULL};
	char *bare[] = {(char *)python, "-I", "-c", (char *)venv_src, (char *)prefix, NULL};
	char *exec_cmd = NULL;
	int rc = run_busy(c, prefix, env_path ? bare : plain, env_path ? &exec_cmd : NULL, why);
	size_t pl = strlen(prefix);
	if (rc == 0 && env_path &&
	    !(exec_cmd && strncmp(exec_cmd, prefix, pl) == 0 && exec_cmd[pl] == '/' &&
	      access(exec_cmd, X_OK) == 0)) {
		/* Not an interpreter of the env: pip's scripts name bin/python. */
		free(exec_cmd);
		exec_cmd = path_join(prefix, "bin/python");
	}
	if (rc == 0 && env_path &&
	    (rc = venv_pip_native(c, python, exec_cmd, prefix, env_path, ahead, why)) == 1) {
		/* What venv itself runs after --without-pip would not have. */
		char *py = path_join(prefix, "bin/python");
		char *ens[] = {py, "-I", "-m", "ensurepip", "--upgrade", "--default-pip", NULL};
		rc = run_busy(c, prefix, ens, NULL, why);
		free(py);
	}
	free(exec_cmd);
	if (rc == 0)
		*created = 1;
	return rc;
}

int venv_create(struct ctx *c, const char *python, const char *prefix, int *created,
                struct why *why)
{
	return why_code(why, make_venv(c, python, prefix, NULL, NULL, created, why));
}

int venv_create_at(struct ctx *c, const char *python, const char *env_path, struct artset *ahead,
                   int *created, struct why *why)
{
	char *host = ctx_host_path(c, env_path);
	int rc = make_venv(c, python, host, env_path, ahead, created, why);
	free(host);
	return why_code(why, rc);
}
