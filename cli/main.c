/*
 * main.c - option parsing, the subcommand table, and the process-level
 * contract: exit codes (error.h), the writer lock taken for the commands
 * that need it, signal handling (SIGINT finishes the current atomic unit).
 */
#include "cli.h"
#include "artifact.h"
#include "kb.h"
#include "error.h"
#include "event.h"
#include "gpu.h"
#include "manifest.h"
#include "place.h"
#include "state.h"
#include "tfprov_commit.h" /* TFPROV_COMMIT, generated at build time */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * One line per command: name, function, what it needs, its usage, then the
 * command's own options (long names; any other option is global) and how
 * many positional arguments it takes (-1: no upper bound). An entry without
 * .opts is not checked for options or arguments.
 */
static const struct cmd commands[] = {
    {"validate", cmd_validate, CMD_MANIFEST, "validate MANIFEST...   check a manifest (no I/O)", "",
     1, -1},
    {"plan", cmd_plan, CMD_MANIFEST | CMD_STATE | CMD_EMPTY_ROOT,
     "plan MANIFEST          show what apply would do",
     "detailed-exitcode allow-incomplete-lock remove-unpinned", 1, 1},
    {"apply", cmd_apply, CMD_MANIFEST | CMD_STATE | CMD_LOCK,
     "apply MANIFEST         make the machine match the manifest",
     "yes allow-incomplete-lock remove-unpinned default bench", 1, 1},
    {"status", cmd_status, CMD_STATE, "status [STACK]         stacks, generations, drift", "", 0,
     1},
    {"verify", cmd_verify, CMD_STATE, "verify [STACK] [--deep]  check what was placed", "deep", 0,
     1},
    {"destroy", cmd_destroy, CMD_STATE | CMD_LOCK,
     "destroy STACK | destroy --all  remove a stack, or every stack", "yes all", 0, 1},
    {"gc", cmd_gc, CMD_STATE | CMD_LOCK,
     "gc                     prune the download cache to what recorded generations need "
     "and the image cache to what image builds used lately",
     "yes image-days", 0, 0},
    {"rollback", cmd_rollback, CMD_STATE | CMD_LOCK,
     "rollback STACK [--generation N]  re-apply an earlier generation", "yes generation", 1, 1},
    {"show", cmd_show, CMD_STATE, "show STACK             files and resources of a stack", "", 1,
     1},
    {"bench", cmd_bench, CMD_STATE, "bench [STACK] [--history]  GPU conv benchmark", "history", 0,
     1},
    {"doctor", cmd_doctor, CMD_STATE, "doctor [MANIFEST]      diagnose common problems", "", 0, 1},
    {"lock", cmd_lock, CMD_MANIFEST,
     "lock MANIFEST [-o OUT]  resolve pins into a full lockfile\n"
     "  lock --check MANIFEST...  exit 0 when each is completely locked and consistent",
     "output check", 1, -1},
    {"diff", cmd_diff, CMD_STATE,
     "diff OLD NEW | diff --generation N STACK MANIFEST  changes by step",
     "generation detailed-exitcode", 0, -1}, /* diff.c checks its arguments */
    {"mirror", cmd_mirror, CMD_STATE,
     "mirror build DIR MANIFEST... [--key K]  copy artifacts for offline use", "key", 3, -1},
    {"sign", cmd_sign, CMD_MANIFEST, "sign --key KEY MANIFEST...  write MANIFEST.minisig", "key", 1,
     -1},
    {"keygen", cmd_keygen, 0, "keygen --key KEY       write a minisign key pair KEY, KEY.pub",
     "key", 0, 0},
    {"run", cmd_run, CMD_STATE,
     "run [STACK] -- CMD [ARGS...]  run CMD in the stack's environment (exits with CMD's "
     "status)",
     "", 0, -1}, /* stackuse.c checks its arguments */
    {"env", cmd_env, CMD_STATE,
     "env [STACK] [--shell SH] | env --unset  print the stack's environment for eval",
     "shell unset", 0, 1},
    {"shell", cmd_shell, CMD_STATE, "shell [STACK]          start your shell in the stack", "", 0,
     1},
    {"default", cmd_default, CMD_STATE | CMD_LOCK,
     "default [STACK | --none]  the stack login shells enter (no argument: show it)", "none", 0, 1},
    {"init", cmd_init, 0,
     "init --tensorflow X.Y [-o FILE]  write a new manifest from the knowledge base and "
     "catalog",
     "tensorflow python cuda-from gpu platform output force", 0, 0},
    {"sbom", cmd_sbom, CMD_STATE,
     "sbom STACK | sbom --all [--files]  the stack's bill of materials (CycloneDX 1.6 JSON)",
     "all files format output", 0, 1}, /* sbom.c checks STACK against --all */
    {"image", cmd_image, 0,
     "image build MANIFEST --base BASE -o OUT [--tag NAME:TAG] [--no-cache]  write the stack "
     "as a reproducible OCI image\n"
     "  image inspect IMAGE [OTHER]  its layers, the step each holds, and those shared with "
     "OTHER",
     "base output tag force no-cache", 2, 3}, /* image.c checks its arguments */
};

enum {
	OPT_ROOT = 256,
	OPT_STATE_DIR,
	OPT_CACHE_DIR,
	OPT_JSON,
	OPT_NO_COLOR,
	OPT_OFFLINE,
	OPT_MIRROR,
	OPT_JOBS,
	OPT_CA,
	OPT_LOCK_TIMEOUT,
	OPT_DETAILED,
	OPT_DEEP,
	OPT_HISTORY,
	OPT_NO_GPU,
	OPT_GENERATION,
	OPT_VERSION,
	OPT_ALLOW_INCOMPLETE,
	OPT_REMOVE_UNPINNED,
	OPT_CHECK,
	OPT_KEY,
	OPT_TRUSTED_KEY,
	OPT_REQUIRE_SIG,
	OPT_ALLOW_LOCAL,
	OPT_TENSORFLOW,
	OPT_PYTHON,
	OPT_CUDA_FROM,
	OPT_GPU,
	OPT_PLATFORM,
	OPT_FORCE,
	OPT_ALL,
	OPT_DEFAULT,
	OPT_BENCH,
	OPT_NONE,
	OPT_BASE,
	OPT_TAG,
	OPT_UNSET,
	OPT_SHELL,
	OPT_FILES,
	OPT_FORMAT,
	OPT_NO_CACHE,
	OPT_IMAGE_DAYS,
};

/* Where a command option's value lands (struct cmd_opt). */
enum optset {
	SET_FLAG,       /* int field of struct opts = 1 */
	SET_STRING,     /* const char * field = the argument */
	SET_GENERATION, /* long field = a generation number, 1 or more */
	SET_DAYS,       /* long field = a number of days, 0 or more */
	SET_CTX_FLAG,   /* a ctx flag bit */
};

#define FIELD(f) offsetof(struct opts, f)

/*
 * The commands' own options (a command names the ones it takes in .opts):
 * their help lines, in the order help prints them, and where each lands;
 * parsing them is this table's job. Every other option is global
 * (global_opts, global_option).
 */
static const struct cmd_opt {
	const char *name;
	int has_arg;
	int val; /* getopt_long's value: a short option letter or OPT_* */
	const char *help;
	enum optset set;
	size_t field; /* FIELD(...), or for SET_CTX_FLAG the flag */
} cmd_opts[] = {
    {"yes", no_argument, 'y', "-y, --yes, --auto-approve  do not ask before changing anything",
     SET_CTX_FLAG, CTX_YES},
    {"detailed-exitcode", no_argument, OPT_DETAILED,
     "--detailed-exitcode  exit 2 when there are changes, 0 when none", SET_FLAG,
     FIELD(detailed_exitcode)},
    {"deep", no_argument, OPT_DEEP,
     "--deep               rehash every file; audit pip/conda packages by their records", SET_FLAG,
     FIELD(deep)},
    {"history", no_argument, OPT_HISTORY,
     "--history            show recorded results instead of running", SET_FLAG, FIELD(history)},
    {"generation", required_argument, OPT_GENERATION,
     "--generation N       the generation to go back to (default: the previous)", SET_GENERATION,
     FIELD(generation)},
    {"output", required_argument, 'o', "-o, --output FILE    write the result to FILE", SET_STRING,
     FIELD(out)},
    {"key", required_argument, OPT_KEY,
     "--key FILE           the minisign secret key (keygen: the key pair to write)", SET_STRING,
     FIELD(key)},
    {"check", no_argument, OPT_CHECK,
     "--check              only check that each manifest is completely locked", SET_FLAG,
     FIELD(check)},
    {"tensorflow", required_argument, OPT_TENSORFLOW,
     "--tensorflow X.Y[.Z]  the TensorFlow release (X.Y: the newest known)", SET_STRING,
     FIELD(tensorflow)},
    {"python", required_argument, OPT_PYTHON,
     "--python 3.N         the Python series (default: the newest in TF's range\n"
     "                       the catalog has pins for)",
     SET_STRING, FIELD(python)},
    {"cuda-from", required_argument, OPT_CUDA_FROM,
     "--cuda-from redist|pip  CUDA and cuDNN from NVIDIA's redist archives\n"
     "                       (default) or from tensorflow[and-cuda]'s wheels",
     SET_STRING, FIELD(cuda_from)},
    {"gpu", required_argument, OPT_GPU,
     "--gpu auto|CC|NAME   the GPUs the stack is for: auto asks this machine's\n"
     "                       driver (NVML); or a compute capability (8.9) or a name",
     SET_STRING, FIELD(gpu)},
    {"platform", required_argument, OPT_PLATFORM,
     "--platform P         linux-x86_64 (default), wsl2 or windows-x86_64", SET_STRING,
     FIELD(platform)},
    {"force", no_argument, OPT_FORCE, "--force              replace an existing -o FILE", SET_FLAG,
     FIELD(force)},
    {"all", no_argument, OPT_ALL, "--all                every stack under the root", SET_FLAG,
     FIELD(all)},
    {"default", no_argument, OPT_DEFAULT,
     "--default            make this stack the one login shells enter", SET_FLAG,
     FIELD(make_default)},
    {"bench", no_argument, OPT_BENCH,
     "--bench              verify and benchmark the stack even when nothing changed", SET_FLAG,
     FIELD(bench)},
    {"none", no_argument, OPT_NONE, "--none               no stack for login shells", SET_FLAG,
     FIELD(none)},
    {"unset", no_argument, OPT_UNSET,
     "--unset              undo what the last `tfprov env` set, restoring earlier values", SET_FLAG,
     FIELD(unset)},
    {"shell", required_argument, OPT_SHELL,
     "--shell SH           sh, bash, zsh, dash, ksh, fish or pwsh (default: $SHELL's)", SET_STRING,
     FIELD(shell)},
    {"allow-incomplete-lock", no_argument, OPT_ALLOW_INCOMPLETE,
     "--allow-incomplete-lock  let pip resolve what a `complete: false` lock leaves\n"
     "                       unpinned (named and recorded as unhashed)",
     SET_CTX_FLAG, CTX_ALLOW_INCOMPLETE},
    {"files", no_argument, OPT_FILES,
     "--files              list the files each step placed, with their sha256", SET_FLAG,
     FIELD(files)},
    {"format", required_argument, OPT_FORMAT,
     "--format F           the document's format: cyclonedx-json (the only one)", SET_STRING,
     FIELD(format)},
    {"base", required_argument, OPT_BASE,
     "--base BASE          the image to build on: oci:DIR[:TAG], docker-archive:FILE,\n"
     "                       or a path (a directory: OCI layout; a file: docker archive)",
     SET_STRING, FIELD(base)},
    {"tag", required_argument, OPT_TAG,
     "--tag NAME:TAG       the image's name (index ref name, docker RepoTags)", SET_STRING,
     FIELD(tag)},
    {"no-cache", no_argument, OPT_NO_CACHE,
     "--no-cache           build the stack's layers even when the image cache holds\n"
     "                       them, and leave the cache as it is",
     SET_FLAG, FIELD(no_cache)},
    {"image-days", required_argument, OPT_IMAGE_DAYS,
     "--image-days DAYS    remove the image cache's entries no image build used in\n"
     "                       DAYS days (default 30; 0: every entry)",
     SET_DAYS, FIELD(days)},
    {"remove-unpinned", no_argument, OPT_REMOVE_UNPINNED,
     "--remove-unpinned    uninstall the env's distributions that the pip lock does not\n"
     "                       pin (kept and named otherwise)",
     SET_CTX_FLAG, CTX_REMOVE_UNPINNED},
};

/* The global options for getopt_long; parse_options adds cmd_opts to them. */
static const struct option global_opts[] = {
    {"root", required_argument, NULL, OPT_ROOT},
    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"json", no_argument, NULL, OPT_JSON},
    {"no-color", no_argument, NULL, OPT_NO_COLOR},
    {"quiet", no_argument, NULL, 'q'},
    {"verbose", no_argument, NULL, 'v'},
    {"auto-approve", no_argument, NULL, 'y'}, /* --yes (cmd_opts) by another name */
    {"offline", no_argument, NULL, OPT_OFFLINE},
    {"mirror", required_argument, NULL, OPT_MIRROR},
    {"jobs", required_argument, NULL, OPT_JOBS},
    {"ca-bundle", required_argument, NULL, OPT_CA},
    {"lock-timeout", required_argument, NULL, OPT_LOCK_TIMEOUT},
    {"no-gpu", no_argument, NULL, OPT_NO_GPU},
    {"allow-local-urls", no_argument, NULL, OPT_ALLOW_LOCAL},
    {"trusted-key", required_argument, NULL, OPT_TRUSTED_KEY},
    {"require-signature", no_argument, NULL, OPT_REQUIRE_SIG},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
};

static const char global_help[] =
    "  --root DIR           put every path and the state under DIR\n"
    "  --state-dir DIR      state database directory (default ROOT/var/lib/tfprov)\n"
    "  --cache-dir DIR      download cache (default ROOT/var/cache/tfprov)\n"
    "  --json               one JSON event per line on stdout (docs/json-events.md)\n"
    "  --no-color, -q, -v   output control\n"
    "  --offline            never touch the network\n"
    "  --mirror URL|DIR     try this source before the origin (repeatable)\n"
    "  --jobs N             parallel downloads, archive decoders and wheel installers\n"
    "                       (default: 4 downloads; 4 to 8 archives open, decoding\n"
    "                       on as many cores as the machine has)\n"
    "  --ca-bundle FILE     CA certificates for HTTPS\n"
    "  --lock-timeout SEC   wait this long for another run (default 0)\n"
    "  --no-gpu             allow provisioning without a GPU (checks reported as skipped)\n"
    "  --allow-local-urls   fetch file:// and plain-path artifact URLs (--mirror DIR needs "
    "no flag)\n"
    "  --trusted-key FILE   trust this minisign public key (repeatable)\n"
    "  --require-signature  refuse a manifest without a trusted signature\n"
    "  -h, --help           this help; with a command, that command's\n"
    "  --version            print the version and exit; with -v, every library linked\n"
    "                       in or dlopen()ed and its version at run time\n";

static void usage(FILE *f)
{
	fprintf(f, "usage: tfprov [options] COMMAND [args]\n\ncommands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		fprintf(f, "  %s\n", commands[i].usage);
	fprintf(f,
	        "\noptions:\n%s"
	        "\n'tfprov help COMMAND' (or 'tfprov COMMAND --help') shows a command's own "
	        "options.\n"
	        "exit codes: 0 ok, 1 error, 2 changes pending or drift, 3 manifest invalid,\n"
	        "  4 locked, 5 integrity failure, 6 precondition failed, 7 reboot required,\n"
	        "  8 verify/benchmark failed, 64 usage, 130 interrupted;\n"
	        "  run and shell: the command's own status, or 125 tfprov failed,\n"
	        "  126 command not executable, 127 command not found\n",
	        global_help);
}

/* "apply MANIFEST   description" -> "apply MANIFEST". */
static int usage_len(const struct cmd *cmd)
{
	const char *u = cmd->usage, *gap = strstr(u, "  ");
	return gap ? (int)(gap - u) : (int)strlen(u);
}

static int takes(const struct cmd *cmd, const char *opt)
{
	size_t n = strlen(opt);
	for (const char *p = cmd->opts ? strstr(cmd->opts, opt) : NULL; p; p = strstr(p + 1, opt))
		if ((p == cmd->opts || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return 1;
	return 0;
}

static void cmd_help(const struct cmd *cmd)
{
	const char *desc = cmd->usage + usage_len(cmd);
	desc += strspn(desc, " ");
	printf("usage: tfprov [options] %.*s\n\n%s\n", usage_len(cmd), cmd->usage, desc);
	int any = 0;
	for (size_t i = 0; i < ARRAY_SIZE(cmd_opts); i++)
		if (takes(cmd, cmd_opts[i].name))
			printf("%s  %s\n", any++ ? "" : "\noptions:\n", cmd_opts[i].help);
	printf("\nglobal options:\n%s", global_help);
}

/* A usage error: one line saying what is wrong, one with the short usage. */
static int usage_error(const struct cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const struct cmd *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "tfprov%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "\nusage: tfprov [options] %.*s   ('tfprov help %s' for more)\n",
		        usage_len(cmd), cmd->usage, cmd->name);
	else
		fprintf(stderr,
		        "\nusage: tfprov [options] COMMAND [args]   ('tfprov help' for more)\n");
	return TF_EUSAGE;
}

/* run and shell replace tfprov with a command: their own failures exit 125 (stackuse.c). */
static int execs_command(const struct cmd *cmd)
{
	return cmd && (cmd->fn == cmd_run || cmd->fn == cmd_shell);
}

static const struct cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(name, commands[i].name) == 0)
			return &commands[i];
	return NULL;
}

/* " (did you mean 'apply'?)" for a mistyped command, as a mistyped manifest key gets; "" else. */
static const char *command_hint(const char *name, char buf[64])
{
	const char *best = NULL;
	size_t bestd = (size_t)-1;
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		size_t d = edit_distance(name, commands[i].name);
		if (d < bestd) {
			bestd = d;
			best = commands[i].name;
		}
	}
	buf[0] = '\0';
	if (best && bestd <= 2 && bestd < strlen(name))
		snprintf(buf, 64, " (did you mean '%s'?)", best);
	return buf;
}

static void on_signal(int sig)
{
	(void)sig;
	tf_interrupted = 1;
}

static char *absolute(const char *p)
{
	if (p[0] == '/')
		return xstrdup(p);
	char cwd[4096];
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		return xstrdup(p);
	return path_join(cwd, p);
}

/*
 * The cache of a command that has no state of its own (lock): the user's
 * ($XDG_CACHE_HOME or ~/.cache, then tfprov), so that resolving a manifest
 * needs neither root nor a /var/cache/tfprov it would create on the host.
 */
static char *user_cache_dir(void)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	if (xdg && xdg[0] == '/')
		return path_join(xdg, "tfprov");
	if (home && home[0] == '/')
		return xasprintf("%s/.cache/tfprov", home);
	return xasprintf("/tmp/tfprov-cache-%ld", (long)getuid());
}

/*
 * The writer lock of a command marked CMD_LOCK: <state_dir>/lock, the same
 * file and holder line as state_lock. 0, TF_ELOCKED (said, naming the
 * holder), TF_EINTR or TF_ESTATE.
 */
static int take_writer_lock(struct ctx *c)
{
	char *holder = NULL;
	int rc = state_writer_lock(c->state_dir, c->lock_timeout, &c->wlock, &holder);
	if (rc != 0 && tf_interrupted) {
		/* SIGINT/SIGTERM during the wait: nothing was changed; 130, not 4. */
		ev_log(c, EV_ERROR, "interrupted while waiting for the state lock (%s)",
		       holder ? holder : "unknown");
		rc = TF_EINTR;
	} else if (rc == TF_ELOCKED) {
		ev_log(c, EV_ERROR,
		       "the state in %s is locked by another tfprov run (%s); waited %.0f s "
		       "(--lock-timeout)",
		       c->state_dir, holder ? holder : "unknown", c->lock_timeout);
	} else if (rc != 0) {
		ev_log(c, EV_ERROR, "cannot take the state lock %s/lock: %s", c->state_dir,
		       strerror(errno));
	}
	free(holder);
	return rc;
}

/*
 * Releases the writer lock. A run that created no state (a fresh root and a
 * precondition, a download or a lock that stopped it) removes the lock file
 * and the directories it created for it, so the root is as it was.
 */
static void release_writer_lock(struct ctx *c)
{
	if (c->wlock == NULL)
		return;
	char *db = path_join(c->state_dir, "state.db");
	int forget = access(db, F_OK) != 0 && errno == ENOENT;
	free(db);
	state_writer_unlock(c->wlock, forget);
	c->wlock = NULL;
}

/* What the command line says besides the command's own options (struct opts). */
struct cmdline {
	const char *root, *state_dir, *cache_dir;
	int help, version, bad_option;
	const char *seen[ARRAY_SIZE(cmd_opts)]; /* command options given, by name */
	size_t nseen;
	const struct cmd *cmd;
	char **tail; /* what follows the first `--`, ntail words; dashdash: there was one */
	int ntail, dashdash;
};

/* A command option given: stored where cmd_opts says. 0 or TF_EUSAGE (said). */
static int command_option(const struct cmd_opt *d, const char *arg, struct ctx *c, struct opts *o)
{
	char *field = (char *)o + d->field, *end;
	switch (d->set) {
	case SET_FLAG:
		*(int *)field = 1;
		break;
	case SET_STRING:
		*(const char **)field = arg;
		break;
	case SET_GENERATION:
		*(long *)field = strtol(arg, &end, 10);
		if (*end || *(long *)field < 1) {
			fprintf(stderr, "tfprov: --generation wants a generation number\n");
			return TF_EUSAGE;
		}
		break;
	case SET_DAYS:
		errno = 0;
		*(long *)field = strtol(arg, &end, 10);
		if (end == arg || *end || errno || *(long *)field < 0 || *(long *)field > 1000000) {
			fprintf(stderr, "tfprov: --%s wants a number of days, 0 or more: %s\n",
			        d->name, arg);
			return TF_EUSAGE;
		}
		break;
	case SET_CTX_FLAG:
		c->flags |= (unsigned)d->field;
		break;
	}
	return 0;
}

/* The global options that set a ctx flag and nothing else. */
static const struct {
	int val;
	unsigned flag;
} global_flags[] = {
    {'q', CTX_QUIET},
    {'v', CTX_VERBOSE},
    {OPT_OFFLINE, CTX_OFFLINE},
    {OPT_NO_GPU, CTX_NO_GPU},
    {OPT_ALLOW_LOCAL, CTX_ALLOW_LOCAL},
    {OPT_REQUIRE_SIG, CTX_REQUIRE_SIG},
};

/* A global option (or an unknown one, ch '?'). 0 or TF_EUSAGE (said). */
static int global_option(int ch, const char *arg, struct ctx *c, struct cmdline *l)
{
	char *end;
	for (size_t i = 0; i < ARRAY_SIZE(global_flags); i++)
		if (global_flags[i].val == ch) {
			c->flags |= global_flags[i].flag;
			return 0;
		}
	switch (ch) {
	case OPT_ROOT:
		l->root = arg;
		break;
	case OPT_STATE_DIR:
		l->state_dir = arg;
		break;
	case OPT_CACHE_DIR:
		l->cache_dir = arg;
		break;
	case OPT_JSON:
		c->flags |= CTX_JSON;
		c->flags &= ~CTX_COLOR;
		break;
	case OPT_NO_COLOR:
		c->flags &= ~CTX_COLOR;
		break;
	case OPT_MIRROR:
		strvec_push(&c->mirrors, arg);
		break;
	case OPT_JOBS:
		c->jobs = (int)strtol(arg, &end, 10);
		if (*end || c->jobs < 1 || c->jobs > 64) {
			fprintf(stderr, "tfprov: --jobs wants a number from 1 to 64\n");
			return TF_EUSAGE;
		}
		break;
	case OPT_CA:
		c->ca_bundle = xstrdup(arg);
		break;
	case OPT_LOCK_TIMEOUT:
		c->lock_timeout = strtod(arg, &end);
		if (*end || c->lock_timeout < 0) {
			fprintf(stderr, "tfprov: --lock-timeout wants seconds\n");
			return TF_EUSAGE;
		}
		break;
	case OPT_TRUSTED_KEY:
		strvec_push(&c->trusted_keys, arg);
		break;
	case 'h':
		l->help = 1;
		break;
	case OPT_VERSION:
		l->version = 1;
		break;
	default:
		l->bad_option = 1; /* getopt said which */
		break;
	}
	return 0;
}

/*
 * Phase 1: the options, global and the command's own, in any order before
 * and after the command (getopt_long permutes). Stops at --version. 0 or
 * TF_EUSAGE (said).
 */
static int parse_options(int argc, char **argv, struct ctx *c, struct opts *o, struct cmdline *l)
{
	struct option longopts[ARRAY_SIZE(global_opts) + ARRAY_SIZE(cmd_opts) + 1];
	size_t n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(global_opts); i++)
		longopts[n++] = global_opts[i];
	for (size_t i = 0; i < ARRAY_SIZE(cmd_opts); i++)
		longopts[n++] =
		    (struct option){cmd_opts[i].name, cmd_opts[i].has_arg, NULL, cmd_opts[i].val};
	longopts[n] = (struct option){NULL, 0, NULL, 0};

	int ch, rc = 0;
	while (rc == 0 && !l->version &&
	       (ch = getopt_long(argc, argv, "qvyho:", longopts, NULL)) != -1) {
		const struct cmd_opt *d = NULL;
		for (size_t i = 0; i < ARRAY_SIZE(cmd_opts) && d == NULL; i++)
			if (cmd_opts[i].val == ch)
				d = &cmd_opts[i];
		if (d == NULL) {
			rc = global_option(ch, optarg, c, l);
			continue;
		}
		if (l->nseen < ARRAY_SIZE(l->seen))
			l->seen[l->nseen++] = d->name;
		rc = command_option(d, optarg, c, o);
	}
	return rc;
}

/*
 * Phase 2: the command, and whether the command line suits it: help is
 * printed here (l->cmd stays NULL: nothing to run), a usage error is said.
 * 0 or TF_EUSAGE.
 */
static int lookup_command(int argc, char **argv, struct opts *o, struct cmdline *l)
{
	const struct cmd *cmd = optind < argc ? find_cmd(argv[optind]) : NULL;
	if (optind < argc && strcmp(argv[optind], "help") == 0 && !l->bad_option) {
		/* tfprov help [COMMAND] */
		const struct cmd *about = optind + 1 < argc ? find_cmd(argv[optind + 1]) : NULL;
		char hint[64];
		if (optind + 1 < argc && about == NULL)
			return usage_error(NULL, "unknown command '%s'%s", argv[optind + 1],
			                   command_hint(argv[optind + 1], hint));
		if (about)
			cmd_help(about);
		else
			usage(stdout);
		return 0;
	}
	if (l->help) {
		if (cmd)
			cmd_help(cmd);
		else
			usage(stdout);
		return 0;
	}
	if (optind >= argc)
		return usage_error(NULL, "%s",
		                   l->bad_option ? "unknown option" : "no command given");
	if (cmd == NULL) {
		char hint[64];
		return usage_error(NULL, "unknown command '%s'%s", argv[optind],
		                   command_hint(argv[optind], hint));
	}
	if (l->bad_option)
		return usage_error(cmd, "%s", "unknown option (see above)");
	for (size_t i = 0; cmd->opts && i < l->nseen; i++)
		if (!takes(cmd, l->seen[i]))
			return usage_error(cmd, "--%s is not an option of this command",
			                   l->seen[i]);
	for (int i = optind + 1; i < argc; i++)
		strvec_push(&o->args, argv[i]);
	/* After `--`: run's command; for every other command more arguments, as before. */
	o->dashdash = l->dashdash;
	for (int i = 0; i < l->ntail; i++)
		strvec_push(execs_command(cmd) ? &o->cmdv : &o->args, l->tail[i]);
	if (cmd->opts && (o->args.n < (size_t)cmd->min_args ||
	                  (cmd->max_args >= 0 && o->args.n > (size_t)cmd->max_args)))
		return usage_error(cmd, "%s",
		                   o->args.n < (size_t)cmd->min_args ? "missing argument"
		                                                     : "too many arguments");
	if ((cmd->flags & CMD_MANIFEST) && o->args.n == 0)
		return usage_error(cmd, "%s", "a manifest is required");
	l->cmd = cmd;
	return 0;
}

/*
 * Phase 3: the root, the state and the cache directories. The root is an
 * existing directory, used through one descriptor. Only a command that
 * writes creates it; a mistyped --root given to a read-only command is an
 * error, not an empty root. *empty_root: plan into a root that apply would
 * create. 0, TF_EPRECOND or TF_EFAIL (said).
 */
static int open_root(const struct cmd *cmd, const struct cmdline *l, struct ctx *c, int *empty_root)
{
	c->root = absolute(l->root);
	if (strlen(c->root) > 1 && c->root[strlen(c->root) - 1] == '/')
		c->root[strlen(c->root) - 1] = '\0';
	/*
	 * Writing into the machine's own root needs root: say so before planning,
	 * not after the plan with "Permission denied" on the cache.
	 */
	if ((cmd->flags & CMD_LOCK) && strcmp(c->root, "/") == 0 && geteuid() != 0) {
		fprintf(stderr,
		        "tfprov %s: changing this machine (--root /) needs root: run as root, or "
		        "use --root DIR\n",
		        cmd->name);
		return TF_EPRECOND;
	}
	struct stat st;
	*empty_root = 0;
	if (stat(c->root, &st) != 0 || !S_ISDIR(st.st_mode)) {
		if (cmd->flags & CMD_EMPTY_ROOT && errno == ENOENT) {
			*empty_root = 1;
		} else if (!(cmd->flags & CMD_LOCK)) {
			fprintf(stderr, "tfprov %s: --root %s is not a directory\n", cmd->name,
			        c->root);
			return TF_EFAIL;
		} else if (mkdirs_at(AT_FDCWD, c->root, 0755) != 0) {
			fprintf(stderr,
			        "tfprov %s: --root %s is not a directory and cannot be created\n",
			        cmd->name, c->root);
			return TF_EFAIL;
		}
	}
	if (*empty_root) {
		/*
		 * An empty directory of our own stands in for the root's descriptor;
		 * removed at once, so lookups through it find nothing and nothing is
		 * left behind. Host paths keep the requested name (nothing exists there).
		 */
		char tmpl[] = "/tmp/tfprov-empty-root-XXXXXX";
		if (mkdtemp(tmpl) != NULL) {
			c->rootfd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			rmdir(tmpl);
		}
		if (c->rootfd < 0) {
			fprintf(stderr, "tfprov %s: cannot plan for the empty root %s\n", cmd->name,
			        c->root);
			return TF_EFAIL;
		}
	} else {
		/* The real path: host paths under the root are built on it (inroot.c). */
		char *real = realpath(c->root, NULL);
		if (real) {
			free(c->root);
			c->root = real;
		}
		c->rootfd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	c->state_dir = l->state_dir ? absolute(l->state_dir) : ctx_host_dir(c, "/var/lib/tfprov");
	if (l->cache_dir)
		c->cache_dir = absolute(l->cache_dir);
	else if (!(cmd->flags & CMD_STATE) && strcmp(c->root, "/") == 0)
		c->cache_dir = user_cache_dir(); /* lock, validate: never the system's cache */
	else
		c->cache_dir = ctx_host_dir(c, "/var/cache/tfprov");
	return 0;
}

/*
 * Phase 4: what the table says the command needs (signals, the writer
 * lock, the state), then the command. Its result: 0, a negative TF_E*, or
 * the exit code a command returns (TF_EXIT_CHANGES).
 */
static int run_command(const struct cmd *cmd, struct ctx *c, struct opts *o)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	/*
	 * Commands that write finish their current atomic unit on SIGINT/SIGTERM;
	 * read-only ones keep the default action so they can always be stopped.
	 */
	if (cmd->flags & CMD_LOCK) {
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	int rc = 0;
	if (cmd->flags & CMD_LOCK) {
		/*
		 * Every writer holds the lock from its start, before its first
		 * fetch, on a root with no state yet too: a second writer gets exit
		 * 4 at once (or waits --lock-timeout) instead of fetching into the
		 * same cache and racing for the state.
		 */
		rc = take_writer_lock(c);
		if (rc != 0)
			return rc;
	}
	if (cmd->flags & CMD_STATE) {
		/*
		 * A writer on a root with no state yet defers creating it until its
		 * preconditions pass (place_open_state from plan_apply), so a run
		 * that stops with exit 6 leaves a fresh root exactly as it was: the
		 * lock file it took is removed on the way out (release_writer_lock).
		 */
		struct why w = {0};
		rc = state_open(c->state_dir, 0, &c->st, &w);
		if (rc < 0 && rc != -ENOENT) {
			ev_log(c, EV_ERROR, "%s (%s)", why_text(&w), c->state_dir);
			why_clear(&w);
			return rc;
		}
		rc = 0; /* -ENOENT: no state yet, which readers treat as empty */
		if ((cmd->flags & CMD_LOCK) && c->st) {
			state_close(c->st);
			c->st = NULL;
			rc = cli_say_why(c, place_open_state(c, &w), &w);
			if (rc != 0)
				return rc;
			/* A killed run's half-written cache names (not journaled: hints). */
			cache_sweep_temps(c->cache_dir);
		}
	}
	rc = cmd->fn(c, o);
	if (state_failure()) {
		/* A query failed: say which; an answer built on it is not to be trusted. */
		ev_log(c, EV_ERROR, "the state database in %s could not be read: %s", c->state_dir,
		       state_failure());
		if (rc == 0 || rc == TF_ECHANGES)
			rc = TF_ESTATE;
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct ctx c;
	struct opts o;
	struct cmdline l;
	int ex = 0, empty_root = 0;
	gpu_isolated_main(argc, argv); /* verify's checking child does not return */
	memset(&c, 0, sizeof(c));
	memset(&o, 0, sizeof(o));
	o.days = -1;
	memset(&l, 0, sizeof(l));
	l.root = "/";
	ev_set_handler(render_event, NULL);
	c.rootfd = -1;
	c.jobs = 0; /* 0: downloads 4, decoders and wheel installers one per core */
	if (isatty(STDOUT_FILENO))
		c.flags |= CTX_TTY | CTX_COLOR;
	if (getenv("NO_COLOR") && getenv("NO_COLOR")[0])
		c.flags &= ~CTX_COLOR;

	/*
	 * The first `--` ends tfprov's own command line: `tfprov run STACK --
	 * python -c ...` must not have getopt take the command's options.
	 */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			l.tail = argv + i + 1;
			l.ntail = argc - i - 1;
			l.dashdash = 1;
			argc = i;
			break;
		}
	int rc = parse_options(argc, argv, &c, &o, &l);
	if (rc == 0 && l.version) {
		/* Parsing stops at --version: a -v after it still asks for the libraries. */
		int verbose = (c.flags & CTX_VERBOSE) != 0;
		for (int i = optind; i < argc; i++)
			verbose |= strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0;
		print_version(verbose);
	} else if (rc == 0)
		rc = lookup_command(argc, argv, &o, &l);
	if (rc == 0 && l.cmd)
		rc = open_root(l.cmd, &l, &c, &empty_root);
	if (rc != 0 || l.cmd == NULL) {
		/* Nothing ran: no result event. */
		ex = tf_exit_code(rc);
		if (rc != 0 && execs_command(optind < argc ? find_cmd(argv[optind]) : NULL))
			ex = 125;
		goto out;
	}

	ev_version(&c, TFPROV_VERSION);
	if (empty_root)
		ev_log(
		    &c, EV_INFO,
		    "--root %s does not exist yet: planning for an empty root (apply creates it)",
		    c.root);
	rc = run_command(l.cmd, &c, &o);
	if (tf_interrupted && rc == 0)
		rc = TF_EINTR;
	ex = tf_exit_code(rc);
	if (execs_command(l.cmd))
		ex = rc > 0 ? rc : 125; /* 125, 126, 127 as env(1); 0 never: it did not exec */
	/* The last event: the result with --json; on a terminal it erases the progress board. */
	struct event e = {.kind = EV_RESULT,
	                  .level = ex ? EV_ERROR : EV_INFO,
	                  .exit_code = ex,
	                  .changed = c.changed,
	                  .failed = ex != 0 && ex != 2};
	ev_emit(&c, &e);
out:
	state_close(c.st);
	release_writer_lock(&c);
	if (c.rootfd >= 0)
		close(c.rootfd);
	free(c.root);
	free(c.state_dir);
	free(c.cache_dir);
	free(c.ca_bundle);
	strvec_release(&c.mirrors);
	strvec_release(&c.trusted_keys);
	strvec_release(&o.args);
	strvec_release(&o.cmdv);
	return ex;
}
