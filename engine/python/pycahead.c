/*
 * pycahead.c - byte-compiling ahead: the .py files of each wheel that
 * decode-ahead unpacks into the cache's scratch are compiled there, on the
 * decoder's thread, while the other downloads and decodes go on, so that the
 * pip step finds the .pyc files made and only moves them (wheel.c).
 *
 * A .pyc names its source where it will be installed (dfile: the env's
 * site-packages), as wheel.c's own compiler does; it is made by the
 * interpreter the env runs (its cache tag is in the file name, so a .pyc of
 * another interpreter is never taken), next to the source in the scratch
 * (__pycache__/NAME.TAG.pyc). The files are compiled from the tree the
 * decoder checked entry by entry against the verified wheel; wheel.c still
 * checks every source against RECORD before moving it and its .pyc.
 *
 * The compilers are long-lived processes of that interpreter (one per
 * core, or --jobs), each serving one request at a time over a socket: lines
 * "<source>\t<dfile>\n", then an empty line; it answers "<compiled>\n" (paths
 * come from the decoded tree, which holds no control characters: unpack.c).
 * A file that does not compile gets no .pyc (pip ignores it too). A
 * compiler that dies is not an error: the pip step compiles what has no
 * .pyc. The servers end with the run (EOF) or with tfprov (spawn.c's
 * parent-death signal), and write only into this run's scratch.
 */
#include "python.h"
#include "python_int.h"

#include "artifact.h"
#include "ctx.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "pool.h"
#include "spawn.h"
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Files per request: small enough to share a large wheel among the servers. */
#define PYC_BATCH 48

static const char server_src[] =
    "import importlib.util, os, py_compile, sys\n"
    "n = 0\n"
    "for line in sys.stdin.buffer:\n"
    "    if line == b'\\n':\n"
    "        os.write(0, b'%d\\n' % n)\n"
    "        n = 0\n"
    "        continue\n"
    "    src, dfile = line.rstrip(b'\\n').decode('utf-8', 'surrogateescape').split('\\t', 1)\n"
    "    try:\n"
    "        py_compile.compile(src, cfile=importlib.util.cache_from_source(src),\n"
    "                           dfile=dfile, doraise=True)\n"
    "        n += 1\n"
    "    except (py_compile.PyCompileError, OSError, ValueError, SyntaxError):\n"
    "        pass\n";

struct server {
	int fd, child_fd;
	int busy, dead;
	pthread_t th;
	int started;
	char *argv[5];
	struct strvec env;
	struct spawn_result r;
};

struct pyc_ahead {
	struct ctx *c;
	char *env;           /* host path of the env */
	char *want, *interp; /* a venv's X.Y and interpreter setting (pyenv_find_python) */
	char *python;        /* the interpreter the env runs, once found */
	char *site;          /* host path of the env's site-packages: the .pyc's dfile base */
	size_t nserv;
	struct server *sv;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int started;
	size_t trees, files, compiled;
};

static void *server_main(void *arg)
{
	struct server *s = arg;
	struct spawn_opts o = {.argv = s->argv,
	                       .envp = s->env.v,
	                       .stdin_fd = s->child_fd,
	                       .timeout_s = 3600,
	                       .flags = SPAWN_KILL_ON_INTR};
	spawn_run(&o, &s->r);
	return NULL;
}

/*
 * The interpreter the env will run: the env's own when it has one (a .pyc of
 * another X.Y, should the pyenv step replace it, is never taken: the cache
 * tag differs), else the system Python the venv will be made of.
 */
static char *env_python(struct pyc_ahead *a)
{
	char *py = path_join(a->env, "bin/python");
	if (access(py, X_OK) == 0)
		return py;
	free(py);
	py = NULL;
	if (a->want && pyenv_find_python(a->c, a->want, a->interp, pyenv_for_all_users(a->env), &py,
	                                 NULL) != 0) {
		free(py);
		py = NULL;
	}
	return py;
}

/* Starts the servers (under a->mu); none when there is no interpreter. */
static void servers_start(struct pyc_ahead *a)
{
	a->started = 1;
	a->python = env_python(a);
	if (a->python == NULL) {
		a->nserv = 0;
		return;
	}
	a->sv = xcalloc(a->nserv, sizeof(*a->sv));
	for (size_t i = 0; i < a->nserv; i++) {
		struct server *s = &a->sv[i];
		int sv[2];
		s->fd = s->child_fd = -1;
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
			s->dead = 1;
			continue;
		}
		s->fd = sv[0];
		s->child_fd = sv[1];
		s->argv[0] = xstrdup(a->python);
		s->argv[1] = xstrdup("-I");
		s->argv[2] = xstrdup("-c");
		s->argv[3] = xstrdup(server_src);
		spawn_env_base(&s->env);
		spawn_env_python(&s->env);
		if (pthread_create(&s->th, NULL, server_main, s) != 0) {
			s->dead = 1;
			continue;
		}
		s->started = 1;
	}
	ev_log(a->c, EV_DEBUG, "run: %zu x %s -I -c <byte-compiler, ahead> for %s", a->nserv,
	       a->python, a->site);
}

/* A free server (waits for one), or NULL when none is alive. */
static struct server *server_get(struct pyc_ahead *a)
{
	pthread_mutex_lock(&a->mu);
	if (!a->started)
		servers_start(a);
	for (;;) {
		size_t alive = 0;
		for (size_t i = 0; i < a->nserv; i++) {
			struct server *s = &a->sv[i];
			alive += !s->dead;
			if (!s->dead && !s->busy) {
				s->busy = 1;
				pthread_mutex_unlock(&a->mu);
				return s;
			}
		}
		if (alive == 0 || tf_interrupted) {
			pthread_mutex_unlock(&a->mu);
			return NULL;
		}
		pthread_cond_wait(&a->cv, &a->mu);
	}
}

static void server_put(struct pyc_ahead *a, struct server *s, int dead, size_t compiled)
{
	pthread_mutex_lock(&a->mu);
	s->busy = 0;
	s->dead |= dead;
	a->compiled += compiled;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

/* One request: the lines, then the answer; 0 or -EPIPE when the server is gone. */
static int request(struct server *s, const char *text, size_t len, size_t *compiled)
{
	if (fs_write_all(s->fd, text, len) != 0)
		return -EPIPE;
	char buf[32];
	size_t got = 0;
	while (got < sizeof(buf) - 1) {
		ssize_t n = read(s->fd, buf + got, sizeof(buf) - 1 - got);
		if (n < 0 && errno == EINTR && !tf_interrupted)
			continue;
		if (n <= 0)
			return -EPIPE;
		got += (size_t)n;
		if (memchr(buf, '\n', got))
			break;
	}
	buf[got] = '\0';
	*compiled = strtoull(buf, NULL, 10);
	return 0;
}

struct tree_job {
	struct pyc_ahead *a;
	const char *dir;
	const char **paths; /* the tree's .py files to compile, relative to dir */
	size_t n;
};

static void batch_one(size_t b, void *arg)
{
	struct tree_job *t = arg;
	size_t from = b * PYC_BATCH, to = from + PYC_BATCH < t->n ? from + PYC_BATCH : t->n;
	struct strbuf sb = STRBUF_INIT;
	for (size_t k = from; k < to; k++)
		strbuf_addf(&sb, "%s/%s\t%s/%s\n", t->dir, t->paths[k], t->a->site, t->paths[k]);
	strbuf_adds(&sb, "\n");
	struct server *s = server_get(t->a);
	size_t compiled = 0;
	if (s != NULL) {
		int gone = request(s, sb.buf, sb.len, &compiled) != 0;
		server_put(t->a, s, gone, compiled);
	}
	strbuf_release(&sb);
}

static void tree_compile(void *arg, const char *dir, const struct unpack_result *res)
{
	struct pyc_ahead *a = arg;
	struct tree_job t = {a, dir, xcalloc(res->n + 1, sizeof(char *)), 0};
	for (size_t i = 0; i < res->n; i++)
		if (res->v[i].type == 'f' && wheel_entry_compiles_early(res->v[i].path))
			t.paths[t.n++] = res->v[i].path;
	if (t.n > 0) {
		pool_run((t.n + PYC_BATCH - 1) / PYC_BATCH, a->nserv, batch_one, &t);
		pthread_mutex_lock(&a->mu);
		a->trees++;
		a->files += t.n;
		pthread_mutex_unlock(&a->mu);
	}
	free(t.paths);
}

static void ahead_release(void *arg)
{
	struct pyc_ahead *a = arg;
	for (size_t i = 0; a->sv && i < a->nserv; i++) {
		struct server *s = &a->sv[i];
		if (s->fd >= 0)
			shutdown(s->fd, SHUT_WR);
		if (s->started)
			pthread_join(s->th, NULL);
		if (s->fd >= 0)
			close(s->fd);
		if (s->child_fd >= 0)
			close(s->child_fd);
		for (size_t k = 0; k < 5; k++)
			free(s->argv[k]);
		strvec_release(&s->env);
		spawn_result_release(&s->r);
	}
	if (a->started)
		ev_log(a->c, EV_DEBUG, "byte-compiled ahead: %zu of %zu files in %zu wheels",
		       a->compiled, a->files, a->trees);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a->sv);
	free(a->python);
	free(a->site);
	free(a->env);
	free(a->want);
	free(a->interp);
	free(a);
}

void pyc_ahead_attach(struct ctx *c, struct artset *s, const char *env_path, const char *pyver,
                      const char *want, const char *interpreter)
{
	if (s->hook.tree != NULL || pyver == NULL)
		return;
	struct pyc_ahead *a = xcalloc(1, sizeof(*a));
	a->c = c;
	a->env = ctx_host_path(c, env_path);
	a->want = want ? xstrdup(want) : NULL;
	a->interp = interpreter ? xstrdup(interpreter) : NULL;
	a->site = xasprintf("%s/lib/python%s/site-packages", a->env, pyver);
	a->nserv = c->jobs > 0 ? (size_t)c->jobs : pool_ncpu();
	if (a->nserv > 8)
		a->nserv = 8;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	s->hook = (struct art_wheel_hook){.tree = tree_compile, .release = ahead_release, .arg = a};
}
