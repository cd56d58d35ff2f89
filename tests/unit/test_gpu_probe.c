/*
 * test_gpu_probe.c - the text parsers behind the driver probe's fallbacks:
 * /proc/driver/nvidia/version in the closed and open kernel module formats,
 * and WSL recognition from /proc/version.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>

#include "gpu.h"
#include "gpu_int.h"

static void test_closed_module(void **state)
{
	char v[32];

	(void)state;
	assert_int_equal(gpu_probe_parse_procfs("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
	                                        "535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
	                                        "GCC version:  gcc version 12.2.0\n",
	                                        v, sizeof(v)),
	                 0);
	assert_string_equal(v, "535.104.05");
	/* Two-component versions exist (455.32). */
	assert_int_equal(gpu_probe_parse_procfs("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
	                                        "455.32  Wed Oct 28 2020\n",
	                                        v, sizeof(v)),
	                 0);
	assert_string_equal(v, "455.32");
}

static void test_open_module_and_arm(void **state)
{
	char v[32];

	(void)state;
	assert_int_equal(gpu_probe_parse_procfs("NVRM version: NVIDIA UNIX Open Kernel Module for "
	                                        "x86_64  560.35.03  Release Build  "
	                                        "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 2024\n",
	                                        v, sizeof(v)),
	                 0);
	assert_string_equal(v, "560.35.03");
	assert_int_equal(gpu_probe_parse_procfs("NVRM version: NVIDIA UNIX Open Kernel Module for "
	                                        "aarch64  570.124.06  Release Build\n",
	                                        v, sizeof(v)),
	                 0);
	assert_string_equal(v, "570.124.06");
}

static void test_rejects(void **state)
{
	char v[32], tiny[4];

	(void)state;
	assert_int_equal(gpu_probe_parse_procfs("", v, sizeof(v)), -ENOENT);
	assert_int_equal(gpu_probe_parse_procfs("GCC version: gcc version 12.2.0\n", v, sizeof(v)),
	                 -ENOENT);
	/* The GCC line's version must not be taken for the driver's. */
	assert_int_equal(
	    gpu_probe_parse_procfs("NVRM version: unknown\nGCC version: 12.2.0\n", v, sizeof(v)),
	    -ENOENT);
	assert_int_equal(
	    gpu_probe_parse_procfs("NVRM version: Kernel Module 535.104.05\n", tiny, sizeof(tiny)),
	    -ERANGE);
}

static void test_wsl_kernel(void **state)
{
	(void)state;
	assert_true(gpu_probe_is_wsl_kernel("Linux version 5.15.153.1-microsoft-standard-WSL2"));
	assert_true(gpu_probe_is_wsl_kernel("Linux version 4.4.0-19041-Microsoft"));
	assert_false(gpu_probe_is_wsl_kernel("Linux version 6.1.0-18-amd64 (Debian)"));
	assert_false(gpu_probe_is_wsl_kernel(NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_closed_module),
	    cmocka_unit_test(test_open_module_and_arm),
	    cmocka_unit_test(test_rejects),
	    cmocka_unit_test(test_wsl_kernel),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
