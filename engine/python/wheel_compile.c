/*
 * wheel_compile.c - the native installer's byte-compiler: one process of the
 * env's python with a pool of workers, fed the installed .py files over a
 * socket while the wheels are still being unpacked (see compile_src).
 */
#include "wheel_int.h"
#include "python_int.h"
#include "pyenv_int.h"

#include "artifact.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "place.h"
#include "pool.h"
#include "python.h"
#include "fs.h"
#include "spawn.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * The byte-compiler: one process of the env's python with a pool of
 * workers (one per --jobs), fed over a socket while the wheels are still
 * being unpacked, so that compiling uses the cores the decoders leave idle.
 * Each line is "<tmp>\t<dest>\n", both relative to the copy: the file as the
 * decoder left it (or empty) and where it is installed. The .pyc goes where
 * the installed file's __pycache__ is and names the source where it will be
 * (final/dest), as `compileall -s stage -p final` would; the tmp file may
 * already have been moved to dest, so the worker tries both. A file that
 * does not compile gets no .pyc and is not an error (pip ignores it too).
 * Paths come from the wheels, which hold no control characters (unpack.c).
 * A kill -9 of tfprov takes the compiler along (spawn.c's parent-death
 * signal) and the compiler's workers with it (theirs, set the same way).
 * Those signals take a moment to land, so the compiler and its workers also
 * hold a shared flock on the stage directory while they live, and a
 * recovery waits for it before removing the stage (place.c).
 */
static const char compile_src[] =
    "import fcntl, importlib.util, multiprocessing, os, py_compile, sys\n"
    "from concurrent.futures import ProcessPoolExecutor\n"
    "stage, final, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
    "busy = os.open(stage, os.O_RDONLY)  # shared by the forked workers\n"
    "fcntl.flock(busy, fcntl.LOCK_SH)\n"
    "try:  # an env built in place: its busy file (place.h) too\n"
    "    busy2 = os.open(os.path.join(stage, '.tfprov-busy'), os.O_RDONLY)\n"
    "    fcntl.flock(busy2, fcntl.LOCK_SH)\n"
    "except OSError:\n"
    "    pass\n"
    "def comp(batch):\n"
    "    n = 0\n"
    "    for tmp, rel in batch:\n"
    "        dst = os.path.join(stage, rel)\n"
    "        cfile = importlib.util.cache_from_source(dst)\n"
    "        for f in ((os.path.join(stage, tmp), dst) if tmp else (dst,)):\n"
    "            try:\n"
    "                py_compile.compile(f, cfile=cfile, dfile=os.path.join(final, rel),\n"
    "                                   doraise=True)\n"
    "                n += 1\n"
    "                break\n"
    "            except FileNotFoundError:\n"
    "                continue\n"
    "            except (py_compile.PyCompileError, OSError, ValueError):\n"
    "                break\n"
    "    return n\n"
    "def batches():\n"
    "    rest = b''\n"
    "    while True:\n"
    "        b = os.read(0, 1 << 16)\n"
    "        if not b:\n"
    "            return\n"
    "        *lines, rest = (rest + b).split(b'\\n')\n"
    "        items = [ln.decode('utf-8', 'surrogateescape').split('\\t', 1)\n"
    "                 for ln in lines if ln]\n"
    "        for i in range(0, len(items), 8):\n"
    "            yield items[i:i + 8]\n"
    "def orphan_proof(parent):\n"
    "    try:\n"
    "        import ctypes\n"
    "        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL\n"
    "    except Exception:\n"
    "        pass\n"
    "    if os.getppid() != parent:\n"
    "        os._exit(1)\n"
    "ctx = multiprocessing.get_context('fork')\n"
    "try:\n"
    "    ex = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=orphan_proof,\n"
    "                             initargs=(os.getpid(),))\n"
    "except TypeError:  # before 3.7: no initializer (nor mp_context, fork anyway)\n"
    "    ex = ProcessPoolExecutor(jobs)\n"
    "with ex:\n"
    "    futs = [ex.submit(comp, b) for b in batches()]\n"
    "    print(sum(f.result() for f in futs))\n";

static void *compiler_main(void *arg)
{
	struct compiler *cp = arg;
	struct spawn_opts o = {.argv = cp->argv,
	                       .envp = cp->env.v,
	                       .stdin_fd = cp->child_fd,
	                       .timeout_s = 3600,
	                       .flags = SPAWN_KILL_ON_INTR};
	cp->rc = spawn_run(&o, &cp->r);
	__atomic_store_n(&cp->exited, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Starts the compiler; 0, or an error with why. */
int compiler_start(struct compiler *cp, struct job *j, struct why *why)
{
	int sv[2];
	memset(cp, 0, sizeof(*cp));
	cp->c = j->c;
	cp->fd = cp->child_fd = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return why_fail(why, TF_EFAIL, "cannot start the byte-compiler: %s",
		                strerror(errno));
	cp->fd = sv[0];
	cp->child_fd = sv[1];
	pthread_mutex_init(&cp->mu, NULL);
	size_t jobs = j->c->jobs > 0 ? (size_t)j->c->jobs : pool_ncpu();
	cp->argv[0] = xasprintf("%s/bin/python", j->stage);
	cp->argv[1] = xstrdup("-I");
	cp->argv[2] = xstrdup("-c");
	cp->argv[3] = xstrdup(compile_src);
	cp->argv[4] = xstrdup(j->stage);
	cp->argv[5] = xstrdup(j->final);
	cp->argv[6] = xasprintf("%zu", jobs);
	spawn_env_base(&cp->env);
	spawn_env_python(&cp->env);
	cp->armed = 1;
	return 0;
}

/* Starts the process (under cp->mu): only once there is a file to compile,
 * since the wheels compiled ahead (pycahead.c) may have left none. */
static void compiler_launch(struct compiler *cp)
{
	ev_log(cp->c, EV_DEBUG, "run: %s -I -c <byte-compiler> %s %s %s", cp->argv[0], cp->argv[4],
	       cp->argv[5], cp->argv[6]);
	if (pthread_create(&cp->th, NULL, compiler_main, cp) != 0)
		cp->lost = 1;
	else
		cp->running = 1;
}

/* Queues one installed .py file (paths relative to the copy; tmp may be NULL). */
void compiler_send(struct compiler *cp, const char *tmp, const char *rel)
{
	if (!cp->armed)
		return;
	char *line = xasprintf("%s\t%s\n", tmp ? tmp : "", rel);
	size_t len = strlen(line), off = 0;
	pthread_mutex_lock(&cp->mu);
	if (!cp->running && !cp->lost)
		compiler_launch(cp);
	while (off < len && !cp->lost) {
		ssize_t n = send(cp->fd, line + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			/* The workers are behind; the child holds its end open while it
			 * lives, so a child that is gone shows as `exited`, not EPIPE. */
			if (__atomic_load_n(&cp->exited, __ATOMIC_ACQUIRE) || tf_interrupted)
				cp->lost = 1;
			else
				poll(&(struct pollfd){.fd = cp->fd, .events = POLLOUT}, 1, 100);
		} else {
			cp->lost = 1;
		}
	}
	cp->sent++;
	pthread_mutex_unlock(&cp->mu);
	free(line);
}

/* Ends the input, waits for the last .pyc; 0, or an error with why. */
int compiler_finish(struct compiler *cp, struct why *why)
{
	int rc = 0;
	if (cp->fd >= 0)
		shutdown(cp->fd, SHUT_WR);
	if (cp->running) {
		pthread_join(cp->th, NULL);
		rc = cp->rc;
		if (rc == 0 && (cp->r.status != 0 || cp->lost))
			rc = TF_EFAIL;
		if (rc != 0)
			why_fail(why, rc, "the byte-compiler (python -c, %zu files) failed: %s",
			         cp->sent,
			         cp->r.why.msg   ? cp->r.why.msg
			         : cp->r.err.len ? cp->r.err.buf
			                         : "exited early");
		else if (rc == 0)
			ev_log(cp->c, EV_DEBUG, "byte-compiled %s of %zu files",
			       cp->r.out.buf ? strtok(cp->r.out.buf, "\n") : "?", cp->sent);
	} else if (cp->armed && cp->lost) {
		rc = why_fail(why, TF_EFAIL, "cannot start the byte-compiler thread");
	}
	if (cp->armed)
		pthread_mutex_destroy(&cp->mu);
	if (cp->fd >= 0)
		close(cp->fd);
	if (cp->child_fd >= 0)
		close(cp->child_fd);
	spawn_result_release(&cp->r);
	for (size_t i = 0; i < 8; i++)
		free(cp->argv[i]);
	strvec_release(&cp->env);
	memset(cp, 0, sizeof(*cp));
	cp->fd = cp->child_fd = -1;
	return rc;
}
