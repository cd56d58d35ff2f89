/* pipcaps.c - the pip.caps section of the knowledge base (see kb.h). */
#include "kb.h"
#include "error.h"
#include "manifest.h"
#include "util.h"
#include "version.h"
#include "yamltree.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#define PIPCAPS_MAX_BYTES (4u << 20)

static char *field(const char *file, const struct ynode *row, const char *key, int version,
                   struct diags *d)
{
	const struct ynode *v = ymap_get(row, key);
	if (v == NULL || v->type != Y_SCALAR || v->str[0] == '\0' ||
	    (version && !version_valid(v->str))) {
		diags_add(d, DIAG_ERROR, file, v ? v->pos : row->pos, "compat.schema", NULL,
		          "pip.caps: `%s` must be %s", key,
		          version ? "a version like \"82\" or \"2.16\"" : "a non-empty string");
		return NULL;
	}
	return xstrdup(v->str);
}

int pip_caps_load(const char *path, struct pip_cap **caps, size_t *n, struct diags *d)
{
	char *buf = NULL;
	size_t len = 0;
	int empty = 0;
	struct ytree_limits lim = {MANIFEST_MAX_NODES, MANIFEST_MAX_DEPTH};
	*caps = NULL;
	*n = 0;
	if (read_file_at(AT_FDCWD, path, PIPCAPS_MAX_BYTES, &buf, &len) != 0) {
		diags_add(d, DIAG_ERROR, path, (struct pos){1, 1}, "compat.read", NULL,
		          "cannot read the knowledge base");
		return TF_EFAIL;
	}
	struct ynode *root = ytree_parse(path, buf, len, &lim, d, &empty);
	free(buf);
	if (root == NULL)
		return empty ? 0 : TF_EFAIL;
	const struct ynode *rows = ymap_get(ymap_get(root, "pip"), "caps");
	int rc = 0;
	if (rows && rows->type == Y_SEQ) {
		*caps = xcalloc(rows->n + 1, sizeof(**caps));
		for (size_t i = 0; i < rows->n; i++) {
			const struct ynode *r = rows->items[i];
			struct pip_cap *c = &(*caps)[*n];
			if (r->type != Y_MAP) {
				diags_add(d, DIAG_ERROR, path, r->pos, "compat.schema", NULL,
				          "pip.caps: each entry is a mapping");
				rc = TF_EFAIL;
				continue;
			}
			char *pkg = field(path, r, "package", 0, d);
			char *when = field(path, r, "when", 0, d);
			c->package = pkg ? pip_normalize_name(pkg) : NULL;
			c->when = when ? pip_normalize_name(when) : NULL;
			free(pkg);
			free(when);
			c->below = field(path, r, "below", 1, d);
			c->when_below = field(path, r, "when_below", 1, d);
			c->fact = field(path, r, "fact", 0, d);
			c->source = field(path, r, "source", 0, d);
			const struct ynode *sev = ymap_get(r, "severity");
			if (sev != NULL) {
				if (sev->type != Y_SCALAR || (strcmp(sev->str, "error") != 0 &&
				                              strcmp(sev->str, "warning") != 0)) {
					diags_add(d, DIAG_ERROR, path, sev->pos, "compat.schema",
					          NULL, "pip.caps: `severity` is error or warning");
					rc = TF_EFAIL;
				} else {
					c->severity = xstrdup(sev->str);
				}
			}
			(*n)++;
			if (!c->package || !c->when || !c->below || !c->when_below || !c->fact ||
			    !c->source)
				rc = TF_EFAIL;
		}
	} else if (rows) {
		diags_add(d, DIAG_ERROR, path, rows->pos, "compat.schema", NULL,
		          "pip.caps must be a list");
		rc = TF_EFAIL;
	}
	ytree_free(root);
	if (rc != 0) {
		pip_caps_free(*caps, *n);
		*caps = NULL;
		*n = 0;
	}
	return rc;
}

void pip_caps_free(struct pip_cap *caps, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(caps[i].package);
		free(caps[i].below);
		free(caps[i].when);
		free(caps[i].when_below);
		free(caps[i].fact);
		free(caps[i].source);
		free(caps[i].severity);
	}
	free(caps);
}

const struct pip_cap *pip_caps_broken(const struct pip_cap *caps, size_t n,
                                      const char *(*version_of)(const char *, void *), void *arg,
                                      const struct pip_cap *after)
{
	for (size_t i = after ? (size_t)(after - caps) + 1 : 0; i < n; i++) {
		const char *w = version_of(caps[i].when, arg);
		const char *p = version_of(caps[i].package, arg);
		if (w && p && version_cmp(w, caps[i].when_below) < 0 &&
		    version_cmp(p, caps[i].below) >= 0)
			return &caps[i];
	}
	return NULL;
}
