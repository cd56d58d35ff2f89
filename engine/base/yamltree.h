/*
 * yamltree.h - a YAML document as a small owned tree, built with libyaml.
 *
 * Why not use libyaml's document API directly: aliases there point at shared
 * nodes, so a walk of a "billion laughs" document is exponential. yamltree
 * expands aliases while counting nodes and refuses a document whose expansion
 * exceeds a bound, and it records duplicate keys as errors. Every node keeps
 * its 1-based line and column.
 *
 * The tree owns all its memory; ytree_free() releases it.
 */
#ifndef TFPROV_YAMLTREE_H
#define TFPROV_YAMLTREE_H

#include <stddef.h>

#include "diag.h"

enum ynode_type { Y_SCALAR, Y_SEQ, Y_MAP };

enum yscalar_style { YS_PLAIN, YS_QUOTED, YS_LITERAL, YS_FOLDED };

struct ynode {
	enum ynode_type type;
	struct pos pos;
	char *tag;
	/* Y_SCALAR */
	char *str;
	size_t len;
	enum yscalar_style style;
	/* Y_SEQ: items; Y_MAP: keys[i] -> items[i] */
	struct ynode **keys;
	struct ynode **items;
	size_t n;
};

struct ytree_limits {
	size_t max_nodes;
	unsigned max_depth;
};

/*
 * Parses one YAML document. Returns the root (NULL for an empty document, in
 * which case *empty is set) or NULL with errors in d.
 */
struct ynode *ytree_parse(const char *file, const char *buf, size_t len,
                          const struct ytree_limits *lim, struct diags *d, int *empty);
void ytree_free(struct ynode *n);
/* Looks up a key in a mapping; NULL when absent. */
struct ynode *ymap_get(const struct ynode *map, const char *key);

#endif
