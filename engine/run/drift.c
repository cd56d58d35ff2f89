/*
 * drift.c - has anything tfprov placed changed on disk? Every recorded file
 * of a resource is stat()ed against its recorded size, mtime and mode, the
 * rows split over threads (plan.h: drift_check).
 */
#include "plan.h"
#include "dirwalk.h"
#include "state.h"
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* One recorded file, as the drift check needs it. */
struct drift_row {
	char *path;
	char type;
	unsigned mode;
	int64_t size, mtime_ns;
};

struct drift_part {
	const struct ctx *c;
	struct drift_row *rows;
	size_t n;
	int missing, changed;
};

static void *drift_part_run(void *arg)
{
	struct drift_part *d = arg;
	struct dirwalk w;
	dirwalk_init(&w, d->c);
	for (size_t i = 0; i < d->n; i++) {
		const struct drift_row *r = &d->rows[i];
		struct stat st;
		if (dirwalk_lstat(&w, r->path, &st) != 0) {
			d->missing++;
			continue;
		}
		if (r->type != 'f')
			continue;
		int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
		if (st.st_size != r->size || mt != r->mtime_ns ||
		    (unsigned)(st.st_mode & 07777) != r->mode)
			d->changed++;
	}
	dirwalk_release(&w);
	return NULL;
}

struct drift_rows {
	struct drift_row *v;
	size_t n, cap;
};

static int drift_row_add(const struct state_file *f, void *arg)
{
	struct drift_rows *r = arg;
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 256;
		r->v = xrealloc(r->v, r->cap * sizeof(*r->v));
	}
	r->v[r->n++] = (struct drift_row){.path = xstrdup(f->path),
	                                  .type = f->type,
	                                  .mode = f->mode,
	                                  .size = f->size,
	                                  .mtime_ns = f->mtime_ns};
	return 0;
}

/*
 * Reads the records first, then stats them in two halves on two threads:
 * lstat is kernel time, and the machines this runs on have at least two
 * cores. Each half is sorted by path, so dirwalk reuses directories.
 */
int64_t drift_check(struct ctx *c, int64_t res_id, int *missing, int *changed)
{
	struct drift_rows all = {0};
	*missing = *changed = 0;
	state_files_foreach_stat(c->st, res_id, drift_row_add, &all);
	struct drift_row *rows = all.v;
	size_t n = all.n;
	struct drift_part parts[2] = {{c, rows, n / 2, 0, 0}, {c, rows + n / 2, n - n / 2, 0, 0}};
	pthread_t th;
	int threaded = n >= 2048 && pthread_create(&th, NULL, drift_part_run, &parts[0]) == 0;
	if (!threaded)
		drift_part_run(&parts[0]);
	drift_part_run(&parts[1]);
	if (threaded)
		pthread_join(th, NULL);
	*missing = parts[0].missing + parts[1].missing;
	*changed = parts[0].changed + parts[1].changed;
	for (size_t i = 0; i < n; i++)
		free(rows[i].path);
	free(rows);
	return (int64_t)n;
}
