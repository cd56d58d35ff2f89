/*
 * driver.c - the `driver` step: a read, never a change. tfprov never installs
 * a kernel driver; it reads what is there and refuses (exit 6) before
 * anything changes when it cannot serve the stack.
 */
#include "kb.h"
#include "error.h"
#include "event.h"
#include "gpu.h"
#include "module.h"
#include "version.h"

#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*
 * Minimum driver for the stack's CUDA: the toolkit's own minimum, or, where
 * NVIDIA documents minor-version compatibility, the family floor (then with a
 * warning that features needing the newer driver are unavailable).
 */
static int driver_check(struct ctx *c, const struct manifest *m, struct step *s)
{
	struct gpu_probe g;
	struct compat *kb = NULL;
	struct diags d = {0};
	int rc = 0;
	int windows = m->stack.platform != PLATFORM_LINUX_X86_64;
	gpu_probe_run(&g);
	if (!g.found) {
		step_fail(s,
		          "no NVIDIA driver found (%s). tfprov never installs a kernel driver: "
		          "install the NVIDIA driver for your GPU%s, or allow provisioning "
		          "without a GPU (driver.policy: skip, or --no-gpu)",
		          g.error[0] ? g.error : "no NVML, no /proc/driver/nvidia",
		          g.wsl ? " on the Windows host (WSL2 uses the Windows driver)" : "");
		rc = TF_EPRECOND;
		goto out;
	}
	if (compat_load(compat_default_path(), &kb, &d) != 0)
		goto report;
	/* CUDA from nvidia-*-cu<N> wheels: the release their runtime wheel carries. */
	const struct pip_req *wheel = NULL;
	const char *cuda = compat_stack_cuda(kb, m, &wheel);
	char *what = wheel ? xasprintf("%s (%s %s)", cuda, wheel->raw_name, wheel->version)
	                   : xstrdup(cuda ? cuda : "");
	if (cuda == NULL) {
		free(what);
		goto report;
	}
	const char *min = NULL, *floor = NULL;
	enum compat_driver_fit fit =
	    compat_judge_driver(kb, cuda, g.driver_version, windows, &min, &floor);
	if (fit == COMPAT_DRIVER_MINOR_COMPAT) {
		ev_log(c, EV_WARN,
		       "driver %s is older than CUDA %s's minimum %s but at or above the "
		       "minor-version-compatibility floor %s: it runs, without features "
		       "that need the newer driver (e.g. PTX built by the newer compiler)",
		       g.driver_version, what, min, floor);
	} else if (fit == COMPAT_DRIVER_TOO_OLD) {
		step_fail(s,
		          "NVIDIA driver %s is too old for CUDA %s: the minimum is %s%s%s "
		          "(source: CUDA release notes). Upgrade the driver, or choose a "
		          "stack with an older CUDA",
		          g.driver_version, what, min, floor ? ", or at least " : "",
		          floor ? floor : "");
		rc = TF_EPRECOND;
		free(what);
		goto out;
	}
	free(what);
	if (m->driver.min_version.set &&
	    version_cmp(g.driver_version, m->driver.min_version.s) < 0) {
		step_fail(s, "NVIDIA driver %s is older than the manifest's driver.min_version %s",
		          g.driver_version, m->driver.min_version.s);
		rc = TF_EPRECOND;
		goto out;
	}
	/* Each GPU NVML reports, by the rule validate applies to driver.gpus (compat_gpu.c). */
	for (int i = 0; i < g.ngpus; i++) {
		char cc[16];
		struct compat_verdict v;
		if (g.gpus[i].cc_major < 0)
			continue;
		snprintf(cc, sizeof(cc), "%d.%d", g.gpus[i].cc_major, g.gpus[i].cc_minor);
		if (compat_judge_gpu(kb, m->versions.tensorflow.s, cuda, cc, &v) != 0 ||
		    v.code == NULL) {
			compat_verdict_release(&v);
			continue;
		}
		if (v.sev == DIAG_ERROR) {
			step_fail(s, "GPU %d (%s, compute capability %s): %s; %s [%s]", i,
			          g.gpus[i].name, cc, v.msg, v.hint, v.code);
			rc = TF_EPRECOND;
			compat_verdict_release(&v);
			goto out;
		}
		ev_log(c, EV_WARN, "GPU %d (%s, compute capability %s): %s; %s [%s]", i,
		       g.gpus[i].name, cc, v.msg, v.hint, v.code);
		compat_verdict_release(&v);
	}
report:
	ev_log(c, EV_INFO, "driver: NVIDIA %s via %s, %d GPU%s%s", g.driver_version, g.source,
	       g.ngpus, g.ngpus == 1 ? "" : "s",
	       g.wsl ? " (WSL2: driver on the Windows host)" : "");
out:
	compat_free(kb);
	diags_release(&d);
	return rc;
}

/*
 * The machine is WSL2 whatever the manifest's platform says (the same test as
 * gpu_probe.c's: Microsoft's kernel in /proc/version, or the WSL driver
 * library directory). There the driver lives on the Windows host, so the plan
 * must say so and never suggest a Linux driver.
 */
static int machine_is_wsl(void)
{
	const char *pv = getenv("TFPROV_PROC_VERSION");
	const char *libdir = getenv("TFPROV_WSL_LIB_DIR");
	char *text = NULL;
	size_t len = 0;
	struct stat sb;
	int wsl = 0;
	if (read_file_at(AT_FDCWD, pv ? pv : "/proc/version", 1 << 16, &text, &len) == 0)
		wsl = gpu_probe_is_wsl_kernel(text);
	free(text);
	if (!wsl && stat(libdir ? libdir : "/usr/lib/wsl/lib", &sb) == 0 && S_ISDIR(sb.st_mode))
		wsl = 1;
	return wsl;
}

static enum desire driver_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                                 struct strbuf *detail, struct strvec *urls)
{
	(void)canon;
	(void)urls;
	int skip = m->driver.policy == DRIVER_SKIP || (c->flags & CTX_NO_GPU);
	if (m->stack.platform == PLATFORM_WSL2 || machine_is_wsl())
		strbuf_adds(detail, "NVIDIA driver on the Windows host (WSL2)");
	else
		strbuf_adds(detail, "NVIDIA driver and GPUs");
	if (skip)
		strbuf_adds(detail, ": GPU checks SKIPPED (no-GPU provisioning allowed)");
	else if (m->versions.cuda.set)
		strbuf_addf(detail, ": must support CUDA %s", m->versions.cuda.s);
	return DESIRE_WANTED;
}

static int driver_precheck(struct ctx *c, const struct manifest *m, struct step *s)
{
	(void)s;
	if (m->driver.policy == DRIVER_SKIP || (c->flags & CTX_NO_GPU)) {
		ev_log(c, EV_WARN,
		       "GPU checks SKIPPED: %s allows provisioning without a GPU; "
		       "nothing about the driver or GPUs was verified",
		       (c->flags & CTX_NO_GPU) ? "--no-gpu" : "driver.policy: skip");
		return 0;
	}
	return driver_check(c, m, s);
}

const struct module module_driver = {
    .kind = "driver",
    .desire = driver_desire,
    .precheck = driver_precheck,
};
