/*
 * python_int.h - what the Python room's files share.
 *
 * Private to engine/python/ (a PRIVATE include directory of its library; tests
 * see it as white-box tests): what the files of the folder share and no other
 * folder calls. What other folders use is python.h.
 */
#ifndef TFPROV_PYTHON_INT_H
#define TFPROV_PYTHON_INT_H

#include "error.h"
#include "python.h"

/*
 * Installs pkgs[i] (package file files[i]) into prefix, in the given
 * (topological) order. With `stage` (a host path that does not exist yet,
 * e.g. from txn_stage_dir) the env is built there, files carrying `prefix`,
 * and left for the caller to place (txn_replace_dir); without, it is built
 * in a sibling of prefix, synced and swapped in (a throwaway env: tfprov
 * lock). 0, or a TF_E* code with why.
 */
int conda_install(struct ctx *c, const char *prefix, const char *pkgs_dir,
                  const struct conda_pkg *pkgs, char *const *files, size_t n, struct art *ahead,
                  const char *stage, struct conda_result *res, struct why *why);

/*
 * Extracts one package file into <pkgs_dir>/<dist>/ unless a complete entry
 * for the same hash is there (*reused = 1). *dir gets the entry's path.
 */
int conda_extract(struct ctx *c, const char *pkgs_dir, const struct conda_pkg *p, const char *file,
                  struct art *ahead, char **dir, int *reused, struct why *why);

/* Whether some recorded file lies under directory `path`. */
int pkgfiles_has_under(const struct pkgfiles *x, const char *path);

/* Writes requirements text (one "spec --hash=sha256:..." line each); caller frees. */
char *pip_requirements_text(const struct pip_req *reqs, size_t n);

/* Runs argv (the env's interpreter first) with the hardened Python
 * environment, output captured in r; 0 when it ran (see spawn_run). */
int pyenv_run_python(struct ctx *c, char *const *argv, double timeout_s, struct spawn_result *r);

/* 1 when the file name is a valid wheel name (PEP 427 characters, 4 or 5 dashes, .whl). */
int wheel_name_ok(const char *filename);

/*
 * 1 when a wheel entry is a module the installer byte-compiles as soon as it
 * is unpacked (wheel.c) or ahead of it (pycahead.c): a .py file below a
 * directory of the lib dir's root, not from <dist>.data/ (whose place the
 * WHEEL file decides).
 */
int wheel_entry_compiles_early(const char *path);

/* A sha256 in hex as RECORD's "sha256=<urlsafe base64, no padding>". */
void record_hash_encode(const char *hex, char out[RECORD_HASH_MAX]);
/* RECORD's "sha256=..." column to hex; 0, or -EINVAL for another algorithm or a bad digest. */
int record_hash_decode(const char *field, char hex[65]);

/*
 * Splits one RECORD line (up to its line break) into at most three fields,
 * each allocated (the caller frees them); returns how many it found.
 */
size_t record_fields(const char *line, char *f[3]);
/* Appends one RECORD row "path,hash,size\r\n", the path quoted when it needs it. */
void record_put_row(struct strbuf *sb, const char *path, const char *hash, const char *size);

#endif
