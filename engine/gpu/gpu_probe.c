/*
 * gpu_probe.c - driver, GPUs and compute capabilities through NVML, else
 * procfs (see gpu.h for the order and the test overrides).
 *
 * NVML is declared here rather than included: tfprov must build and run on
 * machines without NVIDIA's headers or driver, and it never links against
 * NVML (only dlopen), so a missing driver is an answer, not a load failure of
 * tfprov itself. The few prototypes below follow nvml.h; entry points that
 * older drivers lack (_v2 names, the compute-capability query) are looked up
 * with fallbacks.
 */
#include "gpu.h"
#include "gpu_int.h"

#include "isolate.h"
#include "util.h"
#include "version.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* nvml.h: nvmlReturn_t is an enum, nvmlDevice_t an opaque pointer. */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
#define NVML_SUCCESS                           0
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE        96

/* NVML gets this long to answer; a wedged GPU can make nvmlInit hang. */
#define NVML_TIMEOUT_MS 30000
#define NVML_NO_ANSWER  2

struct nvml_api {
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	const char *(*error_string)(nvmlReturn_t);
	nvmlReturn_t (*driver_version)(char *, unsigned int);
	nvmlReturn_t (*cuda_driver_version)(int *);
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*cuda_cc)(nvmlDevice_t, int *, int *);
};

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v != NULL && *v != '\0' ? v : dflt;
}

/* strlcpy: copies what fits, always terminates. */
static void copy_trunc(char *dst, size_t n, const char *src)
{
	size_t len = strnlen(src, n - 1);
	memcpy(dst, src, len);
	dst[len] = '\0';
}

static void *sym2(void *h, const char *name, const char *fallback)
{
	void *p = dlsym(h, name);
	if (p == NULL && fallback != NULL)
		p = dlsym(h, fallback);
	return p;
}

static void nvml_fail(struct gpu_probe *out, const struct nvml_api *api, const char *call,
                      nvmlReturn_t rc)
{
	const char *s = api->error_string != NULL ? api->error_string(rc) : NULL;
	out->nvml_status = rc;
	snprintf(out->error, sizeof(out->error), "%s: %s (%d)", call,
	         s != NULL ? s : "unknown error", rc);
}

static void *nvml_open(struct gpu_probe *out)
{
	char *wsl_path = NULL;
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);

	if (h == NULL) {
		const char *err = dlerror();
		snprintf(out->error, sizeof(out->error), "dlopen libnvidia-ml.so.1: %s",
		         err != NULL ? err : "unknown error");
		/* WSL2 ships NVML with the Windows driver, outside the usual paths. */
		if (out->wsl) {
			wsl_path = path_join(env_or("TFPROV_WSL_LIB_DIR", "/usr/lib/wsl/lib"),
			                     "libnvidia-ml.so.1");
			h = dlopen(wsl_path, RTLD_NOW | RTLD_LOCAL);
			free(wsl_path);
		}
	}
	return h;
}

/* Runs in the child: fills *shared from NVML. Exit 0 when NVML answered,
 * NVML_NO_ANSWER when it did not; any other end means the child died. */
static int nvml_query(void *arg, void *shared)
{
	struct gpu_probe *out = shared;
	struct nvml_api api;
	char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
	unsigned int count = 0, i;
	int inited = 0, ret = NVML_NO_ANSWER, cuda = 0;
	nvmlReturn_t rc;
	void *h;

	(void)arg;
	memset(&api, 0, sizeof(api));
	h = nvml_open(out);
	if (h == NULL) {
		out->nvml_status = -1;
		return NVML_NO_ANSWER;
	}
	api.init = (nvmlReturn_t(*)(void))sym2(h, "nvmlInit_v2", "nvmlInit");
	api.shutdown = (nvmlReturn_t(*)(void))sym2(h, "nvmlShutdown", NULL);
	api.error_string = (const char *(*)(nvmlReturn_t))sym2(h, "nvmlErrorString", NULL);
	api.driver_version =
	    (nvmlReturn_t(*)(char *, unsigned int))sym2(h, "nvmlSystemGetDriverVersion", NULL);
	api.cuda_driver_version = (nvmlReturn_t(*)(int *))sym2(
	    h, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion");
	api.count =
	    (nvmlReturn_t(*)(unsigned int *))sym2(h, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
	api.handle_by_index = (nvmlReturn_t(*)(unsigned int, nvmlDevice_t *))sym2(
	    h, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
	api.name =
	    (nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned int))sym2(h, "nvmlDeviceGetName", NULL);
	api.cuda_cc = (nvmlReturn_t(*)(nvmlDevice_t, int *, int *))sym2(
	    h, "nvmlDeviceGetCudaComputeCapability", NULL);
	if (api.init == NULL || api.driver_version == NULL || api.count == NULL ||
	    api.handle_by_index == NULL || api.name == NULL) {
		snprintf(out->error, sizeof(out->error),
		         "libnvidia-ml.so.1 lacks the NVML entry points tfprov needs (%s)",
		         api.init == NULL ? "nvmlInit_v2"
		                          : "nvmlSystemGetDriverVersion/nvmlDevice*");
		out->nvml_status = -1;
		goto out;
	}

	rc = api.init();
	if (rc != NVML_SUCCESS) {
		nvml_fail(out, &api, "nvmlInit_v2", rc);
		goto out;
	}
	inited = 1;
	rc = api.driver_version(buf, sizeof(buf));
	if (rc != NVML_SUCCESS) {
		nvml_fail(out, &api, "nvmlSystemGetDriverVersion", rc);
		goto out;
	}
	buf[sizeof(buf) - 1] = '\0';
	copy_trunc(out->driver_version, sizeof(out->driver_version), buf);
	if (api.cuda_driver_version != NULL && api.cuda_driver_version(&cuda) == NVML_SUCCESS)
		out->cuda_driver_version = cuda;
	rc = api.count(&count);
	if (rc != NVML_SUCCESS) {
		nvml_fail(out, &api, "nvmlDeviceGetCount_v2", rc);
		goto out;
	}
	out->ngpus_total = (int)count;
	for (i = 0; i < count && i < GPU_PROBE_MAX_GPUS; i++) {
		struct gpu_info *g = &out->gpus[i];
		char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
		nvmlDevice_t dev = NULL;

		g->cc_major = g->cc_minor = -1;
		/* One GPU we may not open (cgroups, a fallen-off-the-bus card) still counts. */
		rc = api.handle_by_index(i, &dev);
		if (rc == NVML_SUCCESS)
			rc = api.name(dev, name, sizeof(name));
		if (rc != NVML_SUCCESS) {
			const char *s = api.error_string != NULL ? api.error_string(rc) : NULL;
			snprintf(g->name, sizeof(g->name), "(unavailable: %s)",
			         s != NULL ? s : "unknown error");
			continue;
		}
		name[sizeof(name) - 1] = '\0';
		copy_trunc(g->name, sizeof(g->name), name);
		if (api.cuda_cc != NULL &&
		    api.cuda_cc(dev, &g->cc_major, &g->cc_minor) != NVML_SUCCESS)
			g->cc_major = g->cc_minor = -1;
	}
	out->ngpus = (int)i;
	out->found = 1;
	out->nvml_status = 0;
	out->error[0] = '\0';
	snprintf(out->source, sizeof(out->source), "nvml");
	ret = 0;
out:
	if (inited && api.shutdown != NULL)
		api.shutdown();
	dlclose(h);
	return ret;
}

int gpu_probe_parse_procfs(const char *text, char *ver, size_t n)
{
	const char *line = strstr(text, "NVRM version:");
	const char *p, *end;

	if (line == NULL)
		return -ENOENT;
	end = strchr(line, '\n');
	if (end == NULL)
		end = line + strlen(line);
	/* "NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug ..." or the open
	 * module's "... Open Kernel Module for x86_64  560.35.03  Release Build ...":
	 * the version is the first dotted all-digit token. */
	for (p = line + strlen("NVRM version:"); p < end;) {
		const char *t;
		char tok[64];
		size_t len;

		while (p < end && isspace((unsigned char)*p))
			p++;
		t = p;
		while (p < end && !isspace((unsigned char)*p))
			p++;
		len = (size_t)(p - t);
		if (len == 0 || len >= sizeof(tok))
			continue;
		memcpy(tok, t, len);
		tok[len] = '\0';
		if (strchr(tok, '.') != NULL && version_valid(tok)) {
			if (len >= n)
				return -ERANGE;
			memcpy(ver, tok, len + 1);
			return 0;
		}
	}
	return -ENOENT;
}

int gpu_probe_is_wsl_kernel(const char *proc_version)
{
	return proc_version != NULL && (strcasestr(proc_version, "microsoft") != NULL ||
	                                strstr(proc_version, "WSL") != NULL);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* GPU names from <dir>/gpus/<bus id>/information ("Model: \t\t NVIDIA ..."). */
static void procfs_gpus(const char *dir, struct gpu_probe *out)
{
	char *gdir = path_join(dir, "gpus");
	struct strvec ids = STRVEC_INIT;
	struct dirent *de;
	DIR *d = opendir(gdir);
	size_t i;

	if (d == NULL)
		goto out;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] != '.')
			strvec_push(&ids, de->d_name);
	}
	closedir(d);
	/* Bus-id order, the order nvidia-smi and CUDA_DEVICE_ORDER=PCI_BUS_ID use. */
	if (ids.n > 1)
		qsort(ids.v, ids.n, sizeof(char *), cmp_str);
	out->ngpus_total = (int)ids.n;
	for (i = 0; i < ids.n && i < GPU_PROBE_MAX_GPUS; i++) {
		char *info = xasprintf("%s/%s/information", gdir, ids.v[i]);
		struct gpu_info *g = &out->gpus[i];
		char *text = NULL, *m;
		size_t len;

		g->cc_major = g->cc_minor = -1;
		snprintf(g->name, sizeof(g->name), "(unknown)");
		if (read_file_at(AT_FDCWD, info, 1 << 16, &text, &len) == 0) {
			m = strstr(text, "Model:");
			if (m != NULL) {
				m += strlen("Model:");
				m += strspn(m, " \t");
				snprintf(g->name, sizeof(g->name), "%.*s", (int)strcspn(m, "\r\n"),
				         m);
			}
		}
		free(text);
		free(info);
	}
	out->ngpus = (int)i;
out:
	strvec_release(&ids);
	free(gdir);
}

static int procfs_probe(struct gpu_probe *out)
{
	const char *dir = env_or("TFPROV_PROC_DRIVER_NVIDIA", "/proc/driver/nvidia");
	char *path = path_join(dir, "version");
	char *text = NULL;
	size_t len, used = strlen(out->error);
	int r, ret = -ENOENT;

	r = read_file_at(AT_FDCWD, path, 1 << 16, &text, &len);
	if (r < 0) {
		snprintf(out->error + used, sizeof(out->error) - used, "%s%s: %s", used ? "; " : "",
		         path, strerror(-r));
		goto out;
	}
	if (gpu_probe_parse_procfs(text, out->driver_version, sizeof(out->driver_version)) < 0) {
		snprintf(out->error + used, sizeof(out->error) - used,
		         "%s%s: no \"NVRM version:\" line with a driver version", used ? "; " : "",
		         path);
		goto out;
	}
	out->found = 1;
	snprintf(out->source, sizeof(out->source), "procfs");
	procfs_gpus(dir, out);
	ret = 0;
out:
	free(text);
	free(path);
	return ret;
}

static int detect_wsl(void)
{
	const char *libdir = env_or("TFPROV_WSL_LIB_DIR", "/usr/lib/wsl/lib");
	char *text = NULL;
	size_t len;
	struct stat sb;
	int wsl = 0;

	if (read_file_at(AT_FDCWD, env_or("TFPROV_PROC_VERSION", "/proc/version"), 1 << 16, &text,
	                 &len) == 0)
		wsl = gpu_probe_is_wsl_kernel(text);
	free(text);
	if (!wsl && stat(libdir, &sb) == 0 && S_ISDIR(sb.st_mode))
		wsl = 1;
	return wsl;
}

int gpu_probe_run(struct gpu_probe *out)
{
	struct gpu_probe *shared = NULL;
	struct isolate_status st;
	const char *no_nvml = getenv("TFPROV_NO_NVML");
	int timeout;

	memset(out, 0, sizeof(*out));
	snprintf(out->source, sizeof(out->source), "none");
	out->wsl = detect_wsl();
	if (no_nvml != NULL && strcmp(no_nvml, "1") == 0) {
		snprintf(out->error, sizeof(out->error), "NVML skipped (TFPROV_NO_NVML=1)");
		out->nvml_status = -1;
		goto fallback;
	}

	timeout = atoi(env_or("TFPROV_NVML_TIMEOUT_MS", "0"));
	if (timeout <= 0)
		timeout = NVML_TIMEOUT_MS;
	shared = isolate_shared_alloc(sizeof(*shared));
	memcpy(shared, out, sizeof(*out));
	if (isolate_run(nvml_query, NULL, shared, timeout, &st) < 0) {
		snprintf(out->error, sizeof(out->error),
		         "NVML probe: cannot start a child process");
		out->nvml_status = -1;
		goto fallback;
	}
	memcpy(out, shared, sizeof(*out));
	out->error[sizeof(out->error) - 1] = '\0';
	if (st.exited && st.exit_code == 0 && out->found)
		goto out;
	if (!st.exited || st.exit_code != NVML_NO_ANSWER) {
		char how[96];
		isolate_describe(&st, timeout, how, sizeof(how));
		snprintf(out->error, sizeof(out->error), "NVML probe %s", how);
		out->nvml_status = -1;
	}
	/* Whatever NVML left half-filled is not an answer. */
	out->found = 0;
	out->ngpus = out->ngpus_total = 0;
	out->cuda_driver_version = 0;
	out->driver_version[0] = '\0';
	memset(out->gpus, 0, sizeof(out->gpus));
fallback:
	procfs_probe(out);
out:
	isolate_shared_free(shared, sizeof(*shared));
	return 0;
}
