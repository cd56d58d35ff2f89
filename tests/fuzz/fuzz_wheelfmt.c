/*
 * fuzz_wheelfmt.c - libFuzzer target for the wheel-name parser and the RECORD
 * codec (engine/python/python.h, wheelfmt): each line of the input is read as a wheel file
 * name (from a mirror's listing or an index page) and as a RECORD row (from
 * an env anyone may have written). A parsed name must be a valid one with a
 * normalised project; a row's path must survive record_put_row and
 * record_fields unchanged; a hash that decodes must encode back to itself
 * once decoded. Never a crash, a hang or a leak.
 */
#include "util.h"
#include "python.h"
#include "python_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void one_line(const char *line)
{
	struct wheel_name wn;
	if (wheel_name_parse(line, &wn) == 0) {
		if (!wheel_name_ok(line) || !wn.name || !wn.version || !wn.py || !wn.abi ||
		    !wn.plat || strpbrk(wn.name, "_.ABCDEFGHIJKLMNOPQRSTUVWXYZ") != NULL)
			abort();
	}
	wheel_name_release(&wn);

	char *f[3] = {NULL, NULL, NULL};
	size_t n = record_fields(line, f);
	if (n < 1 || n > 3)
		abort();
	char hex[65], again[65], b64[RECORD_HASH_MAX];
	if (n > 1 && record_hash_decode(f[1], hex) == 0) {
		record_hash_encode(hex, b64);
		if (record_hash_decode(b64, again) != 0 || strcmp(hex, again) != 0)
			abort();
	}
	struct strbuf sb = STRBUF_INIT;
	record_put_row(&sb, f[0], "", "");
	char *g[3] = {NULL, NULL, NULL};
	size_t m = record_fields(sb.buf, g);
	if (m != 3 || strcmp(g[0], f[0]) != 0)
		abort();
	for (size_t i = 0; i < m; i++)
		free(g[i]);
	strbuf_release(&sb);
	for (size_t i = 0; i < n; i++)
		free(f[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = xstrndup((const char *)data, size);
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		one_line(line);
	}
	free(text);
	return 0;
}
