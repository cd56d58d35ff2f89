/*
 * wheelfmt.c - wheel file names and RECORD rows (python.h): the one
 * parser of each, shared by every reader and writer of wheels in tfprov.
 */
#include "python.h"
#include "python_int.h"

#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wheel_name_ok(const char *f)
{
	size_t n = strlen(f), dashes = 0;
	if (n < 5 || strcmp(f + n - 4, ".whl") != 0)
		return 0;
	for (size_t i = 0; i + 4 < n; i++) {
		if (f[i] == '-')
			dashes++;
		else if (!isalnum((unsigned char)f[i]) && !strchr("._+!", f[i]))
			return 0;
	}
	return dashes == 4 || dashes == 5;
}

int wheel_name_parse(const char *filename, struct wheel_name *out)
{
	memset(out, 0, sizeof(*out));
	if (!wheel_name_ok(filename))
		return -EINVAL;
	char *s = xstrndup(filename, strlen(filename) - 4), *part[6];
	size_t n = 0;
	for (char *p = s; n < 6; n++) {
		part[n] = p;
		p = strchr(p, '-');
		if (p == NULL) {
			n++;
			break;
		}
		*p++ = '\0';
	}
	out->raw = xstrdup(part[0]);
	out->name = pip_normalize_name(part[0]);
	out->version = xstrdup(part[1]);
	out->build = n == 6 ? xstrdup(part[2]) : NULL;
	out->py = xstrdup(part[n - 3]);
	out->abi = xstrdup(part[n - 2]);
	out->plat = xstrdup(part[n - 1]);
	free(s);
	return 0;
}

void wheel_name_release(struct wheel_name *w)
{
	free(w->name);
	free(w->raw);
	free(w->version);
	free(w->build);
	free(w->py);
	free(w->abi);
	free(w->plat);
	memset(w, 0, sizeof(*w));
}

void record_hash_encode(const char *hex, char out[RECORD_HASH_MAX])
{
	unsigned char md[32], b64[48];
	for (int i = 0; i < 32; i++) {
		unsigned v = 0;
		sscanf(hex + 2 * i, "%2x", &v);
		md[i] = (unsigned char)v;
	}
	int len = EVP_EncodeBlock(b64, md, 32);
	while (len > 0 && b64[len - 1] == '=')
		len--;
	for (int i = 0; i < len; i++)
		b64[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
	snprintf(out, RECORD_HASH_MAX, "sha256=%.*s", len, (char *)b64);
}

int record_hash_decode(const char *h, char hex[65])
{
	if (!str_starts_with(h, "sha256="))
		return -EINVAL;
	h += 7;
	size_t n = strlen(h);
	if (n != 43)
		return -EINVAL;
	char b64[45];
	for (size_t i = 0; i < n; i++)
		b64[i] = h[i] == '-' ? '+' : h[i] == '_' ? '/' : h[i];
	b64[43] = '=';
	b64[44] = '\0';
	unsigned char md[36];
	if (EVP_DecodeBlock(md, (const unsigned char *)b64, 44) != 33)
		return -EINVAL;
	hex_encode(md, 32, hex);
	return 0;
}

size_t record_fields(const char *line, char *f[3])
{
	size_t n = 0;
	const char *p = line;
	while (n < 3) {
		struct strbuf sb = STRBUF_INIT;
		if (*p == '"') {
			for (p++; *p; p++) {
				if (*p == '"' && p[1] == '"')
					strbuf_add(&sb, p++, 1);
				else if (*p == '"')
					break;
				else
					strbuf_add(&sb, p, 1);
			}
			if (*p == '"')
				p++;
		}
		size_t k = strcspn(p, ",\r\n");
		strbuf_add(&sb, p, k);
		p += k;
		f[n++] = strbuf_detach(&sb);
		if (*p != ',')
			break;
		p++;
	}
	return n;
}

/* Appends a CSV field, quoted when it holds a comma, a quote or a line break. */
static void csv_put(struct strbuf *sb, const char *field)
{
	if (strpbrk(field, ",\"\r\n") == NULL) {
		strbuf_adds(sb, field);
		return;
	}
	strbuf_adds(sb, "\"");
	for (const char *p = field; *p; p++)
		strbuf_adds(sb, *p == '"' ? "\"\"" : (char[]){*p, '\0'});
	strbuf_adds(sb, "\"");
}

void record_put_row(struct strbuf *sb, const char *path, const char *hash, const char *size)
{
	csv_put(sb, path);
	strbuf_addf(sb, ",%s,%s\r\n", hash, size);
}

int wheel_entry_compiles_early(const char *p)
{
	size_t n = strlen(p);
	const char *slash = strchr(p, '/');
	if (n <= 3 || strcmp(p + n - 3, ".py") != 0 || slash == NULL)
		return 0;
	size_t first = (size_t)(slash - p);
	return !(first > 5 && strncmp(p + first - 5, ".data", 5) == 0);
}

int wheel_glibc_floor(const char *filename)
{
	static const struct {
		const char *tag;
		int floor;
	} legacy[] = {{"manylinux1", 2005}, {"manylinux2010", 2012}, {"manylinux2014", 2017}};
	const char *dash = strrchr(filename, '-');
	int best = 0;
	if (!str_ends_with(filename, ".whl") || dash == NULL)
		return 0;
	char *plat = xstrndup(dash + 1, strlen(dash + 1) - 4);
	for (char *save = NULL, *t = strtok_r(plat, ".", &save); t;
	     t = strtok_r(NULL, ".", &save)) {
		int f = 0, maj = 0, min = 0;
		if (sscanf(t, "manylinux_%d_%d_", &maj, &min) == 2)
			f = maj * 1000 + min;
		for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]) && f == 0; i++)
			if (str_starts_with(t, legacy[i].tag) && t[strlen(legacy[i].tag)] == '_')
				f = legacy[i].floor;
		if (f && (best == 0 || f < best))
			best = f;
	}
	free(plat);
	return best;
}
