/*
 * spawn.h - run a child process from an argv, never through a shell.
 *
 * Invariants:
 *  - The child's environment is exactly o->envp (a NULL-terminated list); it
 *    never inherits the parent's environ implicitly. spawn_env_base() builds
 *    the usual clean starting set; spawn_env_python() hardens it for pip.
 *  - stdin is /dev/null unless o->stdin_path names a file or o->stdin_fd is given.
 *  - stdout and stderr are captured into bounded buffers; when a stream
 *    exceeds o->max_output the oldest bytes are dropped (the tail, where
 *    tools print their errors, is kept) and *_truncated is set.
 *  - SIGINT safety: the child runs in its own process group, so a terminal
 *    ^C reaches only tfprov. When tf_interrupted becomes set, the child is
 *    left to finish its atomic unit (default) or, with SPAWN_KILL_ON_INTR,
 *    sent SIGTERM (then SIGKILL after a grace period). A timeout does the
 *    same. The child is always reaped before spawn_run() returns.
 *
 * Ownership: the caller owns opts and everything it points to; the result's
 * buffers belong to the result and are freed by spawn_result_release().
 */
#ifndef TFPROV_SPAWN_H
#define TFPROV_SPAWN_H

#include <stddef.h>

#include "error.h"
#include "util.h"

enum spawn_flags {
	SPAWN_KILL_ON_INTR = 1 << 0,   /* terminate the child when tf_interrupted */
	SPAWN_MERGE_STDERR = 1 << 1,   /* stderr goes into the stdout buffer */
	SPAWN_INHERIT_OUTPUT = 1 << 2, /* no capture: child writes to our stdout/stderr */
};

struct spawn_opts {
	char *const *argv;      /* argv[0]: a path, or a name searched in envp's PATH */
	char *const *envp;      /* the complete environment; NULL means empty */
	const char *cwd;        /* NULL: inherit */
	const char *stdin_path; /* NULL: /dev/null */
	int stdin_fd;           /* > 0: the child's stdin instead (a pipe or socket the
	                         * caller writes to; the caller keeps and closes it) */
	size_t max_output;      /* per stream, bytes; 0: 4 MiB */
	double timeout_s;       /* 0: none */
	unsigned flags;         /* enum spawn_flags */
	/* Optional: called with each chunk of output as it arrives (stream 1 or 2). */
	void (*on_output)(void *arg, int stream, const char *data, size_t n);
	void *arg;
};

struct spawn_result {
	int status;      /* exit code, or 128 + signal number */
	int term_sig;    /* the signal that ended the child, or 0 */
	int timed_out;   /* killed because of opts.timeout_s */
	int interrupted; /* killed because of tf_interrupted */
	struct strbuf out, err;
	int out_truncated, err_truncated;
	double wall_s;
	struct why why; /* why the child could not be started (TF_EFAIL), or TF_EINTR */
};

/*
 * Runs the child to completion. Returns 0 when it ran (whatever its exit
 * status: look at r->status), TF_EFAIL when it could not be started
 * (r->why says why), TF_EINTR when it was killed for tf_interrupted.
 * r must be zero-initialised (or released) before the call.
 */
int spawn_run(const struct spawn_opts *o, struct spawn_result *r);
void spawn_result_release(struct spawn_result *r);

/* Adds the clean base environment: PATH, HOME, TMPDIR, LANG/LC_ALL=C.UTF-8,
 * proxies and TLS trust variables copied from ours when set. */
void spawn_env_base(struct strvec *env);
/* Sets (replacing) NAME=value. */
void spawn_env_set(struct strvec *env, const char *name, const char *value);
/* Removes NAME, or every variable starting with NAME when it ends in '*'. */
void spawn_env_unset(struct strvec *env, const char *pattern);
/* Copies NAME from our own environment when it is set there. */
void spawn_env_inherit(struct strvec *env, const char *name);
/* Value of NAME in env, or NULL. */
const char *spawn_env_get(const struct strvec *env, const char *name);
/*
 * Hardens env for running Python and pip: removes every PIP_* and PYTHON*
 * variable, then sets PIP_CONFIG_FILE=/dev/null (no pip.conf at any level),
 * PIP_DISABLE_PIP_VERSION_CHECK=1, PIP_NO_INPUT=1, PYTHONNOUSERSITE=1 and
 * PYTHONDONTWRITEBYTECODE unset. Callers still pass --isolated to pip.
 */
void spawn_env_python(struct strvec *env);

#endif
