/*
 * inroot.c - paths under --root, resolved with chroot semantics.
 *
 * A root-relative path ("/opt/tfprov/cuda") names what a process chrooted
 * into the root would see: a symlink inside the root that points at "/x"
 * means <root>/x, and ".." never climbs above the root. So a root whose
 * /opt is a symlink works, and a planted link (R/opt/tfprov -> /etc) can
 * only lead to R/etc, never out of R.
 *
 * The existing part of the path is resolved by the kernel with openat2(2)
 * and RESOLVE_IN_ROOT on the root's descriptor, and read back from
 * /proc/self/fd; where openat2 or /proc is missing, the components are
 * walked with fstatat(AT_SYMLINK_NOFOLLOW) and every link is resolved here,
 * inside the root (TFPROV_INROOT_WALK=1 forces this way, for tests). The
 * part that does not exist yet is appended as plain
 * components (tfprov creates them as directories and files, never links).
 * The host path returned contains no symlink, so the path-based calls made
 * with it afterwards stay inside the root unless the tree is changed under
 * a running tfprov by someone who can already write into the root.
 */
#include "ctx.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_LINKS 40

/* Splits `path` into components, dropping "" and "."; ".." pops (never above the root). */
static void push_comps(struct strvec *out, const char *path)
{
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 0 || (n == 1 && p[0] == '.')) {
			/* nothing */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			if (out->n)
				free(out->v[--out->n]);
		} else {
			strvec_push(out, "");
			free(out->v[out->n - 1]);
			out->v[out->n - 1] = xstrndup(p, n);
		}
		p += n;
	}
}

static char *join_comps(const char *root, char *const *v, size_t n)
{
	struct strbuf sb = STRBUF_INIT;
	strbuf_adds(&sb, strcmp(root, "/") == 0 ? "" : root);
	for (size_t i = 0; i < n; i++) {
		strbuf_adds(&sb, "/");
		strbuf_adds(&sb, v[i]);
	}
	if (sb.len == 0)
		strbuf_adds(&sb, "/");
	return strbuf_detach(&sb);
}

/* Root-relative "a/b/c" of the first n components, "." when n == 0. */
static char *rel_of(char *const *v, size_t n)
{
	if (n == 0)
		return xstrdup(".");
	char *s = join_comps("/", v, n);
	char *r = xstrdup(s + 1);
	free(s);
	return r;
}

#ifdef SYS_openat2
/*
 * openat2(2) with RESOLVE_IN_ROOT. The kernel answers EAGAIN when a rename
 * or a mount anywhere on the system raced with a resolution that went
 * through "..", and asks the caller to try again (openat2(2), ERRORS): so it
 * does, a bounded number of times. -1 with errno set, as the syscall.
 */
static int openat2_in_root(int rootfd, const char *rel, uint64_t flags)
{
	struct open_how how = {.flags = flags, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	int fd = -1;
	for (int tries = 0; tries < 256; tries++) {
		fd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	return fd;
}
#endif

/* The kernel's way: the longest existing prefix opened with RESOLVE_IN_ROOT. NULL: not available. */
static char *resolve_openat2(int rootfd, const char *root, const struct strvec *comps)
{
#ifdef SYS_openat2
	for (size_t k = comps->n + 1; k-- > 0;) {
		char *rel = rel_of(comps->v, k);
		int fd = openat2_in_root(rootfd, rel, O_PATH | O_CLOEXEC);
		free(rel);
		if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
			continue;
		if (fd < 0)
			return NULL; /* ENOSYS, EPERM (seccomp), ELOOP...: walk by hand */
		struct stat st;
		if (k < comps->n && fstatat(fd, comps->v[k], &st, AT_SYMLINK_NOFOLLOW) == 0) {
			close(fd); /* a dangling link: where it leads is resolved by hand */
			return NULL;
		}
		char proc[64], real[PATH_MAX];
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(proc, real, sizeof(real) - 1);
		close(fd);
		if (n <= 0)
			return NULL;
		real[n] = '\0';
		size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
		if (strncmp(real, root, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
			return NULL; /* moved under us: let the walk decide */
		char *base = real[rl] ? xstrdup(real + rl) : xstrdup("");
		struct strbuf sb = STRBUF_INIT;
		strbuf_adds(&sb, rl ? root : "");
		strbuf_adds(&sb, base);
		for (size_t i = k; i < comps->n; i++) {
			strbuf_adds(&sb, "/");
			strbuf_adds(&sb, comps->v[i]);
		}
		if (sb.len == 0)
			strbuf_adds(&sb, "/");
		free(base);
		return strbuf_detach(&sb);
	}
#else
	(void)rootfd;
	(void)root;
	(void)comps;
#endif
	return NULL;
}

/* The same by hand: each component lstat'ed, each link resolved inside the root. */
static char *resolve_walk(int rootfd, const char *root, const struct strvec *comps)
{
	struct strvec done = STRVEC_INIT, todo = STRVEC_INIT; /* todo is a stack: last = next */
	for (size_t i = comps->n; i-- > 0;)
		strvec_push(&todo, comps->v[i]);
	int links = 0;
	while (todo.n) {
		char *comp = todo.v[--todo.n];
		if (strcmp(comp, "..") == 0) {
			if (done.n)
				free(done.v[--done.n]);
			free(comp);
			continue;
		}
		strvec_push(&done, comp);
		free(comp);
		char *rel = rel_of(done.v, done.n);
		struct stat st;
		char target[PATH_MAX];
		ssize_t tn = -1;
		int r = fstatat(rootfd, rel, &st, AT_SYMLINK_NOFOLLOW);
		if (r == 0 && S_ISLNK(st.st_mode) && links++ < MAX_LINKS)
			tn = readlinkat(rootfd, rel, target, sizeof(target) - 1);
		free(rel);
		if (r != 0)
			break; /* absent: the rest is appended as it is */
		if (tn < 0)
			continue;
		target[tn] = '\0';
		free(done.v[--done.n]);
		if (target[0] == '/')
			while (done.n)
				free(done.v[--done.n]);
		/* Push the target's components in reverse so the first pops next. */
		struct strvec t = STRVEC_INIT;
		for (const char *p = target; *p;) {
			while (*p == '/')
				p++;
			const char *e = strchr(p, '/');
			size_t n = e ? (size_t)(e - p) : strlen(p);
			if (n && !(n == 1 && p[0] == '.')) {
				char *c = xstrndup(p, n);
				strvec_push(&t, c);
				free(c);
			}
			p += n;
		}
		for (size_t i = t.n; i-- > 0;)
			strvec_push(&todo, t.v[i]);
		strvec_release(&t);
	}
	/* Whatever is left did not exist: plain components (".." clamps at what is done). */
	while (todo.n) {
		char *comp = todo.v[--todo.n];
		if (strcmp(comp, "..") == 0) {
			if (done.n)
				free(done.v[--done.n]);
		} else {
			strvec_push(&done, comp);
		}
		free(comp);
	}
	char *out = join_comps(root, done.v, done.n);
	strvec_release(&done);
	strvec_release(&todo);
	return out;
}

static char *resolve(const struct ctx *c, const char *path, int follow_last)
{
	const char *root = c->root ? c->root : "/";
	struct strvec comps = STRVEC_INIT;
	push_comps(&comps, path);
	char *last = !follow_last && comps.n ? comps.v[--comps.n] : NULL;
	int fd = c->rootfd;
	if (fd < 0)
		fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	char *out = NULL;
	if (fd >= 0) {
		/* TFPROV_INROOT_WALK=1: the fallback only (tests cover both ways). */
		const char *walk = getenv("TFPROV_INROOT_WALK");
		if (walk == NULL || strcmp(walk, "1") != 0)
			out = resolve_openat2(fd, root, &comps);
		if (out == NULL)
			out = resolve_walk(fd, root, &comps);
	} else {
		out = join_comps(root, comps.v, comps.n); /* no root at all: nothing to follow */
	}
	if (fd >= 0 && fd != c->rootfd)
		close(fd);
	if (last) {
		char *full = path_join(out, last);
		free(out);
		out = full;
		free(last);
	}
	strvec_release(&comps);
	return out;
}

char *ctx_host_path(const struct ctx *c, const char *path)
{
	return resolve(c, path, 0);
}

char *ctx_host_dir(const struct ctx *c, const char *path)
{
	return resolve(c, path, 1);
}

const char *ctx_rel(const struct ctx *c, const char *host)
{
	size_t rl = c->root == NULL || strcmp(c->root, "/") == 0 ? 0 : strlen(c->root);
	if (strncmp(host, c->root ? c->root : "/", rl) != 0)
		return NULL;
	if (host[rl] == '\0')
		return "/";
	return host[rl] == '/' ? host + rl : NULL;
}

int ctx_open_in_root(const struct ctx *c, const char *path, int flags)
{
	flags |= O_CLOEXEC;
#ifdef SYS_openat2
	const char *walk = getenv("TFPROV_INROOT_WALK");
	if (c->rootfd >= 0 && (walk == NULL || strcmp(walk, "1") != 0)) {
		const char *rel = path;
		while (*rel == '/')
			rel++;
		int fd = openat2_in_root(c->rootfd, *rel ? rel : ".", (uint64_t)flags);
		if (fd >= 0)
			return fd;
		if (errno != ENOSYS && errno != EPERM)
			return -errno;
	}
#endif
	/* No openat2: the walk's symlink-free host path, its last component not followed again. */
	char *host = ctx_host_dir(c, path);
	int fd = open(host, flags | O_NOFOLLOW);
	int rc = fd >= 0 ? fd : -errno;
	free(host);
	return rc;
}
