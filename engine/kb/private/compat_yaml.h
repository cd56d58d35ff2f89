/*
 * compat_yaml.h - the strict node reader of compat.yaml (compat_yaml.c),
 * shared by the table loaders of compat.c and nothing else.
 *
 * Every reader reports a mistake through kbl_bad() at the node's
 * line:column and sets L->bad; it returns NULL (or an empty list) then,
 * so a loader keeps going and the caller sees every mistake at once.
 * Strings are owned by kb->pool (kbl_own); arrays returned by
 * kbl_get_list, kbl_get_rows and kbl_get_table are the caller's to free.
 */
#ifndef TFPROV_COMPAT_YAML_H
#define TFPROV_COMPAT_YAML_H

#include <stddef.h>
#include <yaml.h>

#include "kb.h"

struct loader {
	yaml_document_t doc;
	struct compat *kb;
	const char *file;
	struct diags *d;
	int bad;
};

/* The `req` argument of the getters. */
enum { OPT = 0, REQ = 1 };

/* A copy of s[0..n) owned by kb->pool. */
const char *kbl_own(struct compat *kb, const char *s, size_t n);
struct pos kbl_npos(const yaml_node_t *n);
void kbl_bad(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
yaml_node_t *kbl_node_at(struct loader *L, int idx);
int kbl_is_scalar(const yaml_node_t *n, const char *s);
yaml_node_t *kbl_map_get(struct loader *L, const yaml_node_t *map, const char *key);
/* Reports keys of map that are not in allowed (NULL-terminated) and duplicates. */
void kbl_check_keys(struct loader *L, const yaml_node_t *map, const char *const *allowed);
yaml_node_t *kbl_get_node(struct loader *L, const yaml_node_t *map, const char *key,
                          yaml_node_type_t type, int required);
const char *kbl_scalar_str(struct loader *L, const yaml_node_t *n);
const char *kbl_get_str(struct loader *L, const yaml_node_t *map, const char *key, int req);
/* A version field: dotted digits ("12.3.2", "545.23.08"). */
const char *kbl_get_ver(struct loader *L, const yaml_node_t *map, const char *key, int req);
/* A list of scalars (a lone scalar counts as a list of one). */
const char **kbl_get_list(struct loader *L, const yaml_node_t *map, const char *key, size_t *n,
                          int req, int versions);
/* The mappings of the list `key`: the array of nodes and their count. */
yaml_node_t **kbl_get_rows(struct loader *L, const yaml_node_t *map, const char *key, size_t *n);
/*
 * The list `key` of map as a table: its mapping rows (*rows, freed by the caller),
 * each checked against row_keys, and a zeroed array of *n elements of size bytes
 * (one at least) for the caller to fill.
 */
void *kbl_get_table(struct loader *L, const yaml_node_t *map, const char *key,
                    const char *const *row_keys, size_t size, yaml_node_t ***rows, size_t *n);
/* The PEP 503 name (pip_normalize_name), owned by the knowledge base. */
const char *kbl_pep503(struct loader *L, const char *name);

#endif
