/*
 * wheel_record.c - what pip writes beside an installed wheel's files, once
 * they are in place: the .pyc files and scripts added to RECORD with their
 * hashes, INSTALLER, REQUESTED, direct_url.json for a direct reference, and
 * RECORD itself (finish_job, one wheel per call on the pool).
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

/* ------------------------------------------------------------ metadata */

int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void finish_job(size_t i, void *arg)
{
	struct job *j = arg;
	struct whl *w = &j->w[i];
	if (w->skip || w->why.code)
		return;
	/* The compiled files: pip records them with their hashes. */
	for (size_t k = 0; k < w->pys.n; k++) {
		const char *py = w->pys.v[k];
		const char *slash = strrchr(py, '/');
		char *pyc = xasprintf("%.*s/__pycache__/%.*s.%s.pyc", (int)(slash - py), py,
		                      (int)(strlen(slash + 1) - 3), slash + 1, j->sc->cache_tag);
		char *host = path_join(j->stage, pyc), hex[65];
		int64_t size = 0;
		if (sha256_file(host, hex, &size) == 0)
			add_record(w, pyc, hex, size);
		free(host);
		free(pyc);
	}
	char *di = path_join(w->libdir, w->distinfo);
	char *p = path_join(di, "INSTALLER");
	put_generated(j, w, p, "tfprov\n", 0644);
	free(p);
	p = path_join(di, "REQUESTED");
	put_generated(j, w, p, "", 0644);
	free(p);
	if (w->src->url) {
		json_t *ai = json_object();
		if (w->src->sha256) {
			char *h = xasprintf("sha256=%s", w->src->sha256);
			json_object_set_new(ai, "hash", json_string(h));
			json_object_set_new(ai, "hashes",
			                    json_pack("{s:s}", "sha256", w->src->sha256));
			free(h);
		}
		json_t *du = json_pack("{s:o,s:s}", "archive_info", ai, "url", w->src->url);
		char *text = json_dumps(du, JSON_COMPACT | JSON_SORT_KEYS);
		p = path_join(di, "direct_url.json");
		put_generated(j, w, p, text, 0644);
		free(p);
		free(text);
		json_decref(du);
	}
	p = path_join(di, "RECORD");
	char *rp = relpath(w->libdir, p);
	strvec_pushf(&w->records, "%s\x1f\x1f", rp);
	free(rp);
	if (w->records.n > 1)
		qsort(w->records.v, w->records.n, sizeof(*w->records.v), cmp_str);
	struct strbuf sb = STRBUF_INIT;
	for (size_t k = 0; k < w->records.n; k++) {
		char *f[3];
		char *s = w->records.v[k];
		f[0] = s;
		f[1] = strchr(f[0], '\x1f');
		*f[1]++ = '\0';
		f[2] = strchr(f[1], '\x1f');
		*f[2]++ = '\0';
		record_put_row(&sb, f[0], f[1], f[2]);
	}
	char *host = path_join(j->stage, p);
	int rc = fs_write_new(host, sb.buf ? sb.buf : "", sb.len, 0644);
	if (rc != 0)
		whl_fail(w, TF_EIO, "cannot write %s: %s", p, strerror(-rc));
	free(host);
	strbuf_release(&sb);
	free(p);
	free(di);
}
