/*
 * isolate.h - run a function in a forked child so that whatever it loads
 * cannot take tfprov down with it.
 *
 * Loading vendor libraries (NVML, libcudart, libcudnn) runs their
 * constructors inside our process: a broken or mismatched library can
 * segfault, abort or hang. isolate_run() forks, calls fn in the child and
 * reports how the child ended. Results travel through a shared anonymous
 * mapping (isolate_shared_alloc) that the child writes as it goes, so a child
 * that dies half way still leaves everything it wrote before dying.
 *
 * Invariants: the child never returns into the caller's code and leaves with
 * _exit() (no atexit handlers, no second flush of stdio buffers); a child
 * that outlives timeout_ms is killed with SIGKILL and reaped. Call it from
 * the main thread while no other thread may hold the loader or malloc locks
 * (tfprov's engine has no worker threads at verify/probe time).
 */
#ifndef TFPROV_ISOLATE_H
#define TFPROV_ISOLATE_H

#include <stddef.h>

struct isolate_status {
	int exited;      /* 1: the child called _exit; exit_code holds its status */
	int exit_code;   /* fn's return value & 0xff */
	int signal;      /* the signal that ended the child, 0 if none */
	int timed_out;   /* 1: killed after timeout_ms */
	long maxrss_kib; /* the child's peak resident set (wait4's ru_maxrss) */
};

/* A zeroed MAP_SHARED anonymous area; aborts on failure (the OOM policy). */
void *isolate_shared_alloc(size_t size);
void isolate_shared_free(void *p, size_t size);

/*
 * Calls fn(arg, shared) in a child and waits up to timeout_ms (<= 0: no
 * limit). Returns 0 when the child ran (see st for how it ended) or a
 * negative TF_E* code when no child could be started.
 */
int isolate_run(int (*fn)(void *arg, void *shared), void *arg, void *shared, int timeout_ms,
                struct isolate_status *st);

/*
 * A shared area as above, backed by a memfd so that a child that execs can
 * map it too. Returns 0 or TF_EFAIL; close it with isolate_shm_close.
 */
struct isolate_shm {
	void *p;
	size_t size;
	int fd;
};
int isolate_shm_open(struct isolate_shm *m, size_t size);
void isolate_shm_close(struct isolate_shm *m);

/*
 * As isolate_run, but the child execs tfprov's own binary (/proc/self/exe)
 * as `tfprov GPU_ISOLATED_ARG ENTRY FD ARGS...` before it loads anything:
 * it starts from a fresh address space instead of a copy of ours, so what
 * the libraries it loads cost is not added to what the run before it
 * allocated (a cold apply's verify child was 147 MiB, 64 of them inherited).
 * gpu_isolated_child() maps FD and calls ENTRY's function there. When the
 * exec fails (no /proc), the child calls fn(arg, m->p) as isolate_run does.
 */
int isolate_exec(const char *entry, const char *const *args, size_t nargs,
                 int (*fn)(void *arg, void *shared), void *arg, struct isolate_shm *m,
                 int timeout_ms, struct isolate_status *st);

/* The exec'd child's entries: libcheck.c's (ARGS: FLAGS N DIRS...) and
 * convprobe.c's (ARGS: CUDART CUDNN; the parameters are in the shared area). */
int libcheck_child_main(int argc, char **argv, void *shared, size_t size);
int convprobe_child_main(int argc, char **argv, void *shared, size_t size);

/* "exit 3", "killed by signal 11 (Segmentation fault)", "timed out after 30000 ms". */
void isolate_describe(const struct isolate_status *st, int timeout_ms, char *buf, size_t n);

#endif
