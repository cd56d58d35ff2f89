/*
 * sbom.c - `tfprov sbom STACK | --all [--files] [--format cyclonedx-json]
 * [-o FILE]`: the stack's bill of materials (engine/run/sbom.c builds it
 * from the state). The document goes to stdout or, with -o, to FILE
 * (atomically). --all writes a JSON array of the per-stack documents, each
 * the same bytes `sbom STACK` writes for it, so a collector can split them.
 * The timestamp is SOURCE_DATE_EPOCH's when it is set (the reproducible-builds
 * convention), else now.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "sbom.h"
#include "state.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SBOM_USAGE                                                                                 \
	"usage: tfprov sbom STACK | tfprov sbom --all  [--files] [--format cyclonedx-json] [-o "   \
	"FILE]"

/* SOURCE_DATE_EPOCH, else now; TF_EUSAGE (said) when it is not a number of seconds. */
static int sbom_epoch(struct ctx *c, int64_t *out)
{
	const char *s = getenv("SOURCE_DATE_EPOCH");
	if (s == NULL || s[0] == '\0') {
		*out = now_unix();
		return 0;
	}
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < 0 || v > 253402300799LL) {
		ev_log(c, EV_ERROR, "SOURCE_DATE_EPOCH '%s' is not a number of seconds since 1970",
		       s);
		return TF_EUSAGE;
	}
	*out = v;
	return 0;
}

static int sbom_one(struct ctx *c, const char *name, int64_t epoch, unsigned flags, json_t **out)
{
	struct why err = {0};
	int rc = sbom_build(c, name, TFPROV_VERSION, epoch, flags, out, &err);
	if (rc == -ENOENT) {
		ev_log(c, EV_ERROR, "no stack named '%s' under %s", name, c->root);
		rc = TF_EFAIL;
	} else if (rc != 0) {
		ev_log(c, EV_ERROR, "sbom %s: %s", name, why_text(&err));
	}
	why_clear(&err);
	return rc;
}

int cli_sbom_write(struct ctx *c, const char *stack, int64_t epoch, const char *host_path)
{
	json_t *doc = NULL;
	int rc = sbom_one(c, stack, epoch, 0, &doc);
	if (rc != 0)
		return rc;
	char *text = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(2));
	struct strbuf b = STRBUF_INIT;
	strbuf_addf(&b, "%s\n", text);
	rc = cli_write_file(c, host_path, b.buf, 0644, 0);
	strbuf_release(&b);
	free(text);
	json_decref(doc);
	return rc;
}

int cmd_sbom(struct ctx *c, struct opts *o)
{
	json_t *doc = NULL;
	char *text = NULL;
	struct strvec names = STRVEC_INIT;
	unsigned flags = o->files ? SBOM_FILES : 0;
	int64_t epoch = 0;
	int rc = 0;
	if (o->format && strcmp(o->format, "cyclonedx-json") != 0) {
		ev_log(c, EV_ERROR,
		       "unknown --format '%s': tfprov writes cyclonedx-json (CycloneDX 1.6)",
		       o->format);
		rc = TF_EUSAGE;
		goto out;
	}
	if ((o->all && o->args.n != 0) || (!o->all && o->args.n != 1)) {
		ev_log(c, EV_ERROR, "%s", SBOM_USAGE);
		rc = TF_EUSAGE;
		goto out;
	}
	rc = sbom_epoch(c, &epoch);
	if (rc != 0)
		goto out;
	if (c->st == NULL) {
		ev_log(c, EV_ERROR, "no state under %s: nothing was applied there", c->root);
		rc = TF_EFAIL;
		goto out;
	}
	if (o->all) {
		rc = state_stack_names(c->st, &names);
		if (rc != 0)
			goto out;
		doc = json_array();
		for (size_t i = 0; i < names.n && rc == 0; i++) {
			json_t *one = NULL;
			rc = sbom_one(c, names.v[i], epoch, flags, &one);
			if (rc == 0)
				json_array_append_new(doc, one);
		}
	} else {
		rc = sbom_one(c, o->args.v[0], epoch, flags, &doc);
	}
	if (rc != 0)
		goto out;
	text = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(2));
	if (o->out) {
		struct strbuf b = STRBUF_INIT;
		strbuf_addf(&b, "%s\n", text);
		rc = cli_write_file(c, o->out, b.buf, 0644, 0);
		strbuf_release(&b);
	} else if (c->flags & CTX_JSON) {
		ev_data(c, "sbom", doc); /* one JSON object per line, as every --json output */
	} else {
		fputs(text, stdout);
		fputc('\n', stdout);
		if (fflush(stdout) != 0)
			rc = TF_EIO;
	}
out:
	free(text);
	json_decref(doc);
	strvec_release(&names);
	return rc;
}
