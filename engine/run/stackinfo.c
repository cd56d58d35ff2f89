/*
 * stackinfo.c - an applied stack read back from the state (see stackinfo.h).
 *
 * The manifest text recorded with the current generation is the truth about
 * what was applied: the file it came from may have been edited or deleted
 * since. Paths are derived with the same functions the modules use
 * (stack_cuda_prefix ...), so verify looks exactly where apply placed.
 */
#include "stackinfo.h"

#include "kb.h"
#include "error.h"
#include "gpu.h"
#include "manifest.h"
#include "module.h"
#include "spawn.h"
#include "stackenv.h"
#include "state.h"
#include "version.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int stackinfo_names(struct ctx *c, struct strvec *names)
{
	return c->st == NULL ? 0 : state_stack_names(c->st, names);
}

/*
 * CUDA from pip wheels: the versions their runtime and cuDNN pins carry, and the
 * directories in the env's site-packages that hold their libraries (the
 * knowledge base's pip.cuda_wheels.site_libdirs, globbed, sorted).
 */
static void pip_cuda_fill(struct stackinfo *out)
{
	struct compat *kb = NULL;
	struct diags d = {0};
	const struct pip_req *rt = NULL, *dnn = NULL;

	if (out->m->cuda.set || out->env_prefix == NULL ||
	    compat_load(compat_default_path(), &kb, &d) != 0)
		goto out;
	if (compat_pip_cuda(kb, out->m, NULL, &rt, &dnn) == 0)
		goto out;
	out->cuda_from_pip = 1;
	out->has_cuda = 1;
	out->cuda = rt != NULL && rt->version != NULL ? rt->version : out->cuda;
	if (dnn != NULL && dnn->version != NULL) {
		out->cudnn = dnn->version;
		out->has_cudnn = 1;
	}
	for (size_t i = 0; i < kb->cuda_wheels.nsite_libdirs; i++) {
		char *pat = xasprintf("%s/lib/python*/site-packages/%s", out->env_prefix,
		                      kb->cuda_wheels.site_libdirs[i]);
		glob_t g;

		if (glob(pat, GLOB_ONLYDIR, NULL, &g) == 0)
			for (size_t k = 0; k < g.gl_pathc; k++)
				strvec_push(&out->lib_dirs, g.gl_pathv[k]);
		globfree(&g);
		free(pat);
	}
out:
	compat_free(kb);
	diags_release(&d);
}

void stackinfo_recorded_placement(struct ctx *c, int64_t stack_id, struct manifest *m)
{
	struct state_resource r;
	if (c->st == NULL || !m->cudnn.set || m->cudnn.placement != PLACEMENT_MERGE ||
	    state_resource_get(c->st, stack_id, "cudnn", &r) != 0)
		return;
	json_t *j = r.attrs ? json_loads(r.attrs, 0, NULL) : NULL;
	const char *pl = json_string_value(json_object_get(j, "placement"));
	if (pl && strcmp(pl, "separate") == 0) {
		m->cudnn.placement = PLACEMENT_SEPARATE;
		m->cudnn.placement_auto = 1;
		snprintf(m->cudnn.placement_why, sizeof(m->cudnn.placement_why),
		         "another stack merged another cuDNN into the shared CUDA prefix");
	}
	json_decref(j);
	state_resource_release(&r);
}

void stackinfo_from_manifest(struct ctx *c, struct manifest *m, struct stackinfo *out)
{
	memset(out, 0, sizeof(*out));
	out->m = m;
	out->host_root = xstrdup(c->root ? c->root : "/");
	out->name = xstrdup(m->stack.name.s ? m->stack.name.s : "");
	out->tf = m->versions.tensorflow.s;
	out->cuda = m->cuda.version.s ? m->cuda.version.s : m->versions.cuda.s;
	out->cudnn = m->cudnn.version.s ? m->cudnn.version.s : m->versions.cudnn.s;
	out->has_cuda = m->cuda.set;
	out->has_cudnn = m->cudnn.set;
	if (m->cudnn.set) {
		char *p = stack_cudnn_prefix(m);
		out->cudnn_prefix = ctx_host_dir(c, p);
		if (m->cudnn.placement == PLACEMENT_SEPARATE)
			strvec_pushf(&out->lib_dirs, "%s/lib", out->cudnn_prefix);
		free(p);
	}
	if (m->cuda.set) {
		char *p = stack_cuda_prefix(m);
		out->cuda_prefix = ctx_host_dir(c, p);
		strvec_pushf(&out->lib_dirs, "%s/lib64", out->cuda_prefix);
		free(p);
	}
	if (m->python.set) {
		char *p = stack_env_prefix(m);
		out->env_prefix = ctx_host_dir(c, p);
		out->python = path_join(out->env_prefix, "bin/python");
		free(p);
	}
	pip_cuda_fill(out);
	char *act = stack_script_path(m, "activate.sh");
	out->profile = ctx_host_path(c, act);
	free(act);
}

int stackinfo_load(struct ctx *c, const char *name, struct stackinfo *out, struct why *why)
{
	struct state_gen g = {0};
	struct diags d = {0};
	struct manifest *m = NULL;
	int rc = -ENOENT;
	memset(out, 0, sizeof(*out));
	if (c->st == NULL)
		return -ENOENT;
	if (state_gen_current(c->st, name, &g) != 0 || g.id == 0)
		goto out;
	const char *text = g.manifest_text;
	if (manifest_load_buf(g.manifest_path, text ? text : "", text ? strlen(text) : 0, &m, &d) !=
	    0) {
		rc = why_fail(
		    why, TF_EMANIFEST,
		    "the manifest recorded for stack %s (generation %lld) no longer parses: %s",
		    name, (long long)g.number, d.n ? d.v[0].msg : "unknown error");
		goto out;
	}
	stackinfo_recorded_placement(c, g.stack_id, m);
	stackinfo_from_manifest(c, m, out);
	free(out->name);
	out->name = xstrdup(name);
	out->stack_id = g.stack_id;
	out->gen = g.number;
	rc = 0;
out:
	state_gen_release(&g);
	diags_release(&d);
	return rc;
}

void stackinfo_release(struct stackinfo *si)
{
	manifest_free(si->m);
	free(si->name);
	free(si->cuda_prefix);
	free(si->cudnn_prefix);
	free(si->env_prefix);
	free(si->python);
	free(si->profile);
	free(si->host_root);
	strvec_release(&si->lib_dirs);
	memset(si, 0, sizeof(*si));
}

static void push_unique(struct strvec *out, const char *s)
{
	for (size_t i = 0; i < out->n; i++)
		if (strcmp(out->v[i], s) == 0)
			return;
	strvec_push(out, s);
}

size_t stackinfo_sonames(const struct stackinfo *si, const struct compat *kb, struct strvec *out)
{
	struct strvec v = STRVEC_INIT;
	size_t before = out->n;
	if (!si->has_cuda)
		return 0;
	if (kb != NULL)
		compat_tf_libraries(kb, 0, si->cuda, si->has_cudnn ? si->cudnn : NULL, &v);
	for (size_t i = 0; i < v.n; i++)
		push_unique(out, v.v[i]);
	strvec_release(&v);
	return out->n - before;
}

char *stackinfo_find_lib(const struct stackinfo *si, const char *prefix)
{
	char *found = NULL;
	for (size_t i = 0; i < si->lib_dirs.n && found == NULL; i++) {
		DIR *d = opendir(si->lib_dirs.v[i]);
		struct dirent *e;
		char *best = NULL;
		while (d && (e = readdir(d)) != NULL) {
			/* The soname link (libcudart.so.12) rather than the full version. */
			if (!str_starts_with(e->d_name, prefix))
				continue;
			if (best == NULL || strlen(e->d_name) < strlen(best)) {
				free(best);
				best = xstrdup(e->d_name);
			}
		}
		if (d)
			closedir(d);
		if (best) {
			char *p = path_join(si->lib_dirs.v[i], best);
			struct stat st;
			if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
				found = p;
			else
				free(p);
			free(best);
		}
	}
	return found;
}

const char *stackinfo_allow_growth(const struct stackinfo *si)
{
	for (size_t i = 0; si->m && i < si->m->env.nvars; i++)
		if (strcmp(si->m->env.vars[i].name.s, "TF_FORCE_GPU_ALLOW_GROWTH") == 0)
			return si->m->env.vars[i].value.s;
	return "true";
}

void stackinfo_env(const struct stackinfo *si, struct strvec *env)
{
	struct stackenv se;
	spawn_env_base(env);
	/* A loader path of the caller's (a driver's libraries) stays, after the stack's. */
	const char *ld = getenv("LD_LIBRARY_PATH");
	if (ld && *ld)
		spawn_env_set(env, "LD_LIBRARY_PATH", ld);
	stackenv_build(si->m, si->name, si->host_root, &se);
	stackenv_enter(&se, env);
	stackenv_release(&se);
}

const char *stack_gpu_verdict_name(enum stack_gpu_verdict v)
{
	switch (v) {
	case STACK_GPU_OK:
		return "ok";
	case STACK_GPU_ABSENT:
		return "no-gpu";
	case STACK_GPU_REBOOT:
		return "reboot-required";
	case STACK_GPU_FAILED:
		return "failed";
	case STACK_GPU_NOT_RUN:
		break;
	}
	return "not-run";
}

/* NVML_ERROR_LIB_RM_VERSION_MISMATCH: the kernel module and libnvidia-ml differ. */
#define NVML_VERSION_MISMATCH 18

int stack_gpu_check(const struct stackinfo *si, struct stack_gpu *out)
{
	char *cudart = NULL, *cudnn = NULL;
	memset(out, 0, sizeof(*out));
	gpu_probe_run(&out->probe);
	const struct gpu_probe *g = &out->probe;
	snprintf(out->layer, sizeof(out->layer), "driver");
	if (g->nvml_status == NVML_VERSION_MISMATCH && !g->found) {
		out->verdict = STACK_GPU_REBOOT;
		snprintf(out->reason, sizeof(out->reason),
		         "NVIDIA driver/library version mismatch (%s): the kernel module still "
		         "loaded is not the one the installed driver libraries belong to, which "
		         "happens after a driver upgrade until the machine reboots",
		         g->error[0] ? g->error : "NVML error 18");
		goto out;
	}
	if (!g->found) {
		out->verdict = STACK_GPU_ABSENT;
		snprintf(out->reason, sizeof(out->reason), "no NVIDIA driver: %s",
		         g->error[0] ? g->error : "no NVML, no /proc/driver/nvidia");
		goto out;
	}
	if (g->ngpus_total == 0 && g->ngpus == 0 && strcmp(g->source, "nvml") == 0) {
		out->verdict = STACK_GPU_ABSENT;
		snprintf(out->reason, sizeof(out->reason),
		         "no GPU: NVIDIA driver %s is loaded but reports no GPU",
		         g->driver_version);
		goto out;
	}
	cudart = stackinfo_find_lib(si, "libcudart.so.");
	cudnn = stackinfo_find_lib(si, "libcudnn.so.");
	if (cudart == NULL || cudnn == NULL) {
		out->verdict = STACK_GPU_NOT_RUN;
		snprintf(out->layer, sizeof(out->layer), "%s", cudart ? "cudnn" : "runtime");
		snprintf(out->reason, sizeof(out->reason), "%s: no %s in the stack's library dirs",
		         out->layer, cudart ? "libcudnn.so.*" : "libcudart.so.*");
		goto out;
	}
	out->probe_ran = 1;
	convprobe_run(cudart, cudnn, NULL, &out->conv);
	if (out->conv.ok) {
		out->verdict = STACK_GPU_OK;
		out->layer[0] = '\0';
		goto out;
	}
	out->verdict = STACK_GPU_FAILED;
	snprintf(out->layer, sizeof(out->layer), "%s", out->conv.layer);
	if (out->conv.call[0])
		snprintf(out->reason, sizeof(out->reason), "%s: %s returned %d: %s",
		         out->conv.layer, out->conv.call, out->conv.status, out->conv.error);
	else
		snprintf(out->reason, sizeof(out->reason), "%s: %s", out->conv.layer,
		         out->conv.error);
out:
	free(cudart);
	free(cudnn);
	return 0;
}
