/*
 * redist.h - NVIDIA redistrib_<ver>.json resolution (CUDA and cuDNN).
 *
 * A redist manifest maps component -> platform -> {relative_path, sha256,
 * size}, or, for cuDNN 8.x, component -> platform -> variant ("cuda11") ->
 * {...}. The archive URL is the directory of the JSON's own URL plus
 * relative_path (NVIDIA's parse_redist.py rule). The JSON must itself have
 * been verified (it is an artifact pinned by sha256) before it is resolved.
 *
 * Ownership: *out is an array of *nout artifacts, all strings malloc'd; free
 * with redist_artifacts_free(). *errmsg is malloc'd on failure.
 */
#ifndef TFPROV_REDIST_H
#define TFPROV_REDIST_H

#include <stddef.h>
#include <stdint.h>

struct redist_artifact {
	char *component;
	char *version;
	char *url;
	char *relative_path;
	char sha256[65];
	int64_t size;
	int strip; /* NVIDIA archives have one top directory: always 1 */
};

/*
 * Resolves `components` (all components that exist for `platform` when
 * ncomponents is 0) for `platform` (e.g. "linux-x86_64") and an optional
 * cuDNN `variant` ("cuda12"; NULL picks the only one, else it is an error).
 * json_url may be NULL: URLs are then made relative to json_path's directory.
 * Returns 0 or TF_EMANIFEST (unknown component/platform/variant, bad hash)
 * or TF_EIO (unreadable JSON), with *errmsg naming what and offering choices.
 */
int redist_resolve(const char *json_path, const char *json_url, const char *platform,
                   const char *variant, const char *const *components, size_t ncomponents,
                   struct redist_artifact **out, size_t *nout, char **errmsg);
void redist_artifacts_free(struct redist_artifact *v, size_t n);

#endif
