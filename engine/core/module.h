/*
 * module.h - the contract every step kind implements (ARCHITECTURE.md section 3).
 *
 * The planner asks each module, in dependency order, for the desired
 * configuration of its resource (a canonical text whose sha256 is compared
 * with the one recorded at the last apply), then decides noop / create /
 * update / replace / delete, adding a repair when recorded files drifted.
 * apply() writes only through the txn (place.h); it never prints: it emits
 * events.
 */
#ifndef TFPROV_MODULE_H
#define TFPROV_MODULE_H

#include "ctx.h"
#include "error.h"
#include "manifest.h"
#include "place.h"
#include "util.h"

/* What a step does; action_name() is the word a plan shows ("update", "delete" ...). */
enum action { ACT_NOOP, ACT_CREATE, ACT_CHANGE, ACT_REPLACE, ACT_DESTROY, ACT_READ };

struct step;
struct artset;
struct prepared;

/* Whether the manifest has a step's resource: a result, not an error. */
enum desire { DESIRE_NONE, DESIRE_WANTED };

struct module {
	const char *kind;
	/*
	 * Describes the resource the manifest wants: canonical text (hashed into
	 * the desired digest), a one-line detail for the plan, and the URLs the
	 * step would fetch. DESIRE_NONE (nothing filled) when the manifest has
	 * no such resource.
	 */
	enum desire (*desire)(struct ctx *c, const struct manifest *m, struct strbuf *canon,
	                      struct strbuf *detail, struct strvec *urls);
	/* Precondition before anything changes (driver); NULL when none. 0 or TF_E*. */
	int (*precheck)(struct ctx *c, const struct manifest *m, struct step *s);
	/*
	 * Makes the resource match; writes through t only. `prep` is what the
	 * executor prepared from this step's own `artifacts` hook (artifact.h:
	 * each download verified in the cache and, where decode-ahead ran, its
	 * decoded tree); the step takes what it needs out of it and never calls
	 * its hook again. 0 or TF_E* (s->why set).
	 */
	int (*apply)(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
	             struct prepared *prep);
	/*
	 * Removes what the step installed that is not in the files table (pip's
	 * distributions, from their RECORDs) before the recorded files go
	 * (destroy, or the step left the manifest); NULL when none.
	 */
	int (*remove)(struct ctx *c, struct step *s, struct txn *t);
	/*
	 * Adds the artifacts the step downloads to `out` (resolving a pinned
	 * redistrib JSON, which is fetched and verified into the cache), so the
	 * executor can fetch and verify every download of a plan before the
	 * first step changes anything. NULL when the step downloads nothing it
	 * can name up front. The executor hands what it added, verified and
	 * decoded, to the step's apply (struct prepared). 0 or TF_E* (s->why set).
	 */
	int (*artifacts)(struct ctx *c, const struct manifest *m, struct artset *out,
	                 struct step *s);
	/* Re-apply this step when that step changes (cuDNN merged into a rebuilt CUDA). */
	const char *depends_on;
	/*
	 * What this step places is the stack's activation (the env step's
	 * activate.sh, which the login script and the envs' hooks source): the
	 * executor applies it after every other step of the generation has
	 * committed, so a run that fails or is killed before then leaves login
	 * shells exactly as they were.
	 */
	int activates;
	/*
	 * Reads the step's own attrs (what apply recorded in s->attrs) for
	 * those who never parse them (the front end, the planner, the env's
	 * file index): *listed 1 with *n the number of distributions the step
	 * installed (pip) and, when `names` is not NULL, their PEP 503 names
	 * pushed to it; *listed 0 when the attrs name none. 0 or TF_ESTATE
	 * (attrs that do not parse). NULL: installs none.
	 */
	int (*installed)(const char *attrs, struct strvec *names, int *listed, int64_t *n);
	/*
	 * Drift that no recorded file shows (pip: the env's distributions, their
	 * .dist-info set and each one's stamp, against what its attrs recorded):
	 * one line per difference pushed to `found` ("numpy 1.26.4 removed").
	 * Reads only; cheap enough for status and plan (one lstat per file of
	 * the env's distributions). 0 or TF_E*. NULL: none.
	 */
	int (*drift)(struct ctx *c, int64_t stack_id, const char *attrs, struct strvec *found);
	/*
	 * The step's files were rewritten in place on purpose (an image build
	 * relocates a venv: shebangs, .pyc, mtimes): *out is its attrs with what
	 * they say about those files taken again from the disk (pip: each
	 * distribution's stamp), so the drift hook finds nothing. *out malloc'd.
	 * 0 or TF_E*. NULL: the attrs say nothing about the files.
	 */
	int (*restamp)(struct ctx *c, int64_t stack_id, const char *attrs, char **out);
};

struct step {
	const struct module *mod;
	const char *addr;
	enum action action;
	char desired[65];
	char *detail;
	char *reason;   /* why it is not a noop */
	char *blocker;  /* plan: the precondition that would stop apply */
	int blocker_rc; /* its error (TF_E*), 0 when none */
	struct strvec urls;
	int64_t res_id; /* recorded resource, 0 when none */
	int64_t nfiles; /* recorded files */
	int drift_missing, drift_changed;
	struct why why; /* set by apply on failure (step_fail), its code by the executor */
	char *attrs;    /* JSON recorded with the resource (e.g. what pip installed) */
};

extern const struct module module_driver;
extern const struct module module_cuda;
extern const struct module module_cudnn;
extern const struct module module_env;
extern const struct module module_pyenv;
extern const struct module module_pip;

/* In dependency order. The registry (modules[], module_find, module_installed)
 * is modules/registry.c's: the steps sit above this contract, so only the
 * rooms above them (engine/run/, cli/) may call these. */
extern const struct module *const modules[];
extern const size_t nmodules;

const char *action_name(enum action a);
/* The step kind `kind`, NULL when there is none. */
const struct module *module_find(const char *kind);
/* Step kind `kind`'s answer from its recorded attrs (the installed hook): *listed 0 when it
 * has none. 0 or TF_ESTATE. */
int module_installed(const char *kind, const char *attrs, struct strvec *names, int *listed,
                     int64_t *n);
/* Step kind `kind`'s drift hook on its recorded attrs; 0 and nothing found when it has none. */
int module_drift(struct ctx *c, const char *kind, int64_t stack_id, const char *attrs,
                 struct strvec *found);
/* Step kind `kind`'s restamp hook: *out its new attrs, or NULL when it has none. 0 or TF_E*. */
int module_restamp(struct ctx *c, const char *kind, int64_t stack_id, const char *attrs,
                   char **out);
/* The step's failure, in words (s->why). */
void step_fail(struct step *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The step failed with rc for the reason w holds (taken: w is left empty);
 * tf_strerror(rc) when w has no words. */
void step_fail_why(struct step *s, int rc, struct why *w);
/*
 * A precondition: step `addr` of another stack placed files under prefix.
 * 0 when none did; TF_ECONFLICT with the step failed (naming the other
 * stack, a file of it, and fix), so plan and apply refuse before any change.
 */
int step_foreign_clash(struct ctx *c, struct step *s, const char *addr, const struct manifest *m,
                       const char *prefix, const char *fix);

/* Paths shared by modules (root-relative, caller frees). */
char *stack_cuda_prefix(const struct manifest *m);  /* <prefix>/cuda/<version> */
char *stack_cudnn_prefix(const struct manifest *m); /* merge: cuda prefix; separate: own */
char *stack_env_prefix(const struct manifest *m);   /* <prefix>/envs/<name> */
/* <prefix>/stacks/<stack>/<which>: the env step's activate.sh and deactivate.sh */
char *stack_script_path(const struct manifest *m, const char *which);

#endif
