/*
 * module.c - what the core provides to every step (module.h): action names,
 * the step kinds by name, step failures, and the prefixes a manifest's steps
 * share.
 */
#include "module.h"
#include "util.h"

#include "error.h"
#include "place.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *action_name(enum action a)
{
	static const char *names[] = {"noop", "create", "update", "replace", "delete", "read"};
	return names[a];
}

void step_fail(struct step *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	why_vfail(&s->why, s->why.code, fmt, ap);
	va_end(ap);
}

void step_fail_why(struct step *s, int rc, struct why *w)
{
	why_code(w, rc);
	step_fail(s, "%s", why_text(w));
	why_clear(w);
}

int step_foreign_clash(struct ctx *c, struct step *s, const char *addr, const struct manifest *m,
                       const char *prefix, const char *fix)
{
	char *other = NULL, *path = NULL;
	if (c->st == NULL)
		return 0;
	int rc = place_foreign_step_file(c, addr, m->stack.name.s, prefix, &other, &path);
	if (rc == 0 && path != NULL) {
		step_fail(s, "%s belongs to stack '%s' (e.g. %s): %s", prefix, other, path, fix);
		rc = TF_ECONFLICT;
	} else if (rc < 0) {
		step_fail(s, "cannot read the state: %s", tf_strerror(rc));
	}
	free(other);
	free(path);
	return rc;
}
