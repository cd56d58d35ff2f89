/*
 * redist.c - resolves components of an NVIDIA redist manifest into pinned
 * artifacts with jansson.
 *
 * The file is trusted only as far as its own sha256 pin; every hash read
 * from it is still checked to be 64 lowercase hex and every size to be a
 * non-negative integer, so a malformed manifest fails here, with the
 * component named, and not later as a confusing download error.
 */
#include "artifact.h"
#include "error.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void redist_artifacts_free(struct redist_artifact *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].component);
		free(v[i].version);
		free(v[i].url);
		free(v[i].relative_path);
	}
	free(v);
}

/* "a, b, c" of the keys of obj whose values are objects (or all keys). */
static char *list_keys(json_t *obj, int objects_only, const char *skip_prefix)
{
	struct strbuf sb = STRBUF_INIT;
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		if (objects_only && !json_is_object(v))
			continue;
		if (skip_prefix && str_starts_with(k, skip_prefix))
			continue;
		strbuf_addf(&sb, "%s%s", sb.len ? ", " : "", k);
	}
	return strbuf_detach(&sb);
}

static const char *closest_key(json_t *obj, const char *name)
{
	const char *best = NULL, *k;
	size_t bestd = (size_t)-1;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		if (!json_is_object(v))
			continue;
		size_t d = edit_distance(name, k);
		if (d < bestd) {
			bestd = d;
			best = k;
		}
	}
	return bestd <= 3 ? best : NULL;
}

/* A JSON size (a number or a decimal string), never negative. 0 or -EINVAL. */
static int parse_size(json_t *v, int64_t *out)
{
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return *out >= 0 ? 0 : -EINVAL;
	}
	if (!json_is_string(v))
		return -EINVAL;
	const char *s = json_string_value(v);
	char *end;
	errno = 0;
	long long n = strtoll(s, &end, 10);
	if (errno || end == s || *end != '\0' || n < 0)
		return -EINVAL;
	*out = n;
	return 0;
}

static int is_lower_hex64(const char *s)
{
	if (!is_hex64(s))
		return 0;
	for (; *s; s++)
		if (*s >= 'A' && *s <= 'F')
			return 0;
	return 1;
}

/* Resolves one component; appends to *out. 0 or TF_EMANIFEST with why. */

/*
 * A relative_path is joined to the JSON's URL and fetched (file:// URLs are
 * decoded): only plain components of NVIDIA's file-name characters, none "."
 * or "..", so no escape (%2e%2e, a backslash, '?') can lead elsewhere.
 */
static int safe_relative_path(const char *rp)
{
	if (rp == NULL || rp[0] == '\0' || rp[0] == '/')
		return 0;
	if (rp[strspn(rp, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+-/")])
		return 0;
	for (const char *c = rp; *c;) {
		size_t n = strcspn(c, "/");
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		c += n;
		if (*c == '/')
			c++;
	}
	return rp[strlen(rp) - 1] != '/';
}

static int resolve_one(json_t *root, const char *label, const char *base, const char *name,
                       const char *platform, const char *variant, struct redist_artifact **out,
                       size_t *nout, struct why *why)
{
	json_t *comp = json_object_get(root, name);
	if (!json_is_object(comp)) {
		const char *near = closest_key(root, name);
		char *all = list_keys(root, 1, NULL);
		why_fail(why, TF_EMANIFEST, "redist %s has no component '%s'%s%s%s; it has: %s",
		         label, name, near ? " (did you mean '" : "", near ? near : "",
		         near ? "'?)" : "", all);
		free(all);
		return TF_EMANIFEST;
	}
	json_t *plat = json_object_get(comp, platform);
	if (!json_is_object(plat)) {
		struct strbuf sb = STRBUF_INIT;
		const char *k;
		json_t *v;
		json_object_foreach(comp, k, v)
		{
			if (json_is_object(v))
				strbuf_addf(&sb, "%s%s", sb.len ? ", " : "", k);
		}
		why_fail(why, TF_EMANIFEST,
		         "redist %s: component '%s' has no platform '%s'; it has: %s", label, name,
		         platform, sb.len ? sb.buf : "(none)");
		strbuf_release(&sb);
		return TF_EMANIFEST;
	}
	json_t *entry = plat;
	if (!json_is_string(json_object_get(plat, "relative_path"))) {
		/* cuDNN 8.x nesting: platform -> "cudaNN" -> entry. */
		const char *pick = variant;
		if (pick == NULL) {
			if (json_object_size(plat) != 1) {
				char *vs = list_keys(plat, 1, NULL);
				why_fail(why, TF_EMANIFEST,
				         "redist %s: component '%s' on %s comes in several CUDA "
				         "variants (%s); name one",
				         label, name, platform, vs);
				free(vs);
				return TF_EMANIFEST;
			}
			void *it = json_object_iter(plat);
			pick = json_object_iter_key(it);
		}
		entry = json_object_get(plat, pick);
		if (!json_is_object(entry)) {
			char *vs = list_keys(plat, 1, NULL);
			why_fail(why, TF_EMANIFEST,
			         "redist %s: component '%s' on %s has no variant '%s'; it has: %s",
			         label, name, platform, pick, vs);
			free(vs);
			return TF_EMANIFEST;
		}
	} else if (variant != NULL) {
		/* Flat entries carry one variant, visible only in the file name. */
		const char *rp = json_string_value(json_object_get(plat, "relative_path"));
		char *tag = xasprintf("_%s-", variant);
		int mismatch = strstr(rp, "_cuda") != NULL && strstr(rp, tag) == NULL;
		free(tag);
		if (mismatch)
			return why_fail(why, TF_EMANIFEST,
			                "redist %s: component '%s' on %s is only built for another "
			                "CUDA variant than '%s' (%s)",
			                label, name, platform, variant, rp);
	}
	const char *rp = json_string_value(json_object_get(entry, "relative_path"));
	const char *sha = json_string_value(json_object_get(entry, "sha256"));
	int64_t size = -1;
	if (!safe_relative_path(rp))
		return why_fail(why, TF_EMANIFEST,
		                "redist %s: component '%s' has a bad relative_path", label, name);
	if (sha == NULL || !is_lower_hex64(sha))
		return why_fail(why, TF_EMANIFEST, "redist %s: component '%s' has no valid sha256",
		                label, name);
	if (parse_size(json_object_get(entry, "size"), &size) < 0)
		return why_fail(why, TF_EMANIFEST, "redist %s: component '%s' has no valid size",
		                label, name);
	*out = xrealloc(*out, (*nout + 1) * sizeof(**out));
	struct redist_artifact *a = &(*out)[(*nout)++];
	memset(a, 0, sizeof(*a));
	a->component = xstrdup(name);
	const char *ver = json_string_value(json_object_get(comp, "version"));
	a->version = xstrdup(ver ? ver : "");
	a->relative_path = xstrdup(rp);
	a->url = base[0] ? xasprintf("%s/%s", base, rp) : xstrdup(rp);
	memcpy(a->sha256, sha, 65);
	a->size = size;
	a->strip = 1;
	return 0;
}

int redist_resolve(const char *json_path, const char *json_url, const char *platform,
                   const char *variant, const char *const *components, size_t ncomponents,
                   struct redist_artifact **out, size_t *nout, struct why *why)
{
	json_error_t jerr;
	int ret = 0;
	char *base = NULL;
	*out = NULL;
	*nout = 0;

	json_t *root = json_load_file(json_path, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		/* A file that cannot be read is I/O; any defect of its text (syntax, a
		 * number too large, a duplicate key) makes it no redist document: exit 3,
		 * as every other defect of one is. */
		int io = json_error_code(&jerr) == json_error_cannot_open_file;
		return why_fail(why, io ? TF_EIO : TF_EMANIFEST, "%s:%d:%d: %s redist manifest: %s",
		                json_path, jerr.line, jerr.column,
		                io ? "cannot read the" : "not a valid", jerr.text);
	}
	if (!json_is_object(root)) {
		ret = why_fail(why, TF_EMANIFEST, "%s: a redist manifest is a JSON object",
		               json_path);
		goto out;
	}
	const char *label = json_string_value(json_object_get(root, "release_label"));
	if (label == NULL)
		label = json_path;
	const char *from = json_url ? json_url : json_path;
	const char *slash = strrchr(from, '/');
	base = slash ? xstrndup(from, (size_t)(slash - from)) : xstrdup("");

	if (ncomponents > 0) {
		for (size_t i = 0; i < ncomponents && ret == 0; i++)
			ret = resolve_one(root, label, base, components[i], platform, variant, out,
			                  nout, why);
	} else {
		const char *k;
		json_t *v;
		json_object_foreach(root, k, v)
		{
			if (!json_is_object(v) || !json_is_object(json_object_get(v, platform)))
				continue;
			ret = resolve_one(root, label, base, k, platform, variant, out, nout, why);
			if (ret != 0)
				break;
		}
	}
out:
	if (ret != 0) {
		redist_artifacts_free(*out, *nout);
		*out = NULL;
		*nout = 0;
	}
	free(base);
	json_decref(root);
	return ret;
}
