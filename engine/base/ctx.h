/*
 * ctx.h - the run context: options from the command line, the root, and
 * handles that live for one command. Created by main(), released there.
 *
 * Paths: `root` is the sandbox root ("/" in production). Every path of a
 * manifest (prefix, profile dir) and the state/cache dirs are resolved under
 * it; rootfd is an O_RDONLY|O_DIRECTORY descriptor of it (the placement layer's
 * syncfs), -1 when not open.
 */
#ifndef TFPROV_CTX_H
#define TFPROV_CTX_H

#include "util.h"

struct state;
struct state_writer;

enum ctx_flags {
	CTX_JSON = 1 << 0,
	CTX_QUIET = 1 << 1,
	CTX_VERBOSE = 1 << 2,
	CTX_COLOR = 1 << 3,
	CTX_OFFLINE = 1 << 4,
	CTX_YES = 1 << 5,
	CTX_TTY = 1 << 6,
	CTX_NO_GPU = 1 << 7,            /* --no-gpu: provisioning without a GPU allowed */
	CTX_REQUIRE_SIG = 1 << 8,       /* --require-signature (artifact.h) */
	CTX_ALLOW_LOCAL = 1 << 9,       /* --allow-local-urls: file:// and plain-path origins */
	CTX_ALLOW_INCOMPLETE = 1 << 10, /* --allow-incomplete-lock: pip may resolve unpinned deps */
	CTX_REMOVE_UNPINNED =
	    1 << 11, /* --remove-unpinned: distributions the lock does not pin go */
};

struct ctx {
	unsigned flags;
	char *root; /* absolute, no trailing slash except "/" */
	int rootfd;
	char *state_dir; /* absolute host path */
	char *cache_dir; /* absolute host path */
	char *ca_bundle; /* NULL: system default */
	struct strvec mirrors;
	struct strvec trusted_keys; /* --trusted-key files (artifact.h) */
	int jobs;
	double lock_timeout;        /* seconds */
	struct state *st;           /* open state db, or NULL */
	struct state_writer *wlock; /* the writer lock of a writing command, or NULL */
	int changed;                /* a step changed something during this run */
};

/*
 * Host path of a root-relative absolute path ("/opt/x" -> "<root>/opt/x"),
 * resolved with chroot semantics (inroot.c): every symlink on the way is
 * followed inside the root, so the result never leads out of it. The last
 * component is not followed (a placed symlink is acted on, not its target);
 * ctx_host_dir follows it too (a base directory that callers join paths to).
 * Caller frees.
 */
char *ctx_host_path(const struct ctx *c, const char *path);
char *ctx_host_dir(const struct ctx *c, const char *path);
/*
 * Opens a root-relative path for reading (flags as open(2)'s, O_RDONLY with
 * O_DIRECTORY for a directory) with the same chroot semantics: every link on
 * the way, the last one included, is resolved inside the root, so a file
 * whose link points out of the root is read at that path under the root, or
 * not at all. The descriptor (O_CLOEXEC), or -errno.
 */
int ctx_open_in_root(const struct ctx *c, const char *path, int flags);
/* The root-relative path of a host path under the root (a pointer into it), or NULL. */
const char *ctx_rel(const struct ctx *c, const char *host);

#endif
