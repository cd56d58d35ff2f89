/*
 * place_share.c - txn_share_tree (place.h): a tree that several stacks may
 * hold identically (a CUDA or cuDNN of the same version), placed once and
 * recorded by each owner, so that it goes with its last.
 *
 * Every entry is decided before anything is written (a conflict changes
 * nothing); the moves are journaled in one store transaction before the
 * first rename.
 */
#include "place_txn.h"
#include "error.h"
#include "fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether a record and a staged entry describe the same file, link or directory. */
static int same_entry(const struct state_file *r, const struct place_entry *e)
{
	char et = e->type == 'h' ? 'f' : e->type;
	if (r->type != et)
		return 0;
	if (et == 'f')
		return e->sha256 && strcmp(r->sha256, e->sha256) == 0 &&
		       (r->mode & 07777) == (e->mode & 07777);
	if (et == 'l')
		return r->link && e->link && strcmp(r->link, e->link) == 0;
	return 1;
}

/* Whether the file at host is still what record r says (the drift check's test). */
static int disk_matches(const struct state_file *r, const struct stat *sb)
{
	if (r->type == 'f')
		return S_ISREG(sb->st_mode) && sb->st_size == r->size &&
		       (int64_t)sb->st_mtim.tv_sec * 1000000000ll + sb->st_mtim.tv_nsec ==
		           r->mtime_ns &&
		       (sb->st_mode & 07777) == (r->mode & 07777);
	if (r->type == 'l')
		return S_ISLNK(sb->st_mode);
	return S_ISDIR(sb->st_mode);
}

/* Creates directory `path` (root-relative) and its missing parents, each journaled first. */
static int mkdir_journaled(struct txn *t, const char *path)
{
	int rc = txn_mkdirs_journaled(t, path);
	char *host = ctx_host_path(t->c, path);
	if (rc == 0 && !place_exists(host)) {
		if (txn_journal_add(t, "mkdir", path, NULL, NULL) != 0)
			rc = txn_fail(t, TF_ESTATE, "cannot write the journal");
		else if (mkdir(host, 0755) != 0 && errno != EEXIST)
			rc = txn_fail(t, TF_EIO, "cannot create %s: %s", path, strerror(errno));
	}
	free(host);
	return rc;
}

/* KEEP: shared as it is; PLACE, REPLACE: written; SKIP: not this resource's (a
 * directory reached through another stack's symlink); ADOPT: a top-level
 * document (LICENSE) another stack placed from its own first archive, kept and
 * shared as it is, as the archives of one stack keep their first one's. */
enum share_act { SHARE_KEEP, SHARE_PLACE, SHARE_REPLACE, SHARE_SKIP, SHARE_ADOPT };

/*
 * Pass 1 of txn_share_tree for one entry at dst: what to do, or a conflict
 * (TF_ECONFLICT, its reason appended to why). Reads only.
 */
static int share_decide(struct txn *t, int64_t mine, const char *dst, const struct place_entry *e,
                        enum share_act *act, struct strbuf *why)
{
	char *host = ctx_host_path(t->c, dst);
	struct stat sb;
	struct state_file any, other;
	char *stack = NULL;
	int rc = 0;
	memset(&any, 0, sizeof(any));
	memset(&other, 0, sizeof(other));
	*act = SHARE_PLACE;
	if (lstat(host, &sb) != 0)
		goto out;
	if (e->type == 'd') {
		struct stat tgt;
		*act = S_ISDIR(sb.st_mode) ? SHARE_KEEP
		       : S_ISLNK(sb.st_mode) && stat(host, &tgt) == 0 && S_ISDIR(tgt.st_mode)
		           ? SHARE_SKIP
		           : SHARE_PLACE;
		if (*act == SHARE_PLACE) {
			strbuf_addf(why, "%s%s is not a directory", why->len ? "; " : "", dst);
			rc = TF_ECONFLICT;
		}
		goto out;
	}
	state_file_other(t->c->st, dst, 0, &any, NULL);
	state_file_other(t->c->st, dst, mine, &other, &stack);
	int me = mine && state_file_recorded_by(t->c->st, dst, mine);
	if (any.resource_id == 0 && !me) {
		strbuf_addf(why, "%s%s exists and was not placed by tfprov", why->len ? "; " : "",
		            dst);
		rc = TF_ECONFLICT;
	} else if (other.resource_id && !same_entry(&other, e) && e->type != 'd' &&
	           strchr(e->path, '/') == NULL && other.type == 'f' && disk_matches(&other, &sb)) {
		*act = SHARE_ADOPT;
	} else if (other.resource_id && !same_entry(&other, e)) {
		strbuf_addf(why, "%s%s belongs to stack '%s' with other content",
		            why->len ? "; " : "", dst, stack ? stack : "?");
		rc = TF_ECONFLICT;
	} else {
		/* Same bytes as recorded, still on disk as recorded: nothing to write. A
		 * shared file that drifted is put back to the bytes every owner wants. */
		const struct state_file *r = other.resource_id ? &other : &any;
		*act = r->resource_id && same_entry(r, e) && disk_matches(r, &sb) ? SHARE_KEEP
		                                                                  : SHARE_REPLACE;
	}
out:
	free(any.path);
	free(any.link);
	free(other.path);
	free(other.link);
	free(stack);
	free(host);
	return rc;
}

static int cmp_cstr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * The entries with every directory that holds one of them (a merged cuDNN
 * lists its files, not always lib/ and include/), so that a shared directory
 * is recorded by each owner and goes with the last. *out is malloc'd
 * (paths of the added directories in *dirs); returns the new count.
 */
static size_t with_parents(const struct place_entry *e, size_t n, struct place_entry **out,
                           struct strvec *dirs)
{
	struct strvec have = STRVEC_INIT;
	for (size_t i = 0; i < n; i++)
		if (e[i].type == 'd')
			strvec_push(&have, e[i].path);
	for (size_t i = 0; i < n; i++) {
		char *d = xstrdup(e[i].path);
		for (char *sl = strrchr(d, '/'); sl; sl = strrchr(d, '/')) {
			*sl = '\0';
			int known = 0;
			for (size_t k = 0; k < have.n && !known; k++)
				known = strcmp(have.v[k], d) == 0;
			if (known)
				break;
			strvec_push(&have, d);
			strvec_push(dirs, d);
		}
		free(d);
	}
	*out = xcalloc(n + dirs->n + 1, sizeof(**out));
	/* The added directories first (mkdir_journaled makes any missing parent anyway). */
	for (size_t i = 0; i < dirs->n; i++)
		(*out)[i] =
		    (struct place_entry){dirs->v[dirs->n - 1 - i], 'd', NULL, 0, 0755, NULL};
	if (n)
		memcpy(*out + dirs->n, e, n * sizeof(*e));
	strvec_release(&have);
	return n + dirs->n;
}

/* One txn_share_tree: its entries (with their parents, the root last) and their fate. */
struct share {
	struct txn *t;
	int64_t mine;
	const char *staged;
	struct place_entry *e; /* n entries, then root */
	size_t n;
	struct place_entry root;
	enum share_act *act;   /* n + 1 */
	char **dst;            /* n + 1, root-relative */
	struct strvec backups; /* n: where REPLACE moves the old file, else "" */
};

static const struct place_entry *share_entry(const struct share *s, size_t i)
{
	return i < s->n ? &s->e[i] : &s->root;
}

/* Pass 1: decide every entry, before any write; a conflict stops here (the
 * first five are named). */
static int share_decide_all(struct share *s, const char *path)
{
	struct strbuf why = STRBUF_INIT;
	int rc = 0, nconf = 0, more = 0;
	for (size_t i = 0; i <= s->n && !more; i++) {
		const struct place_entry *x = share_entry(s, i);
		s->dst[i] = i < s->n ? path_join(path, x->path) : xstrdup(path);
		if (share_decide(s->t, s->mine, s->dst[i], x, &s->act[i], &why) != 0)
			more = ++nconf == 5 && i < s->n;
	}
	if (nconf)
		rc = txn_fail(s->t, TF_ECONFLICT, "%s%s: nothing was changed", why.buf,
		              more ? " (and maybe more)" : "");
	strbuf_release(&why);
	return rc;
}

/* What this resource recorded that the tree no longer holds is released. */
static int share_release_gone(struct share *s)
{
	struct collect col = {STRVEC_INIT, STRVEC_INIT};
	struct strvec relf = STRVEC_INIT, reld = STRVEC_INIT;
	size_t n = s->n;
	int rc = 0;
	if (s->mine)
		state_files_foreach(s->t->c->st, s->mine, place_collect_cb, &col);
	char **sorted = xcalloc(n + 2, sizeof(*sorted));
	memcpy(sorted, s->dst, (n + 1) * sizeof(*sorted));
	qsort(sorted, n + 1, sizeof(*sorted), cmp_cstr);
	for (size_t i = 0; i < col.paths.n; i++) {
		const char *p = col.paths.v[i];
		if (bsearch(&p, sorted, n + 1, sizeof(*sorted), cmp_cstr) == NULL)
			strvec_push(col.types.v[i][0] == 'd' ? &reld : &relf, p);
	}
	free(sorted);
	if (relf.n || reld.n)
		rc = txn_remove_paths(s->t, &relf, &reld);
	strvec_release(&relf);
	strvec_release(&reld);
	strvec_release(&col.paths);
	strvec_release(&col.types);
	return rc;
}

static int share_writes(const struct share *s, size_t i)
{
	return s->e[i].type != 'd' && (s->act[i] == SHARE_PLACE || s->act[i] == SHARE_REPLACE);
}

/* Pass 2: the missing directories, each journaled; then every file move in one
 * journal transaction. */
static int share_journal(struct share *s)
{
	struct txn *t = s->t;
	struct state *st = t->c->st;
	int rc = 0;
	for (size_t i = 0; i <= s->n && rc == 0; i++)
		if (s->act[i] == SHARE_PLACE && (i == s->n || s->e[i].type == 'd'))
			rc = mkdir_journaled(t, s->dst[i]);
	if (rc == 0 && state_begin(st) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal: %s", state_errmsg(st));
	for (size_t i = 0; i < s->n && rc == 0; i++) {
		strvec_push(&s->backups, "");
		if (!share_writes(s, i))
			continue;
		char *host = ctx_host_path(t->c, s->dst[i]);
		char *src = path_join(s->staged, s->e[i].path);
		char *bak = s->act[i] == SHARE_REPLACE ? txn_sibling(t, host, "bak") : NULL;
		if (txn_journal_add(t, "put", s->dst[i], src, bak) != 0)
			rc = txn_fail(t, TF_ESTATE, "cannot write the journal: %s",
			              state_errmsg(st));
		if (bak) {
			free(s->backups.v[i]);
			s->backups.v[i] = bak;
		}
		free(src);
		free(host);
	}
	if (rc == 0 && state_commit(st) != 0)
		rc = txn_fail(t, TF_ESTATE, "cannot write the journal: %s", state_errmsg(st));
	if (rc != 0)
		state_rollback(st);
	return rc;
}

/* The journaled moves: the old file aside, the staged one in; *placed counts them. */
static int share_move(struct share *s, size_t *placed)
{
	struct txn *t = s->t;
	int rc = 0;
	for (size_t i = 0; i < s->n && rc == 0; i++) {
		if (!share_writes(s, i))
			continue;
		const char *dst = s->dst[i];
		char *host = ctx_host_path(t->c, dst);
		char *src = path_join(s->staged, s->e[i].path);
		if ((rc = txn_mkdirs_journaled(t, dst)) != 0)
			;
		else if (s->backups.v[i][0] && rename(host, s->backups.v[i]) != 0)
			rc = txn_fail(t, TF_EIO, "cannot move %s aside: %s", dst, strerror(errno));
		else if (rename(src, host) != 0)
			rc = txn_fail(t, TF_EIO, "cannot place %s: %s", dst, strerror(errno));
		else
			(*placed)++;
		free(src);
		free(host);
	}
	return rc;
}

/* Every entry is recorded for this resource: kept, placed or replaced. */
static void share_record(struct share *s)
{
	struct state *st = s->t->c->st;
	for (size_t i = 0; i <= s->n; i++) {
		if (s->act[i] == SHARE_SKIP)
			continue;
		const struct place_entry *x = share_entry(s, i);
		struct state_file f, o;
		memset(&f, 0, sizeof(f));
		memset(&o, 0, sizeof(o));
		f.path = s->dst[i];
		f.type = x->type == 'h' ? 'f' : x->type;
		if (x->sha256)
			snprintf(f.sha256, sizeof(f.sha256), "%s", x->sha256);
		f.size = f.type == 'f' ? x->size : 0;
		f.mode = x->mode;
		f.link = (char *)x->link;
		if (s->act[i] == SHARE_ADOPT &&
		    state_file_other(st, s->dst[i], s->mine, &o, NULL) == 0 && o.resource_id) {
			memcpy(f.sha256, o.sha256, sizeof(f.sha256));
			f.size = o.size;
			f.mode = o.mode;
		}
		char *host = ctx_host_path(s->t->c, f.path);
		place_stat_record(&f, host);
		free(host);
		txn_add_record(s->t, &f);
		free(o.path);
		free(o.link);
	}
}

int txn_share_tree(struct txn *t, const char *staged, const char *path,
                   const struct place_entry *given, size_t ngiven)
{
	struct strvec implied = STRVEC_INIT;
	/* Entry n is the tree's root, recorded too, so that its last owner removes it. */
	struct share s = {.t = t,
	                  .mine = txn_my_resource(t),
	                  .staged = staged,
	                  .root = {"", 'd', NULL, 0, 0755, NULL},
	                  .backups = STRVEC_INIT};
	size_t placed = 0;
	s.n = with_parents(given, ngiven, &s.e, &implied);
	s.act = xcalloc(s.n + 1, sizeof(*s.act));
	s.dst = xcalloc(s.n + 1, sizeof(*s.dst));
	int rc = share_decide_all(&s, path);
	if (rc == 0)
		rc = share_release_gone(&s);
	if (rc == 0)
		rc = share_journal(&s);
	if (rc == 0)
		rc = share_move(&s, &placed);
	if (rc == 0) {
		share_record(&s);
		fs_rmtree(staged);
		txn_said_add(t, EV_PLACED, "share", path, placed, 0);
	}
	for (size_t i = 0; i <= s.n; i++)
		free(s.dst[i]);
	free(s.dst);
	free(s.act);
	strvec_release(&s.backups);
	strvec_release(&implied);
	free(s.e);
	return rc;
}
