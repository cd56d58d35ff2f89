/*
 * verify.c - `tfprov verify [STACK] [--deep]`: is what tfprov placed still
 * there and intact?
 *
 * Without --deep: stat every recorded file against size and mtime (fast).
 * With --deep: rehash every file and compare sha256, mode and link targets,
 * and list files found inside recorded directories that were never placed.
 * One letter per path, like `apk audit`: A added, M mode, U content (or
 * link target), X deleted. Any finding exits 8.
 */
#include "cli.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "state.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct audit {
	struct ctx *c;
	int deep;
	int findings;
	struct strvec dirs;
};

static void report(struct audit *a, char letter, const char *path, const char *why)
{
	a->findings++;
	ev_log(a->c, EV_WARN, "%c %s%s%s", letter, path, why ? "  " : "", why ? why : "");
}

static int audit_file(const struct state_file *f, void *arg)
{
	struct audit *a = arg;
	char *host = ctx_host_path(a->c, f->path);
	struct stat st;
	if (lstat(host, &st) != 0) {
		report(a, 'X', f->path, NULL);
		goto out;
	}
	if (f->type == 'd') {
		if (a->deep)
			strvec_push(&a->dirs, f->path);
		goto out;
	}
	if (f->type == 'l') {
		char buf[4096];
		ssize_t n = readlink(host, buf, sizeof(buf) - 1);
		if (n < 0 || (buf[n] = '\0', f->link && strcmp(buf, f->link) != 0))
			report(a, 'U', f->path, "symlink target changed");
		goto out;
	}
	if ((st.st_mode & 07777) != f->mode)
		report(a, 'M', f->path, NULL);
	int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
	if (!a->deep) {
		if (st.st_size != f->size || mt != f->mtime_ns)
			report(a, 'U', f->path, NULL);
		goto out;
	}
	char hex[65];
	int64_t sz;
	if (sha256_file(host, hex, &sz) != 0 || strcmp(hex, f->sha256) != 0)
		report(a, 'U', f->path, NULL);
out:
	free(host);
	return 0;
}

static void audit_dirs(struct audit *a)
{
	for (size_t i = 0; i < a->dirs.n; i++) {
		char *host = ctx_host_path(a->c, a->dirs.v[i]);
		DIR *d = opendir(host);
		struct dirent *e;
		while (d && (e = readdir(d)) != NULL) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			char *p = path_join(a->dirs.v[i], e->d_name);
			if (state_file_owner(a->c->st, p) == 0)
				report(a, 'A', p, NULL);
			free(p);
		}
		if (d)
			closedir(d);
		free(host);
	}
}

int cmd_verify(struct ctx *c, struct opts *o)
{
	if (c->st == NULL) {
		ev_log(c, EV_ERROR, "nothing to verify: no stack was applied under %s", c->root);
		return TF_EFAIL;
	}
	struct audit a = {c, o->deep, 0, STRVEC_INIT};
	sqlite3_stmt *s = NULL;
	int nstacks = 0;
	sqlite3_prepare_v2(c->st->db,
			   "SELECT r.id, s.name, r.addr FROM resources r JOIN stacks s ON "
			   "s.id = r.stack_id WHERE ?1 IS NULL OR s.name = ?1 ORDER BY s.name, r.id",
			   -1, &s, NULL);
	if (o->args.n)
		sqlite3_bind_text(s, 1, o->args.v[0], -1, SQLITE_STATIC);
	while (sqlite3_step(s) == SQLITE_ROW) {
		nstacks++;
		state_files_foreach(c->st, sqlite3_column_int64(s, 0), audit_file, &a);
	}
	sqlite3_finalize(s);
	audit_dirs(&a);
	strvec_release(&a.dirs);
	if (nstacks == 0) {
		ev_log(c, EV_ERROR, "no stack %s%s", o->args.n ? "named " : "applied",
		       o->args.n ? o->args.v[0] : "");
		return TF_EFAIL;
	}
	if (a.findings) {
		ev_log(c, EV_ERROR, "%d path%s differ from what tfprov placed; `tfprov apply` repairs "
				    "them from the cache",
		       a.findings, a.findings == 1 ? "" : "s");
		return TF_EVERIFY;
	}
	ev_log(c, EV_INFO, "All placed files are intact%s.", o->deep ? " (rehashed)" : "");
	return 0;
}
