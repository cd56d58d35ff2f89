/*
 * cuda.c - the `cuda` step: the pinned toolkit in a versioned prefix,
 * <prefix>/cuda/<version>, so several CUDA versions coexist.
 *
 * Redist era (11.4 and later): every component archive is fetched, verified,
 * unpacked into one staged tree (components merged the way NVIDIA's tooling
 * lays them out) and renamed into place; lib64 -> lib is added because
 * TensorFlow, XLA and build tools look in lib64.
 * Runfile era (10.0, 10.1, 11.2): the verified runfile is run with an argv
 * (never a shell) in toolkit-only mode into the staged tree; every file it
 * wrote is then recorded.
 *
 * A CUDA that tfprov did not install (/usr/local/cuda*, /opt/cuda) is
 * reported and never touched: the guide's "uninstall old CUDA" becomes a
 * warning with the paths.
 */
#include "artifact.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static enum desire cuda_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                               struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	if (!m->cuda.set)
		return DESIRE_NONE;
	char *prefix = stack_cuda_prefix(m);
	strbuf_addf(canon, "prefix=%s\n", prefix);
	for (size_t i = 0; i < m->cuda.artifacts.n; i++) {
		const struct artifact *a = &m->cuda.artifacts.v[i];
		strbuf_addf(canon, "artifact=%s %s strip=%lld\n", a->sha256.s, a->url.s,
		            (long long)a->strip.v);
		strvec_push(urls, a->url.s);
	}
	if (m->cuda.redist.set) {
		const char *sha = m->cuda.redist.json.sha256.set ? m->cuda.redist.json.sha256.s
		                                                 : "(not pinned yet)";
		strbuf_addf(canon, "redist=%s\n", sha);
		struct strbuf names = STRBUF_INIT;
		for (size_t i = 0; i < m->cuda.redist.ncomponents; i++) {
			strbuf_addf(canon, "component=%s\n", m->cuda.redist.components[i].s);
			strbuf_addf(&names, "%s%s", i ? ", " : "", m->cuda.redist.components[i].s);
		}
		strvec_pushf(
		    urls, "%s (sha256 %.12s...), then the archives it pins, resolved at apply: %s",
		    m->cuda.redist.json.url.s, sha, names.buf ? names.buf : "every component");
		strbuf_release(&names);
	}
	if (m->cuda.has_runfile) {
		strbuf_addf(canon, "runfile=%s\n", m->cuda.runfile.sha256.s);
		strvec_push(urls, m->cuda.runfile.url.s);
	}
	size_t n = m->cuda.artifacts.n + m->cuda.redist.ncomponents;
	strbuf_addf(detail, "CUDA %s into %s (%s%zu archive%s)", m->cuda.version.s, prefix,
	            m->cuda.has_runfile ? "runfile, " : "", n, n == 1 ? "" : "s");
	free(prefix);
	return DESIRE_WANTED;
}

/* Reports CUDA toolkits on the machine that tfprov does not own. */
static int cuda_precheck(struct ctx *c, const struct manifest *m, struct step *s)
{
	if (m->cuda.redist.set && !m->cuda.redist.json.sha256.set)
		return step_fail_unpinned(s, m, "cuda.redist", &m->cuda.redist);
	static const char *const dirs[] = {"/usr/local", "/opt"};
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char *host = ctx_host_dir(c, dirs[i]);
		DIR *d = opendir(host);
		struct dirent *e;
		while (d && (e = readdir(d)) != NULL) {
			if (!str_starts_with(e->d_name, "cuda"))
				continue;
			char *p = path_join(dirs[i], e->d_name);
			if (!place_is_owned(c, p))
				ev_log(
				    c, EV_WARN,
				    "a CUDA installation tfprov did not make exists at %s; it is "
				    "left alone. If it comes first on PATH or LD_LIBRARY_PATH it "
				    "can shadow this stack (see `tfprov doctor`)",
				    p);
			free(p);
		}
		if (d)
			closedir(d);
		free(host);
	}
	char *prefix = stack_cuda_prefix(m);
	/* Until stacks share a CUDA version's prefix, a second one is refused here, not half-way. */
	int rc = step_foreign_clash(
	    c, s, "cuda", m, prefix,
	    "two stacks cannot share one CUDA prefix yet: give one of them another `prefix:` "
	    "(or another CUDA version), or destroy the other stack first");
	free(prefix);
	return rc;
}

static int run_runfile(struct ctx *c, const struct art *a, const char *stage, struct staged *out,
                       struct step *s)
{
	struct spawn_result r = {0};
	int rc = 0;
	if (mkdir(stage, 0755) != 0) {
		step_fail(s, "cannot create %s", stage);
		return TF_EIO;
	}
	char *tp = xasprintf("--toolkitpath=%s", stage);
	char *tmpdir = xasprintf("--tmpdir=%s", c->cache_dir);
	/* The runfile is a shell archive; it is executed directly, never via a shell string. */
	char *const argv[] = {"/bin/sh",    a->path, "--silent",         "--toolkit",
	                      tp,           tmpdir,  "--no-opengl-libs", "--no-man-page",
	                      "--override", NULL};
	char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	struct spawn_opts o = {.argv = argv, .envp = envp, .timeout_s = 3600};
	ev_log(c, EV_INFO, "cuda: running the NVIDIA runfile %s in toolkit-only mode", a->name);
	rc = spawn_run(&o, &r);
	if (rc == 0 && r.status != 0) {
		step_fail(s, "the CUDA runfile exited with status %d: %.400s", r.status,
		          r.err.len   ? r.err.buf
		          : r.out.buf ? r.out.buf
		                      : "");
		rc = TF_EFAIL;
	} else if (rc != 0) {
		step_fail(s, "cannot run the CUDA runfile: %s", r.errmsg ? r.errmsg : "");
	}
	if (rc == 0)
		staged_record_tree(out, stage);
	spawn_result_release(&r);
	free(tp);
	free(tmpdir);
	return rc;
}

/* The runfile, or the archives (inline, then the redistrib JSON's components). */
static int cuda_artifacts(struct ctx *c, const struct manifest *m, struct artset *arts,
                          struct step *s)
{
	const char *platform =
	    m->stack.platform == PLATFORM_WINDOWS_X86_64 ? "windows-x86_64" : "linux-x86_64";
	size_t from = arts->n;
	int rc = 0;
	if (m->cuda.has_runfile)
		artset_add_artifact(arts, &m->cuda.runfile, 0);
	for (size_t i = 0; i < m->cuda.artifacts.n; i++)
		artset_add_artifact(arts, &m->cuda.artifacts.v[i], 1);
	if (m->cuda.redist.set)
		rc = artset_add_redist(c, arts, &m->cuda.redist, platform, s);
	/* Archives are unpacked by artset_fetch_unpack (decode-ahead may); a runfile is run. */
	if (rc == 0 && !m->cuda.has_runfile)
		artset_mark_unpack(arts, from);
	return rc;
}

static int cuda_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t)
{
	struct artset arts = {0};
	struct staged tree = {0};
	char *prefix = stack_cuda_prefix(m);
	char *stage = NULL;
	int rc = cuda_artifacts(c, m, &arts, s);
	if (rc != 0)
		goto out;
	if (m->cuda.has_runfile && (rc = artset_fetch(c, &arts, s)) != 0)
		goto out;
	if ((rc = txn_stage_dir(t, prefix, &stage)) != 0)
		goto out;
	if (m->cuda.has_runfile)
		rc = run_runfile(c, &arts.v[0], stage, &tree, s);
	else
		rc = artset_fetch_unpack(c, &arts, stage, &tree, s);
	if (rc != 0)
		goto out;
	/* Tools expect lib64; redist archives ship lib. */
	char *lib = path_join(stage, "lib"), *lib64 = path_join(stage, "lib64");
	struct stat st;
	if (lstat(lib, &st) == 0 && S_ISDIR(st.st_mode) && lstat(lib64, &st) != 0) {
		if (symlink("lib", lib64) == 0)
			staged_add(&tree, "lib64", 'l', NULL, 0, 0777, "lib");
	}
	free(lib);
	free(lib64);
	rc = txn_put_tree(t, stage, prefix, tree.v, tree.n);
	if (rc == 0)
		ev_log(c, EV_INFO, "cuda: %zu path%s in %s", tree.n, plural_s((long long)tree.n),
		       prefix);
out:
	artset_release(&arts);
	staged_release(&tree);
	free(prefix);
	free(stage);
	return rc;
}

const struct module module_cuda = {
    .kind = "cuda",
    .desire = cuda_desire,
    .precheck = cuda_precheck,
    .apply = cuda_apply,
    .artifacts = cuda_artifacts,
};
