/*
 * wheelhouse.c - the native installer's side of the pip step: a complete,
 * hash-pinned lock's wheelhouse filled without pip from a local wheel
 * directory (each wheel copied while it is hashed) and installed by wheel.c
 * through the step's txn instead of by pip install. The pip step hands it to
 * pip_install() (pip_opts.native, python.h), which runs it in pip's place:
 * either part may decline (*done = 0), and pip does that part instead.
 */
#include "python.h"
#include "python_int.h"

#include "artifact.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "manifest.h"
#include "pool.h"
#include "spawn.h"
#include "wheel.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The wheelhouse of a complete lock, installed by wheel.c when it holds only
 * wheels (*done = 1); an sdist leaves it to pip (*done = 0).
 */
static int wheelhouse_install(struct ctx *c, const char *wheels, const struct pip_req *reqs,
                              size_t n, const struct pip_opts *o, int *done, struct why *why)
{
	struct strvec files = STRVEC_INIT;
	struct wheel_src *src = NULL;
	struct wheel_stats st;
	char(*sha)[65] = NULL;
	int rc = 0;
	DIR *d = opendir(wheels);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			strvec_push(&files, de->d_name);
	if (d)
		closedir(d);
	for (size_t i = 0; i < files.n; i++)
		if (!wheel_name_ok(files.v[i]))
			goto out; /* an sdist: pip builds and installs */
	src = xcalloc(files.n + 1, sizeof(*src));
	sha = xcalloc(files.n + 1, sizeof(*sha));
	for (size_t i = 0; i < files.n; i++) {
		struct wheel_name wn;
		wheel_name_parse(files.v[i], &wn); /* each name was checked above */
		const char *nm = wn.name;
		char *path = path_join(wheels, files.v[i]);
		free(files.v[i]);
		files.v[i] = path;
		src[i].path = path;
		src[i].ahead = wheel_ahead_art(o->ahead, path);
		for (size_t k = 0; o->reinstall && k < o->reinstall->n; k++)
			src[i].reinstall |= strcmp(o->reinstall->v[k], nm) == 0;
		for (size_t k = 0; k < n; k++) {
			if (reqs[k].name == NULL || strcmp(reqs[k].name, nm) != 0)
				continue;
			src[i].req_name = reqs[k].raw_name;
			src[i].url = reqs[k].url;
			if (reqs[k].url && sha256_file(path, sha[i], NULL) == 0)
				src[i].sha256 = sha[i];
		}
		wheel_name_release(&wn);
	}
	rc = wheel_install_drop(c, o->txn, o->env_path, src, files.n, o->drop, &st, why);
	if (rc == 0) {
		*done = 1;
		ev_log(c, EV_INFO,
		       "pip: %zu wheel%s installed natively (%zu file%s), %zu already there, %zu "
		       "older version%s removed",
		       st.installed, plural_s((long long)st.installed), st.files,
		       plural_s((long long)st.files), st.skipped, st.removed,
		       plural_s((long long)st.removed));
	}
out:
	free(src);
	free(sha);
	strvec_release(&files);
	return rc;
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The tags the env's interpreter installs (pip's own list), sorted; 0 or TF_EFAIL. */
static int env_tags(struct ctx *c, const char *prefix, struct strvec *out)
{
	char *py = path_join(prefix, "bin/python");
	char *argv[] = {py, "-I", "-c",
	                "from pip._vendor.packaging.tags import sys_tags\n"
	                "print('\\n'.join(str(t) for t in sys_tags()))\n",
	                NULL};
	struct spawn_result r = {0};
	int rc = pyenv_run_python(c, argv, 120, &r);
	if (rc == 0 && r.status == 0 && r.out.buf) {
		for (char *sv = NULL, *t = strtok_r(r.out.buf, "\n", &sv); t;
		     t = strtok_r(NULL, "\n", &sv))
			strvec_push(out, t);
		if (out->n > 1)
			qsort(out->v, out->n, sizeof(*out->v), cmp_strp);
	}
	spawn_result_release(&r);
	free(py);
	return out->n ? 0 : TF_EFAIL;
}

/* Whether a wheel's python-abi-platform tags (PEP 425, "." alternatives)
 * include one of the env's. */
static int wheel_tags_ok(const struct wheel_name *wn, const struct strvec *tags)
{
	char *pys = xstrdup(wn->py);
	int ok = 0;
	for (char *s1 = NULL, *py = strtok_r(pys, ".", &s1); py && !ok;
	     py = strtok_r(NULL, ".", &s1)) {
		char *abis = xstrdup(wn->abi);
		for (char *s2 = NULL, *abi = strtok_r(abis, ".", &s2); abi && !ok;
		     abi = strtok_r(NULL, ".", &s2)) {
			char *plats = xstrdup(wn->plat);
			for (char *s3 = NULL, *pl = strtok_r(plats, ".", &s3); pl && !ok;
			     pl = strtok_r(NULL, ".", &s3)) {
				char *tag = xasprintf("%s-%s-%s", py, abi, pl);
				const char *key = tag;
				ok = bsearch(&key, tags->v, tags->n, sizeof(*tags->v), cmp_strp) !=
				     NULL;
				free(tag);
			}
			free(plats);
		}
		free(abis);
	}
	free(pys);
	return ok;
}

struct fill {
	const char *src, *dst;
	const struct pip_req *req;
	char hex[65];
	int linked; /* a verified file hard-linked in: not hashed again */
	int err;
};

static void fill_one(size_t i, void *arg)
{
	struct fill *f = &((struct fill *)arg)[i];
	int64_t size = 0;
	if (tf_interrupted)
		return;
	if (f->linked && link(f->src, f->dst) == 0)
		return;
	f->linked = 0;
	f->err = copy_file_hashing(f->src, f->dst, f->hex, &size);
}

/*
 * A complete lock's wheelhouse filled without pip from local find-links
 * directories (`--mirror DIR`): for each pin, the one wheel of its name and
 * version whose tags the env installs, copied into the wheelhouse while it is
 * hashed, so what is installed is what was hashed. A copy whose sha256 is not
 * one the pin lists is TF_EINTEGRITY naming the package. *done = 0, nothing
 * copied (pip downloads instead, and explains what it does not find), when a
 * pin is not `name==version` with hashes, has no such wheel or more than one,
 * or the env cannot say its tags.
 */
static int wheelhouse_fill(struct ctx *c, const char *prefix, const struct pip_req *reqs, size_t n,
                           const struct pip_opts *o, const char *wheels, int *done, struct why *why)
{
	struct strvec tags = STRVEC_INIT, files = STRVEC_INIT;
	struct fill *f = xcalloc(n ? n : 1, sizeof(*f));
	int rc = 0;
	*done = 0;
	for (size_t i = 0; i < n; i++)
		if (reqs[i].url || !reqs[i].version || !reqs[i].name || reqs[i].nhashes == 0)
			goto out;
	for (size_t k = 0; o->find_links && o->find_links[k]; k++) {
		DIR *d = opendir(o->find_links[k]);
		struct dirent *de;
		if (d == NULL)
			goto out;
		while ((de = readdir(d)) != NULL) {
			if (!wheel_name_ok(de->d_name))
				continue;
			char *path = path_join(o->find_links[k], de->d_name);
			strvec_push(&files, path);
			free(path);
		}
		closedir(d);
	}
	if (env_tags(c, prefix, &tags) != 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < files.n; k++) {
			struct wheel_name wn;
			int same = wheel_name_parse(strrchr(files.v[k], '/') + 1, &wn) == 0 &&
			           strcmp(wn.name, reqs[i].name) == 0 &&
			           strcmp(wn.version, reqs[i].version) == 0 &&
			           wheel_tags_ok(&wn, &tags);
			wheel_name_release(&wn);
			if (!same)
				continue;
			if (f[i].src)
				goto out; /* two candidates: pip chooses */
			f[i].src = files.v[k];
		}
		if (f[i].src == NULL)
			goto out;
		f[i].req = &reqs[i];
	}
	for (size_t i = 0; i < n; i++) {
		f[i].dst = path_join(wheels, strrchr(f[i].src, '/') + 1);
		f[i].linked = o->links_verified;
	}
	pool_run(n, c->jobs > 0 ? (size_t)c->jobs : pool_ncpu(), fill_one, f);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (f[i].err) {
			rc = why_fail(why, TF_EIO, "%s: cannot copy into the wheelhouse: %s",
			              f[i].src, strerror(-f[i].err));
			break;
		}
		int pinned = f[i].linked;
		for (size_t h = 0; h < reqs[i].nhashes && !pinned; h++)
			pinned |= strcmp(reqs[i].hashes[h], f[i].hex) == 0;
		if (!pinned) {
			rc = why_fail(
			    why, TF_EINTEGRITY,
			    "%s==%s: %s has sha256 %s, which is not a hash the lock pins for it",
			    reqs[i].raw_name, reqs[i].version, f[i].src, f[i].hex);
		}
	}
	if (rc == 0 && tf_interrupted) {
		rc = why_fail(why, TF_EINTR, "interrupted");
	}
	if (rc == 0) {
		*done = 1;
		size_t copied = 0;
		for (size_t i = 0; i < n; i++)
			copied += !f[i].linked;
		if (o->links_verified && copied)
			ev_log(c, EV_INFO,
			       "pip: %zu verified wheels linked from %s (%zu of them copied and "
			       "hashed: no hard link there)",
			       n, o->find_links[0], copied);
		else if (o->links_verified)
			ev_log(c, EV_INFO, "pip: %zu verified wheels linked from %s", n,
			       o->find_links[0]);
		else
			ev_log(c, EV_INFO,
			       "pip: %zu wheel%s copied from %s and verified (no pip download)", n,
			       plural_s((long long)n), o->find_links[0]);
	}
out:
	for (size_t i = 0; i < n; i++)
		free((char *)f[i].dst);
	free(f);
	strvec_release(&tags);
	strvec_release(&files);
	return rc;
}

const struct pip_native wheelhouse_installer = {
    .fill = wheelhouse_fill,
    .install = wheelhouse_install,
};
