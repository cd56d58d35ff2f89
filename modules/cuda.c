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
#include "step_artifacts.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "spawn.h"

#include <dirent.h>
#include <jansson.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static enum desire cuda_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                               struct strbuf *detail, struct strvec *urls)
{
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
	struct strvec with = STRVEC_INIT;
	place_sharers(c, "cuda", m->stack.name.s, prefix, &with, NULL, NULL);
	for (size_t i = 0; i < with.n; i++)
		strbuf_addf(detail, "%s'%s'", i ? ", " : ", shared with stack ", with.v[i]);
	strvec_release(&with);
	free(prefix);
	return DESIRE_WANTED;
}

static const char *base_name(const char *url)
{
	const char *sl = strrchr(url, '/');
	return sl ? sl + 1 : url;
}

/*
 * A stack sharing the prefix placed a file of the same name with other bytes
 * (another build of one CUDA version): they cannot share one prefix. Found
 * from the names and sha256 the sharers recorded (their attrs' "archives"),
 * before anything is fetched; TF_ECONFLICT with the step failed, else 0.
 */
static int cuda_sharer_clash(struct ctx *c, const struct manifest *m, const char *prefix,
                             struct step *s)
{
	struct strvec stacks = STRVEC_INIT, attrs = STRVEC_INIT;
	int rc = 0;
	place_sharers(c, "cuda", m->stack.name.s, prefix, &stacks, NULL, &attrs);
	for (size_t i = 0; i < stacks.n && rc == 0; i++) {
		json_t *j = attrs.v[i][0] ? json_loads(attrs.v[i], 0, NULL) : NULL;
		json_t *arch = json_object_get(j, "archives");
		size_t na = m->cuda.artifacts.n;
		for (size_t k = 0; k <= na + 1 && rc == 0; k++) {
			const struct artifact *a =
			    k < na    ? &m->cuda.artifacts.v[k]
			    : k == na ? (m->cuda.redist.set ? &m->cuda.redist.json : NULL)
			    : m->cuda.has_runfile ? &m->cuda.runfile
			                          : NULL;
			if (a == NULL || !a->url.s || !a->sha256.s)
				continue;
			const char *theirs =
			    json_string_value(json_object_get(arch, base_name(a->url.s)));
			if (theirs && strcmp(theirs, a->sha256.s) != 0) {
				step_fail(
				    s,
				    "stack '%s' placed %s into %s from a file with sha256 "
				    "%.16s..., "
				    "this manifest pins %.16s...: two builds of one CUDA version "
				    "cannot share its prefix; pin the same files as '%s', or give "
				    "this stack another `prefix:`",
				    stacks.v[i], base_name(a->url.s), prefix, theirs, a->sha256.s,
				    stacks.v[i]);
				rc = TF_ECONFLICT;
			}
		}
		json_decref(j);
	}
	strvec_release(&stacks);
	strvec_release(&attrs);
	return rc;
}

/* What the step placed, by file name and sha256, for the next sharer's precheck. */
static char *cuda_attrs(const struct manifest *m, const struct artset *arts)
{
	json_t *arch = json_object();
	for (size_t i = 0; i < arts->n; i++)
		json_object_set_new(arch, base_name(arts->v[i].url),
		                    json_string(arts->v[i].sha256));
	if (m->cuda.redist.set && m->cuda.redist.json.sha256.set)
		json_object_set_new(arch, base_name(m->cuda.redist.json.url.s),
		                    json_string(m->cuda.redist.json.sha256.s));
	json_t *j = json_pack("{s:o}", "archives", arch);
	char *text = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(j);
	return text;
}

/* Reports CUDA toolkits on the machine that tfprov does not own; refuses a
 * prefix shared with a stack that placed other builds of the same files. */
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
	int rc = cuda_sharer_clash(c, m, prefix, s);
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
		step_fail(s, "cannot run the CUDA runfile: %s", why_text(&r.why));
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

/* prep: the runfile, or the archives, as cuda_artifacts named them (module.h). */
static int cuda_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                      struct prepared *prep)
{
	struct artset *arts = &prep->arts;
	struct staged tree = {0};
	char *prefix = stack_cuda_prefix(m);
	char *stage = NULL;
	int rc = 0;
	if (m->cuda.has_runfile && (rc = artset_fetch(c, arts, s)) != 0)
		goto out;
	if ((rc = txn_stage_dir(t, prefix, &stage)) != 0)
		goto out;
	if (m->cuda.has_runfile)
		rc = run_runfile(c, &arts->v[0], stage, &tree, s);
	else
		rc = artset_fetch_unpack(c, arts, stage, &tree, s);
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
	/*
	 * Another stack with this CUDA version owns the prefix too: each file is
	 * shared with it (recorded for both, placed once). Alone, the tree is
	 * renamed into place whole. Either way what this step placed elsewhere
	 * before (the previous CUDA version's prefix) is released.
	 */
	struct strvec with = STRVEC_INIT;
	place_sharers(c, "cuda", m->stack.name.s, prefix, &with, NULL, NULL);
	place_sharers(c, "cudnn", m->stack.name.s, prefix, &with, NULL, NULL);
	if (with.n)
		rc = txn_share_tree(t, stage, prefix, tree.v, tree.n);
	else if ((rc = txn_remove_outside(t, prefix)) == 0)
		rc = txn_put_tree(t, stage, prefix, tree.v, tree.n);
	if (rc == 0) {
		free(s->attrs);
		s->attrs = cuda_attrs(m, arts);
	}
	if (rc == 0)
		ev_log(c, EV_INFO, "cuda: %zu path%s in %s%s%s", tree.n,
		       plural_s((long long)tree.n), prefix, with.n ? ", shared with stack " : "",
		       with.n ? with.v[0] : "");
	strvec_release(&with);
out:
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
