/*
 * plan.h - desired (manifest) vs recorded (state) vs observed (disk) -> steps.
 *
 * A plan owns its steps; plan_release() frees them. The plan of a stack lists
 * the manifest's resources in dependency order, then deletions of recorded
 * resources the manifest no longer has.
 */
#ifndef TFPROV_PLAN_H
#define TFPROV_PLAN_H

#include "manifest.h"
#include "module.h"

struct plan {
	struct step *steps;
	size_t n;
	int64_t stack_id; /* 0 when the stack was never applied */
	int add, change, destroy, read;
};

/*
 * Builds the plan of manifest m. It may settle what the manifest leaves to
 * tfprov (plan_resolve_placement), so m is written.
 */
int plan_build(struct ctx *c, struct manifest *m, struct plan *p);
/*
 * A cuDNN to merge into a CUDA prefix that another stack shares and merged a
 * different cuDNN into goes beside it instead: m->cudnn.placement becomes
 * PLACEMENT_SEPARATE with placement_auto and placement_why set. Called by
 * plan_build; idempotent.
 */
void plan_resolve_placement(struct ctx *c, struct manifest *m);
/* A plan that removes every recorded resource of a stack (destroy). */
int plan_build_destroy(struct ctx *c, const char *stack, struct plan *p);
/*
 * What lies inside the recorded directories of a stack that tfprov did not
 * place (no record, no distribution its pip step installed): the paths
 * ("dir/" for a directory, listed once at its top) that a destroy keeps.
 * 0 or TF_ESTATE.
 */
struct strvec;
int plan_foreign(struct ctx *c, int64_t stack_id, struct strvec *out);
/* Runs the read-only preconditions (driver, conflicts) and notes in each
 * step's reason what would stop an apply. */
void plan_observe(struct ctx *c, const struct manifest *m, struct plan *p);
void plan_emit(struct ctx *c, const struct plan *p);
int plan_has_changes(const struct plan *p);
void plan_release(struct plan *p);

/* Stats every recorded file of a resource against size, mtime and mode;
 * returns how many files are recorded. */
int64_t drift_check(struct ctx *c, int64_t res_id, int *missing, int *changed);

/*
 * Applies the plan: preconditions first (nothing changed when they fail),
 * then one generation, one txn per step. Returns 0 or a TF_E* code. A step's
 * failure is said by its own event (EV_STEP_DONE, failed); one that belongs
 * to no step (the cache unusable, downloads failed, the state locked) leaves
 * its words in why for the front end to say.
 */
struct why;
int plan_apply(struct ctx *c, struct manifest *m, struct plan *p, struct why *why);
/*
 * The preconditions plan_apply runs first, alone: each step's precheck, the
 * first that fails reported as a failed step (its event) and returned. An
 * image build whose layers come from its cache (cli/image.c) runs them so
 * that it refuses what a build would. A step's precheck may note what it
 * found in the step (its detail): run it once per plan_build.
 */
int plan_precheck(struct ctx *c, const struct manifest *m, struct plan *p);
int plan_apply_destroy(struct ctx *c, const char *stack, struct plan *p);

#endif
