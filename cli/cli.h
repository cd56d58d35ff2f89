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
	int allow_no_gpu; /* verify after apply: no GPU is SKIPPED, not a failure */
	int check;        /* lock --check */
	int all;          /* destroy --all, sbom --all */
	long generation;
	const char *out;
	const char *key; /* --key: a minisign secret key (sign, keygen, mirror build) */
	const char *stack;
	/* init */
	const char *tensorflow, *python, *cuda_from, *gpu, *platform;
	int force;
	int make_default;   /* apply --default */
	int bench;          /* apply --bench: the proof even when nothing changed */
	int none;           /* default --none */
	int unset;          /* env --unset */
	const char *shell;  /* env --shell */
	const char *base;   /* image build --base */
	const char *tag;    /* image build --tag */
	int no_cache;       /* image build --no-cache */
	long days;          /* gc --image-days; -1: not given (30) */
	int files;          /* sbom --files */
	const char *format; /* sbom --format */
	int dashdash;       /* a `--` was given: what follows it is in cmdv */
	struct strvec args; /* positional arguments after the subcommand (before `--`) */
	struct strvec cmdv; /* run: the command after `--` */
};

enum cmd_flags {
	CMD_STATE = 1 << 0,      /* opens the state db (read) */
	CMD_LOCK = 1 << 1,       /* takes the writer lock */
	CMD_MANIFEST = 1 << 2,   /* first positional argument is a manifest */
	CMD_EMPTY_ROOT = 1 << 3, /* a --root that does not exist yet is an empty one (plan) */
};

struct cmd {
	const char *name;
	int (*fn)(struct ctx *c, struct opts *o);
	unsigned flags;
	const char *usage;
	const char *opts;               /* its own options' long names, space separated */
	signed char min_args, max_args; /* positional arguments; max -1: no bound */
};

/* `tfprov --version`; verbose: every library and its run-time version (version.c). */
int print_version(int verbose);
int cmd_validate(struct ctx *c, struct opts *o);
int cmd_plan(struct ctx *c, struct opts *o);
int cmd_apply(struct ctx *c, struct opts *o);
int cmd_status(struct ctx *c, struct opts *o);
int cmd_verify(struct ctx *c, struct opts *o);
/*
 * An applied stack's proof, as apply ends (apply.c): `verify` of the stack
 * (files, libraries, GPU compute), *skipped set when the GPU check was
 * skipped for want of a GPU, *has_cuda when the stack has libraries and a
 * GPU layer to check at all. 0, TF_EVERIFY, TF_EREBOOT or TF_ECHANGES.
 */
int cli_verify_stack(struct ctx *c, const char *name, int *skipped, int *has_cuda);
/*
 * The conv benchmark of an applied stack whose GPU checked out (bench.c):
 * the native probe and the TensorFlow benchmark per precision, recorded in
 * state; one line per result pushed to summary ("fp32 12.300 ms/step on GPU:
 * ..."). 0 or TF_EVERIFY (a benchmark failed), TF_EREBOOT; a result slower
 * than its reference is a warning here (`tfprov bench` fails on it).
 */
int cli_bench_stack(struct ctx *c, const char *name, struct strvec *summary);
int cmd_destroy(struct ctx *c, struct opts *o);
int cmd_rollback(struct ctx *c, struct opts *o);
int cmd_show(struct ctx *c, struct opts *o);
int cmd_bench(struct ctx *c, struct opts *o);
int cmd_doctor(struct ctx *c, struct opts *o);
int cmd_lock(struct ctx *c, struct opts *o);
int cmd_mirror(struct ctx *c, struct opts *o);
int cmd_diff(struct ctx *c, struct opts *o);
int cmd_gc(struct ctx *c, struct opts *o);
/* lock --check MANIFEST... (lockcheck.c) */
int lock_check(struct ctx *c, struct opts *o);
int cmd_sign(struct ctx *c, struct opts *o);
int cmd_keygen(struct ctx *c, struct opts *o);
int cmd_init(struct ctx *c, struct opts *o);
/* stackuse.c */
struct manifest;
int cmd_run(struct ctx *c, struct opts *o);
int cmd_env(struct ctx *c, struct opts *o);
int cmd_shell(struct ctx *c, struct opts *o);
int cmd_default(struct ctx *c, struct opts *o);
/* image.c: image build, image inspect */
int cmd_image(struct ctx *c, struct opts *o);
/* image_inspect.c: image inspect IMAGE [OTHER] */
int image_inspect(struct ctx *c, struct opts *o);
/* sbom.c: a stack's bill of materials */
int cmd_sbom(struct ctx *c, struct opts *o);
/* Writes the document `sbom STACK` writes, timestamped epoch, to host_path (image build).
 * 0 or an error (said). */
int cli_sbom_write(struct ctx *c, const char *stack, int64_t epoch, const char *host_path);

/*
 * A stack's in-use mark (stackuse.c): cli_stack_mark creates it (apply),
 * cli_stack_unmark removes it (destroy); cli_stack_claim takes it
 * exclusively for `doing` ("destroy", "apply"), waiting --lock-timeout for
 * the `tfprov run`s of the stack to end: 0, or TF_ELOCKED naming their pids.
 */
int cli_stack_mark(struct ctx *c, const char *name);
void cli_stack_unmark(struct ctx *c, const char *name);
int cli_stack_claim(struct ctx *c, const char *name, const char *doing);
/* The machine's default stack (caller frees), NULL when there is none. */
char *cli_default_stack(struct ctx *c);
/*
 * Makes name (NULL: none) the default and rewrites the login script. applied:
 * the manifest an apply just placed (its own stack's paths are taken from
 * it), or NULL. 0 or an error (said).
 */
int cli_set_default(struct ctx *c, const char *name, const struct manifest *applied);
/*
 * How to use stack name (m: its manifest): into o (JSON, may be NULL) "env",
 * "default", "run"; into line (may be NULL) "env PATH; use: tfprov run NAME
 * -- python".
 */
struct json_t;
void cli_stack_usage(struct ctx *c, const char *name, const struct manifest *m, struct json_t *o,
                     struct strbuf *line);
/* Rewrites (or removes) the login script to match the state's default. 0 or TF_EIO (said). */
int cli_login_sync(struct ctx *c, const struct manifest *applied);

/* A manifest diagnostic as a structured --json "diagnostic" event. */
struct diag;
void cli_diag_event(struct ctx *c, const struct diag *g);

/* Loads and lints a manifest, printing diagnostics; 0 or TF_EMANIFEST. */
struct manifest;
int cli_load_manifest(struct ctx *c, const char *path, struct manifest **out, int print_warnings);
/* Parses and lints into d without printing: *out is set unless the file does not
 * parse (TF_EMANIFEST) or the knowledge base cannot be read (TF_EFAIL, reported);
 * a manifest with lint errors is returned (rc 0) for callers that add their own. */
struct diags;
int cli_lint_manifest(struct ctx *c, const char *path, struct manifest **out, struct diags *d);
/* Sorts and prints d: to stderr, or as JSON events under --json. */
void cli_print_diags(struct ctx *c, struct diags *d);

/* A failure the engine handed back in words (a state it cannot open or lock,
 * downloads that failed before any step ran): its one error event. Nothing
 * when w has no words (a step's failure, said by its own event). Clears w;
 * returns rc. */
struct why;
int cli_say_why(struct ctx *c, int rc, struct why *w);

/*
 * Asks before a change, Terraform's way: on a terminal the question and
 * "Only 'yes' will be accepted"; -y approves; without a terminal on stdin
 * (or with --json) nobody can answer, so it refuses (logged, nothing
 * changed). 1 approved, 0 not.
 */
int cli_confirm(struct ctx *c, const char *action, const char *question);

/* A unix time as RFC 3339 UTC ("2026-12-01T02:50:00Z"), or "never" for 0. */
void cli_time(int64_t t, char out[32]);

/*
 * The signature policy (artifact.h) applied to a loaded manifest: its
 * MANIFEST.minisig and side files, and with check_mirrors the index.json of
 * each --mirror DIR. 0, TF_EINTEGRITY or TF_EFAIL (logged). signature.c.
 */
int cli_check_signature(struct ctx *c, const struct manifest *m, int check_mirrors);
/*
 * The same for apply, which keeps what it verified: *sigtext gets the text
 * of the signature that passed (NULL when none was checked; caller frees),
 * for cli_keep_signature once the apply succeeded.
 */
int cli_check_signature_keep(struct ctx *c, const struct manifest *m, char **sigtext);
/* Keeps sigtext as <state_dir>/signatures/<manifest sha256>.minisig (rollback's). */
int cli_keep_signature(struct ctx *c, const struct manifest *m, const char *sigtext);
/*
 * The policy for a generation's manifest m (rollback): its signature is the
 * one apply kept, else MANIFEST.minisig at the recorded path when it signs
 * exactly the recorded bytes. The same checks, exit code and messages as
 * apply's, naming the generation.
 */
int cli_check_signature_kept(struct ctx *c, const struct manifest *m, long long gen);
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
