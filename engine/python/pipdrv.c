/*
 * pipdrv.c - the pip driver: pip install, pip list and pip lock (the
 * resolver's report, completed with every file's hash) through the env's
 * own interpreter and pip. See python.h (pyenv) for the contract.
 *
 * Why pip_install() has two phases and a snapshot: pip with --require-hashes
 * prepares (downloads and hash-checks) every requirement before it installs
 * any, so a wrong hash already aborts before the env changes. tfprov does
 * not rely on that ordering alone: phase 1 is `pip download` into a private
 * wheelhouse (it cannot touch the env at all), and only when every file is
 * there and verified does phase 2 run `pip install --no-index --find-links
 * <wheelhouse>`. Phase 2 can still fail half-way (disk full, a broken wheel,
 * interrupted), so the env is first snapshotted as a hard-link tree, which
 * costs one link per file rather than a copy of site-packages: pip never
 * rewrites an existing file in place (it unlinks before writing, writes
 * metadata through a temporary file plus rename, and moves uninstalled files
 * aside), so the snapshot's inodes keep the old bytes. In a txn the
 * snapshot is the txn's (txn_snapshot_dir): an abort or the recovery of a
 * killed run swaps it back, journaled, and the commit deletes it.
 *
 * The pip step chooses the installer (pip_opts.native): pip, or the native
 * one it hands over (wheelhouse.c), which may fill the wheelhouse and install
 * it in pip's place. This file knows no installer but pip.
 */
#include "python.h"
#include "python_int.h"
#include "pyenv_int.h"

#include "ctx.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "fs.h"
#include "spawn.h"
#include "place.h"
#include "artifact.h"
#include "version.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIP_DEFAULT_TIMEOUT_S 3600.0

/*
 * Every sha256 of the chosen version's files for this interpreter's platform,
 * not only the one file pip picked: run with the resolver's own interpreter, it
 * asks pip's PackageFinder (the same index options; candidates filtered by this
 * interpreter's supported tags and Requires-Python) for all files of each
 * version in pip's report. Wheels when the version has any, else its sdist.
 * Hashes come from the index's #sha256= fragments, or from the bytes of a
 * find-links file. argv: report.json, then pip's index options. Prints
 * {"name": ["hex", ...]}, with "@files" {"name": [file name, ...]} of those
 * files and "@requires_python" {"name": [the index's data-requires-python of
 * them]}; on an unknown pip internal API it fails, and the lock keeps pip's
 * one hash (and file) per package with a warning.
 */
static const char hashes_src[] =
    "import hashlib, json, sys\n"
    "out = {}\n"
    "try:\n"
    "    from pip._internal.index.collector import LinkCollector\n"
    "    from pip._internal.index.package_finder import PackageFinder\n"
    "    from pip._internal.models.search_scope import SearchScope\n"
    "    from pip._internal.models.selection_prefs import SelectionPreferences\n"
    "    from pip._internal.network.session import PipSession\n"
    "except ImportError:\n"
    "    sys.exit('pip has no PackageFinder API this helper knows')\n"
    "report, args = sys.argv[1], sys.argv[2:]\n"
    "idx, links, no_index, cert = [], [], False, None\n"
    "for a in args:\n"
    "    k, _, v = a.partition('=')\n"
    "    if k == '--index-url': idx = [v]\n"
    "    elif k == '--find-links': links.append(v)\n"
    "    elif k == '--no-index': no_index = True\n"
    "    elif k == '--cert': cert = v\n"
    "if not idx and not no_index: idx = ['https://pypi.org/simple']\n"
    "s = PipSession()\n"
    "if cert: s.verify = cert\n"
    "seen = []\n"
    "def hook(r, *a, **k):\n"
    "    seen.append((r.url, r.is_redirect))\n"
    "s.hooks['response'].append(hook)\n"
    "scope = SearchScope.create(find_links=links, index_urls=[] if no_index else idx,\n"
    "                           no_index=no_index)\n"
    "f = PackageFinder.create(link_collector=LinkCollector(session=s, search_scope=scope),\n"
    "    selection_prefs=SelectionPreferences(allow_yanked=False))\n"
    "def sha(link):\n"
    "    h = getattr(link, '_hashes', None) or {}\n"
    "    if 'sha256' in h: return h['sha256']\n"
    "    if getattr(link, 'hash_name', None) == 'sha256': return link.hash\n"
    "    if link.scheme == 'file':\n"
    "        with open(link.file_path, 'rb') as fh: return hashlib.sha256(fh.read()).hexdigest()\n"
    "files, rp = {}, {}\n"
    "for it in json.load(open(report))['install']:\n"
    "    md = it['metadata']\n"
    "    c = [c for c in f.find_all_candidates(md['name']) if str(c.version) == md['version']]\n"
    "    w = [x for x in c if x.link.is_wheel] or c\n"
    "    out[md['name']] = sorted({h for h in map(lambda x: sha(x.link), w) if h})\n"
    "    files[md['name']] = sorted({x.link.filename for x in w if sha(x.link)})\n"
    "    rp[md['name']] = sorted({x.link.requires_python for x in w if x.link.requires_python})\n"
    "chains, cur = [], None\n"
    "for url, moved in seen:\n"
    "    if cur is not None: cur.append(url)\n"
    "    elif moved: cur = [url]\n"
    "    if cur is not None and not moved:\n"
    "        chains.append(cur); cur = None\n"
    "out['@redirects'] = chains\n"
    "out['@files'], out['@requires_python'] = files, rp\n"
    "print(json.dumps(out))\n";

char *pip_mirror_index(const char *mirror_url)
{
	return xasprintf("%s%ssimple/", mirror_url, str_ends_with(mirror_url, "/") ? "" : "/");
}

void pip_opts_mirror(struct pip_opts *o, const char *mirror, const char *links[2], char **simple)
{
	if (str_starts_with(mirror, "http://") || str_starts_with(mirror, "https://")) {
		o->index_url = *simple = pip_mirror_index(mirror);
	} else {
		links[0] = mirror;
		links[1] = NULL;
		o->find_links = links;
		o->no_index = 1;
	}
}

void pip_result_release(struct pip_result *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->v[i].name);
		free(r->v[i].version);
		free(r->v[i].sha256);
		free(r->v[i].stamp);
	}
	free(r->v);
	free(r->failed_pkg);
	free(r->log);
	memset(r, 0, sizeof(*r));
}

char *pip_requirements_text(const struct pip_req *reqs, size_t n)
{
	struct strbuf sb = STRBUF_INIT;
	for (size_t i = 0; i < n; i++) {
		const struct pip_req *q = &reqs[i];
		if (q->spec != NULL)
			strbuf_adds(&sb, q->spec);
		else if (q->version != NULL)
			strbuf_addf(&sb, "%s==%s", q->raw_name ? q->raw_name : q->name, q->version);
		else
			strbuf_adds(&sb, q->raw_name ? q->raw_name : q->name);
		for (size_t h = 0; h < q->nhashes; h++)
			strbuf_addf(&sb, " \\\n    --hash=sha256:%s", q->hashes[h]);
		strbuf_adds(&sb, "\n");
	}
	return strbuf_detach(&sb);
}

/* Finds the package pip blames in its stderr; sets *integrity when the
 * failure is a hash mismatch or a missing distribution. Caller frees. */
static char *pip_blame(const char *err, int *integrity, const char **what)
{
	const char *p;
	*integrity = 0;
	*what = NULL;
	if (err == NULL)
		return NULL;
	if ((p = strstr(err, "DO NOT MATCH THE HASHES")) != NULL) {
		*integrity = 1;
		*what = "hash mismatch";
		/* The next indented line: "    name==ver from URL:" */
		for (const char *l = strchr(p, '\n'); l; l = strchr(l + 1, '\n')) {
			const char *s = l + 1;
			while (*s == ' ')
				s++;
			if (*s == '\0' || strncmp(s, "Expected", 8) == 0 ||
			    strncmp(s, "Got", 3) == 0)
				continue;
			size_t n = strcspn(s, " \n:");
			if (n > 0)
				return xstrndup(s, n);
		}
		return NULL;
	}
	if ((p = strstr(err, "No matching distribution found for ")) != NULL) {
		*integrity = 1;
		*what = "no matching distribution (missing wheel)";
		p += strlen("No matching distribution found for ");
		return xstrndup(p, strcspn(p, " \n"));
	}
	if ((p = strstr(err, "Could not find a version that satisfies the requirement ")) != NULL) {
		*integrity = 1;
		*what = "no matching distribution (missing wheel)";
		p += strlen("Could not find a version that satisfies the requirement ");
		return xstrndup(p, strcspn(p, " \n"));
	}
	if (strstr(err, "Hashes are required in --require-hashes mode") != NULL ||
	    strstr(err, "In --require-hashes mode, all requirements must have their versions "
	                "pinned") != NULL) {
		*integrity = 1;
		*what = "a requirement has no pinned version or no hash";
		const char *l = strstr(err, "    ");
		if (l != NULL) {
			l += 4;
			return xstrndup(l, strcspn(l, " \n"));
		}
	}
	return NULL;
}

/* Appends the index/mirror options shared by download, install and lock. */
static void push_index_opts(struct strvec *a, const struct pip_opts *o)
{
	if (o->index_url)
		strvec_pushf(a, "--index-url=%s", o->index_url);
	for (size_t i = 0; o->find_links && o->find_links[i]; i++)
		strvec_pushf(a, "--find-links=%s", o->find_links[i]);
	if (o->no_index)
		strvec_push(a, "--no-index");
	if (!o->allow_sdist)
		strvec_push(a, "--only-binary=:all:");
	if (o->cache_dir)
		strvec_pushf(a, "--cache-dir=%s", o->cache_dir);
	else
		strvec_push(a, "--no-cache-dir");
	if (o->cert)
		strvec_pushf(a, "--cert=%s", o->cert);
}

static void push_pip(struct strvec *a, const char *prefix, const char *subcmd)
{
	strvec_pushf(a, "%s/bin/python", prefix);
	strvec_push(a, "-I");
	strvec_push(a, "-m");
	strvec_push(a, "pip");
	strvec_push(a, subcmd);
	strvec_push(a, "--isolated");
	strvec_push(a, "--disable-pip-version-check");
	strvec_push(a, "--no-input");
}

/* Runs one pip command; on a non-zero exit fills why/res and returns an error. */
static int run_pip(struct ctx *c, struct strvec *argv, const struct pip_opts *o, const char *phase,
                   struct pip_result *res, struct why *why)
{
	struct spawn_result r = {0};
	int rc = pyenv_run_python_in(
	    c, argv->v, o->timeout_s > 0 ? o->timeout_s : PIP_DEFAULT_TIMEOUT_S, o->stdin_fd, &r);
	if (rc != 0) {
		why_fail(why, rc, "pip %s: %s", phase, why_text(&r.why));
		goto out;
	}
	if (r.timed_out) {
		rc = why_fail(why, TF_EFAIL, "pip %s: timed out after %.0f s", phase, r.wall_s);
		goto out;
	}
	if (r.status != 0) {
		int integrity = 0;
		const char *what = NULL;
		char *pkg = pip_blame(r.err.buf, &integrity, &what);
		rc = integrity ? TF_EINTEGRITY : TF_EFAIL;
		if (res) {
			free(res->log);
			res->log = xstrdup(r.err.buf ? r.err.buf : "");
			free(res->failed_pkg);
			res->failed_pkg = pkg ? xstrdup(pkg) : NULL;
		}
		if (integrity)
			why_fail(why, rc, "pip %s: %s: %s", phase, pkg ? pkg : "(unknown package)",
			         what);
		else
			why_fail(why, rc, "pip %s failed (exit %d): %s", phase, r.status,
			         r.err.buf ? r.err.buf : "");
		free(pkg);
	}
out:
	spawn_result_release(&r);
	return rc;
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "wxe");
	if (f == NULL)
		return -errno;
	int rc = fputs(text, f) < 0 ? -EIO : 0;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* A build backend an sdist of a complete lock is built with (--no-build-isolation). */
static int is_build_backend(const struct pip_req *q)
{
	const char *nm = q->name ? q->name : q->raw_name;
	return nm && (strcmp(nm, "setuptools") == 0 || strcmp(nm, "wheel") == 0);
}

/* One pip download (into wheels) or offline install (from wheels) of reqfile. */
static int pip_phase(struct ctx *c, const char *prefix, const char *verb, const char *reqfile,
                     const char *wheels, const struct pip_opts *o, struct pip_result *res,
                     struct why *why)
{
	struct strvec argv = STRVEC_INIT;
	int install = strcmp(verb, "install") == 0;
	push_pip(&argv, prefix, verb);
	strvec_push(&argv, "--require-hashes");
	if (o->complete || o->resolve_rest)
		strvec_push(&argv, "--no-deps");
	if (o->allow_sdist)
		strvec_push(&argv, "--no-build-isolation");
	if (install) {
		strvec_push(&argv, "--no-index");
		strvec_pushf(&argv, "--find-links=%s", wheels);
		if (!o->allow_sdist)
			strvec_push(&argv, "--only-binary=:all:");
		strvec_push(&argv, "--no-cache-dir");
		strvec_push(&argv, "--no-warn-script-location");
		/* pip cannot reinstall only some pins of one requirements file: a
		 * repair of files changed in place reinstalls them all. */
		if (o->reinstall && o->reinstall->n)
			strvec_push(&argv, "--force-reinstall");
	} else {
		strvec_pushf(&argv, "--dest=%s", wheels);
		push_index_opts(&argv, o);
	}
	strvec_pushf(&argv, "--requirement=%s", reqfile);
	int rc = run_pip(c, &argv, o, verb, res, why);
	strvec_release(&argv);
	return rc;
}

/* The files of one pip_install run, in its private work directory. */
struct pip_work {
	char *dir;                       /* journaled in the txn, or beside the env */
	char *reqfile, *bfile, *rfile;   /* requirements: all hashed pins, backends, the rest */
	char *wheels;                    /* the wheelhouse */
	char *snap;                      /* the env's hard-link snapshot (the txn's, in one) */
	struct pip_req *backends, *rest; /* views of the caller's pins */
	size_t nb, nr;
	int snapped; /* the snapshot exists and the env may differ from it */
	int txn;     /* the snapshot is the txn's: neither restored nor removed here */
};

/*
 * A hard-link snapshot of the env before pip changes it in place. In a txn
 * the txn makes and owns it (txn_snapshot_dir): an abort or the recovery of
 * a killed run puts it back, the commit deletes it. Without one (py_tool's
 * pip-install) it is made here, beside the env, and restore_env puts it
 * back on failure.
 */
static int snapshot_env(const char *prefix, struct pip_work *w, const struct pip_opts *o,
                        int *busy_fd, struct why *why)
{
	if (o->txn) {
		int rc = txn_snapshot_dir(o->txn, o->env_path, &w->snap);
		if (rc != 0) {
			why_move(why, txn_why(o->txn));
			why_code(why, rc);
			why_prefix(why, "%s", prefix);
			return rc;
		}
	} else {
		w->snap = xasprintf("%s.tfprov-snap", prefix);
		fs_rmtree(w->snap);
		int e = fs_link_tree(prefix, w->snap);
		if (e != 0)
			return why_fail(why, TF_EIO, "%s: cannot snapshot the environment: %s",
			                prefix, strerror(-e));
	}
	w->snapped = 1;
	/* pip changes the env in place from here on: a recovery after a kill
	 * waits for a pip still dying before it swaps the snapshot back. */
	int fd = pyenv_busy_hold(prefix);
	if (fd < 0)
		return why_fail(why, TF_EIO, "%s: cannot create its busy file: %s", prefix,
		                strerror(-fd));
	*busy_fd = fd;
	return 0;
}

/* Creates the work directory: in the txn's stage when journaled, else beside the env. */
static int work_create(const char *prefix, const struct pip_opts *o, struct pip_work *w,
                       struct why *why)
{
	if (o->txn) {
		if (txn_stage_dir(o->txn, o->env_path, &w->dir) == 0 && mkdir(w->dir, 0700) != 0) {
			free(w->dir);
			w->dir = NULL;
		}
	} else {
		char *tmpl = xasprintf("%s.tfprov-pip.XXXXXX", prefix);
		if ((w->dir = mkdtemp(tmpl)) == NULL)
			free(tmpl);
	}
	if (w->dir == NULL)
		return why_fail(why, TF_EIO, "%s: cannot create a work directory: %s", prefix,
		                strerror(errno));
	w->reqfile = path_join(w->dir, "requirements.txt");
	w->bfile = path_join(w->dir, "backends.txt");
	w->rfile = path_join(w->dir, "rest.txt");
	w->wheels = path_join(w->dir, "wheels");
	w->txn = o->txn != NULL;
	return 0;
}

/* Writes the three requirement files and creates the empty wheelhouse. */
static int work_write(struct pip_work *w, const struct pip_req *reqs, size_t n,
                      const struct pip_opts *o, struct why *why)
{
	w->backends = xcalloc(n + 1, sizeof(*w->backends));
	w->rest = xcalloc(n + 1, sizeof(*w->rest));
	/* An unhashed pin (lock input, only with --allow-incomplete-lock) is left to
	 * pip's own resolve below, which names it as unhashed. */
	struct pip_req *hashed = xcalloc(n + 1, sizeof(*hashed));
	size_t nh = 0;
	for (size_t i = 0; i < n; i++)
		if (reqs[i].nhashes > 0 || !o->resolve_rest)
			hashed[nh++] = reqs[i];
	char *text = pip_requirements_text(hashed, nh);
	free(hashed);
	/* sdists build without isolation: setuptools and wheel pinned in the lock go in
	 * first, from the verified wheelhouse, so the builds find them in the env. */
	for (size_t i = 0; i < n; i++)
		if (reqs[i].nhashes == 0 && o->resolve_rest)
			continue;
		else if (o->allow_sdist && is_build_backend(&reqs[i]))
			w->backends[w->nb++] = reqs[i];
		else
			w->rest[w->nr++] = reqs[i];
	char *btext = pip_requirements_text(w->backends, w->nb);
	char *rtext = pip_requirements_text(w->rest, w->nr);
	int wrc = write_text(w->reqfile, text);
	if (wrc == 0)
		wrc = write_text(w->bfile, btext);
	if (wrc == 0)
		wrc = write_text(w->rfile, rtext);
	free(text);
	free(btext);
	free(rtext);
	if (wrc != 0 || mkdir(w->wheels, 0755) != 0)
		return why_fail(why, TF_EIO, "%s: cannot write: %s", w->dir, strerror(errno));
	return 0;
}

/* The lock's build backends, downloaded and installed before anything else. */
static int install_backends(struct ctx *c, const char *prefix, struct pip_work *w,
                            struct pip_opts *own, struct pip_result *res, struct why *why)
{
	struct pip_opts bo = *own;
	bo.allow_sdist = 0; /* the backends themselves: wheels only */
	int rc = pip_phase(c, prefix, "download", w->bfile, w->wheels, &bo, res, why);
	if (rc != 0)
		return rc;
	if ((rc = snapshot_env(prefix, w, own, &own->stdin_fd, why)) != 0)
		return rc;
	bo.stdin_fd = own->stdin_fd;
	return pip_phase(c, prefix, "install", w->bfile, w->wheels, &bo, res, why);
}

/* Phase 1: fetches and verifies every other pin into the wheelhouse; the env is not touched. */
static int fetch_rest(struct ctx *c, const char *prefix, struct pip_work *w,
                      const struct pip_opts *o, struct pip_result *res, struct why *why)
{
	int rc = 0;
	if (w->nr > 0) {
		int filled = 0;
		if (w->nb == 0 && o->native && o->txn && o->complete && o->no_index)
			rc = o->native->fill(c, prefix, w->rest, w->nr, o, w->wheels, &filled, why);
		if (rc == 0 && !filled)
			rc = pip_phase(c, prefix, "download", w->rfile, w->wheels, o, res, why);
	}
	if (rc == 0 && tf_interrupted) {
		rc = why_fail(why, TF_EINTR, "interrupted before installing");
	}
	return rc;
}

/* Opted in (--allow-incomplete-lock): pip resolves what the pins leave open, unhashed. */
static int install_unpinned(struct ctx *c, const char *prefix, const struct pip_work *w,
                            const struct pip_req *reqs, size_t n, const struct pip_opts *o,
                            struct pip_result *res, struct why *why)
{
	struct strvec argv = STRVEC_INIT;
	char *plain = path_join(w->dir, "unhashed.txt");
	struct strbuf sb = STRBUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < n; i++)
		strbuf_addf(&sb, "%s\n", reqs[i].spec ? reqs[i].spec : reqs[i].raw_name);
	if (write_text(plain, sb.buf ? sb.buf : "") != 0) {
		rc = why_fail(why, TF_EIO, "%s: cannot write: %s", plain, strerror(errno));
	} else {
		push_pip(&argv, prefix, "install");
		push_index_opts(&argv, o);
		strvec_push(&argv, "--no-warn-script-location");
		strvec_pushf(&argv, "--requirement=%s", plain);
		rc = run_pip(c, &argv, o, "install (unpinned dependencies)", res, why);
	}
	strbuf_release(&sb);
	free(plain);
	strvec_release(&argv);
	return rc;
}

/* Phase 2: snapshot, then pip install offline from the verified wheelhouse. */
static int install_with_pip(struct ctx *c, const char *prefix, struct pip_work *w,
                            const struct pip_req *reqs, size_t n, struct pip_opts *own,
                            struct pip_result *res, struct why *why)
{
	int rc;
	if (!w->snapped) {
		if ((rc = snapshot_env(prefix, w, own, &own->stdin_fd, why)) != 0)
			return rc;
	}
	rc = pip_phase(c, prefix, "install", w->reqfile, w->wheels, own, res, why);
	if (rc == 0 && own->resolve_rest)
		rc = install_unpinned(c, prefix, w, reqs, n, own, res, why);
	return rc;
}

/* After a failure outside a txn: the snapshot becomes the env again (why
 * says when it cannot). In a txn, its abort does that, journaled. */
static void restore_env(const char *prefix, struct pip_work *w, int rc, struct why *why)
{
	if (!w->snapped || w->txn)
		return;
	int e = fs_swap_in(w->snap, prefix);
	if (e != 0) {
		why_code(why, rc);
		why_fail(why, rc, "%s; restoring the environment from %s also failed: %s",
		         why_text(why), w->snap, strerror(-e));
	} else {
		w->snapped = 0; /* the snapshot is the env again */
	}
}

/* What the env holds now, each pinned distribution with its pin's hash. */
static int list_installed(const char *prefix, const struct pip_req *reqs, size_t n,
                          struct pip_result *res, struct why *why)
{
	int rc = env_dists(prefix, res, why);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < res->n; i++)
		for (size_t j = 0; j < n; j++) {
			char *nm =
			    pip_normalize_name(reqs[j].name ? reqs[j].name : reqs[j].raw_name);
			if (strcmp(nm, res->v[i].name) == 0 && reqs[j].nhashes > 0 &&
			    res->v[i].sha256 == NULL)
				res->v[i].sha256 = xstrdup(reqs[j].hashes[0]);
			free(nm);
		}
	return 0;
}

/* Removes the work directory, a snapshot no longer needed, and the busy file. */
static void work_release(const char *prefix, struct pip_work *w, struct pip_opts *own)
{
	/* After a restore the busy file went with the replaced tree. */
	if (own->stdin_fd >= 0 && w->snapped)
		pyenv_busy_release(prefix, own->stdin_fd);
	else if (own->stdin_fd >= 0)
		close(own->stdin_fd);
	/* A txn's snapshot stays until its commit or abort: removing it here,
	 * before the commit, left a kill in between with half a snapshot to
	 * restore (the env lost the files removed so far). */
	if (w->snapped && w->snap && !w->txn)
		fs_rmtree(w->snap);
	if (w->dir)
		fs_rmtree(w->dir);
	free(w->dir);
	free(w->reqfile);
	free(w->bfile);
	free(w->rfile);
	free(w->wheels);
	free(w->snap);
	free(w->backends);
	free(w->rest);
}

int pip_install(struct ctx *c, const char *prefix, const struct pip_req *reqs, size_t n,
                const struct pip_opts *o, struct pip_result *res, struct why *why)
{
	struct pip_work w = {0};
	struct pip_opts own = *o; /* own.stdin_fd: the env's busy file once snapshotted */
	int rc, done = 0;
	own.stdin_fd = -1;

	if ((rc = work_create(prefix, &own, &w, why)) != 0)
		return why_code(why, rc);
	rc = work_write(&w, reqs, n, &own, why);
	if (rc == 0 && w.nb > 0)
		rc = install_backends(c, prefix, &w, &own, res, why);
	if (rc == 0)
		rc = fetch_rest(c, prefix, &w, &own, res, why);
	/* The installer the step chose in pip's place; an sdist leaves it to pip. */
	if (rc == 0 && own.native && own.txn && own.complete)
		rc = own.native->install(c, w.wheels, reqs, n, &own, &done, why);
	if (rc == 0 && !done)
		rc = install_with_pip(c, prefix, &w, reqs, n, &own, res, why);
	if (rc != 0)
		restore_env(prefix, &w, rc, why);
	else
		rc = list_installed(prefix, reqs, n, res, why);
	work_release(prefix, &w, &own);
	return why_code(why, rc);
}

static int cmp_lines(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The all-files hashes of hashes_src; NULL when it cannot tell (pip's hash stays). */
static json_t *pip_all_hashes(struct ctx *c, const char *prefix, const char *report,
                              const struct pip_opts *o)
{
	struct strvec argv = STRVEC_INIT, idx = STRVEC_INIT;
	struct spawn_result r = {0};
	json_t *out = NULL;
	strvec_pushf(&argv, "%s/bin/python", prefix);
	strvec_push(&argv, "-I");
	strvec_push(&argv, "-c");
	strvec_push(&argv, hashes_src);
	strvec_push(&argv, report);
	push_index_opts(&idx, o);
	for (size_t i = 0; i < idx.n; i++)
		strvec_push(&argv, idx.v[i]);
	if (pyenv_run_python(c, argv.v, 600, &r) == 0 && r.status == 0 && r.out.buf)
		out = json_loads(r.out.buf, 0, NULL);
	if (!json_is_object(out)) {
		json_decref(out);
		out = NULL;
		dlog(c, "pip: all-files hashes unavailable: %s", r.err.buf ? r.err.buf : "");
	}
	spawn_result_release(&r);
	strvec_release(&argv);
	strvec_release(&idx);
	return out;
}

/* The Requires-Dist of one distribution of pip's report, as pip_opts.requires says. */
static void record_requires(struct strvec *out, const char *name, json_t *list)
{
	size_t k, n = 0;
	json_t *x;

	json_array_foreach(list, k, x)
	{
		const char *r = json_string_value(x);
		if (r != NULL && strchr(r, '\n') == NULL) {
			strvec_pushf(out, "%s\t%s", name, r);
			n++;
		}
	}
	if (n == 0)
		strvec_pushf(out, "%s\t", name);
}

/*
 * The Requires-Python of one distribution: its METADATA's (pip's report), else
 * the index's data-requires-python when all its files give the same one.
 */
static void record_requires_python(struct strvec *out, const char *name, json_t *md, json_t *index)
{
	const char *rp = json_string_value(json_object_get(md, "requires_python"));

	if ((rp == NULL || *rp == '\0') && json_array_size(index) == 1)
		rp = json_string_value(json_array_get(index, 0));
	if (rp != NULL && *rp != '\0' && strpbrk(rp, "\n\t") == NULL)
		strvec_pushf(out, "%s\t%s", name, rp);
}

/* The file names of one lock line: the file pip chose, then the others of `all`. */
static void record_files(struct strvec *out, const char *name, json_t *item, json_t *others)
{
	const char *url =
	    json_string_value(json_object_get(json_object_get(item, "download_info"), "url"));
	size_t k;
	json_t *x;

	if (url != NULL) {
		const char *base = strrchr(url, '/');
		base = base ? base + 1 : url;
		strvec_pushf(out, "%s\t%.*s", name, (int)strcspn(base, "#?"), base);
	}
	json_array_foreach(others, k, x)
	{
		if (json_string_value(x) != NULL && strchr(json_string_value(x), '\n') == NULL)
			strvec_pushf(out, "%s\t%s", name, json_string_value(x));
	}
}

/* pip's resolver, nothing installed: install --dry-run --report of reqfile. */
static int run_resolver(struct ctx *c, const char *prefix, const char *reqfile, const char *report,
                        const struct pip_opts *o, struct why *why)
{
	struct strvec argv = STRVEC_INIT;
	push_pip(&argv, prefix, "install");
	strvec_push(&argv, "--dry-run");
	strvec_push(&argv, "--ignore-installed");
	strvec_push(&argv, "--quiet");
	strvec_pushf(&argv, "--report=%s", report);
	push_index_opts(&argv, o);
	strvec_pushf(&argv, "--requirement=%s", reqfile);
	int rc = run_pip(c, &argv, o, "lock", NULL, why);
	strvec_release(&argv);
	return rc;
}

/*
 * The project and version a file of pip's report was fetched as: a wheel's
 * or an sdist's file name (the name on the project's index page, or of a
 * direct reference), name PEP 503 normalised. 0, or -EINVAL when the URL names
 * neither (nothing to compare). The caller frees *file, *name and *version.
 */
static int file_identity(const char *url, char **file, char **name, char **version)
{
	const char *base = strrchr(url, '/');
	base = base ? base + 1 : url;
	char *f = xstrndup(base, strcspn(base, "#?"));
	int rc = -EINVAL;
	if (str_ends_with(f, ".whl")) {
		struct wheel_name wn;
		if (wheel_name_parse(f, &wn) == 0) {
			*name = xstrdup(wn.name);
			*version = xstrdup(wn.version);
			wheel_name_release(&wn);
			rc = 0;
		}
	} else {
		size_t el = str_ends_with(f, ".tar.gz") ? 7 : str_ends_with(f, ".zip") ? 4 : 0;
		char *stem = xstrndup(f, strlen(f) - el), *dash = strrchr(stem, '-');
		if (el && dash && dash != stem && dash[1]) {
			*version = xstrdup(dash + 1);
			*dash = '\0';
			*name = pip_normalize_name(stem);
			rc = 0;
		}
		free(stem);
	}
	if (rc == 0)
		*file = f;
	else
		free(f);
	return rc;
}

/*
 * Whether a file name's version and a METADATA version are one version: equal
 * as written, as tfprov's version order compares them ("1.0" and "1.0.0"), or
 * once the '-' a file name must escape as '_' (PEP 427) and case are undone.
 */
static int same_version(const char *file_ver, const char *meta_ver)
{
	if (strcmp(file_ver, meta_ver) == 0 || version_cmp(file_ver, meta_ver) == 0)
		return 1;
	size_t n = strlen(file_ver);
	if (n != strlen(meta_ver))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char a = (char)tolower((unsigned char)file_ver[i]);
		char b = (char)tolower((unsigned char)meta_ver[i]);
		if (a == '_' || a == '-')
			a = '.';
		if (b == '_' || b == '-')
			b = '.';
		if (a != b)
			return 0;
	}
	return 1;
}

/*
 * A file is the distribution it was fetched for: pip's report takes name and
 * version from the METADATA inside the file, so a tensorflow-2.15.1 wheel
 * whose METADATA says `Name: requests` would turn the pin into
 * requests==2.15.1. TF_EINTEGRITY naming the file, the requirement and the
 * metadata when they differ (name PEP 503 normalised, version as PEP 440
 * compares it).
 */
static int check_identity(json_t *item, const char *name, const char *ver, struct why *why)
{
	const char *url =
	    json_string_value(json_object_get(json_object_get(item, "download_info"), "url"));
	char *file = NULL, *fname = NULL, *fver = NULL, *nm = pip_normalize_name(name);
	int rc = 0;
	if (url == NULL || file_identity(url, &file, &fname, &fver) != 0)
		goto out;
	if (strcmp(fname, nm) != 0 || !same_version(fver, ver)) {
		rc = why_fail(
		    why, TF_EINTEGRITY,
		    "%s was fetched for %s %s (%s), but its METADATA says %s %s: refused (a file "
		    "must be the distribution its index lists it as; lock pins nothing from it)",
		    file, fname, fver,
		    json_is_true(json_object_get(item, "requested"))
		        ? "a requirement of the manifest"
		        : "a dependency in the closure",
		    name, ver);
	}
out:
	free(file);
	free(fname);
	free(fver);
	free(nm);
	return rc;
}

/*
 * The lock line of one distribution of pip's report: name==version with the
 * hash of the file pip chose, then the others of `all`; its Requires-Dist go
 * to o->requires. TF_EFAIL when the report holds no sha256 for it.
 */
static int lock_line(json_t *item, json_t *all, const struct pip_opts *o, struct strvec *lines,
                     struct why *why)
{
	json_t *md = json_object_get(item, "metadata");
	json_t *ai = json_object_get(json_object_get(item, "download_info"), "archive_info");
	const char *name = json_string_value(json_object_get(md, "name"));
	const char *ver = json_string_value(json_object_get(md, "version"));
	const char *h = json_string_value(json_object_get(json_object_get(ai, "hashes"), "sha256"));
	const char *legacy = json_string_value(json_object_get(ai, "hash"));
	if (h == NULL && legacy != NULL && str_starts_with(legacy, "sha256="))
		h = legacy + 7;
	if (name == NULL || ver == NULL || h == NULL || !is_hex64(h))
		return why_fail(why, TF_EFAIL,
		                "pip report: %s has no sha256 (a local directory or VCS "
		                "requirement cannot be locked)",
		                name ? name : "an entry");
	int rc = check_identity(item, name, ver, why);
	if (rc != 0)
		return rc;
	char *nm = pip_normalize_name(name);
	struct strbuf line = STRBUF_INIT;
	if (o->requires != NULL)
		record_requires(o->requires, nm, json_object_get(md, "requires_dist"));
	if (o->requires_python != NULL)
		record_requires_python(
		    o->requires_python, nm, md,
		    json_object_get(json_object_get(all, "@requires_python"), name));
	if (o->files != NULL)
		record_files(o->files, nm, item,
		             json_object_get(json_object_get(all, "@files"), name));
	strbuf_addf(&line, "%s==%s \\\n    --hash=sha256:%s", nm, ver, h);
	size_t k;
	json_t *x;
	json_array_foreach(json_object_get(all, name), k, x)
	{
		const char *hx = json_string_value(x);
		if (hx && is_hex64(hx) && strcmp(hx, h) != 0)
			strbuf_addf(&line, " \\\n    --hash=sha256:%s", hx);
	}
	strvec_pushf(lines, "%s\n", line.buf);
	strbuf_release(&line);
	free(nm);
	return 0;
}

/*
 * The index pages that redirected (hashes_src re-reads each chosen version's
 * page with pip's own session): each chain, every URL and the host that
 * answered, printed and written as comments of the lock. NULL when none.
 */
static char *redirect_notes(struct ctx *c, json_t *all)
{
	struct strbuf sb = STRBUF_INIT;
	size_t i, k;
	json_t *ch, *u;
	json_array_foreach(json_object_get(all, "@redirects"), i, ch)
	{
		struct strbuf hops = STRBUF_INIT;
		const char *last = NULL;
		json_array_foreach(ch, k, u)
		{
			if (json_string_value(u) == NULL || strchr(json_string_value(u), '\n'))
				continue;
			last = json_string_value(u);
			strbuf_addf(&hops, "%s%s", hops.len ? " -> " : "", last);
		}
		if (last != NULL) {
			char *host = url_host(last);
			if (c != NULL)
				ev_log(c, EV_WARN,
				       "pip: index page redirected: %s (served by host %s)",
				       hops.buf, host);
			strbuf_addf(&sb, "# index page redirected: %s (served by host %s)\n",
			            hops.buf, host);
			free(host);
		}
		strbuf_release(&hops);
	}
	return sb.len ? strbuf_detach(&sb) : (strbuf_release(&sb), NULL);
}

/* The lock text: a header, the redirect notes, then the lines sorted by name. Caller frees. */
static char *lock_text(struct strvec *lines, const char *notes)
{
	if (lines->n > 1)
		qsort(lines->v, lines->n, sizeof(*lines->v), cmp_lines);
	struct strbuf sb = STRBUF_INIT;
	strbuf_adds(&sb, "# Generated by tfprov lock via pip's resolver; do not edit.\n");
	if (notes)
		strbuf_adds(&sb, notes);
	for (size_t i = 0; i < lines->n; i++)
		strbuf_adds(&sb, lines->v[i]);
	return strbuf_detach(&sb);
}

int pip_lock(struct ctx *c, const char *prefix, const char *reqs_text, const struct pip_opts *o,
             char **out, struct why *why)
{
	struct strvec lines = STRVEC_INIT;
	char *work = NULL, *reqfile = NULL, *report = NULL, *json = NULL;
	json_t *root = NULL, *all = NULL;
	size_t len = 0;
	int rc = 0;

	char *tmpl = xasprintf("%s.tfprov-lock.XXXXXX", prefix);
	work = mkdtemp(tmpl);
	if (work == NULL) {
		free(tmpl);
		return why_fail(why, TF_EIO, "%s: cannot create a work directory: %s", prefix,
		                strerror(errno));
	}
	reqfile = path_join(work, "requirements.in");
	report = path_join(work, "report.json");
	if (write_text(reqfile, reqs_text) != 0) {
		rc = why_fail(why, TF_EIO, "%s: cannot write: %s", reqfile, strerror(errno));
		goto out;
	}
	if (o->requires != NULL) {
		strvec_release(o->requires);
		*o->requires = (struct strvec)STRVEC_INIT;
	}
	if (o->requires_python != NULL) {
		strvec_release(o->requires_python);
		*o->requires_python = (struct strvec)STRVEC_INIT;
	}
	if (o->files != NULL) {
		strvec_release(o->files);
		*o->files = (struct strvec)STRVEC_INIT;
	}
	if ((rc = run_resolver(c, prefix, reqfile, report, o, why)) != 0)
		goto out;
	if (read_file_at(AT_FDCWD, report, 64u << 20, &json, &len) != 0) {
		rc = why_fail(why, TF_EFAIL, "pip wrote no report at %s", report);
		goto out;
	}
	json_error_t je;
	root = json_loadb(json, len, 0, &je);
	json_t *inst = json_object_get(root, "install");
	all = json_is_array(inst) ? pip_all_hashes(c, prefix, report, o) : NULL;
	if (all == NULL && c != NULL)
		ev_log(c, EV_WARN,
		       "pip: could not list every file of each chosen version; each line holds "
		       "only the hash of the file pip chose here (see -v)");
	if (!json_is_array(inst)) {
		rc = why_fail(why, TF_EFAIL, "pip report: no \"install\" array (%s)", je.text);
		goto out;
	}
	size_t i;
	json_t *item;
	json_array_foreach(inst, i, item)
	{
		if ((rc = lock_line(item, all, o, &lines, why)) != 0)
			goto out;
	}
	char *notes = redirect_notes(c, all);
	*out = lock_text(&lines, notes);
	free(notes);
out:
	json_decref(all);
	json_decref(root);
	free(json);
	if (work)
		fs_rmtree(work);
	free(work);
	free(reqfile);
	free(report);
	strvec_release(&lines);
	return rc;
}
