/*
 * yamltree.c - libyaml document -> owned tree with bounded alias expansion.
 *
 * Invariants:
 *  - the number of nodes created (aliases expanded) never exceeds
 *    lim->max_nodes, and the depth never exceeds lim->max_depth, so neither
 *    an alias bomb nor a self-referencing alias can hang or exhaust memory;
 *  - a mapping never holds two equal scalar keys (the second is an error at
 *    its own position).
 */
#include "yamltree.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

struct conv {
	const char *file;
	yaml_document_t *doc;
	const struct ytree_limits *lim;
	struct diags *d;
	size_t nodes;
	int failed;
};

static struct pos mark_pos(yaml_mark_t m)
{
	struct pos p = {(int)m.line + 1, (int)m.column + 1};
	return p;
}

struct keyref {
	const struct ynode *k;
	size_t idx;
};

static int keyref_cmp(const void *pa, const void *pb)
{
	const struct keyref *a = pa, *b = pb;
	int c = strcmp(a->k->str, b->k->str);
	if (c)
		return c;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Duplicate keys of one mapping, in O(n log n): a mapping may have 100k keys. */
static void check_duplicates(struct conv *cv, const struct ynode *map)
{
	struct keyref *refs = xcalloc(map->n ? map->n : 1, sizeof(*refs));
	size_t n = 0;
	for (size_t i = 0; i < map->n; i++)
		if (map->keys[i] && map->keys[i]->type == Y_SCALAR)
			refs[n++] = (struct keyref){map->keys[i], i};
	if (n > 1)
		qsort(refs, n, sizeof(*refs), keyref_cmp);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(refs[i].k->str, refs[i - 1].k->str) != 0)
			continue;
		/* refs[i - 1] is the first of a run of equal keys only when it starts it. */
		size_t first = i - 1;
		while (first > 0 && strcmp(refs[first - 1].k->str, refs[i].k->str) == 0)
			first--;
		diags_add(cv->d, DIAG_ERROR, cv->file, refs[i].k->pos, "yaml.duplicate-key",
		          "YAML keeps only one of them; remove or merge the other",
		          "duplicate key '%s' (first defined at line %d)", refs[i].k->str,
		          refs[first].k->pos.line);
		if (cv->d->errors > 100)
			break;
	}
	free(refs);
}

/*
 * libyaml's handling of deeply nested flow collections ("[[[[...") is
 * quadratic, so the depth bound is enforced on the raw text before libyaml
 * sees it: count [ and { outside quotes and comments.
 */
static int flow_depth_ok(const char *file, const char *buf, size_t len, unsigned max,
                         struct diags *d)
{
	unsigned depth = 0;
	int line = 1, col = 0;
	char quote = 0;
	int comment = 0;
	for (size_t i = 0; i < len; i++) {
		char ch = buf[i];
		col++;
		if (ch == '\n') {
			line++;
			col = 0;
			comment = 0;
			continue;
		}
		if (comment)
			continue;
		if (quote) {
			if (ch == quote)
				quote = 0;
			continue;
		}
		if (ch == '#' &&
		    (i == 0 || buf[i - 1] == ' ' || buf[i - 1] == '\t' || buf[i - 1] == '\n')) {
			comment = 1;
		} else if ((ch == '"' || ch == '\'') &&
		           (depth > 0 || i == 0 || strchr(" :-[{,\t\n", buf[i - 1]))) {
			quote = ch;
		} else if (ch == '[' || ch == '{') {
			if (++depth > max) {
				diags_add(d, DIAG_ERROR, file, (struct pos){line, col},
				          "yaml.too-deep", "a manifest is a few levels deep",
				          "document nests deeper "
				          "than %u levels",
				          max);
				return 0;
			}
		} else if ((ch == ']' || ch == '}') && depth > 0) {
			depth--;
		}
	}
	return 1;
}

static struct ynode *convert(struct conv *cv, yaml_node_t *yn, unsigned depth)
{
	if (cv->failed)
		return NULL;
	if (++cv->nodes > cv->lim->max_nodes) {
		diags_add(cv->d, DIAG_ERROR, cv->file, mark_pos(yn->start_mark), "yaml.too-large",
		          "anchors and aliases (&a / *a) can multiply a small file; write the "
		          "values out",
		          "document expands to more than %zu nodes", cv->lim->max_nodes);
		cv->failed = 1;
		return NULL;
	}
	if (depth > cv->lim->max_depth) {
		diags_add(cv->d, DIAG_ERROR, cv->file, mark_pos(yn->start_mark), "yaml.too-deep",
		          "a manifest is a few levels deep; an alias that refers to itself "
		          "nests forever",
		          "document nests deeper than %u levels", cv->lim->max_depth);
		cv->failed = 1;
		return NULL;
	}
	struct ynode *n = xcalloc(1, sizeof(*n));
	n->pos = mark_pos(yn->start_mark);
	if (yn->tag)
		n->tag = xstrdup((const char *)yn->tag);
	switch (yn->type) {
	case YAML_SCALAR_NODE:
		n->type = Y_SCALAR;
		n->len = yn->data.scalar.length;
		n->str = xstrndup((const char *)yn->data.scalar.value, n->len);
		switch (yn->data.scalar.style) {
		case YAML_SINGLE_QUOTED_SCALAR_STYLE:
		case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
			n->style = YS_QUOTED;
			break;
		case YAML_LITERAL_SCALAR_STYLE:
			n->style = YS_LITERAL;
			break;
		case YAML_FOLDED_SCALAR_STYLE:
			n->style = YS_FOLDED;
			break;
		default:
			n->style = YS_PLAIN;
			break;
		}
		break;
	case YAML_SEQUENCE_NODE: {
		n->type = Y_SEQ;
		size_t cnt = (size_t)(yn->data.sequence.items.top - yn->data.sequence.items.start);
		n->items = xcalloc(cnt, sizeof(*n->items));
		for (size_t i = 0; i < cnt && !cv->failed; i++) {
			yaml_node_t *c =
			    yaml_document_get_node(cv->doc, yn->data.sequence.items.start[i]);
			n->items[n->n++] = convert(cv, c, depth + 1);
		}
		break;
	}
	case YAML_MAPPING_NODE: {
		n->type = Y_MAP;
		size_t cnt = (size_t)(yn->data.mapping.pairs.top - yn->data.mapping.pairs.start);
		n->items = xcalloc(cnt, sizeof(*n->items));
		n->keys = xcalloc(cnt, sizeof(*n->keys));
		for (size_t i = 0; i < cnt && !cv->failed; i++) {
			yaml_node_pair_t *pr = &yn->data.mapping.pairs.start[i];
			struct ynode *k =
			    convert(cv, yaml_document_get_node(cv->doc, pr->key), depth + 1);
			struct ynode *v =
			    convert(cv, yaml_document_get_node(cv->doc, pr->value), depth + 1);
			n->keys[n->n] = k;
			n->items[n->n] = v;
			n->n++;
		}
		check_duplicates(cv, n);
		break;
	}
	default:
		n->type = Y_SCALAR;
		n->str = xstrdup("");
		break;
	}
	return n;
}

/* Whether 1-based `line` of buf holds a tab in its indentation. */
static int line_has_tab(const char *buf, size_t len, int line)
{
	size_t i = 0;
	for (int l = 1; l < line && i < len; i++)
		if (buf[i] == '\n')
			l++;
	for (; i < len && (buf[i] == ' ' || buf[i] == '\t'); i++)
		if (buf[i] == '\t')
			return 1;
	return 0;
}

struct ynode *ytree_parse(const char *file, const char *buf, size_t len,
                          const struct ytree_limits *lim, struct diags *d, int *empty)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	struct ynode *root = NULL;
	size_t errors_before = d->errors;

	*empty = 0;
	if (!flow_depth_ok(file, buf, len, lim->max_depth, d))
		return NULL;
	if (!yaml_parser_initialize(&parser)) {
		diags_add(d, DIAG_ERROR, file, (struct pos){0, 0}, "yaml.init", NULL,
		          "cannot initialise the YAML parser");
		return NULL;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	if (!yaml_parser_load(&parser, &doc)) {
		struct pos p = {(int)parser.problem_mark.line + 1,
		                (int)parser.problem_mark.column + 1};
		const char *hint = NULL;
		if (parser.error == YAML_READER_ERROR) {
			p.line = 0;
			hint = "a manifest must be UTF-8 text";
		} else if (line_has_tab(buf, len, p.line)) {
			hint = "indent with spaces, not tabs";
		} else {
			hint = "check the indentation and the quoting near this position";
		}
		diags_add(d, DIAG_ERROR, file, p, "yaml.syntax", hint, "%s%s%s",
		          parser.problem ? parser.problem : "invalid YAML",
		          parser.context ? " " : "", parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		return NULL;
	}
	yaml_node_t *yroot = yaml_document_get_root_node(&doc);
	if (yroot == NULL) {
		*empty = 1;
		goto out;
	}
	struct conv cv = {file, &doc, lim, d, 0, 0};
	root = convert(&cv, yroot, 0);
	if (cv.failed || d->errors > errors_before) {
		ytree_free(root);
		root = NULL;
	}
	/* A second document in the stream is almost certainly a mistake. */
	if (root != NULL) {
		yaml_document_t doc2;
		if (yaml_parser_load(&parser, &doc2)) {
			yaml_node_t *r2 = yaml_document_get_root_node(&doc2);
			if (r2 != NULL) {
				diags_add(d, DIAG_ERROR, file, mark_pos(r2->start_mark),
				          "yaml.multiple-documents",
				          "a manifest is a single YAML document; remove the '---'",
				          "more than one document in the file");
				ytree_free(root);
				root = NULL;
			}
			yaml_document_delete(&doc2);
		}
	}
out:
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return root;
}

void ytree_free(struct ynode *n)
{
	if (n == NULL)
		return;
	for (size_t i = 0; i < n->n; i++) {
		if (n->keys)
			ytree_free(n->keys[i]);
		ytree_free(n->items[i]);
	}
	free(n->keys);
	free(n->items);
	free(n->str);
	free(n->tag);
	free(n);
}

struct ynode *ymap_get(const struct ynode *map, const char *key)
{
	if (map == NULL || map->type != Y_MAP)
		return NULL;
	for (size_t i = 0; i < map->n; i++) {
		const struct ynode *k = map->keys[i];
		if (k && k->type == Y_SCALAR && strcmp(k->str, key) == 0)
			return map->items[i];
	}
	return NULL;
}
