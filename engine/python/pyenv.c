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
#include "pyenv_int.h"

#include "ctx.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "spawn.h"
#include "place.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char probe_src[] =
    "import sys\n"
    "try:\n"
    "    import ensurepip, venv\n"
    "    ok = 1\n"
    "except ImportError:\n"
    "    ok = 0\n"
    "print('%d.%d %d' % (sys.version_info[0], sys.version_info[1], ok))\n";

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

/* Asks a candidate for its X.Y; 0 and *ver (caller frees), *has_venv. */
static int probe_python(const char *path, char **ver, int *has_venv)
{
	char *argv[] = {(char *)path, "-I", "-c", (char *)probe_src, NULL};
	struct spawn_result r = {0};
	int rc = pyenv_run_python(NULL, argv, 30, &r);
	if (rc == 0 && r.status == 0 && r.out.buf) {
		char v[32];
		int ok = 0;
		if (sscanf(r.out.buf, "%31s %d", v, &ok) == 2) {
			*ver = xstrdup(v);
			*has_venv = ok;
		} else {
			rc = TF_EFAIL;
		}
	} else if (rc == 0) {
		rc = TF_EFAIL;
	}
	spawn_result_release(&r);
	return rc;
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

int pyenv_find_python(struct ctx *c, const char *version, const char *explicit_path, char **path,
                      char **errmsg)
{
	struct strvec cands = STRVEC_INIT, tried = STRVEC_INIT;
	char *name = xasprintf("python%s", version);
	char *no_venv = NULL;
	int rc = TF_EPRECOND;
	*path = NULL;

	if (explicit_path != NULL) {
		strvec_push(&cands, explicit_path);
	} else {
		char *w = which(name);
		if (w != NULL) {
			strvec_push(&cands, w);
			free(w);
		}
		strvec_pushf(&cands, "/usr/bin/%s", name);
		strvec_pushf(&cands, "/usr/local/bin/%s", name);
	}
	for (size_t i = 0; i < cands.n; i++) {
		char *ver = NULL;
		int has_venv = 0;
		if (access(cands.v[i], X_OK) != 0)
			continue;
		if (probe_python(cands.v[i], &ver, &has_venv) != 0) {
			strvec_pushf(&tried, "%s (does not run)", cands.v[i]);
			continue;
		}
		dlog(c, "python candidate %s is %s", cands.v[i], ver);
		if (strcmp(ver, version) != 0) {
			strvec_pushf(&tried, "%s (is %s)", cands.v[i], ver);
		} else if (!has_venv) {
			if (no_venv == NULL)
				no_venv = xstrdup(cands.v[i]);
			strvec_pushf(&tried, "%s (no venv/ensurepip module)", cands.v[i]);
		} else {
			*path = xstrdup(cands.v[i]);
			rc = 0;
			free(ver);
			goto out;
		}
		free(ver);
	}

	struct strbuf sb = STRBUF_INIT;
	if (no_venv != NULL) {
		strbuf_addf(
		    &sb,
		    "Python %s at %s cannot create virtual environments (no venv/ensurepip);"
		    " install it with `apt install python%s-venv`",
		    version, no_venv, version);
	} else {
		strbuf_addf(&sb, "no Python %s interpreter found", version);
		if (tried.n) {
			strbuf_adds(&sb, " (tried ");
			for (size_t i = 0; i < tried.n; i++)
				strbuf_addf(&sb, "%s%s", i ? ", " : "", tried.v[i]);
			strbuf_adds(&sb, ")");
		}
		strbuf_addf(&sb,
		            "; manager: venv needs python%s: install it (`apt install python%s "
		            "python%s-venv`, or `pyenv install %s`), set python.interpreter to its "
		            "path, or use manager: conda, which brings its own Python",
		            version, version, version, version);
	}
	*errmsg = strbuf_detach(&sb);
out:
	free(name);
	free(no_venv);
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
	char *want = NULL, *have = NULL, *py = NULL;
	int has_venv = 0, ok = 0;
	if (probe_python(python, &want, &has_venv) == 0 && (have = venv_version(prefix)) != NULL) {
		py = path_join(prefix, "bin/python");
		ok = strcmp(have, want) == 0 && access(py, X_OK) == 0;
	}
	free(want);
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

int venv_create(struct ctx *c, const char *python, const char *prefix, int *created, char **errmsg)
{
	int rc = 0;
	struct spawn_result r = {0};
	struct stat st;
	*created = 0;

	if (venv_reusable(python, prefix)) {
		dlog(c, "venv %s already exists for %s", prefix, python);
		return 0;
	}
	if (lstat(prefix, &st) == 0) {
		/* The caller moves an env it replaces aside first (txn_will_create). */
		*errmsg = xasprintf("%s exists and is not a venv of %s", prefix, python);
		return TF_ECONFLICT;
	}
	/* A venv records its own path (activate, script shebangs), so it is
	 * created at the final path; on failure the caller's txn removes it.
	 * The busy file (place.h) is the stdin of venv and of the pip that its
	 * ensurepip starts, so a recovery after a kill -9 waits for that pip. */
	int bfd = mkdir(prefix, 0755) != 0 ? -errno : pyenv_busy_hold(prefix);
	if (bfd < 0) {
		*errmsg = xasprintf("%s: cannot create: %s", prefix, strerror(-bfd));
		return TF_EIO;
	}
	char *argv[] = {(char *)python, "-I", "-m", "venv", (char *)prefix, NULL};
	rc = pyenv_run_python_in(c, argv, 600, bfd, &r);
	pyenv_busy_release(prefix, bfd);
	if (rc == 0 && r.status != 0) {
		rc = TF_EFAIL;
		*errmsg = xasprintf("%s -m venv %s failed (exit %d): %s", python, prefix, r.status,
		                    r.err.buf ? r.err.buf : "");
	} else if (rc != 0) {
		*errmsg =
		    xasprintf("%s -m venv: %s", python, r.errmsg ? r.errmsg : tf_strerror(rc));
	} else {
		*created = 1;
	}
	spawn_result_release(&r);
	return rc;
}
