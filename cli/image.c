/*
 * image.c - `tfprov image build MANIFEST --base BASE -o OUT`: the stack as a
 * reproducible OCI image, without a daemon and without root; `tfprov image
 * inspect IMAGE [OTHER]` (image_inspect.c): its layers, the step each holds,
 * and which it shares with another image.
 *
 * A build is an apply into a private root, then that root cut into layers:
 *  1. The manifest is loaded, linted and signature-checked exactly as
 *     `apply` does (same functions, same exit codes); the base is read and
 *     checked against the stack's platform before anything is fetched.
 *  2. plan_apply places the stack into <OUT>.tfprov-image-XXXXXX/root
 *     (fetch and verify through the one cache, the same paths, tfprov's
 *     state under the root's /var/lib/tfprov), with the GPU checks of the
 *     build host skipped: the image runs on another machine's driver.
 *  3. The root is made independent of the build: a venv records its host
 *     path (pyvenv.cfg, activate, script shebangs) and every .pyc names its
 *     source; those are rewritten to the in-image paths (.pyc files compiled
 *     again by the env's interpreter, hash-checked so their bytes do not
 *     depend on a source mtime), their new hashes recorded; every entry's
 *     mtime is set to the epoch (SOURCE_DATE_EPOCH, else 1) and the state
 *     sealed (state_image_seal) so `tfprov verify` inside the image passes.
 *  4. A driver library (libcuda.so*, libnvidia-ml.so*) anywhere in the root
 *     is refused: the NVIDIA Container Toolkit injects the host's, and an
 *     image that holds one fails to start.
 *  5. One layer per step, by the step that recorded each file: cuda,
 *     cudnn, the python env, the pip wheels (the nvidia-* CUDA wheels in a
 *     layer of their own), then a config layer (the env step's scripts and
 *     the state). engine/image writes each as a deterministic tar, so the
 *     same CUDA gives the same CUDA layer in every image.
 *  6. The config carries the environment `tfprov run` gives (stackenv) and
 *     the NVIDIA Container Toolkit's variables; the layout is written into
 *     the temporary directory and renamed to OUT (a directory, or with a
 *     .tar name a docker-archive), so a failed build leaves no OUT.
 *
 * 2-5 are skipped when the image cache (image_cache.c) holds the layers of
 * a build with the same inputs: the steps' preconditions still run (the
 * same refusals, the same exit codes), the cached layers are copied into
 * the layout, each hashed against its digest (one that does not match makes
 * the build a miss: 2-5 run), and checked as 4 and the interpreter check
 * check a built root; 6 then runs as for a built image. A build stores its
 * layers there after 5. The base's checks are image_base.c's.
 */
#include "image_int.h"

#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "kb.h"
#include "spawn.h"
#include "stackenv.h"
#include "state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TFPROV_VERSION
#define TFPROV_VERSION "unknown"
#endif

/* The layers a stack's image gets above its base, in this order. */
enum layer_kind { L_CUDA, L_CUDNN, L_PYENV, L_PIP_NVIDIA, L_PIP, L_CONFIG, L_N };
static const char *const layer_names[L_N] = {"cuda",       "cudnn", "python-env",
                                             "pip-nvidia", "pip",   "config"};

/* Paths under the root that belong to the build, not to the image. */
static const char *const build_only[] = {"var/lib/tfprov/lock", "var/lib/tfprov/state.db-wal",
                                         "var/lib/tfprov/state.db-shm", "var/cache/tfprov",
                                         "var/lib/tfprov/inuse"};

struct recorded {
	char *path; /* relative to the root, no leading '/' */
	int layer;
	char type;
	int64_t res_id;
};

struct build {
	struct ctx *c;
	const struct manifest *m;
	char *tmp;   /* <OUT>.tfprov-image-XXXXXX */
	char *stage; /* tmp/root: the private root */
	int64_t epoch;
	struct recorded *rec; /* sorted by path */
	size_t nrec, caprec;
	struct strvec layer_paths[L_N];
	struct strvec changed; /* root-relative paths rewritten by relocate */
	struct strvec pycs;    /* "pyc\tsource\tdfile" lines per env, see recompile */
	struct strvec venvs;   /* root-relative venv dirs (a pyvenv.cfg in them) */
	struct strvec pythons; /* the interpreter each venv links to, check_interpreters */
	char *driver_lib;      /* the first driver library found, if any */
	struct why why;        /* the build's own failure */
	/* image_build's stages: what they build and image_build releases */
	char *layout, *scratch, *blobs; /* tmp/layout, tmp/scratch, tmp/layout/blobs */
	struct oci_image base;
	struct state_writer *wl; /* the private root's state lock while it is applied */
	char *holder;
	struct plan p;
	int planned;
	struct oci_desc *ls; /* the stack's layers: nl of them, of kinds[] */
	int kinds[L_N];
	size_t nl;
	struct why err; /* engine/image's failure */
	struct image_cache ic;
	const char *cached; /* the image event's "cache": "hit", "miss" or "off" */
};

static int64_t image_epoch(void)
{
	const char *s = getenv("SOURCE_DATE_EPOCH");
	char *end = NULL;
	long long v = s && s[0] ? strtoll(s, &end, 10) : 1;
	if (s && s[0] && (end == NULL || *end != '\0' || v < 0))
		v = 1;
	return (int64_t)v;
}

/* t as "1970-01-01T00:00:01Z" (0 too: cli_time would say "never"). */
static void rfc3339(int64_t t, char out[32])
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int layer_of_kind(const char *kind, const char *path)
{
	if (strcmp(kind, "cuda") == 0)
		return L_CUDA;
	if (strcmp(kind, "cudnn") == 0)
		return L_CUDNN;
	if (strcmp(kind, "pyenv") == 0)
		return L_PYENV;
	if (strcmp(kind, "pip") == 0)
		return strstr(path, "/site-packages/nvidia/") ||
		               strstr(path, "/site-packages/nvidia_")
		           ? L_PIP_NVIDIA
		           : L_PIP;
	return L_CONFIG;
}

struct rec_arg {
	struct build *b;
	const char *kind;
};

static int rec_cb(const struct state_file *f, void *arg)
{
	struct rec_arg *a = arg;
	struct build *b = a->b;
	if (b->nrec == b->caprec) {
		b->caprec = b->caprec ? 2 * b->caprec : 1024;
		b->rec = xrealloc(b->rec, b->caprec * sizeof(*b->rec));
	}
	const char *p = f->path[0] == '/' ? f->path + 1 : f->path;
	b->rec[b->nrec++] =
	    (struct recorded){xstrdup(p), layer_of_kind(a->kind, p), f->type, f->resource_id};
	return 0;
}

static int cmp_rec(const void *x, const void *y)
{
	return strcmp(((const struct recorded *)x)->path, ((const struct recorded *)y)->path);
}

static const struct recorded *find_rec(const struct build *b, const char *rel)
{
	struct recorded key = {(char *)rel, 0, 0, 0};
	return b->nrec ? bsearch(&key, b->rec, b->nrec, sizeof(*b->rec), cmp_rec) : NULL;
}

/* Every file the stack's steps recorded, with the layer of its step. */
static int load_records(struct build *b, int64_t sid)
{
	struct state_resource *v = NULL;
	size_t n = 0;
	int rc = state_resources_list(b->c->st, sid, &v, &n);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct rec_arg a = {b, v[i].kind};
		rc = state_files_foreach(b->c->st, v[i].id, rec_cb, &a);
	}
	state_resources_free(v, n);
	if (b->nrec)
		qsort(b->rec, b->nrec, sizeof(*b->rec), cmp_rec);
	return rc;
}

static int is_build_only(const char *rel)
{
	for (size_t i = 0; i < ARRAY_SIZE(build_only); i++) {
		size_t l = strlen(build_only[i]);
		if (strncmp(rel, build_only[i], l) == 0 && (rel[l] == '\0' || rel[l] == '/'))
			return 1;
	}
	return 0;
}

static int is_driver_lib(const char *rel)
{
	const char *base = strrchr(rel, '/');
	base = base ? base + 1 : rel;
	return str_starts_with(base, "libcuda.so") || str_starts_with(base, "libnvidia-ml.so");
}

/* The layer of an entry no step recorded: its nearest recorded ancestor's, else config. */
static int layer_of_unrecorded(const struct build *b, const char *rel)
{
	char *p = xstrdup(rel);
	int layer = L_CONFIG;
	for (char *s = strrchr(p, '/'); s != NULL; s = strrchr(p, '/')) {
		*s = '\0';
		const struct recorded *r = find_rec(b, p);
		if (r) {
			layer = r->layer;
			break;
		}
	}
	free(p);
	/*
	 * The pip step records its packages by their own RECORD files, not file
	 * by file: what is in site-packages beyond the env's own is the wheels'.
	 */
	if (layer == L_PYENV && strstr(rel, "/site-packages/"))
		layer = layer_of_kind("pip", rel);
	return layer;
}

/*
 * The native installer (wheel.c) writes a script's interpreter as a /bin/sh
 * trampoline when its shebang would be too long (distlib's rule: more than
 * 127 bytes, or a space in it): a private root deep in the file system makes
 * one where the in-image path would not. Relocated, it becomes the shebang
 * that path gets, so the layer does not depend on where OUT is.
 */
static void untrampoline(struct strbuf *sb)
{
	static const char head[] = "#!/bin/sh\n'''exec' ", tail[] = " \"$0\" \"$@\"\n' '''\n";
	if (sb->len < sizeof(head) || memcmp(sb->buf, head, sizeof(head) - 1) != 0)
		return;
	const char *exe = sb->buf + sizeof(head) - 1, *t = strstr(exe, tail);
	size_t el = t ? (size_t)(t - exe) : 0;
	if (t == NULL || el + 3 > 127 || memchr(exe, ' ', el) || memchr(exe, '\n', el))
		return;
	struct strbuf out = STRBUF_INIT;
	strbuf_adds(&out, "#!");
	strbuf_add(&out, exe, el);
	strbuf_adds(&out, "\n");
	t += sizeof(tail) - 1;
	strbuf_add(&out, t, sb->len - (size_t)(t - sb->buf));
	strbuf_release(sb);
	*sb = out;
}

/*
 * Rewrites a file that names the private root (a venv's pyvenv.cfg,
 * activate scripts, shebangs): every "<stage>/" becomes "/". A .pyc is
 * left to recompile. 0 or TF_EIO.
 */
static int relocate_file(struct build *b, const char *rel, const char *host, const struct stat *st)
{
	char *text = NULL, *hit;
	size_t len = 0, sl = strlen(b->stage);
	int rc = 0;
	if (str_ends_with(rel, ".pyc") || st->st_size > (8 << 20))
		return 0;
	if (read_file_at(AT_FDCWD, host, 8 << 20, &text, &len) != 0) {
		return why_fail(&b->why, TF_EIO, "%s: %s", host, strerror(errno));
	}
	if (len == 0 || memmem(text, len, b->stage, sl) == NULL)
		goto out;
	struct strbuf sb = STRBUF_INIT;
	const char *p = text, *end = text + len;
	while ((hit = memmem(p, (size_t)(end - p), b->stage, sl)) != NULL) {
		strbuf_add(&sb, p, (size_t)(hit - p));
		p = hit + sl;
		if (p < end && *p != '/')
			strbuf_add(&sb, "/", 1); /* "<stage>" alone is the root */
	}
	strbuf_add(&sb, p, (size_t)(end - p));
	untrampoline(&sb);
	if (fs_write_atomic(host, sb.buf, sb.len, st->st_mode & 07777, 0) != 0) {
		rc = why_fail(&b->why, errno == ENOSPC ? TF_ENOSPC : TF_EIO,
		              "%s: cannot rewrite: %s", host, strerror(errno));
	} else {
		strvec_push(&b->changed, rel);
	}
	strbuf_release(&sb);
out:
	free(text);
	return rc;
}

static int walk_cb(void *ud, const char *rel, const char *host, const struct stat *st)
{
	struct build *b = ud;
	if (is_build_only(rel))
		return 0;
	if (is_driver_lib(rel) && b->driver_lib == NULL)
		b->driver_lib = xasprintf("/%s", rel);
	if (S_ISREG(st->st_mode)) {
		const char *slash = strrchr(rel, '/');
		if (slash && strcmp(slash, "/pyvenv.cfg") == 0) {
			char *dir = xstrndup(rel, (size_t)(slash - rel));
			strvec_push(&b->venvs, dir);
			free(dir);
		}
		if (str_ends_with(rel, ".pyc") && strstr(rel, "/__pycache__/"))
			strvec_push(&b->pycs, rel);
		return relocate_file(b, rel, host, st);
	}
	return 0;
}

/*
 * The .pyc files compiled again, each naming its source at its in-image
 * path, hash-checked (PEP 552) so that the bytes do not depend on a source
 * mtime, by the interpreter of the env that holds them (its cache tag).
 */
static const char recompile_src[] =
    "import base64, csv, glob, hashlib, importlib.util, io, os, py_compile, sys\n"
    "stage, env = sys.argv[1], sys.argv[2]\n"
    "done = set()\n"
    "for line in sys.stdin:\n"
    "    op, rel = line.rstrip('\\n').split(' ', 1)\n"
    "    pyc = stage + '/' + rel\n"
    "    if op == 'H':\n"
    "        done.add(pyc)  # rewritten already (relocate_file): its RECORD row only\n"
    "        continue\n"
    "    try:\n"
    "        src = importlib.util.source_from_cache(pyc)\n"
    "    except ValueError:\n"
    "        continue\n"
    "    try:\n"
    "        py_compile.compile(src, cfile=pyc, dfile=src[len(stage):], doraise=True,\n"
    "            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)\n"
    "    except (OSError, py_compile.PyCompileError):\n"
    "        continue\n"
    "    done.add(pyc)\n"
    "    print(rel)\n"
    "# The RECORD rows of the files changed: their new hash and size.\n"
    "for site in sorted(glob.glob(stage + '/' + env + '/lib/python*/site-packages/')):\n"
    "    for rec in sorted(glob.glob(site + '*.dist-info/RECORD')):\n"
    "        with open(rec, newline='') as f:\n"
    "            lines = f.read().splitlines(True)\n"
    "        changed = False\n"
    "        for i, l in enumerate(lines):\n"
    "            row = next(csv.reader([l]), [])\n"
    "            if len(row) != 3:\n"
    "                continue\n"
    "            p = os.path.normpath(os.path.join(site, row[0]))\n"
    "            if p not in done:\n"
    "                continue\n"
    "            data = open(p, 'rb').read()\n"
    "            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=')\n"
    "            out = io.StringIO()\n"
    "            csv.writer(out, lineterminator='\\n').writerow(\n"
    "                [row[0], 'sha256=' + h.decode(), str(len(data))])\n"
    "            if out.getvalue() != l:\n"
    "                lines[i] = out.getvalue()\n"
    "                changed = True\n"
    "        if changed:\n"
    "            st = os.stat(rec)\n"
    "            with open(rec + '.tfprov-new', 'w', newline='') as f:\n"
    "                f.write(''.join(lines))\n"
    "            os.chmod(rec + '.tfprov-new', st.st_mode & 0o7777)\n"
    "            os.replace(rec + '.tfprov-new', rec)\n"
    "            print(rec[len(stage) + 1:])\n";

static int recompile(struct build *b)
{
	struct strvec envs = STRVEC_INIT;
	int rc = 0;
	/* The env of a .pyc: the part of its path before /lib/pythonX.Y/. */
	for (size_t i = 0; i < b->pycs.n; i++) {
		const char *l = strstr(b->pycs.v[i], "/lib/python");
		char *env = l ? xstrndup(b->pycs.v[i], (size_t)(l - b->pycs.v[i])) : NULL;
		int seen = env == NULL;
		for (size_t k = 0; !seen && k < envs.n; k++)
			seen = strcmp(envs.v[k], env) == 0;
		if (!seen)
			strvec_push(&envs, env);
		free(env);
	}
	for (size_t k = 0; rc == 0 && k < envs.n; k++) {
		char *py = xasprintf("%s/%s/bin/python", b->stage, envs.v[k]);
		char *list = xasprintf("%s/pyc-list", b->tmp);
		struct strbuf sb = STRBUF_INIT;
		size_t el = strlen(envs.v[k]), nchanged = b->changed.n;
		for (size_t i = 0; i < b->pycs.n; i++)
			if (str_starts_with(b->pycs.v[i], envs.v[k]) && b->pycs.v[i][el] == '/')
				strbuf_addf(&sb, "C %s\n", b->pycs.v[i]);
		for (size_t i = 0; i < nchanged; i++)
			if (str_starts_with(b->changed.v[i], envs.v[k]) &&
			    b->changed.v[i][el] == '/')
				strbuf_addf(&sb, "H %s\n", b->changed.v[i]);
		struct strvec env = STRVEC_INIT;
		spawn_env_base(&env);
		spawn_env_set(&env, "SOURCE_DATE_EPOCH", "1");
		char *argv[] = {py, "-I", "-c", (char *)recompile_src, b->stage, envs.v[k], NULL};
		struct spawn_opts so = {.argv = argv,
		                        .envp = env.v,
		                        .stdin_path = list,
		                        .max_output = 64u << 20,
		                        .timeout_s = 1800};
		struct spawn_result r = {0};
		if (access(py, X_OK) != 0) {
			/* No interpreter to compile with: the .pyc stay as the step made them. */
			ev_log(b->c, EV_WARN,
			       "%s: no interpreter; its .pyc files are not rewritten", envs.v[k]);
		} else if (fs_write_atomic(list, sb.buf ? sb.buf : "", sb.len, 0600, 0) != 0) {
			rc = why_fail(&b->why, TF_EIO, "%s: cannot write", list);
		} else if (spawn_run(&so, &r) != 0 || r.status != 0) {
			rc = why_fail(&b->why, TF_EFAIL,
			              "%s could not compile the env's .pyc files: %s", py,
			              r.why.msg   ? r.why.msg
			              : r.err.buf ? r.err.buf
			                          : "");
		} else {
			for (char *s = r.out.buf, *nl; s && *s; s = nl + 1) {
				nl = strchr(s, '\n');
				if (nl == NULL)
					break;
				*nl = '\0';
				strvec_push(&b->changed, s);
			}
		}
		spawn_result_release(&r);
		strvec_release(&env);
		strbuf_release(&sb);
		unlink(list);
		free(list);
		free(py);
	}
	strvec_release(&envs);
	return rc;
}

/* The new hash and size of each rewritten file that a step recorded. */
static int rerecord(struct build *b)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < b->changed.n; i++) {
		const struct recorded *r = find_rec(b, b->changed.v[i]);
		if (r == NULL || r->type != 'f')
			continue;
		char *host = path_join(b->stage, r->path);
		struct stat st;
		struct state_file f = {0};
		f.path = xasprintf("/%s", r->path);
		f.type = 'f';
		rc =
		    sha256_file(host, f.sha256, &f.size) == 0 && lstat(host, &st) == 0 ? 0 : TF_EIO;
		f.mode = st.st_mode & 07777;
		f.mtime_ns = b->epoch * 1000000000LL;
		if (rc == 0)
			rc = state_file_put(b->c->st, r->res_id, &f);
		else
			why_fail(&b->why, rc, "%s: %s", host, strerror(errno));
		free(f.path);
		free(host);
	}
	return rc;
}

/* Each step's restamp hook (module.h) over its recorded attrs, written back. */
static int restamp(struct build *b, int64_t sid)
{
	struct state_resource *v = NULL;
	size_t n = 0;
	int rc = state_resources_list(b->c->st, sid, &v, &n);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char *attrs = NULL;
		rc = module_restamp(b->c, v[i].kind, sid, v[i].attrs, &attrs);
		if (rc == 0 && attrs &&
		    state_resource_put(b->c->st, sid, v[i].addr, v[i].kind, v[i].desired, attrs) ==
		        0)
			rc = TF_ESTATE;
		if (rc != 0)
			why_first(&b->why, rc, "cannot record the %s step's files again",
			          v[i].addr);
		free(attrs);
	}
	state_resources_free(v, n);
	return rc;
}

/* Every entry's mtime set to the epoch (links themselves, not their targets). */
static int stamp_cb(void *ud, const char *rel, const char *host, const struct stat *st)
{
	struct build *b = ud;
	(void)st;
	if (is_build_only(rel))
		return 0;
	struct timespec ts[2] = {{(time_t)b->epoch, 0}, {(time_t)b->epoch, 0}};
	if (utimensat(AT_FDCWD, host, ts, AT_SYMLINK_NOFOLLOW) != 0) {
		return why_fail(&b->why, TF_EIO, "%s: %s", host, strerror(errno));
	}
	return 0;
}

/* Each entry of the root into its layer's list (directories only when empty or recorded). */
static int sort_cb(void *ud, const char *rel, const char *host, const struct stat *st)
{
	struct build *b = ud;
	(void)host;
	if (is_build_only(rel))
		return 0;
	const struct recorded *r = find_rec(b, rel);
	int layer = r ? r->layer : layer_of_unrecorded(b, rel);
	if (S_ISDIR(st->st_mode) && r == NULL) {
		/* Parents come with their children; an empty directory on its own. */
		DIR *d = opendir(host);
		struct dirent *e;
		int empty = 1;
		while (d && (e = readdir(d)) != NULL)
			if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
				empty = 0;
		if (d)
			closedir(d);
		if (!empty)
			return 0;
	}
	strvec_push(&b->layer_paths[layer], rel);
	return 0;
}

/* base's Env with the stack's environment entered, as `tfprov run` enters it. */
static json_t *image_env(const struct build *b, json_t *base_env, const char *require)
{
	struct strvec env = STRVEC_INIT;
	struct stackenv se = {0};
	json_t *v, *out = json_array();
	size_t i;
	json_array_foreach(base_env, i, v) if (json_string_value(v))
	    strvec_push(&env, json_string_value(v));
	if (spawn_env_get(&env, "PATH") == NULL)
		strvec_push(&env,
		            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	stackenv_build(b->m, b->m->stack.name.s, NULL, &se);
	stackenv_enter(&se, &env);
	spawn_env_set(&env, "NVIDIA_VISIBLE_DEVICES", "all");
	spawn_env_set(&env, "NVIDIA_DRIVER_CAPABILITIES", "compute,utility");
	if (require)
		spawn_env_set(&env, "NVIDIA_REQUIRE_CUDA", require);
	for (i = 0; i < env.n; i++)
		json_array_append_new(out, json_string(env.v[i]));
	stackenv_release(&se);
	strvec_release(&env);
	return out;
}

/* "cuda>=12.3 driver>=545.23" from the knowledge base, or NULL (no CUDA). */
static char *require_cuda(struct ctx *c, const struct manifest *m)
{
	struct compat *kb = NULL;
	struct diags d = {0};
	char *out = NULL;
	const char *cuda = m->versions.cuda.s;
	if (cuda == NULL || compat_load(compat_default_path(), &kb, &d) != 0) {
		if (cuda)
			ev_log(c, EV_WARN,
			       "no knowledge base (%s): NVIDIA_REQUIRE_CUDA has no "
			       "driver floor",
			       compat_default_path());
		diags_release(&d);
		if (cuda == NULL)
			return NULL;
	}
	int major = 0, minor = 0;
	sscanf(cuda, "%d.%d", &major, &minor);
	const char *drv = kb ? compat_cuda_min_driver(kb, cuda, 0) : NULL;
	if (drv)
		out = xasprintf("cuda>=%d.%d driver>=%s", major, minor, drv);
	else
		out = xasprintf("cuda>=%d.%d", major, minor);
	compat_free(kb);
	diags_release(&d);
	return out;
}

/*
 * A venv links to the interpreter it was made from (bin/python): the first
 * absolute target of each venv's bin/python into b->pythons ("" for a real
 * file: the env carries its interpreter), then checked against the base.
 * 0, TF_EPRECOND (said) or TF_EFAIL.
 */
static int check_interpreters(struct build *b, const struct oci_image *base, const char *blobs,
                              const char *ref)
{
	for (size_t i = 0; i < b->venvs.n; i++) {
		/* bin/python -> python3 -> /usr/bin/python3: the first absolute target. */
		char *py = xasprintf("%s/%s/bin/python", b->stage, b->venvs.v[i]), target[4096];
		const char *abs = "";
		for (int hop = 0; hop < 8; hop++) {
			ssize_t k = readlink(py, target, sizeof(target) - 1);
			if (k <= 0)
				break;
			target[k] = '\0';
			if (target[0] == '/') {
				abs = target;
				break;
			}
			char *dir = xstrdup(py), *slash = strrchr(dir, '/');
			*slash = '\0';
			free(py);
			py = xasprintf("%s/%s", dir, target);
			free(dir);
		}
		strvec_push(&b->pythons, abs);
		free(py);
	}
	return check_base_interpreters(b->c, &b->venvs, &b->pythons, base, blobs, ref);
}

/* The config: the base's with the stack's env, labels, layers and history. */
static json_t *image_config(struct build *b, const struct oci_image *base,
                            const struct oci_desc *ls, const int *kinds, size_t n, json_t *labels,
                            const char *require)
{
	json_t *cfg = json_deep_copy(base->config);
	json_t *inner = json_object_get(cfg, "config");
	char created[32];
	rfc3339(b->epoch, created);
	if (!json_is_object(inner)) {
		inner = json_object();
		json_object_set_new(cfg, "config", inner);
	}
	json_object_set_new(inner, "Env", image_env(b, json_object_get(inner, "Env"), require));
	json_t *lab = json_object_get(inner, "Labels");
	if (!json_is_object(lab)) {
		lab = json_object();
		json_object_set_new(inner, "Labels", lab);
	}
	json_object_update(lab, labels);
	json_object_set_new(cfg, "created", json_string(created));
	json_t *rootfs = json_object_get(cfg, "rootfs");
	if (!json_is_object(rootfs)) {
		rootfs = json_object();
		json_object_set_new(rootfs, "type", json_string("layers"));
		json_object_set_new(rootfs, "diff_ids", json_array());
		json_object_set_new(cfg, "rootfs", rootfs);
	}
	json_t *diff = json_object_get(rootfs, "diff_ids");
	json_t *hist = json_object_get(cfg, "history");
	if (!json_is_array(hist)) {
		hist = json_array();
		json_object_set_new(cfg, "history", hist);
	}
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(diff, json_string(ls[i].digest));
		json_array_append_new(hist,
		                      json_pack("{s:s,s:s,s:s}", "created", created, "created_by",
		                                layer_names[kinds[i]], "comment",
		                                "tfprov image build: one layer per step"));
	}
	return cfg;
}

/* Replaces (with --force) or creates dst from src. 0, TF_EFAIL (exists) or TF_EIO. */
static int install_out(struct ctx *c, const char *src, const char *dst, int force, const char *tmp)
{
	struct stat st;
	char *old = NULL;
	int rc = 0;
	if (lstat(dst, &st) == 0) {
		if (!force) {
			ev_log(c, EV_ERROR, "%s exists (--force replaces it)", dst);
			return TF_EFAIL;
		}
		old = path_join(tmp, "old-out");
		if (rename(dst, old) != 0) {
			ev_log(c, EV_ERROR, "%s: cannot replace: %s", dst, strerror(errno));
			free(old);
			return TF_EIO;
		}
	}
	if (rename(src, dst) != 0) {
		ev_log(c, EV_ERROR, "%s: %s", dst, strerror(errno));
		rc = TF_EIO;
		if (old)
			rename(old, dst);
	}
	free(old);
	return rc;
}

static void build_release(struct build *b)
{
	for (size_t i = 0; i < b->nrec; i++)
		free(b->rec[i].path);
	free(b->rec);
	for (int i = 0; i < L_N; i++)
		strvec_release(&b->layer_paths[i]);
	strvec_release(&b->changed);
	strvec_release(&b->pycs);
	strvec_release(&b->venvs);
	strvec_release(&b->pythons);
	image_cache_release(&b->ic);
	free(b->driver_lib);
	why_clear(&b->why);
}

/* The temporary sibling of out: <dir>/.<name>.tfprov-image-XXXXXX. */
static char *make_tmp(const char *out)
{
	char *dir = xstrdup(out), *slash = strrchr(dir, '/');
	const char *name = slash ? slash + 1 : out;
	char *t;
	if (slash)
		*slash = '\0';
	t = xasprintf("%s/.%s.tfprov-image-XXXXXX", slash ? (dir[0] ? dir : "/") : ".", name);
	free(dir);
	if (mkdtemp(t) == NULL) {
		free(t);
		return NULL;
	}
	return t;
}

/* 1. What apply checks, with apply's functions and exit codes; then the
 * temporary directory beside out, and the base read and checked. */
static int build_prepare(struct build *b, const char *base, const char *out)
{
	struct ctx *c = b->c;
	int rc;
	b->tmp = make_tmp(out);
	if (b->tmp == NULL) {
		ev_log(c, EV_ERROR, "cannot create a directory beside %s: %s", out,
		       strerror(errno));
		return errno == ENOSPC ? TF_ENOSPC : TF_EIO;
	}
	b->stage = path_join(b->tmp, "root");
	b->layout = path_join(b->tmp, "layout");
	b->scratch = path_join(b->tmp, "scratch");
	b->blobs = path_join(b->layout, "blobs");
	if (mkdir(b->stage, 0755) != 0 || mkdir(b->layout, 0755) != 0 ||
	    mkdir(b->scratch, 0755) != 0) {
		ev_log(c, EV_ERROR, "%s: %s", b->tmp, strerror(errno));
		return errno == ENOSPC ? TF_ENOSPC : TF_EIO;
	}
	rc = oci_image_read(base, b->scratch, b->blobs, &b->base, &b->err);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "base %s: %s", base, why_text(&b->err));
		return rc;
	}
	rc = check_base(c, b->m, &b->base, base);
	if (rc == 0)
		rc = check_base_glibc(c, b->m, &b->base, b->blobs, base);
	return rc;
}

/* 2. The stack planned for the private root, under its own state lock. */
static int build_plan(struct build *b, struct manifest *m, const char *base)
{
	struct ctx *c = b->c;
	int rc;
	free(c->root);
	c->root = xstrdup(b->stage);
	if (c->rootfd >= 0)
		close(c->rootfd);
	c->rootfd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(c->state_dir);
	c->state_dir = ctx_host_dir(c, "/var/lib/tfprov");
	if (mkdirs_at(AT_FDCWD, c->state_dir, 0755) != 0 ||
	    state_writer_lock(c->state_dir, 0, &b->wl, &b->holder) != 0) {
		ev_log(c, EV_ERROR, "%s: cannot take the state lock", c->state_dir);
		return TF_EIO;
	}
	c->wlock = b->wl;
	ev_log(c, EV_INFO, "Stack %s (%s) from %s into an image on %s:\n", m->stack.name.s,
	       platform_name(m->stack.platform), m->path, base);
	rc = plan_build(c, m, &b->p);
	b->planned = 1;
	return rc;
}

/* The manifest goes with the image, where its state says it is; the state is
 * sealed, and the bill of materials written beside the manifest: the bytes
 * `tfprov sbom` gives inside the image. */
static int build_keep_manifest(struct build *b)
{
	struct ctx *c = b->c;
	const struct manifest *m = b->m;
	int rc = 0;
	char *mpath = xasprintf("%s/stacks/%s/manifest.yaml",
	                        m->prefix.s ? m->prefix.s : "/opt/tfprov", m->stack.name.s);
	char *mhost = ctx_host_path(c, mpath), *mtext = NULL;
	size_t mlen = 0;
	if (read_file_at(AT_FDCWD, m->path, 16 << 20, &mtext, &mlen) != 0 ||
	    fs_write_atomic(mhost, mtext, mlen, 0644, 0) != 0) {
		rc = why_fail(&b->why, TF_EIO, "%s: cannot copy the manifest: %s", mhost,
		              strerror(errno));
	}
	if (rc == 0)
		rc = state_image_seal(c->st, b->epoch, mpath);
	char *spath = xasprintf("%s/stacks/%s/sbom.cdx.json",
	                        m->prefix.s ? m->prefix.s : "/opt/tfprov", m->stack.name.s);
	char *shost = ctx_host_path(c, spath);
	if (rc == 0)
		rc = cli_sbom_write(c, m->stack.name.s, b->epoch, shost);
	free(shost);
	free(spath);
	free(mtext);
	free(mhost);
	free(mpath);
	return rc;
}

/* 4. A driver library in the stack: said, TF_EPRECOND. */
static int refuse_driver_lib(struct ctx *c, const char *path)
{
	ev_log(c, EV_ERROR,
	       "the stack places %s: a driver library never goes into an image (the NVIDIA "
	       "Container Toolkit mounts the host's; an image holding one fails to start with "
	       "\"file exists\")",
	       path);
	return TF_EPRECOND;
}

/* 3. The root made independent of this build (4: no driver library in it);
 * the state closed and unlocked. */
static int build_detach(struct build *b, const char *base)
{
	struct ctx *c = b->c;
	int64_t sid = state_stack_id(c->st, b->m->stack.name.s);
	int rc = load_records(b, sid);
	if (rc == 0)
		rc = fs_walk(b->stage, walk_cb, b);
	if (rc == 0 && b->driver_lib)
		return refuse_driver_lib(c, b->driver_lib); /* 4. */
	if (rc == 0)
		rc = check_interpreters(b, &b->base, b->blobs, base);
	if (rc == TF_EPRECOND)
		return rc;
	if (rc == 0)
		rc = recompile(b);
	if (rc == 0)
		rc = rerecord(b);
	/* The times as the image will have them, then what the steps recorded about
	 * the rewritten files (the pip step's stamps) taken again from the disk. */
	if (rc == 0)
		rc = fs_walk(b->stage, stamp_cb, b);
	if (rc == 0)
		rc = restamp(b, sid);
	if (rc == 0)
		rc = build_keep_manifest(b);
	state_close(c->st);
	c->st = NULL;
	state_writer_unlock(b->wl, 0);
	c->wlock = b->wl = NULL;
	if (rc == 0)
		rc = fs_walk(b->stage, stamp_cb, b);
	if (rc != 0 && b->why.msg)
		ev_log(c, EV_ERROR, "%s", b->why.msg);
	return rc;
}

/* 5. One layer per step. */
static int build_layers(struct build *b)
{
	struct ctx *c = b->c;
	int rc = fs_walk(b->stage, sort_cb, b);
	b->ls = xcalloc(L_N, sizeof(*b->ls));
	for (int k = 0; rc == 0 && k < L_N; k++) {
		if (b->layer_paths[k].n == 0)
			continue;
		struct oci_desc *l = &b->ls[b->nl];
		rc = oci_layer_write(b->stage, b->layer_paths[k].v, b->layer_paths[k].n, b->epoch,
		                     b->blobs, l, &b->err);
		if (rc == 0) {
			ev_log(c, EV_INFO, "  layer %-10s %s  %lld bytes, %zu entries",
			       layer_names[k], l->digest, (long long)l->size, b->layer_paths[k].n);
			b->kinds[b->nl++] = k;
		} else {
			ev_log(c, EV_ERROR, "layer %s: %s", layer_names[k], why_text(&b->err));
		}
	}
	return rc;
}

/*
 * 2-5 from the image cache (image_cache.c): when an entry of this build's
 * key exists, the steps' preconditions run as plan_apply runs them (the
 * same refusals and exit codes), its layers are copied into the layout,
 * each hashed against its digest, and checked as a build checks its root
 * (4: no driver library; the venvs' interpreters in the base). *hit is 1
 * when the layers came from there; a blob that is missing or does not match
 * is a miss: the plan is built again for the build that follows.
 */
static int build_from_cache(struct build *b, struct manifest *m, struct opts *o, const char *out,
                            int *hit)
{
	struct ctx *c = b->c;
	struct image_entry e = {0};
	char *drv = NULL;
	int rc;
	*hit = 0;
	image_cache_key(c, m, &b->p, &b->base, b->epoch, o->no_cache, &b->ic);
	b->cached = b->ic.off.code ? "off" : "miss";
	if (b->ic.off.code) {
		ev_log(c, EV_DEBUG, "image cache: not used (%s)", why_text(&b->ic.off));
		return 0;
	}
	ev_log(c, EV_DEBUG, "image cache: key %s", b->ic.key);
	if (!image_cache_lookup(c, &b->ic, layer_names, L_N, &e))
		return 0;
	rc = plan_precheck(c, m, &b->p);
	if (rc == 0)
		rc = image_cache_take(c, &b->ic, &e, b->blobs, str_ends_with(out, ".tar"),
		                      layer_names);
	if (rc == 1) {
		/* Built instead: the preconditions run again on a fresh plan. */
		plan_release(&b->p);
		rc = plan_build(c, m, &b->p);
		image_entry_release(&e);
		return rc;
	}
	if (rc == 0)
		rc = oci_layers_find(e.ls, e.n, b->blobs, is_driver_lib, &drv, &b->err);
	if (rc != 0 && rc != TF_EPRECOND)
		ev_log(c, EV_ERROR, "%s", why_text(&b->err));
	if (rc == 0 && drv)
		rc = refuse_driver_lib(c, drv);
	if (rc == 0)
		rc = check_base_interpreters(c, &e.venvs, &e.pythons, &b->base, b->blobs, o->base);
	if (rc == 0) {
		ev_log(c, EV_INFO, "  the stack's layers from the image cache (%s): no apply",
		       b->ic.entry);
		b->ls = e.ls;
		b->nl = e.n;
		e.ls = NULL;
		for (size_t i = 0; i < b->nl; i++) {
			b->kinds[i] = e.kinds[i];
			ev_log(c, EV_INFO, "  layer %-10s %s  %lld bytes, from the cache",
			       layer_names[b->kinds[i]], b->ls[i].digest, (long long)b->ls[i].size);
		}
		b->cached = "hit";
		*hit = 1;
	}
	free(drv);
	image_entry_release(&e);
	return rc;
}

/* 2-5 as a build: the apply, the root detached, the layers, stored in the cache. */
static int build_full(struct build *b, struct manifest *m, const char *base)
{
	struct why w = {0};
	int rc = cli_say_why(b->c, plan_apply(b->c, m, &b->p, &w), &w);
	if (rc == 0)
		rc = build_detach(b, base);
	if (rc == 0)
		rc = build_layers(b);
	if (rc == 0 && b->ic.off.code == 0) {
		struct image_entry e = {.ls = b->ls,
		                        .kinds = b->kinds,
		                        .n = b->nl,
		                        .venvs = b->venvs,
		                        .pythons = b->pythons};
		image_cache_store(b->c, &b->ic, &e, b->blobs, layer_names);
	}
	return rc;
}

/* The image's labels (OCI annotations): title, created, description, version. */
static json_t *build_labels(const struct build *b)
{
	const struct manifest *m = b->m;
	json_t *labels = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s}", "org.opencontainers.image.title", m->stack.name.s,
	    "org.opencontainers.image.created", "", "org.opencontainers.image.description",
	    m->stack.description.s ? m->stack.description.s : "a tfprov stack",
	    "dev.tfprov.manifest.sha256", m->sha256, "dev.tfprov.version", TFPROV_VERSION);
	char created[32];
	rfc3339(b->epoch, created);
	json_object_set_new(labels, "org.opencontainers.image.created", json_string(created));
	if (m->versions.tensorflow.s)
		json_object_set_new(labels, "org.opencontainers.image.version",
		                    json_string(m->versions.tensorflow.s));
	return labels;
}

/* 6. Config, manifest, index into the layout; *md is the image manifest's. */
static int build_layout(struct build *b, const char *tag, json_t *labels, struct oci_desc *md)
{
	struct ctx *c = b->c;
	const struct oci_image *base = &b->base;
	size_t nl = b->nl;
	char *require = require_cuda(c, b->m);
	json_t *cfg = image_config(b, base, b->ls, b->kinds, nl, labels, require);
	struct oci_desc *every = xcalloc(base->nlayers + nl + 1, sizeof(*every));
	for (size_t i = 0; i < base->nlayers; i++)
		every[i] = base->layers[i];
	for (size_t i = 0; i < nl; i++)
		every[base->nlayers + i] = b->ls[i];
	json_t *ann = json_deep_copy(labels);
	for (size_t i = 0; i < nl; i++) {
		char key[64];
		snprintf(key, sizeof(key), "dev.tfprov.layer.%zu", base->nlayers + i);
		json_object_set_new(ann, key, json_string(layer_names[b->kinds[i]]));
	}
	int rc =
	    oci_layout_finish(b->layout, cfg, every, base->nlayers + nl, ann, tag, md, &b->err);
	json_decref(ann);
	free(every);
	if (rc != 0)
		ev_log(c, EV_ERROR, "%s", why_text(&b->err));
	json_decref(cfg);
	free(require);
	return rc;
}

/* 6, then OUT: the layout renamed to out, or written as a docker-archive when
 * out ends in .tar. */
static int build_write(struct build *b, struct opts *o, const char *out)
{
	struct ctx *c = b->c;
	struct oci_desc md = {0};
	json_t *labels = build_labels(b);
	int rc = build_layout(b, o->tag, labels, &md);
	if (rc == 0 && str_ends_with(out, ".tar")) {
		char *tar = path_join(b->tmp, "image.tar");
		rc = oci_archive_write(b->layout, tar, o->tag, b->epoch, &b->err);
		if (rc == 0)
			rc = install_out(c, tar, out, o->force, b->tmp);
		else
			ev_log(c, EV_ERROR, "%s: %s", out, why_text(&b->err));
		free(tar);
	} else if (rc == 0) {
		rc = install_out(c, b->layout, out, o->force, b->tmp);
	}
	if (rc == 0) {
		size_t nbase = b->base.nlayers;
		ev_log(c, EV_INFO, "\nImage %s: %s (%zu layers: %zu of the base, %zu of the stack)",
		       out, md.digest, nbase + b->nl, nbase, b->nl);
		json_t *j = json_pack("{s:s,s:s,s:I,s:s}", "path", out, "digest", md.digest, "size",
		                      (json_int_t)md.size, "cache", b->cached);
		ev_data(c, "image", j);
		json_decref(j);
		c->changed = 1;
	}
	free(md.media_type);
	json_decref(labels);
	return rc;
}

static int image_build(struct ctx *c, struct opts *o)
{
	struct manifest *m = NULL;
	struct build b = {0};
	int rc = 0;
	char *out_buf = o->out ? xstrdup(o->out) : NULL;
	const char *out = out_buf;
	for (size_t l = out_buf ? strlen(out_buf) : 0; l > 1 && out_buf[l - 1] == '/'; l--)
		out_buf[l - 1] = '\0'; /* "img/" is img */
	if (o->args.n != 2 || o->base == NULL || out == NULL || out[0] == '\0') {
		fprintf(stderr, "usage: tfprov image build MANIFEST --base BASE -o OUT\n");
		free(out_buf);
		return TF_EUSAGE;
	}
	umask(022); /* the modes in the image do not depend on the caller's umask */
	b.c = c;
	b.cached = "off";
	b.epoch = image_epoch();
	char epoch_s[32];
	snprintf(epoch_s, sizeof(epoch_s), "%lld", (long long)b.epoch);
	setenv("SOURCE_DATE_EPOCH", epoch_s, 1);
	c->flags |= CTX_NO_GPU; /* the image runs on another machine's driver */

	rc = cli_load_manifest(c, o->args.v[1], &m, 1);
	if (rc == 0)
		rc = cli_check_signature(c, m, 1);
	if (rc == 0) {
		b.m = m;
		rc = build_prepare(&b, o->base, out);
	}
	int hit = 0;
	if (rc == 0)
		rc = build_plan(&b, m, o->base);
	if (rc == 0)
		rc = build_from_cache(&b, m, o, out, &hit);
	if (rc == 0 && !hit)
		rc = build_full(&b, m, o->base);
	if (rc == 0)
		rc = build_write(&b, o, out);

	if (rc != 0 && b.why.msg && rc != TF_EPRECOND)
		ev_log(c, EV_DEBUG, "%s", b.why.msg);
	if (c->st) {
		state_close(c->st);
		c->st = NULL;
	}
	if (b.wl)
		state_writer_unlock(b.wl, 0);
	c->wlock = NULL;
	if (b.planned)
		plan_release(&b.p);
	if (b.tmp)
		fs_rmtree(b.tmp);
	for (size_t i = 0; i < b.nl; i++)
		free(b.ls[i].media_type);
	free(b.ls);
	oci_image_release(&b.base);
	build_release(&b);
	free(b.tmp);
	free(b.stage);
	free(b.layout);
	free(b.scratch);
	free(b.blobs);
	free(b.holder);
	why_clear(&b.err);
	free(out_buf);
	manifest_free(m);
	return rc;
}

int cmd_image(struct ctx *c, struct opts *o)
{
	const char *sub = o->args.n ? o->args.v[0] : "";
	if (strcmp(sub, "build") == 0)
		return image_build(c, o);
	if (strcmp(sub, "inspect") == 0)
		return image_inspect(c, o);
	fprintf(stderr, "tfprov image: unknown subcommand '%s' (build, inspect)\n", sub);
	return TF_EUSAGE;
}
