/*
 * cli.h - the subcommand table (git's builtin/ pattern): one file per
 * subcommand under cli/, registered in main.c's table, which also says
 * what each command needs (the state lock, a manifest) so the core takes the
 * lock for it.
 */
#ifndef TFPROV_CLI_H
#define TFPROV_CLI_H

#include "ctx.h"

#include "render.h"

struct opts {
	int detailed_exitcode;
	int deep;
	int history;
	int allow_no_gpu;
	long generation;
	const char *out;
	const char *key; /* --key: a minisign secret key (sign, keygen, mirror build) */
	const char *stack;
	struct strvec args; /* positional arguments after the subcommand */
};

enum cmd_flags {
	CMD_STATE = 1 << 0,    /* opens the state db (read) */
	CMD_LOCK = 1 << 1,     /* takes the writer lock */
	CMD_MANIFEST = 1 << 2, /* first positional argument is a manifest */
};

struct cmd {
	const char *name;
	int (*fn)(struct ctx *c, struct opts *o);
	unsigned flags;
	const char *usage;
};

int cmd_validate(struct ctx *c, struct opts *o);
int cmd_plan(struct ctx *c, struct opts *o);
int cmd_apply(struct ctx *c, struct opts *o);
int cmd_status(struct ctx *c, struct opts *o);
int cmd_verify(struct ctx *c, struct opts *o);
int cmd_destroy(struct ctx *c, struct opts *o);
int cmd_rollback(struct ctx *c, struct opts *o);
int cmd_show(struct ctx *c, struct opts *o);
int cmd_bench(struct ctx *c, struct opts *o);
int cmd_doctor(struct ctx *c, struct opts *o);
int cmd_lock(struct ctx *c, struct opts *o);
int cmd_mirror(struct ctx *c, struct opts *o);
int cmd_sign(struct ctx *c, struct opts *o);
int cmd_keygen(struct ctx *c, struct opts *o);

/* Loads and lints a manifest, printing diagnostics; 0 or TF_EMANIFEST. */
struct manifest;
int cli_load_manifest(struct ctx *c, const char *path, struct manifest **out, int print_warnings);

/*
 * The signature policy (trust.h) applied to a loaded manifest: its
 * MANIFEST.minisig and side files, and with check_mirrors the index.json of
 * each --mirror DIR. 0, TF_EINTEGRITY or TF_EFAIL (logged). signature.c.
 */
int cli_check_signature(struct ctx *c, const struct manifest *m, int check_mirrors);
/* "\tpython.lock_file=sha256:HEX...": the side-file fields of a trusted comment; caller frees. */
char *cli_side_fields(const struct manifest *m);

/* Loads a minisign secret key, asking for its password if it has one. sign.c. */
struct ms_seckey;
int cli_load_seckey(struct ctx *c, const char *path, struct ms_seckey *sk);
/* Writes text to a temporary file and renames it to path (no_replace: fail if it exists). */
int cli_write_file(struct ctx *c, const char *path, const char *text, unsigned mode,
                   int no_replace);
/* Signs DIR/index.json into DIR/index.json.minisig unless that is current. sign.c. */
int cli_sign_mirror_index(struct ctx *c, const char *dir, const struct ms_seckey *sk);

/* The single STACK argument of show/rollback: its id, or an error (logged). */
int cli_stack_arg(struct ctx *c, const struct opts *o, const char *usage, int64_t *sid);

#endif
