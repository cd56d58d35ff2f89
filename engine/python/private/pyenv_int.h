/*
 * pyenv_int.h - private to the Python env's files: pyenv.c (the interpreter
 * and the venv) and pipdrv.c (the pip driver) share the hardened runner and
 * the env's busy file through it; wheelhouse.c (the native wheelhouse) needs
 * none of it. Code outside them includes python.h, never this file.
 */
#ifndef TFPROV_PYENV_INT_H
#define TFPROV_PYENV_INT_H

#include "event.h"

struct ctx;
struct spawn_result;

/* Debug log only when a run context exists (the core never prints). */
#define dlog(c, ...)                                                                               \
	do {                                                                                       \
		if ((c) != NULL)                                                                   \
			ev_log((c), EV_DEBUG, __VA_ARGS__);                                        \
	} while (0)

/* pyenv_run_python with stdin_fd as the child's stdin (0: /dev/null). */
int pyenv_run_python_in(struct ctx *c, char *const *argv, double timeout_s, int stdin_fd,
                        struct spawn_result *r);

/*
 * Creates prefix/PLACE_BUSY_NAME (place.h) and holds a shared flock on it:
 * the fd, given as stdin to the programs that change the tree in place, keeps
 * the lock while any of them (or of their children) lives. The fd, or -errno.
 */
int pyenv_busy_hold(const char *prefix);
/* Releases pyenv_busy_hold's lock and removes the file. */
void pyenv_busy_release(const char *prefix, int fd);

#endif
