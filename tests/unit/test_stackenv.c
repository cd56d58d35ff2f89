/*
 * test_stackenv.c - entering and leaving a stack's environment (stackenv.c)
 * on environments a user really has: earlier values restored, unset ones
 * unset again, what the user added to PATH meanwhile kept, a second stack
 * replacing the first, entering twice adding nothing. The POSIX sh side of
 * the same rules is compared with this one in tests/system/test_stack_env.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "manifest.h"
#include "spawn.h"
#include "stackenv.h"

static const char *const A =
    "schema: 1\nstack:\n  name: a\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
    "versions:\n  tensorflow: 2.12.0\n  cuda: 11.8.0\n  cudnn: 8.6.0.163\n  python: \"3.9\"\n"
    "driver:\n  policy: skip\n"
    "cuda:\n  version: 11.8.0\n  artifacts:\n    - name: cuda_cudart\n"
    "      url: https://x.invalid/a.tar.xz\n      sha256: "
    "0000000000000000000000000000000000000000000000000000000000000000\n      size: 1\n"
    "      strip: 1\n"
    "python:\n  manager: venv\n  name: tfa\n  version: \"3.9\"\n"
    "env:\n  vars:\n    TF_CPP_MIN_LOG_LEVEL: \"2\"\n";

static const char *const B = "schema: 1\nstack:\n  name: b\n  platform: linux-x86_64\n"
                             "prefix: /srv/stacks\nversions:\n  tensorflow: 2.15.1\n"
                             "driver:\n  policy: skip\n"
                             "env:\n  vars:\n    TF_FORCE_GPU_ALLOW_GROWTH: \"false\"\n";

static void build(const char *text, const char *name, struct stackenv *se)
{
	struct manifest *m = NULL;
	struct diags d = {0};
	int rc = manifest_load_shape("t.yaml", text, strlen(text), &m, &d);
	if (rc != 0 && d.n)
		fprintf(stderr, "%s\n", d.v[0].msg);
	assert_int_equal(rc, 0);
	stackenv_build(m, name, NULL, se);
	manifest_free(m);
	diags_release(&d);
}

static void user_env(struct strvec *env)
{
	strvec_push(env, "PATH=/usr/local/bin:/usr/bin:/bin");
	strvec_push(env, "HOME=/home/u");
	strvec_push(env, "CUDA_HOME=/usr/local/cuda-old");
	strvec_push(env, "XLA_FLAGS=");
	strvec_push(env, "PYTHONHOME=/opt/py");
}

/* Same variables, same values, whatever the order. */
static void assert_same_env(const struct strvec *a, const struct strvec *b)
{
	for (size_t i = 0; i < a->n; i++) {
		char *eq = strchr(a->v[i], '=');
		char *name = strndup(a->v[i], (size_t)(eq - a->v[i]));
		const char *other = spawn_env_get(b, name);
		if (other == NULL || strcmp(other, eq + 1) != 0)
			fail_msg("%s: %s against %s", name, eq + 1, other ? other : "(unset)");
		free(name);
	}
	assert_int_equal(a->n, b->n);
}

static void test_enter_sets_the_stack_and_leave_restores(void **state)
{
	(void)state;
	struct strvec before = {0}, env = {0};
	struct stackenv a;
	user_env(&before);
	user_env(&env);
	build(A, "a", &a);
	stackenv_enter(&a, &env);
	assert_string_equal(spawn_env_get(&env, "PATH"),
	                    "/opt/tfprov/envs/tfa/bin:/opt/tfprov/cuda/11.8.0/bin:"
	                    "/usr/local/bin:/usr/bin:/bin");
	assert_string_equal(spawn_env_get(&env, "LD_LIBRARY_PATH"),
	                    "/opt/tfprov/cuda/11.8.0/lib64");
	assert_string_equal(spawn_env_get(&env, "CUDA_HOME"), "/opt/tfprov/cuda/11.8.0");
	assert_string_equal(spawn_env_get(&env, "XLA_FLAGS"),
	                    "--xla_gpu_cuda_data_dir=/opt/tfprov/cuda/11.8.0");
	assert_string_equal(spawn_env_get(&env, "VIRTUAL_ENV"), "/opt/tfprov/envs/tfa");
	assert_null(spawn_env_get(&env, "PYTHONHOME"));
	assert_string_equal(spawn_env_get(&env, "TF_CPP_MIN_LOG_LEVEL"), "2");
	assert_string_equal(spawn_env_get(&env, "TFPROV_STACK"), "a");
	assert_int_equal(stackenv_leave(&env), 1);
	assert_same_env(&before, &env);
	assert_int_equal(stackenv_leave(&env), 0); /* nothing active: nothing changes */
	assert_same_env(&before, &env);
	stackenv_release(&a);
	strvec_release(&before);
	strvec_release(&env);
}

static void test_second_stack_replaces_the_first_and_twice_adds_nothing(void **state)
{
	(void)state;
	struct strvec before = {0}, env = {0}, once = {0};
	struct stackenv a, b;
	user_env(&before);
	user_env(&env);
	build(A, "a", &a);
	build(B, "b", &b);
	stackenv_enter(&a, &env);
	stackenv_enter(&b, &env);
	/* Nothing of a is left: b has no CUDA, so no LD_LIBRARY_PATH, CUDA_HOME is the user's. */
	assert_null(spawn_env_get(&env, "LD_LIBRARY_PATH"));
	assert_null(spawn_env_get(&env, "VIRTUAL_ENV"));
	assert_null(spawn_env_get(&env, "TF_CPP_MIN_LOG_LEVEL"));
	assert_string_equal(spawn_env_get(&env, "CUDA_HOME"), "/usr/local/cuda-old");
	assert_string_equal(spawn_env_get(&env, "PATH"), "/usr/local/bin:/usr/bin:/bin");
	assert_string_equal(spawn_env_get(&env, "TF_FORCE_GPU_ALLOW_GROWTH"), "false");
	assert_string_equal(spawn_env_get(&env, "TFPROV_STACK"), "b");
	for (size_t i = 0; i < env.n; i++)
		strvec_push(&once, env.v[i]);
	stackenv_enter(&b, &env);
	assert_same_env(&once, &env);
	stackenv_leave(&env);
	assert_same_env(&before, &env);
	stackenv_release(&a);
	stackenv_release(&b);
	strvec_release(&before);
	strvec_release(&env);
	strvec_release(&once);
}

static void test_leave_keeps_what_the_user_added_meanwhile(void **state)
{
	(void)state;
	struct strvec env = {0};
	struct stackenv a;
	user_env(&env);
	build(A, "a", &a);
	stackenv_enter(&a, &env);
	char *path = strdup(spawn_env_get(&env, "PATH"));
	char *more = NULL;
	assert_true(asprintf(&more, "/home/u/bin:%s", path) > 0);
	spawn_env_set(&env, "PATH", more);
	stackenv_leave(&env);
	assert_string_equal(spawn_env_get(&env, "PATH"),
	                    "/home/u/bin:/usr/local/bin:/usr/bin:/bin");
	/* LD_LIBRARY_PATH was unset before: unset again, not left empty. */
	assert_null(spawn_env_get(&env, "LD_LIBRARY_PATH"));
	/* Set but empty before: empty again. */
	assert_string_equal(spawn_env_get(&env, "XLA_FLAGS"), "");
	assert_string_equal(spawn_env_get(&env, "PYTHONHOME"), "/opt/py");
	free(path);
	free(more);
	stackenv_release(&a);
	strvec_release(&env);
}

static void test_a_directory_already_there_is_not_added_twice(void **state)
{
	(void)state;
	struct strvec env = {0};
	struct stackenv a;
	strvec_push(&env, "PATH=/usr/bin:/opt/tfprov/cuda/11.8.0/bin");
	build(A, "a", &a);
	stackenv_enter(&a, &env);
	assert_string_equal(spawn_env_get(&env, "PATH"),
	                    "/opt/tfprov/envs/tfa/bin:/usr/bin:/opt/tfprov/cuda/11.8.0/bin");
	assert_string_equal(spawn_env_get(&env, "_TFPROV_ADD_PATH"), "/opt/tfprov/envs/tfa/bin");
	stackenv_leave(&env);
	/* It was the user's: leaving keeps it. */
	assert_string_equal(spawn_env_get(&env, "PATH"), "/usr/bin:/opt/tfprov/cuda/11.8.0/bin");
	stackenv_release(&a);
	strvec_release(&env);
}

static void test_host_root_prefixes_every_path(void **state)
{
	(void)state;
	struct manifest *m = NULL;
	struct diags d = {0};
	struct stackenv se;
	assert_int_equal(manifest_load_shape("t.yaml", A, strlen(A), &m, &d), 0);
	stackenv_build(m, "a", "/srv/root", &se);
	for (size_t i = 0; i < se.n; i++)
		if (strcmp(se.v[i].name, "CUDA_HOME") == 0)
			assert_string_equal(se.v[i].value, "/srv/root/opt/tfprov/cuda/11.8.0");
	stackenv_release(&se);
	manifest_free(m);
	diags_release(&d);
}

static void test_a_manifest_may_not_set_the_markers(void **state)
{
	(void)state;
	const char *bad = "schema: 1\nstack:\n  name: a\n  platform: linux-x86_64\n"
	                  "versions:\n  tensorflow: 2.15.1\ndriver:\n  policy: skip\n"
	                  "env:\n  vars:\n    TFPROV_STACK: other\n";
	struct manifest *m = NULL;
	struct diags d = {0};
	assert_int_equal(manifest_load_buf("t.yaml", bad, strlen(bad), &m, &d), TF_EMANIFEST);
	assert_true(d.n >= 1);
	assert_non_null(strstr(d.v[0].msg, "TFPROV_STACK is tfprov's own variable"));
	diags_release(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_enter_sets_the_stack_and_leave_restores),
	    cmocka_unit_test(test_second_stack_replaces_the_first_and_twice_adds_nothing),
	    cmocka_unit_test(test_leave_keeps_what_the_user_added_meanwhile),
	    cmocka_unit_test(test_a_directory_already_there_is_not_added_twice),
	    cmocka_unit_test(test_host_root_prefixes_every_path),
	    cmocka_unit_test(test_a_manifest_may_not_set_the_markers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
