/*
 * image_cache.c - the layer cache of `tfprov image build` (image.c): a build
 * whose inputs are those of an earlier one takes that build's layers instead
 * of applying the stack into a private root and cutting the root into layers
 * again (the apply, the venv's relocation, the .pyc files compiled again,
 * the state re-recorded, the layers written: seconds to minutes), so a warm
 * build costs about copying the stack's bytes once.
 *
 * The key is the sha256 of a text naming every input that determines the
 * stack's layers, and more (a needless miss costs time, a wrong hit a wrong
 * image):
 *  - tfprov itself: the sha256 of its own executable (/proc/self/exe), with
 *    its version and commit: any other build of tfprov misses;
 *  - the manifest: its real path and the sha256 of its bytes, of its side
 *    files as parsed (python.lock_file, pip.requirements_file), and of the
 *    knowledge base (data/compat.yaml: the pip floor, NVIDIA_REQUIRE_CUDA);
 *  - each step of the plan: its address, action and desired digest (what
 *    the step makes of the manifest: module.h);
 *  - the base: its manifest's digest (its config and every layer);
 *  - SOURCE_DATE_EPOCH (the epoch), the flags that change what is installed
 *    (--allow-incomplete-lock, --allow-local-urls), each --mirror, and
 *    whether the build runs as root;
 *  - for a venv, the interpreter it is made of (its path as found, and a
 *    sha256 of the interpreter's executable, its version, its venv and
 *    ensurepip modules and the wheels ensurepip installs): another Python
 *    on the build host misses.
 * The output options (-o, --tag, the archive or the layout) are not in it:
 * the config, manifest and index are written again at every build from the
 * current inputs by the code a build without the cache runs (milliseconds),
 * only the layers come from the cache. A build whose pip lock is not
 * complete (pip resolves from what the index serves that day) has no key.
 *
 * Under the download cache (--cache-dir), images/:
 *   sha256/<hex>      a layer, content-addressed: shared by every entry that
 *                     has it (the same CUDA in several stacks)
 *   keys/<key>.json   an entry: the layers (step, digest, size, media type),
 *                     the venvs' interpreters, the key's input text; its
 *                     mtime is its last use (the store, or a hit: one
 *                     utimensat), what `tfprov gc` prunes by (image_gc.c)
 *   lock              flock'ed: shared by a build while it reads an entry
 *                     and copies its layers out, or stores; exclusive by gc
 * Never trusted: every blob is hashed against its digest while it is copied
 * into the output (oci_blob_take), and one that is missing or does not match
 * makes the build a miss (the bad bytes moved to the cache's quarantine/, the
 * layers built and stored again). A store writes each blob and then the
 * entry by a temporary file, fsync and rename, so a killed build leaves no
 * entry that names a blob that is not there whole.
 */
#include "image_int.h"

#include "artifact.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "kb.h"
#include "python.h"
#include "spawn.h"
#include "tfprov_commit.h" /* TFPROV_COMMIT, generated at build time */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef TFPROV_VERSION
#define TFPROV_VERSION "unknown"
#endif

#define ENTRY_FORMAT 1

void image_entry_release(struct image_entry *e)
{
	for (size_t i = 0; e->ls && i < e->n; i++)
		free(e->ls[i].media_type);
	free(e->ls);
	free(e->kinds);
	strvec_release(&e->venvs);
	strvec_release(&e->pythons);
	memset(e, 0, sizeof(*e));
}

/* Lets the lookup's lock go. */
static void cache_unlock(struct image_cache *ic)
{
	if (ic->locked)
		close(ic->lock_fd);
	ic->locked = 0;
}

void image_cache_release(struct image_cache *ic)
{
	cache_unlock(ic);
	free(ic->dir);
	free(ic->entry);
	free(ic->inputs);
	why_clear(&ic->off);
	memset(ic, 0, sizeof(*ic));
}

/*
 * What of the interpreter a venv is made of goes into the venv's layer: the
 * executable (its version, the .pyc magic), the venv module (pyvenv.cfg, the
 * activate scripts), ensurepip and the wheels it installs (pip), taken as
 * pyenv.c's bundled_src takes them, hashed instead of copied (venv found,
 * not imported: it imports more than it needs here). One hex line.
 */
static const char fingerprint_src[] =
    "import ensurepip, hashlib, importlib.util, os, sys\n"
    "h = hashlib.sha256()\n"
    "def add(path, name):\n"
    "    h.update(name.encode('utf-8', 'surrogateescape') + b'\\0')\n"
    "    with open(path, 'rb') as f:\n"
    "        h.update(hashlib.sha256(f.read()).digest())\n"
    "h.update((sys.version + '\\0' + sys.implementation.cache_tag + '\\0').encode())\n"
    "exe = os.path.realpath(sys.executable)\n"
    "add(exe, exe)\n"
    "for mod in ('venv', 'ensurepip'):\n"
    "    top = os.path.dirname(importlib.util.find_spec(mod).origin)\n"
    "    for d, ds, fs in os.walk(top):\n"
    "        ds[:] = sorted(x for x in ds if x != '__pycache__')\n"
    "        for f in sorted(fs):\n"
    "            add(os.path.join(d, f), os.path.relpath(os.path.join(d, f), top))\n"
    "sys.real_prefix = getattr(sys, 'real_prefix', sys.prefix)\n"
    "def grab(args, additional_paths=None):\n"
    "    found = [p for p in (additional_paths or []) if p.endswith('.whl')]\n"
    "    for i, a in enumerate(args[:-1]):\n"
    "        if a == '--find-links':\n"
    "            found += [os.path.join(args[i + 1], f) for f in os.listdir(args[i + 1])\n"
    "                      if f.endswith('.whl')]\n"
    "    for p in sorted(found, key=os.path.basename):\n"
    "        add(p, os.path.basename(p))\n"
    "    return 0\n"
    "ensurepip._run_pip = grab\n"
    "ensurepip._bootstrap(upgrade=True, default_pip=True)\n"
    "print(h.hexdigest())\n";

/* The venv's interpreter and its fingerprint into sb. 0, or TF_EFAIL with why. */
static int add_python(struct ctx *c, const struct manifest *m, struct strbuf *sb, struct why *why)
{
	char *prefix = stack_env_prefix(m), *py = NULL;
	struct why err = {0};
	char *host = ctx_host_path(c, prefix);
	int rc = pyenv_find_python(c, m->python.version.s, m->python.interpreter.s,
	                           pyenv_for_all_users(host ? host : prefix), &py, &err);
	struct spawn_result r = {0};
	struct strvec env = STRVEC_INIT;
	if (rc != 0) {
		rc = why_fail(why, TF_EFAIL, "no interpreter for the venv");
		goto out;
	}
	spawn_env_base(&env);
	/* -S: no site (nothing of site-packages is hashed), ~30 ms less. */
	char *argv[] = {py, "-I", "-S", "-c", (char *)fingerprint_src, NULL};
	struct spawn_opts so = {.argv = argv, .envp = env.v, .timeout_s = 120};
	size_t l = 0;
	if (spawn_run(&so, &r) == 0 && r.status == 0 && r.out.buf)
		l = strcspn(r.out.buf, "\n");
	if (l != 64) {
		rc = why_fail(why, TF_EFAIL, "the venv's interpreter could not be fingerprinted");
		ev_log(c, EV_DEBUG, "image cache: %s: %s", py,
		       r.why.msg   ? r.why.msg
		       : r.err.buf ? r.err.buf
		                   : "");
		goto out;
	}
	strbuf_addf(sb, "python %s %.64s\n", py, r.out.buf);
out:
	spawn_result_release(&r);
	strvec_release(&env);
	free(host);
	free(prefix);
	free(py);
	why_clear(&err);
	return rc;
}

/* "label <path> <sha256>\n" of a file into sb. 0 or TF_EIO. */
static int add_file(struct strbuf *sb, const char *label, const char *path)
{
	char hex[65];
	int64_t size = 0;
	if (path == NULL || sha256_file(path, hex, &size) != 0)
		return TF_EIO;
	strbuf_addf(sb, "%s %s %s %lld\n", label, path, hex, (long long)size);
	return 0;
}

/* The inputs the key hashes, but for the interpreter's. 0 or TF_EIO (why). */
static int key_text(struct ctx *c, const struct manifest *m, const struct plan *p,
                    const struct oci_image *base, int64_t epoch, struct strbuf *sb, struct why *why)
{
	char real[PATH_MAX];
	strbuf_addf(sb, "tfprov image cache %d\ntfprov %s %s\n", ENTRY_FORMAT, TFPROV_VERSION,
	            TFPROV_COMMIT);
	if (add_file(sb, "exe", "/proc/self/exe") != 0)
		return why_fail(why, TF_EIO, "tfprov's own executable does not read");
	if (realpath(m->path, real) == NULL || add_file(sb, "manifest", real) != 0 ||
	    add_file(sb, "kb", compat_default_path()) != 0)
		return why_fail(why, TF_EIO, "the manifest or the knowledge base does not read");
	strbuf_addf(sb, "parsed %s lock %s requirements %s\n", m->sha256,
	            m->python.lock_file_sha256[0] ? m->python.lock_file_sha256 : "-",
	            m->pip.requirements_file_sha256[0] ? m->pip.requirements_file_sha256 : "-");
	for (size_t i = 0; i < p->n; i++)
		strbuf_addf(sb, "step %s %s %s\n", p->steps[i].addr,
		            action_name(p->steps[i].action),
		            p->steps[i].desired[0] ? p->steps[i].desired : "-");
	strbuf_addf(sb, "base %s\nepoch %lld\nflags %s%s\nroot %d\n", base->manifest.digest,
	            (long long)epoch, (c->flags & CTX_ALLOW_INCOMPLETE) ? "i" : "-",
	            (c->flags & CTX_ALLOW_LOCAL) ? "l" : "-", geteuid() == 0);
	for (size_t i = 0; i < c->mirrors.n; i++)
		strbuf_addf(sb, "mirror %s\n", c->mirrors.v[i]);
	return 0;
}

void image_cache_key(struct ctx *c, const struct manifest *m, const struct plan *p,
                     const struct oci_image *base, int64_t epoch, int no_cache,
                     struct image_cache *ic)
{
	struct strbuf sb = STRBUF_INIT;
	struct why *off = &ic->off;
	memset(ic, 0, sizeof(*ic));
	if (no_cache)
		why_fail(off, TF_EFAIL, "--no-cache");
	else if (c->cache_dir == NULL)
		why_fail(off, TF_EFAIL, "no cache directory");
	else if (m->pip.set && !m->pip.complete.v)
		why_fail(
		    off, TF_EFAIL,
		    "the pip lock is not complete: pip resolves what it leaves out at build time");
	if (!off->code)
		key_text(c, m, p, base, epoch, &sb, off);
	if (!off->code && m->python.set && m->python.manager == PYENV_VENV)
		add_python(c, m, &sb, off);
	if (off->code) {
		strbuf_release(&sb);
		return;
	}
	sha256_buf(sb.buf, sb.len, ic->key);
	ic->inputs = strbuf_detach(&sb);
	ic->dir = path_join(c->cache_dir, "images");
	ic->entry = xasprintf("%s/keys/%s.json", ic->dir, ic->key);
}

/* The index of step in names, or nnames when it is not there. */
static size_t kind_of(const char *step, const char *const *names, size_t nnames)
{
	size_t i = 0;
	while (step && i < nnames && strcmp(step, names[i]) != 0)
		i++;
	return step ? i : nnames;
}

/* An entry's JSON into e: 0, or TF_EFAIL (not an entry of this key: why). */
static int entry_parse(json_t *j, const char *key, const char *const *names, size_t nnames,
                       struct image_entry *e, struct why *why)
{
	json_t *ls = json_object_get(j, "layers"), *py = json_object_get(j, "interpreters"), *v;
	size_t i;
	if (json_integer_value(json_object_get(j, "format")) != ENTRY_FORMAT ||
	    json_string_value(json_object_get(j, "key")) == NULL ||
	    strcmp(json_string_value(json_object_get(j, "key")), key) != 0 || !json_is_array(ls) ||
	    json_array_size(ls) == 0 || json_array_size(ls) > nnames || !json_is_array(py))
		goto bad;
	e->n = json_array_size(ls);
	e->ls = xcalloc(e->n, sizeof(*e->ls));
	e->kinds = xcalloc(e->n, sizeof(*e->kinds));
	json_array_foreach(ls, i, v)
	{
		const char *d = json_string_value(json_object_get(v, "digest"));
		const char *mt = json_string_value(json_object_get(v, "mediaType"));
		json_t *size = json_object_get(v, "size");
		size_t k = kind_of(json_string_value(json_object_get(v, "step")), names, nnames);
		e->kinds[i] = (int)k;
		if (d == NULL || strncmp(d, "sha256:", 7) != 0 || !is_hex64(d + 7) || mt == NULL ||
		    !json_is_integer(size) || json_integer_value(size) < 0 || k >= nnames ||
		    (i > 0 && e->kinds[i] <= e->kinds[i - 1]))
			goto bad;
		snprintf(e->ls[i].digest, sizeof(e->ls[i].digest), "%s", d);
		e->ls[i].media_type = xstrdup(mt);
		e->ls[i].size = json_integer_value(size);
	}
	json_array_foreach(py, i, v)
	{
		const char *venv = json_string_value(json_object_get(v, "venv"));
		const char *python = json_string_value(json_object_get(v, "python"));
		if (venv == NULL || python == NULL)
			goto bad;
		strvec_push(&e->venvs, venv);
		strvec_push(&e->pythons, python);
	}
	return 0;
bad:
	return why_fail(why, TF_EFAIL, "not an entry of this key");
}

int image_cache_lock(struct ctx *c, const char *dir, int how, const char *waiting)
{
	char *p = path_join(dir, "lock");
	struct timespec nap = {0, 50 * 1000 * 1000};
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 && (errno == EACCES || errno == EROFS))
		fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW); /* flock needs no write */
	free(p);
	if (fd < 0)
		return -errno;
	while (flock(fd, how | LOCK_NB) != 0) {
		int e = errno;
		if ((e != EWOULDBLOCK && e != EINTR) || tf_interrupted) {
			close(fd);
			return tf_interrupted ? -EINTR : -e;
		}
		if (waiting)
			ev_log(c, EV_INFO, "%s", waiting);
		waiting = NULL;
		nanosleep(&nap, NULL);
	}
	return fd;
}

int image_cache_lookup(struct ctx *c, struct image_cache *ic, const char *const *names,
                       size_t nnames, struct image_entry *e)
{
	json_error_t jerr;
	struct why why = {0};
	json_t *j = NULL;
	int rc = 0;
	memset(e, 0, sizeof(*e));
	if (access(ic->dir, F_OK) != 0)
		goto out;
	/* Held until the layers are copied out: gc removes nothing of it meanwhile. */
	ic->lock_fd = image_cache_lock(c, ic->dir, LOCK_SH,
	                               "image cache: waiting for `tfprov gc` to finish with it");
	ic->locked = ic->lock_fd >= 0;
	if (!ic->locked)
		ev_log(c, EV_DEBUG, "image cache: %s/lock: %s", ic->dir, strerror(-ic->lock_fd));
	if (access(ic->entry, F_OK) != 0)
		goto out;
	j = json_load_file(ic->entry, 0, &jerr);
	if (j == NULL) {
		why_fail(&why, TF_EFAIL, "%s", jerr.text);
		goto out;
	}
	rc = entry_parse(j, ic->key, names, nnames, e, &why) == 0;
out:
	if (rc == 0) {
		ev_log(c, EV_DEBUG, "image cache: %s: %s", ic->entry,
		       why.code ? why_text(&why) : "no entry");
		image_entry_release(e);
		cache_unlock(ic);
	}
	why_clear(&why);
	json_decref(j);
	return rc;
}

/* Bad bytes kept for a human in the cache's quarantine/, as a download's are (gc
 * removes them); unlinked when they cannot be moved there. */
static void quarantine(struct ctx *c, const char *hex, const char *bad)
{
	char *q =
	    xasprintf("%s/quarantine/%s.image.%lld", c->cache_dir, hex, (long long)time(NULL));
	if (cache_init(c->cache_dir, NULL) != 0 || rename(bad, q) != 0)
		unlink(bad);
	free(q);
}

int image_cache_take(struct ctx *c, struct image_cache *ic, const struct image_entry *e,
                     const char *blobs, int link_ok, const char *const *names)
{
	struct strvec taken = STRVEC_INIT;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < e->n; i++) {
		const char *hex = e->ls[i].digest + 7;
		char *src = xasprintf("%s/sha256/%s", ic->dir, hex);
		char *dst = xasprintf("%s/sha256/%s", blobs, hex);
		struct why err = {0};
		int had = access(dst, F_OK) == 0; /* a layer of the base too */
		rc = access(src, F_OK) != 0
		         ? TF_EINTEGRITY
		         : oci_blob_take(src, blobs, e->ls[i].digest, e->ls[i].size, link_ok, &err);
		if (rc == 0 && !had)
			strvec_push(&taken, dst);
		if (rc == TF_EINTEGRITY) {
			ev_log(c, EV_WARN,
			       "image cache: the %s layer %s: %s; building the layers again",
			       names[e->kinds[i]], e->ls[i].digest,
			       err.msg ? err.msg : "missing from the cache");
			if (err.msg)
				quarantine(c, hex, src);
			rc = 1;
		} else if (rc != 0) {
			ev_log(c, EV_ERROR, "%s", why_text(&err));
		}
		why_clear(&err);
		free(src);
		free(dst);
	}
	for (size_t i = 0; rc != 0 && i < taken.n; i++)
		unlink(taken.v[i]);
	/* A hit is a use: gc keeps what was used lately. A read-only cache keeps its time. */
	if (rc == 0 && utimensat(AT_FDCWD, ic->entry, NULL, 0) != 0)
		ev_log(c, EV_DEBUG, "image cache: %s: %s", ic->entry, strerror(errno));
	cache_unlock(ic);
	strvec_release(&taken);
	return rc;
}

int image_cache_is_temp(const char *name, const char *mark, const struct stat *st, time_t now)
{
	return strstr(name, mark) != NULL && st->st_mtime <= now - 3600;
}

/* Removes what killed stores left in dir: temporary files (named with part) an hour old. */
static void sweep(const char *dir, const char *part)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	time_t now = time(NULL);
	while (d && (de = readdir(d)) != NULL) {
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && image_cache_is_temp(de->d_name, part, &st, now))
			unlinkat(dirfd(d), de->d_name, 0);
	}
	if (d)
		closedir(d);
}

/* The entry's text: its layers by step, the venvs' interpreters, the key's inputs. */
static char *entry_text(const struct image_cache *ic, const struct image_entry *e,
                        const char *const *names)
{
	json_t *ls = json_array(), *py = json_array();
	for (size_t i = 0; i < e->n; i++)
		json_array_append_new(ls, json_pack("{s:s,s:s,s:I,s:s}", "step", names[e->kinds[i]],
		                                    "digest", e->ls[i].digest, "size",
		                                    (json_int_t)e->ls[i].size, "mediaType",
		                                    e->ls[i].media_type));
	for (size_t i = 0; i < e->venvs.n && i < e->pythons.n; i++)
		json_array_append_new(
		    py, json_pack("{s:s,s:s}", "venv", e->venvs.v[i], "python", e->pythons.v[i]));
	json_t *j = json_pack("{s:i,s:s,s:o,s:o,s:s}", "format", ENTRY_FORMAT, "key", ic->key,
	                      "layers", ls, "interpreters", py, "inputs", ic->inputs);
	char *text = json_dumps(j, JSON_SORT_KEYS | JSON_INDENT(1));
	json_decref(j);
	return text;
}

void image_cache_store(struct ctx *c, const struct image_cache *ic, const struct image_entry *e,
                       const char *blobs, const char *const *names)
{
	char *sub = path_join(ic->dir, "sha256"), *keys = path_join(ic->dir, "keys");
	char *text = NULL;
	struct why err = {0};
	int lock = -1;
	int rc = cache_init(c->cache_dir, &err);
	if (rc == 0 &&
	    (mkdirs_at(AT_FDCWD, sub, 0700) != 0 || mkdirs_at(AT_FDCWD, keys, 0700) != 0)) {
		rc = why_fail(&err, TF_EIO, "%s: %s", ic->dir, strerror(errno));
	}
	/* gc waits until the entry names blobs that are there (or removes none of them). */
	if (rc == 0) {
		lock = image_cache_lock(c, ic->dir, LOCK_SH,
		                        "image cache: waiting for `tfprov gc` to finish with it");
		if (lock < 0)
			rc = why_fail(&err, lock == -EINTR ? TF_EINTR : TF_EIO, "%s/lock: %s",
			              ic->dir, strerror(-lock));
	}
	if (rc == 0) {
		sweep(sub, ".tfprov-blob-");
		sweep(keys, ".tfprov-tmp.");
	}
	for (size_t i = 0; rc == 0 && i < e->n; i++) {
		const char *hex = e->ls[i].digest + 7;
		char *have = xasprintf("%s/%s", sub, hex), got[65];
		int64_t size = -1;
		/* A blob another entry stored is kept when its bytes are still its digest's. */
		if (sha256_file(have, got, &size) != 0 || strcmp(got, hex) != 0 ||
		    size != e->ls[i].size) {
			char *src = xasprintf("%s/sha256/%s", blobs, hex);
			rc = oci_blob_take(src, ic->dir, e->ls[i].digest, e->ls[i].size, 0, &err);
			free(src);
		}
		free(have);
	}
	/* The blobs' names durable before the entry that names them. */
	int fd = rc == 0 ? open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (rc == 0 && (fd < 0 || fsync(fd) != 0)) {
		rc = why_fail(&err, TF_EIO, "%s: %s", sub, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	if (rc == 0) {
		text = entry_text(ic, e, names);
		int r = fs_write_atomic(ic->entry, text, strlen(text), 0600, 0);
		if (r != 0) {
			rc = why_fail(&err, TF_EIO, "%s: %s", ic->entry, strerror(-r));
		}
	}
	if (lock >= 0)
		close(lock);
	if (rc == 0)
		ev_log(c, EV_DEBUG, "image cache: stored %s", ic->entry);
	else
		ev_log(c, EV_WARN, "image cache: the layers were not stored: %s", why_text(&err));
	free(text);
	why_clear(&err);
	free(keys);
	free(sub);
}
