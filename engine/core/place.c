/*
 * place.c - journaled, atomic placement of files and trees (see place.h for
 * the protocol and its guarantees).
 *
 * Journal rows: (op, path, tmp, backup) with op one of
 *   stage  - a staging directory `path` was created (undo: remove it)
 *   put    - a file `path` is being written via `tmp`, old one kept at `backup`
 *   tree   - a staged tree `tmp` is being renamed to `path`, old at `backup`
 *   rm     - `path` is being removed by renaming it to `backup`
 *   mkdir  - a directory `path` was created (undo: remove it when empty)
 *   snap   - `backup` is a complete snapshot of the directory `path`
 *   gc     - committed; `backup` is garbage to delete
 *   rmdir  - committed; the directory `path` goes when empty
 * Undo never touches a path that the files table says is recorded, except to
 * restore a backup over it, so an undo can never delete committed work.
 *
 * This file is the txn itself; a tree shared by several stacks is placed by
 * place_share.c and journal rows are undone by place_recover.c, both on the
 * insides in private/place_txn.h.
 */
#include "place.h"
#include "place_txn.h"
#include "fs.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "state.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct pending_file {
	struct state_file f;
};

/* Notes a placement (path borrowed until the txn ends) for the commit to report. */
void txn_said_add(struct txn *t, enum ev_kind kind, const char *what, const char *path,
                  uint64_t count, int replaced)
{
	t->said = xrealloc(t->said, (t->nsaid + 1) * sizeof(*t->said));
	t->said[t->nsaid++] = (struct event){
	    .kind = kind,
	    .level = EV_DEBUG,
	    .place = {.path = xstrdup(path), .what = what, .count = count, .replaced = replaced}};
}

/* Notes that a removal left `count` paths under `path` to the other stacks that record them. */
static void said_shared(struct txn *t, const char *path, uint64_t count, const char *stack)
{
	t->said = xrealloc(t->said, (t->nsaid + 1) * sizeof(*t->said));
	t->said[t->nsaid++] =
	    (struct event){.kind = EV_KEPT,
	                   .level = EV_INFO,
	                   .place = {.path = xstrdup(path),
	                             .count = count,
	                             .why = xasprintf("%llu path%s still used by stack '%s'",
	                                              (unsigned long long)count,
	                                              count == 1 ? "" : "s", stack ? stack : "?")}};
}

/* After the commit: every placement of the txn as an event; then they are gone. */
static void said_flush(struct txn *t, int emit)
{
	for (size_t i = 0; i < t->nsaid; i++) {
		t->said[i].step = t->addr;
		if (emit)
			ev_emit(t->c, &t->said[i]);
		free((char *)t->said[i].place.path);
		free((char *)t->said[i].place.why);
	}
	free(t->said);
	t->said = NULL;
	t->nsaid = 0;
}

/*
 * Remembers the filesystem of the directory that holds `path` (root-relative),
 * so the commit syncs every filesystem the txn wrote to (a prefix may be a
 * mount of its own under the root), not only the root's.
 */
static void note_fs(struct txn *t, const char *path)
{
	char *host = ctx_host_path(t->c, path);
	char *slash = strrchr(host, '/');
	if (slash && slash != host)
		*slash = '\0';
	struct stat st;
	if (stat(host, &st) == 0) {
		for (size_t i = 0; i < t->ndevs; i++)
			if (t->devs[i] == st.st_dev)
				goto out;
		t->devs = xrealloc(t->devs, (t->ndevs + 1) * sizeof(*t->devs));
		t->devs[t->ndevs++] = st.st_dev;
		strvec_push(&t->syncdirs, host);
	}
out:
	free(host);
}

/* Writes the journal's intent row before the change it describes. 0 or TF_ESTATE. */
int txn_journal_add(struct txn *t, const char *op, const char *path, const char *tmp,
                    const char *backup)
{
	int64_t id = 0;
	state_journal_add(t->c->st, op, path, tmp, backup, &id);
	if (id) {
		if (t->njids == t->capj) {
			t->capj = t->capj ? t->capj * 2 : 16;
			t->jids = xrealloc(t->jids, t->capj * sizeof(*t->jids));
		}
		t->jids[t->njids++] = id;
		strvec_push(&t->jpaths, path);
		note_fs(t, path);
	}
	return id ? 0 : TF_ESTATE;
}

int txn_fail(struct txn *t, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	why_vfail(&t->why, rc, fmt, ap);
	va_end(ap);
	return rc;
}

struct why *txn_why(struct txn *t)
{
	return &t->why;
}

int place_exists(const char *host)
{
	struct stat st;
	return lstat(host, &st) == 0;
}

int txn_begin(struct ctx *c, int64_t stack_id, const char *addr, const char *kind, struct txn **out)
{
	struct txn *t = xcalloc(1, sizeof(*t));
	t->c = c;
	t->stack_id = stack_id;
	t->addr = xstrdup(addr);
	t->kind = xstrdup(kind);
	t->res_id = -1;
	*out = t;
	return 0;
}

void txn_add_record(struct txn *t, const struct state_file *f)
{
	if (t->nadds == t->capa) {
		t->capa = t->capa ? t->capa * 2 : 64;
		t->adds = xrealloc(t->adds, t->capa * sizeof(*t->adds));
	}
	struct state_file *d = &t->adds[t->nadds++];
	*d = *f;
	d->path = xstrdup(f->path);
	d->link = f->link ? xstrdup(f->link) : NULL;
}

/* This txn's resource as recorded before it (0: a new one); asked of the store once. */
int64_t txn_my_resource(struct txn *t)
{
	struct state_resource r;
	if (t->res_id >= 0)
		return t->res_id;
	t->res_id = 0;
	if (state_resource_get(t->c->st, t->stack_id, t->addr, &r) == 0) {
		t->res_id = r.id;
		state_resource_release(&r);
	}
	return t->res_id;
}

/* Who owns path: 0 nobody, 1 this resource (or this txn), 2 someone else only. */
static int owner_class(struct txn *t, const char *path)
{
	/* A path this txn has recorded already (a tree it built) is its own. */
	for (size_t i = t->nadds; i-- > 0;)
		if (strcmp(t->adds[i].path, path) == 0)
			return 1;
	if (state_file_owner(t->c->st, path) == 0)
		return 0;
	int64_t mine = txn_my_resource(t);
	return mine && state_file_recorded_by(t->c->st, path, mine) ? 1 : 2;
}

/*
 * 1 when a resource other than this txn's records path (a file stacks
 * share); the first such stack's name is kept in *stack (malloc'd) when
 * stack is not NULL and *stack is still NULL.
 */
static int shared_with_others(struct txn *t, const char *path, char **stack)
{
	struct state_file o;
	char *who = NULL;
	if (state_file_other(t->c->st, path, txn_my_resource(t), &o, &who) != 0)
		return 0;
	free(o.path);
	free(o.link);
	if (stack && *stack == NULL && o.resource_id)
		*stack = who;
	else
		free(who);
	return o.resource_id != 0;
}

char *txn_sibling(struct txn *t, const char *host, const char *tag)
{
	const char *slash = strrchr(host, '/');
	size_t dl = slash ? (size_t)(slash - host) : 0;
	return xasprintf("%.*s/.tfprov-%s-%ld-%u-%s", (int)dl, host, tag, (long)getpid(), t->seq++,
	                 slash ? slash + 1 : host);
}

void place_stat_record(struct state_file *f, const char *host)
{
	struct stat st;
	if (lstat(host, &st) == 0) {
		f->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
		if (f->size < 0)
			f->size = st.st_size;
	}
}

/*
 * Before writing `path`: it must be absent or placed by this resource (a
 * foreign file is a conflict, reported before any write), and its missing
 * parent directories are created, journaled so that an abort removes them.
 */
static int claim_path(struct txn *t, const char *path, const char *host)
{
	int oc = owner_class(t, path);
	if (place_exists(host) && oc != 1)
		return txn_fail(t, TF_ECONFLICT, "%s exists and %s", path,
		                oc == 0 ? "was not placed by tfprov (move it away, or remove it)"
		                        : "belongs to another tfprov resource");
	return txn_mkdirs_journaled(t, path);
}

int txn_will_create(struct txn *t, const char *path)
{
	char *host = ctx_host_path(t->c, path);
	char *backup = NULL;
	int rc = claim_path(t, path, host);
	if (rc == 0 && place_exists(host))
		backup = txn_sibling(t, host, "bak");
	if (rc == 0 && txn_journal_add(t, "tree", path, NULL, backup) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
	else if (rc == 0 && backup && rename(host, backup) != 0)
		rc = txn_fail(t, TF_EIO, "cannot move %s aside: %s", path, strerror(errno));
	free(backup);
	free(host);
	return rc;
}

int txn_put_file(struct txn *t, const char *path, const void *data, size_t len, unsigned mode)
{
	char *host = ctx_host_path(t->c, path);
	char *tmp = NULL, *backup = NULL;
	int fd = -1, rc = 0;
	if ((rc = claim_path(t, path, host)) != 0)
		goto out;
	tmp = txn_sibling(t, host, "tmp");
	backup = place_exists(host) ? txn_sibling(t, host, "bak") : NULL;
	if (txn_journal_add(t, "put", path, tmp, backup) != 0) {
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal: %s", state_errmsg(t->c->st));
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
	if (fd < 0) {
		rc = txn_fail(t, tf_err_from_errno(-errno), "cannot create %s: %s", tmp,
		              strerror(errno));
		goto out;
	}
	int werr = fs_write_all(fd, data, len);
	if (werr != 0) {
		rc = txn_fail(t, tf_err_from_errno(werr), "cannot write %s: %s", path,
		              strerror(-werr));
		goto out;
	}
	if (fchmod(fd, mode & 07777) != 0 || fsync(fd) != 0) {
		rc = txn_fail(t, TF_EIO, "cannot sync %s: %s", path, strerror(errno));
		goto out;
	}
	close(fd);
	fd = -1;
	if (backup && rename(host, backup) != 0) {
		rc = txn_fail(t, TF_EIO, "cannot move %s aside: %s", path, strerror(errno));
		goto out;
	}
	if (rename(tmp, host) != 0) {
		rc = txn_fail(t, TF_EIO, "cannot rename into %s: %s", path, strerror(errno));
		goto out;
	}
	struct state_file f;
	memset(&f, 0, sizeof(f));
	f.path = (char *)path;
	f.type = 'f';
	f.size = (int64_t)len;
	f.mode = mode & 07777;
	sha256_buf(data, len, f.sha256);
	place_stat_record(&f, host);
	txn_add_record(t, &f);
	txn_said_add(t, EV_PLACED, "file", path, 1, backup != NULL);
out:
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	}
	free(host);
	free(tmp);
	free(backup);
	return rc;
}

static void record_entries(struct txn *t, const char *path, const struct place_entry *e, size_t n,
                           int with_dirs)
{
	for (size_t i = 0; i < n; i++) {
		if (e[i].type == 'd' && !with_dirs)
			continue;
		struct state_file f;
		memset(&f, 0, sizeof(f));
		f.path = path_join(path, e[i].path);
		f.type = e[i].type == 'h' ? 'f' : e[i].type;
		if (e[i].sha256)
			snprintf(f.sha256, sizeof(f.sha256), "%s", e[i].sha256);
		f.size = e[i].type == 'f' || e[i].type == 'h' ? e[i].size : 0;
		f.mode = e[i].mode;
		f.link = (char *)e[i].link;
		char *host = ctx_host_path(t->c, f.path);
		place_stat_record(&f, host);
		free(host);
		txn_add_record(t, &f);
		free(f.path);
	}
}

/* Whether some record lies under directory `dir` (an unrecorded parent tfprov created). */
static int state_dir_has_records(struct ctx *c, const char *dir)
{
	int found = 0;
	state_file_any_under(c->st, dir, &found);
	return found;
}

void place_foreign(struct ctx *c, const char *dir, place_owned_fn owned, void *arg,
                   struct strvec *out)
{
	char *host = ctx_host_dir(c, dir);
	DIR *d = opendir(host);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *p = path_join(dir, e->d_name);
		char *hp = ctx_host_path(c, p);
		struct stat st;
		int isdir = lstat(hp, &st) == 0 && S_ISDIR(st.st_mode);
		int o = owned ? owned(arg, p) : 0;
		if (state_file_owner(c->st, p) != 0 || o == PLACE_OWNED) {
			if (isdir) /* placed by tfprov: what is inside may not be */
				place_foreign(c, p, owned, arg, out);
		} else if (isdir && (o == PLACE_OWNS_BELOW || state_dir_has_records(c, p)))
			place_foreign(c, p, owned, arg, out);
		else
			strvec_pushf(out, "%s%s", p, isdir ? "/" : "");
		free(hp);
		free(p);
	}
	if (d)
		closedir(d);
	free(host);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void place_foreign_dirs(struct ctx *c, const struct strvec *dirs, place_owned_fn owned, void *arg,
                        struct strvec *out)
{
	/* Sorted, a directory comes before what it holds: only the top ones are walked. */
	char **v = xcalloc(dirs->n + 1, sizeof(*v));
	if (dirs->n) /* an empty strvec has no array: memcpy from NULL is undefined */
		memcpy(v, dirs->v, dirs->n * sizeof(*v));
	qsort(v, dirs->n, sizeof(*v), cmp_str);
	struct strvec tops = STRVEC_INIT;
	for (size_t i = 0; i < dirs->n; i++) {
		int inside = 0;
		for (size_t k = 0; k < tops.n && !inside; k++) {
			size_t tl = strlen(tops.v[k]);
			inside = strncmp(v[i], tops.v[k], tl) == 0 && v[i][tl] == '/';
		}
		if (!inside && (tops.n == 0 || strcmp(tops.v[tops.n - 1], v[i]) != 0)) {
			strvec_push(&tops, v[i]);
			place_foreign(c, v[i], owned, arg, out);
		}
	}
	strvec_release(&tops);
	free(v);
}

int txn_put_tree(struct txn *t, const char *staged, const char *path,
                 const struct place_entry *entries, size_t n)
{
	char *host = ctx_host_path(t->c, path);
	char *backup = NULL;
	int rc = 0;
	if ((rc = claim_path(t, path, host)) != 0)
		goto out;
	/*
	 * Replacing a tree moves the old one away whole: anything in it that
	 * tfprov did not place would go with it. Refuse, naming it, before any
	 * change; the user moves it out (or keeps the old tree).
	 */
	struct strvec foreign = STRVEC_INIT;
	if (place_exists(host))
		place_foreign(t->c, path, NULL, NULL, &foreign);
	if (foreign.n) {
		struct strbuf sb = STRBUF_INIT;
		for (size_t i = 0; i < foreign.n; i++)
			strbuf_addf(&sb, "%s%s", i ? ", " : "", foreign.v[i]);
		rc = txn_fail(
		    t, TF_ECONFLICT,
		    "%s holds what tfprov did not place (%s); replacing the tree would lose "
		    "it: move it elsewhere, then apply again",
		    path, sb.buf);
		strbuf_release(&sb);
		strvec_release(&foreign);
		goto out;
	}
	backup = place_exists(host) ? txn_sibling(t, host, "bak") : NULL;
	if (txn_journal_add(t, "tree", path, staged, backup) != 0) {
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
		goto out;
	}
	if (backup) {
		if (rename(host, backup) != 0) {
			rc = txn_fail(t, TF_EIO, "cannot move %s aside: %s", path, strerror(errno));
			goto out;
		}
		/* Forget the old records; the new tree's are added below. */
		strvec_push(&t->dels, path);
	}
	if (rename(staged, host) != 0) {
		rc = txn_fail(t, TF_EIO, "cannot rename the staged tree into %s: %s", path,
		              strerror(errno));
		goto out;
	}
	struct place_entry root = {"", 'd', NULL, 0, 0755, NULL};
	struct state_file f;
	memset(&f, 0, sizeof(f));
	f.path = (char *)path;
	f.type = 'd';
	f.mode = root.mode;
	place_stat_record(&f, host);
	txn_add_record(t, &f);
	record_entries(t, path, entries, n, 1);
	txn_said_add(t, EV_PLACED, "tree", path, n, backup != NULL);
out:
	free(host);
	free(backup);
	return rc;
}

int txn_replace_dir(struct txn *t, const char *staged, const char *path)
{
	char *host = ctx_host_path(t->c, path);
	char *backup = txn_sibling(t, host, "bak");
	struct stat st;
	int rc = 0, existed = 1;
	if (lstat(host, &st) != 0 && errno == ENOENT) {
		existed = 0;
		/* Nothing there yet: the staged tree is renamed in, journaled. */
		if ((rc = claim_path(t, path, host)) == 0 &&
		    txn_journal_add(t, "tree", path, staged, NULL) != 0)
			rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
		else if (rc == 0 && rename(staged, host) != 0)
			rc = txn_fail(t, TF_EIO, "cannot rename the staged tree into %s: %s", path,
			              strerror(errno));
	} else if (!S_ISDIR(st.st_mode) || owner_class(t, path) == 0)
		rc = txn_fail(t, TF_ECONFLICT, "%s is not a directory tfprov placed", path);
	else if (txn_journal_add(t, "tree", path, staged, backup) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
	else if (rename(host, backup) != 0)
		rc = txn_fail(t, TF_EIO, "cannot move %s aside: %s", path, strerror(errno));
	else if (rename(staged, host) != 0)
		rc = txn_fail(t, TF_EIO, "cannot rename the staged tree into %s: %s", path,
		              strerror(errno));
	if (rc == 0)
		txn_said_add(t, EV_PLACED, "tree", path, 0, existed);
	free(host);
	free(backup);
	return rc;
}

int place_collect_cb(const struct state_file *f, void *arg)
{
	struct collect *c = arg;
	strvec_push(&c->paths, f->path);
	char ty[2] = {f->type, 0};
	strvec_push(&c->types, ty);
	return 0;
}

int txn_remove(struct txn *t, const char *path)
{
	char *host = ctx_host_path(t->c, path);
	char *backup = NULL;
	int rc = 0;
	if (!place_exists(host)) {
		strvec_push(&t->dels, path);
		goto out;
	}
	backup = txn_sibling(t, host, "del");
	if (txn_journal_add(t, "rm", path, NULL, backup) != 0) {
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
		goto out;
	}
	if (rename(host, backup) != 0) {
		rc = txn_fail(t, TF_EIO, "cannot remove %s: %s", path, strerror(errno));
		goto out;
	}
	strvec_push(&t->dels, path);
	txn_said_add(t, EV_REMOVED, NULL, path, 1, 0);
out:
	free(host);
	free(backup);
	return rc;
}

/* The shortest of paths and dirs: the top of what a removal takes. */
static const char *top_path(const struct strvec *paths, const struct strvec *dirs)
{
	const char *top = paths->n ? paths->v[0] : dirs->v[0];
	for (size_t i = 1; i < paths->n; i++)
		if (strlen(paths->v[i]) < strlen(top))
			top = paths->v[i];
	for (size_t i = 0; dirs && i < dirs->n; i++)
		if (strlen(dirs->v[i]) < strlen(top))
			top = dirs->v[i];
	return top;
}

int txn_remove_paths(struct txn *t, const struct strvec *paths, const struct strvec *dirs)
{
	struct state *st = t->c->st;
	struct strvec backups = STRVEC_INIT;
	int rc = 0;
	/* Pass 1: every intent in one SQLite transaction, before any rename. */
	/*
	 * A path another resource also records (a CUDA prefix two stacks
	 * share) stays on disk: only this resource's record of it goes.
	 */
	size_t nshared = 0;
	char *keep = xcalloc(paths->n + 1, 1), *sharer = NULL;
	for (size_t i = 0; i < paths->n; i++)
		if (shared_with_others(t, paths->v[i], &sharer)) {
			keep[i] = 1;
			nshared++;
			strvec_push(&t->releases, paths->v[i]);
		}
	if (state_begin(st) != 0) {
		free(keep);
		free(sharer);
		return txn_fail(t, TF_ESTATE, "cannot write the journal: %s", state_errmsg(st));
	}
	for (size_t i = 0; i < paths->n && rc == 0; i++) {
		char *host = ctx_host_path(t->c, paths->v[i]);
		char *bak = !keep[i] && place_exists(host) ? txn_sibling(t, host, "del") : NULL;
		if (bak && txn_journal_add(t, "rm", paths->v[i], NULL, bak) != 0)
			rc = txn_fail(t, TF_ESTATE, "cannot write the journal: %s",
			              state_errmsg(st));
		strvec_push(&backups, bak ? bak : "");
		free(bak);
		free(host);
	}
	if (rc == 0 && state_commit(st) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal: %s", state_errmsg(st));
	if (rc != 0) {
		state_rollback(st);
		t->njids = 0;
		strvec_release(&backups);
		free(keep);
		free(sharer);
		return rc;
	}
	/* Pass 2: each file is renamed aside; the commit deletes the backups. */
	for (size_t i = 0; i < paths->n && rc == 0; i++) {
		char *host = ctx_host_path(t->c, paths->v[i]);
		if (keep[i])
			; /* released at the commit, left on disk */
		else if (backups.v[i][0] && rename(host, backups.v[i]) != 0)
			rc = txn_fail(t, TF_EIO, "cannot remove %s: %s", paths->v[i],
			              strerror(errno));
		else
			strvec_push(&t->dels, paths->v[i]);
		free(host);
	}
	for (size_t i = 0; dirs && i < dirs->n; i++) {
		if (shared_with_others(t, dirs->v[i], &sharer)) {
			strvec_push(&t->releases, dirs->v[i]);
			nshared++;
		} else {
			strvec_push(&t->rmdirs, dirs->v[i]);
		}
	}
	strvec_release(&backups);
	free(keep);
	if (rc == 0 && paths->n > nshared)
		txn_said_add(t, EV_REMOVED, NULL, top_path(paths, dirs), paths->n - nshared, 0);
	if (rc == 0 && nshared)
		said_shared(t, top_path(paths, dirs), nshared, sharer);
	free(sharer);
	return rc;
}

int txn_remove_outside(struct txn *t, const char *keep)
{
	int64_t mine = txn_my_resource(t);
	if (mine == 0)
		return 0;
	struct collect col = {STRVEC_INIT, STRVEC_INIT};
	struct strvec files = STRVEC_INIT, dirs = STRVEC_INIT;
	state_files_foreach(t->c->st, mine, place_collect_cb, &col);
	size_t kl = strlen(keep);
	for (size_t i = 0; i < col.paths.n; i++) {
		const char *p = col.paths.v[i];
		if (strncmp(p, keep, kl) == 0 && (p[kl] == '\0' || p[kl] == '/'))
			continue;
		strvec_push(col.types.v[i][0] == 'd' ? &dirs : &files, p);
	}
	int rc = files.n || dirs.n ? txn_remove_paths(t, &files, &dirs) : 0;
	strvec_release(&files);
	strvec_release(&dirs);
	strvec_release(&col.paths);
	strvec_release(&col.types);
	return rc;
}

int txn_remove_all(struct txn *t)
{
	struct state_resource r;
	if (state_resource_get(t->c->st, t->stack_id, t->addr, &r) != 0)
		return 0;
	struct collect col = {STRVEC_INIT, STRVEC_INIT};
	struct strvec files = STRVEC_INIT, dirs = STRVEC_INIT;
	state_files_foreach(t->c->st, r.id, place_collect_cb, &col);
	/* Files and links one by one; a directory only once nothing is left in it. */
	for (size_t i = 0; i < col.paths.n; i++)
		strvec_push(col.types.v[i][0] == 'd' ? &dirs : &files, col.paths.v[i]);
	int rc = txn_remove_paths(t, &files, &dirs);
	strvec_release(&files);
	strvec_release(&dirs);
	strvec_release(&col.paths);
	strvec_release(&col.types);
	state_resource_release(&r);
	return rc;
}

int64_t txn_stack_id(const struct txn *t)
{
	return t->stack_id;
}

const struct strvec *txn_kept(const struct txn *t)
{
	return &t->kept;
}

int place_path_desc(const void *a, const void *b)
{
	return strcmp(*(char *const *)b, *(char *const *)a);
}

/*
 * After the commit: the directories of removed records go, deepest first,
 * each only when empty (rmdir); one that still holds something keeps it,
 * and what it holds is listed in t->kept. A kill before this point leaves
 * empty directories, never a lost file.
 */
static void remove_dirs(struct txn *t)
{
	if (t->rmdirs.n == 0)
		return;
	if (t->rmdirs.n > 1)
		qsort(t->rmdirs.v, t->rmdirs.n, sizeof(char *), place_path_desc);
	for (size_t i = 0; i < t->rmdirs.n; i++) {
		if (i && strcmp(t->rmdirs.v[i], t->rmdirs.v[i - 1]) == 0)
			continue;
		char *host = ctx_host_path(t->c, t->rmdirs.v[i]);
		if (rmdir(host) != 0 && (errno == ENOTEMPTY || errno == EEXIST)) {
			DIR *d = opendir(host);
			struct dirent *e;
			while (d && (e = readdir(d)) != NULL) {
				if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
					continue;
				char *p = path_join(t->rmdirs.v[i], e->d_name);
				int tried = 0;
				for (size_t k = 0; k < i && !tried; k++)
					tried = strcmp(t->rmdirs.v[k], p) == 0;
				if (!tried && state_file_owner(t->c->st, p) == 0)
					strvec_pushf(&t->kept, "%s%s", p,
					             e->d_type == DT_DIR ? "/" : "");
				free(p);
			}
			if (d)
				closedir(d);
		}
		free(host);
	}
}

int txn_record_tree(struct txn *t, const char *path, const struct place_entry *entries, size_t n)
{
	/*
	 * Only a tree this txn journaled (built in a journaled stage or in a
	 * journaled path) or one this resource placed before: a tree built
	 * where the journal cannot undo it is never recorded.
	 */
	int known = 0;
	size_t pl = strlen(path);
	for (size_t i = 0; i < t->jpaths.n && !known; i++)
		known = strcmp(t->jpaths.v[i], path) == 0 ||
		        (strncmp(t->jpaths.v[i], path, pl) == 0 && t->jpaths.v[i][pl] == '/');
	if (!known && owner_class(t, path) != 1)
		return txn_fail(t, TF_ECONFLICT,
		                "%s was not built through the journal: refusing to record it",
		                path);
	struct state_file f;
	memset(&f, 0, sizeof(f));
	f.path = (char *)path;
	f.type = 'd';
	f.mode = 0755;
	char *host = ctx_host_path(t->c, path);
	place_stat_record(&f, host);
	free(host);
	txn_add_record(t, &f);
	record_entries(t, path, entries, n, 1);
	txn_said_add(t, EV_PLACED, "tree", path, n, 0);
	return 0;
}

int txn_forget_all(struct txn *t)
{
	t->forget_all = 1;
	return 0;
}

int txn_refresh_resource(struct txn *t, const char *addr)
{
	strvec_push(&t->refresh, addr);
	return 0;
}

/*
 * Inside the commit's SQLite transaction: the recorded files of resource
 * `addr` of this stack are re-read (missing ones forgotten, changed ones
 * rehashed), so the records change with the txn or not at all.
 */
static int refresh_now(struct txn *t, const char *addr)
{
	struct state *st = t->c->st;
	struct state_resource r;
	struct collect col = {STRVEC_INIT, STRVEC_INIT};
	int rc = 0;
	if (state_resource_get(st, t->stack_id, addr, &r) != 0)
		return 0;
	state_files_foreach(st, r.id, place_collect_cb, &col);
	for (size_t i = 0; i < col.paths.n && rc == 0; i++) {
		char *host = ctx_host_path(t->c, col.paths.v[i]);
		struct stat sb;
		if (lstat(host, &sb) != 0) {
			rc = state_file_release(st, r.id, col.paths.v[i]);
		} else if (col.types.v[i][0] == 'f') {
			struct state_file f;
			memset(&f, 0, sizeof(f));
			f.path = col.paths.v[i];
			f.type = 'f';
			f.mode = sb.st_mode & 07777;
			f.size = -1;
			int64_t size = 0;
			sha256_file(host, f.sha256, &size);
			f.size = size;
			place_stat_record(&f, host);
			rc = state_file_put(st, r.id, &f);
		}
		free(host);
	}
	strvec_release(&col.paths);
	strvec_release(&col.types);
	state_resource_release(&r);
	return rc;
}

/* fsync of the directory that holds host: its entries (a removal) are durable. 0 or -errno. */
int place_sync_parent(const char *host)
{
	char *dir = xstrndup(host, (size_t)(strrchr(host, '/') - host));
	int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = fd < 0 || fsync(fd) != 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

static void gc_rows(struct state *st)
{
	struct state_journal_entry *v = NULL;
	size_t n = 0;
	state_journal_list(st, "gc", &v, &n);
	for (size_t i = 0; i < n; i++)
		if (v[i].backup)
			fs_rmtree(v[i].backup);
	for (size_t i = 0; i < n; i++) {
		/*
		 * A row goes only once its backup's removal is durable: a power cut
		 * would otherwise keep the backup and lose the row that names it
		 * (test_power_loss.py). A row kept is removed by the next recovery.
		 */
		if (v[i].backup && place_sync_parent(v[i].backup) != 0)
			continue;
		state_journal_delete(st, v[i].id);
	}
	state_journal_free(v, n);
}

static int path_asc(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int sync_one(struct txn *t, int fd, const char *what)
{
	if (syncfs(fd) != 0)
		return txn_fail(t, tf_err_from_errno(-errno),
		                "cannot make %s durable (syncfs): %s; nothing was recorded", what,
		                strerror(errno));
	return 0;
}

static int sync_all(struct txn *t)
{
	int rc = 0;
	struct stat st;
	dev_t rootdev = 0;
	if (t->c->rootfd >= 0) {
		rc = sync_one(t, t->c->rootfd, t->c->root);
		if (rc == 0 && fstat(t->c->rootfd, &st) == 0)
			rootdev = st.st_dev;
	} else {
		int fd = open(t->c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return txn_fail(t, TF_EIO, "cannot open %s to make it durable: %s",
			                t->c->root, strerror(errno));
		rc = sync_one(t, fd, t->c->root);
		if (rc == 0 && fstat(fd, &st) == 0)
			rootdev = st.st_dev;
		close(fd);
	}
	for (size_t i = 0; i < t->syncdirs.n && rc == 0; i++) {
		if (t->devs[i] == rootdev)
			continue;
		int fd = open(t->syncdirs.v[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue; /* removed since (a stage): nothing of it is recorded */
		rc = sync_one(t, fd, t->syncdirs.v[i]);
		close(fd);
	}
	return rc;
}

int txn_commit(struct txn *t, const char *desired, const char *attrs)
{
	struct state *st = t->c->st;
	int rc = 0;
	/*
	 * One syncfs per filesystem written to makes every staged byte and
	 * rename durable (no per-file fsync) before the records say so. A
	 * failure commits nothing: the caller aborts and the journal undoes.
	 */
	if ((rc = sync_all(t)) != 0)
		return rc;
	if (state_begin(st) != 0)
		return txn_fail(t, TF_ESTATE, "cannot begin: %s", state_errmsg(st));
	int64_t rid = 0;
	if (desired) {
		rid = state_resource_put(st, t->stack_id, t->addr, t->kind, desired, attrs);
		if (rid == 0) {
			rc = txn_fail(t, TF_ESTATE, "cannot record the resource: %s",
			              state_errmsg(st));
			goto out;
		}
	}
	if (t->forget_all && rid)
		rc = state_files_delete(st, rid);
	for (size_t i = 0; i < t->dels.n && rc == 0; i++)
		rc = state_file_delete_tree(st, t->dels.v[i]);
	for (size_t i = 0; i < t->rmdirs.n && rc == 0; i++)
		rc = state_file_delete(st, t->rmdirs.v[i]);
	if (t->releases.n && rc == 0) {
		int64_t me = rid ? rid : txn_my_resource(t);
		for (size_t i = 0; i < t->releases.n && rc == 0; i++)
			rc = state_file_release(st, me, t->releases.v[i]);
	}
	for (size_t i = 0; i < t->nadds && rc == 0; i++)
		rc = state_file_put(st, rid, &t->adds[i]);
	for (size_t i = 0; i < t->refresh.n && rc == 0; i++)
		rc = refresh_now(t, t->refresh.v[i]);
	if (rc == 0 && !desired) {
		struct state_resource r;
		if (state_resource_get(st, t->stack_id, t->addr, &r) == 0) {
			rc = state_resource_delete(st, r.id);
			state_resource_release(&r);
		}
	}
	/* The directories to remove once empty, journaled with the commit: a kill
	 * after it leaves them to the next run's recovery, not to nobody. */
	if (rc == 0 && t->rmdirs.n > 1)
		qsort(t->rmdirs.v, t->rmdirs.n, sizeof(char *), path_asc);
	for (size_t i = 0; i < t->rmdirs.n && rc == 0; i++)
		if (state_journal_add(st, "rmdir", t->rmdirs.v[i], NULL, NULL, NULL) != 0)
			rc = txn_fail(t, TF_ESTATE, "cannot write the journal: %s",
			              state_errmsg(st));
	for (size_t i = 0; i < t->njids && rc == 0; i++)
		rc = state_journal_settle(st, t->jids[i]);
out:
	if (rc == 0 && state_commit(st) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot commit: %s", state_errmsg(st));
	if (rc != 0) {
		state_rollback(st);
		return rc;
	}
	t->njids = 0;
	gc_rows(st);
	remove_dirs(t);
	said_flush(t, 1);
	if (t->rmdirs.n)
		state_journal_clear(st, "rmdir");
	return 0;
}

void txn_abort(struct txn *t)
{
	if (t == NULL)
		return;
	struct state *st = t->c->st;
	for (size_t i = t->njids; i-- > 0;) {
		struct state_journal_entry e;
		state_journal_get(st, t->jids[i], &e);
		if (e.id)
			place_undo_row(t->c, e.op, e.path, e.tmp, e.backup);
		state_journal_entry_release(&e);
		state_journal_delete(st, t->jids[i]);
	}
	free(t->jids);
	for (size_t i = 0; i < t->nadds; i++) {
		free(t->adds[i].path);
		free(t->adds[i].link);
	}
	free(t->adds);
	strvec_release(&t->dels);
	strvec_release(&t->rmdirs);
	strvec_release(&t->kept);
	strvec_release(&t->jpaths);
	strvec_release(&t->syncdirs);
	strvec_release(&t->refresh);
	strvec_release(&t->releases);
	said_flush(t, 0);
	free(t->devs);
	free(t->addr);
	free(t->kind);
	why_clear(&t->why);
	free(t);
}

/*
 * Creates the missing directories above a root-relative path, journaling
 * each one first ('mkdir'), so that an aborted step leaves no empty
 * directories behind (undo removes them if still empty). The parent is
 * resolved inside the root first (a symlinked /opt leads to where it points
 * in the root); the directories journaled are the resolved ones.
 */
int txn_mkdirs_journaled(struct txn *t, const char *path)
{
	const char *slash = strrchr(path, '/');
	if (slash == NULL || slash == path)
		return 0;
	char *parent = xstrndup(path, (size_t)(slash - path));
	char *host = ctx_host_dir(t->c, parent);
	const char *rel = ctx_rel(t->c, host);
	char *p = rel ? xstrdup(rel) : NULL;
	int rc = p ? 0 : txn_fail(t, TF_EIO, "%s leads out of the root", parent);
	for (char *s = p ? p + 1 : NULL; s && rc == 0; s++) {
		char saved = *s;
		if (saved != '/' && saved != '\0')
			continue;
		*s = '\0';
		char *h = ctx_host_path(t->c, p);
		struct stat st;
		if (lstat(h, &st) != 0) {
			if (txn_journal_add(t, "mkdir", p, NULL, NULL) != 0)
				rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
			else if (mkdir(h, 0755) != 0 && errno != EEXIST)
				rc =
				    txn_fail(t, TF_EIO, "cannot create %s: %s", p, strerror(errno));
		}
		free(h);
		*s = saved;
		if (saved == '\0')
			break;
	}
	free(p);
	free(host);
	free(parent);
	return rc;
}

int txn_stage_dir(struct txn *t, const char *near_path, char **host_out)
{
	int rc = txn_mkdirs_journaled(t, near_path);
	if (rc != 0)
		return rc;
	char *host = ctx_host_path(t->c, near_path);
	char *dir = xstrndup(host, (size_t)(strrchr(host, '/') - host));
	char *stage = txn_sibling(t, host, "stage");
	const char *rel = ctx_rel(t->c, stage);
	int jr = rel ? txn_journal_add(t, "stage", rel, NULL, NULL) : TF_ESTATE;
	free(dir);
	free(host);
	if (jr != 0) {
		free(stage);
		return txn_fail(t, TF_ESTATE, "cannot write the journal");
	}
	*host_out = stage;
	return 0;
}

int place_is_owned(struct ctx *c, const char *path)
{
	return c->st != NULL && state_file_owner(c->st, path) != 0;
}

int place_foreign_step_file(struct ctx *c, const char *addr, const char *stack, const char *prefix,
                            char **other_stack, char **path)
{
	*other_stack = *path = NULL;
	if (c->st == NULL)
		return 0;
	return state_foreign_step_file_under(c->st, addr, stack, prefix, other_stack, path);
}

int txn_snapshot_dir(struct txn *t, const char *path, char **snap_out)
{
	char *host = ctx_host_path(t->c, path);
	char *snap = txn_sibling(t, host, "snap");
	char *mark = path_join(snap, PLACE_SNAP_MARK);
	const char *rel = ctx_rel(t->c, snap);
	int rc = 0, e;
	/* A kill while the links are made: the stage row removes the partial tree. */
	if (rel == NULL || txn_journal_add(t, "stage", rel, NULL, NULL) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
	else if ((e = fs_link_tree(host, snap)) != 0)
		rc =
		    txn_fail(t, tf_err_from_errno(e), "cannot snapshot %s: %s", path, strerror(-e));
	else if ((e = fs_write_atomic(mark, "", 0, 0600, FS_NO_REPLACE)) != 0)
		rc = txn_fail(t, tf_err_from_errno(e), "cannot write %s: %s", mark, strerror(-e));
	/* Durable before the row that names it: a power cut must not leave a
	 * row that swaps half a snapshot in. */
	else if ((rc = sync_all(t)) != 0)
		;
	else if (txn_journal_add(t, "snap", path, NULL, snap) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
	free(host);
	free(mark);
	if (rc != 0) {
		free(snap);
		return rc;
	}
	*snap_out = snap;
	return 0;
}

int place_sharers(struct ctx *c, const char *addr, const char *stack, const char *prefix,
                  struct strvec *stacks, struct strvec *desired, struct strvec *attrs)
{
	if (c->st == NULL)
		return 0;
	return state_sharers_under(c->st, addr, state_stack_id(c->st, stack), prefix, stacks,
	                           desired, attrs);
}
