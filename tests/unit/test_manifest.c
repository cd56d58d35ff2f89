/*
 * test_manifest.c - manifest_load_buf on crafted inputs: every refusal gets
 * its own diagnostic code at the exact LINE:COL of the node (or byte) it is
 * about, and hostile inputs (alias bombs, self-reference, huge mappings) are
 * refused fast. Also conda_explicit_parse and pip_requirements_parse
 * directly.
 *
 * Positions are 1-based; a diagnostic with line 0 has no position.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "manifest.h"

/* A valid minimal manifest: lines 1-6. Tests append from line 7. */
#define HDR                                                                                        \
	"schema: 1\n"                                                                              \
	"stack:\n"                                                                                 \
	"  name: t\n"                                                                              \
	"  platform: linux-x86_64\n"                                                               \
	"versions:\n"                                                                              \
	"  tensorflow: 2.15.1\n"

#define SHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

struct res {
	int rc;
	struct manifest *m;
	struct diags d;
};

static struct res load_n(const char *text, size_t len)
{
	struct res r;
	memset(&r, 0, sizeof(r));
	r.rc = manifest_load_buf("t.yaml", text, len, &r.m, &r.d);
	return r;
}

static struct res load(const char *text)
{
	return load_n(text, strlen(text));
}

static void release(struct res *r)
{
	manifest_free(r->m);
	diags_release(&r->d);
}

static void dump(const struct diags *d)
{
	{
		char *text = diags_format(d, 0);
		fputs(text, stderr);
		free(text);
	}
}

/* The diagnostic with `code`, or fails the test (printing what there was). */
static const struct diag *find(const struct diags *d, const char *code)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->v[i].code, code) == 0)
			return &d->v[i];
	fprintf(stderr, "no diagnostic [%s]; got:\n", code);
	dump(d);
	fail_msg("missing diagnostic %s", code);
	return NULL;
}

/* Asserts a diagnostic `code` with severity sev at line:col. */
static const struct diag *expect_at(const struct diags *d, const char *code, enum diag_severity sev,
                                    int line, int col)
{
	for (size_t i = 0; i < d->n; i++) {
		const struct diag *g = &d->v[i];
		if (strcmp(g->code, code) == 0 && g->pos.line == line && g->pos.col == col) {
			assert_int_equal(g->sev, sev);
			return g;
		}
	}
	fprintf(stderr, "no diagnostic [%s] at %d:%d; got:\n", code, line, col);
	dump(d);
	fail_msg("missing diagnostic %s at %d:%d", code, line, col);
	return NULL;
}

/* The load failed with exit 3 and exactly one error, `code` at line:col. */
static struct res refuse_one(const char *text, size_t len, const char *code, int line, int col)
{
	struct res r = load_n(text, len);
	if (r.rc != TF_EMANIFEST || r.d.errors != 1)
		dump(&r.d);
	assert_int_equal(r.rc, TF_EMANIFEST);
	assert_null(r.m);
	assert_int_equal(tf_exit_code(r.rc), 3);
	assert_int_equal(r.d.errors, 1);
	expect_at(&r.d, code, DIAG_ERROR, line, col);
	return r;
}

/*
 * CPU seconds of this process: the bounds below tell a linear parser from a
 * quadratic or exponential one (an alias bomb expanded takes minutes), and
 * must not trip on a machine whose other work delays this one (wall time did,
 * under a load of 13 on 2 cores).
 */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the baseline: the header alone is valid --------------------------- */

static void test_minimal_is_valid(void **state)
{
	(void)state;
	struct res r = load(HDR);
	if (r.rc)
		dump(&r.d);
	assert_int_equal(r.rc, 0);
	assert_non_null(r.m);
	assert_string_equal(r.m->stack.name.s, "t");
	assert_int_equal(r.m->stack.name.pos.line, 3);
	assert_int_equal(r.m->stack.name.pos.col, 9);
	assert_int_equal(r.m->stack.platform, PLATFORM_LINUX_X86_64);
	release(&r);
}

/* ---- unknown keys ------------------------------------------------------ */

static void test_unknown_key_did_you_mean(void **state)
{
	(void)state;
	const char *t = HDR "prefx: /opt/x\n";
	struct res r = refuse_one(t, strlen(t), "schema.unknown-key", 7, 1);
	const struct diag *g = find(&r.d, "schema.unknown-key");
	assert_non_null(strstr(g->msg, "'prefx'"));
	assert_non_null(g->hint);
	assert_string_equal(g->hint, "did you mean 'prefix'?");
	release(&r);
}

static void test_unknown_nested_key_did_you_mean(void **state)
{
	(void)state;
	const char *t = HDR "env:\n  varz:\n    A: b\n";
	struct res r = refuse_one(t, strlen(t), "schema.unknown-key", 8, 3);
	assert_string_equal(find(&r.d, "schema.unknown-key")->hint, "did you mean 'vars'?");
	release(&r);
}

static void test_unknown_key_far_from_any_lists_allowed(void **state)
{
	(void)state;
	const char *t = HDR "zzzzzzzzzzzz: 1\n";
	struct res r = refuse_one(t, strlen(t), "schema.unknown-key", 7, 1);
	const struct diag *g = find(&r.d, "schema.unknown-key");
	assert_non_null(strstr(g->hint, "allowed keys:"));
	assert_non_null(strstr(g->hint, "prefix"));
	release(&r);
}

/* ---- wrong types ------------------------------------------------------- */

static void test_wrong_type_scalar_for_mapping(void **state)
{
	(void)state;
	const char *t = "schema: 1\nstack: hello\nversions:\n  tensorflow: 2.15.1\n";
	struct res r = refuse_one(t, strlen(t), "schema.type", 2, 8);
	assert_non_null(strstr(find(&r.d, "schema.type")->msg, "must be a mapping"));
	release(&r);
}

static void test_wrong_type_list_for_env_vars(void **state)
{
	(void)state;
	const char *t = HDR "env:\n  vars:\n    - A\n";
	struct res r = refuse_one(t, strlen(t), "schema.type", 9, 5);
	release(&r);
}

static void test_wrong_type_quoted_integer(void **state)
{
	(void)state;
	const char *t =
	    "schema: \"1\"\n"
	    "stack:\n  name: t\n  platform: linux-x86_64\nversions:\n  tensorflow: 2.15.1\n";
	struct res r = refuse_one(t, strlen(t), "schema.type", 1, 9);
	assert_string_equal(find(&r.d, "schema.type")->hint, "write a whole number without quotes");
	release(&r);
}

static void test_wrong_type_boolean(void **state)
{
	(void)state;
	const char *t = HDR "bench:\n  enabled: yes\n";
	struct res r = refuse_one(t, strlen(t), "schema.type", 8, 12);
	release(&r);
}

/* ---- duplicate keys ---------------------------------------------------- */

static void test_duplicate_key(void **state)
{
	(void)state;
	const char *t = HDR "env:\n  vars:\n    A: one\n    B: two\n    A: three\n";
	struct res r = refuse_one(t, strlen(t), "yaml.duplicate-key", 11, 5);
	const struct diag *g = find(&r.d, "yaml.duplicate-key");
	assert_non_null(strstr(g->msg, "'A'"));
	assert_non_null(strstr(g->msg, "line 9"));
	release(&r);
}

static void test_duplicate_top_level_key(void **state)
{
	(void)state;
	const char *t = HDR "schema: 1\n";
	struct res r = refuse_one(t, strlen(t), "yaml.duplicate-key", 7, 1);
	release(&r);
}

/* ---- out-of-range values ----------------------------------------------- */

static void test_schema_2_out_of_range(void **state)
{
	(void)state;
	const char *t =
	    "schema: 2\n"
	    "stack:\n  name: t\n  platform: linux-x86_64\nversions:\n  tensorflow: 2.15.1\n";
	struct res r = refuse_one(t, strlen(t), "schema.range", 1, 9);
	assert_non_null(strstr(find(&r.d, "schema.range")->msg, "2"));
	release(&r);
}

static void test_bench_batch_size_zero(void **state)
{
	(void)state;
	const char *t = HDR "bench:\n  batch_size: 0\n";
	struct res r = refuse_one(t, strlen(t), "schema.range", 8, 15);
	release(&r);
}

#define CUDA_ART(extra)                                                                            \
	HDR "cuda:\n"                                                                              \
	    "  version: 12.3.2\n"                                                                  \
	    "  artifacts:\n"                                                                       \
	    "    - name: cudart\n"                                                                 \
	    "      url: https://example.invalid/cudart.tar.xz\n" extra

static void test_artifact_strip_99(void **state)
{
	(void)state;
	const char *t = CUDA_ART("      sha256: " SHA "\n      size: 10\n      strip: 99\n");
	struct res r = refuse_one(t, strlen(t), "schema.range", 14, 14);
	release(&r);
}

static void test_artifact_size_zero(void **state)
{
	(void)state;
	const char *t = CUDA_ART("      sha256: " SHA "\n      size: 0\n");
	struct res r = refuse_one(t, strlen(t), "schema.range", 13, 13);
	release(&r);
}

/* ---- sha256 and size --------------------------------------------------- */

static void test_artifact_valid(void **state)
{
	(void)state;
	const char *t = CUDA_ART("      sha256: " SHA "\n      size: 10\n");
	struct res r = load(t);
	if (r.rc)
		dump(&r.d);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.d.n, 0);
	assert_int_equal(r.m->cuda.artifacts.n, 1);
	assert_string_equal(r.m->cuda.artifacts.v[0].sha256.s, SHA);
	assert_int_equal(r.m->cuda.artifacts.v[0].size.v, 10);
	release(&r);
}

static void test_sha256_malformed(void **state)
{
	(void)state;
	/* 63 hex digits. */
	const char *t = CUDA_ART("      sha256: 0123456789abcdef0123456789abcdef0123456789abcdef"
	                         "0123456789abcde\n      size: 10\n");
	struct res r = refuse_one(t, strlen(t), "artifact.bad-sha256", 12, 15);
	release(&r);
}

static void test_sha256_uppercase(void **state)
{
	(void)state;
	const char *t = CUDA_ART("      sha256: 0123456789ABCDEF0123456789abcdef0123456789abcdef"
	                         "0123456789abcdef\n      size: 10\n");
	struct res r = refuse_one(t, strlen(t), "artifact.bad-sha256", 12, 15);
	assert_non_null(strstr(find(&r.d, "artifact.bad-sha256")->hint, "lowercase"));
	release(&r);
}

static void test_sha256_missing_is_error(void **state)
{
	(void)state;
	const char *t = CUDA_ART("      size: 10\n");
	/* At the artifact mapping: line 10, column 7 (after "    - "). */
	struct res r = refuse_one(t, strlen(t), "artifact.no-sha256", 10, 7);
	release(&r);
}

static void test_size_missing_is_warning_only(void **state)
{
	(void)state;
	const char *t = CUDA_ART("      sha256: " SHA "\n");
	struct res r = load(t);
	if (r.rc)
		dump(&r.d);
	assert_int_equal(r.rc, 0);
	assert_non_null(r.m);
	assert_int_equal(r.d.errors, 0);
	assert_int_equal(r.d.warnings, 1);
	expect_at(&r.d, "artifact.no-size", DIAG_WARNING, 10, 7);
	release(&r);
}

/* ---- hostile YAML ------------------------------------------------------ */

static void test_alias_bomb_refused_fast(void **state)
{
	(void)state;
	/* Billion laughs: 10^9 nodes after expansion from a few hundred bytes. */
	const char *t =
	    "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
	    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
	    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
	    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
	    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
	    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
	    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
	    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
	    "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n";
	double t0 = now_s();
	struct res r = load(t);
	double dt = now_s() - t0;
	fprintf(stderr, "# alias bomb refused in %.3f s of CPU\n", dt);
	assert_int_equal(r.rc, TF_EMANIFEST);
	assert_null(r.m);
	const struct diag *g = find(&r.d, "yaml.too-large");
	assert_true(g->pos.line >= 1);
	assert_true(dt < 1.0);
	release(&r);
}

static void test_self_referencing_alias(void **state)
{
	(void)state;
	const char *t = HDR "a: &x [*x]\n";
	double t0 = now_s();
	struct res r = load(t);
	assert_true(now_s() - t0 < 1.0);
	assert_int_equal(r.rc, TF_EMANIFEST);
	assert_null(r.m);
	assert_int_equal(r.d.errors, 1);
	/* Refused with a position on the line of the alias. */
	assert_int_equal(r.d.v[0].pos.line, 7);
	assert_true(strcmp(r.d.v[0].code, "yaml.too-deep") == 0 ||
	            strcmp(r.d.v[0].code, "yaml.syntax") == 0);
	release(&r);
}

/*
 * A mapping with tens of thousands of keys is within the node bound. Refusing
 * or accepting it must stay linear-ish: 20,000 keys in well under a second
 * (the duplicate-key check must not compare every pair).
 */
static void test_many_keys_not_quadratic(void **state)
{
	(void)state;
	struct res r;
	size_t n = 20000, cap = n * 24 + 64, len = 0;
	char *t = malloc(cap);
	len += (size_t)snprintf(t + len, cap - len, "%s", HDR "env:\n  vars:\n");
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(t + len, cap - len, "    K%zu: \"1\"\n", i);
	double t0 = now_s();
	r = load_n(t, len);
	double dt = now_s() - t0;
	if (r.rc)
		dump(&r.d);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.m->env.nvars, n);
	fprintf(stderr, "# 20000 env vars parsed in %.3f s of CPU\n", dt);
	assert_true(dt < 1.0);
	release(&r);
	free(t);
}

/*
 * Deep flow nesting ("a: [[[[...]]]]", balanced, so it is valid YAML): refused
 * by the depth bound at line 1, fast, not after libyaml has spent seconds on
 * it (its simple-key bookkeeping is quadratic in the flow depth).
 */
static void test_deep_flow_nesting_fast(void **state)
{
	(void)state;
	size_t n = 20000;
	char *t = malloc(2 * n + 16);
	memcpy(t, "a: ", 3);
	memset(t + 3, '[', n);
	memset(t + 3 + n, ']', n);
	t[2 * n + 3] = '\n';
	double t0 = now_s();
	struct res r = load_n(t, 2 * n + 4);
	double dt = now_s() - t0;
	fprintf(stderr, "# %zu nested flow lists refused in %.3f s of CPU\n", n, dt);
	assert_int_equal(r.rc, TF_EMANIFEST);
	const struct diag *g = find(&r.d, "yaml.too-deep");
	assert_int_equal(g->pos.line, 1);
	assert_true(dt < 0.5);
	release(&r);
	free(t);
}

/* ---- bytes that are not a text manifest -------------------------------- */

static void test_non_utf8_byte_position(void **state)
{
	(void)state;
	const char *t = HDR "env:\n  vars:\n    A: \"caf\xe9\"\n";
	/* Line 9: `    A: "caf` is 11 characters; the bad byte is column 12. */
	struct res r = refuse_one(t, strlen(t), "file.encoding", 9, 12);
	assert_non_null(strstr(find(&r.d, "file.encoding")->msg, "0xe9"));
	release(&r);
}

static void test_non_utf8_column_counts_characters(void **state)
{
	(void)state;
	/* "é" (2 bytes) before the bad byte counts as one column. */
	const char *t = HDR "env:\n  vars:\n    A: \"\xc3\xa9\xff\"\n";
	struct res r = refuse_one(t, strlen(t), "file.encoding", 9, 10);
	release(&r);
}

/*
 * Encoded surrogates (ED A0 80), overlong forms (E0 80 80) and code points
 * above U+10FFFF (F5 ..) are not UTF-8 either; they must be reported with
 * their position like any other bad byte, not by libyaml without one.
 */
static void test_surrogate_and_overlong_have_position(void **state)
{
	(void)state;
	static const char *const bad[] = {"\xed\xa0\x80", "\xe0\x80\x80", "\xf5\x80\x80\x80",
	                                  "\xf0\x80\x80\x80"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char t[512];
		snprintf(t, sizeof(t), HDR "env:\n  vars:\n    A: \"x%s\"\n", bad[i]);
		struct res r = refuse_one(t, strlen(t), "file.encoding", 9, 10);
		release(&r);
	}
}

static void test_nul_byte_is_binary(void **state)
{
	(void)state;
	static const char t[] = "schema: 1\nstack:\n  na\0me: t\n";
	struct res r = refuse_one(t, sizeof(t) - 1, "file.binary", 3, 5);
	release(&r);
}

static void test_empty_file(void **state)
{
	(void)state;
	struct res r = refuse_one("", 0, "file.empty", 0, 0);
	release(&r);
	r = refuse_one("  \n\n\t\n", 6, "file.empty", 0, 0);
	release(&r);
}

static void test_comment_only_file(void **state)
{
	(void)state;
	const char *t = "# just a comment\n# and another\n";
	struct res r = refuse_one(t, strlen(t), "file.empty", 0, 0);
	assert_non_null(strstr(find(&r.d, "file.empty")->msg, "comments"));
	release(&r);
}

static void test_two_documents(void **state)
{
	(void)state;
	const char *t = HDR "---\nschema: 1\n";
	struct res r = refuse_one(t, strlen(t), "yaml.multiple-documents", 8, 1);
	release(&r);
}

static void test_tab_indentation(void **state)
{
	(void)state;
	const char *t = "schema: 1\nstack:\n\tname: t\n";
	struct res r = load(t);
	assert_int_equal(r.rc, TF_EMANIFEST);
	const struct diag *g = find(&r.d, "yaml.syntax");
	assert_int_equal(g->pos.line, 3);
	assert_int_equal(g->pos.col, 1);
	assert_non_null(g->hint);
	assert_non_null(strstr(g->hint, "tabs"));
	release(&r);
}

static void test_too_large_buffer(void **state)
{
	(void)state;
	size_t len = MANIFEST_MAX_BYTES + 1;
	char *t = malloc(len);
	memset(t, '#', len);
	struct res r = refuse_one(t, len, "file.too-large", 0, 0);
	release(&r);
	free(t);
}

/* ---- conda explicit lock inline, with positions inside the block ------- */

#define PY_CONDA                                                                                   \
	HDR "python:\n"                                                                            \
	    "  manager: conda\n"                                                                   \
	    "  lock: |\n"

static void test_conda_inline_valid(void **state)
{
	(void)state;
	const char *t = PY_CONDA "    # platform: linux-64\n"
	                         "    @EXPLICIT\n"
	                         "    https://conda.anaconda.org/conda-forge/linux-64/"
	                         "python-3.10.14-hd12c33a_0_cpython.conda#sha256:" SHA "\n";
	struct res r = load(t);
	if (r.rc)
		dump(&r.d);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.m->python.npkgs, 1);
	assert_string_equal(r.m->python.pkgs[0].name, "python");
	assert_string_equal(r.m->python.pkgs[0].version, "3.10.14");
	assert_string_equal(r.m->python.pkgs[0].build, "hd12c33a_0_cpython");
	assert_string_equal(r.m->python.pkgs[0].sha256, SHA);
	assert_int_equal(r.m->python.pkgs[0].pos.line, 12);
	assert_int_equal(r.m->python.pkgs[0].pos.col, 5);
	release(&r);
}

static void test_conda_inline_no_hash_position(void **state)
{
	(void)state;
	const char *t = PY_CONDA "    @EXPLICIT\n"
	                         "    https://conda.anaconda.org/conda-forge/linux-64/"
	                         "zlib-1.3.1-h4ab18f5_1.conda\n";
	struct res r = refuse_one(t, strlen(t), "conda.no-hash", 11, 5);
	release(&r);
}

static void test_conda_inline_bad_hash_position(void **state)
{
	(void)state;
	const char *t =
	    PY_CONDA "    @EXPLICIT\n"
	             "    https://x.invalid/linux-64/zlib-1.3.1-h4ab18f5_1.conda#sha256:" SHA "\n"
	             "    https://x.invalid/linux-64/xz-5.2.6-h166bdaf_0.tar.bz2#sha256:ABC\n";
	struct res r = refuse_one(t, strlen(t), "conda.bad-hash", 12, 5);
	release(&r);
}

static void test_conda_inline_line_before_explicit(void **state)
{
	(void)state;
	const char *t =
	    PY_CONDA "    https://x.invalid/linux-64/zlib-1.3.1-h4ab18f5_1.conda#sha256:" SHA "\n"
	             "    @EXPLICIT\n";
	struct res r = refuse_one(t, strlen(t), "conda.no-explicit", 10, 5);
	release(&r);
}

static void test_conda_inline_not_a_package_name(void **state)
{
	(void)state;
	const char *t = PY_CONDA "    @EXPLICIT\n"
	                         "    https://x.invalid/linux-64/zlib.zip#sha256:" SHA "\n";
	struct res r = refuse_one(t, strlen(t), "conda.bad-url", 11, 5);
	release(&r);
}

/* ---- pip requirements inline ------------------------------------------- */

#define PIP_BLOCK                                                                                  \
	HDR "python:\n"                                                                            \
	    "  manager: venv\n"                                                                    \
	    "pip:\n"                                                                               \
	    "  requirements: |\n"

static void test_pip_inline_no_hash(void **state)
{
	(void)state;
	const char *t = PIP_BLOCK "    numpy==1.26.4 --hash=sha256:" SHA "\n"
	                          "    six==1.16.0\n";
	struct res r = refuse_one(t, strlen(t), "pip.no-hash", 12, 5);
	release(&r);
}

static void test_pip_inline_unpinned(void **state)
{
	(void)state;
	const char *t = PIP_BLOCK "    numpy>=1.23.5 --hash=sha256:" SHA "\n";
	struct res r = refuse_one(t, strlen(t), "pip.unpinned", 11, 5);
	release(&r);
}

static void test_pip_inline_direct_wheel_url(void **state)
{
	(void)state;
	const char *t =
	    PIP_BLOCK "    tinypkg @ https://x.invalid/tinypkg-0.1-py3-none-any.whl \\\n"
	              "        --hash=sha256:" SHA "\n";
	struct res r = load(t);
	if (r.rc)
		dump(&r.d);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.m->pip.nreqs, 1);
	assert_string_equal(r.m->pip.reqs[0].name, "tinypkg");
	assert_string_equal(r.m->pip.reqs[0].version, "0.1");
	assert_string_equal(r.m->pip.reqs[0].url, "https://x.invalid/tinypkg-0.1-py3-none-any.whl");
	assert_int_equal(r.m->pip.reqs[0].nhashes, 1);
	assert_int_equal(r.m->pip.reqs[0].pos.line, 11);
	release(&r);
}

static void test_pip_inline_direct_url_without_hash(void **state)
{
	(void)state;
	const char *t = PIP_BLOCK "    tinypkg @ https://x.invalid/tinypkg-0.1-py3-none-any.whl\n";
	struct res r = refuse_one(t, strlen(t), "pip.no-hash", 11, 5);
	release(&r);
}

/* Lock input: `complete: false` may hold unhashed or ranged pins (warnings). */
static void test_pip_lock_input_unhashed_is_a_warning(void **state)
{
	(void)state;
	const char *t = HDR "python:\n"
	                    "  manager: venv\n"
	                    "pip:\n"
	                    "  complete: false\n"
	                    "  requirements: |\n"
	                    "    tensorflow[and-cuda]==2.21.0\n"
	                    "    tf-keras~=2.21.0\n";
	struct res r = load(t);
	if (r.rc)
		dump(&r.d);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.d.errors, 0);
	expect_at(&r.d, "pip.lock-input", DIAG_WARNING, 12, 5);
	expect_at(&r.d, "pip.lock-input", DIAG_WARNING, 13, 5);
	assert_int_equal(r.m->pip.nreqs, 2);
	assert_string_equal(r.m->pip.reqs[0].version, "2.21.0");
	assert_null(r.m->pip.reqs[1].version);
	struct pos at;
	assert_string_equal(manifest_lock_pending(r.m, &at), "pip");
	assert_int_equal(at.line, 12);
	release(&r);
}

/* A redist JSON without sha256: lock input over https, an error otherwise. */
static void test_redist_without_sha256(void **state)
{
	(void)state;
	const char *t = HDR "cuda:\n"
	                    "  version: 12.5.1\n"
	                    "  redist:\n"
	                    "    url: https://x.invalid/redistrib_12.5.1.json\n"
	                    "    components: [cuda_cudart]\n";
	struct res r = load(t);
	assert_int_equal(r.rc, 0);
	expect_at(&r.d, "redist.unpinned", DIAG_WARNING, 10, 5);
	struct pos at;
	assert_string_equal(manifest_lock_pending(r.m, &at), "cuda.redist");
	release(&r);
	const char *h = HDR "cuda:\n"
	                    "  version: 12.5.1\n"
	                    "  redist:\n"
	                    "    url: http://x.invalid/redistrib_12.5.1.json\n"
	                    "    components: [cuda_cudart]\n";
	r = refuse_one(h, strlen(h), "artifact.no-sha256", 10, 5);
	release(&r);
}

/* ---- env var names ----------------------------------------------------- */

static void test_env_var_bad_name(void **state)
{
	(void)state;
	const char *t = HDR "env:\n  vars:\n    OK_1: a\n    1BAD: b\n";
	struct res r = refuse_one(t, strlen(t), "env.name", 10, 5);
	release(&r);
	t = HDR "env:\n  vars:\n    BAD-NAME: b\n";
	r = refuse_one(t, strlen(t), "env.name", 9, 5);
	release(&r);
}

static void test_env_value_newline(void **state)
{
	(void)state;
	const char *t = HDR "env:\n  vars:\n    A: \"x\\ny\"\n";
	struct res r = refuse_one(t, strlen(t), "env.value", 9, 8);
	release(&r);
}

/* ---- the parsers directly --------------------------------------------- */

static void test_conda_parse_direct(void **state)
{
	(void)state;
	struct diags d = {0};
	struct conda_pkg *p = NULL;
	size_t n = 0;
	const char *text = "# platform: linux-64\n"
	                   "@EXPLICIT\n"
	                   "https://x.invalid/linux-64/zlib-1.3.1-h4ab18f5_1.conda#sha256:" SHA "\n"
	                   "https://x.invalid/noarch/pip-24.0-pyhd8ed1ab_0.tar.bz2#"
	                   "0123456789abcdef0123456789abcdef\n";
	assert_int_equal(conda_explicit_parse("lock.txt", text, (struct pos){1, 1}, 0, &p, &n, &d),
	                 0);
	assert_int_equal(d.errors, 0);
	assert_int_equal(n, 2);
	assert_string_equal(p[0].name, "zlib");
	assert_string_equal(p[0].version, "1.3.1");
	assert_string_equal(p[0].build, "h4ab18f5_1");
	assert_int_equal(p[0].pos.line, 3);
	assert_string_equal(p[1].name, "pip");
	assert_string_equal(p[1].sha256, "");
	assert_string_equal(p[1].md5, "0123456789abcdef0123456789abcdef");
	for (size_t i = 0; i < n; i++) {
		free(p[i].url);
		free(p[i].name);
		free(p[i].version);
		free(p[i].build);
	}
	free(p);
	diags_release(&d);
}

static void test_conda_parse_direct_errors(void **state)
{
	(void)state;
	struct diags d = {0};
	struct conda_pkg *p = NULL;
	size_t n = 0;
	/* No @EXPLICIT at all (only comments): one error at the base. */
	assert_int_equal(
	    conda_explicit_parse("lock.txt", "# nothing\n", (struct pos){1, 1}, 0, &p, &n, &d),
	    TF_EMANIFEST);
	expect_at(&d, "conda.no-explicit", DIAG_ERROR, 1, 1);
	free(p);
	diags_release(&d);

	/* A block at line 20, column 7: line 3 of the text is file line 22. */
	const char *text = "@EXPLICIT\n"
	                   "https://x.invalid/linux-64/zlib-1.3.1-h4ab18f5_1.conda#sha256:" SHA "\n"
	                   "  ftp://x.invalid/linux-64/xz-5.2.6-h166bdaf_0.conda#sha256:" SHA "\n";
	p = NULL;
	n = 0;
	assert_int_equal(conda_explicit_parse("m.yaml", text, (struct pos){20, 7}, 1, &p, &n, &d),
	                 TF_EMANIFEST);
	expect_at(&d, "conda.bad-url", DIAG_ERROR, 22, 9);
	assert_int_equal(n, 1);
	free(p[0].url);
	free(p[0].name);
	free(p[0].version);
	free(p[0].build);
	free(p);
	diags_release(&d);
}

static void free_reqs(struct pip_req *r, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(r[i].name);
		free(r[i].raw_name);
		free(r[i].version);
		free(r[i].spec);
		free(r[i].url);
		for (size_t j = 0; j < r[i].nhashes; j++)
			free(r[i].hashes[j]);
		free(r[i].hashes);
	}
	free(r);
}

static void test_pip_parse_direct(void **state)
{
	(void)state;
	struct diags d = {0};
	struct pip_req *r = NULL;
	size_t n = 0;
	const char *text = "# generated by pip-compile\n"
	                   "Typing_Extensions==4.12.2 \\\n"
	                   "    --hash=sha256:" SHA " \\\n"
	                   "    --hash=sha256:" SHA "\n"
	                   "numpy==1.26.4 ; python_version >= \"3.9\" --hash=sha256:" SHA "\n";
	assert_int_equal(pip_requirements_parse("req.txt", text, (struct pos){1, 1}, 0, &r, &n, &d),
	                 0);
	if (d.n)
		dump(&d);
	assert_int_equal(d.n, 0);
	assert_int_equal(n, 2);
	assert_string_equal(r[0].name, "typing-extensions");
	assert_string_equal(r[0].raw_name, "Typing_Extensions");
	assert_string_equal(r[0].version, "4.12.2");
	assert_int_equal(r[0].nhashes, 2);
	assert_int_equal(r[0].pos.line, 2);
	assert_string_equal(r[1].name, "numpy");
	assert_string_equal(r[1].version, "1.26.4");
	assert_int_equal(r[1].pos.line, 5);
	free_reqs(r, n);
	diags_release(&d);
}

static void test_pip_parse_direct_errors(void **state)
{
	(void)state;
	struct diags d = {0};
	struct pip_req *r = NULL;
	size_t n = 0;
	const char *text = "six==1.16.0\n"
	                   "numpy\n"
	                   "  --index-url https://evil.invalid/simple\n"
	                   "wheel==0.43.0 --hash=md5:0123\n";
	assert_int_equal(pip_requirements_parse("req.txt", text, (struct pos){1, 1}, 0, &r, &n, &d),
	                 TF_EMANIFEST);
	expect_at(&d, "pip.no-hash", DIAG_ERROR, 1, 1);
	expect_at(&d, "pip.unpinned", DIAG_ERROR, 2, 1);
	expect_at(&d, "pip.option", DIAG_ERROR, 3, 3);
	expect_at(&d, "pip.bad-hash", DIAG_ERROR, 4, 1);
	free_reqs(r, n);
	diags_release(&d);
}

/* `==1.26.*` is a prefix match, not one version: it pins nothing. */
static void test_pip_wildcard_is_unpinned(void **state)
{
	(void)state;
	struct diags d = {0};
	struct pip_req *r = NULL;
	size_t n = 0;
	const char *text = "numpy==1.26.* --hash=sha256:" SHA "\n";
	assert_int_equal(pip_requirements_parse("req.txt", text, (struct pos){1, 1}, 0, &r, &n, &d),
	                 TF_EMANIFEST);
	expect_at(&d, "pip.unpinned", DIAG_ERROR, 1, 1);
	free_reqs(r, n);
	diags_release(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_minimal_is_valid),
	    cmocka_unit_test(test_unknown_key_did_you_mean),
	    cmocka_unit_test(test_unknown_nested_key_did_you_mean),
	    cmocka_unit_test(test_unknown_key_far_from_any_lists_allowed),
	    cmocka_unit_test(test_wrong_type_scalar_for_mapping),
	    cmocka_unit_test(test_wrong_type_list_for_env_vars),
	    cmocka_unit_test(test_wrong_type_quoted_integer),
	    cmocka_unit_test(test_wrong_type_boolean),
	    cmocka_unit_test(test_duplicate_key),
	    cmocka_unit_test(test_duplicate_top_level_key),
	    cmocka_unit_test(test_schema_2_out_of_range),
	    cmocka_unit_test(test_bench_batch_size_zero),
	    cmocka_unit_test(test_artifact_strip_99),
	    cmocka_unit_test(test_artifact_size_zero),
	    cmocka_unit_test(test_artifact_valid),
	    cmocka_unit_test(test_sha256_malformed),
	    cmocka_unit_test(test_sha256_uppercase),
	    cmocka_unit_test(test_sha256_missing_is_error),
	    cmocka_unit_test(test_size_missing_is_warning_only),
	    cmocka_unit_test(test_alias_bomb_refused_fast),
	    cmocka_unit_test(test_self_referencing_alias),
	    cmocka_unit_test(test_many_keys_not_quadratic),
	    cmocka_unit_test(test_deep_flow_nesting_fast),
	    cmocka_unit_test(test_non_utf8_byte_position),
	    cmocka_unit_test(test_non_utf8_column_counts_characters),
	    cmocka_unit_test(test_surrogate_and_overlong_have_position),
	    cmocka_unit_test(test_nul_byte_is_binary),
	    cmocka_unit_test(test_empty_file),
	    cmocka_unit_test(test_comment_only_file),
	    cmocka_unit_test(test_two_documents),
	    cmocka_unit_test(test_tab_indentation),
	    cmocka_unit_test(test_too_large_buffer),
	    cmocka_unit_test(test_conda_inline_valid),
	    cmocka_unit_test(test_conda_inline_no_hash_position),
	    cmocka_unit_test(test_conda_inline_bad_hash_position),
	    cmocka_unit_test(test_conda_inline_line_before_explicit),
	    cmocka_unit_test(test_conda_inline_not_a_package_name),
	    cmocka_unit_test(test_pip_inline_no_hash),
	    cmocka_unit_test(test_pip_inline_unpinned),
	    cmocka_unit_test(test_pip_inline_direct_wheel_url),
	    cmocka_unit_test(test_pip_inline_direct_url_without_hash),
	    cmocka_unit_test(test_pip_lock_input_unhashed_is_a_warning),
	    cmocka_unit_test(test_redist_without_sha256),
	    cmocka_unit_test(test_env_var_bad_name),
	    cmocka_unit_test(test_env_value_newline),
	    cmocka_unit_test(test_conda_parse_direct),
	    cmocka_unit_test(test_conda_parse_direct_errors),
	    cmocka_unit_test(test_pip_parse_direct),
	    cmocka_unit_test(test_pip_parse_direct_errors),
	    cmocka_unit_test(test_pip_wildcard_is_unpinned),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
