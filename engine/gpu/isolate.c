/*
 * isolate.c - fork, run, wait with a deadline (see isolate.h).
 *
 * The deadline uses a pipe whose write end only the child holds: poll() on
 * the read end wakes up when the child ends in any way (the kernel closes the
 * pipe), so no SIGCHLD handler and no busy loop are needed. A child that
 * execs tfprov's own binary (isolate_exec) keeps that write end across the
 * exec, so the same deadline holds for it.
 */
#include "isolate.h"

#include "error.h"
#include "gpu.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void *isolate_shared_alloc(size_t size)
{
	void *p =
	    mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		tf_fatal("tfprov: out of memory mapping %zu shared bytes", size);
	}
	return p;
}

void isolate_shared_free(void *p, size_t size)
{
	if (p != NULL)
		munmap(p, size ? size : 1);
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000L + (t.tv_nsec - t0->tv_nsec) / 1000000L;
}

int isolate_shm_open(struct isolate_shm *m, size_t size)
{
	m->size = size ? size : 1;
	m->p = NULL;
	m->fd = memfd_create("tfprov-isolate", MFD_CLOEXEC);
	if (m->fd < 0)
		return TF_EFAIL;
	if (ftruncate(m->fd, (off_t)m->size) < 0) {
		close(m->fd);
		m->fd = -1;
		return TF_EFAIL;
	}
	m->p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	if (m->p == MAP_FAILED) {
		tf_fatal("tfprov: out of memory mapping %zu shared bytes", m->size);
	}
	return 0;
}

void isolate_shm_close(struct isolate_shm *m)
{
	if (m->p != NULL)
		munmap(m->p, m->size);
	if (m->fd >= 0)
		close(m->fd);
	m->p = NULL;
	m->fd = -1;
}

/* In the forked child, before anything of the caller's runs: the exec'd
 * binary needs the deadline pipe and the shared file across the exec. Only
 * returns when the exec failed. */
static void child_exec(char *const *xargv, int wfd, int shm_fd)
{
	if (fcntl(wfd, F_SETFD, 0) < 0 || fcntl(shm_fd, F_SETFD, 0) < 0)
		return;
	execv("/proc/self/exe", xargv);
}

/* Polls the pipe until the child closes it or the deadline passes, then reaps. */
static int wait_child(pid_t pid, int rfd, int timeout_ms, struct isolate_status *st)
{
	struct timespec t0;
	struct rusage ru;
	int status = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pfd = {.fd = rfd, .events = POLLIN};
		int wait = -1, r;
		char c;

		if (timeout_ms > 0) {
			long left = timeout_ms - elapsed_ms(&t0);
			if (left <= 0) {
				kill(pid, SIGKILL);
				st->timed_out = 1;
				break;
			}
			wait = (int)left;
		}
		r = poll(&pfd, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			kill(pid, SIGKILL);
			break;
		}
		if (r == 0)
			continue; /* deadline check at the top */
		/* Readable: EOF when the child is gone; drain stray bytes otherwise. */
		if (read(rfd, &c, 1) <= 0)
			break;
	}
	while (wait4(pid, &status, 0, &ru) < 0) {
		if (errno != EINTR)
			return TF_EFAIL;
	}
	st->maxrss_kib = ru.ru_maxrss;
	if (WIFEXITED(status)) {
		st->exited = 1;
		st->exit_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		st->signal = WTERMSIG(status);
	}
	return 0;
}

/* xargv NULL: the child calls fn; otherwise it execs xargv first and calls
 * fn only when the exec fails. */
static int run_child(int (*fn)(void *arg, void *shared), void *arg, void *shared,
                     char *const *xargv, int shm_fd, int timeout_ms, struct isolate_status *st)
{
	int fds[2] = {-1, -1};
	pid_t pid;
	int ret;

	memset(st, 0, sizeof(*st));
	if (pipe2(fds, O_CLOEXEC) < 0)
		return TF_EFAIL;
	/* The child inherits our buffered output; flush so it is not written twice. */
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return TF_EFAIL;
	}
	if (pid == 0) {
		close(fds[0]);
		if (xargv != NULL)
			child_exec(xargv, fds[1], shm_fd);
		_exit(fn(arg, shared) & 0xff);
	}
	close(fds[1]);
	ret = wait_child(pid, fds[0], timeout_ms, st);
	close(fds[0]);
	return ret;
}

int isolate_run(int (*fn)(void *arg, void *shared), void *arg, void *shared, int timeout_ms,
                struct isolate_status *st)
{
	return run_child(fn, arg, shared, NULL, -1, timeout_ms, st);
}

/* Set by gpu_isolated_main: this binary answers GPU_ISOLATED_ARG, so
 * /proc/self/exe may be exec'd as the child (a test tool linking this
 * library without the call gets forked children as before). */
static int exec_ok;

int isolate_exec(const char *entry, const char *const *args, size_t nargs,
                 int (*fn)(void *arg, void *shared), void *arg, struct isolate_shm *m,
                 int timeout_ms, struct isolate_status *st)
{
	char fd[16];
	const char **xargv;
	int ret;

	if (!exec_ok)
		return run_child(fn, arg, m->p, NULL, -1, timeout_ms, st);
	xargv = xcalloc(nargs + 5, sizeof(*xargv));

	/* Built before the fork: the child of a threaded process may only make
	 * async-signal-safe calls until it execs. */
	snprintf(fd, sizeof(fd), "%d", m->fd);
	xargv[0] = "tfprov";
	xargv[1] = GPU_ISOLATED_ARG;
	xargv[2] = entry;
	xargv[3] = fd;
	for (size_t i = 0; i < nargs; i++)
		xargv[4 + i] = args[i];
	ret = run_child(fn, arg, m->p, (char *const *)xargv, m->fd, timeout_ms, st);
	free(xargv);
	return ret;
}

static void isolated_child(int argc, char **argv)
{
	struct stat sb;
	char *end;
	void *p;
	long fd;

	/* argv: ENTRY FD ARGS... (isolate_exec's order). */
	if (argc < 2)
		_exit(64);
	fd = strtol(argv[1], &end, 10);
	if (*end != '\0' || fd < 0 || fd > 65535 || fstat((int)fd, &sb) < 0 || sb.st_size <= 0)
		_exit(64);
	p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
	if (p == MAP_FAILED)
		_exit(70);
	close((int)fd);
	if (strcmp(argv[0], "libcheck") == 0)
		_exit(libcheck_child_main(argc - 2, argv + 2, p, (size_t)sb.st_size) & 0xff);
	if (strcmp(argv[0], "convprobe") == 0)
		_exit(convprobe_child_main(argc - 2, argv + 2, p, (size_t)sb.st_size) & 0xff);
	_exit(64);
}

void gpu_isolated_main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], GPU_ISOLATED_ARG) == 0)
		isolated_child(argc - 2, argv + 2);
	exec_ok = 1;
}

void isolate_describe(const struct isolate_status *st, int timeout_ms, char *buf, size_t n)
{
	if (st->timed_out)
		snprintf(buf, n, "timed out after %d ms", timeout_ms);
	else if (st->signal)
		snprintf(buf, n, "killed by signal %d (%s)", st->signal, strsignal(st->signal));
	else
		snprintf(buf, n, "exit %d", st->exit_code);
}
