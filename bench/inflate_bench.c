/*
 * inflate_bench.c - zlib against libdeflate on a wheel's entries.
 *
 * Each file named on the command line is deflated alone, as a wheel stores
 * it (raw deflate, zlib level 6, what zipfile and bdist_wheel write), then
 * inflated `runs` times by each library: zlib streaming through 64 KiB
 * output buffers (as libarchive reads a zip entry) and libdeflate in one
 * call into a buffer of the entry's size (its only mode). The figure is
 * CPU time of this thread (CLOCK_THREAD_CPUTIME_ID), the minimum over runs,
 * so that other jobs on a shared machine distort it less than wall time;
 * both are per class of file (by name: *.so*, *.py, *.h, other) and in all.
 *
 *   cc -O2 -o inflate_bench bench/inflate_bench.c -lz -ldeflate
 *   ./inflate_bench RUNS FILE...
 */
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
	*n = fread(b, 1, (size_t)len, f);
	fclose(f);
	return b;
}

static int cls(const char *p)
{
	const char *b = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
	size_t n = strlen(b);
	if (strstr(b, ".so"))
		return 0;
	if (n > 3 && strcmp(b + n - 3, ".py") == 0)
		return 1;
	if (n > 2 && strcmp(b + n - 2, ".h") == 0)
		return 2;
	return 3;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s RUNS FILE...\n", argv[0]);
		return 2;
	}
	int runs = atoi(argv[1]);
	static const char *names[] = {"shared objects", "python modules", "headers", "other"};
	double tz[4] = {0}, td[4] = {0};
	size_t raw[4] = {0}, comp[4] = {0}, cnt[4] = {0};
	unsigned char *out64 = malloc(1 << 16);
	struct libdeflate_decompressor *dd = libdeflate_alloc_decompressor();
	for (int i = 2; i < argc; i++) {
		size_t n = 0;
		unsigned char *in = slurp(argv[i], &n);
		if (!in || n == 0) {
			free(in);
			continue;
		}
		uLongf cap = compressBound((uLong)n) + 64;
		unsigned char *c = malloc(cap);
		z_stream zs = {0};
		deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
		zs.next_in = in;
		zs.avail_in = (uInt)n;
		zs.next_out = c;
		zs.avail_out = (uInt)cap;
		deflate(&zs, Z_FINISH);
		size_t clen = zs.total_out;
		deflateEnd(&zs);
		unsigned char *out = malloc(n);
		double bz = 1e9, bd = 1e9;
		for (int r = 0; r < runs; r++) {
			double t0 = cpu_now();
			z_stream is = {0};
			inflateInit2(&is, -15);
			is.next_in = c;
			is.avail_in = (uInt)clen;
			size_t got = 0;
			int rc;
			do {
				is.next_out = out64;
				is.avail_out = 1 << 16;
				rc = inflate(&is, Z_NO_FLUSH);
				got += (1 << 16) - is.avail_out;
			} while (rc == Z_OK);
			inflateEnd(&is);
			double t1 = cpu_now();
			size_t actual = 0;
			enum libdeflate_result lr =
			    libdeflate_deflate_decompress(dd, c, clen, out, n, &actual);
			double t2 = cpu_now();
			if (rc != Z_STREAM_END || got != n || lr != LIBDEFLATE_SUCCESS ||
			    actual != n || memcmp(out, in, n) != 0) {
				fprintf(stderr, "%s: round trip failed\n", argv[i]);
				return 1;
			}
			bz = t1 - t0 < bz ? t1 - t0 : bz;
			bd = t2 - t1 < bd ? t2 - t1 : bd;
		}
		int k = cls(argv[i]);
		tz[k] += bz;
		td[k] += bd;
		raw[k] += n;
		comp[k] += clen;
		cnt[k]++;
		free(in);
		free(c);
		free(out);
	}
	printf("| class | files | raw MB | ratio | zlib MB/s | libdeflate MB/s | speed-up |\n");
	printf("|---|---|---|---|---|---|---|\n");
	double az = 0, ad = 0;
	size_t ar = 0, ac = 0, an = 0;
	for (int k = 0; k < 4; k++) {
		if (!cnt[k])
			continue;
		printf("| %s | %zu | %.1f | %.3f | %.0f | %.0f | %.2fx |\n", names[k], cnt[k],
		       raw[k] / 1e6, (double)comp[k] / (double)raw[k], raw[k] / 1e6 / tz[k],
		       raw[k] / 1e6 / td[k], tz[k] / td[k]);
		az += tz[k], ad += td[k], ar += raw[k], ac += comp[k], an += cnt[k];
	}
	printf("| all | %zu | %.1f | %.3f | %.0f | %.0f | %.2fx |\n", an, ar / 1e6,
	       (double)ac / (double)ar, ar / 1e6 / az, ar / 1e6 / ad, az / ad);
	libdeflate_free_decompressor(dd);
	free(out64);
	return 0;
}
