/*
 * step_artifacts.h - a step's side of the artifact room (step_artifacts.c):
 * a manifest's artifacts into an artset, fetched or unpacked into one
 * staged tree with the step failed (step_fail) on error. An artset owns its
 * strings; a staged owns its entries (as place_entry, ready for
 * txn_put_tree / txn_share_tree).
 */
#ifndef TFPROV_STEP_ARTIFACTS_H
#define TFPROV_STEP_ARTIFACTS_H

#include "artifact.h"
#include "module.h"

struct staged {
	struct place_entry *v;
	size_t n, cap;
	size_t *ht; /* open-addressing index of v by path: slot = index + 1 */
	size_t htcap;
};

void artset_add_artifact(struct artset *s, const struct artifact *a, int default_strip);
/*
 * Fails a step whose redist JSON has no sha256 yet (lock input): names the
 * manifest position and `tfprov lock`. Returns TF_EMANIFEST.
 */
int step_fail_unpinned(struct step *s, const struct manifest *m, const char *what,
                       const struct redist_ref *r);
/* Fetches the pinned redistrib JSON, resolves its components into s. */
int artset_add_redist(struct ctx *c, struct artset *s, const struct redist_ref *r,
                      const char *platform, struct step *st);
/* artset_fetch_files, the first failure failing st. */
int artset_fetch(struct ctx *c, struct artset *s, struct step *st);

void staged_add(struct staged *t, const char *path, char type, const char *sha256, int64_t size,
                unsigned mode, const char *link);
/*
 * artset_unpack into one staged tree, sorted by path: every artifact into
 * stage/, their trees merged (top-level documents every archive carries,
 * LICENSE, README, kept from the first archive; any other path two archives
 * both provide must be identical, else TF_ECONFLICT). Failures fail st.
 */
int artset_fetch_unpack(struct ctx *c, struct artset *s, const char *stage, struct staged *out,
                        struct step *st);
void staged_release(struct staged *t);
/*
 * The one recorder of a tree something else wrote (a runfile, a venv, a
 * conda env): adds every directory, symlink and regular file below the host
 * directory `host` (sockets, fifos left out) to t, files with their sha256
 * (NULL when unreadable). 0 or the walk's -errno.
 */
int staged_record_tree(struct staged *t, const char *host);

#endif
