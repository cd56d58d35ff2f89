/*
 * fuzz_unpack.c - libFuzzer target for the unpack path: any bytes, as an
 * archive of any format libarchive detects, are unpacked into a fresh
 * directory under a private temp root. Whatever the archive says, nothing may
 * be written outside that directory; the check is that the temp root holds
 * nothing but the destination afterwards. The first byte picks the entry
 * point: odd, the conda package path (a .conda container: a zip of inner
 * tar.zst members, the path conda.c takes); 2 (mod 4), the wheel path (a zip
 * shared out over three decoders, libzip + libdeflate: unpack_zip_parallel);
 * 0 (mod 4), the artifact path.
 */
#include "ctx.h"
#include "fs.h"
#include "artifact.h"
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char base[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (base[0] == '\0') {
		snprintf(base, sizeof(base), "/tmp/tfprov-fuzz-unpack-XXXXXX");
		if (mkdtemp(base) == NULL)
			abort();
	}
	int conda = size > 0 && (data[0] & 1);
	int wheel = size > 0 && !conda && (data[0] & 2);
	if (size > 0) {
		data++;
		size--;
	}
	char *arch = xasprintf("%s/in.bin", base);
	char *dest = xasprintf("%s/out", base);
	int fd = open(arch, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	close(fd);
	struct ctx c;
	memset(&c, 0, sizeof(c));
	c.rootfd = -1;
	c.flags = CTX_QUIET;
	c.root = (char *)"/";
	struct unpack_result res;
	struct why err = {0};
	if (conda)
		unpack_conda_package(&c, arch, 1, dest, &res, &err);
	else if (wheel)
		unpack_zip_parallel(&c, arch, dest, 3, NULL, NULL, &res, &err);
	else
		unpack_archive(&c, arch, dest, 0, &res, &err);
	unpack_result_release(&res);
	why_clear(&err);
	fs_rmtree(dest);
	unlink(arch);
	/* Nothing may have escaped next to the destination. */
	DIR *d = opendir(base);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			abort();
	if (d)
		closedir(d);
	free(arch);
	free(dest);
	return 0;
}
