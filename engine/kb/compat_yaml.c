/*
 * compat_yaml.c - the strict reader of compat.yaml's nodes that the table
 * loaders of compat.c build on: typed lookups by key, checked key sets,
 * dotted versions, lists and tables, each mistake reported at its
 * line:column as compat.kb-invalid (see private/compat_yaml.h).
 */
#include "compat_yaml.h"
#include "error.h"
#include "version.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *kbl_own(struct compat *kb, const char *s, size_t n)
{
	char *copy = xstrndup(s, n);

	strvec_push(&kb->pool, copy);
	free(copy);
	return kb->pool.v[kb->pool.n - 1];
}

struct pos kbl_npos(const yaml_node_t *n)
{
	struct pos p = {(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
	return p;
}

void kbl_bad(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;
	struct pos p = {0, 0};
	char *msg;

	va_start(ap, fmt);
	msg = xvasprintf(fmt, ap);
	va_end(ap);
	if (n != NULL)
		p = kbl_npos(n);
	diags_add(L->d, DIAG_ERROR, L->file, p, "compat.kb-invalid",
	          "compat.yaml is tfprov's knowledge base; fix the data (see its header)", "%s",
	          msg);
	free(msg);
	L->bad = 1;
}

yaml_node_t *kbl_node_at(struct loader *L, int idx)
{
	return yaml_document_get_node(&L->doc, idx);
}

int kbl_is_scalar(const yaml_node_t *n, const char *s)
{
	size_t len = strlen(s);

	return n != NULL && n->type == YAML_SCALAR_NODE && n->data.scalar.length == len &&
	       memcmp(n->data.scalar.value, s, len) == 0;
}

yaml_node_t *kbl_map_get(struct loader *L, const yaml_node_t *map, const char *key)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		if (kbl_is_scalar(kbl_node_at(L, p->key), key))
			return kbl_node_at(L, p->value);
	}
	return NULL;
}

/* Reports keys of map that are not in allowed (NULL-terminated) and duplicates. */
void kbl_check_keys(struct loader *L, const yaml_node_t *map, const char *const *allowed)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = kbl_node_at(L, p->key);
		int ok = 0;

		if (k == NULL || k->type != YAML_SCALAR_NODE) {
			kbl_bad(L, k, "mapping keys must be scalars");
			continue;
		}
		for (const char *const *a = allowed; *a != NULL; a++)
			if (kbl_is_scalar(k, *a))
				ok = 1;
		if (!ok)
			kbl_bad(L, k, "unknown key '%.*s'", (int)k->data.scalar.length,
			        (const char *)k->data.scalar.value);
		for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *prev = kbl_node_at(L, q->key);
			if (prev != NULL && prev->type == YAML_SCALAR_NODE &&
			    prev->data.scalar.length == k->data.scalar.length &&
			    memcmp(prev->data.scalar.value, k->data.scalar.value,
			           k->data.scalar.length) == 0)
				kbl_bad(L, k, "duplicate key '%.*s'", (int)k->data.scalar.length,
				        (const char *)k->data.scalar.value);
		}
	}
}

yaml_node_t *kbl_get_node(struct loader *L, const yaml_node_t *map, const char *key,
                          yaml_node_type_t type, int required)
{
	static const char *const names[] = {"", "a scalar", "a list", "a mapping"};
	yaml_node_t *n = kbl_map_get(L, map, key);

	if (n == NULL) {
		if (required)
			kbl_bad(L, map, "missing key '%s'", key);
		return NULL;
	}
	if (n->type != type) {
		kbl_bad(L, n, "'%s' must be %s", key, names[type]);
		return NULL;
	}
	return n;
}

const char *kbl_scalar_str(struct loader *L, const yaml_node_t *n)
{
	return kbl_own(L->kb, (const char *)n->data.scalar.value, n->data.scalar.length);
}

const char *kbl_get_str(struct loader *L, const yaml_node_t *map, const char *key, int req)
{
	yaml_node_t *n = kbl_get_node(L, map, key, YAML_SCALAR_NODE, req);

	return n ? kbl_scalar_str(L, n) : NULL;
}

/* A version field: dotted digits ("12.3.2", "545.23.08"). */
const char *kbl_get_ver(struct loader *L, const yaml_node_t *map, const char *key, int req)
{
	yaml_node_t *n = kbl_get_node(L, map, key, YAML_SCALAR_NODE, req);
	const char *s;

	if (n == NULL)
		return NULL;
	s = kbl_scalar_str(L, n);
	if (!version_valid(s))
		kbl_bad(L, n, "'%s' must be a dotted version, not '%s'", key, s);
	return s;
}

/* A list of scalars (a lone scalar counts as a list of one). */
const char **kbl_get_list(struct loader *L, const yaml_node_t *map, const char *key, size_t *n,
                          int req, int versions)
{
	yaml_node_t *node = kbl_map_get(L, map, key);
	const char **v;
	size_t cnt, i = 0;

	*n = 0;
	if (node == NULL) {
		if (req)
			kbl_bad(L, map, "missing key '%s'", key);
		return NULL;
	}
	if (node->type == YAML_SCALAR_NODE) {
		v = xcalloc(1, sizeof(*v));
		v[0] = kbl_scalar_str(L, node);
		*n = 1;
		if (versions && !version_valid(v[0]))
			kbl_bad(L, node, "'%s' must be a dotted version, not '%s'", key, v[0]);
		return v;
	}
	if (node->type != YAML_SEQUENCE_NODE) {
		kbl_bad(L, node, "'%s' must be a list", key);
		return NULL;
	}
	cnt = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
	v = xcalloc(cnt ? cnt : 1, sizeof(*v));
	for (yaml_node_item_t *it = node->data.sequence.items.start;
	     it < node->data.sequence.items.top; it++) {
		yaml_node_t *e = kbl_node_at(L, *it);
		if (e == NULL || e->type != YAML_SCALAR_NODE) {
			kbl_bad(L, e, "'%s' must list scalars", key);
			continue;
		}
		v[i] = kbl_scalar_str(L, e);
		if (versions && !version_valid(v[i]))
			kbl_bad(L, e, "'%s' must list dotted versions, not '%s'", key, v[i]);
		i++;
	}
	*n = i;
	return v;
}

/* Iterates over the mappings of a list; returns the count and the array of nodes. */
yaml_node_t **kbl_get_rows(struct loader *L, const yaml_node_t *map, const char *key, size_t *n)
{
	yaml_node_t *seq = kbl_get_node(L, map, key, YAML_SEQUENCE_NODE, REQ);
	yaml_node_t **rows;
	size_t i = 0;

	*n = 0;
	if (seq == NULL)
		return NULL;
	rows = xcalloc((size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) + 1,
	               sizeof(*rows));
	for (yaml_node_item_t *it = seq->data.sequence.items.start;
	     it < seq->data.sequence.items.top; it++) {
		yaml_node_t *e = kbl_node_at(L, *it);
		if (e == NULL || e->type != YAML_MAPPING_NODE) {
			kbl_bad(L, e, "each entry of '%s' must be a mapping", key);
			continue;
		}
		rows[i++] = e;
	}
	*n = i;
	return rows;
}

/*
 * The list `key` of map as a table: its mapping rows (*rows, freed by the caller),
 * each checked against row_keys, and a zeroed array of *n elements of size bytes
 * (one at least) for the caller to fill.
 */
void *kbl_get_table(struct loader *L, const yaml_node_t *map, const char *key,
                    const char *const *row_keys, size_t size, yaml_node_t ***rows, size_t *n)
{
	*rows = kbl_get_rows(L, map, key, n);
	for (size_t i = 0; i < *n; i++)
		kbl_check_keys(L, (*rows)[i], row_keys);
	return xcalloc(*n ? *n : 1, size);
}

/* The PEP 503 name (pip_normalize_name), owned by the knowledge base. */
const char *kbl_pep503(struct loader *L, const char *name)
{
	char *norm = pip_normalize_name(name);
	const char *out = kbl_own(L->kb, norm, strlen(norm));
	free(norm);
	return out;
}
