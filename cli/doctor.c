/*
 * doctor.c - `tfprov doctor [MANIFEST]`: the setup guide's troubleshooting
 * table as checks. Every finding says what is wrong, why it matters and the
 * fix; a clean check says so in one line.
 *
 * Checks, for the machine and for each stack (the manifest given, or every
 * applied stack, read back from the state):
 *   driver     no NVIDIA driver; NVML "Driver/library version mismatch"
 *              (upgraded without reboot: reboot required); a driver older
 *              than the stack's CUDA minimum (knowledge base)
 *   kernels    a GPU (found, or listed in driver.gpus) whose compute
 *              capability the TF build has no kernels for, or only PTX (JIT
 *              at first start)
 *   libraries  every soname TF loads (cuDNN first among them) from the
 *              stack's dirs: which file, which path, the loader's error
 *   memory     TF_FORCE_GPU_ALLOW_GROWTH in the stack's env and the caller's
 *              shell: the ResourceExhaustedError (OOM) advice
 *   pip        tensorflow-gpu pinned in the manifest or installed in the env
 *   windows    native Windows with TF above the last Windows GPU build
 *   alternatives  when the driver or a GPU cannot serve the stack cleanly: the
 *              shipped stacks and tested TF builds that run on this driver and
 *              these GPUs (the same rule, compat_stack_fits)
 *   shadowing  CUDA installs tfprov did not make (/usr/local/cuda*, /opt/cuda*)
 *              and entries of PATH / LD_LIBRARY_PATH that put another CUDA's
 *              nvcc/ptxas or libraries in front of the stack's
 *
 * Exit codes, the same as `plan` for the same cause: 3 when the MANIFEST is
 * invalid (it does not parse, or it has compat lint errors: printed with
 * FILE:LINE:COL, and the checks go on); else 6 when the driver stops an apply
 * before any change (no driver, or one below the CUDA runtime's floor: plan's
 * driver precondition); else 8 when another problem was found (the stack
 * cannot work as it is: what `verify` fails with); else 7 when the only
 * blocker is a reboot (driver/library mismatch); else 0 (warnings and notes
 * do not change it). A missing driver is a problem unless --no-gpu or
 * driver.policy: skip allows it.
 *
 * The whole report goes to stdout, problems included, so `tfprov doctor >
 * report.txt` keeps all of it; with --json each line is an event as usual.
 * doctor reads only; it never changes the machine or the state.
 */
#include "cli.h"
#include "kb.h"
#include "datadir.h"
#include "error.h"
#include "event.h"
#include "gpu.h"
#include "manifest.h"
#include "python.h"
#include "stackinfo.h"
#include "state.h"
#include "version.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* SEV_BLOCKER: a problem that also stops `apply` before any change (plan's exit 6). */
enum severity { SEV_OK, SEV_NOTE, SEV_WARN, SEV_PROBLEM, SEV_REBOOT, SEV_BLOCKER };

struct doctor {
	struct ctx *c;
	const struct compat *kb;
	struct gpu_probe gpu;
	int problems, warnings, reboot, blockers, manifest_errors;
	const char *check; /* the check running: a finding's kind */
	const char *stack; /* the stack it looks at, NULL for the machine */
};

/* One line of the report: stdout for a person (all of it), an event under --json. */
static void say(struct ctx *c, enum ev_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(struct ctx *c, enum ev_level lvl, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	if (c->flags & CTX_JSON)
		ev_log(c, lvl, "%s", msg);
	else if (!(c->flags & CTX_QUIET) || lvl >= EV_WARN)
		printf("%s\n", msg);
	free(msg);
}

/* One finding: what, why, the fix. why and fix may be NULL for ok/notes. */
static void finding(struct doctor *d, enum severity sev, const char *what, const char *why,
                    const char *fix)
{
	static const char *const tag[] = {"ok",     "note", "warning", "PROBLEM", "REBOOT REQUIRED",
	                                  "PROBLEM"};
	static const char *const severity[] = {"ok", "note", "warning", "error", "reboot"};
	enum ev_level lvl = EV_INFO;
	if (sev == SEV_BLOCKER) {
		d->blockers++;
		sev = SEV_PROBLEM;
	}
	if (sev == SEV_WARN) {
		lvl = EV_WARN;
		d->warnings++;
	} else if (sev == SEV_PROBLEM) {
		lvl = EV_ERROR;
		d->problems++;
	} else if (sev == SEV_REBOOT) {
		lvl = EV_ERROR;
		d->reboot++;
	}
	if (!(d->c->flags & CTX_JSON)) {
		say(d->c, lvl, "  [%s] %s%s%s%s%s", tag[sev], what, why ? "\n      why: " : "",
		    why ? why : "", fix ? "\n      fix: " : "", fix ? fix : "");
		return;
	}
	char *msg = xasprintf("  [%s] %s%s%s%s%s", tag[sev], what, why ? "\n      why: " : "",
	                      why ? why : "", fix ? "\n      fix: " : "", fix ? fix : "");
	ev_finding(d->c, lvl,
	           &(struct ev_finding){.origin = "doctor",
	                                .kind = d->check,
	                                .severity = severity[sev],
	                                .stack = d->stack,
	                                .actual = what,
	                                .why = why,
	                                .fix = fix},
	           msg);
	free(msg);
}

static int gpu_allowed(const struct ctx *c, const struct stackinfo *si)
{
	return (c->flags & CTX_NO_GPU) || (si && si->m->driver.policy == DRIVER_SKIP);
}

/* The machine's driver, once. */
static void check_driver(struct doctor *d, int allowed)
{
	d->check = "driver";
	const struct gpu_probe *g = &d->gpu;
	char *what = NULL;
	if (g->nvml_status == 18 && !g->found) {
		what = xasprintf("NVIDIA driver/library version mismatch (%s)", g->error);
		finding(
		    d, SEV_REBOOT, what,
		    "the driver was upgraded: the kernel module still loaded belongs to the old "
		    "driver and the user-space libraries to the new one, so every CUDA program "
		    "(and TensorFlow) fails to initialise",
		    "reboot; or, with no process using the GPU, reload the modules (rmmod "
		    "nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia)");
		goto out;
	}
	if (!g->found) {
		what = xasprintf("no NVIDIA driver: %s", g->error[0] ? g->error : "not found");
		if (allowed) {
			free(what);
			what =
			    xasprintf("no NVIDIA driver (%s); GPU checks are SKIPPED: no-GPU "
			              "provisioning is allowed (--no-gpu or driver.policy: skip)",
			              g->error[0] ? g->error : "not found");
			finding(d, SEV_NOTE, what, NULL, NULL);
			goto out;
		}
		finding(d, SEV_BLOCKER, what,
		        "without a loaded NVIDIA kernel driver TensorFlow runs on the CPU "
		        "(tf.config.list_physical_devices('GPU') is empty)",
		        g->wsl ? "on WSL2 the driver lives on the Windows side: install the NVIDIA "
		                 "Windows driver and do not install a Linux driver inside WSL"
		               : "install the NVIDIA driver for your GPU from your distribution or "
		                 "NVIDIA (tfprov never installs a kernel driver), then reboot");
		goto out;
	}
	what = xasprintf("NVIDIA driver %s via %s, %d GPU%s%s", g->driver_version, g->source,
	                 g->ngpus, g->ngpus == 1 ? "" : "s", g->wsl ? " (WSL2)" : "");
	finding(d, SEV_OK, what, NULL, NULL);
out:
	free(what);
}

/* The GPUs NVML reports with a known compute capability: "8.6" and "GPU 0 (name)". */
static void machine_gpus(const struct doctor *d, struct strvec *ccs, struct strvec *names)
{
	for (int i = 0; i < d->gpu.ngpus; i++) {
		if (d->gpu.gpus[i].cc_major < 0)
			continue;
		strvec_pushf(ccs, "%d.%d", d->gpu.gpus[i].cc_major, d->gpu.gpus[i].cc_minor);
		if (names)
			strvec_pushf(names, "GPU %d (%s)", i, d->gpu.gpus[i].name);
	}
}

/* A candidate stack that runs here, if it does: appended to sb. */
static void fits_here(const struct doctor *d, const struct strvec *ccs, const char *tf,
                      const char *cuda, int windows, const char *label, struct strbuf *sb)
{
	if (!compat_stack_fits(d->kb, tf, cuda, windows, d->gpu.driver_version,
	                       (const char *const *)ccs->v, ccs->n))
		return;
	strbuf_addf(sb, "%s%s", sb->len ? "; " : "", label);
}

/*
 * When the machine cannot serve a stack as it is: the shipped stacks
 * (manifests/ of the data directory) and the knowledge base's tested builds
 * (what `tfprov init` writes from the catalog) that run cleanly on this
 * driver and these GPUs, by the same rule (compat_stack_fits), newest first.
 */
static void suggest_stacks(struct doctor *d, const struct stackinfo *si)
{
	struct strvec ccs = STRVEC_INIT;
	struct strbuf shipped = STRBUF_INIT, built = STRBUF_INIT;
	d->check = "alternatives";
	char *dir = path_join(datadir(), "manifests");
	struct dirent **ents = NULL;
	int n = scandir(dir, &ents, NULL, alphasort), nbuilt = 0;

	machine_gpus(d, &ccs, NULL);
	for (int i = n - 1; i >= 0; i--) {
		const char *f = ents[i]->d_name;
		char *path = str_ends_with(f, ".yaml") ? path_join(dir, f) : NULL;
		struct manifest *m = NULL;
		struct diags dg = {0};
		if (path && manifest_load(path, &m, &dg) == 0 && m->versions.tensorflow.s &&
		    (si->m->path == NULL || strcmp(si->m->path, path) != 0)) {
			const char *cuda = compat_stack_cuda(d->kb, m, NULL);
			char *label = xasprintf("manifests/%s (TF %s, CUDA %s)", f,
			                        m->versions.tensorflow.s, cuda ? cuda : "?");
			fits_here(d, &ccs, m->versions.tensorflow.s, cuda,
			          m->stack.platform == PLATFORM_WINDOWS_X86_64, label, &shipped);
			free(label);
		}
		manifest_free(m);
		diags_release(&dg);
		free(path);
		free(ents[i]);
	}
	free(ents);
	/* tf_linux is newest first; three suggestions are enough to choose from. */
	for (size_t i = 0; i < d->kb->ntf_linux && nbuilt < 3; i++) {
		const struct compat_tf_build *b = &d->kb->tf_linux[i];
		const char *rel = compat_cuda_release(d->kb, b->cuda);
		size_t before = built.len;
		char *label =
		    xasprintf("`tfprov init --tensorflow %ld.%ld` (CUDA %s, cuDNN %s)",
		              version_component(b->version, 0), version_component(b->version, 1),
		              rel ? rel : b->cuda, b->cudnn);
		if (strstr(built.buf ? built.buf : "", label) == NULL)
			fits_here(d, &ccs, b->version, rel ? rel : b->cuda, 0, label, &built);
		nbuilt += built.len != before;
		free(label);
	}
	char *what =
	    xasprintf("stacks that run on driver %s and %s here: %s%s%s", d->gpu.driver_version,
	              ccs.n == 1 ? "this GPU" : "these GPUs", shipped.len ? shipped.buf : "",
	              shipped.len && built.len ? "; or " : "", built.len ? built.buf : "");
	if (shipped.len || built.len)
		finding(d, SEV_NOTE, what, NULL, NULL);
	else
		finding(d, SEV_NOTE,
		        "no shipped stack and no tested TensorFlow build runs cleanly on this "
		        "driver and these GPUs: upgrade the driver",
		        NULL, NULL);
	free(what);
	free(dir);
	strbuf_release(&shipped);
	strbuf_release(&built);
	strvec_release(&ccs);
}

static void check_driver_version(struct doctor *d, const struct stackinfo *si)
{
	d->check = "driver";
	const struct gpu_probe *g = &d->gpu;
	if (!g->found || d->kb == NULL || si->cuda == NULL)
		return;
	int windows = si->m->stack.platform != PLATFORM_LINUX_X86_64;
	const char *min = NULL, *floor = NULL;
	/* The rule validate, plan and init apply (compat_gpu.c). */
	enum compat_driver_fit fit =
	    compat_judge_driver(d->kb, si->cuda, g->driver_version, windows, &min, &floor);
	if (fit != COMPAT_DRIVER_MINOR_COMPAT && fit != COMPAT_DRIVER_TOO_OLD)
		return;
	char *what = xasprintf("driver %s is older than CUDA %s's minimum %s", g->driver_version,
	                       si->cuda, min);
	if (fit == COMPAT_DRIVER_MINOR_COMPAT) {
		finding(d, SEV_WARN, what,
		        "it is above the minor-version-compatibility floor, so the runtime starts, "
		        "but PTX built by the newer compiler cannot be JIT-compiled by this driver",
		        "upgrade the NVIDIA driver");
	} else {
		finding(d, SEV_BLOCKER, what,
		        "the CUDA runtime refuses to start: cudaGetDeviceCount returns 35 \"CUDA "
		        "driver version is insufficient for CUDA runtime version\"",
		        "upgrade the NVIDIA driver, or choose a stack with an older CUDA (below)");
	}
	free(what);
}

/* Returns how many GPUs the stack cannot serve cleanly (a problem or a warning). */
static int check_kernels(struct doctor *d, const struct stackinfo *si)
{
	d->check = "kernels";
	struct strvec ccs = STRVEC_INIT, names = STRVEC_INIT;
	int bad = 0;
	if (d->kb == NULL || si->tf == NULL)
		return 0;
	machine_gpus(d, &ccs, &names);
	for (size_t i = 0; i < si->m->driver.ngpus; i++) {
		strvec_push(&ccs, si->m->driver.gpus[i].s);
		strvec_push(&names, "a GPU listed in driver.gpus");
	}
	for (size_t i = 0; i < ccs.n; i++) {
		struct compat_verdict v;
		char *what = NULL, *why = NULL;
		/* The rule validate applies to driver.gpus and plan to NVML's GPUs. */
		if (compat_judge_gpu(d->kb, si->tf, si->cuda, ccs.v[i], &v) != 0)
			continue;
		if (v.code == NULL && v.kernels == COMPAT_KERNEL_SASS) {
			what = xasprintf("%s, compute capability %s: native kernels in TensorFlow "
			                 "%s",
			                 names.v[i], ccs.v[i], si->tf);
			finding(d, SEV_OK, what, NULL, NULL);
		} else if (v.code != NULL) {
			int none = strcmp(v.code, "compat.gpu-no-kernels") == 0;
			int ptx = v.kernels == COMPAT_KERNEL_PTX && v.sev != DIAG_ERROR;
			what = xasprintf("%s, compute capability %s: %s [%s]", names.v[i], ccs.v[i],
			                 v.msg, v.code);
			why = xasprintf(
			    "%s; %s", v.hint,
			    none
			        ? "every GPU op fails with \"CUDA_ERROR_INVALID_IMAGE\" / \"device "
			          "kernel image is invalid\" (or TF ignores the GPU as too old)"
			    : ptx
			        ? "the driver JIT-compiles every kernel from PTX at first use: the "
			          "first start takes minutes (the log says \"TensorFlow was not "
			          "built with CUDA kernel binaries compatible with compute "
			          "capability ...\") and the compiled kernels are lost when the "
			          "JIT "
			          "cache is too small"
			        : "the stack's CUDA libraries carry no native code for this GPU");
			finding(
			    d, v.sev == DIAG_ERROR ? SEV_PROBLEM : SEV_WARN, what, why,
			    ptx ? "set CUDA_CACHE_MAXSIZE=4294967296 in the manifest's env.vars "
			          "so the JIT cache keeps them, or use a stack with native (SASS) "
			          "kernels for this GPU (below)"
			        : "use a stack built for this compute capability (below, and "
			          "`tfprov validate` with driver.gpus), or another GPU");
			bad++;
		}
		free(what);
		free(why);
		compat_verdict_release(&v);
	}
	strvec_release(&ccs);
	strvec_release(&names);
	return bad;
}

static void check_libraries(struct doctor *d, const struct stackinfo *si)
{
	d->check = "libraries";
	struct strvec sonames = STRVEC_INIT;
	struct libcheck_result res;
	struct stat st;
	if (!si->has_cuda)
		return;
	/* CUDA from pip wheels lives in the Python env, not in a CUDA prefix. */
	const char *placed = si->cuda_from_pip ? si->env_prefix : si->cuda_prefix;
	if (placed == NULL || stat(placed, &st) != 0) {
		char *what = xasprintf("stack %s is not applied here (%s is absent): library "
		                       "checks skipped",
		                       si->name, placed ? placed : "no CUDA prefix");
		finding(d, SEV_NOTE, what, NULL, NULL);
		free(what);
		return;
	}
	if (stackinfo_sonames(si, d->kb, &sonames) == 0)
		goto out;
	libcheck_run((const char *const *)si->lib_dirs.v, si->lib_dirs.n,
	             (const char *const *)sonames.v, sonames.n, 0, &res);
	size_t bad = 0;
	for (size_t i = 0; i < res.n; i++) {
		const struct libcheck_item *it = &res.items[i];
		if (it->state == LIBCHECK_OK)
			continue;
		bad++;
		int cudnn = str_starts_with(it->soname, "libcudnn");
		char *what = xasprintf(
		    "%s%s cannot be loaded (%s)%s%s", cudnn ? "cuDNN is not loadable: " : "",
		    it->soname, libcheck_state_name(it->state), it->path[0] ? ": " : "", it->path);
		char *why = xasprintf("TensorFlow logs \"Could not load dynamic library '%s'\" "
		                      "and runs without the GPU; searched %s; loader: %s",
		                      it->soname, res.searched, it->error[0] ? it->error : "-");
		finding(d, SEV_PROBLEM, what, why,
		        it->advice ? it->advice : libcheck_advice(it->soname, it->state));
		free(what);
		free(why);
	}
	if (bad == 0) {
		char *what =
		    xasprintf("all %zu libraries TensorFlow %s loads (cuDNN included) load "
		              "from %s",
		              res.n, si->tf ? si->tf : "", res.searched);
		finding(d, SEV_OK, what, NULL, NULL);
		free(what);
	}
	libcheck_result_release(&res);
out:
	strvec_release(&sonames);
}

static int truthy(const char *v)
{
	return v && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

static void check_memory(struct doctor *d, const struct stackinfo *si)
{
	d->check = "memory";
	const char *stack_v = stackinfo_allow_growth(si);
	const char *shell_v = getenv("TF_FORCE_GPU_ALLOW_GROWTH");
	char *what = NULL;
	static const char oom_fix[] =
	    "a ResourceExhaustedError (OOM) with growth on means the model does not fit: reduce "
	    "the batch size, use mixed_float16, or stop other processes on the GPU (nvidia-smi)";
	if (!truthy(stack_v)) {
		what = xasprintf("memory growth is off in the stack's env "
		                 "(TF_FORCE_GPU_ALLOW_GROWTH=%s in env.vars)",
		                 stack_v);
		finding(d, SEV_WARN, what,
		        "TensorFlow then reserves nearly all GPU memory at start: a second TF "
		        "process on the same GPU fails with ResourceExhaustedError (OOM) although "
		        "the first one uses little",
		        "remove the override from env.vars (tfprov's default is true), or call "
		        "tf.config.experimental.set_memory_growth(gpu, True) before using the GPU");
	} else {
		what = xasprintf("memory growth is on (TF_FORCE_GPU_ALLOW_GROWTH=%s in the stack's "
		                 "env): TF allocates GPU memory as it needs it",
		                 stack_v);
		finding(d, SEV_OK, what, NULL, NULL);
		finding(d, SEV_NOTE, "out of GPU memory (ResourceExhaustedError)", NULL, oom_fix);
	}
	free(what);
	what = NULL;
	if (shell_v && truthy(shell_v) != truthy(stack_v)) {
		what = xasprintf("your shell sets TF_FORCE_GPU_ALLOW_GROWTH=%s, the stack's env %s",
		                 shell_v, stack_v);
		finding(d, SEV_WARN, what,
		        "whatever is exported last wins: programs started from this shell run with "
		        "the shell's value",
		        "unset it in your shell rc, or source the stack's profile after it");
	}
	free(what);
	struct stat st;
	if (si->stack_id && si->profile && stat(si->profile, &st) != 0) {
		what = xasprintf("the stack's activation script %s is missing", si->profile);
		finding(
		    d, SEV_PROBLEM, what,
		    "without it no shell gets the stack's CUDA_HOME, LD_LIBRARY_PATH and memory "
		    "growth",
		    "run `tfprov apply` to restore it");
		free(what);
	}
}

static const struct compat_pip_removed *removed_row(const struct compat *kb, const char *name)
{
	for (size_t i = 0; kb && i < kb->npip_removed; i++)
		if (strcmp(kb->pip_removed[i].name, name) == 0)
			return &kb->pip_removed[i];
	return NULL;
}

static void tf_gpu_finding(struct doctor *d, const struct stackinfo *si, const char *where,
                           const char *version)
{
	const struct compat_pip_removed *r = removed_row(d->kb, "tensorflow-gpu");
	char *what = xasprintf("tensorflow-gpu%s%s is %s", version ? " " : "",
	                       version ? version : "", where);
	char *why = xasprintf(
	    "tensorflow-gpu was discontinued: the last real build is %s (Linux) / %s (Windows); "
	    "later versions are a stub that refuses to install, and next to `tensorflow` it "
	    "installs a second, conflicting copy of the same modules",
	    r && r->last_real_linux ? r->last_real_linux : "2.11.0",
	    r && r->last_real_windows ? r->last_real_windows : "2.10.1");
	char *fix = xasprintf("pip uninstall tensorflow-gpu and pin tensorflow==%s instead%s%s",
	                      si->tf ? si->tf : "<version>", r && r->replacement ? "; " : "",
	                      r && r->replacement ? r->replacement : "");
	finding(d, SEV_PROBLEM, what, why, fix);
	free(what);
	free(why);
	free(fix);
}

static void check_pip(struct doctor *d, const struct stackinfo *si)
{
	d->check = "pip";
	int found = 0;
	for (size_t i = 0; i < si->m->pip.nreqs; i++)
		if (strcmp(si->m->pip.reqs[i].name, "tensorflow-gpu") == 0) {
			tf_gpu_finding(d, si, "pinned in the manifest's pip requirements",
			               si->m->pip.reqs[i].version);
			found = 1;
		}
	if (si->python == NULL || access(si->python, X_OK) != 0)
		return;
	struct pip_result res = {0};
	struct why err = {0};
	if (env_dists(si->env_prefix, &res, &err) != 0) {
		char *what = xasprintf("cannot list the packages of %s: %s", si->env_prefix,
		                       err.msg ? err.msg : "unreadable site-packages");
		finding(d, SEV_WARN, what, NULL, "check the env with `tfprov verify`");
		free(what);
		goto out;
	}
	for (size_t i = 0; i < res.n; i++)
		if (strcmp(res.v[i].name, "tensorflow-gpu") == 0) {
			char *where = xasprintf("installed in the stack's env %s", si->env_prefix);
			tf_gpu_finding(d, si, where, res.v[i].version);
			free(where);
			found = 1;
		}
	if (!found)
		finding(d, SEV_OK, "no tensorflow-gpu in the manifest or the env", NULL, NULL);
out:
	why_clear(&err);
	pip_result_release(&res);
}

static void check_windows(struct doctor *d, const struct stackinfo *si)
{
	d->check = "windows";
	if (si->m->stack.platform != PLATFORM_WINDOWS_X86_64 || si->tf == NULL || d->kb == NULL ||
	    d->kb->windows_gpu_last == NULL)
		return;
	if (version_cmp_n(si->tf, d->kb->windows_gpu_last, 2) <= 0)
		return;
	char *what = xasprintf("native Windows with TensorFlow %s: the last TF with GPU support "
	                       "on native Windows is %s",
	                       si->tf, d->kb->windows_gpu_last);
	finding(d, SEV_PROBLEM, what,
	        "TensorFlow 2.11 and later are CPU-only on native Windows: the stack would never "
	        "use the GPU",
	        d->kb->windows_gpu_instead
	            ? d->kb->windows_gpu_instead
	            : "use WSL2 (platform: wsl2), or TF 2.10 on native Windows");
	free(what);
}

/* 1 when dir holds a file whose name starts with one of the prefixes. */
static int dir_has(const char *dir, const char *const *prefixes, char *hit, size_t n)
{
	DIR *dd = opendir(dir);
	struct dirent *e;
	int found = 0;
	while (dd && !found && (e = readdir(dd)) != NULL)
		for (size_t i = 0; prefixes[i] && !found; i++)
			if (str_starts_with(e->d_name, prefixes[i])) {
				snprintf(hit, n, "%s", e->d_name);
				found = 1;
			}
	if (dd)
		closedir(dd);
	return found;
}

static int in_list(const struct strvec *v, const char *s)
{
	for (size_t i = 0; i < v->n; i++)
		if (strcmp(v->v[i], s) == 0)
			return 1;
	return 0;
}

/* Entries of a ':'-list (PATH, LD_LIBRARY_PATH) that hold CUDA files ahead of the stack's. */
static void check_search_path(struct doctor *d, const char *var, const struct strvec *own,
                              const char *const *prefixes, const char *kind)
{
	const char *val = getenv(var);
	if (val == NULL || *val == '\0')
		return;
	char *copy = xstrdup(val), *save = NULL;
	int stack_seen = 0, stack_listed = 0;
	for (size_t i = 0; i < own->n; i++) {
		size_t len = strlen(own->v[i]);
		const char *p = strstr(val, own->v[i]);
		if (p && (p == val || p[-1] == ':') && (p[len] == '\0' || p[len] == ':'))
			stack_listed = 1;
	}
	for (char *e = strtok_r(copy, ":", &save); e; e = strtok_r(NULL, ":", &save)) {
		char hit[256];
		if (in_list(own, e)) {
			stack_seen = 1;
			continue;
		}
		if (stack_seen || !dir_has(e, prefixes, hit, sizeof(hit)))
			continue;
		char *what =
		    xasprintf("%s entry %s holds %s (%s), ahead of the stack's", var, e, hit, kind);
		char *why = xasprintf(
		    "%s is searched in order: %s comes from this other CUDA install instead of "
		    "the stack's%s",
		    var, hit,
		    stack_listed ? ""
		                 : " (the stack's own dirs are not in it at all: its profile is "
		                   "not sourced in this shell)");
		finding(
		    d, SEV_WARN, what, why,
		    "remove the entry from your shell rc (or put it after the stack's dirs) and "
		    "source the stack's profile script");
		free(what);
		free(why);
	}
	free(copy);
}

/* CUDA installs tfprov did not make: /usr/local/cuda*, /opt/cuda* under the root. */
static void check_other_cuda(struct doctor *d, const struct strvec *own_prefixes)
{
	static const char *const bases[] = {"/usr/local", "/opt"};
	int n = 0;
	for (size_t b = 0; b < ARRAY_SIZE(bases); b++) {
		char *host = ctx_host_dir(d->c, bases[b]);
		DIR *dd = opendir(host);
		struct dirent *e;
		while (dd && (e = readdir(dd)) != NULL) {
			if (strcmp(e->d_name, "cuda") != 0 && !str_starts_with(e->d_name, "cuda-"))
				continue;
			char *p = path_join(host, e->d_name);
			if (!in_list(own_prefixes, p)) {
				char *what =
				    xasprintf("another CUDA install, not made by tfprov: %s", p);
				finding(
				    d, SEV_NOTE, what, NULL,
				    "tfprov never touches it; it shadows the stack only when "
				    "it is on PATH or LD_LIBRARY_PATH ahead of the stack (checked "
				    "below) or in /etc/ld.so.conf.d");
				free(what);
				n++;
			}
			free(p);
		}
		if (dd)
			closedir(dd);
		free(host);
	}
	if (n == 0)
		finding(d, SEV_OK, "no other CUDA install in /usr/local or /opt", NULL, NULL);
}

static void check_shadowing(struct doctor *d, struct stackinfo *sis, size_t n)
{
	d->check = "shadowing";
	static const char *const libs[] = {"libcudart.so", "libcudnn.so", "libcublas.so", NULL};
	static const char *const tools[] = {"nvcc", "ptxas", NULL};
	struct strvec prefixes = STRVEC_INIT, libdirs = STRVEC_INIT, bins = STRVEC_INIT;
	size_t from_pip = 0;
	for (size_t i = 0; i < n; i++) {
		from_pip += sis[i].cuda_from_pip != 0;
		if (sis[i].cuda_from_pip)
			continue; /* never on LD_LIBRARY_PATH: check_pip_cuda() speaks for it */
		if (sis[i].cuda_prefix) {
			strvec_push(&prefixes, sis[i].cuda_prefix);
			strvec_pushf(&bins, "%s/bin", sis[i].cuda_prefix);
		}
		if (sis[i].env_prefix)
			strvec_pushf(&bins, "%s/bin", sis[i].env_prefix);
		for (size_t k = 0; k < sis[i].lib_dirs.n; k++)
			strvec_push(&libdirs, sis[i].lib_dirs.v[k]);
	}
	check_other_cuda(d, &prefixes);
	if (n == 0 || from_pip < n)
		check_search_path(d, "LD_LIBRARY_PATH", &libdirs, libs, "CUDA libraries");
	check_search_path(d, "PATH", &bins, tools, "CUDA compiler tools; XLA runs ptxas from PATH");
	strvec_release(&prefixes);
	strvec_release(&libdirs);
	strvec_release(&bins);
}

/*
 * CUDA from nvidia-*-cu<N> wheels: TensorFlow loads them from the env's
 * site-packages through its own run path, which the loader searches only after
 * LD_LIBRARY_PATH: any CUDA library there shadows the wheels (tensorflow/tensorflow#60750).
 */
static void check_pip_cuda(struct doctor *d, const struct stackinfo *si)
{
	d->check = "pip_cuda";
	static const char *const libs[] = {"libcudart.so", "libcudnn.so", "libcublas.so", NULL};
	const char *val = getenv("LD_LIBRARY_PATH");
	char *what;
	if (!si->cuda_from_pip)
		return;
	if (si->lib_dirs.n == 0) {
		what =
		    xasprintf("CUDA %s and cuDNN %s will come from the env's nvidia-*-cu wheels; "
		              "none is installed under %s yet",
		              si->cuda ? si->cuda : "?", si->cudnn ? si->cudnn : "-",
		              si->env_prefix ? si->env_prefix : "?");
		finding(d, SEV_NOTE, what, NULL, NULL);
		free(what);
		return;
	}
	what = xasprintf("CUDA %s and cuDNN %s come from the env's nvidia-*-cu wheels (%zu "
	                 "library dir%s under %s), where TensorFlow loads them; the stack sets no "
	                 "LD_LIBRARY_PATH",
	                 si->cuda ? si->cuda : "?", si->cudnn ? si->cudnn : "-", si->lib_dirs.n,
	                 si->lib_dirs.n == 1 ? "" : "s", si->env_prefix ? si->env_prefix : "?");
	finding(d, SEV_OK, what, NULL, NULL);
	free(what);
	if (val == NULL || *val == '\0')
		return;
	char *copy = xstrdup(val), *save = NULL;
	for (char *e = strtok_r(copy, ":", &save); e; e = strtok_r(NULL, ":", &save)) {
		char hit[256];
		if (!dir_has(e, libs, hit, sizeof(hit)))
			continue;
		what = xasprintf("LD_LIBRARY_PATH entry %s holds %s, a second CUDA for stack %s", e,
		                 hit, si->name);
		finding(d, SEV_WARN, what,
		        "the loader searches LD_LIBRARY_PATH before TensorFlow's own run path, so "
		        "this library is loaded instead of the stack's wheel "
		        "(tensorflow/tensorflow#60750)",
		        "remove the entry from LD_LIBRARY_PATH in the shells that run this stack");
		free(what);
	}
	free(copy);
}

static void check_stack(struct doctor *d, const struct stackinfo *si)
{
	d->stack = si->name;
	say(d->c, EV_INFO, "stack %s (TensorFlow %s, CUDA %s, cuDNN %s)%s:", si->name,
	    si->tf ? si->tf : "-", si->cuda ? si->cuda : "-", si->cudnn ? si->cudnn : "-",
	    si->stack_id ? "" : ", from the manifest");
	check_windows(d, si);
	int before = d->problems + d->warnings + d->blockers;
	check_driver_version(d, si);
	if (check_kernels(d, si) > 0 || d->problems + d->warnings + d->blockers > before) {
		if (d->gpu.found && d->kb != NULL)
			suggest_stacks(d, si);
	}
	check_libraries(d, si);
	check_pip_cuda(d, si);
	check_memory(d, si);
	check_pip(d, si);
}

int cmd_doctor(struct ctx *c, struct opts *o)
{
	struct doctor d = {.c = c};
	struct compat *kb = NULL;
	struct diags dg = {0};
	struct strvec names = STRVEC_INIT;
	struct stackinfo *sis = NULL;
	size_t n = 0;
	int rc = 0, allowed = (c->flags & CTX_NO_GPU) != 0;
	if (compat_load(compat_default_path(), &kb, &dg) != 0)
		say(c, EV_WARN, "cannot load the knowledge base %s: version checks are skipped",
		    compat_default_path());
	d.kb = kb;
	if (o->args.n) {
		struct manifest *m = NULL;
		struct diags md = {0};
		rc = manifest_load(o->args.v[0], &m, &md);
		if (rc == 0 && kb)
			compat_lint(kb, m, &md);
		diags_sort(&md);
		if (c->flags & CTX_JSON) {
			for (size_t i = 0; i < md.n; i++)
				cli_diag_event(c, &md.v[i]);
		} else {
			diags_print(&md, stdout, 0);
		}
		/* Lint errors are findings here: doctor goes on to explain the rest. */
		d.problems += (int)md.errors;
		d.manifest_errors += (int)md.errors;
		diags_release(&md);
		if (rc != 0)
			goto out;
		sis = xcalloc(1, sizeof(*sis));
		stackinfo_from_manifest(c, m, &sis[0]);
		if (c->st)
			sis[0].stack_id = state_stack_id(c->st, sis[0].name);
		n = 1;
	} else {
		stackinfo_names(c, &names);
		sis = xcalloc(names.n ? names.n : 1, sizeof(*sis));
		for (size_t i = 0; i < names.n; i++) {
			struct why err = {0};
			if (stackinfo_load(c, names.v[i], &sis[n], &err) == 0) {
				n++;
			} else {
				say(c, EV_ERROR, "stack %s: %s", names.v[i],
				    err.msg ? err.msg : "cannot be read");
				d.problems++;
			}
			why_clear(&err);
		}
	}
	if (n > 0) {
		allowed = 1;
		for (size_t i = 0; i < n; i++)
			if (!gpu_allowed(c, &sis[i]))
				allowed = 0;
	}
	gpu_probe_run(&d.gpu);
	say(c, EV_INFO, "machine:");
	check_driver(&d, allowed);
	check_shadowing(&d, sis, n);
	if (n == 0 && names.n == 0)
		say(c, EV_INFO,
		    "No stack applied under %s; give a manifest to check one: tfprov "
		    "doctor MANIFEST",
		    c->root);
	for (size_t i = 0; i < n && !tf_interrupted; i++)
		check_stack(&d, &sis[i]);
	if (d.manifest_errors)
		rc = TF_EMANIFEST;
	else if (d.blockers)
		rc = TF_EPRECOND;
	else if (d.problems)
		rc = TF_EVERIFY;
	else if (d.reboot)
		rc = TF_EREBOOT;
	say(c, d.problems || d.reboot ? EV_ERROR : EV_INFO, "doctor: %d problem%s, %d warning%s%s",
	    d.problems, d.problems == 1 ? "" : "s", d.warnings, d.warnings == 1 ? "" : "s",
	    d.reboot ? "; reboot required" : "");
out:
	for (size_t i = 0; i < n; i++)
		stackinfo_release(&sis[i]);
	free(sis);
	strvec_release(&names);
	compat_free(kb);
	diags_release(&dg);
	return rc;
}
