/*
 * spawn.c - child processes with an argv, a controlled environment and
 * bounded output capture (see spawn.h for the contract).
 *
 * Everything the child needs (the resolved program path, the environment,
 * the descriptors) is prepared before fork(), so that between fork() and
 * execve() only async-signal-safe calls run; this keeps spawning correct in
 * a process that has other threads (libcurl's resolver). An exec failure is
 * reported back through a close-on-exec pipe as an errno value.
 */
#include "spawn.h"

#include "error.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPAWN_DEFAULT_MAX   (4u << 20)
#define SPAWN_KILL_GRACE_NS (5ull * 1000000000ull)

extern char **environ;

void spawn_result_release(struct spawn_result *r)
{
	strbuf_release(&r->out);
	strbuf_release(&r->err);
	why_clear(&r->why);
	memset(r, 0, sizeof(*r));
}

static size_t env_find(const struct strvec *env, const char *name)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i < env->n; i++)
		if (strncmp(env->v[i], name, nl) == 0 && env->v[i][nl] == '=')
			return i;
	return (size_t)-1;
}

const char *spawn_env_get(const struct strvec *env, const char *name)
{
	size_t i = env_find(env, name);
	return i == (size_t)-1 ? NULL : env->v[i] + strlen(name) + 1;
}

static void env_remove_at(struct strvec *env, size_t i)
{
	free(env->v[i]);
	memmove(&env->v[i], &env->v[i + 1], (env->n - i) * sizeof(*env->v));
	env->n--;
}

void spawn_env_unset(struct strvec *env, const char *pattern)
{
	size_t pl = strlen(pattern);
	int wild = pl > 0 && pattern[pl - 1] == '*';
	for (size_t i = 0; i < env->n;) {
		const char *eq = strchr(env->v[i], '=');
		size_t nl = eq ? (size_t)(eq - env->v[i]) : strlen(env->v[i]);
		int match = wild ? (nl >= pl - 1 && strncmp(env->v[i], pattern, pl - 1) == 0)
		                 : (nl == pl && strncmp(env->v[i], pattern, pl) == 0);
		if (match)
			env_remove_at(env, i);
		else
			i++;
	}
}

void spawn_env_set(struct strvec *env, const char *name, const char *value)
{
	spawn_env_unset(env, name);
	strvec_pushf(env, "%s=%s", name, value);
}

void spawn_env_inherit(struct strvec *env, const char *name)
{
	const char *v = getenv(name);
	if (v != NULL)
		spawn_env_set(env, name, v);
}

void spawn_env_base(struct strvec *env)
{
	static const char *const keep[] = {
	    "HOME",
	    "TMPDIR",
	    "http_proxy",
	    "https_proxy",
	    "no_proxy",
	    "all_proxy",
	    "HTTP_PROXY",
	    "HTTPS_PROXY",
	    "NO_PROXY",
	    "ALL_PROXY",
	    "SSL_CERT_FILE",
	    "SSL_CERT_DIR",
	    "CUDA_VISIBLE_DEVICES",
	    "NVIDIA_VISIBLE_DEVICES",
	};
	const char *path = getenv("PATH");
	spawn_env_set(
	    env, "PATH",
	    path && *path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
		spawn_env_inherit(env, keep[i]);
	/* Stable, parseable messages from every tool. */
	spawn_env_set(env, "LANG", "C.UTF-8");
	spawn_env_set(env, "LC_ALL", "C.UTF-8");
}

void spawn_env_python(struct strvec *env)
{
	spawn_env_unset(env, "PIP_*");
	spawn_env_unset(env, "PYTHON*");
	spawn_env_unset(env, "VIRTUAL_ENV");
	spawn_env_unset(env, "CONDA_PREFIX");
	spawn_env_set(env, "PIP_CONFIG_FILE", "/dev/null");
	spawn_env_set(env, "PIP_DISABLE_PIP_VERSION_CHECK", "1");
	spawn_env_set(env, "PIP_NO_INPUT", "1");
	spawn_env_set(env, "PYTHONNOUSERSITE", "1");
	spawn_env_set(env, "PYTHONIOENCODING", "utf-8");
}

/* Resolves argv[0] against PATH from envp (or ours); caller frees. NULL: not found. */
static char *resolve_program(const char *name, char *const *envp)
{
	if (strchr(name, '/') != NULL)
		return xstrdup(name);
	const char *path = NULL;
	for (size_t i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], "PATH=", 5) == 0)
			path = envp[i] + 5;
	if (path == NULL)
		path = getenv("PATH");
	if (path == NULL)
		path = "/usr/bin:/bin";
	char *copy = xstrdup(path), *save = NULL, *found = NULL;
	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		char *cand = path_join(*dir ? dir : ".", name);
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
			found = cand;
			break;
		}
		free(cand);
	}
	free(copy);
	return found;
}

/* Appends to a capture buffer, keeping at most max bytes (the newest). */
static void capture(struct strbuf *sb, int *truncated, size_t max, const char *data, size_t n)
{
	if (n >= max) {
		strbuf_reset(sb);
		strbuf_add(sb, data + n - max, max);
		*truncated = 1;
		return;
	}
	strbuf_add(sb, data, n);
	if (sb->len > max) {
		size_t drop = sb->len - max;
		memmove(sb->buf, sb->buf + drop, max);
		sb->len = max;
		sb->buf[max] = '\0';
		*truncated = 1;
	}
}

static void child_exec(const char *prog, const struct spawn_opts *o, char *const *envp, int in_fd,
                       int out_fd, int err_fd, int report_fd, pid_t parent)
{
	int e;
	sigset_t none;
	/* Own process group: a terminal ^C reaches tfprov only. */
	setpgid(0, 0);
	/* A killed tfprov takes its child along: recovery must not race a child
	 * that goes on writing into what it undoes. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGCHLD, SIG_DFL);
	if (dup2(in_fd, 0) < 0 || (out_fd >= 0 && dup2(out_fd, 1) < 0) ||
	    (err_fd >= 0 && dup2(err_fd, 2) < 0))
		goto fail;
	if (o->cwd && chdir(o->cwd) != 0)
		goto fail;
	execve(prog, o->argv, envp);
fail:
	e = errno;
	if (write(report_fd, &e, sizeof(e)) < 0) {
		/* nothing more can be done in the child */
	}
	_exit(127);
}

static void kill_group(pid_t pid, int sig)
{
	if (kill(-pid, sig) != 0)
		kill(pid, sig);
}

/* One child of spawn_run: its descriptors (-1 when closed) and where its wait stands. */
struct child {
	pid_t pid; /* > 0 until reaped: an error before then kills it */
	int in_fd;
	int out_pipe[2], err_pipe[2], rep_pipe[2];
	int wstatus;
	uint64_t t0, kill_at;
	int killed;
};

/* stdin, the pipes and the fork; the child execs prog (child_exec). 0 or TF_EFAIL. */
static int spawn_start(const struct spawn_opts *o, char *const *envp, const char *prog,
                       struct child *ch, struct spawn_result *r)
{
	int capture_out = !(o->flags & SPAWN_INHERIT_OUTPUT);
	ch->in_fd = o->stdin_fd > 0
	                ? fcntl(o->stdin_fd, F_DUPFD_CLOEXEC, 3)
	                : open(o->stdin_path ? o->stdin_path : "/dev/null", O_RDONLY | O_CLOEXEC);
	if (ch->in_fd < 0)
		return why_fail(&r->why, TF_EFAIL, "%s: %s",
		                o->stdin_path ? o->stdin_path : "/dev/null", strerror(errno));
	if (pipe2(ch->rep_pipe, O_CLOEXEC) != 0 ||
	    (capture_out &&
	     (pipe2(ch->out_pipe, O_CLOEXEC) != 0 ||
	      (!(o->flags & SPAWN_MERGE_STDERR) && pipe2(ch->err_pipe, O_CLOEXEC) != 0))))
		return why_fail(&r->why, TF_EFAIL, "pipe: %s", strerror(errno));
	pid_t self = getpid();
	ch->pid = fork();
	if (ch->pid < 0)
		return why_fail(&r->why, TF_EFAIL, "fork: %s", strerror(errno));
	if (ch->pid == 0) {
		int cout = capture_out ? ch->out_pipe[1] : -1;
		int cerr =
		    capture_out ? (ch->err_pipe[1] >= 0 ? ch->err_pipe[1] : ch->out_pipe[1]) : -1;
		child_exec(prog, o, envp, ch->in_fd, cout, cerr, ch->rep_pipe[1], self);
	}
	/* Also from the parent, so that no signal can race the child's setpgid. */
	setpgid(ch->pid, ch->pid);
	close(ch->rep_pipe[1]);
	ch->rep_pipe[1] = -1;
	if (ch->out_pipe[1] >= 0) {
		close(ch->out_pipe[1]);
		ch->out_pipe[1] = -1;
	}
	if (ch->err_pipe[1] >= 0) {
		close(ch->err_pipe[1]);
		ch->err_pipe[1] = -1;
	}
	return 0;
}

/* Reads what poll found ready into the captures (and on_output); a pipe at its end is
 * closed. */
static void spawn_drain(const struct spawn_opts *o, struct child *ch, struct spawn_result *r,
                        const struct pollfd *pfd, int nfd, int n)
{
	size_t max = o->max_output ? o->max_output : SPAWN_DEFAULT_MAX;
	for (int i = 0; n > 0 && i < nfd; i++) {
		if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		char buf[65536];
		ssize_t k = read(pfd[i].fd, buf, sizeof(buf));
		if (k < 0 && errno == EINTR)
			continue;
		int is_out = pfd[i].fd == ch->out_pipe[0];
		if (k <= 0) {
			close(pfd[i].fd);
			if (is_out)
				ch->out_pipe[0] = -1;
			else
				ch->err_pipe[0] = -1;
			continue;
		}
		if (is_out)
			capture(&r->out, &r->out_truncated, max, buf, (size_t)k);
		else
			capture(&r->err, &r->err_truncated, max, buf, (size_t)k);
		if (o->on_output)
			o->on_output(o->arg, is_out ? 1 : 2, buf, (size_t)k);
	}
}

/* A timeout or an interrupt: SIGTERM to the group, SIGKILL after the grace. */
static void spawn_watch(const struct spawn_opts *o, struct child *ch, struct spawn_result *r)
{
	uint64_t now = now_ns();
	if (!ch->killed && o->timeout_s > 0 && (double)(now - ch->t0) / 1e9 > o->timeout_s) {
		r->timed_out = 1;
		ch->killed = 1;
	}
	if (!ch->killed && tf_interrupted && (o->flags & SPAWN_KILL_ON_INTR)) {
		r->interrupted = 1;
		ch->killed = 1;
	}
	if (ch->killed && ch->kill_at == 0) {
		kill_group(ch->pid, SIGTERM);
		ch->kill_at = now + SPAWN_KILL_GRACE_NS;
	} else if (ch->killed && ch->kill_at > 1 && now > ch->kill_at) {
		kill_group(ch->pid, SIGKILL);
		ch->kill_at = 1;
	}
}

/* Until the child is reaped and its pipes drained. 0 or TF_EFAIL (ch->pid still set). */
static int spawn_wait(const struct spawn_opts *o, struct child *ch, struct spawn_result *r)
{
	int reaped = 0;
	uint64_t reaped_at = 0;
	for (;;) {
		struct pollfd pfd[2];
		int nfd = 0;
		if (!reaped) {
			pid_t w = waitpid(ch->pid, &ch->wstatus, WNOHANG);
			if (w == ch->pid) {
				reaped = 1;
				reaped_at = now_ns();
			} else if (w < 0 && errno != EINTR) {
				return why_fail(&r->why, TF_EFAIL, "waitpid: %s", strerror(errno));
			}
		}
		if (ch->out_pipe[0] >= 0)
			pfd[nfd++] = (struct pollfd){.fd = ch->out_pipe[0], .events = POLLIN};
		if (ch->err_pipe[0] >= 0)
			pfd[nfd++] = (struct pollfd){.fd = ch->err_pipe[0], .events = POLLIN};
		/* Done when reaped and the pipes are drained; a grandchild that keeps
		 * them open gets one more second, then is ignored. */
		if (reaped && (nfd == 0 || now_ns() - reaped_at > 1000000000ull))
			break;
		int n = poll(nfd ? pfd : NULL, (nfds_t)nfd, reaped ? 50 : 20);
		if (n < 0 && errno != EINTR)
			return why_fail(&r->why, TF_EFAIL, "poll: %s", strerror(errno));
		spawn_drain(o, ch, r, pfd, nfd, n);
		if (!reaped)
			spawn_watch(o, ch, r);
	}
	ch->pid = -1;
	return 0;
}

/* The reaped child's answer: an exec failure (its errno on the report pipe), else its
 * status or signal. */
static int spawn_status(const struct child *ch, const char *prog, struct spawn_result *r)
{
	int child_errno = 0;
	if (read(ch->rep_pipe[0], &child_errno, sizeof(child_errno)) ==
	    (ssize_t)sizeof(child_errno))
		return why_fail(&r->why, TF_EFAIL, "%s: cannot run: %s", prog,
		                strerror(child_errno));
	if (WIFEXITED(ch->wstatus)) {
		r->status = WEXITSTATUS(ch->wstatus);
	} else if (WIFSIGNALED(ch->wstatus)) {
		r->term_sig = WTERMSIG(ch->wstatus);
		r->status = 128 + r->term_sig;
	}
	return why_code(&r->why, r->interrupted ? TF_EINTR : 0);
}

int spawn_run(const struct spawn_opts *o, struct spawn_result *r)
{
	static char *const empty_env[] = {NULL};
	char *const *envp = o->envp ? o->envp : empty_env;
	struct child ch = {.pid = -1,
	                   .in_fd = -1,
	                   .out_pipe = {-1, -1},
	                   .err_pipe = {-1, -1},
	                   .rep_pipe = {-1, -1},
	                   .t0 = now_ns()};
	char *prog = NULL;
	int rc = 0;

	if (o->argv == NULL || o->argv[0] == NULL)
		return why_fail(&r->why, TF_EFAIL, "no program to run");
	prog = resolve_program(o->argv[0], envp);
	if (prog == NULL)
		rc = why_fail(&r->why, TF_EFAIL, "%s: not found on PATH", o->argv[0]);
	if (rc == 0)
		rc = spawn_start(o, envp, prog, &ch, r);
	if (rc == 0)
		rc = spawn_wait(o, &ch, r);
	if (rc == 0)
		rc = spawn_status(&ch, prog, r);
	r->wall_s = (double)(now_ns() - ch.t0) / 1e9;
	if (ch.pid > 0) {
		/* An error after fork: never leave a child behind. */
		kill_group(ch.pid, SIGKILL);
		while (waitpid(ch.pid, &ch.wstatus, 0) < 0 && errno == EINTR)
			;
	}
	int fds[] = {ch.in_fd,       ch.out_pipe[0], ch.out_pipe[1], ch.err_pipe[0],
	             ch.err_pipe[1], ch.rep_pipe[0], ch.rep_pipe[1]};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(prog);
	return rc;
}
