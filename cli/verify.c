/*
 * verify.c - `tfprov verify [STACK] [--deep]`: does what tfprov placed still
 * work? Three layers per stack, each reported on its own, never a "passed"
 * for a layer that was not checked:
 *
 *  1. Files. Without --deep: stat every recorded file against size and mtime
 *     (fast). With --deep: rehash every file and compare sha256, mode and link
 *     targets, and list files found inside recorded directories that were
 *     never placed. One letter per path, like `apk audit`: A added, M mode,
 *     U content (or link target), X deleted.
 *  2. Libraries (stacks with a cuda step). Every soname TF loads for the
 *     stack's CUDA and cuDNN majors (the knowledge base's list, completed with
 *     their stack-local dependencies) is dlopen()ed in a child process from
 *     the stack's own dirs (CUDA prefix lib64, cuDNN's lib when separate);
 *     a failure names the soname, the dirs searched, the loader's error and
 *     the fix from the guide's troubleshooting table.
 *  3. GPU compute. The driver is asked first (NVML, procfs); with a GPU, the
 *     native probe runs one Conv2D forward through the stack's libcudart and
 *     libcudnn and compares it with a CPU reference. Without a driver the probe
 *     is not run at all, and the report says which layer is missing
 *     ("driver: no NVIDIA driver: ...") and that GPU checks are SKIPPED.
 *
 * Exit codes (README.md, "Exit codes"), the worst one wins:
 *   8  a library does not load, or the GPU
 *      probe ran and failed (wrong output, runtime or cuDNN error); also no
 *      GPU at all for a stack that requires one (driver.policy: require,
 *      no --no-gpu): a stack that cannot reach a GPU does not do what it was
 *      provisioned for, and a monitoring job must not read "0" on a training
 *      box whose driver vanished. `tfprov bench` answers the same.
 *   7  files and libraries are fine but NVML reports a driver/library version
 *      mismatch: the driver was upgraded and the machine needs a reboot.
 *   2  files drifted (missing, changed, added), libraries and GPU fine: the
 *      same code as `status` for drift; `apply` repairs it.
 *   0  everything checked passed; or no GPU while --no-gpu or the manifest's
 *      driver.policy: skip allows it (image builds, CI), then the GPU compute
 *      check is reported as SKIPPED, loudly, on stderr.
 * A stack without a cuda step has only layer 1.
 */
#include "cli.h"
#include "kb.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "gpu.h"
#include "manifest.h"
#include "python.h"
#include "place.h"
#include "stackinfo.h"
#include "state.h"
#include "pool.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct audit {
	struct ctx *c;
	const char *stack;
	int deep;
	int findings;
	int hidden; /* content changes that kept size, mtime and mode */
	struct strvec dirs;
	struct strvec hash_host, hash_path, hash_want; /* --deep: hashed on all cores */
	int64_t *hash_size;
	struct pkgfiles pkgs; /* the env's package records (--deep) */
};

/*
 * One file finding: a line for a person, a "finding" event with what was
 * placed (expected) and what is there (actual), and the 1.0 audit_finding.
 */
static void report(struct audit *a, char letter, const char *path, const char *why,
                   const char *expected, const char *actual)
{
	static const char *const kinds[] = {
	    ['A'] = "added", ['M'] = "mode", ['U'] = "content", ['X'] = "deleted"};
	const struct pkgfile *pf = pkgfiles_find(&a->pkgs, path);
	a->findings++;
	char *msg = xasprintf("%c %s%s%s%s%s%s", letter, path, why ? "  " : "", why ? why : "",
	                      pf ? "  (package " : "", pf ? pf->pkg : "", pf ? ")" : "");
	char code[2] = {letter, 0};
	ev_finding(a->c, EV_WARN,
	           &(struct ev_finding){.origin = "verify",
	                                .kind = kinds[(unsigned char)letter],
	                                .severity = "warning",
	                                .stack = a->stack,
	                                .path = path,
	                                .expected = expected,
	                                .actual = actual,
	                                .code = code,
	                                .package = pf ? pf->pkg : NULL,
	                                .why = why,
	                                .fix = pf ? "reinstall the package" : "tfprov apply"},
	           msg);
	free(msg);
	json_t *d = json_pack("{s:s,s:s}", "code", code, "path", path);
	if (why)
		json_object_set_new(d, "why", json_string(why));
	if (pf)
		json_object_set_new(d, "package", json_string(pf->pkg));
	ev_data(a->c, "audit_finding", d);
	json_decref(d);
}

static int audit_file(const struct state_file *f, void *arg)
{
	struct audit *a = arg;
	char *host = ctx_host_path(a->c, f->path);
	struct stat st;
	if (lstat(host, &st) != 0) {
		report(a, 'X', f->path, NULL, "present", "absent");
		goto out;
	}
	if (f->type == 'd') {
		if (a->deep)
			strvec_push(&a->dirs, f->path);
		goto out;
	}
	if (f->type == 'l') {
		char buf[4096];
		ssize_t n = readlink(host, buf, sizeof(buf) - 1);
		if (n < 0 || (buf[n] = '\0', f->link && strcmp(buf, f->link) != 0))
			report(a, 'U', f->path, "symlink target changed", f->link,
			       n < 0 ? "not a symlink" : buf);
		goto out;
	}
	char want[64], got[64];
	if ((st.st_mode & 07777) != f->mode) {
		snprintf(want, sizeof(want), "mode %04o", f->mode);
		snprintf(got, sizeof(got), "mode %04o", (unsigned)(st.st_mode & 07777));
		report(a, 'M', f->path, NULL, want, got);
	}
	int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
	if (st.st_size != f->size || mt != f->mtime_ns) {
		if (st.st_size != f->size) {
			snprintf(want, sizeof(want), "%lld bytes", (long long)f->size);
			snprintf(got, sizeof(got), "%lld bytes", (long long)st.st_size);
		} else {
			snprintf(want, sizeof(want), "mtime_ns %lld", (long long)f->mtime_ns);
			snprintf(got, sizeof(got), "mtime_ns %lld", (long long)mt);
		}
		report(a, 'U', f->path, NULL, want, got);
		goto out;
	}
	if (!a->deep)
		goto out;
	/* Size and time as placed: only hashing can tell (on all cores, audit_hashes). */
	a->hash_size = xrealloc(a->hash_size, (a->hash_host.n + 1) * sizeof(*a->hash_size));
	a->hash_size[a->hash_host.n] = f->size;
	strvec_push(&a->hash_host, host);
	strvec_push(&a->hash_path, f->path);
	strvec_push(&a->hash_want, f->sha256);
out:
	free(host);
	return 0;
}

/* --deep: what lies in the recorded directories that neither tfprov nor a package placed. */
static void audit_dirs(struct audit *a)
{
	struct strvec foreign = STRVEC_INIT;
	place_foreign_dirs(a->c, &a->dirs, pkgfiles_owned, &a->pkgs, &foreign);
	for (size_t i = 0; i < foreign.n; i++) {
		size_t n = strlen(foreign.v[i]);
		if (n > 1 && foreign.v[i][n - 1] == '/')
			foreign.v[i][n - 1] = '\0'; /* a directory, named as the others are */
		report(a, 'A', foreign.v[i], NULL, "absent", "present");
	}
	strvec_release(&foreign);
	strvec_release(&a->dirs);
}

static int cmp_size_desc(const void *x, const void *y, void *arg)
{
	const int64_t *sz = arg;
	int64_t a = sz[*(const size_t *)x], b = sz[*(const size_t *)y];
	return a < b ? 1 : a > b ? -1 : 0;
}

/*
 * --deep: every file rehashed on all cores (or --jobs), largest first so the
 * longest hash starts at once; findings are reported in the recorded order.
 */
static void audit_hashes(struct audit *a)
{
	size_t n = a->hash_host.n;
	size_t *order = xcalloc(n + 1, sizeof(*order));
	char **paths = xcalloc(n + 1, sizeof(*paths));
	char(*hex)[65] = xcalloc(n + 1, sizeof(*hex));
	int *rc = xcalloc(n + 1, sizeof(*rc));
	size_t *pos = xcalloc(n + 1, sizeof(*pos));
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, n, sizeof(*order), cmp_size_desc, a->hash_size);
	for (size_t i = 0; i < n; i++) {
		paths[i] = a->hash_host.v[order[i]];
		pos[order[i]] = i;
	}
	sha256_files(paths, n, a->c->jobs > 0 ? (size_t)a->c->jobs : pool_ncpu(), hex, rc);
	for (size_t k = 0; k < n; k++)
		if (rc[pos[k]] != 0 || strcmp(hex[pos[k]], a->hash_want.v[k]) != 0) {
			/* Same size, time and mode (else 'M' above): apply's stat check cannot see it. */
			report(a, 'U', a->hash_path.v[k], "content changed, size and time kept",
			       a->hash_want.v[k], rc[pos[k]] ? "unreadable" : hex[pos[k]]);
			a->hidden++;
		}
	free(order);
	free(pos);
	free(paths);
	free(hex);
	free(rc);
	free(a->hash_size);
	a->hash_size = NULL;
	strvec_release(&a->hash_host);
	strvec_release(&a->hash_path);
	strvec_release(&a->hash_want);
}

/*
 * --deep, the files that package installers placed in the env and the state
 * does not record (pip writes after the env was recorded): each is checked
 * against its distribution's RECORD (sha256 and presence).
 */
static void audit_packages(struct audit *a)
{
	for (size_t i = 0; i < a->pkgs.n; i++) {
		const struct pkgfile *f = &a->pkgs.v[i];
		if (f->src != 'p' || state_file_owner(a->c->st, f->path) != 0)
			continue;
		char *host = ctx_host_path(a->c, f->path);
		struct stat st;
		char hex[65];
		int64_t sz;
		if (lstat(host, &st) != 0)
			report(a, 'X', f->path, NULL, "present", "absent");
		else if (strcmp(f->sha256, "?") == 0)
			report(a, 'U', f->path, "RECORD has a hash tfprov cannot check", NULL,
			       NULL);
		else if (f->sha256[0] && sha256_file(host, hex, &sz) != 0)
			report(a, 'U', f->path, NULL, f->sha256, "unreadable");
		else if (f->sha256[0] && strcmp(hex, f->sha256) != 0)
			report(a, 'U', f->path, NULL, f->sha256, hex);
		free(host);
	}
}

/* Layer 1: the recorded files of one stack. Returns the number of findings, or TF_ESTATE. */
static int verify_files(struct ctx *c, const char *stack, int64_t stack_id, int deep, int *hidden)
{
	struct audit a = {.c = c,
	                  .stack = stack,
	                  .deep = deep,
	                  .dirs = STRVEC_INIT,
	                  .hash_host = STRVEC_INIT,
	                  .hash_path = STRVEC_INIT,
	                  .hash_want = STRVEC_INIT};
	struct state_resource *res = NULL;
	size_t nres = 0;
	if (state_resources_list(c->st, stack_id, &res, &nres) != 0) {
		ev_log(c, EV_ERROR, "  files: cannot read the state: %s", state_errmsg(c->st));
		return TF_ESTATE;
	}
	if (deep)
		free(pkgfiles_load_stack(c, stack_id, NULL, &a.pkgs));
	for (size_t i = 0; i < nres; i++)
		state_files_foreach(c->st, res[i].id, audit_file, &a);
	state_resources_free(res, nres);
	audit_hashes(&a);
	audit_dirs(&a);
	if (deep)
		audit_packages(&a);
	pkgfiles_release(&a.pkgs);
	*hidden = a.hidden;
	return a.findings;
}

/* Layer 2: the libraries TF loads. Returns the number that fail. */
static size_t verify_libs(struct ctx *c, const struct stackinfo *si, const struct compat *kb)
{
	struct strvec sonames = STRVEC_INIT;
	struct libcheck_result res;
	size_t nfail = 0;
	if (stackinfo_sonames(si, kb, &sonames) == 0) {
		ev_log(c, EV_WARN,
		       "  libraries: no soname list for CUDA %s / cuDNN %s: not checked",
		       si->cuda ? si->cuda : "?", si->cudnn ? si->cudnn : "none");
		goto out;
	}
	int rc = libcheck_run((const char *const *)si->lib_dirs.v, si->lib_dirs.n,
	                      (const char *const *)sonames.v, sonames.n, 0, &res);
	if (rc == TF_EFAIL) {
		ev_log(c, EV_ERROR, "  libraries: the checking process could not be started");
		nfail = sonames.n;
		goto release;
	}
	for (size_t i = 0; i < res.n; i++) {
		const struct libcheck_item *it = &res.items[i];
		if (it->state == LIBCHECK_OK) {
			ev_log(c, EV_DEBUG, "  ok %s  %s", it->soname, it->path);
			continue;
		}
		nfail++;
		const char *advice =
		    it->advice ? it->advice : libcheck_advice(it->soname, it->state);
		/* CUDA from wheels: no prefix and no LD_LIBRARY_PATH to fix, a wheel to restore. */
		if (si->cuda_from_pip && it->state == LIBCHECK_NOT_FOUND)
			advice =
			    "no nvidia-*-cu wheel in the env's site-packages/nvidia/*/lib "
			    "ships it: pin the wheel that does in the pip lock (the "
			    "tensorflow[and-cuda] closure) and run `tfprov apply`; if that wheel "
			    "is installed, its file was removed behind tfprov's back: `tfprov "
			    "destroy` the stack and apply it again";
		char *msg =
		    xasprintf("  library %s: %s\n    searched: %s\n    loader: %s\n    fix: %s",
		              it->soname, libcheck_state_name(it->state), res.searched,
		              it->error[0] ? it->error : "(no message)", advice);
		ev_finding(c, EV_ERROR,
		           &(struct ev_finding){.origin = "verify",
		                                .kind = "library",
		                                .severity = "error",
		                                .stack = si->name,
		                                .path = it->soname,
		                                .expected = "loads",
		                                .actual = libcheck_state_name(it->state),
		                                .why = it->error[0] ? it->error : NULL,
		                                .fix = advice},
		           msg);
		free(msg);
	}
	if (res.child[0])
		ev_log(c, EV_ERROR, "  the library check process %s", res.child);
	if (nfail == 0)
		ev_log(c, EV_INFO,
		       "  libraries: all %zu that TensorFlow %s loads for CUDA %s%s%s "
		       "load from %s",
		       res.n, si->tf ? si->tf : "", si->cuda ? si->cuda : "?",
		       si->has_cudnn ? " / cuDNN " : "",
		       si->has_cudnn && si->cudnn ? si->cudnn : "", res.searched);
release:
	libcheck_result_release(&res);
out:
	strvec_release(&sonames);
	return nfail;
}

/* Layer 3: the GPU. Returns the exit-code contribution (0, TF_EREBOOT, TF_EVERIFY). */
static int verify_gpu(struct ctx *c, const struct stackinfo *si, size_t lib_failures,
                      int after_apply, int *skipped)
{
	struct stack_gpu g;
	int allowed = (c->flags & CTX_NO_GPU) || si->m->driver.policy == DRIVER_SKIP || after_apply;
	const char *why_allowed = (c->flags & CTX_NO_GPU) ? "--no-gpu"
	                          : si->m->driver.policy == DRIVER_SKIP
	                              ? "the manifest's driver.policy: skip"
	                              : "the apply's driver check passed";
	if (lib_failures) {
		ev_log(c, EV_ERROR, "  GPU compute: NOT CHECKED: the libraries above do not load");
		return TF_EVERIFY;
	}
	stack_gpu_check(si, &g);
	switch (g.verdict) {
	case STACK_GPU_OK:
		ev_log(c, EV_INFO,
		       "  GPU compute: Conv2D %dx%dx%dx%d -> %d filters %dx%d through cuDNN %ld on "
		       "device 0 (compute capability %d.%d, driver %s): output matches the CPU "
		       "reference (max abs error %.3g <= %.3g), %.3f ms per forward",
		       g.conv.params.n, g.conv.params.c, g.conv.params.h, g.conv.params.w,
		       g.conv.params.k, g.conv.params.r, g.conv.params.s, g.conv.cudnn_version,
		       g.conv.cc_major, g.conv.cc_minor, g.probe.driver_version, g.conv.max_abs_err,
		       g.conv.params.tol, g.conv.ms_per_forward);
		return 0;
	case STACK_GPU_REBOOT:
		ev_log(c, EV_ERROR,
		       "  GPU compute: NOT CHECKED: driver: %s. Fix: reboot (or unload "
		       "and reload the nvidia kernel modules)",
		       g.reason);
		return TF_EREBOOT;
	case STACK_GPU_ABSENT:
		if (allowed) {
			ev_log(c, EV_WARN,
			       "  GPU compute: SKIPPED (%s): driver: %s. Files and libraries were "
			       "checked; nothing about a GPU was.",
			       why_allowed, g.reason);
			*skipped = 1;
			return 0;
		}
		ev_log(c, EV_ERROR,
		       "  GPU compute: FAILED at the driver layer: %s. The stack requires a GPU "
		       "(driver.policy: require); install or load the NVIDIA driver, or pass "
		       "--no-gpu to check only files and libraries",
		       g.reason);
		return TF_EVERIFY;
	case STACK_GPU_NOT_RUN:
		if (!si->has_cudnn) {
			ev_log(c, EV_WARN,
			       "  GPU compute: SKIPPED: the stack has no cuDNN to probe "
			       "with");
			*skipped = 1;
			return 0;
		}
		ev_log(c, EV_ERROR, "  GPU compute: NOT CHECKED: %s", g.reason);
		return TF_EVERIFY;
	case STACK_GPU_FAILED:
		break;
	}
	if (allowed && strcmp(g.layer, "driver") == 0) {
		ev_log(c, EV_WARN,
		       "  GPU compute: SKIPPED (%s): the native probe failed at the "
		       "driver layer: %s",
		       why_allowed, g.reason);
		*skipped = 1;
		return 0;
	}
	ev_log(c, EV_ERROR, "  GPU compute: FAILED at the %s layer: %s", g.layer, g.reason);
	return TF_EVERIFY;
}

static int worse(int a, int b)
{
	if (a == TF_EVERIFY || b == TF_EVERIFY)
		return TF_EVERIFY;
	if (a == TF_EREBOOT || b == TF_EREBOOT)
		return TF_EREBOOT;
	return a ? a : b;
}

static int verify_stack(struct ctx *c, struct opts *o, const char *name, const struct compat *kb,
                        int *skipped, int *has_cuda)
{
	struct stackinfo si;
	struct why err = {0};
	int rc = stackinfo_load(c, name, &si, &err);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "stack %s: %s", name,
		       err.msg ? err.msg : "no recorded generation");
		why_clear(&err);
		return TF_EVERIFY;
	}
	ev_log(c, EV_INFO, "stack %s (generation %lld):", name, (long long)si.gen);
	int hidden = 0;
	int files = verify_files(c, name, si.stack_id, o->deep, &hidden);
	if (files > 0)
		ev_log(c, EV_ERROR,
		       "  files: %d path%s from what was placed; `tfprov apply` repairs "
		       "recorded files from the cache; a package's files (named above), a "
		       "reinstall of that package",
		       files, plural(files, " differs", "s differ"));
	if (hidden > 0)
		ev_log(c, EV_ERROR,
		       "  files: %d of them kept their size, time and mode, which is all apply "
		       "compares: remove %s and run `tfprov apply` to restore %s",
		       hidden, hidden == 1 ? "it" : "them", hidden == 1 ? "it" : "them");
	else if (files == 0)
		ev_log(c, EV_INFO, "  files: all placed files are intact%s",
		       o->deep ? " (rehashed, packages checked against their records)" : "");
	/* Drift is exit 2 here as in status: apply would change something. */
	rc = files > 0 ? TF_ECHANGES : files < 0 ? TF_ESTATE : 0;
	if (has_cuda)
		*has_cuda = si.has_cuda;
	if (si.has_cuda) {
		size_t nfail = verify_libs(c, &si, kb);
		rc = worse(rc, nfail ? TF_EVERIFY : 0);
		rc = worse(rc, verify_gpu(c, &si, nfail, o->allow_no_gpu, skipped));
	}
	json_t *d = json_pack("{s:s,s:I,s:i,s:b,s:i}", "stack", name, "generation",
	                      (json_int_t)si.gen, "file_findings", files > 0 ? files : 0, "deep",
	                      o->deep, "exit_code", tf_exit_code(rc));
	ev_data(c, "verify_result", d);
	json_decref(d);
	stackinfo_release(&si);
	return rc;
}

int cli_verify_stack(struct ctx *c, const char *name, int *skipped, int *has_cuda)
{
	struct compat *kb = NULL;
	struct diags d = {0};
	/* The apply went ahead (its driver precheck passed): a machine without a GPU
	 * has its GPU checks SKIPPED, loudly, rather than failed. */
	struct opts o = {.allow_no_gpu = 1};
	if (compat_load(compat_default_path(), &kb, &d) != 0)
		ev_log(c, EV_WARN,
		       "cannot load the knowledge base %s: checking the built-in soname "
		       "lists only",
		       compat_default_path());
	int rc = verify_stack(c, &o, name, kb, skipped, has_cuda);
	compat_free(kb);
	diags_release(&d);
	return rc;
}

int cmd_verify(struct ctx *c, struct opts *o)
{
	struct strvec names = STRVEC_INIT;
	struct compat *kb = NULL;
	struct diags d = {0};
	int rc = 0, n = 0, skipped = 0;
	if (c->st == NULL) {
		ev_log(c, EV_ERROR, "nothing to verify: no stack was applied under %s", c->root);
		return TF_EFAIL;
	}
	stackinfo_names(c, &names);
	if (compat_load(compat_default_path(), &kb, &d) != 0)
		ev_log(c, EV_WARN,
		       "cannot load the knowledge base %s: checking the built-in soname "
		       "lists only",
		       compat_default_path());
	for (size_t i = 0; i < names.n; i++) {
		if (o->args.n && strcmp(o->args.v[0], names.v[i]) != 0)
			continue;
		n++;
		rc = worse(rc, verify_stack(c, o, names.v[i], kb, &skipped, NULL));
		if (tf_interrupted)
			break;
	}
	if (n == 0) {
		ev_log(c, EV_ERROR, "no stack %s%s", o->args.n ? "named " : "applied",
		       o->args.n ? o->args.v[0] : "");
		rc = TF_EFAIL;
	} else if (rc == TF_EVERIFY) {
		ev_log(c, EV_ERROR, "verify: FAILED (see above)");
	} else if (rc == TF_ECHANGES) {
		ev_log(c, EV_ERROR, "verify: DRIFT: files differ from what was placed (see above)");
	} else if (rc == TF_EREBOOT) {
		ev_log(c, EV_ERROR,
		       "verify: files and libraries are fine; reboot required before "
		       "the GPU can be used");
	} else if (skipped) {
		ev_log(c, EV_WARN,
		       "verify: files and libraries ok; GPU compute check SKIPPED (no "
		       "GPU): the stack is NOT proven to compute on a GPU");
	} else {
		ev_log(c, EV_INFO, "verify: ok");
	}
	compat_free(kb);
	diags_release(&d);
	strvec_release(&names);
	return rc;
}
