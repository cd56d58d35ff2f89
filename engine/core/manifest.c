/*
 * manifest.c - schema v1: YAML tree -> typed model, with structural checks.
 *
 * What is checked here is what the format itself requires (types, required
 * keys, unknown keys, ranges, hash syntax). What depends on facts about
 * TensorFlow, CUDA and drivers lives in compat.c and its data file. The lock
 * texts a manifest carries (conda explicit, pip requirements) are read by
 * locktext.c; the model's queries and release are in manifest_model.c.
 *
 * Invariants:
 *  - every diagnostic carries the position of the node it is about;
 *  - a model is returned only when there are no errors;
 *  - the input is refused before parsing when it is too large, empty, binary
 *    (NUL bytes) or not UTF-8, so libyaml never sees such input.
 */
#include "manifest.h"
#include "locktext.h"
#include "stackenv.h"
#include "digest.h"
#include "error.h"
#include "util.h"
#include "yamltree.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* glibc before 2.32 (the portable build's Debian 11) has no SYS_openat2;
 * the kernel headers have its number. */
#ifndef SYS_openat2
#define SYS_openat2 __NR_openat2
#endif

#define MAX_SIZE_BYTES     (64ll << 30) /* 64 GiB: larger than any NVIDIA archive */
#define MAX_UNPACKED_BYTES (1ll << 40)

struct pctx {
	const char *file;
	const char *text;
	size_t textlen;
	struct diags *d;
	char *dir; /* directory of the manifest, for lock_file and requirements_file */
	int shape; /* manifest_load_shape: no side file read, nothing hashed */
};

#define err(p, pos, code, hint, ...)                                                               \
	diags_add((p)->d, DIAG_ERROR, (p)->file, pos, code, hint, __VA_ARGS__)

static const char *type_name(const struct ynode *n)
{
	switch (n->type) {
	case Y_MAP:
		return "a mapping";
	case Y_SEQ:
		return "a list";
	default:
		return "a scalar";
	}
}

/* Unknown keys get an error with the closest allowed key as a hint. */
static void check_keys(struct pctx *p, const struct ynode *map, const char *section,
                       const char *const *allowed)
{
	for (size_t i = 0; i < map->n; i++) {
		const struct ynode *k = map->keys[i];
		if (k->type != Y_SCALAR) {
			err(p, k->pos, "schema.key-type", "keys are plain words",
			    "%s: key is not a scalar", section);
			continue;
		}
		int ok = 0;
		const char *best = NULL;
		size_t bestd = (size_t)-1;
		for (size_t j = 0; allowed[j]; j++) {
			if (strcmp(k->str, allowed[j]) == 0) {
				ok = 1;
				break;
			}
			size_t dist = edit_distance(k->str, allowed[j]);
			if (dist < bestd) {
				bestd = dist;
				best = allowed[j];
			}
		}
		if (ok)
			continue;
		struct strbuf hint = STRBUF_INIT;
		if (best && bestd <= 3 && bestd < strlen(k->str))
			strbuf_addf(&hint, "did you mean '%s'?", best);
		else {
			strbuf_adds(&hint, "allowed keys:");
			for (size_t j = 0; allowed[j]; j++)
				strbuf_addf(&hint, " %s", allowed[j]);
		}
		diags_add(p->d, DIAG_ERROR, p->file, k->pos, "schema.unknown-key", hint.buf,
		          "unknown key '%s' in %s", k->str, section);
		strbuf_release(&hint);
	}
}

static int want_type(struct pctx *p, const struct ynode *n, enum ynode_type t, const char *what)
{
	if (n->type == t)
		return 1;
	static const char *names[] = {"a scalar", "a list", "a mapping"};
	diags_add(p->d, DIAG_ERROR, p->file, n->pos, "schema.type", NULL, "%s must be %s, not %s",
	          what, names[t], type_name(n));
	return 0;
}

/* The scalar at map[key], its position stored in *pos; NULL when absent or not a scalar. */
static const struct ynode *get_scalar(struct pctx *p, const struct ynode *map, const char *key,
                                      const char *what, struct pos *pos)
{
	struct ynode *n = ymap_get(map, key);
	if (n == NULL)
		return NULL;
	*pos = n->pos;
	return want_type(p, n, Y_SCALAR, what) ? n : NULL;
}

static void get_str(struct pctx *p, const struct ynode *map, const char *key, const char *what,
                    struct mstr *out)
{
	const struct ynode *n = get_scalar(p, map, key, what, &out->pos);
	if (n == NULL)
		return;
	free(out->s);
	out->s = xstrdup(n->str);
	out->set = 1;
}

/* A whole decimal number. 0, or -EINVAL / -ERANGE. */
static int parse_int(const char *s, int64_t *out)
{
	if (*s == '\0')
		return -EINVAL;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno)
		return -errno;
	if (*end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

static void get_int(struct pctx *p, const struct ynode *map, const char *key, const char *what,
                    int64_t lo, int64_t hi, struct mint *out)
{
	const struct ynode *n = get_scalar(p, map, key, what, &out->pos);
	if (n == NULL)
		return;
	int64_t v;
	if (n->style == YS_QUOTED || parse_int(n->str, &v) != 0) {
		diags_add(p->d, DIAG_ERROR, p->file, n->pos, "schema.type",
		          "write a whole number without quotes", "%s must be an integer, not '%s'",
		          what, n->str);
		return;
	}
	if (v < lo || v > hi) {
		diags_add(p->d, DIAG_ERROR, p->file, n->pos, "schema.range", NULL,
		          "%s is %lld, out of range [%lld, %lld]", what, (long long)v,
		          (long long)lo, (long long)hi);
		return;
	}
	out->v = v;
	out->set = 1;
}

static void get_bool(struct pctx *p, const struct ynode *map, const char *key, const char *what,
                     struct mbool *out)
{
	const struct ynode *n = get_scalar(p, map, key, what, &out->pos);
	if (n == NULL)
		return;
	if (n->style != YS_QUOTED &&
	    (strcmp(n->str, "true") == 0 || strcmp(n->str, "false") == 0)) {
		out->v = n->str[0] == 't';
		out->set = 1;
		return;
	}
	diags_add(p->d, DIAG_ERROR, p->file, n->pos, "schema.type", "use true or false",
	          "%s must be a boolean, not '%s'", what, n->str);
}

/* Picks one of `names` for a string; returns its index, or TF_EMANIFEST with a
 * diagnostic. */
static int get_enum(struct pctx *p, const struct mstr *s, const char *what,
                    const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(s->s, names[i]) == 0)
			return i;
	struct strbuf hint = STRBUF_INIT;
	strbuf_adds(&hint, "one of:");
	for (int i = 0; names[i]; i++)
		strbuf_addf(&hint, " %s", names[i]);
	diags_add(p->d, DIAG_ERROR, p->file, s->pos, "schema.enum", hint.buf,
	          "%s '%s' is not a valid value", what, s->s);
	strbuf_release(&hint);
	return TF_EMANIFEST;
}

static int is_version(const char *s)
{
	if (!(*s >= '0' && *s <= '9'))
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || *s == '.'))
			return 0;
	return s[-1] != '.';
}

static void check_version(struct pctx *p, struct mstr *v, const char *what)
{
	if (v->set && !is_version(v->s))
		diags_add(p->d, DIAG_ERROR, p->file, v->pos, "schema.version",
		          "versions are dotted numbers, e.g. 12.3.2; quote them (\"3.10\") so YAML "
		          "keeps the text",
		          "%s '%s' is not a version", what, v->s);
}

/*
 * A version written as a plain YAML number: tfprov keeps the text, but YAML
 * readers with the core schema (CI scripts, PyYAML, yq) read `python: 3.10` as
 * the float 3.1 and `cuda: 12` as an integer. Warns with what they read.
 */
static void warn_yaml_number(struct pctx *p, const struct ynode *n, const char *what)
{
	const char *s;
	char *end, read[48];
	int digits = 0, dots = 0;

	if (n == NULL || n->type != Y_SCALAR || n->style != YS_PLAIN)
		return;
	for (s = n->str; *s; s++) {
		if (*s >= '0' && *s <= '9')
			digits++;
		else if (*s == '.')
			dots++;
		else
			return;
	}
	if (digits == 0 || dots > 1)
		return;
	if (dots == 0) {
		/* YAML 1.1 readers take a leading 0 as octal. */
		long long v = strtoll(n->str, &end, n->str[0] == '0' && n->str[1] ? 8 : 10);
		if (*end != '\0')
			return; /* "09": not octal either; YAML 1.1 reads it as a string */
		snprintf(read, sizeof(read), "the integer %lld", v);
	} else {
		double v = strtod(n->str, &end);
		int prec;
		for (prec = 1; prec < 17; prec++) {
			char buf[40];
			snprintf(buf, sizeof(buf), "%.*g", prec, v);
			if (strtod(buf, NULL) == v)
				break;
		}
		snprintf(read, sizeof(read), "the float %.*g%s", prec, v,
		         strchr(n->str, '.') && v == (double)(long long)v ? ".0" : "");
	}
	diags_add(p->d, DIAG_WARNING, p->file, n->pos, "schema.yaml-number",
	          "quote it (\"3.10\", not 3.10) so every YAML reader keeps the text",
	          "%s is written as a YAML number: tfprov reads the text '%s', other YAML "
	          "readers read %s",
	          what, n->str, read);
}

static void check_abs_path(struct pctx *p, struct mstr *v, const char *what)
{
	if (!v->set)
		return;
	if (v->s[0] != '/' || strstr(v->s, "/../") || str_ends_with(v->s, "/..") ||
	    strchr(v->s, '\n'))
		diags_add(p->d, DIAG_ERROR, p->file, v->pos, "schema.path",
		          "use an absolute path without '..'; --root puts it under the sandbox",
		          "%s '%s' is not a clean absolute path", what, v->s);
}

static void parse_artifact(struct pctx *p, const struct ynode *n, const char *what,
                           struct artifact *a)
{
	static const char *const keys[] = {"name",  "url",           "sha256", "size",
	                                   "strip", "unpacked_size", NULL};
	a->pos = n->pos;
	if (!want_type(p, n, Y_MAP, what))
		return;
	check_keys(p, n, what, keys);
	get_str(p, n, "name", "artifact name", &a->name);
	get_str(p, n, "url", "artifact url", &a->url);
	get_str(p, n, "sha256", "artifact sha256", &a->sha256);
	get_int(p, n, "size", "artifact size", 1, MAX_SIZE_BYTES, &a->size);
	get_int(p, n, "strip", "artifact strip", 0, 8, &a->strip);
	get_int(p, n, "unpacked_size", "artifact unpacked_size", 0, MAX_UNPACKED_BYTES,
	        &a->unpacked_size);
	const char *label = a->name.set ? a->name.s : what;
	if (!a->url.set)
		diags_add(p->d, DIAG_ERROR, p->file, n->pos, "artifact.no-url", NULL,
		          "%s has no url", label);
	else if (!(str_starts_with(a->url.s, "https://") || str_starts_with(a->url.s, "http://") ||
	           str_starts_with(a->url.s, "file://")))
		diags_add(p->d, DIAG_ERROR, p->file, a->url.pos, "artifact.url-scheme",
		          "use https://, http:// or file://", "%s: unsupported url '%s'", label,
		          a->url.s);
	if (!a->sha256.set)
		diags_add(p->d, DIAG_ERROR, p->file, n->pos, "artifact.no-sha256",
		          "every artifact is pinned by its sha256; there is no insecure mode",
		          "%s has no sha256", label);
	else if (!is_hex64(a->sha256.s)) {
		int upper = 0;
		for (const char *s = a->sha256.s; *s; s++)
			upper |= (*s >= 'A' && *s <= 'F');
		diags_add(p->d, DIAG_ERROR, p->file, a->sha256.pos, "artifact.bad-sha256",
		          upper ? "write the digest in lowercase hex"
		                : "a sha256 is 64 hex digits (sha256sum prints it)",
		          "%s: sha256 '%s' is not 64 lowercase hex digits", label, a->sha256.s);
	}
	if (!a->size.set && ymap_get(n, "size") == NULL)
		diags_add(p->d, DIAG_WARNING, p->file, n->pos, "artifact.no-size",
		          "add size: BYTES so a wrong or endless download is cut short",
		          "%s has no size; only its hash will be enforced", label);
}

static void parse_redist(struct pctx *p, const struct ynode *n, struct redist_ref *r,
                         int allow_variant)
{
	static const char *const keys[] = {"url", "sha256", "size", "components", "variant", NULL};
	static const char *const keys_nv[] = {"url", "sha256", "size", "components", NULL};
	r->pos = n->pos;
	if (!want_type(p, n, Y_MAP, "redist"))
		return;
	r->set = 1;
	check_keys(p, n, "redist", allow_variant ? keys : keys_nv);
	/* The JSON itself is an artifact: same rules. */
	static const char *const none[] = {NULL};
	(void)none;
	get_str(p, n, "url", "redist url", &r->json.url);
	get_str(p, n, "sha256", "redist sha256", &r->json.sha256);
	get_int(p, n, "size", "redist size", 1, 1 << 30, &r->json.size);
	r->json.pos = n->pos;
	/* Named after its file (redistrib_12.3.2.json) so messages say which. */
	const char *base = r->json.url.s ? strrchr(r->json.url.s, '/') : NULL;
	r->json.name.s = xstrdup(base && base[1] ? base + 1 : "redistrib json");
	r->json.name.set = 1;
	if (!r->json.url.set)
		diags_add(p->d, DIAG_ERROR, p->file, n->pos, "artifact.no-url", NULL,
		          "redist has no url");
	if (!r->json.sha256.set) {
		/* Lock input (trust on first use): `tfprov lock` fetches the JSON over
		 * TLS and writes the archives it pins; plan and apply refuse it. */
		if (r->json.url.set && str_starts_with(r->json.url.s, "https://"))
			diags_add(
			    p->d, DIAG_WARNING, p->file, n->pos, "redist.unpinned",
			    "run `tfprov lock` on a machine with network: it fetches the JSON "
			    "over TLS, pins it on first use and writes the archives inline",
			    "%s has no sha256 yet: not usable by plan or apply until locked",
			    r->json.name.s);
		else
			diags_add(p->d, DIAG_ERROR, p->file, n->pos, "artifact.no-sha256",
			          "pin the redistrib JSON by sha256, or give its https:// URL and "
			          "run `tfprov lock` (trust on first use needs TLS)",
			          "redist has no sha256");
	} else if (!is_hex64(r->json.sha256.s))
		diags_add(p->d, DIAG_ERROR, p->file, r->json.sha256.pos, "artifact.bad-sha256",
		          "a sha256 is 64 lowercase hex digits",
		          "redist: sha256 '%s' is not 64 lowercase hex digits", r->json.sha256.s);
	if (allow_variant)
		get_str(p, n, "variant", "redist variant", &r->variant);
	struct ynode *c = ymap_get(n, "components");
	if (c && want_type(p, c, Y_SEQ, "redist components")) {
		for (size_t i = 0; i < c->n; i++) {
			if (r->ncomponents == ARRAY_SIZE(r->components)) {
				diags_add(p->d, DIAG_ERROR, p->file, c->items[i]->pos,
				          "schema.range", NULL, "too many components (max %zu)",
				          ARRAY_SIZE(r->components));
				break;
			}
			if (!want_type(p, c->items[i], Y_SCALAR, "component"))
				continue;
			struct mstr *m = &r->components[r->ncomponents++];
			m->s = xstrdup(c->items[i]->str);
			m->pos = c->items[i]->pos;
			m->set = 1;
		}
	}
}

/* Position of line `idx` (0-based) of a block scalar's content. */
static struct pos block_line_pos(struct pctx *p, const struct ynode *n, size_t idx)
{
	struct pos pos = n->pos;
	if (n->style != YS_LITERAL && n->style != YS_FOLDED) {
		return pos;
	}
	int line = n->pos.line + 1 + (int)idx;
	/* Find the column of the first non-space on that line of the file. */
	const char *s = p->text;
	for (int l = 1; l < line && s < p->text + p->textlen; s++)
		if (*s == '\n')
			l++;
	int col = 1;
	while (s < p->text + p->textlen && *s == ' ') {
		s++;
		col++;
	}
	pos.line = line;
	pos.col = col;
	return pos;
}

/*
 * Opens a side file (python.lock_file, pip.requirements_file) beneath the
 * manifest's directory: a relative path whose resolution, symlinks included,
 * never leaves that directory (openat2 RESOLVE_BENEATH; without openat2,
 * realpath and a prefix check). An fd, or -errno (-EXDEV with why set when
 * the path would leave the directory).
 */
static int open_beneath(const char *dir, const char *name, struct why *why)
{
	if (name[0] == '/')
		return why_fail(why, -EXDEV, "an absolute path");
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY,
	                       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	int fd = (int)syscall(SYS_openat2, dfd, name, &how, sizeof(how));
	if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
		char *full = path_join(dir, name);
		char *real = realpath(full, NULL), *rdir = realpath(dir, NULL);
		size_t n = rdir ? strlen(rdir) : 0;
		if (real && rdir && strncmp(real, rdir, n) == 0 && (real[n] == '/' || n == 1))
			fd = open(real, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		else if (real && rdir)
			errno = EXDEV;
		free(full);
		free(real);
		free(rdir);
	}
	int e = errno;
	if (fd < 0 && e == EXDEV)
		why_fail(why, -EXDEV,
		         "a path that leads out of the manifest's directory ('..' or a symlink)");
	close(dfd);
	return fd < 0 ? -e : fd;
}

/* Reads a file named relative to the manifest's directory, beneath it. */
static int read_side_file(struct pctx *p, struct mstr *name, char **text, size_t *len, char **path)
{
	struct why why = {0};
	*path = path_join(p->dir, name->s);
	int fd = open_beneath(p->dir, name->s, &why);
	if (fd < 0 && why.code) {
		diags_add(p->d, DIAG_ERROR, p->file, name->pos, "schema.side-file",
		          "keep lock and requirements files in the manifest's directory tree and "
		          "name them relative to it",
		          "'%s' is %s; side files must stay beside the manifest", name->s,
		          why_text(&why));
		why_clear(&why);
		return TF_EMANIFEST;
	}
	int rc = fd < 0 ? fd : read_fd(fd, MANIFEST_MAX_BYTES, text, len);
	if (fd >= 0)
		close(fd);
	if (rc != 0) {
		diags_add(p->d, DIAG_ERROR, p->file, name->pos, "schema.file",
		          "the path is relative to the manifest's directory",
		          "cannot read '%s': %s", *path, strerror(-rc));
		return TF_EMANIFEST;
	}
	if (memchr(*text, '\0', *len)) {
		diags_add(p->d, DIAG_ERROR, p->file, name->pos, "schema.file", NULL,
		          "'%s' is a binary file", *path);
		free(*text);
		*text = NULL;
		return TF_EMANIFEST;
	}
	return 0;
}

static void parse_stack(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"name", "platform", "description", NULL};
	static const char *const plats[] = {"linux-x86_64", "wsl2", "windows-x86_64", NULL};
	if (!want_type(p, n, Y_MAP, "stack"))
		return;
	check_keys(p, n, "stack", keys);
	get_str(p, n, "name", "stack.name", &m->stack.name);
	get_str(p, n, "platform", "stack.platform", &m->stack.platform_s);
	get_str(p, n, "description", "stack.description", &m->stack.description);
	if (!m->stack.name.set)
		err(p, n->pos, "schema.required", "e.g. name: stable-2.15",
		    "stack.name is required");
	else if (m->stack.name.s[0] == '\0' || m->stack.name.s[0] == '.' ||
	         strspn(m->stack.name.s, "abcdefghijklmnopqrstuvwxyz0123456789._-") !=
	             strlen(m->stack.name.s) ||
	         strlen(m->stack.name.s) > 64)
		err(p, m->stack.name.pos, "schema.name",
		    "one path component: lowercase letters, digits, '.', '_' and '-' (at most "
		    "64), not starting with '.'",
		    "stack name '%s' is not allowed", m->stack.name.s);
	if (!m->stack.platform_s.set) {
		err(p, n->pos, "schema.required", "one of: linux-x86_64 wsl2 windows-x86_64",
		    "stack.platform is required");
	} else {
		int i = get_enum(p, &m->stack.platform_s, "platform", plats);
		m->stack.platform = i < 0 ? PLATFORM_UNKNOWN : (enum platform)(i + 1);
	}
}

static void parse_versions(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"tensorflow", "cuda", "cudnn", "python", NULL};
	m->versions.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "versions"))
		return;
	m->versions.set = 1;
	check_keys(p, n, "versions", keys);
	get_str(p, n, "tensorflow", "versions.tensorflow", &m->versions.tensorflow);
	get_str(p, n, "cuda", "versions.cuda", &m->versions.cuda);
	get_str(p, n, "cudnn", "versions.cudnn", &m->versions.cudnn);
	get_str(p, n, "python", "versions.python", &m->versions.python);
	check_version(p, &m->versions.tensorflow, "versions.tensorflow");
	for (int i = 0; keys[i] != NULL; i++) {
		char what[32];
		snprintf(what, sizeof(what), "versions.%s", keys[i]);
		warn_yaml_number(p, ymap_get(n, keys[i]), what);
	}
	check_version(p, &m->versions.cuda, "versions.cuda");
	check_version(p, &m->versions.cudnn, "versions.cudnn");
	check_version(p, &m->versions.python, "versions.python");
	if (!m->versions.tensorflow.set)
		err(p, n->pos, "schema.required", NULL, "versions.tensorflow is required");
}

static void parse_driver(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"policy", "min_version", "gpus", NULL};
	static const char *const pols[] = {"require", "skip", NULL};
	m->driver.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "driver"))
		return;
	m->driver.set = 1;
	check_keys(p, n, "driver", keys);
	get_str(p, n, "policy", "driver.policy", &m->driver.policy_s);
	if (m->driver.policy_s.set) {
		int i = get_enum(p, &m->driver.policy_s, "driver.policy", pols);
		m->driver.policy = i == 1 ? DRIVER_SKIP : DRIVER_REQUIRE;
	}
	get_str(p, n, "min_version", "driver.min_version", &m->driver.min_version);
	check_version(p, &m->driver.min_version, "driver.min_version");
	warn_yaml_number(p, ymap_get(n, "min_version"), "driver.min_version");
	struct ynode *g = ymap_get(n, "gpus");
	if (g && want_type(p, g, Y_SEQ, "driver.gpus")) {
		for (size_t i = 0; i < g->n && m->driver.ngpus < ARRAY_SIZE(m->driver.gpus); i++) {
			if (!want_type(p, g->items[i], Y_SCALAR, "compute capability"))
				continue;
			struct mstr *s = &m->driver.gpus[m->driver.ngpus++];
			s->s = xstrdup(g->items[i]->str);
			s->pos = g->items[i]->pos;
			s->set = 1;
			check_version(p, s, "compute capability");
			warn_yaml_number(p, g->items[i], "a compute capability of driver.gpus");
		}
	}
}

static void parse_cuda(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"version", "redist", "artifacts", "runfile", NULL};
	m->cuda.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "cuda"))
		return;
	m->cuda.set = 1;
	check_keys(p, n, "cuda", keys);
	get_str(p, n, "version", "cuda.version", &m->cuda.version);
	check_version(p, &m->cuda.version, "cuda.version");
	warn_yaml_number(p, ymap_get(n, "version"), "cuda.version");
	struct ynode *r = ymap_get(n, "redist");
	if (r)
		parse_redist(p, r, &m->cuda.redist, 0);
	struct ynode *a = ymap_get(n, "artifacts");
	if (a && want_type(p, a, Y_SEQ, "cuda.artifacts")) {
		m->cuda.artifacts.v = xcalloc(a->n, sizeof(struct artifact));
		for (size_t i = 0; i < a->n; i++)
			parse_artifact(p, a->items[i], "cuda artifact",
			               &m->cuda.artifacts.v[m->cuda.artifacts.n++]);
	}
	struct ynode *rf = ymap_get(n, "runfile");
	if (rf) {
		parse_artifact(p, rf, "cuda runfile", &m->cuda.runfile);
		m->cuda.has_runfile = 1;
	}
	if (!r && !a && !rf)
		err(p, n->pos, "schema.required",
		    "give inline artifacts, a redist JSON with components, or a runfile",
		    "cuda has nothing to install");
	if (rf && (r || a))
		err(p, rf->pos, "schema.conflict",
		    "a runfile toolkit and redist components do not mix in one prefix",
		    "cuda.runfile cannot be combined with redist or artifacts");
}

static void parse_cudnn(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"version", "placement", "artifact", "redist", NULL};
	static const char *const pl[] = {"merge", "separate", NULL};
	m->cudnn.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "cudnn"))
		return;
	m->cudnn.set = 1;
	check_keys(p, n, "cudnn", keys);
	get_str(p, n, "version", "cudnn.version", &m->cudnn.version);
	check_version(p, &m->cudnn.version, "cudnn.version");
	warn_yaml_number(p, ymap_get(n, "version"), "cudnn.version");
	get_str(p, n, "placement", "cudnn.placement", &m->cudnn.placement_s);
	if (m->cudnn.placement_s.set) {
		int i = get_enum(p, &m->cudnn.placement_s, "cudnn.placement", pl);
		m->cudnn.placement = i == 1 ? PLACEMENT_SEPARATE : PLACEMENT_MERGE;
	}
	struct ynode *a = ymap_get(n, "artifact");
	if (a) {
		parse_artifact(p, a, "cudnn artifact", &m->cudnn.artifact);
		m->cudnn.has_artifact = 1;
	}
	struct ynode *r = ymap_get(n, "redist");
	if (r)
		parse_redist(p, r, &m->cudnn.redist, 1);
	if (!a && !r)
		err(p, n->pos, "schema.required", "give an artifact or a redist JSON",
		    "cudnn has nothing to install");
}

static void parse_env(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"vars", "profile_dir", NULL};
	m->env.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "env"))
		return;
	m->env.set = 1;
	check_keys(p, n, "env", keys);
	get_str(p, n, "profile_dir", "env.profile_dir", &m->env.profile_dir);
	check_abs_path(p, &m->env.profile_dir, "env.profile_dir");
	struct ynode *v = ymap_get(n, "vars");
	if (v && want_type(p, v, Y_MAP, "env.vars")) {
		m->env.vars = xcalloc(v->n, sizeof(*m->env.vars));
		for (size_t i = 0; i < v->n; i++) {
			struct ynode *k = v->keys[i], *val = v->items[i];
			if (k->type != Y_SCALAR || !want_type(p, val, Y_SCALAR, "env value"))
				continue;
			const char *s = k->str;
			int ok = (s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') ||
			          (s[0] >= 'a' && s[0] <= 'z'));
			for (; *s && ok; s++)
				ok = (*s == '_' || (*s >= 'A' && *s <= 'Z') ||
				      (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9'));
			if (!ok) {
				err(p, k->pos, "env.name", "names are letters, digits and '_'",
				    "'%s' is not a valid environment variable name", k->str);
				continue;
			}
			if (stackenv_reserved(k->str)) {
				err(p, k->pos, "env.name",
				    "TFPROV_STACK and _TFPROV_* say which stack a shell is in and "
				    "how to "
				    "leave it; tfprov sets them",
				    "%s is tfprov's own variable", k->str);
				continue;
			}
			if (strpbrk(val->str, "\n\r") || memchr(val->str, '\0', val->len)) {
				err(p, val->pos, "env.value", "values are one line of text",
				    "value of %s contains a line break", k->str);
				continue;
			}
			struct env_var *ev = &m->env.vars[m->env.nvars++];
			ev->name = (struct mstr){xstrdup(k->str), k->pos, 1};
			ev->value = (struct mstr){xstrdup(val->str), val->pos, 1};
		}
	}
}

typedef void (*text_parse_fn)(const char *file, const char *text, struct pos base, int block,
                              struct manifest *m, struct diags *d);

static void parse_conda_into(const char *file, const char *text, struct pos base, int block,
                             struct manifest *m, struct diags *d)
{
	conda_explicit_parse(file, text, base, block, &m->python.pkgs, &m->python.npkgs, d);
}

static void parse_pip_into(const char *file, const char *text, struct pos base, int block,
                           struct manifest *m, struct diags *d)
{
	int lock_input = m->pip.complete.set && !m->pip.complete.v;
	pip_requirements_parse_lock(file, text, base, block, lock_input, &m->pip.reqs,
	                            &m->pip.nreqs, d);
}

/*
 * A lock given inline (a block scalar, positions inside the manifest) or as
 * a file next to the manifest (positions in that file); not both.
 */
static void parse_text_or_file(struct pctx *p, const struct ynode *node, struct mstr *text_out,
                               struct mstr *file, const char *what, const char *what_file,
                               text_parse_fn fn, struct manifest *m, char file_sha256[65])
{
	if (node && want_type(p, node, Y_SCALAR, what)) {
		*text_out = (struct mstr){xstrdup(node->str), node->pos, 1};
		fn(p->file, node->str, block_line_pos(p, node, 0), node->style == YS_LITERAL, m,
		   p->d);
	}
	if (!file->set)
		return;
	char *text = NULL, *path = NULL;
	size_t len;
	if (node)
		err(p, file->pos, "schema.conflict", "keep one of them", "%s and %s are both given",
		    what, what_file);
	else if (!p->shape && read_side_file(p, file, &text, &len, &path) == 0) {
		/* What a signature of the manifest must cover (cli_check_signature). */
		sha256_buf(text, len, file_sha256);
		fn(path, text, (struct pos){1, 1}, 0, m, p->d);
	}
	free(text);
	free(path);
}

static void parse_python(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"manager",   "name",  "version", "interpreter", "lock",
	                                   "lock_file", "specs", "channel", NULL};
	static const char *const mgr[] = {"conda", "venv", NULL};
	m->python.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "python"))
		return;
	m->python.set = 1;
	check_keys(p, n, "python", keys);
	get_str(p, n, "manager", "python.manager", &m->python.manager_s);
	get_str(p, n, "name", "python.name", &m->python.name);
	get_str(p, n, "version", "python.version", &m->python.version);
	get_str(p, n, "interpreter", "python.interpreter", &m->python.interpreter);
	get_str(p, n, "lock_file", "python.lock_file", &m->python.lock_file);
	get_str(p, n, "channel", "python.channel", &m->python.channel);
	check_version(p, &m->python.version, "python.version");
	warn_yaml_number(p, ymap_get(n, "version"), "python.version");
	if (!m->python.manager_s.set) {
		err(p, n->pos, "schema.required", "manager: conda or manager: venv",
		    "python.manager is required");
	} else {
		int i = get_enum(p, &m->python.manager_s, "python.manager", mgr);
		m->python.manager = i == 0 ? PYENV_CONDA : i == 1 ? PYENV_VENV : PYENV_NONE;
	}
	if (m->python.name.set &&
	    (m->python.name.s[0] == '\0' || m->python.name.s[0] == '.' ||
	     strspn(m->python.name.s,
	            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
	         strlen(m->python.name.s)))
		err(p, m->python.name.pos, "schema.name", "letters, digits, '.', '_' and '-'",
		    "python env name '%s' is not allowed", m->python.name.s);
	struct ynode *sp = ymap_get(n, "specs");
	if (sp && want_type(p, sp, Y_SEQ, "python.specs")) {
		for (size_t i = 0; i < sp->n && m->python.nspecs < ARRAY_SIZE(m->python.specs);
		     i++) {
			if (!want_type(p, sp->items[i], Y_SCALAR, "conda spec"))
				continue;
			struct mstr *s = &m->python.specs[m->python.nspecs++];
			*s = (struct mstr){xstrdup(sp->items[i]->str), sp->items[i]->pos, 1};
		}
	}
	struct ynode *lk = ymap_get(n, "lock");
	parse_text_or_file(p, lk, &m->python.lock, &m->python.lock_file, "python.lock",
	                   "python.lock_file", parse_conda_into, m, m->python.lock_file_sha256);
	if (m->python.manager == PYENV_CONDA && !lk && !m->python.lock_file.set)
		err(p, n->pos, "schema.required",
		    "tfprov installs conda envs from an explicit lock (conda list --explicit "
		    "--sha256, or conda-lock); give lock: or lock_file:",
		    "manager: conda needs a lock");
	if (m->python.manager == PYENV_VENV && (lk || m->python.lock_file.set))
		err(p, lk ? lk->pos : m->python.lock_file.pos, "schema.conflict",
		    "a venv takes its interpreter from the system; use manager: conda for a lock",
		    "a conda lock does not apply to manager: venv");
}

/*
 * pip.requires: {distribution: [Requires-Dist, ...]}, what `tfprov lock`
 * recorded from each wheel's METADATA; judged by the static lock check.
 */
static void parse_pip_requires(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	if (n == NULL || !want_type(p, n, Y_MAP, "pip.requires"))
		return;
	m->pip.requires_pos = n->pos;
	m->pip.requires = xcalloc(n->n ? n->n : 1, sizeof(*m->pip.requires));
	for (size_t i = 0; i < n->n; i++) {
		const struct ynode *k = n->keys[i], *v = n->items[i];
		struct pip_requires *r;

		if (!want_type(p, k, Y_SCALAR, "a pip.requires key"))
			continue;
		if (v->type == Y_SCALAR && v->str[0] == '\0' && v->style == YS_PLAIN) {
			/* "name:" with nothing: no requirements */
		} else if (!want_type(p, v, Y_SEQ, "a pip.requires entry")) {
			continue;
		}
		r = &m->pip.requires[m->pip.nrequires++];
		r->pos = k->pos;
		r->name = pip_normalize_name(k->str);
		if (v->type != Y_SEQ)
			continue;
		r->reqs = xcalloc(v->n ? v->n : 1, sizeof(*r->reqs));
		for (size_t j = 0; j < v->n; j++) {
			if (!want_type(p, v->items[j], Y_SCALAR, "a Requires-Dist string"))
				continue;
			r->reqs[r->nreqs++] =
			    (struct mstr){xstrdup(v->items[j]->str), v->items[j]->pos, 1};
		}
	}
}

/*
 * pip.requires_python: {distribution: specifier}, each pin's Requires-Python
 * as `tfprov lock` recorded it; judged against the stack's Python by the
 * static lock check (its PEP 440 form too: the knowledge base's grammar).
 */
static void parse_pip_requires_python(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	if (n == NULL || !want_type(p, n, Y_MAP, "pip.requires_python"))
		return;
	m->pip.requires_python = xcalloc(n->n ? n->n : 1, sizeof(*m->pip.requires_python));
	for (size_t i = 0; i < n->n; i++) {
		const struct ynode *k = n->keys[i], *v = n->items[i];
		struct pip_requires *r;

		if (!want_type(p, k, Y_SCALAR, "a pip.requires_python key") ||
		    !want_type(p, v, Y_SCALAR, "a Requires-Python specifier"))
			continue;
		r = &m->pip.requires_python[m->pip.nrequires_python++];
		r->pos = k->pos;
		r->name = pip_normalize_name(k->str);
		r->reqs = xcalloc(1, sizeof(*r->reqs));
		r->reqs[r->nreqs++] = (struct mstr){xstrdup(v->str), v->pos, 1};
	}
}

static void parse_pip(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"requirements",    "requirements_file", "index_url",
	                                   "complete",        "installer",         "requires",
	                                   "requires_python", "min_glibc",         NULL};
	static const char *const installers[] = {"native", "pip", NULL};
	m->pip.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "pip"))
		return;
	m->pip.set = 1;
	check_keys(p, n, "pip", keys);
	get_str(p, n, "index_url", "pip.index_url", &m->pip.index_url);
	get_str(p, n, "requirements_file", "pip.requirements_file", &m->pip.requirements_file);
	get_bool(p, n, "complete", "pip.complete", &m->pip.complete);
	get_str(p, n, "installer", "pip.installer", &m->pip.installer_s);
	get_str(p, n, "min_glibc", "pip.min_glibc", &m->pip.min_glibc);
	check_version(p, &m->pip.min_glibc, "pip.min_glibc");
	if (m->pip.installer_s.set)
		m->pip.use_pip = get_enum(p, &m->pip.installer_s, "pip.installer", installers) == 1;
	struct ynode *rq = ymap_get(n, "requirements");
	parse_text_or_file(p, rq, &m->pip.requirements, &m->pip.requirements_file,
	                   "pip.requirements", "pip.requirements_file", parse_pip_into, m,
	                   m->pip.requirements_file_sha256);
	if (!rq && !m->pip.requirements_file.set)
		err(p, n->pos, "schema.required", NULL,
		    "pip needs requirements or requirements_file");
	parse_pip_requires(p, ymap_get(n, "requires"), m);
	parse_pip_requires_python(p, ymap_get(n, "requires_python"), m);
}

static void parse_bench(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	static const char *const keys[] = {"enabled",    "batch_size", "steps",
	                                   "precisions", "margin_pct", NULL};
	static const char *const precs[] = {"fp32", "mixed_float16", NULL};
	m->bench.pos = n->pos;
	if (!want_type(p, n, Y_MAP, "bench"))
		return;
	m->bench.set = 1;
	check_keys(p, n, "bench", keys);
	get_bool(p, n, "enabled", "bench.enabled", &m->bench.enabled);
	get_int(p, n, "batch_size", "bench.batch_size", 1, 4096, &m->bench.batch_size);
	get_int(p, n, "steps", "bench.steps", 1, 100000, &m->bench.steps);
	get_int(p, n, "margin_pct", "bench.margin_pct", 0, 1000, &m->bench.margin_pct);
	struct ynode *pr = ymap_get(n, "precisions");
	if (pr && want_type(p, pr, Y_SEQ, "bench.precisions")) {
		for (size_t i = 0; i < pr->n; i++) {
			if (!want_type(p, pr->items[i], Y_SCALAR, "precision"))
				continue;
			if (m->bench.nprecisions == ARRAY_SIZE(m->bench.precisions))
				break;
			struct mstr *s = &m->bench.precisions[m->bench.nprecisions];
			*s = (struct mstr){xstrdup(pr->items[i]->str), pr->items[i]->pos, 1};
			if (get_enum(p, s, "bench precision", precs) >= 0)
				m->bench.nprecisions++;
			else
				free(s->s);
		}
	}
}

static void parse_missing(struct pctx *p, const struct ynode *n, struct manifest *m)
{
	if (!want_type(p, n, Y_SEQ, "missing"))
		return;
	m->gaps = xcalloc(n->n, sizeof(*m->gaps));
	for (size_t i = 0; i < n->n; i++) {
		if (!want_type(p, n->items[i], Y_SCALAR, "missing entry"))
			continue;
		struct gap *g = &m->gaps[m->ngaps++];
		g->what = (struct mstr){xstrdup(n->items[i]->str), n->items[i]->pos, 1};
		diags_add(p->d, DIAG_WARNING, p->file, g->what.pos, "pins.missing",
		          "run `tfprov lock` on a machine with network to complete the pins",
		          "not pinned: %s", g->what.s);
	}
}

static void parse_root(struct pctx *p, const struct ynode *root, struct manifest *m)
{
	static const char *const keys[] = {"schema",  "stack", "prefix", "versions", "driver",
	                                   "cuda",    "cudnn", "env",    "python",   "pip",
	                                   "missing", "bench", NULL};
	if (!want_type(p, root, Y_MAP, "a manifest"))
		return;
	check_keys(p, root, "the manifest", keys);
	get_int(p, root, "schema", "schema", 1, 1, &m->schema);
	if (!m->schema.set && ymap_get(root, "schema") == NULL)
		err(p, root->pos, "schema.required", "add `schema: 1` at the top",
		    "the manifest has no schema version");
	struct ynode *n;
	if ((n = ymap_get(root, "stack")))
		parse_stack(p, n, m);
	else
		err(p, root->pos, "schema.required", "stack: {name: ..., platform: linux-x86_64}",
		    "the manifest has no stack section");
	get_str(p, root, "prefix", "prefix", &m->prefix);
	check_abs_path(p, &m->prefix, "prefix");
	if ((n = ymap_get(root, "versions")))
		parse_versions(p, n, m);
	else
		err(p, root->pos, "schema.required", "versions: {tensorflow: ..., cuda: ..., ...}",
		    "the manifest has no versions section");
	/* Optional sections, in the order later checks rely on. */
	static const struct {
		const char *key;
		void (*parse)(struct pctx *, const struct ynode *, struct manifest *);
	} sections[] = {
	    {"driver", parse_driver},   {"cuda", parse_cuda},     {"cudnn", parse_cudnn},
	    {"env", parse_env},         {"python", parse_python}, {"pip", parse_pip},
	    {"missing", parse_missing}, {"bench", parse_bench},
	};
	for (size_t i = 0; i < ARRAY_SIZE(sections); i++)
		if ((n = ymap_get(root, sections[i].key)))
			sections[i].parse(p, n, m);
	if (m->pip.set && !m->python.set)
		err(p, ymap_get(root, "pip")->pos, "schema.required",
		    "pip installs into the stack's Python env; add a python section",
		    "pip needs a python section");
	if (m->cudnn.set && !m->cuda.set)
		err(p, ymap_get(root, "cudnn")->pos, "schema.required", NULL,
		    "cudnn needs a cuda section");
	/* Defaults that follow from other keys. */
	if (!m->prefix.set)
		m->prefix = (struct mstr){xstrdup("/opt/tfprov"), root->pos, 0};
	if (!m->cuda.version.set && m->versions.cuda.set)
		m->cuda.version =
		    (struct mstr){xstrdup(m->versions.cuda.s), m->versions.cuda.pos, 0};
	if (!m->cudnn.version.set && m->versions.cudnn.set)
		m->cudnn.version =
		    (struct mstr){xstrdup(m->versions.cudnn.s), m->versions.cudnn.pos, 0};
	if (!m->python.version.set && m->versions.python.set)
		m->python.version =
		    (struct mstr){xstrdup(m->versions.python.s), m->versions.python.pos, 0};
	if (!m->python.name.set && m->python.set && m->stack.name.set)
		m->python.name = (struct mstr){xstrdup(m->stack.name.s), m->python.pos, 0};
	if (!m->env.profile_dir.set)
		m->env.profile_dir = (struct mstr){xstrdup("/etc/profile.d"), root->pos, 0};
	if (m->cuda.set && m->cuda.version.s == NULL)
		err(p, m->cuda.pos, "schema.required", "set versions.cuda or cuda.version",
		    "the CUDA version is not given");
}

/* Refuses input that is not a text manifest before libyaml sees it. */
static int precheck(struct pctx *p, const char *buf, size_t len)
{
	struct pos none = {0, 0};
	if (len > MANIFEST_MAX_BYTES) {
		diags_add(p->d, DIAG_ERROR, p->file, none, "file.too-large",
		          "a manifest is a few kilobytes; is this the right file?",
		          "file is %zu bytes, larger than the %u-byte limit", len,
		          MANIFEST_MAX_BYTES);
		return TF_EMANIFEST;
	}
	size_t i = 0;
	while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t'))
		i++;
	if (i == len) {
		diags_add(p->d, DIAG_ERROR, p->file, none, "file.empty",
		          "see manifests/SCHEMA.md for the format", "manifest is empty");
		return TF_EMANIFEST;
	}
	const char *nul = memchr(buf, '\0', len);
	if (nul) {
		int line = 1, col = 1;
		for (const char *s = buf; s < nul; s++) {
			if (*s == '\n') {
				line++;
				col = 1;
			} else {
				col++;
			}
		}
		diags_add(p->d, DIAG_ERROR, p->file, (struct pos){line, col}, "file.binary",
		          "a manifest is UTF-8 text", "file contains a NUL byte: not a text file");
		return TF_EMANIFEST;
	}
	/* UTF-8 validity (RFC 3629: no overlong forms, no surrogates, nothing
	 * above U+10FFFF), with the position of the first bad byte. */
	int line = 1, col = 1;
	for (size_t k = 0; k < len;) {
		const unsigned char *u = (const unsigned char *)buf + k;
		unsigned char c = u[0];
		size_t need = 0;
		unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
		if (c < 0x80)
			need = 0;
		else if (c >= 0xC2 && c <= 0xDF)
			need = 1;
		else if (c == 0xE0)
			need = 2, lo = 0xA0;
		else if (c == 0xED)
			need = 2, hi = 0x9F;
		else if (c >= 0xE1 && c <= 0xEF)
			need = 2;
		else if (c == 0xF0)
			need = 3, lo = 0x90;
		else if (c >= 0xF1 && c <= 0xF3)
			need = 3;
		else if (c == 0xF4)
			need = 3, hi = 0x8F;
		else
			need = 99;
		int bad = need == 99 || k + need >= len + (need ? 0 : 1);
		if (!bad && need && (u[1] < lo || u[1] > hi))
			bad = 1;
		for (size_t j = 2; !bad && j <= need; j++)
			bad = (u[j] & 0xC0) != 0x80;
		if (bad) {
			diags_add(p->d, DIAG_ERROR, p->file, (struct pos){line, col},
			          "file.encoding", "save the manifest as UTF-8",
			          "invalid UTF-8 byte 0x%02x", c);
			return TF_EMANIFEST;
		}
		if (c == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
		k += need + 1;
	}
	return 0;
}

static int load_buf(const char *name, const char *buf, size_t len, int shape, struct manifest **out,
                    struct diags *d)
{
	struct manifest *m = NULL;
	struct ynode *root = NULL;
	size_t errors_before = d->errors;
	int empty = 0;
	struct pctx p = {name, buf, len, d, NULL, shape};
	char *slash = strrchr(name, '/');
	p.dir = slash ? xstrndup(name, (size_t)(slash - name)) : xstrdup(".");

	*out = NULL;
	if (precheck(&p, buf, len) != 0)
		goto out;
	struct ytree_limits lim = {MANIFEST_MAX_NODES, MANIFEST_MAX_DEPTH};
	root = ytree_parse(name, buf, len, &lim, d, &empty);
	if (root == NULL) {
		if (empty)
			diags_add(d, DIAG_ERROR, name, (struct pos){0, 0}, "file.empty",
			          "see manifests/SCHEMA.md for the format",
			          "manifest has no content (only comments)");
		goto out;
	}
	m = xcalloc(1, sizeof(*m));
	m->path = xstrdup(name);
	m->text = xstrndup(buf, len);
	m->textlen = len;
	m->sha256 = xcalloc(1, 65);
	if (!shape)
		sha256_buf(buf, len, m->sha256);
	parse_root(&p, root, m);
out:
	ytree_free(root);
	free(p.dir);
	if (d->errors > errors_before) {
		manifest_free(m);
		return TF_EMANIFEST;
	}
	*out = m;
	return 0;
}

int manifest_load_buf(const char *name, const char *buf, size_t len, struct manifest **out,
                      struct diags *d)
{
	return load_buf(name, buf, len, 0, out, d);
}

int manifest_load_shape(const char *name, const char *buf, size_t len, struct manifest **out,
                        struct diags *d)
{
	return load_buf(name, buf, len, 1, out, d);
}

int manifest_load(const char *path, struct manifest **out, struct diags *d)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	*out = NULL;
	if (stat(path, &st) != 0) {
		diags_add(d, DIAG_ERROR, path, (struct pos){0, 0}, "file.read", NULL,
		          "cannot read manifest: %s", strerror(errno));
		return TF_EMANIFEST;
	}
	if (!S_ISREG(st.st_mode)) {
		diags_add(d, DIAG_ERROR, path, (struct pos){0, 0}, "file.read", NULL,
		          "not a regular file");
		return TF_EMANIFEST;
	}
	if ((uint64_t)st.st_size > MANIFEST_MAX_BYTES) {
		diags_add(d, DIAG_ERROR, path, (struct pos){0, 0}, "file.too-large",
		          "a manifest is a few kilobytes; is this the right file?",
		          "file is %lld bytes, larger than the %u-byte limit",
		          (long long)st.st_size, MANIFEST_MAX_BYTES);
		return TF_EMANIFEST;
	}
	int rc = read_file_at(AT_FDCWD, path, MANIFEST_MAX_BYTES, &buf, &len);
	if (rc != 0) {
		diags_add(d, DIAG_ERROR, path, (struct pos){0, 0}, "file.read", NULL,
		          "cannot read manifest: %s", strerror(-rc));
		return TF_EMANIFEST;
	}
	rc = manifest_load_buf(path, buf, len, out, d);
	free(buf);
	return rc;
}
