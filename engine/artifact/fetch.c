/*
 * fetch.c - the downloader: one libcurl multi handle, N transfers at once.
 *
 * Invariants:
 *  1. Bytes go to <cache>/partial/<hex>.part and are hashed in the write
 *     callback; the .part is renamed into sha256/ only after size and hash
 *     matched, so a final cache path never holds unverified bytes.
 *  2. The hash context of a transfer always covers exactly the first `got`
 *     bytes of its .part. Resuming re-hashes the existing prefix once; a
 *     server that ignores Range (200 instead of 206, or a Content-Range that
 *     starts elsewhere) truncates the file and restarts the hash.
 *  3. Content is addressed by sha256, so a .part may be resumed from any
 *     source (mirror or origin): they must all serve the same bytes.
 *  4. A size or hash mismatch is never retried from another source: the
 *     bytes are quarantined and the item fails with TF_EINTEGRITY (exit 5).
 *     Network trouble (connect errors, 5xx, 429, stalls, short reads) is
 *     retried with exponential backoff and resumed; 4xx moves on to the next
 *     source; a host with too many errors is skipped for the rest of the run.
 *  5. With CTX_OFFLINE no curl handle is ever created.
 *  6. One writer per artifact, across processes too (several roots may share
 *     one cache): a download or copy runs only while its xfer holds an
 *     exclusive flock on the .part file that is at the .part path (the lock
 *     is checked to be on the file still there after it is won, because the
 *     holder renames the .part into sha256/, or unlinks it, before letting
 *     go). An item whose .part is held by another process waits (X_WAIT)
 *     and then reads the verified result from sha256/, or, when that process
 *     failed or died, resumes its .part.
 */
#include "artifact.h"
#include "artifact_int.h"
#include "cabundle.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "util.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROGRESS_INTERVAL_NS  250000000ull
#define MAX_ATTEMPTS_PER_ITEM 30

struct source {
	char *url;    /* remote URL, or NULL for a local file */
	char *local;  /* host path of a local file, or NULL */
	char *mirror; /* the --mirror value this came from; NULL for the origin */
	char *host;   /* for per-host error counting; NULL for local */
};

struct host {
	char *name;
	int errors;
	int dead;
};

enum xstate { X_PENDING, X_ACTIVE, X_WAIT, X_DONE };

struct xfer {
	struct fetch_item *it;
	struct fetch_run *run;
	struct source *src;
	size_t nsrc, cur;
	enum xstate state;
	int attempt, total_attempts;
	uint64_t not_before;
	CURL *h;
	int fd;
	char *part;
	struct sha256 sha;
	int sha_live;
	uint64_t got;   /* bytes in the .part, all hashed */
	uint64_t start; /* offset this attempt resumed from */
	int first_write;
	int64_t cr_start; /* Content-Range start of the current response, -1 if none */
	int too_big, restart, write_errno;
	uint64_t last_progress;
	char *last_error; /* the latest network error, for the final message */
	char errbuf[CURL_ERROR_SIZE];
	int leader; /* index of an earlier item with the same sha256, or -1 */
};

struct fetch_run {
	struct ctx *c;
	const struct fetch_opts *o;
	struct host *hosts;
	size_t nhosts;
	CURLM *multi;
	int active;
};

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);
	if (v == NULL || *v == '\0')
		return def;
	char *end;
	long r = strtol(v, &end, 10);
	return *end == '\0' && r >= 0 ? r : def;
}

void fetch_opts_default(struct fetch_opts *o, const struct ctx *c)
{
	o->jobs = c && c->jobs > 0 ? c->jobs : 4;
	o->stall_seconds = env_long("TFPROV_FETCH_STALL_S", 30);
	o->low_speed_bytes = 1024;
	o->connect_timeout = 15;
	o->retries = (int)env_long("TFPROV_FETCH_RETRIES", 3);
	o->backoff_ms = env_long("TFPROV_FETCH_BACKOFF_MS", 500);
	o->host_max_errors = (int)env_long("TFPROV_FETCH_HOST_ERRORS", 3);
	o->durable = (int)env_long("TFPROV_FETCH_DURABLE", 0);
}

void fetch_item_release(struct fetch_item *it)
{
	free(it->path);
	why_clear(&it->why);
	free(it->source);
	it->path = it->source = NULL;
}

static struct host *host_get(struct fetch_run *r, const char *name)
{
	for (size_t i = 0; i < r->nhosts; i++)
		if (strcmp(r->hosts[i].name, name) == 0)
			return &r->hosts[i];
	r->hosts = xrealloc(r->hosts, (r->nhosts + 1) * sizeof(*r->hosts));
	struct host *h = &r->hosts[r->nhosts++];
	h->name = xstrdup(name);
	h->errors = 0;
	h->dead = 0;
	return h;
}

static void host_error(struct fetch_run *r, const char *name, int fatal)
{
	struct host *h = host_get(r, name);
	h->errors++;
	if (fatal || h->errors >= r->o->host_max_errors) {
		if (!h->dead)
			ev_log(r->c, EV_WARN,
			       "%s: %d errors, skipping this host for the rest of the run", h->name,
			       h->errors);
		h->dead = 1;
	}
}

static void item_fail(struct fetch_item *it, int err, char *msg)
{
	__atomic_store_n(&it->stream_failed, 1, __ATOMIC_RELEASE);
	why_clear(&it->why);
	it->why.code = err;
	it->why.msg = msg;
}

static const char *src_desc(const struct source *s)
{
	return s->url ? s->url : s->local;
}

/* "URL https://x/y (mirror https://m)" for integrity messages. */
static char *src_where(const struct source *s)
{
	if (s->mirror)
		return xasprintf("%s %s (mirror %s)", s->url ? "URL" : "file", src_desc(s),
		                 s->mirror);
	return xasprintf("%s %s", s->url ? "URL" : "file", src_desc(s));
}

static void add_source(struct xfer *x, char *url, char *local, const char *mirror)
{
	x->src = xrealloc(x->src, (x->nsrc + 1) * sizeof(*x->src));
	struct source *s = &x->src[x->nsrc++];
	s->url = url;
	s->local = local;
	s->mirror = mirror ? xstrdup(mirror) : NULL;
	s->host = url ? url_host(url) : NULL;
}

/* Mirrors first, then the origin; remote ones dropped when offline. */
static void build_sources(struct fetch_run *r, struct xfer *x)
{
	struct ctx *c = r->c;
	int offline = c->flags & CTX_OFFLINE;
	for (size_t i = 0; i < c->mirrors.n; i++) {
		const char *m = c->mirrors.v[i];
		if (url_is_remote(m)) {
			if (offline)
				continue;
			size_t len = strlen(m);
			while (len > 0 && m[len - 1] == '/')
				len--;
			char *base = url_basename(x->it->url);
			add_source(x, xasprintf("%.*s/%s", (int)len, m, base), NULL, m);
			free(base);
		} else {
			char *dir = url_local_path(m);
			if (dir == NULL)
				continue;
			char *p = mirror_dir_lookup(dir, x->it->sha256, x->it->url);
			if (p)
				add_source(x, NULL, p, m);
			free(dir);
		}
	}
	if (url_is_remote(x->it->url)) {
		if (!offline)
			add_source(x, xstrdup(x->it->url), NULL, NULL);
	} else if (c->flags & CTX_ALLOW_LOCAL) {
		char *p = url_local_path(x->it->url);
		if (p)
			add_source(x, NULL, p, NULL);
	} else {
		/* A manifest must not make tfprov copy a local file (/etc/shadow) into the cache. */
		free(x->last_error);
		x->last_error = xstrdup("file:// and plain-path URLs are refused unless "
		                        "--allow-local-urls is given (a --mirror DIR may serve the "
		                        "file)");
	}
}

static char *fmt_size(int64_t size)
{
	return size < 0 ? xstrdup("unknown") : xasprintf("%lld", (long long)size);
}

/*
 * Checks `path` (size got, digest hex) against the item; on a mismatch the
 * file is quarantined and the item failed. 0 when it matched, else TF_EINTEGRITY.
 */
static int verify_or_quarantine(struct fetch_run *r, struct xfer *x, const char *path, uint64_t got,
                                const char *hex, int more)
{
	struct fetch_item *it = x->it;
	struct source *s = &x->src[x->cur];
	int size_bad = more || (it->size >= 0 && got != (uint64_t)it->size);
	if (!size_bad && strcmp(hex, it->sha256) == 0) {
		ev_emit(r->c, &(struct event){.kind = EV_VERIFIED,
		                              .level = EV_DEBUG,
		                              .item = it->name,
		                              .art = {.sha256 = it->sha256,
		                                      .size = it->size,
		                                      .source = src_desc(s),
		                                      .mirror = s->mirror,
		                                      .bytes = got}});
		return 0;
	}

	char *q = NULL;
	int qr = cache_quarantine(r->c->cache_dir, it->sha256, path, &q);
	char *where = src_where(s);
	char *want = fmt_size(it->size);
	char *kept = qr == 0 ? xasprintf("; the bytes are kept in %s", q)
	                     : xasprintf("; quarantine failed: %s", strerror(-qr));
	char *msg;
	if (size_bad)
		msg = more ? xasprintf("%s: size mismatch from %s: expected %s bytes, the server "
		                       "sent more (wrong file or tampering)%s; expected sha256 %s",
		                       it->name, where, want, kept, it->sha256)
		           : xasprintf("%s: size mismatch from %s: expected %s bytes, got %llu "
		                       "bytes (truncated or wrong file)%s; expected sha256 %s",
		                       it->name, where, want, (unsigned long long)got, kept,
		                       it->sha256);
	else
		msg = xasprintf("%s: sha256 mismatch from %s: expected %s, got %s (size %llu "
		                "bytes matches; the content differs)%s",
		                it->name, where, it->sha256, hex, (unsigned long long)got, kept);
	item_fail(it, TF_EINTEGRITY, msg);
	char *bytes = more ? xstrdup("more") : xasprintf("%llu", (unsigned long long)got);
	ev_emit(r->c, &(struct event){.kind = EV_MISMATCH,
	                              .level = EV_ERROR,
	                              .item = it->name,
	                              .msg = msg,
	                              .art = {.sha256 = it->sha256,
	                                      .size = it->size,
	                                      .source = src_desc(s),
	                                      .mirror = s->mirror,
	                                      .bytes = got,
	                                      .check = size_bad ? "size" : "sha256",
	                                      .expected = size_bad ? want : it->sha256,
	                                      .actual = size_bad ? bytes : hex,
	                                      .quarantined = qr == 0 ? q : NULL}});
	free(bytes);
	free(kept);
	free(want);
	free(where);
	free(q);
	return TF_EINTEGRITY;
}

static void commit(struct fetch_run *r, struct xfer *x, const char *tmp, uint64_t got)
{
	char *final = NULL;
	int e = cache_commit(r->c->cache_dir, x->it->sha256, tmp, &final);
	if (e < 0) {
		item_fail(x->it, TF_EIO,
		          xasprintf("%s: cannot move %s into the cache: %s", x->it->name, tmp,
		                    strerror(-e)));
		return;
	}
	x->it->path = final;
	cache_note_hashed(final, x->it->sha256);
	x->it->source = xstrdup(src_desc(&x->src[x->cur]));
	cache_name_hint(r->c->cache_dir, x->it->sha256, x->it->url); /* gc names it */
	ev_emit(r->c, &(struct event){.kind = EV_DOWNLOAD_DONE,
	                              .level = EV_DEBUG,
	                              .item = x->it->name,
	                              .art = {.sha256 = x->it->sha256,
	                                      .size = x->it->size,
	                                      .source = x->it->source,
	                                      .mirror = x->src[x->cur].mirror,
	                                      .bytes = got,
	                                      .path = final}});
	why_clear(&x->it->why);
	__atomic_store_n(&x->it->stream_verified, 1, __ATOMIC_RELEASE);
}

/* A local source (file://, path, DIR mirror): copy with hashing, verify, commit. */
static int fetch_local(struct fetch_run *r, struct xfer *x)
{
	struct source *s = &x->src[x->cur];
	char hex[65];
	int64_t got = 0;
	char *tmp =
	    xasprintf("%s/partial/%s.copy.%d", r->c->cache_dir, x->it->sha256, (int)getpid());
	unlink(tmp);
	ev_emit(r->c, &(struct event){.kind = EV_DOWNLOAD_START,
	                              .level = EV_DEBUG,
	                              .item = x->it->name,
	                              .art = {.sha256 = x->it->sha256,
	                                      .size = x->it->size,
	                                      .source = s->local,
	                                      .mirror = s->mirror}});
	int e = copy_file_hashing(s->local, tmp, hex, &got);
	if (e == 0 && chmod(tmp, 0600) != 0)
		e = -errno;
	if (e < 0) {
		free(x->last_error);
		x->last_error = xasprintf("%s: %s", s->local, strerror(-e));
		free(tmp);
		return e; /* try the next source */
	}
	if (verify_or_quarantine(r, x, tmp, (uint64_t)got, hex, 0) == 0)
		commit(r, x, tmp, (uint64_t)got);
	free(tmp);
	x->state = X_DONE;
	return 0;
}

static size_t header_cb(char *buf, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;
	long long a;
	if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0)
		x->cr_start = -1; /* a new response (redirects send several) */
	else if (len > 14 && strncasecmp(buf, "Content-Range:", 14) == 0 &&
	         sscanf(buf + 14, " bytes %lld-", &a) == 1)
		x->cr_start = a;
	return len;
}

static void progress(struct fetch_run *r, struct xfer *x, int force)
{
	uint64_t t = now_ns();
	if (!force && t - x->last_progress < PROGRESS_INTERVAL_NS)
		return;
	x->last_progress = t;
	uint64_t total = x->it->size >= 0 ? (uint64_t)x->it->size : 0;
	ev_progress(r->c, "fetch", x->it->name, x->got, total);
}

/* Decides, at the first body byte, whether a resume really resumed. */
/* The .part was cut to `keep` bytes: a follower must start over. */
static void stream_restart(struct xfer *x, uint64_t keep)
{
	__atomic_store_n(&x->it->stream_bytes, keep, __ATOMIC_RELEASE);
	__atomic_add_fetch(&x->it->stream_restarts, 1, __ATOMIC_ACQ_REL);
}

static int check_first_write(struct xfer *x)
{
	long code = 0;
	curl_off_t clen = -1;
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &clen);
	if (x->start > 0 && (code != 206 || x->cr_start != (int64_t)x->start)) {
		/* Range ignored or answered from elsewhere: restart from byte 0. */
		if (code == 206) {
			x->restart = 1;
			return -EAGAIN;
		}
		if (ftruncate(x->fd, 0) < 0) {
			x->write_errno = errno;
			return -x->write_errno;
		}
		sha256_reset(&x->sha);
		x->got = 0;
		x->start = 0;
		stream_restart(x, 0);
	}
	if (x->it->size >= 0 && clen >= 0 && x->got + (uint64_t)clen > (uint64_t)x->it->size) {
		x->too_big = 1;
		return TF_EINTEGRITY;
	}
	return 0;
}

static size_t write_cb(char *buf, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;
	if (!x->first_write) {
		x->first_write = 1;
		if (check_first_write(x) < 0)
			return 0;
	}
	if (x->it->size >= 0 && x->got + len > (uint64_t)x->it->size) {
		x->too_big = 1;
		return 0;
	}
	for (size_t off = 0; off < len;) {
		ssize_t w = pwrite(x->fd, buf + off, len - off, (off_t)(x->got + off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			x->write_errno = errno;
			return 0;
		}
		off += (size_t)w;
	}
	sha256_update(&x->sha, buf, len);
	x->got += len;
	__atomic_store_n(&x->it->stream_bytes, x->got, __ATOMIC_RELEASE);
	progress(x->run, x, 0);
	return len;
}

/*
 * Lets go of the .part (and its lock). An empty .part still at its path is
 * removed first, while the lock is held: nothing to resume, nothing left
 * behind by a wait or a local copy.
 */
static void close_part(struct xfer *x)
{
	struct stat held, now;
	if (x->fd < 0)
		return;
	if (fstat(x->fd, &held) == 0 && held.st_size == 0 && stat(x->part, &now) == 0 &&
	    held.st_dev == now.st_dev && held.st_ino == now.st_ino)
		unlink(x->part);
	close(x->fd);
	x->fd = -1;
}

/*
 * Tries to become the one writer of this artifact: an exclusive flock on the
 * file at the .part path (created when missing). 0 or -errno; *held is 1
 * when the lock is ours (x->fd is the .part), 0 when another process holds it.
 */
static int lock_part(struct xfer *x, int *held)
{
	*held = 0;
	for (int tries = 0; tries < 100; tries++) {
		if (x->fd < 0)
			x->fd = open(x->part, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (x->fd < 0)
			return -errno;
		if (flock(x->fd, LOCK_EX | LOCK_NB) != 0) {
			if (errno == EWOULDBLOCK || errno == EINTR)
				return 0; /* keep the descriptor: try the same file again */
			int e = -errno;
			close(x->fd);
			x->fd = -1;
			return e;
		}
		struct stat st, now;
		if (fstat(x->fd, &st) == 0 && stat(x->part, &now) == 0 && st.st_dev == now.st_dev &&
		    st.st_ino == now.st_ino) {
			*held = 1;
			return 0;
		}
		/* Won a file its writer has since renamed into the cache or removed. */
		close(x->fd);
		x->fd = -1;
	}
	return 0;
}

/* Opens the .part and brings the hash up to its current length. 0 or -errno. */
static int open_part(struct fetch_run *r, struct xfer *x)
{
	struct stat st;
	if (x->fd < 0) {
		x->fd = open(x->part, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (x->fd < 0)
			return -errno;
	}
	if (fstat(x->fd, &st) < 0)
		return -errno;
	uint64_t len = (uint64_t)st.st_size;
	if (x->restart || (x->it->size >= 0 && len > (uint64_t)x->it->size)) {
		if (ftruncate(x->fd, 0) < 0)
			return -errno;
		len = 0;
		x->restart = 0;
		stream_restart(x, 0);
	}
	if (x->sha_live && x->got == len)
		return 0;
	if (x->sha_live)
		sha256_reset(&x->sha);
	else
		sha256_init(&x->sha);
	x->sha_live = 1;
	x->got = 0;
	if (len > 0) {
		uint64_t nread = 0;
		if (lseek(x->fd, 0, SEEK_SET) < 0)
			return -errno;
		int e = sha256_fd(&x->sha, x->fd, (int64_t)len, &nread);
		if (e < 0)
			return e;
		x->got = nread;
		if (nread != len && ftruncate(x->fd, (off_t)nread) < 0)
			return -errno;
		if (nread != len)
			stream_restart(x, nread);
		else
			__atomic_store_n(&x->it->stream_bytes, nread, __ATOMIC_RELEASE);
		ev_log(r->c, EV_DEBUG, "%s: resuming at byte %llu", x->it->name,
		       (unsigned long long)nread);
	}
	return 0;
}

/* Finishes a download whose .part already holds exactly size bytes. */
static void finish_part(struct fetch_run *r, struct xfer *x, int more)
{
	char hex[65];
	if (r->o->durable && fdatasync(x->fd) < 0) {
		item_fail(
		    x->it, TF_EIO,
		    xasprintf("%s: cannot sync %s: %s", x->it->name, x->part, strerror(errno)));
		goto out;
	}
	sha256_final(&x->sha, hex);
	x->sha_live = 0;
	/* Still locked: the .part leaves its path (cache or quarantine) before the lock does. */
	if (verify_or_quarantine(r, x, x->part, x->got, hex, more) == 0)
		commit(r, x, x->part, x->got);
out:
	close_part(x);
	if (x->sha_live)
		sha256_release(&x->sha);
	x->sha_live = 0;
	x->state = X_DONE;
	progress(r, x, 1);
}

static int source_usable(struct fetch_run *r, struct source *s)
{
	if (s->host == NULL)
		return 1;
	return !host_get(r, s->host)->dead;
}

static void give_up(struct fetch_run *r, struct xfer *x)
{
	struct strbuf sb = STRBUF_INIT;
	struct ctx *c = r->c;
	if (x->nsrc == 0 && (c->flags & CTX_OFFLINE)) {
		strbuf_addf(&sb, "%s (sha256 %s) is not in the cache %s", x->it->name,
		            x->it->sha256, c->cache_dir);
		if (c->mirrors.n > 0) {
			strbuf_adds(&sb, " nor in mirror");
			for (size_t i = 0; i < c->mirrors.n; i++)
				strbuf_addf(&sb, " %s", c->mirrors.v[i]);
		}
		strbuf_addf(&sb, ", and --offline forbids downloading %s", x->it->url);
		item_fail(x->it, TF_EOFFLINE, strbuf_detach(&sb));
		goto out; /* fetch_all_opts names every missing artifact in one event */
	} else {
		strbuf_addf(&sb, "%s: cannot download", x->it->name);
		if (x->nsrc == 0)
			strbuf_addf(&sb, " from %s: no usable source", x->it->url);
		for (size_t i = 0; i < x->nsrc; i++)
			strbuf_addf(&sb, "%s %s", i ? "," : " from", src_desc(&x->src[i]));
		if (x->last_error)
			strbuf_addf(&sb, ": %s", x->last_error);
		item_fail(x->it, TF_ENETWORK, strbuf_detach(&sb));
	}
	ev_emit(
	    c, &(struct event){
	           .kind = EV_DOWNLOAD_FAILED,
	           .level = EV_ERROR,
	           .item = x->it->name,
	           .msg = x->it->why.msg,
	           .art = {.sha256 = x->it->sha256, .size = x->it->size, .error = x->it->why.msg}});
out:
	if (x->part && x->got == 0)
		unlink(x->part); /* nothing to resume: leave no empty .part behind */
	close_part(x);
	if (x->sha_live)
		sha256_release(&x->sha);
	x->sha_live = 0;
	x->state = X_DONE;
}

/* Moves to the next usable source (local ones are handled at once). */
static void next_source(struct fetch_run *r, struct xfer *x)
{
	x->attempt = 0;
	x->not_before = 0;
	for (x->cur++; x->cur < x->nsrc; x->cur++) {
		struct source *s = &x->src[x->cur];
		if (!source_usable(r, s))
			continue;
		if (s->local) {
			if (fetch_local(r, x) == 0)
				return;
			continue;
		}
		return; /* remote: stays pending for the multi loop */
	}
	give_up(r, x);
}

static int start_transfer(struct fetch_run *r, struct xfer *x)
{
	struct source *s = &x->src[x->cur];
	const struct fetch_opts *o = r->o;
	int e = open_part(r, x);
	if (e < 0) {
		item_fail(x->it, tf_err_from_errno(e),
		          xasprintf("%s: cannot open %s: %s", x->it->name, x->part, strerror(-e)));
		close_part(x);
		x->state = X_DONE;
		return e;
	}
	if (x->it->size >= 0 && x->got == (uint64_t)x->it->size) {
		/* A complete .part left by an interrupted run: verify it, no network. */
		finish_part(r, x, 0);
		return 0;
	}
	CURL *h = curl_easy_init();
	if (h == NULL) {
		item_fail(x->it, TF_EFAIL, xasprintf("%s: curl_easy_init failed", x->it->name));
		x->state = X_DONE;
		return TF_EFAIL;
	}
	x->h = h;
	x->start = x->got;
	x->first_write = 0;
	x->cr_start = -1;
	x->too_big = 0;
	x->write_errno = 0;
	x->errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, s->url);
	curl_easy_setopt(h, CURLOPT_PRIVATE, x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
	https_policy(h, "http,https", r->c->ca_bundle);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, o->connect_timeout);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, o->low_speed_bytes);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, o->stall_seconds);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "tfprov/0.1");
	/*
	 * A Range header, not CURLOPT_RESUME_FROM: curl fails a resume that gets
	 * 200 (CURLE_RANGE_ERROR, before any byte), and each retry resumed again
	 * into the same answer; with a plain range the 200 body arrives and
	 * check_first_write starts the .part over.
	 */
	if (x->start > 0) {
		char range[32];
		snprintf(range, sizeof(range), "%llu-", (unsigned long long)x->start);
		curl_easy_setopt(h, CURLOPT_RANGE, range);
	}
	curl_multi_add_handle(r->multi, h);
	ev_emit(r->c, &(struct event){.kind = EV_DOWNLOAD_START,
	                              .level = EV_DEBUG,
	                              .item = x->it->name,
	                              .art = {.sha256 = x->it->sha256,
	                                      .size = x->it->size,
	                                      .source = s->url,
	                                      .mirror = s->mirror,
	                                      .offset = x->start}});
	x->state = X_ACTIVE;
	r->active++;
	x->attempt++;
	x->total_attempts++;
	return 0;
}

static int http_retriable(long code)
{
	return code >= 500 || code == 429 || code == 408 || code == 416;
}

static void transfer_done(struct fetch_run *r, struct xfer *x, CURLcode rc)
{
	struct source *s = &x->src[x->cur];
	long code = 0;
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
	curl_multi_remove_handle(r->multi, x->h);
	curl_easy_cleanup(x->h);
	x->h = NULL;
	r->active--;
	x->state = X_PENDING;

	if (x->write_errno) {
		int e = x->write_errno;
		item_fail(x->it, tf_err_from_errno(-e),
		          xasprintf("%s: cannot write %s: %s", x->it->name, x->part, strerror(e)));
		ev_emit(r->c, &(struct event){.kind = EV_DOWNLOAD_FAILED,
		                              .level = EV_ERROR,
		                              .item = x->it->name,
		                              .msg = x->it->why.msg,
		                              .art = {.sha256 = x->it->sha256,
		                                      .size = x->it->size,
		                                      .source = src_desc(s),
		                                      .error = x->it->why.msg}});
		close_part(x);
		if (x->sha_live)
			sha256_release(&x->sha);
		x->sha_live = 0;
		x->state = X_DONE;
		return;
	}
	if (x->too_big) {
		finish_part(r, x, 1);
		return;
	}
	if (rc == CURLE_OK) {
		finish_part(r, x, 0);
		return;
	}

	/* Network trouble: describe it, then retry, move on, or give up. */
	free(x->last_error);
	if (rc == CURLE_HTTP_RETURNED_ERROR)
		x->last_error = xasprintf("HTTP %ld from %s", code, s->url);
	else
		x->last_error =
		    xasprintf("%s (%s)", x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc), s->url);
	ev_emit(r->c, &(struct event){.kind = EV_DOWNLOAD_RETRY,
	                              .level = EV_WARN,
	                              .item = x->it->name,
	                              .art = {.sha256 = x->it->sha256,
	                                      .size = x->it->size,
	                                      .source = src_desc(s),
	                                      .mirror = s->mirror,
	                                      .error = x->last_error}});

	int retry = 1, fatal_host = 0;
	switch (rc) {
	case CURLE_HTTP_RETURNED_ERROR:
		retry = http_retriable(code);
		if (code == 416)
			x->restart = 1; /* our .part is longer than their file */
		break;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_COULDNT_RESOLVE_HOST:
		retry = 0;
		fatal_host = 1;
		break;
	default:
		break;
	}
	if (x->restart == 0 && rc == CURLE_WRITE_ERROR)
		x->restart = 1; /* we aborted: a 206 for the wrong range */
	int progressed = x->got > x->start;
	if (retry || fatal_host)
		host_error(r, s->host, fatal_host);
	if (progressed && x->attempt > 0)
		x->attempt--; /* a transfer that moved bytes is not a failed try */
	if (retry && x->attempt <= r->o->retries && source_usable(r, s) &&
	    x->total_attempts < MAX_ATTEMPTS_PER_ITEM) {
		uint64_t delay = (uint64_t)r->o->backoff_ms
		                 << (x->attempt > 0 ? x->attempt - 1 : 0);
		if (progressed)
			delay = 0;
		x->not_before = now_ns() + delay * 1000000ull;
		return;
	}
	next_source(r, x);
}

static int cmp_size_desc(const void *a, const void *b)
{
	const struct xfer *const *xa = a, *const *xb = b;
	int64_t sa = (*xa)->it->size, sb = (*xb)->it->size;
	return sa < sb ? 1 : sa > sb ? -1 : 0;
}

static void xfer_release(struct xfer *x)
{
	for (size_t i = 0; i < x->nsrc; i++) {
		free(x->src[i].url);
		free(x->src[i].local);
		free(x->src[i].mirror);
		free(x->src[i].host);
	}
	free(x->src);
	free(x->part);
	free(x->last_error);
	if (x->sha_live)
		sha256_release(&x->sha);
	close_part(x);
}

/* Checks the IN fields; fills it->why for a bad item. */
static int item_valid(struct fetch_item *it)
{
	if (it->sha256 == NULL || !is_hex64(it->sha256)) {
		item_fail(it, TF_EMANIFEST,
		          xasprintf("%s: sha256 must be 64 lowercase hex digits, got '%s'",
		                    it->name ? it->name : "?", it->sha256 ? it->sha256 : "(none)"));
		return 0;
	}
	for (const char *p = it->sha256; *p; p++)
		if (*p >= 'A' && *p <= 'F') {
			item_fail(it, TF_EMANIFEST,
			          xasprintf("%s: sha256 must be lowercase hex", it->name));
			return 0;
		}
	if (it->url == NULL || it->url[0] == '\0') {
		item_fail(it, TF_EMANIFEST, xasprintf("%s: no url", it->name));
		return 0;
	}
	return 1;
}

/*
 * The verified copy in the cache, if there is one: 1 when the item is done
 * (found, or failed on a size that contradicts the manifest), 0 when it must
 * be fetched (a copy that no longer hashes right is quarantined first).
 */
static int use_cached(struct ctx *c, struct xfer *x)
{
	struct fetch_item *it = x->it;
	char *p = cache_lookup(c, it->sha256);
	if (p == NULL)
		return 0;
	/*
	 * A cache hit is re-hashed before use: downloads enter the cache
	 * without an fdatasync (the step's syncfs makes them durable before the
	 * state depends on them), so a power cut can leave a name in sha256/
	 * whose bytes did not reach the disk (empty, short or wrong: quarantined
	 * and fetched again, test_power_loss.py); a cache that was tampered with
	 * is caught here too. EVP hashes ~1.5 GB/s. Only bytes that do hash to
	 * their name and differ from the manifest's size fail: the manifest's
	 * size is wrong.
	 */
	char hex[65] = "";
	int64_t got = 0;
	if (cache_was_hashed(p, it->sha256, &got) ||
	    (sha256_file(p, hex, &got) == 0 && strcmp(hex, it->sha256) == 0 &&
	     (cache_note_hashed(p, it->sha256), 1))) {
		if (it->size >= 0 && got != it->size) {
			item_fail(it, TF_EINTEGRITY,
			          xasprintf("%s: the manifest says %lld bytes but the cached "
			                    "artifact %s with sha256 %s has %lld bytes",
			                    it->name, (long long)it->size, p, it->sha256,
			                    (long long)got));
			free(p);
			x->state = X_DONE;
			return 1;
		}
		it->path = p;
		it->cached = 1;
		x->state = X_DONE;
		struct ev_art art = {.sha256 = it->sha256,
		                     .size = it->size,
		                     .source = "cache",
		                     .bytes = (uint64_t)got,
		                     .from_cache = 1,
		                     .path = p};
		ev_emit(c,
		        &(struct event){
		            .kind = EV_VERIFIED, .level = EV_DEBUG, .item = it->name, .art = art});
		ev_emit(c, &(struct event){.kind = EV_DOWNLOAD_DONE,
		                           .level = EV_DEBUG,
		                           .item = it->name,
		                           .art = art});
		__atomic_store_n(&it->stream_verified, 1, __ATOMIC_RELEASE);
		return 1;
	}
	char *q = NULL;
	cache_quarantine(c->cache_dir, it->sha256, p, &q);
	char *msg = xasprintf("cached %s did not match its sha256 (got %s); moved to %s and "
	                      "downloading it again",
	                      it->name, hex, q ? q : "quarantine");
	ev_emit(c, &(struct event){.kind = EV_MISMATCH,
	                           .level = EV_WARN,
	                           .item = it->name,
	                           .msg = msg,
	                           .art = {.sha256 = it->sha256,
	                                   .size = it->size,
	                                   .source = "cache",
	                                   .bytes = (uint64_t)got,
	                                   .check = "sha256",
	                                   .expected = it->sha256,
	                                   .actual = hex,
	                                   .quarantined = q}});
	free(msg);
	free(q);
	free(p);
	return 0;
}

/*
 * The .part is ours (lock_part): the verified result of a writer that went
 * before, or the sources in order (a local one is copied at once).
 */
static void start_fetching(struct fetch_run *r, struct xfer *x)
{
	if (use_cached(r->c, x)) {
		close_part(x);
		return;
	}
	x->state = X_PENDING;
	build_sources(r, x);
	/* Start before the first source; next_source() handles local ones now. */
	x->cur = (size_t)-1;
	next_source(r, x);
	if (x->state == X_DONE)
		close_part(x);
}

/* An item waiting for another process's download of the same artifact. */
static void poll_waiting(struct fetch_run *r, struct xfer *x)
{
	int held, e = lock_part(x, &held);
	if (e < 0) {
		item_fail(x->it, tf_err_from_errno(e),
		          xasprintf("%s: cannot open %s: %s", x->it->name, x->part, strerror(-e)));
		x->state = X_DONE;
	} else if (held) {
		start_fetching(r, x);
	}
}

static void run_multi(struct fetch_run *r, struct xfer **order, size_t n)
{
	for (;;) {
		size_t pending = 0;
		uint64_t t = now_ns(), wake = UINT64_MAX;
		if (tf_interrupted)
			break;
		for (size_t i = 0; i < n; i++) {
			struct xfer *x = order[i];
			if (x->state == X_WAIT) {
				pending++;
				poll_waiting(r, x);
				continue;
			}
			if (x->state == X_PENDING) {
				pending++;
				if (x->not_before > t) {
					if (x->not_before < wake)
						wake = x->not_before;
					continue;
				}
				if (r->active < r->o->jobs)
					start_transfer(r, x);
			}
		}
		if (pending == 0 && r->active == 0)
			break;
		int running = 0, ended = 0;
		curl_multi_perform(r->multi, &running);
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(r->multi, &left)) != NULL) {
			if (m->msg != CURLMSG_DONE)
				continue;
			struct xfer *x = NULL;
			CURLcode rc = m->data.result;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			transfer_done(r, x, rc);
			ended++;
		}
		/* A transfer ended: start the next one (or return) now, not after a wait. */
		if (ended > 0)
			continue;
		int timeout = 200;
		if (wake != UINT64_MAX) {
			uint64_t now = now_ns();
			timeout = wake > now ? (int)((wake - now) / 1000000ull) + 1 : 0;
			if (timeout > 200)
				timeout = 200;
		}
		if (r->active > 0)
			curl_multi_poll(r->multi, NULL, 0, timeout, NULL);
		else if (timeout > 0)
			usleep((useconds_t)timeout * 1000);
	}
	/* Interrupted: stop everything; .part files stay for the next run. */
	for (size_t i = 0; i < n; i++) {
		struct xfer *x = order[i];
		if (x->state == X_DONE)
			continue;
		if (x->h) {
			curl_multi_remove_handle(r->multi, x->h);
			curl_easy_cleanup(x->h);
			x->h = NULL;
		}
		close_part(x);
		item_fail(x->it, TF_EINTR, xasprintf("%s: download interrupted", x->it->name));
		x->state = X_DONE;
	}
}

/*
 * What each item needs: a second item of one sha256 follows the first (its
 * leader), a cached one is verified, the others start downloading into
 * their .part (or wait for another run that holds it). Fills order with the
 * transfers to run; returns how many.
 */
static size_t fetch_plan(struct fetch_run *r, struct xfer *xs, struct fetch_item *items, size_t n,
                         struct xfer **order)
{
	struct ctx *c = r->c;
	size_t norder = 0;
	for (size_t i = 0; i < n; i++) {
		struct xfer *x = &xs[i];
		struct fetch_item *it = x->it;
		if (!item_valid(it)) {
			x->state = X_DONE;
			continue;
		}
		for (size_t j = 0; j < i; j++)
			if (xs[j].leader < 0 && items[j].why.code == 0 &&
			    strcmp(items[j].sha256, it->sha256) == 0) {
				x->leader = (int)j;
				break;
			}
		if (x->leader >= 0) {
			x->state = X_DONE;
			continue;
		}
		if (use_cached(c, x))
			continue;
		x->part = cache_part_path(c->cache_dir, it->sha256);
		int held, e = lock_part(x, &held);
		if (e < 0) {
			item_fail(
			    it, tf_err_from_errno(e),
			    xasprintf("%s: cannot open %s: %s", it->name, x->part, strerror(-e)));
			x->state = X_DONE;
			continue;
		}
		if (!held) {
			ev_log(c, EV_INFO,
			       "%s: another tfprov run is downloading it into %s; waiting",
			       it->name, c->cache_dir);
			x->state = X_WAIT;
		} else {
			start_fetching(r, x);
		}
		if (x->state != X_DONE)
			order[norder++] = x;
	}
	return norder;
}

/* An item that followed another of the same sha256 gets its leader's outcome. */
static void fetch_followers(struct xfer *xs, struct fetch_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct xfer *x = &xs[i];
		if (x->leader < 0)
			continue;
		struct fetch_item *l = &items[x->leader];
		x->it->why.code = l->why.code;
		x->it->cached = l->cached;
		x->it->path = l->path ? xstrdup(l->path) : NULL;
		x->it->why.msg = l->why.msg ? xstrdup(l->why.msg) : NULL;
		x->it->source = l->source ? xstrdup(l->source) : NULL;
	}
}

/* --offline: one event for everything that is missing, not one per artifact. */
static void offline_report(struct ctx *c, const struct xfer *xs, const struct fetch_item *items,
                           size_t n)
{
	struct ev_missing *miss = xcalloc(n ? n : 1, sizeof(*miss));
	size_t nmiss = 0;
	for (size_t i = 0; i < n; i++)
		if (items[i].why.code == TF_EOFFLINE && xs[i].leader < 0)
			miss[nmiss++] = (struct ev_missing){.name = items[i].name,
			                                    .sha256 = items[i].sha256,
			                                    .size = items[i].size,
			                                    .url = items[i].url};
	if (nmiss)
		ev_emit(c, &(struct event){.kind = EV_OFFLINE,
		                           .level = EV_ERROR,
		                           .offline = {.missing = miss,
		                                       .n = nmiss,
		                                       .cache = c->cache_dir,
		                                       .mirrors = (const char *const *)c->mirrors.v,
		                                       .nmirrors = c->mirrors.n}});
	free(miss);
}

int fetch_all_opts(struct ctx *c, struct fetch_item *items, size_t n, const struct fetch_opts *o)
{
	struct fetch_run r = {.c = c, .o = o};
	struct xfer *xs = xcalloc(n ? n : 1, sizeof(*xs));
	struct xfer **order = xcalloc(n ? n : 1, sizeof(*order));
	size_t norder = 0;
	struct why cache_why = {0};
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		fetch_item_release(&items[i]);
		items[i].cached = 0;
		xs[i].fd = -1;
		xs[i].it = &items[i];
		xs[i].run = &r;
		xs[i].leader = -1;
	}
	if (c->cache_dir == NULL) {
		for (size_t i = 0; i < n; i++)
			item_fail(&items[i], TF_EUSAGE, xstrdup("no cache directory configured"));
		goto done;
	}
	if (cache_init(c->cache_dir, &cache_why) < 0) {
		for (size_t i = 0; i < n; i++)
			item_fail(&items[i], TF_EIO, xstrdup(why_text(&cache_why)));
		goto done;
	}

	norder = fetch_plan(&r, xs, items, n, order);

	if (norder > 0) {
		https_global_init();
		if (norder > 1)
			qsort(order, norder, sizeof(*order), cmp_size_desc);
		r.multi = curl_multi_init();
		curl_multi_setopt(r.multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o->jobs);
		run_multi(&r, order, norder);
		curl_multi_cleanup(r.multi);
	}

	fetch_followers(xs, items, n);
	offline_report(c, xs, items, n);
done:
	for (size_t i = 0; i < n; i++) {
		xfer_release(&xs[i]);
		if (ret == 0 && items[i].why.code != 0)
			ret = items[i].why.code;
	}
	for (size_t i = 0; i < r.nhosts; i++)
		free(r.hosts[i].name);
	free(r.hosts);
	free(order);
	free(xs);
	why_clear(&cache_why);
	return ret;
}

int fetch_all(struct ctx *c, struct fetch_item *items, size_t n)
{
	struct fetch_opts o;
	fetch_opts_default(&o, c);
	return fetch_all_opts(c, items, n, &o);
}
