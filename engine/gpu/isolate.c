/*
 * isolate.c - fork, run, wait with a deadline (see isolate.h).
 *
 * The deadline uses a pipe whose write end only the child holds: poll() on
 * the read end wakes up when the child ends in any way (the kernel closes the
 * pipe), so no SIGCHLD handler and no busy loop are needed.
 */
#include "isolate.h"

#include "error.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

int isolate_run(int (*fn)(void *arg, void *shared), void *arg, void *shared, int timeout_ms,
                struct isolate_status *st)
{
	int fds[2] = {-1, -1};
	struct timespec t0;
	pid_t pid;
	int status = 0, ret = 0;

	memset(st, 0, sizeof(*st));
	if (pipe2(fds, O_CLOEXEC) < 0)
		return TF_EFAIL;
	/* The child inherits our buffered output; flush so it is not written twice. */
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		ret = TF_EFAIL;
		goto out;
	}
	if (pid == 0) {
		close(fds[0]);
		_exit(fn(arg, shared) & 0xff);
	}
	close(fds[1]);
	fds[1] = -1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
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
		if (read(fds[0], &c, 1) <= 0)
			break;
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			ret = TF_EFAIL;
			goto out;
		}
	}
	if (WIFEXITED(status)) {
		st->exited = 1;
		st->exit_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		st->signal = WTERMSIG(status);
	}
out:
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	return ret;
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
